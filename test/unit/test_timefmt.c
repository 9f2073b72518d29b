/* Tests for pkg/util/timefmt.c: RFC 3339 time stamps to and from Unix time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/timefmt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void parses_what_the_api_server_writes(void **state)
{
    (void)state;
    assert_true(timefmt_parse("1970-01-01T00:00:00Z") == 0);
    assert_true(timefmt_parse("2026-03-01T10:00:00Z") == 1772359200.0);
    assert_true(timefmt_parse("2024-02-29T23:59:59Z") == 1709251199.0);
    /* metav1.MicroTime and fractions. */
    assert_true(fabs(timefmt_parse("2026-03-01T10:00:00.250000Z") - 1772359200.25) < 1e-6);
    /* Offsets. */
    assert_true(timefmt_parse("2026-03-01T11:30:00+01:30") == 1772359200.0);
    assert_true(timefmt_parse("2026-03-01T05:00:00-05:00") == 1772359200.0);
    assert_true(timefmt_parse("2026-03-01T10:00:00z") == 1772359200.0);
    /* RFC 3339 lets the "T" be lower case too (exec plugins' expirationTimestamp). */
    assert_true(timefmt_parse("2026-03-01t10:00:00Z") == 1772359200.0);
    assert_true(timefmt_parse("2026-03-01T10:00:00.5+00:00") == 1772359200.5);
}

static void refuses_what_is_not_a_time_stamp(void **state)
{
    (void)state;
    const char *bad[] = {
        NULL,
        "",
        "yesterday",
        "2026-03-01",
        "2026-03-01T10:00:00",
        "2026-03-01T10:00:00Zjunk",
        "2026-13-01T10:00:00Z",
        "2026-03-32T10:00:00Z",
        "2026-03-01T24:00:00Z",
        "2026-03-01T10:60:00Z",
        "2026-03-01T-1:00:00Z",
        "2026-03-01T10:-1:00Z",
        "2026-03-01T10:00:-1Z",
        "2026-03-01 10:00:00Z",
        /* The offset is exactly +hh:mm or -hh:mm, in range, and ends the text. */
        "2026-03-01T10:00:00+01:30junk",
        "2026-03-01T10:00:00+1:30",
        "2026-03-01T10:00:00+01",
        "2026-03-01T10:00:00+24:00",
        "2026-03-01T10:00:00+01:60",
        "2026-03-01T10:00:00+-1:00",
        /* A fraction is digits only: strtod would take an exponent or a sign. */
        "2026-03-01T10:00:00.Z",
        "2026-03-01T10:00:00.5e3Z",
        "2026-03-01T10:00:00.-5Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (timefmt_parse(bad[i]) != -1)
            fail_msg("\"%s\" parsed", bad[i] ? bad[i] : "(null)");
    }
}

static void formats_whole_seconds_in_utc(void **state)
{
    (void)state;
    char out[32];
    timefmt_format(1772359200.0, out, sizeof(out));
    assert_string_equal(out, "2026-03-01T10:00:00Z");
    timefmt_format(1772359200.999, out, sizeof(out));
    assert_string_equal(out, "2026-03-01T10:00:00Z");
    timefmt_format(0, out, sizeof(out));
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    /* A round trip is stable: status time stamps never move on recompute. */
    for (int64_t s = 946684800; s < 4102444800; s += (int64_t)86400 * 97 + 3671) {
        double t = (double)s;
        timefmt_format(t, out, sizeof(out));
        assert_true(timefmt_parse(out) == floor(t));
    }
}

static void parses_go_durations(void **state)
{
    (void)state;
    assert_true(timefmt_parse_duration("15s") == 15);
    assert_true(timefmt_parse_duration("1.5s") == 1.5);
    assert_true(timefmt_parse_duration("500ms") == 0.5);
    assert_true(timefmt_parse_duration("1m30s") == 90);
    assert_true(timefmt_parse_duration("2h") == 7200);
    assert_true(timefmt_parse_duration("15") == 15);
    assert_true(timefmt_parse_duration("0") == 0);
    static const char *const bad[] = {"",     "s",     "-1s", "+1s",    " 1s",  "1s ", "1x",
                                      "1e3s", "0x10s", "inf", "1.2.3s", "1sms", "ms"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (timefmt_parse_duration(bad[i]) != -1)
            fail_msg("'%s' was taken as a duration", bad[i]);
    }
    assert_true(timefmt_parse_duration(NULL) == -1);
}

static void formats_micro_times_with_six_digits(void **state)
{
    (void)state;
    const double t0 = 1714557600.0; /* 2024-05-01T10:00:00Z */
    char s[TIMEFMT_MICRO_MAX];
    timefmt_format_micro(t0 + 0.0000004, s, sizeof(s));
    assert_string_equal(s, "2024-05-01T10:00:00.000000Z");
    timefmt_format_micro(t0 + 59.9999996, s, sizeof(s));
    assert_string_equal(s, "2024-05-01T10:01:00.000000Z");
    timefmt_format_micro(t0 + 1.5, s, sizeof(s));
    assert_string_equal(s, "2024-05-01T10:00:01.500000Z");
    timefmt_format(t0 + 1.5, s, sizeof(s));
    assert_string_equal(s, "2024-05-01T10:00:01Z");
    timefmt_format_milli(t0 + 1.2346, s, sizeof(s));
    assert_string_equal(s, "2024-05-01T10:00:01.235Z");
    timefmt_format_milli(t0 + 59.9996, s, sizeof(s)); /* rounds into the next second */
    assert_string_equal(s, "2024-05-01T10:01:00.000Z");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_what_the_api_server_writes),
        cmocka_unit_test(refuses_what_is_not_a_time_stamp),
        cmocka_unit_test(formats_whole_seconds_in_utc),
        cmocka_unit_test(formats_micro_times_with_six_digits),
        cmocka_unit_test(parses_go_durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

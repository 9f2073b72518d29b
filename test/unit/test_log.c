/* Tests for pkg/util/log.c: every value is escaped by the logger, in logfmt and in JSON, whatever
 * it holds (quotes, newlines, '=', bytes that are not UTF-8), and a long line is cut between
 * pairs, never inside one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/log.h"

#include <json.h>
#include <stdlib.h>
#include <string.h>

/* 2026-12-02T04:00:00.250Z */
#define NOW 1796184000.25

static char line[TELO_LOG_LINE_MAX];

static size_t fmt(enum telo_log_format f, const char *msg, const char *kv, ...)
    __attribute__((format(printf, 3, 4)));

static size_t fmt(enum telo_log_format f, const char *msg, const char *kv, ...)
{
    va_list ap;
    va_start(ap, kv);
    size_t n = telo_log_vformat(line, f, NOW, TELO_LOG_WARN, msg, kv, ap);
    va_end(ap);
    assert_true(n > 0 && n <= TELO_LOG_LINE_MAX);
    assert_int_equal(line[n - 1], '\n');
    line[n - 1] = '\0'; /* compared without the newline */
    return n;
}

static void plain_values_are_written_as_before(void **state)
{
    (void)state;
    fmt(TELO_LOG_LOGFMT, "attach refused", "session=%s/%s code=%d why=\"%s\"", "ns", "web", 409,
        "in use");
    assert_string_equal(line, "ts=2026-12-02T04:00:00.250Z level=warn msg=\"attach refused\" "
                              "session=ns/web code=409 why=\"in use\"");
}

static void hostile_values_are_escaped_in_logfmt(void **state)
{
    (void)state;
    /* The operator's own example: an API error quoting an object name, written unquoted. */
    fmt(TELO_LOG_LOGFMT, "apply failed", "error=%s", "apply pods \"telo-run-q2\" in namespace x");
    assert_string_equal(strstr(line, " error="),
                        " error=\"apply pods \\\"telo-run-q2\\\" in namespace x\"");
    fmt(TELO_LOG_LOGFMT, "m", "a=%s b=\"%s\"", "k=v\nlevel=error", "tab\there\\ \x01");
    assert_string_equal(strstr(line, " a="),
                        " a=\"k=v\\nlevel=error\" b=\"tab\\there\\\\ \\u0001\"");
    /* Not UTF-8: a stray continuation byte, an overlong '/', a cut sequence; é stays as it is. */
    fmt(TELO_LOG_LOGFMT, "m", "name=%s",
        "\x80"
        "a\xc0\xaf"
        "\xc3\xa9"
        "\xe2\x82");
    assert_string_equal(strstr(line, " name="), " name=\"\\x80a\\xc0\\xaf\xc3\xa9\\xe2\\x82\"");
    /* Characters that act on a terminal or reorder the line unseen are escaped as code points
     * (kubectl logs passes the bytes on): the 8-bit CSI, a right-to-left override, a line
     * separator; a value holding one is quoted. */
    fmt(TELO_LOG_LOGFMT, "m", "v=%s w=%s",
        "\xc2\x9b"
        "31m\xe2\x80\xae",
        "a\xe2\x80\xa8"
        "b");
    assert_string_equal(strstr(line, " v="), " v=\"\\u009b31m\\u202e\" w=\"a\\u2028b\"");
    /* An empty value is quoted, a NULL string is "(null)", the message is escaped too. */
    const char *none = getenv("TELO_TEST_LOG_NO_SUCH_VARIABLE"); /* NULL the compiler can't see */
    fmt(TELO_LOG_LOGFMT, "say \"hi\"\n", "e=%s n=%s", "", none);
    assert_string_equal(strstr(line, " msg="), " msg=\"say \\\"hi\\\"\\n\" e=\"\" n=(null)");
}

static void json_lines_parse_and_keep_the_values(void **state)
{
    (void)state;
    fmt(TELO_LOG_JSON, "apply \"failed\"", "error=\"%s\" code=%d took=%.2f id=%zu pct=%s%% x=%d%s",
        "q\"2\"\n\x80", 403, 0.25, (size_t)7, "50", 1, "s");
    struct json_object *o = json_tokener_parse(line);
    assert_non_null(o);
    struct json_object *v;
    assert_true(json_object_object_get_ex(o, "msg", &v));
    assert_string_equal(json_object_get_string(v), "apply \"failed\"");
    assert_true(json_object_object_get_ex(o, "level", &v));
    assert_string_equal(json_object_get_string(v), "warn");
    assert_true(json_object_object_get_ex(o, "ts", &v));
    assert_string_equal(json_object_get_string(v), "2026-12-02T04:00:00.250Z");
    assert_true(json_object_object_get_ex(o, "error", &v));
    assert_string_equal(json_object_get_string(v), "q\"2\"\n\xef\xbf\xbd"); /* U+FFFD */
    assert_true(json_object_object_get_ex(o, "code", &v));
    assert_true(json_object_is_type(v, json_type_int));
    assert_int_equal(json_object_get_int(v), 403);
    assert_true(json_object_object_get_ex(o, "took", &v));
    assert_true(json_object_is_type(v, json_type_double));
    assert_true(json_object_object_get_ex(o, "id", &v));
    assert_int_equal(json_object_get_int(v), 7);
    /* Text around a conversion makes a string. */
    assert_true(json_object_object_get_ex(o, "pct", &v));
    assert_string_equal(json_object_get_string(v), "50%");
    assert_true(json_object_object_get_ex(o, "x", &v));
    assert_true(json_object_is_type(v, json_type_string));
    assert_string_equal(json_object_get_string(v), "1s");
    json_object_put(o);
    /* A C1 control in JSON is written \u0085, which a reader turns back into the character. */
    fmt(TELO_LOG_JSON, "m", "v=%s",
        "\xc2\x85"
        "x");
    assert_non_null(strstr(line, "\"v\":\"\\u0085x\""));
    o = json_tokener_parse(line);
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "v", &v));
    assert_string_equal(json_object_get_string(v), "\xc2\x85"
                                                   "x");
    json_object_put(o);
}

static void a_long_line_is_cut_between_pairs(void **state)
{
    (void)state;
    char big[3000];
    memset(big, '"', sizeof(big) - 1); /* each byte doubles when escaped */
    big[sizeof(big) - 1] = '\0';
    for (int f = TELO_LOG_LOGFMT; f <= TELO_LOG_JSON; f++) {
        size_t n = fmt((enum telo_log_format)f, "m", "a=%s b=%s c=%d", "short", big, 5);
        assert_true(n <= TELO_LOG_LINE_MAX);
        assert_non_null(strstr(line, "short"));
        /* b, cut to its first 1024 bytes and escaped, is 2 KiB: it fits; c follows. */
        assert_non_null(strstr(line, "...")); /* b was cut at 1024 bytes */
        if (f == TELO_LOG_JSON) {
            struct json_object *o = json_tokener_parse(line);
            assert_non_null(o);
            json_object_put(o);
        }
        /* Three of them do not fit: the third goes whole, and the line says so. */
        n = fmt((enum telo_log_format)f, "m", "a=%s b=%s c=%s d=%d", big, big, big, 9);
        assert_true(n <= TELO_LOG_LINE_MAX);
        assert_non_null(
            strstr(line, f == TELO_LOG_JSON ? "\"log_truncated\":true}" : " log_truncated=true"));
        assert_null(strstr(line, f == TELO_LOG_JSON ? "\"c\":" : " c="));
        if (f == TELO_LOG_JSON) {
            struct json_object *o = json_tokener_parse(line);
            assert_non_null(o);
            json_object_put(o);
        }
    }
}

static void levels_formats_and_verbosity_parse(void **state)
{
    (void)state;
    enum telo_log_level l;
    enum telo_log_format f;
    assert_int_equal(telo_log_parse_level("warn", &l), 0);
    assert_int_equal(l, TELO_LOG_WARN);
    assert_int_equal(telo_log_parse_level("verbose", &l), -1);
    assert_int_equal(telo_log_parse_format("json", &f), 0);
    assert_int_equal(f, TELO_LOG_JSON);
    assert_int_equal(telo_log_parse_format("logfmt", &f), 0);
    assert_int_equal(f, TELO_LOG_LOGFMT);
    assert_int_equal(telo_log_parse_format("text", &f), -1);
    assert_int_equal(telo_log_parse_verbosity("2", &l), 0);
    assert_int_equal(l, TELO_LOG_INFO);
    assert_int_equal(telo_log_parse_verbosity("4", &l), 0);
    assert_int_equal(l, TELO_LOG_DEBUG);
    assert_int_equal(telo_log_parse_verbosity("10", &l), 0);
    assert_int_equal(telo_log_parse_verbosity("11", &l), -1);
    assert_int_equal(telo_log_parse_verbosity("-1", &l), -1);
    assert_int_equal(telo_log_parse_verbosity("", &l), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_values_are_written_as_before),
        cmocka_unit_test(hostile_values_are_escaped_in_logfmt),
        cmocka_unit_test(json_lines_parse_and_keep_the_values),
        cmocka_unit_test(a_long_line_is_cut_between_pairs),
        cmocka_unit_test(levels_formats_and_verbosity_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

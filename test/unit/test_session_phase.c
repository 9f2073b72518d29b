/* Tests for pkg/session/phase.c: the one string table of session and pod phases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/phase.h"

#include <json.h>

#include <string.h>

/* The wire names are the API (the CRD's enum): they never change. */
static void names_are_the_crds_enum(void **state)
{
    (void)state;
    static const char *const crd[] = {"Pending",   "Building", "Provisioning", "Running",
                                      "Succeeded", "Failed",   "Stopped"};
    size_t i = 0;
    for (enum session_phase p = SESSION_PHASE_FIRST; p <= SESSION_PHASE_LAST; p++, i++) {
        assert_string_equal(session_phase_name(p), crd[i]);
        assert_int_equal(session_phase_parse(crd[i]), p);
    }
    assert_int_equal(i, sizeof(crd) / sizeof(crd[0]));
    assert_string_equal(session_phase_name(SESSION_PHASE_UNKNOWN), "Unknown");
    assert_string_equal(session_phase_name((enum session_phase)99), "Unknown");
    assert_string_equal(session_phase_name((enum session_phase) - 1), "Unknown");
}

/* Anything else is UNKNOWN: status is tenant- and API-supplied. */
static void other_text_is_unknown(void **state)
{
    (void)state;
    static const char *const other[] = {"Unknown", "running", "RUNNING",  "Running ", " Running",
                                        "",        "Run",     "Runningg", "Pending\n"};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        assert_int_equal(session_phase_parse(other[i]), SESSION_PHASE_UNKNOWN);
    assert_int_equal(session_phase_parse(NULL), SESSION_PHASE_UNKNOWN);
}

static void the_phase_of_a_status_is_type_checked(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        enum session_phase want;
    } cases[] = {
        {"{\"phase\":\"Failed\"}", SESSION_PHASE_FAILED},
        {"{\"phase\":7}", SESSION_PHASE_UNKNOWN},
        {"{\"phase\":null}", SESSION_PHASE_UNKNOWN},
        {"{\"phase\":{\"Running\":1}}", SESSION_PHASE_UNKNOWN},
        {"{}", SESSION_PHASE_UNKNOWN},
        {"[\"Running\"]", SESSION_PHASE_UNKNOWN},
        {"\"Running\"", SESSION_PHASE_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct json_object *o = json_tokener_parse(cases[i].json);
        assert_non_null(o);
        assert_int_equal(session_phase_of(o), cases[i].want);
        json_object_put(o);
    }
    assert_int_equal(session_phase_of(NULL), SESSION_PHASE_UNKNOWN);
}

static void terminal_phases(void **state)
{
    (void)state;
    for (enum session_phase p = SESSION_PHASE_UNKNOWN; p <= SESSION_PHASE_LAST; p++)
        assert_int_equal(session_phase_is_terminal(p), p == SESSION_PHASE_SUCCEEDED ||
                                                           p == SESSION_PHASE_FAILED ||
                                                           p == SESSION_PHASE_STOPPED);
}

static void pod_phases(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        enum session_pod_phase want;
    } cases[] = {
        {"{\"status\":{\"phase\":\"Pending\"}}", SESSION_POD_PENDING},
        {"{\"status\":{\"phase\":\"Running\"}}", SESSION_POD_RUNNING},
        {"{\"status\":{\"phase\":\"Succeeded\"}}", SESSION_POD_SUCCEEDED},
        {"{\"status\":{\"phase\":\"Failed\"}}", SESSION_POD_FAILED},
        {"{\"status\":{\"phase\":\"Unknown\"}}", SESSION_POD_UNKNOWN},
        /* A session phase is no pod phase. */
        {"{\"status\":{\"phase\":\"Stopped\"}}", SESSION_POD_UNKNOWN},
        {"{\"status\":{\"phase\":true}}", SESSION_POD_UNKNOWN},
        {"{\"status\":\"Running\"}", SESSION_POD_UNKNOWN},
        {"{\"status\":{}}", SESSION_POD_UNKNOWN},
        {"{}", SESSION_POD_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct json_object *o = json_tokener_parse(cases[i].json);
        assert_non_null(o);
        assert_int_equal(session_pod_phase_of(o), cases[i].want);
        json_object_put(o);
    }
    assert_int_equal(session_pod_phase_of(NULL), SESSION_POD_UNKNOWN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_are_the_crds_enum),
        cmocka_unit_test(other_text_is_unknown),
        cmocka_unit_test(the_phase_of_a_status_is_type_checked),
        cmocka_unit_test(terminal_phases),
        cmocka_unit_test(pod_phases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

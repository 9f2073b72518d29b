/* Tests for pkg/kube/status.c: API server error responses decoded into a Status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/status.h"
#include "util/err.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void parse_str(int code, const char *body, struct kube_status *st)
{
    struct telo_err err = {0};
    assert_int_equal(kube_status_parse(code, body, strlen(body), st, &err), 0);
}

/* One reason per row, with the body the API server sends for it. */
static const struct {
    const char *reason;
    const char *message;
    int code;
    enum kube_reason want;
} reason_rows[] = {
    {"Unauthorized", "Unauthorized", 401, KUBE_REASON_UNAUTHORIZED},
    {"Forbidden",
     "configmaps \\\"x\\\" is forbidden: User \\\"system:serviceaccount:telo:telo\\\" cannot get "
     "resource \\\"configmaps\\\" in API group \\\"\\\" in the namespace \\\"ns\\\"",
     403, KUBE_REASON_FORBIDDEN},
    {"NotFound", "configmaps \\\"x\\\" not found", 404, KUBE_REASON_NOT_FOUND},
    {"AlreadyExists", "configmaps \\\"x\\\" already exists", 409, KUBE_REASON_ALREADY_EXISTS},
    {"Conflict",
     "Operation cannot be fulfilled on configmaps \\\"x\\\": the object has been modified; please "
     "apply your changes to the latest version and try again",
     409, KUBE_REASON_CONFLICT},
    {"Gone", "the resource is gone", 410, KUBE_REASON_GONE},
    {"Expired", "too old resource version: 100 (2000)", 410, KUBE_REASON_EXPIRED},
    {"Invalid", "ConfigMap \\\"x\\\" is invalid", 422, KUBE_REASON_INVALID},
    {"ServerTimeout",
     "The list operation against configmaps could not be completed at this time, please try "
     "again.",
     500, KUBE_REASON_SERVER_TIMEOUT},
    {"Timeout", "Timeout: request did not complete within 1m0s", 504, KUBE_REASON_TIMEOUT},
    {"TooManyRequests", "Too many requests, please try again later.", 429,
     KUBE_REASON_TOO_MANY_REQUESTS},
    {"BadRequest", "the server rejected our request for an unknown reason", 400,
     KUBE_REASON_BAD_REQUEST},
    {"MethodNotAllowed", "the server does not allow this method on the requested resource", 405,
     KUBE_REASON_METHOD_NOT_ALLOWED},
    {"NotAcceptable", "only the following media types are accepted: application/json", 406,
     KUBE_REASON_NOT_ACCEPTABLE},
    {"RequestEntityTooLarge", "Request entity too large: limit is 3145728", 413,
     KUBE_REASON_REQUEST_ENTITY_TOO_LARGE},
    {"UnsupportedMediaType",
     "the body of the request was in an unknown format - accepted media types include: "
     "application/json-patch+json",
     415, KUBE_REASON_UNSUPPORTED_MEDIA_TYPE},
    {"InternalError", "Internal error occurred: etcdserver: request timed out", 500,
     KUBE_REASON_INTERNAL_ERROR},
    {"ServiceUnavailable", "the server is currently unable to handle the request", 503,
     KUBE_REASON_SERVICE_UNAVAILABLE},
};

static void every_reason_from_a_status_body(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(reason_rows) / sizeof(reason_rows[0]); i++) {
        char body[1024];
        (void)snprintf(
            body, sizeof(body),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
            "\"Failure\",\"message\":\"%s\",\"reason\":\"%s\",\"details\":{\"name\":\"x\","
            "\"kind\":\"configmaps\"},\"code\":%d}\n",
            reason_rows[i].message, reason_rows[i].reason, reason_rows[i].code);
        struct kube_status st;
        parse_str(reason_rows[i].code, body, &st);
        assert_int_equal(st.code, reason_rows[i].code);
        assert_int_equal(st.reason, reason_rows[i].want);
        assert_true(kube_status_is(&st, reason_rows[i].want));
        assert_string_equal(st.reason_text, reason_rows[i].reason);
        assert_string_equal(kube_reason_name(st.reason), reason_rows[i].reason);
        assert_string_equal(st.name, "x");
        assert_string_equal(st.kind, "configmaps");
        assert_null(st.group);
        assert_null(st.uid);
        assert_int_equal(st.ncauses, 0);
        /* The JSON escapes were decoded. */
        assert_null(strstr(st.message, "\\"));
        kube_status_release(&st);
    }
}

static void already_exists_fields_and_message(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(409,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"configmaps \\\"x\\\" already exists\",\"reason\":\"AlreadyExists\","
              "\"details\":{\"name\":\"x\",\"kind\":\"configmaps\"},\"code\":409}",
              &st);
    assert_int_equal(st.code, 409);
    assert_int_equal(st.reason, KUBE_REASON_ALREADY_EXISTS);
    assert_false(kube_status_is(&st, KUBE_REASON_CONFLICT));
    assert_string_equal(st.message, "configmaps \"x\" already exists");
    assert_false(kube_status_retryable(&st));
    assert_false(kube_status_is_expired(&st));

    struct telo_err err = {0};
    assert_int_equal(kube_status_to_err(&st, "create configmaps \"x\" in namespace \"ns\"", &err),
                     -TELO_EAPI);
    assert_int_equal(err.code, TELO_EAPI);
    assert_string_equal(err.msg, "create configmaps \"x\" in namespace \"ns\": 409 AlreadyExists: "
                                 "configmaps \"x\" already exists");
    kube_status_release(&st);
}

static const char invalid_body[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"ConfigMap \\\"bad\\\" is invalid: [metadata.name: Invalid value: "
    "\\\"Bad_Name\\\": "
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', "
    "data[a b]: Invalid value: \\\"a b\\\": a valid config key must consist of alphanumeric "
    "characters, '-', '_' or '.']\",\"reason\":\"Invalid\",\"details\":{\"name\":\"bad\","
    "\"kind\":\"ConfigMap\",\"causes\":[{\"reason\":\"FieldValueInvalid\",\"message\":\"Invalid "
    "value: \\\"Bad_Name\\\": a lowercase RFC 1123 subdomain must consist of lower case "
    "alphanumeric characters, '-' or '.'\",\"field\":\"metadata.name\"},{\"reason\":"
    "\"FieldValueInvalid\",\"message\":\"Invalid value: \\\"a b\\\": a valid config key must "
    "consist of alphanumeric characters, '-', '_' or '.'\",\"field\":\"data[a b]\"}]},"
    "\"code\":422}";

static void invalid_with_several_causes(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(422, invalid_body, &st);
    assert_int_equal(st.reason, KUBE_REASON_INVALID);
    assert_int_equal(st.ncauses, 2);
    assert_string_equal(st.causes[0].type, "FieldValueInvalid");
    assert_string_equal(st.causes[0].field, "metadata.name");
    assert_string_equal(st.causes[0].message,
                        "Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist "
                        "of lower case alphanumeric characters, '-' or '.'");
    assert_string_equal(st.causes[1].type, "FieldValueInvalid");
    assert_string_equal(st.causes[1].field, "data[a b]");
    assert_string_equal(st.causes[1].message,
                        "Invalid value: \"a b\": a valid config key must consist of alphanumeric "
                        "characters, '-', '_' or '.'");

    /* The message already lists both causes: to_err does not repeat them. */
    struct telo_err err = {0};
    kube_status_to_err(&st, "create configmaps \"bad\" in namespace \"ns\"", &err);
    assert_string_equal(
        err.msg,
        "create configmaps \"bad\" in namespace \"ns\": 422 Invalid: ConfigMap \"bad\" is invalid: "
        "[metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist "
        "of lower case alphanumeric characters, '-' or '.', data[a b]: Invalid value: \"a b\": a "
        "valid config key must consist of alphanumeric characters, '-', '_' or '.']");
    kube_status_release(&st);
}

static void invalid_causes_not_in_message_are_appended(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(422,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"Widget.telo.dev \\\"w\\\" is invalid\",\"reason\":\"Invalid\","
              "\"details\":{\"name\":\"w\",\"group\":\"telo.dev\",\"kind\":\"Widget\",\"causes\":"
              "[{\"reason\":\"FieldValueRequired\",\"message\":\"Required value\",\"field\":"
              "\"spec.size\"},{\"reason\":\"FieldValueNotSupported\",\"message\":\"Unsupported "
              "value: \\\"huge\\\": supported values: \\\"small\\\", \\\"large\\\"\",\"field\":"
              "\"spec.kind\"}]},\"code\":422}",
              &st);
    assert_string_equal(st.group, "telo.dev");
    struct telo_err err = {0};
    assert_int_equal(kube_status_to_err(&st, "create widgets \"w\"", &err), -TELO_EAPI);
    assert_string_equal(err.msg, "create widgets \"w\": 422 Invalid: Widget.telo.dev \"w\" is "
                                 "invalid: spec.size: Required value; spec.kind: Unsupported "
                                 "value: \"huge\": supported values: \"small\", \"large\"");
    kube_status_release(&st);
}

static void html_502_from_a_proxy(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(502,
              "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
              "<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n",
              &st);
    assert_int_equal(st.code, 502);
    assert_int_equal(st.reason, KUBE_REASON_INTERNAL_ERROR);
    assert_string_equal(st.reason_text, "InternalError");
    assert_string_equal(st.message,
                        "an error on the server (\"<html> <head><title>502 Bad Gateway</title>"
                        "</head> <body> <center><h1>502 Bad Gateway</h1></center> </body> "
                        "</html>\") has prevented the request from succeeding");
    assert_int_equal(st.ncauses, 1);
    assert_string_equal(st.causes[0].type, "UnexpectedServerResponse");
    assert_false(kube_status_retryable(&st));
    kube_status_release(&st);
}

static void empty_503(void **state)
{
    (void)state;
    struct kube_status st;
    struct telo_err err = {0};
    assert_int_equal(kube_status_parse(503, NULL, 0, &st, &err), 0);
    assert_int_equal(st.reason, KUBE_REASON_SERVICE_UNAVAILABLE);
    assert_string_equal(st.message, "the server is currently unable to handle the request");
    assert_int_equal(st.ncauses, 0);
    assert_true(kube_status_retryable(&st));
    kube_status_to_err(&st, "list pods", &err);
    assert_string_equal(err.msg, "list pods: 503 ServiceUnavailable: the server is currently "
                                 "unable to handle the request");
    kube_status_release(&st);
}

static void plain_text_404_and_unknown_code(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(404, "404 page not found\n", &st);
    assert_int_equal(st.reason, KUBE_REASON_NOT_FOUND);
    assert_string_equal(
        st.message, "the server could not find the requested resource (\"404 page not found\")");
    assert_string_equal(st.causes[0].message, "404 page not found");
    kube_status_release(&st);

    parse_str(418, "I'm a teapot", &st);
    assert_int_equal(st.reason, KUBE_REASON_UNKNOWN);
    assert_string_equal(st.reason_text, "");
    assert_string_equal(st.message, "the server responded with the status code 418 (\"I'm a "
                                    "teapot\")");
    struct telo_err err = {0};
    kube_status_to_err(&st, NULL, &err);
    assert_string_equal(err.msg,
                        "418: the server responded with the status code 418 (\"I'm a teapot\")");
    kube_status_release(&st);

    assert_int_equal(kube_status_parse(418, "", 0, &st, &err), 0);
    assert_string_equal(st.message, "the server responded with the status code 418 but did not "
                                    "return more information");
    kube_status_release(&st);
}

static void forbidden_plain_text_keeps_the_server_words(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(403, "Forbidden: user \"bob\" cannot list pods\n", &st);
    assert_int_equal(st.reason, KUBE_REASON_FORBIDDEN);
    assert_string_equal(st.message, "Forbidden: user \"bob\" cannot list pods");
    kube_status_release(&st);
}

static void json_that_is_not_a_status_is_unexpected(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(401, "{\"error\":\"invalid bearer token\"}", &st);
    assert_int_equal(st.reason, KUBE_REASON_UNAUTHORIZED);
    assert_string_equal(st.message, "the server has asked for the client to provide credentials "
                                    "(\"{\"error\":\"invalid bearer token\"}\")");
    kube_status_release(&st);

    /* A Status followed by garbage is not a Status. */
    parse_str(409, "{\"kind\":\"Status\",\"reason\":\"AlreadyExists\",\"code\":409} trailing", &st);
    assert_int_equal(st.reason, KUBE_REASON_CONFLICT);
    assert_int_equal(st.ncauses, 1);
    kube_status_release(&st);
}

static void long_body_is_truncated_at_a_character(void **state)
{
    (void)state;
    /* 199 ASCII bytes then "é" (2 bytes): the cut at 200 would split it. */
    char body[512];
    memset(body, 'a', 199);
    (void)snprintf(body + 199, sizeof(body) - 199, "\xc3\xa9 and much more text after it");
    struct kube_status st;
    parse_str(400, body, &st);
    const char *q = st.causes[0].message;
    assert_int_equal(strlen(q), 199 + 3);
    assert_memory_equal(q + 199, "...", 3);
    kube_status_release(&st);

    /* "é" fits whole. */
    memset(body, 'a', 198);
    (void)snprintf(body + 198, sizeof(body) - 198, "\xc3\xa9 and much more text after it");
    parse_str(400, body, &st);
    q = st.causes[0].message;
    assert_int_equal(strlen(q), 200 + 3);
    assert_memory_equal(q + 198, "\xc3\xa9...", 5);
    kube_status_release(&st);
}

static void unknown_or_missing_reason_falls_back_to_code(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(404,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
              "\"message\":\"nope\",\"reason\":\"SomethingNew\",\"code\":404}",
              &st);
    assert_int_equal(st.reason, KUBE_REASON_NOT_FOUND);
    assert_string_equal(st.reason_text, "SomethingNew");
    kube_status_release(&st);

    /* No code in the body: the HTTP code counts. */
    parse_str(429,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
              "\"message\":\"slow down\"}",
              &st);
    assert_int_equal(st.code, 429);
    assert_int_equal(st.reason, KUBE_REASON_TOO_MANY_REQUESTS);
    assert_string_equal(st.reason_text, "TooManyRequests");
    kube_status_release(&st);

    /* Reasons no code implies stay unknown. */
    parse_str(409, "{\"kind\":\"Status\",\"message\":\"m\",\"code\":409}", &st);
    assert_int_equal(st.reason, KUBE_REASON_CONFLICT);
    assert_false(kube_status_is(&st, KUBE_REASON_ALREADY_EXISTS));
    kube_status_release(&st);
}

static void retry_after_seconds_in_details(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(429,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"Too many requests, please try again later.\",\"reason\":"
              "\"TooManyRequests\",\"details\":{\"retryAfterSeconds\":7},\"code\":429}",
              &st);
    assert_int_equal(st.retry_after_seconds, 7);
    assert_true(kube_status_retryable(&st));
    kube_status_release(&st);

    parse_str(500,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"try later\",\"reason\":\"ServerTimeout\",\"details\":{\"kind\":"
              "\"pods\",\"retryAfterSeconds\":\"x\",\"causes\":\"not-an-array\"},\"code\":500}",
              &st);
    /* Fields of the wrong type are ignored, as StatusDetails says clients must. */
    assert_int_equal(st.retry_after_seconds, 0);
    assert_int_equal(st.ncauses, 0);
    assert_true(kube_status_retryable(&st));
    kube_status_release(&st);
}

static void expired_from_410_and_from_a_watch_error_object(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(410,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"too old resource version: 1 (52)\",\"reason\":\"Expired\","
              "\"code\":410}",
              &st);
    assert_true(kube_status_is_expired(&st));
    kube_status_release(&st);

    parse_str(410, "", &st);
    assert_int_equal(st.reason, KUBE_REASON_GONE);
    assert_true(kube_status_is_expired(&st));
    kube_status_release(&st);

    /* A watch ERROR event's object: HTTP 200 on the wire, so the code comes from the Status. */
    struct json_object *obj = json_tokener_parse(
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"too old resource version: 1 (52)\",\"reason\":\"Expired\",\"code\":410}");
    assert_non_null(obj);
    struct telo_err err = {0};
    assert_int_equal(kube_status_from_json(200, obj, &st, &err), 0);
    assert_int_equal(st.code, 410);
    assert_int_equal(st.reason, KUBE_REASON_EXPIRED);
    assert_true(kube_status_is_expired(&st));
    assert_string_equal(st.message, "too old resource version: 1 (52)");
    kube_status_to_err(&st, "watch configmaps", &err);
    assert_string_equal(err.msg, "watch configmaps: 410 Expired: too old resource version: 1 (52)");
    kube_status_release(&st);
    json_object_put(obj);

    /* Expired without a code is still expired. */
    obj = json_tokener_parse("{\"kind\":\"Status\",\"reason\":\"Expired\",\"message\":\"m\"}");
    assert_int_equal(kube_status_from_json(0, obj, &st, &err), 0);
    assert_int_equal(st.code, 0);
    assert_true(kube_status_is_expired(&st));
    kube_status_to_err(&st, "", &err);
    assert_string_equal(err.msg, "Expired: m");
    kube_status_release(&st);
    json_object_put(obj);
}

static void from_json_rejects_what_is_not_a_status(void **state)
{
    (void)state;
    struct kube_status st;
    struct telo_err err = {0};
    struct json_object *obj = json_tokener_parse("{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\"}");
    assert_int_equal(kube_status_from_json(0, obj, &st, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "expected a Status object, got kind \"ConfigMap\"");
    assert_null(st.message);
    json_object_put(obj);

    obj = json_object_new_array();
    assert_int_equal(kube_status_from_json(0, obj, &st, &err), -TELO_EPROTO);
    assert_string_equal(err.msg, "expected a Status object, got JSON array");
    json_object_put(obj);

    assert_int_equal(kube_status_from_json(0, NULL, &st, &err), -TELO_EPROTO);
    assert_int_equal(kube_status_parse(500, "x", 1, NULL, &err), -TELO_EINVAL);
}

static void retryable_and_is_helpers(void **state)
{
    (void)state;
    struct kube_status st;
    parse_str(504, "", &st);
    assert_int_equal(st.reason, KUBE_REASON_TIMEOUT);
    assert_true(kube_status_retryable(&st));
    kube_status_release(&st);

    parse_str(500, "", &st);
    assert_string_equal(st.message,
                        "an error on the server (\"\") has prevented the request from succeeding");
    assert_false(kube_status_retryable(&st));
    kube_status_release(&st);

    assert_false(kube_status_is(NULL, KUBE_REASON_UNKNOWN));
    assert_false(kube_status_is_expired(NULL));
    assert_false(kube_status_retryable(NULL));
    assert_string_equal(kube_reason_name(KUBE_REASON_UNKNOWN), "Unknown");
    assert_string_equal(kube_reason_name((enum kube_reason)999), "Unknown");
    assert_string_equal(kube_reason_name(KUBE_REASON_REQUEST_ENTITY_TOO_LARGE),
                        "RequestEntityTooLarge");

    /* release accepts NULL and is idempotent. */
    kube_status_release(NULL);
    kube_status_release(&st);
}

static void to_err_truncates_to_fit(void **state)
{
    (void)state;
    char msg[2048];
    memset(msg, 'm', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    char body[4096];
    (void)snprintf(body, sizeof(body),
                   "{\"kind\":\"Status\",\"message\":\"%s\",\"reason\":"
                   "\"InternalError\",\"code\":500}",
                   msg);
    struct kube_status st;
    parse_str(500, body, &st);
    struct telo_err err = {0};
    assert_int_equal(kube_status_to_err(&st, "get pods", &err), -TELO_EAPI);
    assert_int_equal(strlen(err.msg), TELO_ERR_MSG_MAX - 1);
    assert_memory_equal(err.msg, "get pods: 500 InternalError: mmm", 32);
    kube_status_release(&st);
}

static void retry_after_header_values(void **state)
{
    (void)state;
    assert_int_equal(kube_retry_after_parse("5"), 5);
    assert_int_equal(kube_retry_after_parse("0"), 0);
    assert_int_equal(kube_retry_after_parse(" 120\t"), 120);
    assert_int_equal(kube_retry_after_parse("2147483647"), 2147483647);
    assert_int_equal(kube_retry_after_parse("2147483648"), -1);
    assert_int_equal(kube_retry_after_parse("-1"), -1);
    assert_int_equal(kube_retry_after_parse("+1"), -1);
    assert_int_equal(kube_retry_after_parse("1.5"), -1);
    assert_int_equal(kube_retry_after_parse("Wed, 21 Oct 2015 07:28:00 GMT"), -1);
    assert_int_equal(kube_retry_after_parse(""), -1);
    assert_int_equal(kube_retry_after_parse("  "), -1);
    assert_int_equal(kube_retry_after_parse(NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_reason_from_a_status_body),
        cmocka_unit_test(already_exists_fields_and_message),
        cmocka_unit_test(invalid_with_several_causes),
        cmocka_unit_test(invalid_causes_not_in_message_are_appended),
        cmocka_unit_test(html_502_from_a_proxy),
        cmocka_unit_test(empty_503),
        cmocka_unit_test(plain_text_404_and_unknown_code),
        cmocka_unit_test(forbidden_plain_text_keeps_the_server_words),
        cmocka_unit_test(json_that_is_not_a_status_is_unexpected),
        cmocka_unit_test(long_body_is_truncated_at_a_character),
        cmocka_unit_test(unknown_or_missing_reason_falls_back_to_code),
        cmocka_unit_test(retry_after_seconds_in_details),
        cmocka_unit_test(expired_from_410_and_from_a_watch_error_object),
        cmocka_unit_test(from_json_rejects_what_is_not_a_status),
        cmocka_unit_test(retryable_and_is_helpers),
        cmocka_unit_test(to_err_truncates_to_fit),
        cmocka_unit_test(retry_after_header_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/ws/http.c: the handshake's HTTP request and response heads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "appendf.h"
#include "ws/http.h"

#include <stdio.h>
#include <string.h>

static void parses_an_upgrade_request(void **state)
{
    (void)state;
    char req[] = "GET /v1/namespaces/a/telosessions/b/attach?lastSeq=4 HTTP/1.1\r\n"
                 "Host: gw\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
                 "Sec-WebSocket-Protocol:  v5.channel.k8s.io , telo.io.v1\t\r\n\r\nTAIL";
    long end = ws_http_head_end(req, strlen(req), 0, 8192);
    assert_int_equal(end, (long)(strstr(req, "TAIL") - req));
    struct ws_http_head h;
    assert_int_equal(ws_http_parse_request(req, (size_t)end, &h, NULL), 0);
    assert_string_equal(h.method, "GET");
    assert_string_equal(h.target, "/v1/namespaces/a/telosessions/b/attach?lastSeq=4");
    assert_int_equal(h.minor_version, 1);
    assert_int_equal(h.nheaders, 4);
    assert_string_equal(ws_http_header(&h, "upgrade"), "websocket");
    assert_string_equal(ws_http_header(&h, "SEC-WEBSOCKET-PROTOCOL"),
                        "v5.channel.k8s.io , telo.io.v1");
    assert_true(ws_http_list_has(ws_http_header(&h, "Connection"), "upgrade"));
    assert_false(ws_http_list_has(ws_http_header(&h, "Connection"), "close"));
    assert_null(ws_http_header(&h, "Origin"));
    assert_int_equal(ws_http_header_count(&h, "upgrade"), 1);
    assert_int_equal(ws_http_header_count(&h, "Origin"), 0);
}

/* A repeated header is counted (the gateway refuses a request that repeats one it relies on). */
static void repeated_headers_are_counted(void **state)
{
    (void)state;
    char req[] = "GET / HTTP/1.1\r\nOrigin: https://a\r\nHost: gw\r\norigin: https://b\r\n\r\n";
    long end = ws_http_head_end(req, strlen(req), 0, 8192);
    struct ws_http_head h;
    assert_int_equal(ws_http_parse_request(req, (size_t)end, &h, NULL), 0);
    assert_int_equal(ws_http_header_count(&h, "ORIGIN"), 2);
    assert_int_equal(ws_http_header_count(&h, "Host"), 1);
    assert_string_equal(ws_http_header(&h, "Origin"), "https://a");
}

static void head_end_needs_the_blank_line_and_respects_the_limit(void **state)
{
    (void)state;
    const char *partial = "GET / HTTP/1.1\r\nHost: x\r\n";
    assert_int_equal(ws_http_head_end(partial, strlen(partial), 0, 8192), 0);
    assert_int_equal(ws_http_head_end(partial, strlen(partial), 0, 10), -TELO_ETOOBIG);
}

/* A head that arrives in pieces is found whatever the split, the blank line too when it straddles
 * two pieces; the bytes an earlier call searched are not read again (a head sent a byte at a time
 * used to cost a scan of everything before each byte: 33M comparisons per 8 KiB). */
static void head_end_resumes_where_the_last_search_stopped(void **state)
{
    (void)state;
    const char *head = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t len = strlen(head);
    for (size_t k = 0; k < len; k++) {
        assert_int_equal(ws_http_head_end(head, k, 0, 8192), 0);
        assert_int_equal(ws_http_head_end(head, len, k, 8192), (long)len);
    }
    /* Byte by byte, as a slow or hostile client sends it. */
    long end = 0;
    for (size_t have = 1; have <= len && end == 0; have++)
        end = ws_http_head_end(head, have, have - 1, 8192);
    assert_int_equal(end, (long)len);
    /* What was searched is not looked at again, beyond the 3 bytes a blank line may straddle. */
    const char *searched = "\r\n\r\nabcd";
    assert_int_equal(ws_http_head_end(searched, strlen(searched), 7, 8192), 0);
    assert_int_equal(ws_http_head_end(searched, strlen(searched), 3, 8192), 4);
    /* The bound is the same. */
    static char junk[8192];
    memset(junk, 'a', sizeof(junk));
    end = 0;
    for (size_t have = 1; have <= sizeof(junk) && end == 0; have++)
        end = ws_http_head_end(junk, have, have - 1, sizeof(junk));
    assert_int_equal(end, -TELO_ETOOBIG);
}

static void refuses_malformed_requests(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "GET /\r\n\r\n",                             /* no version */
        "get / HTTP/1.1\r\n\r\n",                    /* lower-case method */
        "GET / HTTP/2.0\r\n\r\n",                    /* not 1.x */
        "GET /a b HTTP/1.1\r\n\r\n",                 /* space in the target */
        "GET / HTTP/1.1\r\nNoColon\r\n\r\n",         /* header without a colon */
        "GET / HTTP/1.1\r\nName : v\r\n\r\n",        /* space before the colon */
        "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", /* obsolete folding */
        "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",        /* control character */
        "GET / HTTP/1.1\nA: b\r\n\r\n",              /* bare LF */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", bad[i]);
        struct ws_http_head h;
        struct telo_err err = {0};
        assert_int_equal(ws_http_parse_request(buf, strlen(buf), &h, &err), -TELO_EPROTO);
        assert_true(err.msg[0] != '\0');
    }
}

static void refuses_too_many_headers(void **state)
{
    (void)state;
    char buf[4096] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i <= WS_HTTP_MAX_HEADERS; i++)
        test_appendf(buf, sizeof(buf), "H%d: v\r\n", i);
    test_appendf(buf, sizeof(buf), "\r\n");
    struct ws_http_head h;
    assert_int_equal(ws_http_parse_request(buf, strlen(buf), &h, NULL), -TELO_EPROTO);
}

static void parses_responses(void **state)
{
    (void)state;
    char ok[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                "Sec-WebSocket-Accept: abc\r\n\r\n";
    struct ws_http_head h;
    assert_int_equal(ws_http_parse_response(ok, strlen(ok), &h, NULL), 0);
    assert_int_equal(h.status, 101);
    assert_string_equal(ws_http_header(&h, "sec-websocket-accept"), "abc");
    char bare[] = "HTTP/1.1 403\r\n\r\n";
    assert_int_equal(ws_http_parse_response(bare, strlen(bare), &h, NULL), 0);
    assert_int_equal(h.status, 403);
    char bad[] = "HTTP/1.1 1O1 x\r\n\r\n";
    assert_int_equal(ws_http_parse_response(bad, strlen(bad), &h, NULL), -TELO_EPROTO);
}

static void lists_and_query_parameters(void **state)
{
    (void)state;
    const char *list = " a, ,b ,c";
    char item[8];
    assert_int_equal(ws_http_list_next(&list, item, sizeof(item)), 1);
    assert_string_equal(item, "a");
    assert_int_equal(ws_http_list_next(&list, item, sizeof(item)), 1);
    assert_string_equal(item, "b");
    assert_int_equal(ws_http_list_next(&list, item, sizeof(item)), 1);
    assert_string_equal(item, "c");
    assert_int_equal(ws_http_list_next(&list, item, sizeof(item)), 0);

    char v[16];
    assert_int_equal(ws_http_query_param("x=1&lastSeq=42&y", "lastSeq", v, sizeof(v)), 1);
    assert_string_equal(v, "42");
    assert_int_equal(ws_http_query_param("lastSeqX=1", "lastSeq", v, sizeof(v)), 0);
    assert_int_equal(ws_http_query_param("a=%41+b", "a", v, sizeof(v)), 1);
    assert_string_equal(v, "A b");
    assert_int_equal(ws_http_query_param("flag", "flag", v, sizeof(v)), 1);
    assert_string_equal(v, "");
}

static void paths_are_percent_decoded(void **state)
{
    (void)state;
    char ok[] = "/hel%6Co%2fx%2F";
    assert_int_equal(ws_http_path_decode(ok), 0);
    assert_string_equal(ok, "/hello/x/");
    char plain[] = "/metrics";
    assert_int_equal(ws_http_path_decode(plain), 0);
    assert_string_equal(plain, "/metrics");
    const char *bad[] = {"/a%00b", "/a%4", "/a%", "/a%zz", "/%g0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char copy[16];
        snprintf(copy, sizeof(copy), "%s", bad[i]);
        assert_int_equal(ws_http_path_decode(copy), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_an_upgrade_request),
        cmocka_unit_test(head_end_needs_the_blank_line_and_respects_the_limit),
        cmocka_unit_test(head_end_resumes_where_the_last_search_stopped),
        cmocka_unit_test(repeated_headers_are_counted),
        cmocka_unit_test(refuses_malformed_requests),
        cmocka_unit_test(refuses_too_many_headers),
        cmocka_unit_test(parses_responses),
        cmocka_unit_test(lists_and_query_parameters),
        cmocka_unit_test(paths_are_percent_decoded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

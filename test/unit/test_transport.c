/* Tests for pkg/kube/transport.c: retry policy, and the transport against a scripted HTTP server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/config.h"
#include "kube/rest.h"
#include "kube/transport.h"
#include "util/err.h"
#include "util/log.h"

#include "mock_client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the pure retry policy ---- */

static void retry_429_waits_retry_after_then_gives_up(void **state)
{
    (void)state;
    assert_int_equal(kube_retry_delay_ms("POST", 429, KUBE_FAIL_NONE, 2, 1, 3, 30000), 2000);
    assert_int_equal(kube_retry_delay_ms("POST", 429, KUBE_FAIL_NONE, -1, 1, 3, 30000), 1000);
    assert_int_equal(kube_retry_delay_ms("GET", 429, KUBE_FAIL_NONE, 0, 3, 3, 30000), 0);
    assert_int_equal(kube_retry_delay_ms("GET", 429, KUBE_FAIL_NONE, 1, 4, 3, 30000), -1);
}

static void retry_after_is_capped(void **state)
{
    (void)state;
    assert_int_equal(kube_retry_delay_ms("GET", 429, KUBE_FAIL_NONE, 3600, 1, 3, 30000), 30000);
    assert_int_equal(kube_retry_delay_ms("GET", 503, KUBE_FAIL_NONE, 100000000, 1, 3, 30000),
                     30000);
}

static void retry_5xx_only_with_retry_after(void **state)
{
    (void)state;
    assert_int_equal(kube_retry_delay_ms("PUT", 503, KUBE_FAIL_NONE, 1, 1, 3, 30000), 1000);
    assert_int_equal(kube_retry_delay_ms("PUT", 503, KUBE_FAIL_NONE, -1, 1, 3, 30000), -1);
    assert_int_equal(kube_retry_delay_ms("GET", 500, KUBE_FAIL_NONE, -1, 1, 3, 30000), -1);
    assert_int_equal(kube_retry_delay_ms("GET", 404, KUBE_FAIL_NONE, 1, 1, 3, 30000), -1);
    assert_int_equal(kube_retry_delay_ms("GET", 409, KUBE_FAIL_NONE, -1, 1, 3, 30000), -1);
    assert_int_equal(kube_retry_delay_ms("GET", 200, KUBE_FAIL_NONE, -1, 1, 3, 30000), -1);
}

static void retry_connection_errors_only_when_safe(void **state)
{
    (void)state;
    /* Never sent: any verb, with doubling backoff. */
    assert_int_equal(kube_retry_delay_ms("POST", 0, KUBE_FAIL_CONNECT, -1, 1, 3, 30000), 200);
    assert_int_equal(kube_retry_delay_ms("POST", 0, KUBE_FAIL_CONNECT, -1, 2, 3, 30000), 400);
    assert_int_equal(kube_retry_delay_ms("POST", 0, KUBE_FAIL_CONNECT, -1, 3, 3, 30000), 800);
    assert_int_equal(kube_retry_delay_ms("POST", 0, KUBE_FAIL_CONNECT, -1, 4, 3, 30000), -1);
    /* Maybe sent: only idempotent GET. */
    assert_int_equal(kube_retry_delay_ms("GET", 0, KUBE_FAIL_CONNECTION, -1, 1, 3, 30000), 200);
    assert_int_equal(kube_retry_delay_ms("POST", 0, KUBE_FAIL_CONNECTION, -1, 1, 3, 30000), -1);
    assert_int_equal(kube_retry_delay_ms("PATCH", 0, KUBE_FAIL_CONNECTION, -1, 1, 3, 30000), -1);
    /* Timeouts and other failures are not retried. */
    assert_int_equal(kube_retry_delay_ms("GET", 0, KUBE_FAIL_TIMEOUT, -1, 1, 3, 30000), -1);
    assert_int_equal(kube_retry_delay_ms("GET", 0, KUBE_FAIL_OTHER, -1, 1, 3, 30000), -1);
    /* The backoff is capped. */
    assert_int_equal(kube_retry_delay_ms("GET", 0, KUBE_FAIL_CONNECT, -1, 20, 30, 1000), 1000);
}

/* ---- against the scripted server ---- */

static char token_file[256];

/* Called by the mock server, where an assertion cannot unwind: the caller answers 500. */
static int write_token(const char *token)
{
    FILE *f = fopen(token_file, "w");
    if (!f)
        return -1;
    int wrote = fputs(token, f) >= 0;
    return fclose(f) == 0 && wrote ? 0 : -1;
}

static void route(int fd, const struct mock_req *r)
{
    if (strcmp(r->path, "/ok") == 0) {
        char body[256];
        snprintf(body, sizeof(body), "{\"method\":\"%s\",\"ua\":%d,\"ct\":\"%s\"}", r->method,
                 strstr(r->headers, "User-Agent: telo-operator/") != NULL,
                 strstr(r->headers, "Content-Type: application/merge-patch+json") != NULL ? "merge"
                                                                                          : "");
        mock_reply(fd, 200, NULL, body);
    } else if (strcmp(r->path, "/echo") == 0) {
        mock_reply(fd, 201, NULL, r->body);
    } else if (strcmp(r->path, "/429") == 0) {
        if (r->hit <= 2)
            mock_reply(fd, 429, "Retry-After: 0\r\n", "{\"kind\":\"Status\",\"code\":429}");
        else
            mock_reply(fd, 200, NULL, "{}");
    } else if (strcmp(r->path, "/503") == 0) {
        mock_reply(fd, 503, "Retry-After: 0\r\n", "{}");
    } else if (strcmp(r->path, "/auth") == 0) {
        if (strstr(r->headers, "Authorization: Bearer new") != NULL) {
            mock_reply(fd, 200, NULL, "{\"auth\":\"new\"}");
        } else {
            /* The credential rotates while the old one is being refused. */
            if (write_token("new\n") < 0)
                mock_reply(fd, 500, NULL, "{\"error\":\"the mock cannot write the token file\"}");
            else
                mock_reply(fd, 401, NULL, "{\"kind\":\"Status\",\"code\":401}");
        }
    } else if (strcmp(r->path, "/api/v1/namespaces/ns/configmaps/deep") == 0) {
        /* An object nested 40 deep, past json-c's default depth of 32. */
        char body[512];
        size_t n = 0;
        n += (size_t)snprintf(body + n, sizeof(body) - n, "{\"metadata\":{\"name\":\"deep\"}");
        for (int i = 0; i < 40; i++)
            n += (size_t)snprintf(body + n, sizeof(body) - n, ",\"a\":{\"b\":1");
        for (int i = 0; i < 41; i++)
            n += (size_t)snprintf(body + n, sizeof(body) - n, "}");
        mock_reply(fd, 200, NULL, body);
    } else if (strcmp(r->path, "/big") == 0) {
        static char big[4096];
        memset(big, 'x', sizeof(big) - 1);
        mock_reply(fd, 200, NULL, big);
    } else if (strcmp(r->path, "/hangup") == 0) {
        /* Closes without answering: the request may or may not have been acted on. */
        if (strcmp(r->method, "GET") == 0 && r->hit >= 2)
            mock_reply(fd, 200, NULL, "{}");
    } else if (strcmp(r->path, "/stream") == 0) {
        mock_stream_start(fd, 200);
        for (int i = 0; i < 5; i++) {
            char line[64];
            int n = snprintf(line, sizeof(line), "line %d\n", i);
            mock_write_all(fd, line, (size_t)n);
            nanosleep(&(struct timespec){0, 20000000}, NULL);
        }
    } else {
        mock_reply(fd, 404, NULL, "{\"kind\":\"Status\",\"code\":404}");
    }
}

struct outcome {
    int done;
    int rc;
    long code;
    int attempts;
    int http_version;
    char body[8192];
    char err[TELO_ERR_MSG_MAX];
    char streamed[1024];
    size_t streamed_len;
};

static int setup(void **state)
{
    struct mock_client *f = calloc(1, sizeof(*f));
    /* The server's fork copies token_file: the route rewrites the token through it. */
    if (f == NULL || mock_client_prepare(f, "transport", "old\n") != 0 ||
        snprintf(token_file, sizeof(token_file), "%s", f->token) < 0 ||
        mock_client_connect(
            f, route, &(struct kube_transport_opts){.max_body = 1024, .max_retries = 3}) != 0) {
        mock_client_free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    mock_client_free(*state);
    return 0;
}

static void on_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    struct outcome *o = ud;
    o->done++;
    o->rc = resp->rc;
    o->code = resp->code;
    o->attempts = resp->attempts;
    o->http_version = resp->http_version;
    snprintf(o->body, sizeof(o->body), "%.*s", (int)resp->body->len,
             resp->body->data != NULL ? resp->body->data : "");
    if (resp->rc != 0)
        snprintf(o->err, sizeof(o->err), "%s", resp->err->msg);
}

static int on_data(struct kube_call *call, const char *data, size_t len, void *ud)
{
    (void)call;
    struct outcome *o = ud;
    if (o->streamed_len + len < sizeof(o->streamed)) {
        memcpy(o->streamed + o->streamed_len, data, len);
        o->streamed_len += len;
        o->streamed[o->streamed_len] = '\0';
    }
    return 0;
}

static void run(struct mock_client *f, const char *method, const char *path, const char *body,
                struct outcome *o)
{
    memset(o, 0, sizeof(*o));
    struct kube_request req = {.method = method,
                               .path = path,
                               .body = body,
                               .body_len = body != NULL ? strlen(body) : 0,
                               .content_type =
                                   body != NULL ? "application/merge-patch+json" : NULL};
    struct telo_err err;
    struct kube_call *c = kube_transport_submit(f->t, &req, on_done, NULL, o, &err);
    assert_non_null(c);
    ev_run(f->loop, 0);
    assert_int_equal(o->done, 1);
}

static void plain_get_and_patch(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "GET", "/ok", NULL, &o);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.code, 200);
    assert_int_equal(o.attempts, 1);
    assert_int_equal(o.http_version, 1);
    assert_string_equal(o.body, "{\"method\":\"GET\",\"ua\":1,\"ct\":\"\"}");
    run(f, "PATCH", "/ok", "{}", &o);
    assert_string_equal(o.body, "{\"method\":\"PATCH\",\"ua\":1,\"ct\":\"merge\"}");
    run(f, "POST", "/echo", "{\"a\":1}", &o);
    assert_int_equal(o.code, 201);
    assert_string_equal(o.body, "{\"a\":1}");
}

static void retries_429_with_retry_after(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "POST", "/429", "{}", &o);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.code, 200);
    assert_int_equal(o.attempts, 3);
}

static void gives_up_on_503_after_max_retries(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "GET", "/503", NULL, &o);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.code, 503);
    assert_int_equal(o.attempts, 4);
}

static void reauthenticates_once_after_401(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "GET", "/auth", NULL, &o);
    assert_int_equal(o.code, 200);
    assert_int_equal(o.attempts, 2);
    assert_string_equal(o.body, "{\"auth\":\"new\"}");
}

static void caps_the_body(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "GET", "/big", NULL, &o);
    assert_int_equal(o.rc, -TELO_ETOOBIG);
    assert_non_null(strstr(o.err, "larger than 1024 bytes"));
}

static void hangup_retried_for_get_not_for_post(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "POST", "/hangup", "{}", &o);
    assert_int_equal(o.rc, -TELO_EIO);
    assert_int_equal(o.attempts, 1);
    run(f, "GET", "/hangup", NULL, &o);
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.code, 200);
    assert_int_equal(o.attempts, 2);
}

static void streams_body_to_on_data(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    memset(&o, 0, sizeof(o));
    struct kube_request req = {.method = "GET", .path = "/stream", .streaming = 1};
    struct telo_err err;
    assert_non_null(kube_transport_submit(f->t, &req, on_done, on_data, &o, &err));
    ev_run(f->loop, 0);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.code, 200);
    assert_string_equal(o.streamed, "line 0\nline 1\nline 2\nline 3\nline 4\n");
    assert_string_equal(o.body, ""); /* a 2xx stream is never buffered */
}

static void cancel_means_no_callback(void **state)
{
    struct mock_client *f = *state;
    struct outcome o, o2;
    memset(&o, 0, sizeof(o));
    memset(&o2, 0, sizeof(o2));
    struct kube_request req = {.method = "GET", .path = "/stream", .streaming = 1};
    struct kube_request req2 = {.method = "GET", .path = "/ok"};
    struct telo_err err;
    struct kube_call *c = kube_transport_submit(f->t, &req, on_done, on_data, &o, &err);
    assert_non_null(kube_transport_submit(f->t, &req2, on_done, NULL, &o2, &err));
    kube_call_cancel(c);
    ev_run(f->loop, 0);
    assert_int_equal(o.done, 0);
    assert_int_equal(o2.done, 1);
}

/* The TCP_USER_TIMEOUT of this process's connection to port, or -1 when there is none. */
static int user_timeout_of_connection_to(int port)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        unsigned timeout = 0;
        socklen_t tlen = sizeof(timeout);
        if (e->d_name[0] != '.' && getpeername(fd, (struct sockaddr *)&peer, &plen) == 0 &&
            peer.sin_family == AF_INET && ntohs(peer.sin_port) == port &&
            getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, &tlen) == 0)
            found = (int)timeout;
    }
    closedir(d);
    return found;
}

struct probe {
    int port;
    int user_timeout_ms;
};

/* On the stream's first bytes, while its connection is open: reads its TCP_USER_TIMEOUT, then
 * ends the stream. */
static int probe_connection(struct kube_call *call, const char *data, size_t len, void *ud)
{
    (void)call;
    (void)data;
    (void)len;
    struct probe *p = ud;
    p->user_timeout_ms = user_timeout_of_connection_to(p->port);
    return -1;
}

static void probe_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    (void)resp;
    (void)ud;
}

/* A half-open connection to the API server (the peer gone without a reset) with requests
 * unacknowledged is dropped after TCP_USER_TIMEOUT, not tcp_retries2's ~15 minutes: Linux sends
 * no keepalive probes while sent data waits for an ACK, and a request's timeout only resets its
 * HTTP/2 stream. */
static void connections_give_up_on_unacknowledged_data(void **state)
{
    struct mock_client *f = *state;
    struct probe p = {.port = f->server.port, .user_timeout_ms = -2};
    struct kube_request req = {.method = "GET", .path = "/stream", .streaming = 1};
    struct telo_err err;
    assert_non_null(kube_transport_submit(f->t, &req, probe_done, probe_connection, &p, &err));
    ev_run(f->loop, 0);
    assert_int_equal(p.user_timeout_ms, 30000);
}

static int released;

static void rest_never(const struct kube_result *res, void *ud)
{
    (void)res;
    (void)ud;
    fail_msg("a cancelled GET answered");
}

static void count_release(void *ud)
{
    (void)ud;
    released++;
}

/* What a caller allocated for on_done is released when on_done never comes: the REST verbs'
 * context leaked on every cancelled admission lookup before (LeakSanitizer at the gateway's stop,
 * make test 2026-12-02). A finished call releases nothing: on_done had it. */
static void a_call_ended_without_on_done_releases_its_data(void **state)
{
    struct mock_client *f = *state;
    struct outcome o, o2;
    memset(&o, 0, sizeof(o));
    memset(&o2, 0, sizeof(o2));
    released = 0;
    struct kube_request req = {.method = "GET", .path = "/stream", .streaming = 1};
    struct kube_request req2 = {.method = "GET", .path = "/ok"};
    struct telo_err err;
    struct kube_call *c = kube_transport_submit(f->t, &req, on_done, on_data, &o, &err);
    struct kube_call *c2 = kube_transport_submit(f->t, &req2, on_done, NULL, &o2, &err);
    assert_non_null(c);
    assert_non_null(c2);
    kube_call_set_release(c, count_release);
    kube_call_set_release(c2, count_release);
    kube_call_cancel(c);
    assert_int_equal(released, 1);
    ev_run(f->loop, 0);
    assert_int_equal(o2.done, 1);
    assert_int_equal(released, 1);

    /* Through the REST layer: a cancelled GET frees its context (valgrind and ASan see it). */
    const struct kube_ref ref = {
        .version = "v1", .resource = "pods", .namespace = "ns", .name = "x"};
    kube_call_cancel(kube_rest_get(f->t, &ref, rest_never, NULL, &err));
}

static void rest_deep(const struct kube_result *res, void *ud)
{
    int *got = ud;
    *got = res->rc == 0 && res->object != NULL ? 1 : -1;
}

/* A GET's answer nests as deep as a watch event may (JGET_OBJECT_MAX_DEPTH): one decoder refusing
 * what another took would leave the object unreadable. */
static void a_get_answer_nested_past_json_c_default_depth_parses(void **state)
{
    struct mock_client *f = *state;
    const struct kube_ref ref = {
        .version = "v1", .resource = "configmaps", .namespace = "ns", .name = "deep"};
    struct telo_err err;
    int got = 0;
    assert_non_null(kube_rest_get(f->t, &ref, rest_deep, &got, &err));
    ev_run(f->loop, 0);
    assert_int_equal(got, 1);
}

static void counts_requests_by_verb_and_code(void **state)
{
    struct mock_client *f = *state;
    struct outcome o;
    run(f, "GET", "/ok", NULL, &o);
    run(f, "GET", "/ok", NULL, &o);
    run(f, "GET", "/nope", NULL, &o);
    const struct kube_metrics *m = kube_transport_metrics(f->t);
    unsigned long ok = 0, notfound = 0;
    for (int i = 0; i < m->nseries; i++) {
        if (strcmp(m->series[i].verb, "GET") == 0 && m->series[i].code == 200)
            ok = m->series[i].count;
        if (strcmp(m->series[i].verb, "GET") == 0 && m->series[i].code == 404)
            notfound = m->series[i].count;
    }
    assert_int_equal(ok, 2);
    assert_int_equal(notfound, 1);
    /* Connection: close on every answer, so each request opened one. */
    assert_int_equal(m->connects, 3);
    assert_int_equal(m->in_flight, 0);
}

static void connection_refused_is_retried_then_reported(void **state)
{
    (void)state;
    struct mock_server dead = {0};
    /* Find a free port and leave it closed. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    dead.port = ntohs(a.sin_port);
    char kc[] = "/tmp/telo-test-refused-kubeconfig";
    mock_kubeconfig(kc, dead.port, token_file);
    struct kube_config_options co = {.kubeconfig = kc};
    struct kube_config *cfg = NULL;
    struct telo_err err;
    assert_int_equal(kube_config_load(&co, &cfg, &err), 0);
    struct ev_loop *loop = ev_loop_new(0);
    struct kube_transport_opts to = {.max_retries = 2};
    struct kube_transport *t = kube_transport_new(loop, cfg, &to, &err);
    struct outcome o;
    memset(&o, 0, sizeof(o));
    struct kube_request req = {.method = "POST", .path = "/x", .body = "{}", .body_len = 2};
    assert_non_null(kube_transport_submit(t, &req, on_done, NULL, &o, &err));
    ev_run(loop, 0);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.rc, -TELO_EIO);
    assert_int_equal(o.code, 0);
    assert_int_equal(o.attempts, 3);
    assert_non_null(strstr(o.err, "POST /x"));
    kube_transport_free(t);
    ev_loop_destroy(loop);
    kube_config_free(cfg);
    unlink(kc);
}

static void rejects_bad_requests(void **state)
{
    struct mock_client *f = *state;
    struct kube_request req = {.method = "GET", .path = "no-slash"};
    struct telo_err err;
    struct outcome o;
    assert_null(kube_transport_submit(f->t, &req, on_done, NULL, &o, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    struct kube_request stream = {.method = "GET", .path = "/s", .streaming = 1};
    assert_null(kube_transport_submit(f->t, &stream, on_done, NULL, &o, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(retry_429_waits_retry_after_then_gives_up),
        cmocka_unit_test(retry_after_is_capped),
        cmocka_unit_test(retry_5xx_only_with_retry_after),
        cmocka_unit_test(retry_connection_errors_only_when_safe),
        cmocka_unit_test_setup_teardown(plain_get_and_patch, setup, teardown),
        cmocka_unit_test_setup_teardown(retries_429_with_retry_after, setup, teardown),
        cmocka_unit_test_setup_teardown(gives_up_on_503_after_max_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(reauthenticates_once_after_401, setup, teardown),
        cmocka_unit_test_setup_teardown(caps_the_body, setup, teardown),
        cmocka_unit_test_setup_teardown(hangup_retried_for_get_not_for_post, setup, teardown),
        cmocka_unit_test_setup_teardown(streams_body_to_on_data, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_means_no_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(connections_give_up_on_unacknowledged_data, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_call_ended_without_on_done_releases_its_data, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_get_answer_nested_past_json_c_default_depth_parses, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(counts_requests_by_verb_and_code, setup, teardown),
        cmocka_unit_test_setup_teardown(connection_refused_is_retried_then_reported, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(rejects_bad_requests, setup, teardown),
    };
    telo_log_set_level(TELO_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

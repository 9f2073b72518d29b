/* Tests for pkg/httpd/server.c and pkg/controller/endpoints.c: a server on port 0 of a fresh
 * libev loop, driven by a raw non-blocking socket client on the same loop, so every byte sent and
 * received is the test's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "controller/endpoints.h"
#include "controller/metrics.h"
#include "httpd/server.h"
#include "util/buf.h"
#include "util/err.h"

#include <ev.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a raw HTTP client on the loop ---- */

struct client {
    struct ev_io io;
    struct ev_timer timer;
    const char *request;
    size_t request_len;
    size_t sent;
    struct buf response;
    int done;
    int timed_out;
};

static void client_finish(struct ev_loop *loop, struct client *c)
{
    c->done = 1;
    ev_io_stop(loop, &c->io);
    ev_timer_stop(loop, &c->timer);
    ev_break(loop, EVBREAK_ONE);
}

static void client_io(struct ev_loop *loop, struct ev_io *w, int revents)
{
    struct client *c = w->data;
    if ((revents & EV_WRITE) && c->sent < c->request_len) {
        ssize_t n = send(w->fd, c->request + c->sent, c->request_len - c->sent, MSG_NOSIGNAL);
        if (n > 0)
            c->sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            c->sent = c->request_len; /* the server hung up on us: read what it said */
        if (c->sent == c->request_len) {
            ev_io_stop(loop, w);
            ev_io_set(w, w->fd, EV_READ);
            ev_io_start(loop, w);
        }
    }
    if (revents & EV_READ) {
        char chunk[65536];
        ssize_t n = recv(w->fd, chunk, sizeof(chunk), 0);
        if (n > 0) {
            assert_int_equal(buf_append(&c->response, chunk, (size_t)n), 0);
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            client_finish(loop, c);
        }
    }
}

static void client_timeout(struct ev_loop *loop, struct ev_timer *w, int revents)
{
    (void)revents;
    struct client *c = w->data;
    c->timed_out = 1;
    client_finish(loop, c);
}

/* Sends request (all of it, then reads) and returns what came back until the server closed the
 * connection; the caller releases *response. Fails the test on a 5 s timeout. */
static void exchange(struct ev_loop *loop, int port, const char *request, size_t len,
                     struct buf *response)
{
    struct client c = {.request = request, .request_len = len};
    buf_init(&c.response, (size_t)64 * 1024 * 1024);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    ev_io_init(&c.io, client_io, fd, EV_READ | EV_WRITE);
    c.io.data = &c;
    ev_io_start(loop, &c.io);
    ev_timer_init(&c.timer, client_timeout, 60.0, 0.0);
    c.timer.data = &c;
    ev_timer_start(loop, &c.timer);
    while (!c.done)
        ev_run(loop, 0);
    close(fd);
    if (c.timed_out)
        fprintf(stderr, "timed out; received so far: [%s]\n",
                c.response.data ? c.response.data : "");
    assert_false(c.timed_out);
    *response = c.response;
}

static void exchange_str(struct ev_loop *loop, int port, const char *request, struct buf *response)
{
    exchange(loop, port, request, strlen(request), response);
}

/* The status code of the first response in text, or -1. */
static int status_of(const char *text)
{
    int status = -1;
    if (text == NULL || sscanf(text, "HTTP/1.1 %d", &status) != 1)
        return -1;
    return status;
}

/* The body of the first response: what follows the first blank line. */
static const char *body_of(const char *text)
{
    const char *p = text ? strstr(text, "\r\n\r\n") : NULL;
    return p ? p + 4 : "";
}

/* The value of a header of the first response (case-insensitive name), copied into out. */
static int header_of(const char *text, const char *name, char *out, size_t cap)
{
    const char *end = strstr(text, "\r\n\r\n");
    size_t nlen = strlen(name);
    for (const char *line = strstr(text, "\r\n"); line != NULL && line < end;
         line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, nlen) == 0 && h[nlen] == ':') {
            const char *v = h + nlen + 1;
            while (*v == ' ')
                v++;
            size_t n = strcspn(v, "\r");
            snprintf(out, cap, "%.*s", (int)n, v);
            return 0;
        }
    }
    return -1;
}

/* ---- fixtures ---- */

struct fixture {
    struct ev_loop *loop;
    struct httpd_server *srv;
    int port;
};

static int hello(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)user;
    if (req->query[0] != '\0')
        return buf_printf(&resp->body, "hello %s\n", req->query);
    return httpd_response_text(resp, 200, NULL, "hello\n");
}

static int big(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)req;
    size_t n = *(size_t *)user;
    for (size_t i = 0; i < n; i++) {
        int rc = buf_append(&resp->body, (i % 64 == 63) ? "\n" : "x", 1);
        if (rc < 0)
            return rc;
    }
    snprintf(resp->content_type, sizeof(resp->content_type), "application/octet-stream");
    return 0;
}

static int failing(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)req;
    (void)user;
    buf_append_str(&resp->body, "half written");
    return -TELO_EIO;
}

static size_t big_size = 1000000;

static int counted;

static int count(const struct httpd_request *req, struct httpd_response *resp, void *user)
{
    (void)req;
    (void)user;
    counted++;
    return httpd_response_text(resp, 200, NULL, "counted\n");
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err = {0};
    struct httpd_config cfg = {.address = "127.0.0.1", .port = 0, .max_request_bytes = 1024};
    f->srv = httpd_new(f->loop, &cfg, &err);
    assert_non_null(f->srv);
    assert_int_equal(httpd_route(f->srv, "/hello", hello, NULL, NULL, &err), 0);
    assert_int_equal(httpd_route(f->srv, "/big", big, &big_size, NULL, &err), 0);
    assert_int_equal(httpd_route(f->srv, "/fail", failing, NULL, NULL, &err), 0);
    assert_int_equal(httpd_route(f->srv, "/count", count, NULL, NULL, &err), 0);
    assert_int_equal(httpd_port(f->srv), -1);
    assert_int_equal(httpd_start(f->srv, &err), 0);
    f->port = httpd_port(f->srv);
    assert_true(f->port > 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    httpd_free(f->srv);
    ev_loop_destroy(f->loop);
    free(f);
    return 0;
}

/* ---- the server ---- */

static void get_returns_the_handlers_body(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    assert_string_equal(body_of(r.data), "hello\n");
    char v[128];
    assert_int_equal(header_of(r.data, "content-type", v, sizeof(v)), 0);
    assert_string_equal(v, "text/plain; charset=utf-8");
    assert_int_equal(header_of(r.data, "content-length", v, sizeof(v)), 0);
    assert_string_equal(v, "6");
    buf_release(&r);
}

static void query_reaches_the_handler(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port,
                 "GET /hello?name=telo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r);
    assert_int_equal(status_of(r.data), 200);
    assert_string_equal(body_of(r.data), "hello name=telo\n");
    buf_release(&r);
}

static void unknown_path_is_404(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 404);
    assert_string_equal(body_of(r.data), "not found\n");
    buf_release(&r);
    /* Exact match only: no prefix or trailing-slash leniency. */
    exchange_str(f->loop, f->port, "GET /hello/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 404);
    buf_release(&r);
}

static void other_methods_are_405_with_allow(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    /* The body is read and dropped, so the connection stays usable for the next request. */
    exchange_str(f->loop, f->port,
                 "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"
                 "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 405);
    char v[64];
    assert_int_equal(header_of(r.data, "allow", v, sizeof(v)), 0);
    assert_string_equal(v, "GET, HEAD");
    assert_memory_equal(body_of(r.data), "method not allowed\n", 19);
    const char *second = strstr(body_of(r.data), "HTTP/1.1 ");
    assert_non_null(second);
    assert_int_equal(status_of(second), 200);
    assert_string_equal(body_of(second), "hello\n");
    buf_release(&r);
    /* A body larger than a request may be is not read: the connection is closed unanswered. */
    exchange_str(f->loop, f->port,
                 "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabcde", &r);
    assert_int_equal(r.len, 0);
    buf_release(&r);
    exchange_str(f->loop, f->port, "DELETE /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 405);
    buf_release(&r);
}

static void head_sends_headers_only(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    char v[64];
    assert_int_equal(header_of(r.data, "content-length", v, sizeof(v)), 0);
    assert_string_equal(v, "6");
    assert_string_equal(body_of(r.data), "");
    buf_release(&r);
}

static void oversize_request_is_refused(void **state)
{
    struct fixture *f = *state;
    struct buf req;
    buf_init(&req, 1 << 20);
    buf_append_str(&req, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Filler: ");
    for (int i = 0; i < 4000; i++)
        buf_append_str(&req, "y");
    buf_append_str(&req, "\r\nConnection: close\r\n\r\n");
    struct buf r;
    exchange(f->loop, f->port, req.data, req.len, &r);
    /* Either an error status or a closed connection, never the handler's answer. */
    int status = status_of(r.data);
    assert_true(status == -1 || status >= 400);
    assert_null(r.data ? strstr(r.data, "hello") : NULL);
    buf_release(&r);
    buf_release(&req);

    /* The server is still serving. */
    exchange_str(f->loop, f->port, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    buf_release(&r);
}

static void large_body_arrives_intact(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r);
    assert_int_equal(status_of(r.data), 200);
    const char *body = body_of(r.data);
    assert_int_equal(strlen(body), big_size);
    assert_int_equal(body[63], '\n');
    assert_int_equal(body[64], 'x');
    buf_release(&r);
}

static void handler_error_is_500(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /fail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 500);
    assert_string_equal(body_of(r.data), "internal server error\n");
    buf_release(&r);
}

static void keep_alive_serves_pipelined_requests(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port,
                 "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                 "GET /hello?again HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    const char *second = strstr(body_of(r.data), "HTTP/1.1 ");
    assert_non_null(second);
    assert_int_equal(status_of(second), 200);
    assert_string_equal(body_of(second), "hello again\n");
    buf_release(&r);
}

/* A client pipelining requests whose answers all fit in the socket: the server answers a few per
 * turn and lets the loop poll between turns, where before one callback answered every request
 * it could read, as long as the client kept sending (a /metrics each, the loop held). */
static int dial_from(const char *from, int port);

static void pipelined_requests_are_answered_a_few_per_turn(void **state)
{
    struct fixture *f = *state;
    int fd = dial_from("127.0.0.1", f->port);
    static const char req[] = "GET /count HTTP/1.1\r\nHost: x\r\n\r\n";
    enum { N = 200 };
    struct buf all;
    buf_init(&all, sizeof(req) * N);
    for (int i = 0; i < N; i++)
        assert_int_equal(buf_append_str(&all, req), 0);
    assert_int_equal(write(fd, all.data, all.len), (ssize_t)all.len);
    buf_release(&all);
    counted = 0;
    int most = 0;
    for (int pass = 0; pass < 2000 && counted < N; pass++) {
        int before = counted;
        ev_run(f->loop, EVRUN_ONCE | EVRUN_NOWAIT);
        if (counted - before > most)
            most = counted - before;
    }
    assert_int_equal(counted, N); /* all answered, in the end */
    assert_in_range(most, 1, 8);  /* 4 a turn; at most two turns in a pass */
    close(fd);
}

/* The path is percent-decoded before the route lookup; a bad escape, an escaped NUL or a
 * malformed request line is a 400 and a close; HTTP/1.0 gets its answer and a close. */
static void odd_requests(void **state)
{
    struct fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /hel%6Co HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    buf_release(&r);
    const char *bad[] = {"GET /hello%0 HTTP/1.1\r\nHost: x\r\n\r\n",
                         "GET /hello%00 HTTP/1.1\r\nHost: x\r\n\r\n",
                         "GET  /hello HTTP/1.1\r\nHost: x\r\n\r\n",
                         "GET /hello HTTP/1.1\r\nBad header\r\n\r\n", "GET hello HTTP/1.1\r\n\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        exchange_str(f->loop, f->port, bad[i], &r); /* returns once the server closed */
        assert_int_equal(status_of(r.data), 400);
        buf_release(&r);
    }
    exchange_str(f->loop, f->port, "GET /hello HTTP/1.0\r\n\r\n", &r);
    assert_int_equal(status_of(r.data), 200);
    assert_string_equal(body_of(r.data), "hello\n");
    buf_release(&r);
}

/* Freeing the server with a request half sent closes it without leaks or loop leftovers. */
static void free_with_a_connection_open(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err = {0};
    struct httpd_server *srv = httpd_new(loop, NULL, &err);
    assert_non_null(srv);
    assert_int_equal(httpd_start(srv, &err), 0);
    int port = httpd_port(srv);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(send(fd, "GET /he", 7, 0), 7);
    for (int i = 0; i < 20; i++)
        ev_run(loop, EVRUN_NOWAIT);
    httpd_free(srv);
    /* Nothing left on the loop: it would otherwise keep this run from returning. */
    assert_int_equal(ev_run(loop, EVRUN_NOWAIT), 0);
    char c;
    assert_true(recv(fd, &c, 1, 0) <= 0);
    close(fd);
    ev_loop_destroy(loop);
}

static void config_and_route_errors(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err = {0};
    struct httpd_config cfg = {.tls_cert_path = "/x.pem"};
    assert_null(httpd_new(loop, &cfg, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    assert_non_null(strstr(err.msg, "only the certificate"));
    cfg = (struct httpd_config){.port = 70000};
    assert_null(httpd_new(loop, &cfg, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    cfg = (struct httpd_config){.max_request_bytes = 100000};
    assert_null(httpd_new(loop, &cfg, &err));
    assert_int_equal(err.code, TELO_EINVAL);

    struct httpd_server *srv = httpd_new(loop, NULL, &err);
    assert_non_null(srv);
    assert_int_equal(httpd_route(srv, "metrics", hello, NULL, NULL, &err), -TELO_EINVAL);
    assert_int_equal(httpd_route(srv, "/a?b", hello, NULL, NULL, &err), -TELO_EINVAL);
    assert_int_equal(httpd_route(srv, "/a", NULL, NULL, NULL, &err), -TELO_EINVAL);
    assert_int_equal(httpd_route(srv, "/a", hello, NULL, NULL, &err), 0);
    /* A failed registration still releases user: the caller never has to. */
    char *user = strdup("owned");
    assert_int_equal(httpd_route(srv, "/a", hello, user, free, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "already registered"));
    assert_int_equal(httpd_route(srv, "/b", hello, strdup("owned"), free, &err), 0);
    httpd_free(srv);
    httpd_free(NULL);
    ev_loop_destroy(loop);
}

static void port_in_use_is_an_io_error(void **state)
{
    struct fixture *f = *state;
    struct telo_err err = {0};
    struct httpd_config cfg = {.address = "127.0.0.1", .port = f->port};
    struct httpd_server *srv = httpd_new(f->loop, &cfg, &err);
    assert_non_null(srv);
    assert_int_equal(httpd_start(srv, &err), -TELO_EIO);
    assert_non_null(strstr(err.msg, "127.0.0.1"));
    assert_int_equal(httpd_port(srv), -1);
    httpd_free(srv);
    /* The first server is unharmed. */
    struct buf r;
    exchange_str(f->loop, f->port, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    buf_release(&r);
}

/* ---- /healthz, /readyz, /metrics ---- */

struct ops_fixture {
    struct ev_loop *loop;
    struct httpd_server *srv;
    struct metrics_registry *reg;
    struct metrics_series *reconciles;
    int synced;
    int port;
};

static int caches_synced(void *user, struct buf *reason)
{
    struct ops_fixture *f = user;
    if (f->synced)
        return 1;
    buf_append_str(reason, "informer telosessions: not synced");
    return 0;
}

static int ops_setup_with(void **state, size_t max_response)
{
    struct ops_fixture *f = calloc(1, sizeof(*f));
    struct telo_err err = {0};
    f->loop = ev_loop_new(EVFLAG_AUTO);
    f->reg = metrics_registry_new();
    struct metrics_desc desc = {.type = METRICS_COUNTER,
                                .name = "controller_runtime_reconcile_total",
                                .help = "Total number of reconciliations per controller",
                                .labels = (const char *const[]){"controller", "result", NULL}};
    f->reconciles = metrics_series(metrics_register(f->reg, &desc, &err),
                                   (const char *const[]){"telosession", "success"}, &err);
    assert_non_null(f->reconciles);
    struct httpd_config cfg = {.address = "127.0.0.1", .max_response_bytes = max_response};
    f->srv = httpd_new(f->loop, &cfg, &err);
    assert_int_equal(endpoints_register(f->srv, f->reg, caches_synced, f, &err), 0);
    assert_int_equal(httpd_start(f->srv, &err), 0);
    f->port = httpd_port(f->srv);
    *state = f;
    return 0;
}

static int ops_setup(void **state)
{
    return ops_setup_with(state, 0);
}

static int ops_teardown(void **state)
{
    struct ops_fixture *f = *state;
    httpd_free(f->srv);
    metrics_registry_free(f->reg);
    ev_loop_destroy(f->loop);
    free(f);
    return 0;
}

static void healthz_is_ok(void **state)
{
    struct ops_fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    assert_string_equal(body_of(r.data), "ok\n");
    buf_release(&r);
}

static void readyz_follows_the_callback(void **state)
{
    struct ops_fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 503);
    assert_string_equal(body_of(r.data), "informer telosessions: not synced\n");
    buf_release(&r);
    f->synced = 1;
    exchange_str(f->loop, f->port, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    assert_string_equal(body_of(r.data), "ok\n");
    buf_release(&r);
}

static void metrics_serves_the_registry(void **state)
{
    struct ops_fixture *f = *state;
    struct buf r;
    metrics_counter_add(f->reconciles, 2);
    exchange_str(f->loop, f->port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    char v[128];
    assert_int_equal(header_of(r.data, "content-type", v, sizeof(v)), 0);
    assert_string_equal(v, "text/plain; version=0.0.4; charset=utf-8");
    assert_string_equal(body_of(r.data),
                        "# HELP controller_runtime_reconcile_total Total number of "
                        "reconciliations per controller\n"
                        "# TYPE controller_runtime_reconcile_total counter\n"
                        "controller_runtime_reconcile_total{controller=\"telosession\","
                        "result=\"success\"} 2\n");
    buf_release(&r);
    /* The counter moves between scrapes. */
    metrics_counter_add(f->reconciles, 1);
    exchange_str(f->loop, f->port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_non_null(strstr(body_of(r.data), "result=\"success\"} 3\n"));
    buf_release(&r);
    exchange_str(f->loop, f->port, "POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 405);
    buf_release(&r);
}

static void metrics_larger_than_the_bound_is_500(void **state)
{
    struct ops_fixture *f = *state;
    struct buf r;
    exchange_str(f->loop, f->port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 500);
    buf_release(&r);
    exchange_str(f->loop, f->port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 &r);
    assert_int_equal(status_of(r.data), 200);
    buf_release(&r);
}

static int ops_setup_small(void **state)
{
    return ops_setup_with(state, 64);
}

/* ---- slow and greedy clients ---- */

static void loop_break(struct ev_loop *loop, struct ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ONE);
}

/* Runs loop for seconds of wall time, so the server accepts, reads and times out meanwhile. */
static void run_for(struct ev_loop *loop, double seconds)
{
    struct ev_timer t;
    ev_timer_init(&t, loop_break, seconds, 0.0);
    ev_timer_start(loop, &t);
    ev_run(loop, 0);
    ev_timer_stop(loop, &t);
}

/* A blocking TCP connection to 127.0.0.1:port from source address from (e.g. "127.0.0.2"; the
 * whole of 127/8 is loopback on Linux, so each is a distinct peer to the server). */
static int dial_from(const char *from, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, from, &src.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* 1 when the server has closed fd (end of stream or reset), 0 while it is open; counts the bytes
 * the server sent into *received. */
static int peer_closed(int fd, size_t *received)
{
    char chunk[4096];
    for (;;) {
        ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n > 0) {
            *received += (size_t)n;
            continue;
        }
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

/* Sends first, then one byte of drip every 0.1 s; returns the seconds until the server closed
 * the connection, or -1 when it was still open after 3 s. Fails the test if it answered. */
static double seconds_until_closed(struct ev_loop *loop, int port, const char *first,
                                   const char *drip)
{
    int fd = dial_from("127.0.0.1", port);
    assert_int_equal(send(fd, first, strlen(first), MSG_NOSIGNAL), (ssize_t)strlen(first));
    ev_now_update(loop);
    double start = ev_now(loop);
    size_t received = 0;
    double closed_after = -1;
    for (size_t i = 0; i < 30; i++) {
        run_for(loop, 0.1);
        if (peer_closed(fd, &received)) {
            closed_after = ev_now(loop) - start;
            break;
        }
        (void)send(fd, drip + i % strlen(drip), 1, MSG_NOSIGNAL);
    }
    assert_int_equal(received, 0);
    close(fd);
    return closed_after;
}

/* A body (or a head) dripped a byte at a time does not keep its request alive past the request
 * deadline; before the deadline existed each body byte restarted the 30 s idle timer, which
 * held a connection for as long as the client kept dripping. The idle time between keep-alive
 * requests is not the request's: a second request after a pause longer than the deadline is
 * served. */
static void dripped_requests_hit_the_deadline(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err = {0};
    struct httpd_config cfg = {.address = "127.0.0.1", .request_timeout_s = -1};
    assert_null(httpd_new(loop, &cfg, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    cfg.request_timeout_s = 0.3;
    struct httpd_server *srv = httpd_new(loop, &cfg, &err);
    assert_non_null(srv);
    assert_int_equal(httpd_route(srv, "/hello", hello, NULL, NULL, &err), 0);
    assert_int_equal(httpd_start(srv, &err), 0);
    int port = httpd_port(srv);

    double body = seconds_until_closed(
        loop, port, "GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 8000\r\n\r\n", "x");
    assert_true(body > 0 && body < 2.0);
    double head =
        seconds_until_closed(loop, port, "GET /hello HTTP/1.1\r\nHost: x\r\n", "X-A: b\r\n");
    assert_true(head > 0 && head < 2.0);

    int fd = dial_from("127.0.0.1", port);
    const char *req = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t received = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
        run_for(loop, 0.5);
        assert_false(peer_closed(fd, &received));
    }
    assert_true(received > 0 && received % 2 == 0); /* two identical answers */
    close(fd);
    httpd_free(srv);
    ev_loop_destroy(loop);
}

/* One address gets HTTPD_MAX_CONNS_PER_PEER connections and the rest are closed at accept, so
 * it cannot take all of the server's connections: another address is still answered. Before the
 * per-peer cap, 256 idle connections from one address left none for anybody else. */
static void one_peer_cannot_take_every_connection(void **state)
{
    struct ops_fixture *f = *state;
    enum { greedy = 256 };
    int fds[greedy];
    for (int i = 0; i < greedy; i++) {
        fds[i] = dial_from("127.0.0.1", f->port);
        /* Keep the listen backlog drained, as a running server does. */
        ev_run(f->loop, EVRUN_NOWAIT);
    }
    run_for(f->loop, 0.5);
    int open = 0;
    for (int i = 0; i < greedy; i++) {
        size_t received = 0;
        open += !peer_closed(fds[i], &received);
    }
    assert_int_equal(open, HTTPD_MAX_CONNS_PER_PEER);

    struct client c = {.request = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"};
    c.request_len = strlen(c.request);
    buf_init(&c.response, 1 << 20);
    int fd = dial_from("127.0.0.2", f->port);
    assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    ev_io_init(&c.io, client_io, fd, EV_READ | EV_WRITE);
    c.io.data = &c;
    ev_io_start(f->loop, &c.io);
    ev_timer_init(&c.timer, client_timeout, 60.0, 0.0);
    c.timer.data = &c;
    ev_timer_start(f->loop, &c.timer);
    while (!c.done)
        ev_run(f->loop, 0);
    close(fd);
    assert_int_equal(status_of(c.response.data), 200);
    buf_release(&c.response);
    for (int i = 0; i < greedy; i++)
        close(fds[i]);
}

/* ---- TLS ---- */

/* Writes a fresh self-signed P-256 certificate for 127.0.0.1 and its key as PEM files. */
static void write_self_signed(const char *cert_path, const char *key_path)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    assert_non_null(key);
    X509 *x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1, -1,
                               0);
    X509_set_issuer_name(x, name);
    assert_true(X509_sign(x, key, EVP_sha256()) > 0);
    FILE *f = fopen(cert_path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, x), 1);
    fclose(f);
    f = fopen(key_path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(key);
}

struct tls_client {
    struct ev_io io;
    struct ev_timer timer;
    SSL *ssl;
    const char *request;
    size_t sent;
    struct buf response;
    int done;
};

static void tls_client_finish(struct ev_loop *loop, struct tls_client *c)
{
    c->done = 1;
    ev_io_stop(loop, &c->io);
    ev_timer_stop(loop, &c->timer);
    ev_break(loop, EVBREAK_ONE);
}

/* One step of handshake, write or read; waits for whatever OpenSSL says it needs next. */
static void tls_client_io(struct ev_loop *loop, struct ev_io *w, int revents)
{
    (void)revents;
    struct tls_client *c = w->data;
    int rc;
    size_t len = strlen(c->request);
    if (c->sent < len) {
        rc = SSL_write(c->ssl, c->request + c->sent, (int)(len - c->sent));
        if (rc > 0)
            c->sent += (size_t)rc;
    } else {
        char chunk[16384];
        rc = SSL_read(c->ssl, chunk, sizeof(chunk));
        if (rc > 0)
            assert_int_equal(buf_append(&c->response, chunk, (size_t)rc), 0);
    }
    int events = EV_READ;
    if (rc <= 0) {
        int e = SSL_get_error(c->ssl, rc);
        if (e == SSL_ERROR_WANT_WRITE)
            events = EV_WRITE;
        else if (e != SSL_ERROR_WANT_READ) {
            tls_client_finish(loop, c);
            return;
        }
    } else if (c->sent < len) {
        events = EV_WRITE;
    }
    ev_io_stop(loop, w);
    ev_io_set(w, w->fd, events);
    ev_io_start(loop, w);
}

static void tls_client_timeout(struct ev_loop *loop, struct ev_timer *w, int revents)
{
    (void)revents;
    tls_client_finish(loop, w->data);
    fail_msg("TLS exchange timed out");
}

static void tls_serves_https(void **state)
{
    (void)state;
    char dir[] = "/tmp/telo-httpd-tls-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cert[64], key[64];
    snprintf(cert, sizeof(cert), "%s/tls.crt", dir);
    snprintf(key, sizeof(key), "%s/tls.key", dir);
    write_self_signed(cert, key);

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err = {0};
    struct httpd_config cfg = {.address = "127.0.0.1", .tls_cert_path = cert, .tls_key_path = key};
    struct httpd_server *srv = httpd_new(loop, &cfg, &err);
    assert_int_equal(httpd_route(srv, "/hello", hello, NULL, NULL, &err), 0);
    assert_int_equal(httpd_start(srv, &err), 0);

    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_int_equal(SSL_CTX_load_verify_locations(ctx, cert, NULL), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    struct tls_client c = {.request =
                               "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"};
    buf_init(&c.response, 1 << 20);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)httpd_port(srv))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    c.ssl = SSL_new(ctx);
    SSL_set_fd(c.ssl, fd);
    SSL_set_connect_state(c.ssl);
    ev_io_init(&c.io, tls_client_io, fd, EV_WRITE);
    c.io.data = &c;
    ev_io_start(loop, &c.io);
    /* A hang guard, not a time limit: under valgrind on a busy machine the RSA handshake
     * alone has taken more than 5 s (make test, 2026-12-02). */
    ev_timer_init(&c.timer, tls_client_timeout, 60.0, 0.0);
    c.timer.data = &c;
    ev_timer_start(loop, &c.timer);
    while (!c.done)
        ev_run(loop, 0);

    assert_int_equal(SSL_get_verify_result(c.ssl), X509_V_OK);
    assert_int_equal(status_of(c.response.data), 200);
    assert_string_equal(body_of(c.response.data), "hello\n");
    buf_release(&c.response);
    SSL_free(c.ssl);
    SSL_CTX_free(ctx);
    close(fd);
    httpd_free(srv);

    /* A key file that is not there fails at start, naming the files. */
    cfg.tls_key_path = "/nonexistent/tls.key";
    srv = httpd_new(loop, &cfg, &err);
    assert_int_equal(httpd_start(srv, &err), -TELO_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/tls.key"));
    httpd_free(srv);
    ev_loop_destroy(loop);
    unlink(cert);
    unlink(key);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(get_returns_the_handlers_body, setup, teardown),
        cmocka_unit_test_setup_teardown(query_reaches_the_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_path_is_404, setup, teardown),
        cmocka_unit_test_setup_teardown(other_methods_are_405_with_allow, setup, teardown),
        cmocka_unit_test_setup_teardown(head_sends_headers_only, setup, teardown),
        cmocka_unit_test_setup_teardown(oversize_request_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(large_body_arrives_intact, setup, teardown),
        cmocka_unit_test_setup_teardown(handler_error_is_500, setup, teardown),
        cmocka_unit_test_setup_teardown(keep_alive_serves_pipelined_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(pipelined_requests_are_answered_a_few_per_turn, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(port_in_use_is_an_io_error, setup, teardown),
        cmocka_unit_test_setup_teardown(odd_requests, setup, teardown),
        cmocka_unit_test(free_with_a_connection_open),
        cmocka_unit_test(config_and_route_errors),
        cmocka_unit_test(tls_serves_https),
        cmocka_unit_test(dripped_requests_hit_the_deadline),
        cmocka_unit_test_setup_teardown(one_peer_cannot_take_every_connection, ops_setup,
                                        ops_teardown),
        cmocka_unit_test_setup_teardown(healthz_is_ok, ops_setup, ops_teardown),
        cmocka_unit_test_setup_teardown(readyz_follows_the_callback, ops_setup, ops_teardown),
        cmocka_unit_test_setup_teardown(metrics_serves_the_registry, ops_setup, ops_teardown),
        cmocka_unit_test_setup_teardown(metrics_larger_than_the_bound_is_500, ops_setup_small,
                                        ops_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

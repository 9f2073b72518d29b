/* Tests for pkg/gateway/server.c: what connections cost before their head, on a real listening
 * socket of a libev loop, driven by blocking loopback clients (no API server: nothing here gets
 * as far as admission). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_SOCKS 64

struct env {
    struct ev_loop *loop;
    struct gw_server *srv;
    int socks[MAX_SOCKS];
    int nsocks;
};

static struct env *env_new(const struct gw_server_config *cfg)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    e->loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err = {0};
    e->srv = gw_server_new(e->loop, NULL, cfg, &err);
    assert_non_null(e->srv);
    assert_int_equal(gw_server_start(e->srv, &err), 0);
    return e;
}

static void env_free(struct env *e)
{
    for (int i = 0; i < e->nsocks; i++)
        close(e->socks[i]);
    gw_server_free(e->srv);
    ev_loop_destroy(e->loop);
    free(e);
}

/* A connection from the loopback address from to port, kept until env_free. */
static int dial(struct env *e, const char *from, int port)
{
    assert_true(e->nsocks < MAX_SOCKS);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in local = {.sin_family = AF_INET};
    inet_pton(AF_INET, from, &local.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&local, sizeof(local)), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    e->socks[e->nsocks++] = fd;
    return fd;
}

/* Whether the gateway has answered or closed fd (something, or the end, to read at once). */
static int answered(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

/* Runs the loop until fd has an answer or seconds have passed; returns the bytes read (the status
 * line and on), "" when none. */
static void run_until_answer(struct env *e, int fd, double seconds, char *out, size_t outlen)
{
    size_t got = 0;
    out[0] = '\0';
    for (int ticks = 0; ticks < (int)(seconds * 100); ticks++) {
        ev_run(e->loop, EVRUN_NOWAIT);
        ssize_t n = recv(fd, out + got, outlen - 1 - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        if (n == 0 || got == outlen - 1 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            break;
        if (n < 0)
            ev_sleep(0.01);
    }
    out[got] = '\0';
}

/* Runs the loop for seconds. */
static void run_for(struct env *e, double seconds)
{
    for (int ticks = 0; ticks < (int)(seconds * 100); ticks++) {
        ev_run(e->loop, EVRUN_NOWAIT);
        ev_sleep(0.01);
    }
    ev_run(e->loop, EVRUN_NOWAIT);
}

static void get(struct env *e, int port, const char *path, char *out, size_t outlen)
{
    int fd = dial(e, "127.0.0.9", port); /* the kubelet: an address of its own */
    char req[128];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    assert_int_equal(send(fd, req, (size_t)n, 0), n);
    run_until_answer(e, fd, 2.0, out, outlen);
}

static void the_probes_answer_while_clients_fill_max_pending(void **state)
{
    (void)state;
    struct gw_server_config cfg = {
        .address = "127.0.0.1", .max_pending = 4, .health_address = "127.0.0.1"};
    struct env *e = env_new(&cfg);
    int port = gw_server_port(e->srv), health = gw_server_health_port(e->srv);
    assert_true(health > 0 && health != port);
    /* One each from four addresses: none holds more than another, so none gives way. */
    static const char *const from[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
    for (int i = 0; i < 4; i++)
        dial(e, from[i], port);
    run_for(e, 0.05);
    char answer[16384];
    get(e, port, "/healthz", answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 503")); /* the client port's cap is full... */
    get(e, health, "/healthz", answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 200")); /* ...the probes' is not */
    get(e, health, "/readyz", answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 200"));
    get(e, health, "/metrics", answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 200"));
    assert_non_null(strstr(answer, "telo_gateway_pending 4"));
    /* Health and metrics only: no attach there. */
    get(e, health, "/v1/namespaces/ns/telosessions/s/attach", answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 404"));
    env_free(e);
}

static void the_address_holding_the_most_pending_gives_way(void **state)
{
    (void)state;
    struct gw_server_config cfg = {.address = "127.0.0.1", .max_pending = 4};
    struct env *e = env_new(&cfg);
    int port = gw_server_port(e->srv);
    /* One address holds every pending slot with connections that send nothing yet. */
    int held[4];
    for (int i = 0; i < 4; i++)
        held[i] = dial(e, "127.0.0.2", port);
    run_for(e, 0.05);
    char answer[16384];
    get(e, port, "/healthz", answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 200"));
    /* Its oldest connection went to make room, and the refusal is counted. */
    char byte;
    assert_int_equal(recv(held[0], &byte, 1, MSG_DONTWAIT), 0);
    get(e, port, "/metrics", answer, sizeof(answer));
    assert_non_null(strstr(answer, "telo_gateway_limited_total{limit=\"pending\"} 1"));
    env_free(e);
}

static void a_request_met_late_by_a_busy_loop_is_answered_not_reset(void **state)
{
    (void)state;
    struct gw_server_config cfg = {.address = "127.0.0.1", .first_byte_s = 0.2};
    struct env *e = env_new(&cfg);
    int port = gw_server_port(e->srv);
    int fd = dial(e, "127.0.0.9", port);
    run_for(e, 0.02); /* accepted: its first-byte deadline runs */
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(send(fd, req, sizeof(req) - 1, 0), (ssize_t)(sizeof(req) - 1));
    /* The loop is busy elsewhere (another tenant's flood) past that deadline: when it comes
     * back, the request and the deadline are both due. */
    ev_sleep(0.5);
    char answer[16384];
    run_until_answer(e, fd, 2.0, answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 200"));
    env_free(e);
}

static void a_client_that_sends_nothing_is_closed_after_2_s(void **state)
{
    (void)state;
    struct gw_server_config cfg = {.address = "127.0.0.1"};
    struct env *e = env_new(&cfg);
    int port = gw_server_port(e->srv);
    int silent = dial(e, "127.0.0.1", port);
    int slow = dial(e, "127.0.0.1", port);
    const char *part = "GET /healthz HTTP/1.1\r\n";
    assert_int_equal(send(slow, part, strlen(part), 0), (ssize_t)strlen(part));
    run_for(e, 1.5);
    assert_false(answered(silent));
    run_for(e, 1.0);
    assert_true(answered(silent)); /* closed at 2 s, not at the head's 10 s */
    assert_false(answered(slow));  /* it spoke: the head has its 10 s */
    env_free(e);
}

static void a_trusted_proxy_has_a_cap_of_its_own_before_the_head(void **state)
{
    (void)state;
    struct gw_server_config cfg = {.address = "127.0.0.1",
                                   .max_pending = 100,
                                   .max_pending_per_source = 2,
                                   .max_pending_per_proxy = 5,
                                   .trusted_proxies = "127.0.0.2/32"};
    struct env *e = env_new(&cfg);
    int port = gw_server_port(e->srv);
    int first = dial(e, "127.0.0.2", port);
    for (int i = 1; i < 8; i++)
        dial(e, "127.0.0.2", port);
    run_for(e, 0.05);
    int refused = 0;
    for (int i = 0; i < e->nsocks; i++)
        refused += answered(e->socks[i]);
    assert_int_equal(refused, 3); /* 5 held: more than a client's 2, far from max_pending */
    /* A head naming the client moves the count to it: the proxy has room again. */
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.1\r\n\r\n";
    assert_int_equal(send(first, req, strlen(req), 0), (ssize_t)strlen(req));
    char answer[512];
    run_until_answer(e, first, 2.0, answer, sizeof(answer));
    assert_non_null(strstr(answer, "HTTP/1.1 200"));
    int again = dial(e, "127.0.0.2", port);
    run_for(e, 0.05);
    assert_false(answered(again));
    env_free(e);
}

static void one_event_accepts_at_most_a_batch(void **state)
{
    (void)state;
    struct gw_server_config cfg = {.address = "127.0.0.1", .max_pending = 1};
    struct env *e = env_new(&cfg);
    int port = gw_server_port(e->srv);
    for (int i = 0; i < 40; i++)
        dial(e, "127.0.0.1", port); /* all in the backlog before the loop runs */
    ev_run(e->loop, EVRUN_NOWAIT);
    int refused = 0;
    for (int i = 0; i < e->nsocks; i++)
        refused += answered(e->socks[i]);
    /* 16 accepted: the first waits for its head, the other 15 were over max_pending. */
    assert_int_equal(refused, 15);
    for (int i = 0; i < 3; i++)
        ev_run(e->loop, EVRUN_NOWAIT);
    refused = 0;
    for (int i = 0; i < e->nsocks; i++)
        refused += answered(e->socks[i]);
    assert_int_equal(refused, 39); /* the rest on the next turns */
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_event_accepts_at_most_a_batch),
        cmocka_unit_test(the_probes_answer_while_clients_fill_max_pending),
        cmocka_unit_test(the_address_holding_the_most_pending_gives_way),
        cmocka_unit_test(a_request_met_late_by_a_busy_loop_is_answered_not_reset),
        cmocka_unit_test(a_client_that_sends_nothing_is_closed_after_2_s),
        cmocka_unit_test(a_trusted_proxy_has_a_cap_of_its_own_before_the_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/session/reach.c (which ports are probed, each endpoint's state from the facts
 * and the clock) and pkg/session/prober.c (the connects on the loop, and the refusal of an
 * address outside reachability.podCIDRs before any socket exists). The only real connections are
 * to 127.0.0.1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/config.h"
#include "session/prober.h"
#include "session/reach.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define T0 1700000000.0

static struct session_config *config_with(const char *cidrs)
{
    struct session_config *c = session_config_new();
    assert_non_null(c);
    if (cidrs) {
        char set[200];
        struct telo_err err;
        snprintf(set, sizeof(set), "reachability.podCIDRs=%s", cidrs);
        assert_int_equal(session_config_set(c, set, &err), 0);
    }
    return c;
}

/* --- which ports are probed ---------------------------------------------------------------- */

static void only_tcp_inside_the_pod_cidrs_is_probed(void **state)
{
    (void)state;
    char why[160];
    struct session_config *all = config_with(NULL);
    /* The production default: every pod IP. */
    assert_int_equal(session_reach_probed(all, "10.244.0.5", "TCP", why, sizeof(why)), 1);
    assert_int_equal(session_reach_probed(all, "10.244.0.5", "UDP", why, sizeof(why)), 0);
    assert_non_null(strstr(why, "UDP ports are not probed"));
    assert_int_equal(session_reach_probed(all, NULL, "TCP", why, sizeof(why)), 0);
    assert_non_null(strstr(why, "no IP address"));
    assert_int_equal(session_reach_probed(all, "not-an-ip", "TCP", why, sizeof(why)), 0);
    struct telo_err err;
    assert_int_equal(session_config_set(all, "reachability.enabled=false", &err), 0);
    assert_int_equal(session_reach_probed(all, "10.85.0.5", "TCP", why, sizeof(why)), 0);
    assert_non_null(strstr(why, "reachability.enabled"));
    session_config_free(all);

    struct session_config *real = config_with("10.85.0.0/24,fd00:85::/64");
    assert_int_equal(session_reach_probed(real, "10.85.0.17", "TCP", why, sizeof(why)), 1);
    assert_int_equal(session_reach_probed(real, "10.244.0.5", "TCP", why, sizeof(why)), 0);
    assert_string_equal(why,
                        "the pod IP 10.244.0.5 is outside the operator's reachability.podCIDRs: "
                        "not probed");
    assert_int_equal(session_reach_probed(real, "10.85.1.1", "TCP", why, sizeof(why)), 0);
    assert_int_equal(session_reach_probed(real, "fd00:85::7", "TCP", why, sizeof(why)), 1);
    assert_int_equal(session_reach_probed(real, "fd00:86::7", "TCP", why, sizeof(why)), 0);
    /* IPv4 in IPv6 clothing is judged as the IPv4 address it carries. */
    assert_int_equal(session_reach_address_in(&real->reach_pod_cidrs, "::ffff:10.85.0.3"), 1);
    assert_int_equal(session_reach_address_in(&real->reach_pod_cidrs, "::ffff:10.244.0.3"), 0);
    session_config_free(real);
}

static void config_keys_and_defaults(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(c->reach_enabled, 1);
    assert_int_equal(c->reach_timeout_seconds, 30);
    assert_int_equal(c->reach_interval_seconds, 5);
    assert_int_equal(c->reach_pod_cidrs.n, 0);
    assert_int_equal(session_config_set(c, "reachability.timeoutSeconds=12", &err), 0);
    assert_int_equal(session_config_set(c, "reachability.intervalSeconds=1", &err), 0);
    assert_int_equal(c->reach_timeout_seconds, 12);
    assert_int_equal(c->reach_interval_seconds, 1);
    assert_true(session_config_set(c, "reachability.podCIDRs=10.85.0.0/33", &err) < 0);
    assert_non_null(strstr(err.msg, "reachability.podCIDRs[0]"));
    assert_true(session_config_set(c, "reachability.timeoutSeconds=0", &err) < 0);
    session_config_free(c);
}

/* --- states -------------------------------------------------------------------------------- */

static void checking_until_the_timeout_then_unreachable(void **state)
{
    (void)state;
    struct session_reach_view v;
    double deadline;
    /* Nothing learnt yet: Checking from the app's start. */
    session_reach_decide(NULL, NULL, T0, 30, T0 + 3, &v, &deadline);
    assert_int_equal(v.state, SESSION_REACH_CHECKING);
    assert_true(v.since == T0 && deadline == T0 + 30);
    /* Refused a few times: still Checking, the same since (no new write). */
    struct session_reach_facts f = {.results = 3, .last_ok = 0, .fail_since = T0 + 1};
    session_reach_decide(&f, &v, T0, 30, T0 + 12, &v, &deadline);
    assert_int_equal(v.state, SESSION_REACH_CHECKING);
    assert_true(v.since == T0 && deadline == T0 + 30 && v.last_seen == 0);
    /* The timeout after the start: Unreachable since start + timeout, whenever computed. */
    struct session_reach_view u, u2;
    session_reach_decide(&f, &v, T0, 30, T0 + 31, &u, &deadline);
    assert_int_equal(u.state, SESSION_REACH_UNREACHABLE);
    assert_true(u.since == T0 + 30 && deadline == 0);
    f.results = 9;
    session_reach_decide(&f, &u, T0, 30, T0 + 300, &u2, &deadline);
    assert_memory_equal(&u, &u2, sizeof(u));
    assert_string_equal(session_reach_state_name(u.state), "Unreachable");
    assert_int_equal(session_reach_state_parse("Checking"), SESSION_REACH_CHECKING);
    assert_int_equal(session_reach_state_parse("checking"), SESSION_REACH_NONE);
}

static void reachable_once_it_connects_and_stays_so(void **state)
{
    (void)state;
    struct session_reach_view old = {SESSION_REACH_CHECKING, T0, 0}, v, again;
    struct session_reach_facts f = {
        .results = 3, .last_ok = 1, .ok_since = T0 + 10, .last_seen = T0 + 10};
    session_reach_decide(&f, &old, T0, 30, T0 + 10.5, &v, NULL);
    assert_int_equal(v.state, SESSION_REACH_REACHABLE);
    assert_true(v.since == T0 + 10);
    /* Probed again at the resync: the written since stands. */
    f.results = 4;
    f.last_seen = T0 + 3600;
    session_reach_decide(&f, &v, T0, 30, T0 + 3601, &again, NULL);
    assert_memory_equal(&v, &again, sizeof(v));
    /* An operator restarted knows nothing yet: what was written stands, no flapping. */
    session_reach_decide(NULL, &v, T0, 30, T0 + 4000, &again, NULL);
    assert_memory_equal(&v, &again, sizeof(v));
    /* An Unreachable port that connects again is Reachable again. */
    struct session_reach_view bad = {SESSION_REACH_UNREACHABLE, T0 + 30, 0};
    f.ok_since = T0 + 50;
    session_reach_decide(&f, &bad, T0, 30, T0 + 51, &again, NULL);
    assert_int_equal(again.state, SESSION_REACH_REACHABLE);
    assert_true(again.since == T0 + 50);
}

static void a_reachable_port_that_stops_answering(void **state)
{
    (void)state;
    struct session_reach_view was = {SESSION_REACH_REACHABLE, T0 + 10, 0}, v;
    struct session_reach_facts f = {
        .results = 8, .last_ok = 0, .fail_since = T0 + 100, .last_seen = T0 + 95};
    double deadline;
    /* Ready goes at the first refusal; Degraded only after the timeout from it. */
    session_reach_decide(&f, &was, T0, 30, T0 + 101, &v, &deadline);
    assert_int_equal(v.state, SESSION_REACH_CHECKING);
    assert_true(v.since == T0 + 100 && v.last_seen == T0 + 95 && deadline == T0 + 130);
    struct session_reach_view u;
    session_reach_decide(&f, &v, T0, 30, T0 + 131, &u, &deadline);
    assert_int_equal(u.state, SESSION_REACH_UNREACHABLE);
    assert_true(u.since == T0 + 130 && u.last_seen == T0 + 95);
    /* Restarted operator, old state Reachable, nothing seen since the restart: the failure run
     * counts from its own start, last seen when it became reachable. */
    struct session_reach_facts fresh = {.results = 1, .last_ok = 0, .fail_since = T0 + 500};
    session_reach_decide(&fresh, &was, T0, 30, T0 + 501, &v, NULL);
    assert_int_equal(v.state, SESSION_REACH_CHECKING);
    assert_true(v.since == T0 + 500 && v.last_seen == T0 + 10);
}

static void a_written_view_reads_back(void **state)
{
    (void)state;
    struct json_object *e = json_tokener_parse(
        "{\"port\":8080,\"state\":\"Unreachable\",\"since\":\"2023-11-14T22:13:50Z\","
        "\"lastSeen\":\"2023-11-14T22:13:20Z\"}");
    struct session_reach_view v;
    session_reach_view_of(e, &v);
    assert_int_equal(v.state, SESSION_REACH_UNREACHABLE);
    assert_true(v.since - v.last_seen == 30);
    json_object_put(e);
    e = json_tokener_parse("{\"state\":7}");
    session_reach_view_of(e, &v);
    assert_int_equal(v.state, SESSION_REACH_NONE);
    json_object_put(e);
}

/* --- the prober ---------------------------------------------------------------------------- */

static int connects;
static char connected_to[64];
static int connect_answer; /* errno the fake connect fails with */

static int fake_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    (void)fd;
    (void)len;
    const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    snprintf(connected_to, sizeof(connected_to), "%s:%d", ip, ntohs(in->sin_port));
    connects++;
    errno = connect_answer;
    return -1;
}

static int requeued;
static char requeued_key[64];

static void on_requeue(void *ud, const char *key)
{
    (void)ud;
    requeued++;
    snprintf(requeued_key, sizeof(requeued_key), "%s", key);
}

static void the_prober_refuses_an_address_outside_the_pod_cidrs_before_any_connect(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct session_config *cfg = config_with("10.85.0.0/24");
    struct telo_err err;
    struct session_prober *p = session_prober_new(loop, cfg, on_requeue, NULL, &err);
    assert_non_null(p);
    session_prober_set_connect(p, fake_connect);
    connects = requeued = 0;
    connect_answer = ECONNREFUSED;
    struct session_reach_facts f;
    /* A kwok pod's fake IP: refused, no socket, no connect. */
    assert_int_equal(session_prober_observe(p, "ns/a", "uid-a", "10.244.0.5", 8080, &f),
                     -TELO_EINVAL);
    assert_int_equal(connects, 0);
    assert_int_equal(session_prober_stats(p)->probes, 0);
    assert_int_equal(session_prober_stats(p)->refused, 1);
    assert_int_equal(session_prober_stats(p)->targets, 0);
    assert_int_equal(f.results, 0);
    /* The real node's pod: probed (the fake connect refuses; nothing leaves this process). */
    assert_int_equal(session_prober_observe(p, "ns/b", "uid-b", "10.85.0.7", 8080, &f), 0);
    assert_int_equal(connects, 1);
    assert_string_equal(connected_to, "10.85.0.7:8080");
    assert_int_equal(f.results, 1);
    assert_int_equal(f.last_ok, 0);
    assert_int_equal(requeued, 1);
    assert_string_equal(requeued_key, "ns/b");
    /* Asked again before the interval: no new probe, no new requeue. */
    assert_int_equal(session_prober_observe(p, "ns/b", "uid-b", "10.85.0.7", 8080, &f), 0);
    assert_int_equal(connects, 1);
    assert_int_equal(requeued, 1);
    session_prober_retain(p, "ns/b", NULL, NULL, 0);
    assert_int_equal(session_prober_stats(p)->targets, 0);
    session_prober_free(p);
    session_config_free(cfg);
    ev_loop_destroy(loop);
}

/* A prober whose connects are never answered (dropped SYNs; the loop is not run), with n
 * sessions of namespace ns observed at 10.85.0.9:8080: ns/s0, ns/s1... */
static struct session_prober *silent_prober(struct ev_loop *loop, struct session_config *cfg,
                                            const char *ns, int n)
{
    struct telo_err err;
    struct session_prober *p = session_prober_new(loop, cfg, on_requeue, NULL, &err);
    assert_non_null(p);
    session_prober_set_connect(p, fake_connect);
    connects = 0;
    connect_answer = EINPROGRESS;
    struct session_reach_facts f;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s/s%d", ns, i);
        assert_int_equal(session_prober_observe(p, key, "uid", "10.85.0.9", 8080, &f), 0);
    }
    return p;
}

static void at_most_64_connects_are_in_flight(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct session_config *cfg = config_with("10.85.0.0/24");
    struct session_prober *p = silent_prober(loop, cfg, "ns", 100);
    assert_int_equal(connects, SESSION_PROBER_MAX_IN_FLIGHT);
    assert_int_equal(session_prober_stats(p)->in_flight, SESSION_PROBER_MAX_IN_FLIGHT);
    assert_int_equal(session_prober_stats(p)->targets, 100);
    /* A session that goes frees its slot for the next in line. */
    session_prober_retain(p, "ns/s0", NULL, NULL, 0);
    assert_int_equal(connects, SESSION_PROBER_MAX_IN_FLIGHT + 1);
    assert_int_equal(session_prober_stats(p)->in_flight, SESSION_PROBER_MAX_IN_FLIGHT);
    session_prober_free(p);
    session_config_free(cfg);
    ev_loop_destroy(loop);
}

static void
a_namespace_of_silent_endpoints_delays_another_namespaces_probe_by_one_turn(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct session_config *cfg = config_with("10.85.0.0/24");
    struct session_prober *p = silent_prober(loop, cfg, "flood", 200);
    struct session_reach_facts f;
    assert_int_equal(session_prober_observe(p, "quiet/mine", "uid-q", "10.85.0.10", 80, &f), 0);
    assert_int_equal(connects, SESSION_PROBER_MAX_IN_FLIGHT);
    /* The flood's turn comes first (it was waiting first), then the other namespace's: its
     * probe is the second to start, where one line would make it the 137th. */
    session_prober_retain(p, "flood/s0", NULL, NULL, 0);
    assert_int_equal(connects, SESSION_PROBER_MAX_IN_FLIGHT + 1);
    assert_string_equal(connected_to, "10.85.0.9:8080");
    session_prober_retain(p, "flood/s1", NULL, NULL, 0);
    assert_int_equal(connects, SESSION_PROBER_MAX_IN_FLIGHT + 2);
    assert_string_equal(connected_to, "10.85.0.10:80");
    assert_int_equal(session_prober_stats(p)->targets, 199);
    assert_int_equal(session_prober_stats(p)->in_flight, SESSION_PROBER_MAX_IN_FLIGHT);
    session_prober_free(p);
    session_config_free(cfg);
    ev_loop_destroy(loop);
}

static void stop_loop(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs loop until requeued reaches want, or 3 s. */
static void run_until(struct ev_loop *loop, int want)
{
    ev_timer guard;
    ev_timer_init(&guard, stop_loop, 3.0, 0);
    ev_timer_start(loop, &guard);
    while (requeued < want && ev_run(loop, EVRUN_ONCE))
        if (!ev_is_active(&guard))
            break;
    ev_timer_stop(loop, &guard);
}

static void a_loopback_listener_is_reachable_and_a_closed_port_is_not(void **state)
{
    (void)state;
    int srv = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(srv, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(srv, 4), 0);
    assert_int_equal(getsockname(srv, (struct sockaddr *)&a, &len), 0);
    int open_port = ntohs(a.sin_port);
    /* A port nobody listens on: bind one and close it. */
    int gone = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    len = sizeof(b);
    assert_int_equal(bind(gone, (struct sockaddr *)&b, sizeof(b)), 0);
    assert_int_equal(getsockname(gone, (struct sockaddr *)&b, &len), 0);
    int closed_port = ntohs(b.sin_port);
    close(gone);

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct session_config *cfg = config_with("127.0.0.0/8");
    struct telo_err err;
    struct session_prober *p = session_prober_new(loop, cfg, on_requeue, NULL, &err);
    requeued = 0;
    struct session_reach_facts f;
    assert_int_equal(session_prober_observe(p, "ns/up", "u1", "127.0.0.1", open_port, &f), 0);
    assert_int_equal(session_prober_observe(p, "ns/down", "u2", "127.0.0.1", closed_port, &f), 0);
    run_until(loop, 2);
    assert_int_equal(requeued, 2);
    assert_int_equal(session_prober_observe(p, "ns/up", "u1", "127.0.0.1", open_port, &f), 0);
    assert_int_equal(f.results, 1);
    assert_int_equal(f.last_ok, 1);
    assert_true(f.last_seen > 0 && f.ok_since == f.last_seen);
    assert_int_equal(session_prober_observe(p, "ns/down", "u2", "127.0.0.1", closed_port, &f), 0);
    assert_int_equal(f.results, 1);
    assert_int_equal(f.last_ok, 0);
    assert_true(f.last_seen == 0 && f.fail_since > 0);
    /* Another pod under the name: learnt afresh. */
    assert_int_equal(session_prober_observe(p, "ns/up", "u9", "127.0.0.1", open_port, &f), 0);
    assert_int_equal(session_prober_stats(p)->targets, 2);
    session_prober_free(p);
    session_config_free(cfg);
    ev_loop_destroy(loop);
    close(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(only_tcp_inside_the_pod_cidrs_is_probed),
        cmocka_unit_test(config_keys_and_defaults),
        cmocka_unit_test(checking_until_the_timeout_then_unreachable),
        cmocka_unit_test(reachable_once_it_connects_and_stays_so),
        cmocka_unit_test(a_reachable_port_that_stops_answering),
        cmocka_unit_test(a_written_view_reads_back),
        cmocka_unit_test(the_prober_refuses_an_address_outside_the_pod_cidrs_before_any_connect),
        cmocka_unit_test(at_most_64_connects_are_in_flight),
        cmocka_unit_test(
            a_namespace_of_silent_endpoints_delays_another_namespaces_probe_by_one_turn),
        cmocka_unit_test(a_loopback_listener_is_reachable_and_a_closed_port_is_not),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

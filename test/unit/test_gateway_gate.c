/* Tests for pkg/gateway/gate.c: the admission cache, coalescing and rate limits, on a fake
 * backend that counts lookups and answers when the test says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/gate.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CALLS 64

/* The fake API: every admit is a pending call the test answers with answer(). */
struct fake {
    int calls;
    int cancelled;
    struct pending {
        gw_admit_fn *cb;
        void *ud;
        char token[64];
        int done;
    } pending[MAX_CALLS];
};

static struct gw_admission *fake_admit(void *ud, const char *namespace, const char *name,
                                       const char *token, gw_admit_fn *cb, void *cb_ud,
                                       struct telo_err *err)
{
    (void)namespace;
    (void)name;
    (void)err;
    struct fake *f = ud;
    assert_true(f->calls < MAX_CALLS);
    struct pending *p = &f->pending[f->calls++];
    p->cb = cb;
    p->ud = cb_ud;
    snprintf(p->token, sizeof(p->token), "%s", token);
    return (struct gw_admission *)p;
}

static void fake_cancel(struct gw_admission *adm)
{
    if (adm != NULL)
        ((struct pending *)(void *)adm)->done = -1;
}

static void answer(struct fake *f, int i, enum gw_verdict v, const char *phase)
{
    struct pending *p = &f->pending[i];
    assert_int_equal(p->done, 0);
    p->done = 1;
    struct gw_admitted a = {.verdict = v,
                            .reason = "because",
                            .subject = "someone",
                            .phase = phase,
                            .pod = "pod",
                            .pod_ip = "",
                            .uid = "uid-1",
                            .exit_code = -1};
    p->cb(&a, p->ud);
}

struct got {
    int n;
    enum gw_verdict verdict;
    char phase[32];
    double retry_after;
};

static void on_verdict(const struct gw_admitted *a, void *ud)
{
    struct got *g = ud;
    g->n++;
    g->verdict = a->verdict;
    g->retry_after = a->retry_after;
    snprintf(g->phase, sizeof(g->phase), "%s", a->phase);
}

struct env {
    struct ev_loop *loop;
    struct fake fake;
    struct gw_gate *gate;
};

static struct env *env_new(const struct gw_gate_opts *opts)
{
    struct env *e = calloc(1, sizeof(*e));
    e->loop = ev_loop_new(EVFLAG_AUTO);
    struct gw_gate_backend be = {.admit = fake_admit, .cancel = fake_cancel, .ud = &e->fake};
    e->gate = gw_gate_new(e->loop, &be, opts);
    assert_non_null(e->gate);
    return e;
}

static void env_free(struct env *e)
{
    gw_gate_free(e->gate);
    ev_loop_destroy(e->loop);
    free(e);
}

static void turn(struct env *e)
{
    for (int i = 0; i < 3; i++)
        ev_run(e->loop, EVRUN_NOWAIT);
}

static struct gw_gate_req *admit(struct env *e, const char *source, const char *name,
                                 const char *token, struct got *got)
{
    struct telo_err err = {0};
    struct gw_gate_req *r =
        gw_gate_admit(e->gate, source, "ns", name, token, on_verdict, got, &err);
    assert_non_null(r);
    return r;
}

static void identical_requests_share_one_lookup_and_the_cache(void **state)
{
    (void)state;
    struct env *e = env_new(NULL);
    struct got a = {0}, b = {0}, c = {0}, other = {0};
    admit(e, "1.1.1.1", "s", "tok", &a);
    admit(e, "2.2.2.2", "s", "tok", &b);
    admit(e, "1.1.1.1", "s", "tok2", &other); /* another token: its own lookup */
    assert_int_equal(e->fake.calls, 2);
    assert_int_equal(a.n + b.n, 0); /* never from inside admit */
    answer(&e->fake, 0, GW_UNAUTHENTICATED, "");
    assert_int_equal(a.n, 1);
    assert_int_equal(b.n, 1);
    assert_int_equal(b.verdict, GW_UNAUTHENTICATED);
    /* The negative answer is reused: no new lookup, delivered on the next loop turn. */
    admit(e, "3.3.3.3", "s", "tok", &c);
    assert_int_equal(e->fake.calls, 2);
    assert_int_equal(c.n, 0);
    turn(e);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.verdict, GW_UNAUTHENTICATED);
    /* Another session with the same token is another key. */
    struct got d = {0};
    admit(e, "3.3.3.3", "t", "tok", &d);
    assert_int_equal(e->fake.calls, 3);
    const struct gw_gate_metrics *m = gw_gate_metrics(e->gate);
    assert_int_equal(m->lookups, 3);
    assert_int_equal(m->coalesced, 1);
    assert_int_equal(m->hits, 1);
    answer(&e->fake, 1, GW_ALLOW, "Running");
    answer(&e->fake, 2, GW_NOT_FOUND, "");
    env_free(e);
}

static void the_cache_expires_and_skips_sessions_still_starting(void **state)
{
    (void)state;
    struct gw_gate_opts opts = {.cache_s = 0.05};
    struct env *e = env_new(&opts);
    struct got a = {0}, b = {0}, c = {0}, d = {0};
    admit(e, "1.1.1.1", "s", "tok", &a);
    answer(&e->fake, 0, GW_ALLOW, "Pending");
    admit(e, "1.1.1.1", "s", "tok", &b); /* a Pending session is asked again */
    assert_int_equal(e->fake.calls, 2);
    answer(&e->fake, 1, GW_ALLOW, "Running");
    admit(e, "1.1.1.1", "s", "tok", &c);
    assert_int_equal(e->fake.calls, 2);
    turn(e);
    assert_int_equal(c.verdict, GW_ALLOW);
    assert_string_equal(c.phase, "Running");
    /* After the TTL a revoked token is asked about again. */
    ev_sleep(0.08);
    ev_now_update(e->loop);
    admit(e, "1.1.1.1", "s", "tok", &d);
    assert_int_equal(e->fake.calls, 3);
    answer(&e->fake, 2, GW_UNAUTHENTICATED, "");
    assert_int_equal(d.verdict, GW_UNAUTHENTICATED);
    /* API failures are never cached. */
    struct got f1 = {0}, f2 = {0};
    admit(e, "1.1.1.1", "s", "x", &f1);
    answer(&e->fake, 3, GW_UNAVAILABLE, "");
    admit(e, "1.1.1.1", "s", "x", &f2);
    assert_int_equal(e->fake.calls, 5);
    answer(&e->fake, 4, GW_UNAVAILABLE, "");
    env_free(e);
}

static void lookups_are_rate_limited_per_source_and_overall(void **state)
{
    (void)state;
    struct gw_gate_opts opts = {.rate = 1, .burst = 5, .rate_per_source = 1, .burst_per_source = 2};
    struct env *e = env_new(&opts);
    struct got got[20];
    memset(got, 0, sizeof(got));
    char token[32];
    /* One source with fresh tokens: its burst, then 429 with a Retry-After. */
    for (int i = 0; i < 5; i++) {
        snprintf(token, sizeof(token), "a%d", i);
        admit(e, "6.6.6.6", "s", token, &got[i]);
    }
    assert_int_equal(e->fake.calls, 2);
    turn(e);
    for (int i = 2; i < 5; i++) {
        assert_int_equal(got[i].n, 1);
        assert_int_equal(got[i].verdict, GW_TOO_MANY);
        assert_true(got[i].retry_after > 0);
    }
    /* Other sources still get through, until the overall bucket is empty. */
    for (int i = 5; i < 10; i++) {
        snprintf(token, sizeof(token), "b%d", i);
        admit(e, i % 2 ? "7.7.7.7" : "8.8.8.8", "s", token, &got[i]);
    }
    assert_int_equal(e->fake.calls, 5);
    turn(e);
    int too_many = 0;
    for (int i = 5; i < 10; i++)
        too_many += got[i].verdict == GW_TOO_MANY;
    assert_int_equal(too_many, 2);
    const struct gw_gate_metrics *m = gw_gate_metrics(e->gate);
    /* 7.7.7.7's third request is over its own rate; 8.8.8.8's second over the overall one. */
    assert_int_equal(m->limited_per_source, 4);
    assert_int_equal(m->limited, 1);
    /* A cached verdict costs no token. */
    answer(&e->fake, 0, GW_UNAUTHENTICATED, "");
    struct got again = {0};
    admit(e, "6.6.6.6", "s", "a0", &again);
    turn(e);
    assert_int_equal(again.verdict, GW_UNAUTHENTICATED);
    env_free(e);
}

static void an_overall_refusal_spends_no_token_of_the_source(void **state)
{
    (void)state;
    struct gw_gate_opts opts = {
        .rate = 10, .burst = 1, .rate_per_source = 0.01, .burst_per_source = 2};
    struct env *e = env_new(&opts);
    struct got a = {0}, b1 = {0}, b2 = {0}, b3 = {0}, b4 = {0};
    admit(e, "1.1.1.1", "s", "a", &a); /* the overall bucket's one token */
    admit(e, "2.2.2.2", "s", "b1", &b1);
    admit(e, "2.2.2.2", "s", "b2", &b2);
    turn(e);
    assert_int_equal(b1.verdict, GW_TOO_MANY);
    assert_int_equal(b2.verdict, GW_TOO_MANY);
    assert_int_equal(gw_gate_metrics(e->gate)->limited, 2);
    /* Its own two tokens are still there, one for each overall refill. */
    for (int i = 0; i < 2; i++) {
        ev_sleep(0.11);
        ev_now_update(e->loop);
        admit(e, "2.2.2.2", "s", i == 0 ? "b3" : "b4", i == 0 ? &b3 : &b4);
    }
    assert_int_equal(e->fake.calls, 3);
    assert_int_equal(gw_gate_metrics(e->gate)->limited_per_source, 0);
    for (int i = 0; i < 3; i++)
        answer(&e->fake, i, GW_UNAUTHENTICATED, "");
    env_free(e);
}

static void failing_sources_leave_three_quarters_of_the_burst_to_others(void **state)
{
    (void)state;
    /* Overall 4/s, burst 8: sources whose lookups failed take only above a reserve of 6. */
    struct gw_gate_opts opts = {
        .rate = 4, .burst = 8, .rate_per_source = 100, .burst_per_source = 100};
    struct env *e = env_new(&opts);
    struct got bad[8], good[6];
    memset(bad, 0, sizeof(bad));
    memset(good, 0, sizeof(good));
    char source[32], token[32];
    /* One address with garbage tokens: its first lookup fails... */
    admit(e, "198.51.100.1", "s", "garbage-0", &bad[0]);
    answer(&e->fake, 0, GW_UNAUTHENTICATED, "");
    /* ...then it takes the 1 token left above the reserve (7 left, reserve 6), no more. */
    for (int i = 1; i < 4; i++) {
        snprintf(token, sizeof(token), "garbage-%d", i);
        admit(e, "198.51.100.1", "s", token, &bad[i]);
    }
    assert_int_equal(e->fake.calls, 2);
    turn(e);
    assert_int_equal(bad[2].verdict, GW_TOO_MANY);
    assert_int_equal(bad[3].verdict, GW_TOO_MANY);
    /* Other addresses with garbage: each first lookup counts (its failure is not known yet). */
    for (int i = 4; i < 8; i++) {
        snprintf(source, sizeof(source), "198.51.100.%d", i);
        snprintf(token, sizeof(token), "garbage-%d", i);
        admit(e, source, "s", token, &bad[i]);
    }
    assert_int_equal(e->fake.calls, 6);
    /* What those left of the reserve is everyone else's: two lookups, then 429. */
    for (int i = 0; i < 3; i++) {
        snprintf(source, sizeof(source), "203.0.113.%d", i);
        snprintf(token, sizeof(token), "valid-%d", i);
        admit(e, source, "s", token, &good[i]);
    }
    turn(e);
    assert_int_equal(e->fake.calls, 8);
    assert_int_equal(good[0].n + good[1].n, 0); /* waiting for their lookups, not refused */
    assert_int_equal(good[2].verdict, GW_TOO_MANY);
    for (int i = 1; i < 8; i++)
        answer(&e->fake, i, i < 6 ? GW_UNAUTHENTICATED : GW_ALLOW, "Running");
    assert_int_equal(good[0].verdict, GW_ALLOW);
    assert_int_equal(good[1].verdict, GW_ALLOW);
    env_free(e);
}

static void a_cancelled_request_is_not_called(void **state)
{
    (void)state;
    struct env *e = env_new(NULL);
    struct got a = {0}, b = {0}, c = {0};
    struct gw_gate_req *ra = admit(e, "1.1.1.1", "s", "tok", &a);
    admit(e, "1.1.1.1", "s", "tok", &b);
    gw_gate_cancel(ra);
    answer(&e->fake, 0, GW_UNAUTHENTICATED, "");
    assert_int_equal(a.n, 0);
    assert_int_equal(b.n, 1);
    struct gw_gate_req *rc = admit(e, "1.1.1.1", "s", "tok", &c); /* from the cache */
    gw_gate_cancel(rc);
    turn(e);
    assert_int_equal(c.n, 0);
    /* Freed with a lookup in flight: the backend's call is cancelled, nobody called. */
    struct got d = {0};
    admit(e, "1.1.1.1", "s", "other", &d);
    env_free(e);
    assert_int_equal(d.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(identical_requests_share_one_lookup_and_the_cache),
        cmocka_unit_test(the_cache_expires_and_skips_sessions_still_starting),
        cmocka_unit_test(lookups_are_rate_limited_per_source_and_overall),
        cmocka_unit_test(a_cancelled_request_is_not_called),
        cmocka_unit_test(an_overall_refusal_spends_no_token_of_the_source),
        cmocka_unit_test(failing_sources_leave_three_quarters_of_the_burst_to_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/controller/leader.c: the pure decision (observed record + own clock -> action),
 * the Lease record mapping, and a simulation of several candidates sharing one Lease with clock
 * offsets, failed and lost writes and crashes, checked for "never two leaders" and takeover time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "controller/leader.h"

#include <json.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2024-05-01T10:00:00Z */
#define T0 1714557600.0

static struct leader_timing defaults(void)
{
    struct leader_timing t;
    leader_timing_default(&t);
    return t;
}

static struct leader_record record(const char *holder, long duration, const char *renew,
                                   long transitions)
{
    struct leader_record r;
    memset(&r, 0, sizeof(r));
    snprintf(r.holder, sizeof(r.holder), "%s", holder);
    r.lease_duration_s = duration;
    snprintf(r.acquire_time, sizeof(r.acquire_time), "2024-05-01T09:00:00.000000Z");
    snprintf(r.renew_time, sizeof(r.renew_time), "%s", renew);
    r.transitions = transitions;
    return r;
}

static void defaults_are_client_go_s(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    assert_true(t.lease_duration == 15 && t.renew_deadline == 10 && t.retry_period == 2);
    assert_true(fabs(t.jitter_factor - 1.2) < 1e-9);
    assert_int_equal(leader_timing_check(&t, NULL), 0);
}

static void timing_rules_are_checked(void **state)
{
    (void)state;
    struct telo_err err;
    struct leader_timing t = defaults();
    t.renew_deadline = 15;
    assert_int_equal(leader_timing_check(&t, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "greater than the renew deadline"));
    t = defaults();
    t.retry_period = 9; /* 1.2 x 9 > 10 */
    assert_int_equal(leader_timing_check(&t, &err), -TELO_EINVAL);
    t = defaults();
    t.retry_period = 0;
    assert_int_equal(leader_timing_check(&t, &err), -TELO_EINVAL);
}

static void timing_flags_are_kube_controller_managers(void **state)
{
    (void)state;
    struct leader_timing t = {0};
    struct telo_err err;
    assert_int_equal(leader_timing_flag(&t, "--leader-elect-lease-duration", "8s", &err), 1);
    assert_int_equal(leader_timing_flag(&t, "--leader-elect-renew-deadline", "6000ms", &err), 1);
    assert_int_equal(leader_timing_flag(&t, "--leader-elect-retry-period", "1.5", &err), 1);
    assert_true(t.lease_duration == 8 && t.renew_deadline == 6 && t.retry_period == 1.5);
    assert_int_equal(leader_timing_flag(&t, "--leader-elect", "8s", &err), 0);
    assert_int_equal(leader_timing_flag(&t, "--leader-elect-retry-period", "0s", &err),
                     -TELO_EINVAL);
    assert_string_equal(err.msg, "--leader-elect-retry-period 0s: want a positive duration such "
                                 "as 15s, 1.5s or 500ms");
    assert_int_equal(leader_timing_flag(&t, "--leader-elect-lease-duration", "soon", &err),
                     -TELO_EINVAL);
    assert_true(t.lease_duration == 8 && t.retry_period == 1.5);
}

static void an_absent_lease_is_created(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    leader_observe_absent(&st);
    struct leader_decision d;
    leader_decide(&t, &st, "me", T0 + 0.25, 0.5, &d);
    assert_int_equal(d.action, LEADER_ACQUIRE);
    assert_int_equal(d.create, 1);
    assert_string_equal(d.write.holder, "me");
    assert_int_equal(d.write.lease_duration_s, 15);
    assert_int_equal(d.write.transitions, 0);
    assert_string_equal(d.write.acquire_time, "2024-05-01T10:00:00.250000Z");
    assert_string_equal(d.write.renew_time, "2024-05-01T10:00:00.250000Z");
}

static void a_fresh_lease_of_someone_else_is_waited_for(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("other", 15, "2024-05-01T10:00:00.000000Z", 3);
    leader_observe(&st, &r, T0);
    struct leader_decision d;
    leader_decide(&t, &st, "me", T0, 0.0, &d);
    assert_int_equal(d.action, LEADER_WAIT);
    assert_true(fabs(d.next_wakeup - (T0 + 2)) < 1e-9);
    /* The jitter spreads the retry over 2 s .. 4.4 s. */
    leader_decide(&t, &st, "me", T0, 0.999999, &d);
    assert_true(d.next_wakeup > T0 + 4.39 && d.next_wakeup <= T0 + 4.4);
}

static void takeover_only_after_lease_duration_on_own_clock(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("other", 15, "2024-05-01T10:00:00.000000Z", 3);
    leader_observe(&st, &r, 100.0);
    struct leader_decision d;
    /* Unchanged reads do not move observed_time. */
    leader_observe(&st, &r, 110.0);
    assert_true(st.observed_time == 100.0);
    leader_decide(&t, &st, "me", 114.9, 0.5, &d);
    assert_int_equal(d.action, LEADER_WAIT);
    assert_true(fabs(d.next_wakeup - 115.0) < 1e-9); /* woken at the expiry, not after it */
    leader_decide(&t, &st, "me", 115.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_ACQUIRE);
    assert_int_equal(d.create, 0);
    assert_string_equal(d.write.holder, "me");
    assert_int_equal(d.write.transitions, 4);
    /* A renewal seen at 114 starts the count again. */
    r = record("other", 15, "2024-05-01T10:00:14.000000Z", 3);
    leader_observe(&st, &r, 114.0);
    leader_decide(&t, &st, "me", 115.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_WAIT);
    leader_decide(&t, &st, "me", 129.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_ACQUIRE);
}

static void the_remote_renew_time_is_never_read_as_a_clock(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    struct leader_decision d;
    /* Renewed "in the year 2000" by a holder whose clock is wrong, but seen changing just now. */
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("other", 15, "2000-01-01T00:00:00.000000Z", 0);
    leader_observe(&st, &r, T0);
    leader_decide(&t, &st, "me", T0 + 1, 0.5, &d);
    assert_int_equal(d.action, LEADER_WAIT);
    /* Renewed "in 2099", unchanged for 15 s of our clock: expired. */
    memset(&st, 0, sizeof(st));
    r = record("other", 15, "2099-01-01T00:00:00.000000Z", 0);
    leader_observe(&st, &r, T0);
    leader_decide(&t, &st, "me", T0 + 15, 0.5, &d);
    assert_int_equal(d.action, LEADER_ACQUIRE);
}

static void the_holder_s_duration_counts_not_ours(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("other", 60, "2024-05-01T10:00:00.000000Z", 0);
    leader_observe(&st, &r, 0.0);
    struct leader_decision d;
    leader_decide(&t, &st, "me", 30.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_WAIT);
    leader_decide(&t, &st, "me", 60.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_ACQUIRE);
}

static void a_released_lease_is_taken_at_once(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("", 1, "2024-05-01T10:00:00.000000Z", 7);
    leader_observe(&st, &r, 50.0);
    struct leader_decision d;
    leader_decide(&t, &st, "me", 50.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_ACQUIRE);
    assert_int_equal(d.write.transitions, 8);
    assert_int_equal(d.write.lease_duration_s, 15);
}

static void the_leader_renews_keeping_acquire_time(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("me", 15, "2024-05-01T10:00:00.000000Z", 5);
    leader_observe(&st, &r, T0);
    st.leading = 1;
    st.last_renew = T0;
    struct leader_decision d;
    leader_decide(&t, &st, "me", T0 + 2, 0.5, &d);
    assert_int_equal(d.action, LEADER_RENEW);
    assert_string_equal(d.write.acquire_time, "2024-05-01T09:00:00.000000Z");
    assert_string_equal(d.write.renew_time, "2024-05-01T10:00:02.000000Z");
    assert_int_equal(d.write.transitions, 5);
    /* Next try: a retry period later, without jitter. */
    assert_true(fabs(leader_next_wakeup(&t, &st, "me", T0 + 2, 0.9) - (T0 + 4)) < 1e-9);
    /* After failures the retries never go past the step-down deadline. */
    assert_true(fabs(leader_next_wakeup(&t, &st, "me", T0 + 9, 0.9) - (T0 + 10)) < 1e-9);
}

static void the_leader_steps_down_at_the_renew_deadline(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("me", 15, "2024-05-01T10:00:00.000000Z", 5);
    leader_observe(&st, &r, 100.0);
    st.leading = 1;
    st.last_renew = 100.0;
    struct leader_decision d;
    leader_decide(&t, &st, "me", 109.999, 0.5, &d);
    assert_int_equal(d.action, LEADER_RENEW);
    leader_decide(&t, &st, "me", 110.0, 0.0, &d);
    assert_int_equal(d.action, LEADER_STEP_DOWN);
    assert_true(d.next_wakeup >= 112.0 - 1e-9);
}

static void the_leader_steps_down_when_someone_else_holds_it(void **state)
{
    (void)state;
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("me", 15, "2024-05-01T10:00:00.000000Z", 5);
    leader_observe(&st, &r, 100.0);
    st.leading = 1;
    st.last_renew = 100.0;
    r = record("thief", 15, "2024-05-01T10:00:01.000000Z", 6);
    leader_observe(&st, &r, 101.0);
    struct leader_decision d;
    leader_decide(&t, &st, "me", 101.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_STEP_DOWN);
}

static void a_record_naming_us_is_renewed_even_when_not_leading(void **state)
{
    (void)state;
    /* After a step-down (or a restart with the same identity) the record may still name us; the
     * write is conditional on its resourceVersion, so taking it back is safe, and it is not a
     * transition. */
    struct leader_timing t = defaults();
    struct leader_state st;
    memset(&st, 0, sizeof(st));
    struct leader_record r = record("me", 15, "2024-05-01T10:00:00.000000Z", 5);
    leader_observe(&st, &r, 100.0);
    struct leader_decision d;
    leader_decide(&t, &st, "me", 101.0, 0.5, &d);
    assert_int_equal(d.action, LEADER_RENEW);
    assert_int_equal(d.write.transitions, 5);
}

static void record_round_trips_through_a_lease(void **state)
{
    (void)state;
    struct json_object *lease = json_tokener_parse(
        "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":"
        "\"l\",\"resourceVersion\":\"42\"},\"spec\":{\"holderIdentity\":\"a_1\","
        "\"leaseDurationSeconds\":15,\"acquireTime\":\"2024-05-01T09:00:00.000000Z\","
        "\"renewTime\":\"2024-05-01T10:00:00.123456Z\",\"leaseTransitions\":2}}");
    assert_non_null(lease);
    struct leader_record r;
    assert_int_equal(leader_record_from_lease(lease, &r), 0);
    assert_string_equal(r.holder, "a_1");
    assert_int_equal(r.lease_duration_s, 15);
    assert_string_equal(r.renew_time, "2024-05-01T10:00:00.123456Z");
    assert_int_equal(r.transitions, 2);
    /* A release: holder "" is written (not dropped), the rest kept. */
    struct leader_record rel = r;
    rel.holder[0] = '\0';
    rel.lease_duration_s = 1;
    assert_int_equal(leader_record_to_lease(&rel, lease), 0);
    const char *text = json_object_to_json_string_ext(lease, JSON_C_TO_STRING_PLAIN);
    assert_non_null(strstr(text, "\"holderIdentity\":\"\""));
    assert_non_null(strstr(text, "\"leaseDurationSeconds\":1"));
    assert_non_null(strstr(text, "\"resourceVersion\":\"42\""));
    struct leader_record back;
    assert_int_equal(leader_record_from_lease(lease, &back), 0);
    assert_true(leader_record_equal(&back, &rel));
    json_object_put(lease);

    /* A Lease without spec reads as nobody's; a non-object is refused. */
    lease = json_tokener_parse("{\"metadata\":{\"name\":\"l\"}}");
    assert_int_equal(leader_record_from_lease(lease, &r), 0);
    assert_string_equal(r.holder, "");
    assert_int_equal(leader_record_to_lease(&rel, lease), 0);
    assert_int_equal(leader_record_from_lease(lease, &back), 0);
    assert_true(leader_record_equal(&back, &rel));
    json_object_put(lease);
    assert_int_equal(leader_record_from_lease(NULL, &r), -TELO_EPROTO);
}

/* ---- simulation ---------------------------------------------------------------------------- */

#define NCAND 3

struct cand {
    char id[16];
    struct leader_state st;
    double skew; /* local clock = global + skew */
    double next; /* global time of the next attempt */
    int alive;
    int cached; /* the leader's kept copy of the Lease (fast path) */
    long cached_rv;
};

struct sim {
    struct leader_record rec;
    int exists;
    long rv;
    struct cand c[NCAND];
    unsigned long long rng;
    double became_leader_at; /* global time of the last acquisition */
    int leader;              /* index of the last one to acquire, -1 */
    unsigned long acquisitions, stepdowns, failed_writes, lost_responses;
};

static double sim_rand(struct sim *s)
{
    s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(s->rng >> 11) / 9007199254740992.0;
}

static int leaders_alive(const struct sim *s)
{
    int n = 0;
    for (int i = 0; i < NCAND; i++)
        n += s->c[i].alive && s->c[i].st.leading;
    return n;
}

/* One attempt of candidate i at global time now, as the I/O layer runs it, with writes that fail
 * before reaching the server (p_fail) or succeed there but lose their answer (p_lost). */
static void sim_step(struct sim *s, int i, double now, double p_fail, double p_lost)
{
    const struct leader_timing t = defaults();
    struct cand *c = &s->c[i];
    double local = now + c->skew;
    if (c->st.leading && local >= c->st.last_renew + t.renew_deadline) {
        c->st.leading = 0;
        c->cached = 0;
        s->stepdowns++;
    }
    long read_rv = c->cached_rv;
    if (!(c->st.leading && c->cached)) {
        if (s->exists) {
            leader_observe(&c->st, &s->rec, local);
        } else {
            leader_observe_absent(&c->st);
        }
        read_rv = s->rv;
    }
    struct leader_decision d;
    leader_decide(&t, &c->st, c->id, local, sim_rand(s), &d);
    if (d.action == LEADER_WAIT) {
        c->next = d.next_wakeup - c->skew;
        return;
    }
    if (d.action == LEADER_STEP_DOWN) {
        c->st.leading = 0;
        c->cached = 0;
        s->stepdowns++;
        c->next = d.next_wakeup - c->skew;
        return;
    }
    int ok = 0;
    if (sim_rand(s) < p_fail) {
        s->failed_writes++;
    } else if (d.create ? s->exists : (!s->exists || s->rv != read_rv)) {
        /* 409 */
    } else {
        s->rec = d.write;
        s->exists = 1;
        s->rv++;
        if (sim_rand(s) < p_lost)
            s->lost_responses++;
        else
            ok = 1;
    }
    if (ok) {
        leader_observe(&c->st, &d.write, local);
        c->st.last_renew = local;
        c->cached = 1;
        c->cached_rv = s->rv;
        if (!c->st.leading) {
            c->st.leading = 1;
            s->acquisitions++;
            s->became_leader_at = now;
            s->leader = i;
            /* The invariant: nobody else alive believes it leads. */
            assert_int_equal(leaders_alive(s), 1);
        }
    } else {
        c->cached = 0;
    }
    c->next = leader_next_wakeup(&t, &c->st, c->id, local, sim_rand(s)) - c->skew;
}

static int sim_next(const struct sim *s)
{
    int best = -1;
    for (int i = 0; i < NCAND; i++)
        if (s->c[i].alive && (best < 0 || s->c[i].next < s->c[best].next))
            best = i;
    return best;
}

static void sim_init(struct sim *s, unsigned long long seed)
{
    memset(s, 0, sizeof(*s));
    s->rng = seed;
    s->leader = -1;
    for (int i = 0; i < NCAND; i++) {
        snprintf(s->c[i].id, sizeof(s->c[i].id), "cand-%d", i);
        /* Clocks hours apart: only durations on each one's own clock matter. */
        s->c[i].skew = (sim_rand(s) - 0.5) * 7200;
        s->c[i].next = sim_rand(s) * 3;
        s->c[i].alive = 1;
    }
}

static void never_two_leaders_under_failures_and_skew(void **state)
{
    (void)state;
    for (unsigned long long seed = 1; seed <= 20; seed++) {
        struct sim s;
        sim_init(&s, seed);
        double now = 0;
        while (now < 3600) {
            int i = sim_next(&s);
            now = s.c[i].next;
            /* Flaky API server: 20% of writes fail, 10% succeed but lose the answer. */
            sim_step(&s, i, now, 0.2, 0.1);
            assert_true(leaders_alive(&s) <= 1);
        }
        assert_true(s.acquisitions >= 1);
        assert_true(s.failed_writes > 0 && s.lost_responses > 0);
    }
}

static void a_crashed_leader_is_replaced_within_lease_plus_one_retry(void **state)
{
    (void)state;
    const struct leader_timing t = defaults();
    double worst = 0, best = 1e9;
    for (unsigned long long seed = 1; seed <= 200; seed++) {
        struct sim s;
        sim_init(&s, seed);
        double now = 0;
        double crash_at = 30 + sim_rand(&s) * 30;
        double crashed = -1;
        while (now < 200) {
            int i = sim_next(&s);
            now = s.c[i].next;
            if (crashed < 0 && now >= crash_at && s.leader >= 0) {
                s.c[s.leader].alive = 0; /* SIGKILL: no release */
                crashed = now;
                continue;
            }
            sim_step(&s, i, now, 0, 0);
            if (crashed >= 0 && s.leader >= 0 && s.c[s.leader].alive &&
                s.became_leader_at >= crashed)
                break;
        }
        assert_true(crashed >= 0);
        double took = s.became_leader_at - crashed;
        assert_true(took > 0);
        if (took > worst)
            worst = took;
        if (took < best)
            best = took;
    }
    /* The last renewal was at most a retry before the crash; a follower saw it at most one
     * jittered retry later and takes over when it has aged a lease duration on its clock. */
    double bound = t.lease_duration + t.retry_period * (1 + t.jitter_factor);
    assert_true(worst <= bound + 1e-6);
    assert_true(best >= t.lease_duration - t.retry_period - 1e-6);
}

static void a_released_lease_is_taken_within_one_jittered_retry(void **state)
{
    (void)state;
    const struct leader_timing t = defaults();
    for (unsigned long long seed = 1; seed <= 100; seed++) {
        struct sim s;
        sim_init(&s, seed);
        double now = 0;
        double released = -1;
        while (now < 200) {
            int i = sim_next(&s);
            now = s.c[i].next;
            if (released < 0 && now >= 40 && s.leader >= 0) {
                struct cand *l = &s.c[s.leader];
                /* leader_release: holder "", duration 1, then the process exits. */
                struct leader_record rel = s.rec;
                rel.holder[0] = '\0';
                rel.lease_duration_s = 1;
                s.rec = rel;
                s.rv++;
                l->alive = 0;
                released = now;
                continue;
            }
            sim_step(&s, i, now, 0, 0);
            if (released >= 0 && s.c[s.leader].alive && s.became_leader_at >= released)
                break;
        }
        double took = s.became_leader_at - released;
        assert_true(took >= 0 && took <= t.retry_period * (1 + t.jitter_factor) + 1e-6);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_client_go_s),
        cmocka_unit_test(timing_rules_are_checked),
        cmocka_unit_test(timing_flags_are_kube_controller_managers),
        cmocka_unit_test(an_absent_lease_is_created),
        cmocka_unit_test(a_fresh_lease_of_someone_else_is_waited_for),
        cmocka_unit_test(takeover_only_after_lease_duration_on_own_clock),
        cmocka_unit_test(the_remote_renew_time_is_never_read_as_a_clock),
        cmocka_unit_test(the_holder_s_duration_counts_not_ours),
        cmocka_unit_test(a_released_lease_is_taken_at_once),
        cmocka_unit_test(the_leader_renews_keeping_acquire_time),
        cmocka_unit_test(the_leader_steps_down_at_the_renew_deadline),
        cmocka_unit_test(the_leader_steps_down_when_someone_else_holds_it),
        cmocka_unit_test(a_record_naming_us_is_renewed_even_when_not_leading),
        cmocka_unit_test(record_round_trips_through_a_lease),
        cmocka_unit_test(never_two_leaders_under_failures_and_skew),
        cmocka_unit_test(a_crashed_leader_is_replaced_within_lease_plus_one_retry),
        cmocka_unit_test(a_released_lease_is_taken_within_one_jittered_retry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

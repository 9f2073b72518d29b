/* Tests for pkg/workqueue/queue.c and ratelimit.c: one test per queue rule, the backoff numbers,
 * the token bucket, namespaces taking turns, and a long randomized run checked against a reference
 * model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "workqueue/queue.h"
#include "workqueue/ratelimit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct wq *new_queue(double qps)
{
    struct wq_config cfg;
    wq_config_default(&cfg);
    cfg.qps = qps;
    struct wq *q = wq_new(&cfg, 0);
    assert_non_null(q);
    return q;
}

static void adding_a_queued_key_again_does_nothing(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    assert_int_equal(wq_add(q, "ns/a", 0), 0);
    assert_int_equal(wq_add(q, "ns/a", 0), 0);
    assert_int_equal(wq_add(q, "ns/b", 0), 0);
    assert_int_equal(wq_len(q), 2);
    assert_int_equal(wq_metrics(q)->adds, 2);
    assert_string_equal(wq_get(q, 0), "ns/a");
    assert_string_equal(wq_get(q, 0), "ns/b");
    assert_null(wq_get(q, 0));
    wq_free(q);
}

static void a_key_is_never_handed_out_twice_at_once(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add(q, "k", 0);
    const char *k = wq_get(q, 0);
    assert_string_equal(k, "k");
    wq_add(q, "k", 1);
    /* Being processed: the new add waits for done. */
    assert_int_equal(wq_len(q), 0);
    assert_null(wq_get(q, 1));
    wq_done(q, k, 2);
    assert_int_equal(wq_len(q), 1);
    k = wq_get(q, 3);
    assert_string_equal(k, "k");
    wq_done(q, k, 4);
    assert_null(wq_get(q, 5));
    wq_free(q);
}

static void several_adds_during_processing_run_once_more(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add(q, "k", 0);
    const char *k = wq_get(q, 0);
    wq_add(q, "k", 0);
    wq_add(q, "k", 0);
    wq_add_low(q, "k", 0);
    wq_done(q, k, 0);
    assert_int_equal(wq_len(q), 1);
    k = wq_get(q, 0);
    wq_done(q, k, 0);
    assert_null(wq_get(q, 0));
    wq_free(q);
}

static void add_after_waits_and_keeps_the_earliest_time(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add_after(q, "k", 10, 0);
    wq_add_after(q, "k", 5, 0);
    wq_add_after(q, "k", 20, 0);
    assert_true(wq_next_due(q) == 5);
    assert_null(wq_get(q, 4.9));
    assert_string_equal(wq_get(q, 5), "k");
    assert_true(wq_next_due(q) < 0);
    wq_free(q);
}

static void add_after_zero_is_an_add(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add_after(q, "k", 0, 0);
    assert_int_equal(wq_len(q), 1);
    wq_free(q);
}

static void delayed_keys_come_out_in_due_order(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    const double delays[] = {7, 3, 9, 1, 5};
    char key[32];
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k%g", delays[i]);
        wq_add_after(q, key, delays[i], 0);
    }
    const char *expect[] = {"k1", "k3", "k5", "k7", "k9"};
    for (int i = 0; i < 5; i++)
        assert_string_equal(wq_get(q, 100), expect[i]);
    wq_free(q);
}

static void low_priority_keys_go_behind_normal_ones(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add_low(q, "resync-1", 0);
    wq_add_low(q, "resync-2", 0);
    wq_add(q, "edit", 0);
    assert_string_equal(wq_get(q, 0), "edit");
    assert_string_equal(wq_get(q, 0), "resync-1");
    assert_string_equal(wq_get(q, 0), "resync-2");
    wq_free(q);
}

static void a_normal_add_moves_a_low_key_up(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add_low(q, "a", 0);
    wq_add_low(q, "b", 0);
    wq_add(q, "c", 0);
    wq_add(q, "b", 0);
    assert_string_equal(wq_get(q, 0), "c");
    assert_string_equal(wq_get(q, 0), "b");
    assert_string_equal(wq_get(q, 0), "a");
    wq_free(q);
}

/* Gets n keys and checks them against want, in order. */
static void expect_order(struct wq *q, const char *const *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *got = wq_get(q, 0);
        assert_non_null(got);
        assert_string_equal(got, want[i]);
        wq_done(q, got, 0);
    }
    assert_null(wq_get(q, 0));
}

static void namespaces_take_turns_and_keep_their_own_order(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add(q, "flood/1", 0);
    wq_add(q, "flood/2", 0);
    wq_add(q, "flood/3", 0);
    wq_add(q, "quiet/a", 0);
    wq_add(q, "other/x", 0);
    wq_add(q, "flood/4", 0);
    wq_add(q, "quiet/b", 0);
    const char *const want[] = {"flood/1", "quiet/a", "other/x", "flood/2",
                                "quiet/b", "flood/3", "flood/4"};
    expect_order(q, want, sizeof(want) / sizeof(want[0]));
    /* Keys without a namespace share one, in order. */
    wq_add(q, "node-1", 0);
    wq_add(q, "node-2", 0);
    wq_add(q, "ns/a", 0);
    const char *const plain[] = {"node-1", "ns/a", "node-2"};
    expect_order(q, plain, sizeof(plain) / sizeof(plain[0]));
    wq_free(q);
}

static void a_flood_in_one_namespace_delays_another_by_one_key(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    char key[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof(key), "flood/s-%d", i);
        assert_int_equal(wq_add(q, key, 0), 0);
    }
    /* One flood key is being processed when the other tenant's key comes. */
    const char *first = wq_get(q, 0);
    assert_string_equal(first, "flood/s-0");
    wq_add(q, "tenant/mine", 0);
    assert_string_equal(wq_get(q, 0), "flood/s-1");
    assert_string_equal(wq_get(q, 0), "tenant/mine");
    /* Re-queued at done, a key goes to the back of its namespace's own line. */
    wq_add(q, "flood/s-0", 0);
    wq_done(q, first, 0);
    assert_string_equal(wq_get(q, 0), "flood/s-2");
    assert_int_equal(wq_len(q), 9998);
    /* The low priority takes turns too, behind every normal key. */
    wq_add_low(q, "resync/a", 0);
    wq_add_low(q, "resync/b", 0);
    wq_add_low(q, "other/z", 0);
    for (int i = 3; i < 10000; i++) {
        snprintf(key, sizeof(key), "flood/s-%d", i);
        assert_string_equal(wq_get(q, 0), key);
    }
    assert_string_equal(wq_get(q, 0), "flood/s-0");
    const char *const low[] = {"resync/a", "other/z", "resync/b"};
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(wq_get(q, 0), low[i]);
    assert_null(wq_get(q, 0));
    wq_free(q);
}

static void rate_limited_adds_back_off_exponentially_until_forget(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    double now = 0;
    const double expect[] = {0.005, 0.01, 0.02, 0.04, 0.08};
    for (int i = 0; i < 5; i++) {
        wq_add_rate_limited(q, "k", now);
        assert_true(fabs(wq_next_due(q) - (now + expect[i])) < 1e-12);
        assert_null(wq_get(q, now + expect[i] - 1e-6));
        now += expect[i];
        const char *k = wq_get(q, now);
        assert_string_equal(k, "k");
        wq_done(q, k, now);
    }
    assert_int_equal(wq_num_requeues(q, "k"), 5);
    assert_int_equal(wq_metrics(q)->retries, 5);
    wq_forget(q, "k");
    assert_int_equal(wq_num_requeues(q, "k"), 0);
    wq_add_rate_limited(q, "k", now);
    assert_true(fabs(wq_next_due(q) - (now + 0.005)) < 1e-12);
    wq_free(q);
}

static void backoff_numbers(void **state)
{
    (void)state;
    assert_true(wq_backoff_delay(0.005, 1000, 0) == 0.005);
    assert_true(wq_backoff_delay(0.005, 1000, 1) == 0.01);
    assert_true(wq_backoff_delay(0.005, 1000, 10) == 5.12);
    /* 0.005 * 2^18 = 1310.72 > 1000: capped from the 18th failure on. */
    assert_true(wq_backoff_delay(0.005, 1000, 17) == 655.36);
    assert_true(wq_backoff_delay(0.005, 1000, 18) == 1000);
    assert_true(wq_backoff_delay(0.005, 1000, 1000) == 1000);
}

static void token_bucket_allows_a_burst_then_qps(void **state)
{
    (void)state;
    struct wq_bucket b;
    wq_bucket_init(&b, 10, 100, 0);
    for (int i = 0; i < 100; i++)
        assert_true(wq_bucket_reserve(&b, 0) == 0);
    /* The 101st waits one token's time, the next two more. */
    assert_true(fabs(wq_bucket_reserve(&b, 0) - 0.1) < 1e-9);
    assert_true(fabs(wq_bucket_reserve(&b, 0) - 0.2) < 1e-9);
    /* A second later ten tokens came back; two were already owed. */
    assert_true(fabs(wq_bucket_reserve(&b, 1.0) - 0.0) < 1e-9);
    /* Refill never exceeds the burst. */
    wq_bucket_init(&b, 10, 5, 0);
    for (int i = 0; i < 5; i++)
        assert_true(wq_bucket_reserve(&b, 1000) == 0);
    assert_true(wq_bucket_reserve(&b, 1000) > 0);
}

static void what_the_bucket_owes_stops_at_one_burst(void **state)
{
    (void)state;
    struct wq_bucket b;
    wq_bucket_init(&b, 10, 100, 0);
    /* One tenant's sessions fail 100,000 times in a second: another's retry a second later
     * waits at most a burst's worth (10 s), not 10,000 s. */
    double d = 0;
    for (int i = 0; i < 100000; i++)
        d = wq_bucket_reserve(&b, 0);
    assert_true(fabs(d - 10.0) < 1e-9);
    assert_true(fabs(wq_bucket_reserve(&b, 1.0) - 9.1) < 1e-9); /* 10 came back, 1 more owed */
}

static void the_bucket_bounds_a_retry_storm(void **state)
{
    (void)state;
    struct wq *q = new_queue(10);
    char key[16];
    /* 150 distinct keys fail at once: 100 pass on backoff alone, the rest wait for tokens. */
    for (int i = 0; i < 150; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        wq_add_rate_limited(q, key, 0);
    }
    int ready_soon = 0;
    while (wq_get(q, 0.005))
        ready_soon++;
    assert_int_equal(ready_soon, 100);
    assert_true(fabs(wq_next_due(q) - 0.1) < 1e-9);
    wq_free(q);
}

static void shutdown_refuses_adds_drops_delays_and_drains(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add(q, "queued", 0);
    wq_add(q, "busy", 0);
    const char *busy = wq_get(q, 0);
    assert_string_equal(busy, "queued");
    wq_add(q, "queued", 0); /* owed one more run */
    wq_add_after(q, "later", 10, 0);
    wq_shutdown(q);
    assert_false(wq_drained(q));
    wq_add(q, "new", 0);
    assert_true(wq_next_due(q) < 0);
    const char *k = wq_get(q, 1);
    assert_string_equal(k, "busy");
    wq_done(q, k, 1);
    wq_done(q, busy, 1);
    k = wq_get(q, 1);
    assert_string_equal(k, "queued");
    wq_done(q, k, 1);
    assert_null(wq_get(q, 100));
    assert_true(wq_drained(q));
    wq_free(q);
}

static void metrics_record_durations(void **state)
{
    (void)state;
    struct wq *q = new_queue(0);
    wq_add(q, "k", 0);
    const char *k = wq_get(q, 2);
    double longest, total;
    wq_running_times(q, 5, &longest, &total);
    assert_true(longest == 3 && total == 3);
    wq_done(q, k, 5);
    const struct wq_metrics *m = wq_metrics(q);
    assert_int_equal(m->queue_duration.count, 1);
    assert_true(m->queue_duration.sum == 2);
    assert_true(m->work_duration.sum == 3);
    assert_int_equal(wq_processing(q), 0);
    wq_free(q);
}

/* --- a randomized run against a reference model ------------------------------------------- */

#define NKEYS    8
#define NTENANTS 3 /* key i is in namespace i % NTENANTS */
#define STEPS    100000

/* The model: per key, plain flags and times; order kept with sequence numbers; per priority,
 * the namespaces with queued keys in turn order. */
struct model_key {
    int dirty, processing, queued, low;
    unsigned long long queued_seq; /* FIFO position within its priority */
    double due;                    /* < 0: not waiting */
    unsigned long long due_seq;    /* ties on due come out in insertion order */
    unsigned requeues;
};

struct model {
    struct model_key k[NKEYS];
    unsigned long long seq;
    int shutting_down;
    int turn[2][NTENANTS]; /* per priority (low = 1), namespaces in turn order */
    int turns[2];
};

static int model_tenant_has_queued(const struct model *m, int tenant, int low)
{
    for (int i = tenant; i < NKEYS; i += NTENANTS)
        if (m->k[i].queued && m->k[i].low == low)
            return 1;
    return 0;
}

static void model_turn_remove(struct model *m, int low, int tenant)
{
    int *turn = m->turn[low];
    for (int j = 0; j < m->turns[low]; j++) {
        if (turn[j] != tenant)
            continue;
        memmove(&turn[j], &turn[j + 1], (size_t)(m->turns[low] - j - 1) * sizeof(int));
        m->turns[low]--;
        return;
    }
}

static void model_queue(struct model *m, int i)
{
    struct model_key *k = &m->k[i];
    int tenant = i % NTENANTS;
    if (!model_tenant_has_queued(m, tenant, k->low))
        m->turn[k->low][m->turns[k->low]++] = tenant;
    k->queued = 1;
    k->queued_seq = ++m->seq;
}

static void model_unqueue(struct model *m, int i)
{
    struct model_key *k = &m->k[i];
    k->queued = 0;
    if (!model_tenant_has_queued(m, i % NTENANTS, k->low))
        model_turn_remove(m, k->low, i % NTENANTS);
}

static void model_add(struct model *m, int i, int low)
{
    struct model_key *k = &m->k[i];
    if (m->shutting_down)
        return;
    if (k->dirty) {
        if (!low && k->low) {
            if (k->queued) {
                model_unqueue(m, i);
                k->low = 0;
                model_queue(m, i);
            } else {
                k->low = 0;
            }
        }
        return;
    }
    k->dirty = 1;
    k->low = low;
    if (!k->processing)
        model_queue(m, i);
}

static void model_add_after(struct model *m, int i, double delay, double now)
{
    struct model_key *k = &m->k[i];
    if (m->shutting_down)
        return;
    if (delay <= 0) {
        model_add(m, i, 0);
        return;
    }
    if (k->due >= 0) {
        if (now + delay < k->due) {
            k->due = now + delay;
            k->due_seq = ++m->seq;
        }
        return;
    }
    k->due = now + delay;
    k->due_seq = ++m->seq;
}

static void model_promote(struct model *m, double now)
{
    for (;;) {
        int best = -1;
        for (int i = 0; i < NKEYS; i++) {
            struct model_key *k = &m->k[i];
            if (k->due < 0 || k->due > now)
                continue;
            if (best < 0 || k->due < m->k[best].due ||
                (k->due == m->k[best].due && k->due_seq < m->k[best].due_seq))
                best = i;
        }
        if (best < 0)
            return;
        m->k[best].due = -1;
        model_add(m, best, 0);
    }
}

static int model_get(struct model *m, double now)
{
    model_promote(m, now);
    for (int low = 0; low <= 1; low++) {
        if (m->turns[low] == 0)
            continue;
        int tenant = m->turn[low][0];
        int best = -1;
        for (int i = tenant; i < NKEYS; i += NTENANTS) {
            struct model_key *k = &m->k[i];
            if (k->queued && k->low == low && (best < 0 || k->queued_seq < m->k[best].queued_seq))
                best = i;
        }
        if (best < 0) {
            fail_msg("namespace %d takes a turn with no key queued", tenant);
            return -1;
        }
        struct model_key *k = &m->k[best];
        model_unqueue(m, best);
        if (model_tenant_has_queued(m, tenant, low)) {
            model_turn_remove(m, low, tenant);
            m->turn[low][m->turns[low]++] = tenant;
        }
        k->dirty = 0;
        k->processing = 1;
        return best;
    }
    return -1;
}

static void model_done(struct model *m, int i)
{
    struct model_key *k = &m->k[i];
    if (!k->processing)
        return;
    k->processing = 0;
    if (k->dirty)
        model_queue(m, i);
}

static void randomized_run_matches_the_model(void **state)
{
    (void)state;
    struct wq *q = new_queue(0); /* the bucket is tested on its own; here only backoff */
    struct model m;
    memset(&m, 0, sizeof(m));
    for (int i = 0; i < NKEYS; i++)
        m.k[i].due = -1;
    char names[NKEYS][8];
    for (int i = 0; i < NKEYS; i++)
        snprintf(names[i], sizeof(names[i]), "t%d/k%d", i % NTENANTS, i);
    const char *held[NKEYS] = {0};
    double now = 0;
    srand(20261129);
    for (int step = 0; step < STEPS; step++) {
        int i = rand() % NKEYS;
        int op = rand() % 100;
        /* Delays are odd fractions so two keys rarely share a due time; ties are modelled anyway.
         */
        double delay = (rand() % 50) / 7.0;
        if (op < 25) {
            wq_add(q, names[i], now);
            model_add(&m, i, 0);
        } else if (op < 35) {
            wq_add_low(q, names[i], now);
            model_add(&m, i, 1);
        } else if (op < 45) {
            wq_add_after(q, names[i], delay, now);
            model_add_after(&m, i, delay, now);
        } else if (op < 52) {
            wq_add_rate_limited(q, names[i], now);
            double d = wq_backoff_delay(0.005, 1000, m.k[i].requeues++);
            if (!m.shutting_down)
                model_add_after(&m, i, d, now);
            else
                m.k[i].requeues--;
        } else if (op < 56) {
            wq_forget(q, names[i]);
            m.k[i].requeues = 0;
        } else if (op < 80) {
            const char *got = wq_get(q, now);
            int want = model_get(&m, now);
            if (want < 0) {
                assert_null(got);
            } else {
                assert_non_null(got);
                assert_string_equal(got, names[want]);
                held[want] = got;
            }
        } else if (op < 95) {
            if (held[i]) {
                wq_done(q, held[i], now);
                model_done(&m, i);
                held[i] = NULL;
            }
        } else if (op < 99) {
            now += delay;
        } else if (step > STEPS * 9 / 10 && !m.shutting_down && rand() % 50 == 0) {
            wq_shutdown(q);
            m.shutting_down = 1;
            for (int j = 0; j < NKEYS; j++)
                m.k[j].due = -1;
        }
        /* Observable state must agree after every step. */
        size_t queued = 0, processing = 0;
        double next_due = -1;
        for (int j = 0; j < NKEYS; j++) {
            queued += (size_t)m.k[j].queued;
            processing += (size_t)m.k[j].processing;
            if (m.k[j].due >= 0 && (next_due < 0 || m.k[j].due < next_due))
                next_due = m.k[j].due;
            if (!m.shutting_down)
                assert_int_equal(wq_num_requeues(q, names[j]), m.k[j].requeues);
        }
        assert_int_equal(wq_len(q), queued);
        assert_int_equal(wq_processing(q), processing);
        assert_true(wq_next_due(q) == next_due);
    }
    wq_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adding_a_queued_key_again_does_nothing),
        cmocka_unit_test(a_key_is_never_handed_out_twice_at_once),
        cmocka_unit_test(several_adds_during_processing_run_once_more),
        cmocka_unit_test(add_after_waits_and_keeps_the_earliest_time),
        cmocka_unit_test(add_after_zero_is_an_add),
        cmocka_unit_test(delayed_keys_come_out_in_due_order),
        cmocka_unit_test(low_priority_keys_go_behind_normal_ones),
        cmocka_unit_test(a_normal_add_moves_a_low_key_up),
        cmocka_unit_test(namespaces_take_turns_and_keep_their_own_order),
        cmocka_unit_test(a_flood_in_one_namespace_delays_another_by_one_key),
        cmocka_unit_test(rate_limited_adds_back_off_exponentially_until_forget),
        cmocka_unit_test(backoff_numbers),
        cmocka_unit_test(token_bucket_allows_a_burst_then_qps),
        cmocka_unit_test(what_the_bucket_owes_stops_at_one_burst),
        cmocka_unit_test(the_bucket_bounds_a_retry_storm),
        cmocka_unit_test(shutdown_refuses_adds_drops_delays_and_drains),
        cmocka_unit_test(metrics_record_durations),
        cmocka_unit_test(randomized_run_matches_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

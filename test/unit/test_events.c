/* Tests for pkg/controller/events.c's correlator with a fake clock: de-duplication into a series,
 * aggregation of similar events, the spam filter's token bucket, names, truncation, bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "controller/events.h"
#include "controller/events_metrics.h"
#include "controller/metrics.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "util/buf.h"
#include "util/log.h"

#include "mock_client.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 1714557600.0 /* 2024-05-01T10:00:00Z */

static const struct events_object cm = {"v1", "ConfigMap", "ns", "cm", "uid-1"};
static const struct events_object other = {"v1", "ConfigMap", "ns", "other", "uid-2"};

static struct events_input input(const struct events_object *obj, const char *reason,
                                 const char *note)
{
    struct events_input in = {.regarding = obj,
                              .type = "Normal",
                              .reason = reason,
                              .action = "Reconcile",
                              .note = note,
                              .reporting_controller = "telo-operator",
                              .reporting_instance = "pod-1"};
    return in;
}

static struct events_correlator *new_correlator(size_t cache_size)
{
    struct events_correlator_config cfg;
    events_correlator_config_default(&cfg);
    cfg.cache_size = cache_size;
    struct events_correlator *c = events_correlator_new(&cfg);
    assert_non_null(c);
    return c;
}

static void defaults_are_client_go_s(void **state)
{
    (void)state;
    struct events_correlator_config cfg;
    events_correlator_config_default(&cfg);
    assert_int_equal(cfg.burst, 25);
    assert_true(cfg.qps * 300 > 0.999 && cfg.qps * 300 < 1.001);
    assert_int_equal(cfg.max_similar, 10);
    assert_true(cfg.similar_window == 600);
    assert_int_equal(cfg.cache_size, 4096);
}

static void identical_events_become_one_series(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_input in = input(&cm, "Synced", "synced ok");
    struct events_outcome out;
    assert_int_equal(events_correlate(c, &in, T0, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    assert_int_equal(out.count, 1);
    assert_string_equal(out.note, "synced ok");
    assert_int_equal(out.combined, 0);
    char name[EVENTS_NAME_MAX];
    snprintf(name, sizeof(name), "%s", out.name);
    assert_int_equal(strncmp(name, "cm.", 3), 0);
    for (int i = 2; i <= 20; i++) {
        assert_int_equal(events_correlate(c, &in, T0 + i, &out), 0);
        assert_int_equal(out.write, EVENTS_PATCH);
        assert_string_equal(out.name, name);
        assert_int_equal(out.count, i);
        assert_true(out.first_time == T0);
        assert_true(out.last_time == T0 + i);
    }
    events_correlator_free(c);
}

static void names_are_unique_within_one_instant(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome a, b;
    struct events_input in = input(&cm, "Synced", "one");
    assert_int_equal(events_correlate(c, &in, T0, &a), 0);
    in.note = "two";
    assert_int_equal(events_correlate(c, &in, T0, &b), 0);
    assert_int_equal(b.write, EVENTS_CREATE);
    assert_string_not_equal(a.name, b.name);
    events_correlator_free(c);
}

static void different_notes_are_different_events_until_ten(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    char note[64];
    char combined_name[EVENTS_NAME_MAX];
    for (int i = 1; i <= 9; i++) {
        snprintf(note, sizeof(note), "pod %d failed", i);
        struct events_input in = input(&cm, "Failed", note);
        assert_int_equal(events_correlate(c, &in, T0 + i, &out), 0);
        assert_int_equal(out.write, EVENTS_CREATE);
        assert_int_equal(out.combined, 0);
    }
    /* The tenth distinct note within the window starts the combined event. */
    struct events_input in = input(&cm, "Failed", "pod 10 failed");
    assert_int_equal(events_correlate(c, &in, T0 + 10, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    assert_int_equal(out.combined, 1);
    assert_string_equal(out.note, "(combined from similar events): pod 10 failed");
    snprintf(combined_name, sizeof(combined_name), "%s", out.name);
    /* Later distinct notes bump the combined event. */
    in.note = "pod 11 failed";
    assert_int_equal(events_correlate(c, &in, T0 + 11, &out), 0);
    assert_int_equal(out.write, EVENTS_PATCH);
    assert_int_equal(out.combined, 1);
    assert_string_equal(out.name, combined_name);
    assert_int_equal(out.count, 2);
    /* A note seen before the limit is still de-duplicated into its own event. */
    in.note = "pod 1 failed";
    assert_int_equal(events_correlate(c, &in, T0 + 12, &out), 0);
    assert_int_equal(out.write, EVENTS_PATCH);
    assert_int_equal(out.combined, 0);
    assert_int_equal(out.count, 2);
    /* Another reason is another group. */
    in = input(&cm, "Started", "pod 12 started");
    assert_int_equal(events_correlate(c, &in, T0 + 13, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    assert_int_equal(out.combined, 0);
    events_correlator_free(c);
}

static void a_quiet_group_starts_afresh_after_the_window(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    char note[64];
    for (int i = 1; i <= 9; i++) {
        snprintf(note, sizeof(note), "n%d", i);
        struct events_input in = input(&cm, "Failed", note);
        assert_int_equal(events_correlate(c, &in, T0 + i, &out), 0);
    }
    struct events_input in = input(&cm, "Failed", "n10");
    assert_int_equal(events_correlate(c, &in, T0 + 9 + 600.5, &out), 0);
    assert_int_equal(out.combined, 0);
    events_correlator_free(c);

    /* The window is measured from the previous event of the group, as client-go does: 500 s
     * apart, ten distinct notes still combine. */
    c = new_correlator(0);
    for (int i = 1; i <= 10; i++) {
        snprintf(note, sizeof(note), "n%d", i);
        in = input(&cm, "Failed", note);
        assert_int_equal(events_correlate(c, &in, T0 + 500.0 * i, &out), 0);
    }
    assert_int_equal(out.combined, 1);
    events_correlator_free(c);
}

static void the_spam_filter_allows_a_burst_of_25_then_one_per_5_minutes(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    struct events_input in = input(&cm, "Synced", "same");
    int written = 0;
    for (int i = 0; i < 30; i++) {
        assert_int_equal(events_correlate(c, &in, T0, &out), 0);
        written += out.write != EVENTS_SKIP;
    }
    assert_int_equal(written, 25);
    assert_int_equal(out.write, EVENTS_SKIP);
    /* Skipped occurrences still count: the next write carries them. */
    assert_int_equal(out.count, 30);
    /* Another object has its own bucket. */
    struct events_input in2 = input(&other, "Synced", "same");
    assert_int_equal(events_correlate(c, &in2, T0, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    /* 299 s later: still empty; at 300 s one token. */
    assert_int_equal(events_correlate(c, &in, T0 + 299, &out), 0);
    assert_int_equal(out.write, EVENTS_SKIP);
    assert_int_equal(events_correlate(c, &in, T0 + 301, &out), 0);
    assert_int_equal(out.write, EVENTS_PATCH);
    assert_int_equal(out.count, 32);
    assert_int_equal(events_correlate(c, &in, T0 + 302, &out), 0);
    assert_int_equal(out.write, EVENTS_SKIP);
    /* A long pause refills up to the burst, not beyond. */
    written = 0;
    for (int i = 0; i < 40; i++) {
        assert_int_equal(events_correlate(c, &in, T0 + 1e6, &out), 0);
        written += out.write != EVENTS_SKIP;
    }
    assert_int_equal(written, 25);
    events_correlator_free(c);
}

/* Step 4: new Normal Events share a budget per namespace; Warnings, other namespaces and the
 * series of an Event already written do not draw on it. */
static void a_namespace_budget_holds_back_new_normal_events_only(void **state)
{
    (void)state;
    struct events_correlator_config cfg;
    events_correlator_config_default(&cfg);
    cfg.namespace_burst = 3;
    cfg.namespace_qps = 0.5;
    struct events_correlator *c = events_correlator_new(&cfg);
    assert_non_null(c);
    struct events_outcome out;
    char names[6][8];
    struct events_object objs[6];
    int created = 0;
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof(names[i]), "s%d", i);
        objs[i] = (struct events_object){"telo.run/v1alpha1", "TeloSession", "ns", names[i], NULL};
        struct events_input in = input(&objs[i], "Running", "running");
        assert_int_equal(events_correlate(c, &in, T0, &out), 0);
        created += out.write == EVENTS_CREATE;
        assert_int_equal(out.over_budget, out.write == EVENTS_SKIP);
    }
    assert_int_equal(created, 3);
    /* The first object's Event exists: its repeat is a series, budget or not. */
    struct events_input again = input(&objs[0], "Running", "running");
    assert_int_equal(events_correlate(c, &again, T0, &out), 0);
    assert_int_equal(out.write, EVENTS_PATCH);
    /* A Warning is never held back; nor is another namespace. */
    struct events_input warn = input(&objs[5], "Failed", "it failed");
    warn.type = "Warning";
    assert_int_equal(events_correlate(c, &warn, T0, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    struct events_object elsewhere = {"telo.run/v1alpha1", "TeloSession", "ns2", "s0", NULL};
    struct events_input there = input(&elsewhere, "Running", "running");
    assert_int_equal(events_correlate(c, &there, T0, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    /* One token back every 2 s (0.5 per second): not at 1.9 s, at 2 s. */
    struct events_input late = input(&objs[4], "Stopped", "stopped");
    assert_int_equal(events_correlate(c, &late, T0 + 1.9, &out), 0);
    assert_int_equal(out.write, EVENTS_SKIP);
    /* What the budget dropped left nothing behind: it is new again, a create, not a series. */
    struct events_input dropped = input(&objs[3], "Running", "running");
    assert_int_equal(events_correlate(c, &dropped, T0 + 2.0, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    assert_int_equal(out.count, 1);
    events_correlator_free(c);

    /* Off by default, as in client-go. */
    c = new_correlator(0);
    for (int i = 0; i < 6; i++) {
        struct events_input in = input(&objs[i], "Running", "running");
        assert_int_equal(events_correlate(c, &in, T0, &out), 0);
        assert_int_equal(out.write, EVENTS_CREATE);
    }
    events_correlator_free(c);
}

static void notes_are_cut_to_1_kib_on_a_character_boundary(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    /* 1023 ASCII bytes then a 2-byte character straddling the limit. */
    char note[1100];
    memset(note, 'a', 1023);
    snprintf(note + 1023, sizeof(note) - 1023, "%s", "\xc3\xa9tail");
    struct events_input in = input(&cm, "Long", note);
    assert_int_equal(events_correlate(c, &in, T0, &out), 0);
    assert_int_equal(strlen(out.note), 1023);
    /* The combined prefix is inside the 1 KiB too. */
    memset(note, 'b', 1099);
    note[1099] = '\0';
    char n[16];
    for (int i = 0; i < 10; i++) {
        snprintf(n, sizeof(n), "%d", i);
        memcpy(note, n, strlen(n));
        in = input(&cm, "Longer", note);
        assert_int_equal(events_correlate(c, &in, T0 + i, &out), 0);
    }
    assert_int_equal(out.combined, 1);
    assert_int_equal(strlen(out.note), EVENTS_NOTE_MAX);
    assert_int_equal(strncmp(out.note, "(combined from similar events): ", 32), 0);
    events_correlator_free(c);
}

/* A note may carry a tenant's text (an app's termination message) and `kubectl get events`
 * shows it to others: escape sequences go, controls and the 8-bit CSI become '?'. */
static void notes_are_cleaned_for_a_terminal(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    struct events_input in = input(&cm, "Failed",
                                   "exit 1: \x1b[2J\x1b]8;;https://evil.example/\a"
                                   "x\xc2\x9b"
                                   "31m\r\n");
    assert_int_equal(events_correlate(c, &in, T0, &out), 0);
    assert_string_equal(out.note, "exit 1: ]8;;https://evil.example/?x?31m\n");
    events_correlator_free(c);
}

static void bad_input_is_refused(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    struct events_input in = input(&cm, "Synced", "x");
    in.type = "Info";
    assert_int_equal(events_correlate(c, &in, T0, &out), -TELO_EINVAL);
    in = input(&cm, "", "x");
    assert_int_equal(events_correlate(c, &in, T0, &out), -TELO_EINVAL);
    struct events_object nameless = {"v1", "ConfigMap", "ns", NULL, NULL};
    in = input(&nameless, "Synced", "x");
    assert_int_equal(events_correlate(c, &in, T0, &out), -TELO_EINVAL);
    /* A missing action takes the reason (events.k8s.io requires one). */
    in = input(&cm, "Synced", "x");
    in.action = NULL;
    assert_int_equal(events_correlate(c, &in, T0, &out), 0);
    events_correlator_free(c);
}

static void caches_stay_bounded(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(4);
    struct events_outcome out;
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof(name), "obj-%d", i);
        struct events_object o = {"v1", "ConfigMap", "ns", name, NULL};
        struct events_input in = input(&o, "Synced", "x");
        assert_int_equal(events_correlate(c, &in, T0 + i, &out), 0);
        assert_int_equal(out.write, EVENTS_CREATE);
    }
    /* obj-0 was evicted long ago: it is a new Event again (new name), not a patch of a lost one. */
    struct events_object o = {"v1", "ConfigMap", "ns", "obj-0", NULL};
    struct events_input in = input(&o, "Synced", "x");
    assert_int_equal(events_correlate(c, &in, T0 + 2000, &out), 0);
    assert_int_equal(out.write, EVENTS_CREATE);
    /* The newest ones are still known. */
    o.name = "obj-999";
    assert_int_equal(events_correlate(c, &in, T0 + 2001, &out), 0);
    assert_int_equal(out.write, EVENTS_PATCH);
    events_correlator_free(c);
    events_correlator_free(NULL);
}

/* ---- the recorder's writes, against a scripted API server -------------------------------- */

/* Events API: POST creates (a 500 the first time for reason Flaky), PATCH finds nothing (the
 * Event expired), so the recorder must create it anew. */
static void events_route(int fd, const struct mock_req *req)
{
    static int flaky;
    if (strcmp(req->method, "POST") == 0) {
        if (strstr(req->body, "\"reason\":\"Flaky\"") && flaky++ == 0) {
            mock_reply(fd, 500, NULL, "{\"kind\":\"Status\",\"code\":500}");
            return;
        }
        mock_reply(fd, 201, NULL, req->body);
    } else if (strcmp(req->method, "PATCH") == 0) {
        mock_reply(fd, 404, NULL, "{\"kind\":\"Status\",\"code\":404,\"reason\":\"NotFound\"}");
    } else {
        mock_reply(fd, 405, NULL, "{}");
    }
}

static int setup(void **state)
{
    *state = mock_client_new("events", events_route, "t\n", NULL);
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    mock_client_free(*state);
    return 0;
}

static void on_flushed(int rc, void *ud)
{
    int *out = ud;
    *out = rc == 0 ? 1 : rc;
}

static int flush(struct mock_client *f, struct events_recorder *r)
{
    int done = 0;
    events_recorder_flush(r, 20, on_flushed, &done);
    while (!done)
        ev_run(f->loop, EVRUN_ONCE);
    return done;
}

/* What the operator's /metrics says of the recorder: the figure that names the lost Events. */
static void assert_metrics_say(struct events_metrics *em, const char *const *lines)
{
    struct buf out;
    buf_init(&out, 1 << 16);
    struct telo_err err = {0};
    struct metrics_registry *reg = metrics_registry_new();
    assert_non_null(reg);
    assert_int_equal(events_metrics_register(em, em->stats, reg, &err), 0);
    assert_int_equal(metrics_render(reg, &out, &err), 0);
    for (; *lines; lines++) {
        if (!strstr(out.data, *lines))
            fail_msg("%s not in:\n%s", *lines, out.data);
    }
    buf_release(&out);
    metrics_registry_free(reg);
}

static void a_full_queue_drops_and_counts(void **state)
{
    struct mock_client *f = *state;
    struct events_recorder_config cfg = {.reporting_instance = "pod-1", .queue_max = 3};
    struct events_recorder *r = events_recorder_new(f->t, &cfg, NULL);
    assert_non_null(r);
    char reason[32];
    int dropped = 0;
    for (int i = 0; i < 10; i++) {
        snprintf(reason, sizeof(reason), "Reason%d", i);
        int rc = events_record(r, &cm, "Normal", reason, NULL, "note %d", i);
        assert_true(rc == 0 || rc == -TELO_ETOOBIG);
        dropped += rc == -TELO_ETOOBIG;
    }
    /* One in flight, three queued, the rest dropped: the caller's loop is never blocked. */
    const struct events_stats *st = events_recorder_stats(r);
    assert_int_equal(dropped, 6);
    assert_int_equal(st->dropped, 6);
    assert_int_equal(st->queued, 3);
    assert_int_equal(st->in_flight, 1);
    struct events_metrics em = {.stats = st};
    assert_metrics_say(&em, (const char *const[]){"telo_events_total{outcome=\"dropped\"} 6\n",
                                                  "telo_events_total{outcome=\"created\"} 0\n",
                                                  "telo_events_queued 4\n", NULL});
    assert_int_equal(flush(f, r), 1);
    assert_int_equal(st->created, 4);
    assert_int_equal(st->queued + st->in_flight, 0);
    assert_metrics_say(&em, (const char *const[]){"telo_events_total{outcome=\"dropped\"} 6\n",
                                                  "telo_events_total{outcome=\"created\"} 4\n",
                                                  "telo_events_queued 0\n", NULL});
    events_recorder_free(r);
}

static void one_namespace_fills_at_most_a_quarter_of_the_queue(void **state)
{
    struct mock_client *f = *state;
    struct events_recorder_config cfg = {.reporting_instance = "pod-1", .queue_max = 8};
    struct events_recorder *r = events_recorder_new(f->t, &cfg, NULL);
    assert_non_null(r);
    static const struct events_object loud = {"v1", "ConfigMap", "loud", "cm", "uid-9"};
    char reason[32];
    int dropped = 0;
    for (int i = 0; i < 10; i++) {
        snprintf(reason, sizeof(reason), "Warned%d", i);
        dropped += events_record(r, &loud, "Warning", reason, NULL, "note %d", i) == -TELO_ETOOBIG;
    }
    /* One in flight and two queued (8 / 4); the rest dropped, while the queue has room. */
    assert_int_equal(dropped, 7);
    const struct events_stats *st = events_recorder_stats(r);
    assert_int_equal(st->queued, 2);
    /* Another namespace's Event is queued, not dropped behind them. */
    assert_int_equal(events_record(r, &cm, "Normal", "Mine", NULL, "mine"), 0);
    assert_int_equal(st->queued, 3);
    assert_int_equal(flush(f, r), 1);
    assert_int_equal(st->created, 4);
    /* Sent, the namespace's share is free again. */
    assert_int_equal(events_record(r, &loud, "Warning", "Again", NULL, "again"), 0);
    assert_int_equal(flush(f, r), 1);
    events_recorder_free(r);
}

static void repeats_fold_into_the_queued_write(void **state)
{
    struct mock_client *f = *state;
    struct events_recorder_config cfg = {.reporting_instance = "pod-1"};
    struct events_recorder *r = events_recorder_new(f->t, &cfg, NULL);
    for (int i = 0; i < 20; i++)
        assert_int_equal(events_record(r, &cm, "Normal", "Same", "Act", "same note"), 0);
    const struct events_stats *st = events_recorder_stats(r);
    /* The create is in flight; one patch waits and carries the 19 repeats. */
    assert_int_equal(st->queued, 1);
    assert_int_equal(st->coalesced, 18);
    assert_int_equal(flush(f, r), 1);
    /* The server's PATCH says 404 (expired Event): it is created again, with its series. */
    assert_int_equal(st->created, 2);
    assert_int_equal(st->patched, 0);
    assert_int_equal(st->failed, 0);
    events_recorder_free(r);
}

static void a_server_error_is_retried(void **state)
{
    struct mock_client *f = *state;
    struct events_recorder_config cfg = {.reporting_instance = "pod-1", .retry_interval = 0.05};
    struct events_recorder *r = events_recorder_new(f->t, &cfg, NULL);
    assert_int_equal(events_record(r, &cm, "Warning", "Flaky", NULL, "x"), 0);
    assert_int_equal(flush(f, r), 1);
    const struct events_stats *st = events_recorder_stats(r);
    assert_int_equal(st->retries, 1);
    assert_int_equal(st->created, 1);
    assert_int_equal(st->failed, 0);
    events_recorder_free(r);
    events_recorder_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_client_go_s),
        cmocka_unit_test(identical_events_become_one_series),
        cmocka_unit_test(names_are_unique_within_one_instant),
        cmocka_unit_test(different_notes_are_different_events_until_ten),
        cmocka_unit_test(a_quiet_group_starts_afresh_after_the_window),
        cmocka_unit_test(the_spam_filter_allows_a_burst_of_25_then_one_per_5_minutes),
        cmocka_unit_test(a_namespace_budget_holds_back_new_normal_events_only),
        cmocka_unit_test(notes_are_cut_to_1_kib_on_a_character_boundary),
        cmocka_unit_test(notes_are_cleaned_for_a_terminal),
        cmocka_unit_test(bad_input_is_refused),
        cmocka_unit_test(caches_stay_bounded),
    };
    const struct CMUnitTest io_tests[] = {
        cmocka_unit_test(a_full_queue_drops_and_counts),
        cmocka_unit_test(one_namespace_fills_at_most_a_quarter_of_the_queue),
        cmocka_unit_test(repeats_fold_into_the_queued_write),
        cmocka_unit_test(a_server_error_is_retried),
    };
    (void)mock_stream_start; /* the shared mock's streaming helper is not needed here */
    telo_log_set_level(TELO_LOG_ERROR);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed + cmocka_run_group_tests(io_tests, setup, teardown);
}

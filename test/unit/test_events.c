/* Tests for pkg/controller/events.c's correlator with a fake clock: de-duplication into a series,
 * aggregation of similar events, the spam filter's token bucket, names, truncation, bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "controller/events.h"

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

static void notes_are_cut_to_1_kib_on_a_character_boundary(void **state)
{
    (void)state;
    struct events_correlator *c = new_correlator(0);
    struct events_outcome out;
    /* 1023 ASCII bytes then a 2-byte character straddling the limit. */
    char note[1100];
    memset(note, 'a', 1023);
    strcpy(note + 1023, "\xc3\xa9tail");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_client_go_s),
        cmocka_unit_test(identical_events_become_one_series),
        cmocka_unit_test(names_are_unique_within_one_instant),
        cmocka_unit_test(different_notes_are_different_events_until_ten),
        cmocka_unit_test(a_quiet_group_starts_afresh_after_the_window),
        cmocka_unit_test(the_spam_filter_allows_a_burst_of_25_then_one_per_5_minutes),
        cmocka_unit_test(notes_are_cut_to_1_kib_on_a_character_boundary),
        cmocka_unit_test(bad_input_is_refused),
        cmocka_unit_test(caches_stay_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

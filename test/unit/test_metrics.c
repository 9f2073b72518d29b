/* Tests for pkg/controller/metrics.c: exact Prometheus text for counters, gauges and histograms
 * with labels and escaping, bounds, collectors and the process collector over a procfs fixture.
 *
 * With TELO_METRICS_SAMPLE=<path> set, the test write_sample writes a representative
 * exposition (controller-runtime's names, escaping, histograms, live process figures) to path:
 * test/e2e/test_metrics_format.py feeds that file to prometheus_client's parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "controller/metrics.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/histogram.h"
#include "util/memtune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const no_labels[] = {NULL};

static char *render(struct metrics_registry *reg)
{
    struct buf out;
    buf_init(&out, 1 << 20);
    struct telo_err err = {0};
    assert_int_equal(metrics_render(reg, &out, &err), 0);
    return out.data != NULL ? buf_steal(&out) : strdup("");
}

static void counter_and_gauge_text(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc total = {
        .type = METRICS_COUNTER,
        .name = "controller_runtime_reconcile_total",
        .help = "Total number of reconciliations per controller",
        .labels = (const char *const[]){"controller", "result", NULL},
    };
    struct metrics_family *fam = metrics_register(reg, &total, &err);
    assert_non_null(fam);
    struct metrics_series *ok =
        metrics_series(fam, (const char *const[]){"telosession", "success"}, &err);
    struct metrics_series *failed =
        metrics_series(fam, (const char *const[]){"telosession", "error"}, &err);
    metrics_counter_add(ok, 3);
    metrics_counter_add(ok, 1);
    metrics_counter_add(failed, 1);
    metrics_counter_add(failed, -5); /* counters never go down */
    assert_ptr_equal(metrics_series(fam, (const char *const[]){"telosession", "success"}, &err),
                     ok);

    struct metrics_desc depth = {.type = METRICS_GAUGE,
                                 .name = "workqueue_depth",
                                 .help = "Current depth of workqueue",
                                 .labels = (const char *const[]){"name", NULL}};
    struct metrics_family *dfam = metrics_register(reg, &depth, &err);
    metrics_gauge_set(metrics_series(dfam, (const char *const[]){"telosession"}, &err), 7);
    metrics_gauge_add(metrics_series(dfam, (const char *const[]){"telosession"}, &err), -2.5);

    struct metrics_desc leader = {
        .type = METRICS_GAUGE, .name = "leader_election_master_status", .help = ""};
    assert_non_null(metrics_register(reg, &leader, &err));

    char *text = render(reg);
    assert_string_equal(
        text, "# HELP controller_runtime_reconcile_total Total number of reconciliations per "
              "controller\n"
              "# TYPE controller_runtime_reconcile_total counter\n"
              "controller_runtime_reconcile_total{controller=\"telosession\",result=\"success\"} "
              "4\n"
              "controller_runtime_reconcile_total{controller=\"telosession\",result=\"error\"} "
              "1\n"
              "# HELP workqueue_depth Current depth of workqueue\n"
              "# TYPE workqueue_depth gauge\n"
              "workqueue_depth{name=\"telosession\"} 4.5\n"
              "# TYPE leader_election_master_status gauge\n"
              "leader_election_master_status 0\n");
    free(text);
    metrics_registry_free(reg);
    metrics_registry_free(NULL);
}

static void escaping_of_help_and_label_values(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc desc = {
        .type = METRICS_COUNTER,
        .name = "telo_events_total",
        .help = "Events with \"quotes\", a back\\slash\nand a newline",
        .labels = (const char *const[]){"reason", NULL},
    };
    struct metrics_family *fam = metrics_register(reg, &desc, &err);
    metrics_counter_add(metrics_series(fam, (const char *const[]){"say \"hi\"\\\n{x=1}"}, &err), 2);
    char *text = render(reg);
    assert_string_equal(text,
                        "# HELP telo_events_total Events with \"quotes\", a back\\\\slash\\nand a "
                        "newline\n"
                        "# TYPE telo_events_total counter\n"
                        "telo_events_total{reason=\"say \\\"hi\\\"\\\\\\n{x=1}\"} 2\n");
    free(text);
    metrics_registry_free(reg);
}

static void histogram_text(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    const double bounds[] = {0.005, 0.1, 1, 10};
    struct metrics_desc desc = {
        .type = METRICS_HISTOGRAM,
        .name = "controller_runtime_reconcile_time_seconds",
        .help = "Length of time per reconciliation per controller",
        .labels = (const char *const[]){"controller", NULL},
        .buckets = bounds,
        .nbuckets = 4,
    };
    struct metrics_family *fam = metrics_register(reg, &desc, &err);
    struct metrics_series *s = metrics_series(fam, (const char *const[]){"telosession"}, &err);
    metrics_histogram_observe(s, 0.005); /* a bound is inclusive (le) */
    metrics_histogram_observe(s, 0.05);
    metrics_histogram_observe(s, 0.25);
    metrics_histogram_observe(s, 42);
    assert_true(metrics_series_value(s) == 4);

    struct metrics_desc plain = {.type = METRICS_HISTOGRAM,
                                 .name = "plain_seconds",
                                 .help = "h",
                                 .buckets = bounds,
                                 .nbuckets = 1};
    metrics_histogram_observe(metrics_series(metrics_register(reg, &plain, &err), NULL, &err), 1);

    char *text = render(reg);
    assert_string_equal(
        text,
        "# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per "
        "controller\n"
        "# TYPE controller_runtime_reconcile_time_seconds histogram\n"
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"telosession\",le=\"0.005\"} "
        "1\n"
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"telosession\",le=\"0.1\"} "
        "2\n"
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"telosession\",le=\"1\"} 3\n"
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"telosession\",le=\"10\"} "
        "3\n"
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"telosession\",le=\"+Inf\"} "
        "4\n"
        "controller_runtime_reconcile_time_seconds_sum{controller=\"telosession\"} 42.305\n"
        "controller_runtime_reconcile_time_seconds_count{controller=\"telosession\"} 4\n"
        "# HELP plain_seconds h\n"
        "# TYPE plain_seconds histogram\n"
        "plain_seconds_bucket{le=\"0.005\"} 0\n"
        "plain_seconds_bucket{le=\"+Inf\"} 1\n"
        "plain_seconds_sum 1\n"
        "plain_seconds_count 1\n");
    free(text);
    metrics_registry_free(reg);
}

static void histogram_loads_a_util_histogram(void **state)
{
    (void)state;
    struct histogram h;
    histogram_init_exponential(&h, 0.001, 10, 3); /* 0.001, 0.01, 0.1 */
    histogram_observe(&h, 0.0005);
    histogram_observe(&h, 0.05);
    histogram_observe(&h, 3);

    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc desc = {.type = METRICS_HISTOGRAM,
                                .name = "workqueue_work_duration_seconds",
                                .help = "How long processing an item from workqueue takes.",
                                .labels = (const char *const[]){"name", NULL},
                                .buckets = h.bounds,
                                .nbuckets = h.nbounds};
    struct metrics_family *fam = metrics_register(reg, &desc, &err);
    struct metrics_series *s = metrics_series(fam, (const char *const[]){"q"}, &err);
    assert_int_equal(metrics_histogram_load(s, &h), 0);
    char *text = render(reg);
    assert_non_null(strstr(text,
                           "workqueue_work_duration_seconds_bucket{name=\"q\",le=\"0.001\"} 1\n"
                           "workqueue_work_duration_seconds_bucket{name=\"q\",le=\"0.01\"} 1\n"
                           "workqueue_work_duration_seconds_bucket{name=\"q\",le=\"0.1\"} 2\n"
                           "workqueue_work_duration_seconds_bucket{name=\"q\",le=\"+Inf\"} 3\n"
                           "workqueue_work_duration_seconds_sum{name=\"q\"} 3.0505\n"
                           "workqueue_work_duration_seconds_count{name=\"q\"} 3\n"));
    free(text);

    struct histogram other;
    histogram_init_exponential(&other, 0.002, 10, 3);
    assert_int_equal(metrics_histogram_load(s, &other), -TELO_EINVAL);
    assert_int_equal(metrics_histogram_load(NULL, &h), -TELO_EINVAL);
    metrics_registry_free(reg);
}

static void number_formatting(void **state)
{
    (void)state;
    const struct {
        double v;
        const char *text;
    } cases[] = {
        {0, "0"},
        {1, "1"},
        {-2, "-2"},
        {10, "10"},
        {0.1, "0.1"},
        {2.5e-3, "0.0025"},
        {1e-4, "0.0001"},
        {1e-5, "1e-05"},
        {1e-9, "1e-09"},
        {123456, "123456"},
        {1e6, "1e+06"},
        {123456789, "1.23456789e+08"},
        {1700001500, "1.7000015e+09"},
        {1e21, "1e+21"},
        {1.0 / 3, "0.3333333333333333"},
        {-0.5, "-0.5"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        buf_init(&b, 64);
        assert_int_equal(metrics_format_value(&b, cases[i].v), 0);
        assert_string_equal(b.data, cases[i].text);
        buf_release(&b);
    }
}

static void invalid_descriptions_are_rejected(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    const double bad_bounds[] = {1, 1};
    const double inf_bounds[] = {1, INFINITY};
    const struct metrics_desc bad[] = {
        {.type = METRICS_COUNTER, .name = "9starts_with_digit"},
        {.type = METRICS_COUNTER, .name = "has-dash"},
        {.type = METRICS_COUNTER, .name = ""},
        {.type = METRICS_COUNTER, .name = "x", .labels = (const char *const[]){"a:b", NULL}},
        {.type = METRICS_COUNTER, .name = "x", .labels = (const char *const[]){"__x", NULL}},
        {.type = METRICS_COUNTER, .name = "x", .labels = (const char *const[]){"a", "a", NULL}},
        {.type = METRICS_HISTOGRAM,
         .name = "x",
         .labels = (const char *const[]){"le", NULL},
         .buckets = bad_bounds + 1,
         .nbuckets = 1},
        {.type = METRICS_HISTOGRAM, .name = "x", .buckets = bad_bounds, .nbuckets = 2},
        {.type = METRICS_HISTOGRAM, .name = "x", .buckets = inf_bounds, .nbuckets = 2},
        {.type = METRICS_HISTOGRAM, .name = "x"},
        {.type = METRICS_GAUGE, .name = "x", .buckets = bad_bounds, .nbuckets = 1},
        {.type = METRICS_COUNTER,
         .name = "x",
         .labels = (const char *const[]){"a", "b", "c", "d", "e", "f", "g", "h", "i", NULL}},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.code = 0;
        assert_null(metrics_register(reg, &bad[i], &err));
        assert_int_equal(err.code, TELO_EINVAL);
    }
    struct metrics_desc ok = {.type = METRICS_COUNTER, .name = "ns:x_total", .labels = no_labels};
    assert_non_null(metrics_register(reg, &ok, &err));
    assert_null(metrics_register(reg, &ok, &err));
    assert_non_null(strstr(err.msg, "already registered"));
    metrics_registry_free(reg);
}

static void series_are_bounded(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc desc = {.type = METRICS_COUNTER,
                                .name = "requests_total",
                                .labels = (const char *const[]){"path", NULL},
                                .max_series = 3};
    struct metrics_family *fam = metrics_register(reg, &desc, &err);
    const char *paths[] = {"/a", "/b", "/c", "/d"};
    for (int i = 0; i < 3; i++)
        assert_non_null(metrics_series(fam, &paths[i], &err));
    assert_null(metrics_series(fam, &paths[3], &err));
    assert_int_equal(err.code, TELO_ETOOBIG);
    assert_non_null(metrics_series(fam, &paths[1], &err)); /* existing ones still resolve */
    /* A failed lookup hands back NULL, which every update ignores. */
    metrics_counter_add(NULL, 1);
    metrics_gauge_set(NULL, 1);
    metrics_histogram_observe(NULL, 1);

    char long_value[METRICS_MAX_LABEL_VALUE + 2];
    memset(long_value, 'v', sizeof(long_value) - 1);
    long_value[sizeof(long_value) - 1] = '\0';
    const char *values[] = {long_value};
    assert_null(metrics_series(fam, values, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    const char *missing[] = {NULL};
    assert_null(metrics_series(fam, missing, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    /* Updates of the wrong type are ignored. */
    struct metrics_series *s = metrics_series(fam, &paths[0], &err);
    metrics_gauge_set(s, 9);
    metrics_histogram_observe(s, 9);
    assert_true(metrics_series_value(s) == 0);
    metrics_registry_free(reg);
}

static void render_is_all_or_nothing(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc desc = {.type = METRICS_GAUGE, .name = "g", .help = "a gauge"};
    assert_non_null(metrics_register(reg, &desc, &err));
    struct buf out;
    buf_init(&out, 24);
    assert_int_equal(buf_append_str(&out, "keep:"), 0);
    assert_int_equal(metrics_render(reg, &out, &err), -TELO_ETOOBIG);
    assert_string_equal(out.data, "keep:");
    assert_int_equal(out.len, 5);
    buf_release(&out);
    metrics_registry_free(reg);
}

struct depth_source {
    struct metrics_series *depth;
    int queue_len;
    int calls;
};

static void collect_depth(struct metrics_registry *reg, void *user)
{
    (void)reg;
    struct depth_source *src = user;
    src->calls++;
    metrics_gauge_set(src->depth, src->queue_len);
}

static void collectors_run_at_render(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc desc = {.type = METRICS_GAUGE,
                                .name = "workqueue_depth",
                                .labels = (const char *const[]){"name", NULL}};
    struct metrics_family *fam = metrics_register(reg, &desc, &err);
    struct depth_source src = {.depth = metrics_series(fam, (const char *const[]){"q"}, &err)};
    assert_int_equal(metrics_add_collector(reg, collect_depth, &src, &err), 0);
    src.queue_len = 12;
    char *text = render(reg);
    assert_string_equal(text, "# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"q\"} 12\n");
    free(text);
    src.queue_len = 0;
    text = render(reg);
    assert_non_null(strstr(text, "workqueue_depth{name=\"q\"} 0\n"));
    free(text);
    assert_int_equal(src.calls, 2);
    metrics_registry_free(reg);
}

static void process_collector_reads_procfs(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    assert_int_equal(metrics_register_process(reg, TELO_TEST_DATA "/proc/self", &err), 0);
    assert_int_equal(metrics_register_process(reg, NULL, &err), -TELO_EINVAL);
    char *text = render(reg);
    assert_non_null(strstr(text, "# TYPE process_resident_memory_bytes gauge\n"
                                 "process_resident_memory_bytes 8.192e+06\n"));
    assert_non_null(strstr(text, "\nprocess_virtual_memory_bytes 1.2288e+08\n"));
    assert_non_null(strstr(text, "\nprocess_open_fds 4\n"));
    /* btime 1700000000 + 150000 ticks at 100 Hz; the command name holds spaces and ')'. */
    assert_non_null(strstr(text, "\nprocess_start_time_seconds 1.7000015e+09\n"));
    assert_non_null(strstr(text, "# TYPE process_cpu_seconds_total counter\n"));
    assert_non_null(strstr(text, "\nprocess_max_fds "));
    free(text);
    metrics_registry_free(reg);
}

static void process_collector_on_this_process(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    assert_int_equal(metrics_register_process(reg, NULL, &err), 0);
    char *text = render(reg);
    double rss = 0, fds = 0, start = 0;
    const char *p = strstr(text, "\nprocess_resident_memory_bytes ");
    assert_non_null(p);
    rss = strtod(p + strlen("\nprocess_resident_memory_bytes "), NULL);
    p = strstr(text, "\nprocess_open_fds ");
    assert_non_null(p);
    fds = strtod(p + strlen("\nprocess_open_fds "), NULL);
    p = strstr(text, "\nprocess_start_time_seconds ");
    assert_non_null(p);
    start = strtod(p + strlen("\nprocess_start_time_seconds "), NULL);
    /* The heap's figures, where glibc's allocator gives them (a sanitizer's or valgrind's
     * allocator reports none): in use at least the rendered text itself, still allocated. */
    double in_use = 0, free_bytes = 0;
    p = strstr(text, "\ntelo_heap_in_use_bytes ");
    assert_non_null(p);
    if (util_memtune_heap(&in_use, &free_bytes) == 0 && in_use > 0)
        assert_true(strtod(p + strlen("\ntelo_heap_in_use_bytes "), NULL) >= (double)strlen(text));
    assert_non_null(strstr(text, "\ntelo_heap_free_bytes "));
    free(text);
    assert_true(rss > 1e5);
    assert_true(fds >= 3);
    assert_true(start > 1.6e9);

    /* One more open file shows as one more descriptor. */
    FILE *f = fopen(TELO_TEST_DATA "/proc/stat", "r");
    assert_non_null(f);
    text = render(reg);
    p = strstr(text, "\nprocess_open_fds ");
    assert_true(strtod(p + strlen("\nprocess_open_fds "), NULL) == fds + 1);
    free(text);
    fclose(f);
    metrics_registry_free(reg);
}

/* The exposition test/e2e/test_metrics_format.py parses with prometheus_client. */
static void write_sample(void **state)
{
    (void)state;
    const char *path = getenv("TELO_METRICS_SAMPLE"); /* without it: render, write nothing */
    struct metrics_registry *reg = metrics_registry_new();
    struct telo_err err = {0};
    struct metrics_desc total = {.type = METRICS_COUNTER,
                                 .name = "controller_runtime_reconcile_total",
                                 .help = "Total number of reconciliations per controller",
                                 .labels = (const char *const[]){"controller", "result", NULL}};
    struct metrics_family *fam = metrics_register(reg, &total, &err);
    const char *results[] = {"success", "requeue_after", "error", "terminal_error"};
    for (int i = 0; i < 4; i++)
        metrics_counter_add(
            metrics_series(fam, (const char *const[]){"telosession", results[i]}, &err), i * 3);
    struct metrics_desc escaped = {.type = METRICS_GAUGE,
                                   .name = "telo_sample_escaping",
                                   .help = "Help with a back\\slash and a\nnewline",
                                   .labels = (const char *const[]){"value", NULL}};
    metrics_gauge_set(metrics_series(metrics_register(reg, &escaped, &err),
                                     (const char *const[]){"q\"uote \\ back\nline"}, &err),
                      -1.5);
    const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    struct metrics_desc time = {.type = METRICS_HISTOGRAM,
                                .name = "controller_runtime_reconcile_time_seconds",
                                .help = "Length of time per reconciliation per controller",
                                .labels = (const char *const[]){"controller", NULL},
                                .buckets = bounds,
                                .nbuckets = sizeof(bounds) / sizeof(bounds[0])};
    struct metrics_series *s = metrics_series(metrics_register(reg, &time, &err),
                                              (const char *const[]){"telosession"}, &err);
    const double observations[] = {0.003, 0.02, 0.02, 0.3, 7, 30};
    for (size_t i = 0; i < sizeof(observations) / sizeof(observations[0]); i++)
        metrics_histogram_observe(s, observations[i]);
    struct metrics_desc depth = {.type = METRICS_GAUGE,
                                 .name = "workqueue_depth",
                                 .help = "Current depth of workqueue",
                                 .labels = (const char *const[]){"name", NULL}};
    metrics_gauge_set(metrics_series(metrics_register(reg, &depth, &err),
                                     (const char *const[]){"telosession"}, &err),
                      2);
    assert_int_equal(metrics_register_process(reg, NULL, &err), 0);
    char *text = render(reg);
    if (path != NULL) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(fputs(text, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
    }
    free(text);
    metrics_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counter_and_gauge_text),
        cmocka_unit_test(escaping_of_help_and_label_values),
        cmocka_unit_test(histogram_text),
        cmocka_unit_test(histogram_loads_a_util_histogram),
        cmocka_unit_test(number_formatting),
        cmocka_unit_test(invalid_descriptions_are_rejected),
        cmocka_unit_test(series_are_bounded),
        cmocka_unit_test(render_is_all_or_nothing),
        cmocka_unit_test(collectors_run_at_render),
        cmocka_unit_test(process_collector_reads_procfs),
        cmocka_unit_test(process_collector_on_this_process),
        cmocka_unit_test(write_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

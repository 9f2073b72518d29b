/* A registry of Prometheus counters, gauges and histograms, rendered in text format 0.0.4. */
#ifndef TELO_CONTROLLER_METRICS_H
#define TELO_CONTROLLER_METRICS_H

#include "util/buf.h"
#include "util/err.h"
#include "util/histogram.h"

#include <stddef.h>

struct metrics_registry;
struct metrics_family; /* one metric name with its type, help, label names and series */
struct metrics_series; /* one label-value combination of a family */

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_MAX_LABELS   8
/* controller-runtime's reconcile_time_seconds has 40 buckets. */
#define METRICS_MAX_BUCKETS 64
/* Series per family by default, so a label fed by user data cannot grow without bound. */
#define METRICS_DEFAULT_MAX_SERIES 1000
/* Bytes of one label value. */
#define METRICS_MAX_LABEL_VALUE 512

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

/* What a family is. Strings and arrays are copied by metrics_register. */
struct metrics_desc {
    enum metrics_type type;
    const char *name;          /* [a-zA-Z_:][a-zA-Z0-9_:]*, unique in the registry */
    const char *help;          /* any UTF-8 text; escaped when rendered */
    const char *const *labels; /* NULL-terminated label names, or NULL for none */
    const double *buckets;     /* histograms: strictly ascending finite upper bounds; +Inf is
                                  implicit */
    size_t nbuckets;           /* 1..METRICS_MAX_BUCKETS for histograms, else 0 */
    size_t max_series;         /* 0 = METRICS_DEFAULT_MAX_SERIES */
};

/* Refreshes series from state held elsewhere (queue depth, process figures); called by
 * metrics_render before anything is written. */
typedef void metrics_collect_fn(struct metrics_registry *reg, void *user);

/* Returns an empty registry, or NULL when out of memory. Free it with metrics_registry_free. */
struct metrics_registry *metrics_registry_new(void);

/* Frees the registry with every family and series (handles to them become invalid). NULL is a
 * no-op. */
void metrics_registry_free(struct metrics_registry *reg);

/* Adds a family. A family without labels gets its one series now (rendered as 0 until used);
 * a labelled family renders only the series created by metrics_series. Returns the family
 * (owned by the registry), or NULL with err filled: -TELO_EINVAL for an invalid or duplicate
 * name, invalid, reserved ("__" prefix) or repeated label names, "le" on a histogram, too many
 * labels, or bad buckets; -TELO_ENOMEM. */
struct metrics_family *metrics_register(struct metrics_registry *reg,
                                        const struct metrics_desc *desc, struct telo_err *err);

/* Returns the family's series for values (one per label name, in the desc's order; NULL when
 * the family has no labels), creating it at zero on first use. The handle stays valid until
 * the registry is freed, so hot paths look it up once. Returns NULL with err filled:
 * -TELO_EINVAL for a NULL value or one longer than METRICS_MAX_LABEL_VALUE, -TELO_ETOOBIG when
 * the family already holds max_series series, -TELO_ENOMEM. */
struct metrics_series *metrics_series(struct metrics_family *fam, const char *const *values,
                                      struct telo_err *err);

/* Adds v (>= 0; counters never go down) to a counter. Does nothing when s is NULL, not a counter,
 * or v is negative or NaN, so a failed metrics_series never crashes the caller. */
void metrics_counter_add(struct metrics_series *s, double v);

/* Sets a counter mirrored from a count kept elsewhere (for collectors). Same no-op rules. */
void metrics_counter_set(struct metrics_series *s, double v);

/* Sets or adds to a gauge. Do nothing when s is NULL or not a gauge. */
void metrics_gauge_set(struct metrics_series *s, double v);
void metrics_gauge_add(struct metrics_series *s, double v);

/* Records one observation in a histogram. Does nothing when s is NULL or not a histogram. */
void metrics_histogram_observe(struct metrics_series *s, double v);

/* Replaces a histogram's state with a snapshot kept elsewhere (for collectors) from a
 * util/histogram whose bounds equal the family's. Returns 0, or -TELO_EINVAL (s NULL, not a
 * histogram, or other bounds), leaving s unchanged. */
int metrics_histogram_load(struct metrics_series *s, const struct histogram *h);

/* The current value of a counter or gauge, or the observation count of a histogram; 0 for NULL.
 * For tests and collectors. */
double metrics_series_value(const struct metrics_series *s);

/* Adds fn to the collectors metrics_render calls first, in the order added. Returns 0 or
 * -TELO_ENOMEM. */
int metrics_add_collector(struct metrics_registry *reg, metrics_collect_fn *fn, void *user,
                          struct telo_err *err);

/* Registers the process gauges client_golang's process collector exports, read from procfs at
 * each render: process_resident_memory_bytes and process_virtual_memory_bytes (VmRSS, VmSize of
 * proc_dir/status), process_open_fds (entries of proc_dir/fd), process_max_fds (RLIMIT_NOFILE),
 * process_start_time_seconds (proc_dir/stat's start time plus the boot time in /proc/stat) and
 * process_cpu_seconds_total (getrusage). proc_dir NULL means "/proc/self"; tests pass a fixture
 * directory. A figure that cannot be read keeps its last value. Returns 0, -TELO_EINVAL when
 * already registered, or -TELO_ENOMEM (some of the families may then be registered). */
int metrics_register_process(struct metrics_registry *reg, const char *proc_dir,
                             struct telo_err *err);

/* Runs the collectors, then appends every family with at least one series to out in the
 * Prometheus text exposition format 0.0.4 (families and series in registration order). Returns
 * 0, or -TELO_ETOOBIG / -TELO_ENOMEM when out cannot hold it all; out is then as it was. */
int metrics_render(struct metrics_registry *reg, struct buf *out, struct telo_err *err);

/* Appends v as the text format writes numbers: the shortest text that reads back as v, and
 * "+Inf", "-Inf", "NaN". Returns buf_append's result. */
int metrics_format_value(struct buf *out, double v);

#endif

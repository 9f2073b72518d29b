/* A registry of Prometheus counters, gauges and histograms, rendered in text format 0.0.4. */
#include "controller/metrics.h"

#include "util/memtune.h"
#include "util/strmap.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Separates label values in a series' index key: 0xff never occurs in UTF-8 text. */
#define KEY_SEPARATOR '\xff'

struct metrics_series {
    struct metrics_family *fam;
    char *key;                   /* label values joined by KEY_SEPARATOR; the index borrows it */
    char **values;               /* fam->nlabels copies */
    double value;                /* counters and gauges */
    unsigned long long *buckets; /* histograms: cumulative count per bound */
    unsigned long long count;    /* histograms */
    double sum;                  /* histograms */
};

struct metrics_family {
    enum metrics_type type;
    char *name;
    char *help;
    char *labels[METRICS_MAX_LABELS];
    size_t nlabels;
    double buckets[METRICS_MAX_BUCKETS];
    size_t nbuckets;
    size_t max_series;
    struct metrics_series **series; /* in creation order, which is the rendering order */
    size_t nseries;
    size_t series_cap;
    struct strmap *index; /* key -> series */
};

struct collector {
    metrics_collect_fn *fn;
    void *user;
};

struct process_state; /* the process collector's, owned by the registry */

struct metrics_registry {
    struct metrics_family **families;
    size_t nfamilies;
    size_t families_cap;
    struct strmap *by_name;
    struct collector *collectors;
    size_t ncollectors;
    size_t collectors_cap;
    struct process_state *process;
};

static void process_state_free(struct process_state *p);

/* ---- registry and families ---- */

static void series_free(struct metrics_series *s)
{
    if (s == NULL)
        return;
    if (s->values != NULL) {
        for (size_t i = 0; i < s->fam->nlabels; i++)
            free(s->values[i]);
    }
    free(s->values);
    free(s->buckets);
    free(s->key);
    free(s);
}

static void family_free(struct metrics_family *fam)
{
    if (fam == NULL)
        return;
    for (size_t i = 0; i < fam->nseries; i++)
        series_free(fam->series[i]);
    free(fam->series);
    strmap_free(fam->index);
    for (size_t i = 0; i < fam->nlabels; i++)
        free(fam->labels[i]);
    free(fam->name);
    free(fam->help);
    free(fam);
}

struct metrics_registry *metrics_registry_new(void)
{
    struct metrics_registry *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return NULL;
    reg->by_name = strmap_new();
    if (reg->by_name == NULL) {
        free(reg);
        return NULL;
    }
    return reg;
}

void metrics_registry_free(struct metrics_registry *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->nfamilies; i++)
        family_free(reg->families[i]);
    free(reg->families);
    strmap_free(reg->by_name);
    free(reg->collectors);
    process_state_free(reg->process);
    free(reg);
}

static int valid_name(const char *s, int colons)
{
    if (s == NULL || s[0] == '\0')
        return 0;
    for (const char *p = s; *p != '\0'; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (colons && c == ':') || (p != s && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

static int check_desc(const struct metrics_desc *desc, size_t *nlabels, struct telo_err *err)
{
    if (desc == NULL || !valid_name(desc->name, 1))
        return telo_err_set(err, TELO_EINVAL,
                            "metrics: name '%s' must match [a-zA-Z_:][a-zA-Z0-9_:]*",
                            desc && desc->name ? desc->name : "(null)");
    if (desc->type != METRICS_COUNTER && desc->type != METRICS_GAUGE &&
        desc->type != METRICS_HISTOGRAM)
        return telo_err_set(err, TELO_EINVAL, "metrics: %s: unknown type %d", desc->name,
                            (int)desc->type);
    size_t n = 0;
    for (; desc->labels != NULL && desc->labels[n] != NULL; n++) {
        const char *label = desc->labels[n];
        if (n == METRICS_MAX_LABELS)
            return telo_err_set(err, TELO_EINVAL, "metrics: %s: more than %d labels", desc->name,
                                METRICS_MAX_LABELS);
        if (!valid_name(label, 0) || strncmp(label, "__", 2) == 0)
            return telo_err_set(err, TELO_EINVAL,
                                "metrics: %s: label '%s' must match [a-zA-Z_][a-zA-Z0-9_]* "
                                "without the reserved '__' prefix",
                                desc->name, label);
        if (desc->type == METRICS_HISTOGRAM && strcmp(label, "le") == 0)
            return telo_err_set(err, TELO_EINVAL,
                                "metrics: %s: a histogram cannot have a label 'le'", desc->name);
        for (size_t j = 0; j < n; j++) {
            if (strcmp(desc->labels[j], label) == 0)
                return telo_err_set(err, TELO_EINVAL, "metrics: %s: label '%s' repeated",
                                    desc->name, label);
        }
    }
    *nlabels = n;
    if (desc->type != METRICS_HISTOGRAM) {
        if (desc->nbuckets != 0)
            return telo_err_set(err, TELO_EINVAL, "metrics: %s: only histograms have buckets",
                                desc->name);
        return 0;
    }
    if (desc->nbuckets == 0 || desc->nbuckets > METRICS_MAX_BUCKETS || desc->buckets == NULL)
        return telo_err_set(err, TELO_EINVAL, "metrics: %s: a histogram needs 1..%d buckets",
                            desc->name, METRICS_MAX_BUCKETS);
    for (size_t i = 0; i < desc->nbuckets; i++) {
        if (!isfinite(desc->buckets[i]) || (i > 0 && desc->buckets[i] <= desc->buckets[i - 1]))
            return telo_err_set(err, TELO_EINVAL,
                                "metrics: %s: bucket bounds must be finite and strictly "
                                "ascending (bound %zu)",
                                desc->name, i);
    }
    return 0;
}

struct metrics_family *metrics_register(struct metrics_registry *reg,
                                        const struct metrics_desc *desc, struct telo_err *err)
{
    size_t nlabels = 0;
    if (check_desc(desc, &nlabels, err) < 0)
        return NULL;
    if (strmap_get(reg->by_name, desc->name) != NULL) {
        telo_err_set(err, TELO_EINVAL, "metrics: %s is already registered", desc->name);
        return NULL;
    }
    if (reg->nfamilies == reg->families_cap) {
        size_t cap = reg->families_cap ? reg->families_cap * 2 : 16;
        struct metrics_family **families =
            realloc(reg->families, cap * sizeof(struct metrics_family *));
        if (families == NULL)
            goto nomem;
        reg->families = families;
        reg->families_cap = cap;
    }
    struct metrics_family *fam = calloc(1, sizeof(*fam));
    if (fam == NULL)
        goto nomem;
    fam->type = desc->type;
    fam->name = strdup(desc->name);
    fam->help = strdup(desc->help != NULL ? desc->help : "");
    fam->index = strmap_new();
    fam->max_series = desc->max_series ? desc->max_series : METRICS_DEFAULT_MAX_SERIES;
    fam->nbuckets = desc->nbuckets;
    if (desc->nbuckets > 0)
        memcpy(fam->buckets, desc->buckets, desc->nbuckets * sizeof(double));
    int failed = fam->name == NULL || fam->help == NULL || fam->index == NULL;
    for (size_t i = 0; i < nlabels && !failed; i++) {
        fam->labels[i] = strdup(desc->labels[i]);
        failed = fam->labels[i] == NULL;
        fam->nlabels = i + 1;
    }
    if (failed || strmap_put(reg->by_name, fam->name, fam) < 0) {
        family_free(fam);
        goto nomem;
    }
    reg->families[reg->nfamilies++] = fam;
    /* client_golang exports an unlabelled metric from its creation; do the same. */
    if (nlabels == 0 && metrics_series(fam, NULL, err) == NULL) {
        reg->nfamilies--;
        strmap_remove(reg->by_name, fam->name);
        family_free(fam);
        return NULL;
    }
    return fam;
nomem:
    telo_err_set(err, TELO_ENOMEM, "metrics: out of memory registering %s", desc->name);
    return NULL;
}

struct metrics_series *metrics_series(struct metrics_family *fam, const char *const *values,
                                      struct telo_err *err)
{
    if (fam == NULL) {
        telo_err_set(err, TELO_EINVAL, "metrics: no family");
        return NULL;
    }
    struct buf key;
    buf_init(&key, (size_t)METRICS_MAX_LABELS * (METRICS_MAX_LABEL_VALUE + 1));
    for (size_t i = 0; i < fam->nlabels; i++) {
        const char *v = values != NULL ? values[i] : NULL;
        if (v == NULL || strlen(v) > METRICS_MAX_LABEL_VALUE) {
            buf_release(&key);
            if (v == NULL)
                telo_err_set(err, TELO_EINVAL, "metrics: %s: label %s: value missing", fam->name,
                             fam->labels[i]);
            else
                telo_err_set(err, TELO_EINVAL, "metrics: %s: label %s: value longer than %d bytes",
                             fam->name, fam->labels[i], METRICS_MAX_LABEL_VALUE);
            return NULL;
        }
        char sep = KEY_SEPARATOR;
        if ((i > 0 && buf_append(&key, &sep, 1) < 0) || buf_append_str(&key, v) < 0) {
            buf_release(&key);
            goto nomem;
        }
    }
    struct metrics_series *found = strmap_get(fam->index, key.data != NULL ? key.data : "");
    if (found != NULL) {
        buf_release(&key);
        return found;
    }
    if (fam->nseries >= fam->max_series) {
        buf_release(&key);
        telo_err_set(err, TELO_ETOOBIG,
                     "metrics: %s already has %zu series; a label takes too many values", fam->name,
                     fam->max_series);
        return NULL;
    }
    if (fam->nseries == fam->series_cap) {
        size_t cap = fam->series_cap ? fam->series_cap * 2 : 4;
        struct metrics_series **series =
            realloc(fam->series, cap * sizeof(struct metrics_series *));
        if (series == NULL) {
            buf_release(&key);
            goto nomem;
        }
        fam->series = series;
        fam->series_cap = cap;
    }
    struct metrics_series *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        buf_release(&key);
        goto nomem;
    }
    s->fam = fam;
    s->key = key.data != NULL ? buf_steal(&key) : strdup("");
    s->values = calloc(fam->nlabels + 1, sizeof(char *));
    int failed = s->key == NULL || s->values == NULL;
    for (size_t i = 0; i < fam->nlabels && !failed; i++) {
        s->values[i] = strdup(values[i]);
        failed = s->values[i] == NULL;
    }
    if (!failed && fam->type == METRICS_HISTOGRAM) {
        s->buckets = calloc(fam->nbuckets, sizeof(*s->buckets));
        failed = s->buckets == NULL;
    }
    if (failed || strmap_put(fam->index, s->key, s) < 0) {
        series_free(s);
        goto nomem;
    }
    fam->series[fam->nseries++] = s;
    return s;
nomem:
    telo_err_set(err, TELO_ENOMEM, "metrics: out of memory adding a series to %s", fam->name);
    return NULL;
}

/* ---- values ---- */

void metrics_counter_add(struct metrics_series *s, double v)
{
    if (s == NULL || s->fam->type != METRICS_COUNTER || !(v >= 0))
        return;
    s->value += v;
}

void metrics_counter_set(struct metrics_series *s, double v)
{
    if (s == NULL || s->fam->type != METRICS_COUNTER || !(v >= 0))
        return;
    s->value = v;
}

void metrics_gauge_set(struct metrics_series *s, double v)
{
    if (s == NULL || s->fam->type != METRICS_GAUGE)
        return;
    s->value = v;
}

void metrics_gauge_add(struct metrics_series *s, double v)
{
    if (s == NULL || s->fam->type != METRICS_GAUGE)
        return;
    s->value += v;
}

void metrics_histogram_observe(struct metrics_series *s, double v)
{
    if (s == NULL || s->fam->type != METRICS_HISTOGRAM)
        return;
    s->count++;
    s->sum += v;
    for (size_t i = 0; i < s->fam->nbuckets; i++) {
        if (v <= s->fam->buckets[i])
            s->buckets[i]++;
    }
}

int metrics_histogram_load(struct metrics_series *s, const struct histogram *h)
{
    if (s == NULL || s->fam->type != METRICS_HISTOGRAM || h == NULL)
        return -TELO_EINVAL;
    if (h->nbounds != s->fam->nbuckets)
        return -TELO_EINVAL;
    for (size_t i = 0; i < h->nbounds; i++) {
        if (h->bounds[i] != s->fam->buckets[i])
            return -TELO_EINVAL;
    }
    for (size_t i = 0; i < h->nbounds; i++)
        s->buckets[i] = histogram_cumulative(h, i);
    s->count = h->count;
    s->sum = h->sum;
    return 0;
}

double metrics_series_value(const struct metrics_series *s)
{
    if (s == NULL)
        return 0;
    return s->fam->type == METRICS_HISTOGRAM ? (double)s->count : s->value;
}

int metrics_add_collector(struct metrics_registry *reg, metrics_collect_fn *fn, void *user,
                          struct telo_err *err)
{
    if (reg->ncollectors == reg->collectors_cap) {
        size_t cap = reg->collectors_cap ? reg->collectors_cap * 2 : 4;
        struct collector *c = realloc(reg->collectors, cap * sizeof(*c));
        if (c == NULL)
            return telo_err_set(err, TELO_ENOMEM, "metrics: out of memory adding a collector");
        reg->collectors = c;
        reg->collectors_cap = cap;
    }
    reg->collectors[reg->ncollectors++] = (struct collector){.fn = fn, .user = user};
    return 0;
}

/* ---- rendering ---- */

int metrics_format_value(struct buf *out, double v)
{
    if (isnan(v))
        return buf_append_str(out, "NaN");
    if (isinf(v))
        return buf_append_str(out, v > 0 ? "+Inf" : "-Inf");
    /* As Go's strconv.FormatFloat(v, 'g', -1, 64), which the client libraries (and so every
     * dashboard's le="..." matchers) use: the fewest significant digits that read back as v, in
     * exponent form when the exponent is below -4 or at least 6 ("1e+06", "1.7e+09"), else
     * plain ("0.0025", "10", "123456"). */
    char text[48];
    int digits = 1;
    for (; digits < 17; digits++) {
        snprintf(text, sizeof(text), "%.*e", digits - 1, v);
        if (strtod(text, NULL) == v)
            break;
    }
    snprintf(text, sizeof(text), "%.*e", digits - 1, v);
    const char *e = strchr(text, 'e');
    int exponent = e != NULL ? atoi(e + 1) : 0;
    if (exponent >= -4 && exponent < 6) {
        int decimals = digits - 1 - exponent;
        snprintf(text, sizeof(text), "%.*f", decimals > 0 ? decimals : 0, v);
    }
    return buf_append_str(out, text);
}

/* Escapes as the text format wants: backslash and newline always, double quote in label values.
 */
static int append_escaped(struct buf *out, const char *s, int quote)
{
    for (const char *p = s; *p != '\0'; p++) {
        int rc;
        if (*p == '\\')
            rc = buf_append(out, "\\\\", 2);
        else if (*p == '\n')
            rc = buf_append(out, "\\n", 2);
        else if (quote && *p == '"')
            rc = buf_append(out, "\\\"", 2);
        else
            rc = buf_append(out, p, 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Writes `name{l1="v1",...,extra="extra_value"} ` (no braces without labels). */
static int append_sample_name(struct buf *out, const struct metrics_series *s, const char *suffix,
                              const char *extra, const char *extra_value)
{
    const struct metrics_family *fam = s->fam;
    int rc = buf_append_str(out, fam->name);
    if (rc == 0 && suffix != NULL)
        rc = buf_append_str(out, suffix);
    if (rc < 0)
        return rc;
    if (fam->nlabels == 0 && extra == NULL)
        return buf_append(out, " ", 1);
    rc = buf_append(out, "{", 1);
    for (size_t i = 0; i < fam->nlabels && rc == 0; i++) {
        rc = buf_printf(out, "%s%s=\"", i > 0 ? "," : "", fam->labels[i]);
        if (rc == 0)
            rc = append_escaped(out, s->values[i], 1);
        if (rc == 0)
            rc = buf_append(out, "\"", 1);
    }
    if (rc == 0 && extra != NULL)
        rc = buf_printf(out, "%s%s=\"%s\"", fam->nlabels > 0 ? "," : "", extra, extra_value);
    if (rc == 0)
        rc = buf_append(out, "} ", 2);
    return rc;
}

static int append_sample(struct buf *out, const struct metrics_series *s, const char *suffix,
                         const char *extra, const char *extra_value, double v)
{
    int rc = append_sample_name(out, s, suffix, extra, extra_value);
    if (rc == 0)
        rc = metrics_format_value(out, v);
    if (rc == 0)
        rc = buf_append(out, "\n", 1);
    return rc;
}

static int append_histogram(struct buf *out, const struct metrics_series *s)
{
    const struct metrics_family *fam = s->fam;
    int rc = 0;
    for (size_t i = 0; i < fam->nbuckets && rc == 0; i++) {
        struct buf le;
        buf_init(&le, 64);
        rc = metrics_format_value(&le, fam->buckets[i]);
        if (rc == 0)
            rc = append_sample(out, s, "_bucket", "le", le.data, (double)s->buckets[i]);
        buf_release(&le);
    }
    if (rc == 0)
        rc = append_sample(out, s, "_bucket", "le", "+Inf", (double)s->count);
    if (rc == 0)
        rc = append_sample(out, s, "_sum", NULL, NULL, s->sum);
    if (rc == 0)
        rc = append_sample(out, s, "_count", NULL, NULL, (double)s->count);
    return rc;
}

static const char *type_name(enum metrics_type type)
{
    switch (type) {
    case METRICS_COUNTER:
        return "counter";
    case METRICS_GAUGE:
        return "gauge";
    case METRICS_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

static int append_family(struct buf *out, const struct metrics_family *fam)
{
    int rc = 0;
    if (fam->help[0] != '\0') {
        rc = buf_printf(out, "# HELP %s ", fam->name);
        if (rc == 0)
            rc = append_escaped(out, fam->help, 0);
        if (rc == 0)
            rc = buf_append(out, "\n", 1);
    }
    if (rc == 0)
        rc = buf_printf(out, "# TYPE %s %s\n", fam->name, type_name(fam->type));
    for (size_t i = 0; i < fam->nseries && rc == 0; i++) {
        const struct metrics_series *s = fam->series[i];
        if (fam->type == METRICS_HISTOGRAM)
            rc = append_histogram(out, s);
        else
            rc = append_sample(out, s, NULL, NULL, NULL, s->value);
    }
    return rc;
}

int metrics_render(struct metrics_registry *reg, struct buf *out, struct telo_err *err)
{
    for (size_t i = 0; i < reg->ncollectors; i++)
        reg->collectors[i].fn(reg, reg->collectors[i].user);

    size_t start = out->len;
    int rc = 0;
    for (size_t i = 0; i < reg->nfamilies && rc == 0; i++) {
        if (reg->families[i]->nseries > 0)
            rc = append_family(out, reg->families[i]);
    }
    if (rc < 0) {
        /* All or nothing: drop the partial text (buf has no truncate; its fields are public). */
        out->len = start;
        if (out->data != NULL)
            out->data[start] = '\0';
        return telo_err_set(err, -rc, "metrics: the exposition does not fit in %zu bytes",
                            out->max);
    }
    return 0;
}

/* ---- the process collector ---- */

struct process_state {
    char *dir;     /* "/proc/self" or a test's fixture */
    int real_proc; /* the fd listing includes the descriptor that reads it */
    struct metrics_series *resident;
    struct metrics_series *virtual_bytes;
    struct metrics_series *open_fds;
    struct metrics_series *max_fds;
    struct metrics_series *start_time;
    struct metrics_series *cpu;
    struct metrics_series *heap_in_use, *heap_free;
};

static void process_state_free(struct process_state *p)
{
    if (p == NULL)
        return;
    free(p->dir);
    free(p);
}

/* Reads up to cap-1 bytes of dir/name into text; returns the length or -1. */
static long read_small_file(const char *dir, const char *name, char *text, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(text, 1, cap - 1, f);
    fclose(f);
    text[n] = '\0';
    return (long)n;
}

/* "VmRSS:\t  1234 kB" -> 1234 * 1024 bytes. Returns -1 when the field is missing. */
static double status_kb_field(const char *text, const char *field)
{
    size_t flen = strlen(field);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':')
            return strtod(line + flen + 1, NULL) * 1024.0;
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

static double count_fds(const struct process_state *p)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/fd", p->dir);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    double n = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return p->real_proc && n > 0 ? n - 1 : n;
}

/* Start time in seconds since the epoch: field 22 of stat (clock ticks after boot) plus btime
 * from the system-wide stat beside the process directory, as client_golang's procfs reads it. */
static double start_time(const struct process_state *p)
{
    char text[4096];
    if (read_small_file(p->dir, "stat", text, sizeof(text)) < 0)
        return -1;
    /* The command name (field 2) may hold spaces and parentheses: count from its last ')'. */
    const char *rest = strrchr(text, ')');
    if (rest == NULL)
        return -1;
    rest++;
    unsigned long long ticks = 0;
    int field = 3; /* rest is at the space before this field */
    while (field < 22 && rest != NULL) {
        rest = strchr(rest + 1, ' ');
        field++;
    }
    if (rest == NULL)
        return -1;
    ticks = strtoull(rest + 1, NULL, 10);

    char stat[16384];
    if (read_small_file(p->dir, "../stat", stat, sizeof(stat)) < 0)
        return -1;
    const char *btime = strstr(stat, "\nbtime ");
    if (btime == NULL)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return strtod(btime + 7, NULL) + (double)ticks / (double)hz;
}

static void collect_process(struct metrics_registry *reg, void *user)
{
    (void)reg;
    struct process_state *p = user;
    char status[8192];
    if (read_small_file(p->dir, "status", status, sizeof(status)) >= 0) {
        double rss = status_kb_field(status, "VmRSS");
        double vm = status_kb_field(status, "VmSize");
        if (rss >= 0)
            metrics_gauge_set(p->resident, rss);
        if (vm >= 0)
            metrics_gauge_set(p->virtual_bytes, vm);
    }
    double fds = count_fds(p);
    if (fds >= 0)
        metrics_gauge_set(p->open_fds, fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        metrics_gauge_set(p->max_fds, (double)rl.rlim_cur);
    /* The start time never changes; read it once. */
    if (metrics_series_value(p->start_time) == 0) {
        double t = start_time(p);
        if (t > 0)
            metrics_gauge_set(p->start_time, t);
    }
    double in_use, free_bytes;
    if (p->real_proc && util_memtune_heap(&in_use, &free_bytes) == 0) {
        metrics_gauge_set(p->heap_in_use, in_use);
        metrics_gauge_set(p->heap_free, free_bytes);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        metrics_counter_set(p->cpu, cpu);
    }
}

int metrics_register_process(struct metrics_registry *reg, const char *proc_dir,
                             struct telo_err *err)
{
    if (reg->process != NULL || strmap_get(reg->by_name, "process_open_fds") != NULL)
        return telo_err_set(err, TELO_EINVAL, "metrics: process metrics already registered");
    struct telo_err local;
    if (err == NULL)
        err = &local;
    struct process_state *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return telo_err_set(err, TELO_ENOMEM, "metrics: out of memory");
    p->real_proc = proc_dir == NULL;
    p->dir = strdup(proc_dir != NULL ? proc_dir : "/proc/self");
    if (p->dir == NULL) {
        process_state_free(p);
        return telo_err_set(err, TELO_ENOMEM, "metrics: out of memory");
    }
    static const struct {
        enum metrics_type type;
        const char *name;
        const char *help;
        size_t offset;
    } gauges[] = {
        {METRICS_COUNTER, "process_cpu_seconds_total",
         "Total user and system CPU time spent in "
         "seconds.",
         offsetof(struct process_state, cpu)},
        {METRICS_GAUGE, "process_open_fds", "Number of open file descriptors.",
         offsetof(struct process_state, open_fds)},
        {METRICS_GAUGE, "process_max_fds", "Maximum number of open file descriptors.",
         offsetof(struct process_state, max_fds)},
        {METRICS_GAUGE, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
         offsetof(struct process_state, virtual_bytes)},
        {METRICS_GAUGE, "process_resident_memory_bytes", "Resident memory size in bytes.",
         offsetof(struct process_state, resident)},
        {METRICS_GAUGE, "process_start_time_seconds",
         "Start time of the process since unix epoch in seconds.",
         offsetof(struct process_state, start_time)},
        /* Issue 20: whether memory above the caches is live or the heap's holes. */
        {METRICS_GAUGE, "telo_heap_in_use_bytes",
         "Bytes malloc has handed out and not had back (glibc mallinfo2).",
         offsetof(struct process_state, heap_in_use)},
        {METRICS_GAUGE, "telo_heap_free_bytes",
         "Bytes malloc holds free, in holes between live blocks or at the heap's top.",
         offsetof(struct process_state, heap_free)},
    };
    for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++) {
        struct metrics_desc desc = {
            .type = gauges[i].type, .name = gauges[i].name, .help = gauges[i].help};
        struct metrics_family *fam = metrics_register(reg, &desc, err);
        if (fam == NULL) {
            process_state_free(p);
            return -err->code;
        }
        struct metrics_series **slot = (struct metrics_series **)((char *)p + gauges[i].offset);
        *slot = metrics_series(fam, NULL, err);
    }
    if (metrics_add_collector(reg, collect_process, p, err) < 0) {
        process_state_free(p);
        return -TELO_ENOMEM;
    }
    reg->process = p;
    return 0;
}

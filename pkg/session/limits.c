/* Session limits (issue 17): which sessions hold a slot under limits.maxSessions and
 * limits.maxSessionsPerNamespace, and whether a session waiting for one may start, oldest first.
 * Pure: the reconciler feeds it from the session informer's cache. */
#include "session/limits.h"

#include "session/phase.h"
#include "util/err.h"
#include "util/jget.h"
#include "util/strmap.h"
#include "util/timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long integer(const struct json_object *o, const char *key)
{
    int64_t v = 0;
    return jget_int(o, key, &v) == 0 ? (long long)v : 0;
}

enum session_limits_state session_limits_classify(const struct json_object *obj, int has_pod,
                                                  int admitted)
{
    struct json_object *o = (struct json_object *)obj;
    struct json_object *spec = jget(o, "spec"), *status = jget(o, "status");
    int stopped = 0;
    if (jget(jget(o, "metadata"), "deletionTimestamp") ||
        (jget_bool(spec, "stopped", &stopped) == 0 && stopped))
        return SESSION_LIMITS_OUT;
    enum session_phase phase = session_phase_of(status);
    int restart = phase != SESSION_PHASE_UNKNOWN &&
                  integer(spec, "restartGeneration") > integer(status, "restartGeneration");
    if (phase == SESSION_PHASE_STOPPED || (session_phase_is_terminal(phase) && restart))
        /* About to start a new run: it queues like a new session (its old pod is no slot). */
        return admitted ? SESSION_LIMITS_HOLDS : SESSION_LIMITS_WAITS;
    if (session_phase_is_terminal(phase))
        return SESSION_LIMITS_OUT;
    if (has_pod || admitted || phase == SESSION_PHASE_BUILDING ||
        phase == SESSION_PHASE_PROVISIONING || phase == SESSION_PHASE_RUNNING)
        return SESSION_LIMITS_HOLDS;
    if (phase == SESSION_PHASE_PENDING) {
        const char *reason = jget_string(status, "reason");
        if (reason && *reason)
            return strcmp(reason, SESSION_LIMITS_REASON) == 0 ? SESSION_LIMITS_WAITS
                                                              : SESSION_LIMITS_HOLDS;
        enum session_phase last = session_phase_of(jget(status, "lastRun"));
        if (last == SESSION_PHASE_BUILDING || last == SESSION_PHASE_PROVISIONING ||
            last == SESSION_PHASE_RUNNING)
            return SESSION_LIMITS_HOLDS;
    }
    return SESSION_LIMITS_WAITS;
}

/* The line's order: oldest first, then namespace and name (unique together). */
static int before(const struct session_limits_entry *a, const struct session_limits_entry *b)
{
    double ca = a->created < 0 ? 1e300 : a->created, cb = b->created < 0 ? 1e300 : b->created;
    if (ca != cb)
        return ca < cb;
    int c = strcmp(a->namespace, b->namespace);
    if (c != 0)
        return c < 0;
    return strcmp(a->name, b->name) < 0;
}

/* Per namespace: sessions holding a slot, waiting ones met so far along the line, and those of
 * them that start now. */
struct ns_count {
    long holding, waiting_seen, starting_now;
};

static const struct session_limits_entry *sort_base;

static int by_line(const void *a, const void *b)
{
    const struct session_limits_entry *x = &sort_base[*(const size_t *)a];
    const struct session_limits_entry *y = &sort_base[*(const size_t *)b];
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

static void free_counts(struct strmap *m)
{
    struct strmap_iter it = {0};
    const char *k;
    void *v;
    while (strmap_next(m, &it, &k, &v))
        free(v);
    strmap_free(m);
}

static struct ns_count *count_of(struct strmap *m, const char *ns)
{
    struct ns_count *c = strmap_get(m, ns);
    if (c)
        return c;
    c = calloc(1, sizeof(*c));
    if (c && strmap_put(m, ns, c) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

int session_limits_decide_all(const struct session_limits_config *cfg,
                              const struct session_limits_entry *entries, size_t n,
                              struct session_limits_place *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (struct session_limits_place){.admitted = 1};
    if (cfg->max_sessions <= 0 && cfg->max_per_namespace <= 0)
        return 0;
    struct strmap *ns = strmap_new();
    size_t *line = malloc((n ? n : 1) * sizeof(*line));
    size_t nline = 0;
    long holding = 0;
    int rc = ns && line ? 0 : -TELO_ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct session_limits_entry *e = &entries[i];
        struct ns_count *c = count_of(ns, e->namespace);
        if (!c) {
            rc = -TELO_ENOMEM;
            break;
        }
        if (e->state == SESSION_LIMITS_HOLDS) {
            holding++;
            c->holding++;
        } else if (e->state == SESSION_LIMITS_WAITS) {
            line[nline++] = i;
        }
    }
    if (rc < 0) {
        free(line);
        free_counts(ns);
        return rc;
    }
    sort_base = entries;
    qsort(line, nline, sizeof(*line), by_line);
    /* Walk the line once: each waiting session starts when the sessions holding a slot and those
     * ahead of it that start leave room, per namespace and in all. */
    long starting = 0;     /* ahead, admitted by their namespace's limit */
    long starting_now = 0; /* ahead, admitted by every limit: they take a slot as they start */
    for (size_t k = 0; k < nline; k++) {
        const struct session_limits_entry *e = &entries[line[k]];
        struct session_limits_place *place = &out[line[k]];
        struct ns_count *c = strmap_get(ns, e->namespace);
        int ns_room =
            cfg->max_per_namespace <= 0 || c->holding + c->waiting_seen < cfg->max_per_namespace;
        if (!ns_room) {
            place->admitted = 0;
            place->limit = "limits.maxSessionsPerNamespace";
            place->max = cfg->max_per_namespace;
            place->holding = c->holding + c->starting_now;
            place->position = c->holding + c->waiting_seen - cfg->max_per_namespace + 1;
        } else if (cfg->max_sessions > 0 && holding + starting >= cfg->max_sessions) {
            place->admitted = 0;
            place->limit = "limits.maxSessions";
            place->max = cfg->max_sessions;
            place->holding = holding + starting_now;
            place->position = holding + starting - cfg->max_sessions + 1;
        }
        c->waiting_seen++;
        if (ns_room)
            starting++;
        if (place->admitted) {
            c->starting_now++;
            starting_now++;
        }
    }
    free(line);
    free_counts(ns);
    return 0;
}

int session_limits_decide(const struct session_limits_config *cfg,
                          const struct session_limits_entry *entries, size_t n, size_t self,
                          struct session_limits_place *out)
{
    struct session_limits_place *places = malloc((n ? n : 1) * sizeof(*places));
    if (!places)
        return -TELO_ENOMEM;
    int rc = session_limits_decide_all(cfg, entries, n, places);
    if (rc == 0)
        *out = places[self];
    free(places);
    return rc;
}

long session_limits_shown_position(long shown, long place)
{
    if (shown <= 0 || place <= SESSION_LIMITS_EXACT_PLACES || place >= shown)
        return place;
    /* Moved up by less than a quarter (4 * (shown - place) < shown): what the status says stays.
     * Rounding the quarter up keeps the comparison exact without multiplying shown, which
     * comes from the status and may be anything up to LONG_MAX. */
    return shown - place < shown / 4 + (shown % 4 != 0) ? shown : place;
}

void session_limits_message(const struct session_limits_place *p, const char *ns, char *out,
                            size_t len)
{
    long ahead = p->position > 1 ? p->position - 1 : 0;
    char where[300];
    if (strcmp(p->limit, "limits.maxSessionsPerNamespace") == 0)
        snprintf(where, sizeof(where), "in namespace %s", ns);
    else
        snprintf(where, sizeof(where), "in all namespaces");
    snprintf(out, len,
             "%s is %ld and %ld session%s %s hold%s a slot; %ld waiting ahead of this one (place "
             "%ld in line). It starts when a session holding a slot finishes, is stopped or is "
             "deleted: kubectl get telosessions -n %s",
             p->limit, p->max, p->holding, p->holding == 1 ? "" : "s", where,
             p->holding == 1 ? "s" : "", ahead, p->position, ns);
}

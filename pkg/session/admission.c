/* Session limits at the edge (issue 17): the decision of session/limits.h fed from the session
 * informer's cache, the admissions this process made that the cache does not show yet, and the
 * wake of waiting sessions when a session stops holding a slot. Only one replica reconciles
 * (leader election), so what this process admitted is all that can be missing from its cache.
 * Each session is read once per event of it into a summary, and the line is decided for every
 * waiting session at once and reused until something it was decided from changes: a burst of N
 * waiting sessions costs a few walks of N summaries, not N parses of N sessions. */
#include "session/pass.h"

#include "session/limits.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/strmap.h"
#include "util/timefmt.h"

#include <ev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long an admission of ours is trusted when the cache never shows it (a pod create and the
 * status write that follows normally show within a second or two). */
#define ADMITTED_S 60.0

/* The wake is coalesced over this long: a burst of events scans the cache once. */
#define WAKE_DELAY_S 0.02

/* A line of decisions is reused this long at most, should no event end it sooner (an admission
 * of ours ages out of admitted_here without one). */
#define LINE_TTL_S 1.0

struct admitted {
    char key[320];
    char uid[64];
    double until;
};

/* What the limits need of one watched session, read once per event of it rather than parsed
 * from the cache at every decision: the decisions of a burst of N waiting sessions would parse
 * N sessions each. */
struct summary {
    const char *ns, *name; /* in key's storage below */
    char uid[64];
    double created;
    unsigned char state[2][2]; /* session_limits_classify by [has_pod][admitted] */
    char key[];                /* "ns/name", then ns and name */
};

/* Every waiting session's place, decided in one walk of the line (session_limits_decide_all) and
 * kept until the sessions, their pods or our admissions change, or LINE_TTL_S passes. */
struct line {
    int valid;
    double made;
    size_t n;
    struct session_limits_entry *entries; /* borrow the summaries' strings */
    struct session_limits_place *places;
    struct strmap *index; /* key -> its entry */
};

struct session_admission {
    struct session_reconciler *r;
    struct strmap *admitted; /* "ns/name" -> struct admitted */
    struct strmap *dirty;    /* namespaces to wake (keys owned: strdup), or "" for all */
    struct strmap *sessions; /* "ns/name" -> struct summary, every watched session */
    int summarized;          /* sessions holds the whole cache (events keep it so) */
    struct line line;
    ev_timer wake;
};
static double now_of(const struct session_reconciler *r)
{
    return session_pass_now(r);
}

static int limits_on(const struct session_config *cfg)
{
    return cfg->max_sessions > 0 || cfg->max_sessions_per_namespace > 0;
}

/* Whether this process admitted the session key with uid and the admission holds. */
static int admitted_here(struct session_admission *a, const char *key, const char *uid)
{
    struct admitted *e = strmap_get(a->admitted, key);
    if (!e)
        return 0;
    if (e->until <= now_of(a->r) || !uid || strcmp(e->uid, uid) != 0) {
        free(strmap_remove(a->admitted, key));
        return 0;
    }
    return 1;
}

static void admit(struct session_admission *a, const char *key, const char *uid)
{
    struct admitted *e = strmap_get(a->admitted, key);
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e)
            return;
        snprintf(e->key, sizeof(e->key), "%s", key);
        if (strmap_put(a->admitted, e->key, e) < 0) {
            free(e);
            return;
        }
    }
    snprintf(e->uid, sizeof(e->uid), "%s", uid ? uid : "");
    e->until = now_of(a->r) + ADMITTED_S;
}

/* Whether the pod cache holds a pod under the session's child name. */
static int has_pod(const struct session_reconciler *r, const char *ns, const char *name)
{
    struct session s = {.name = name, .namespace = ns};
    char child[64], key[400];
    session_child_name(&s, child, sizeof(child));
    snprintf(key, sizeof(key), "%s/%s", ns, child);
    return cache_store_get(ctrl_informer_store(r->inf.pods), key) != NULL;
}

/* The state of session obj under key (a pass's own view of its session: its status may be newer
 * than the cache's). */
static enum session_limits_state state_of(struct session_admission *a, const char *key,
                                          struct json_object *obj)
{
    struct json_object *meta = jget(obj, "metadata");
    const char *ns = jget_string(meta, "namespace"), *name = jget_string(meta, "name");
    if (!ns || !name)
        return SESSION_LIMITS_OUT;
    int pod = has_pod(a->r, ns, name);
    enum session_limits_state cached = session_limits_classify(obj, pod, 0);
    if (cached != SESSION_LIMITS_WAITS)
        return cached;
    return session_limits_classify(obj, pod, admitted_here(a, key, jget_string(meta, "uid")));
}

/* --- the sessions as the limits see them ----------------------------------------------------- */

static void line_drop(struct line *l)
{
    free(l->entries);
    free(l->places);
    strmap_free(l->index);
    *l = (struct line){0};
}

/* Something the line was decided from changed. */
static void line_invalidate(struct session_admission *a)
{
    if (a->line.valid)
        line_drop(&a->line);
}

/* Reads the cached session obj under key into the summaries (or drops it: not watched, no
 * name). Returns its summary, or NULL. A valid line borrows the summaries' strings: a summary
 * it was made from is freed only with the line invalidated. */
static struct summary *summarize(struct session_admission *a, const char *key,
                                 struct json_object *obj)
{
    struct json_object *meta = jget(obj, "metadata");
    const char *ns = jget_string(meta, "namespace"), *name = jget_string(meta, "name");
    struct summary *old = strmap_get(a->sessions, key);
    if (!ns || !name || !session_informers_watched(a->r->cfg, ns, strlen(ns))) {
        if (old) {
            line_invalidate(a);
            free(strmap_remove(a->sessions, key));
        }
        return NULL;
    }
    size_t kl = strlen(key), nl = strlen(ns), ml = strlen(name);
    struct summary *e = calloc(1, sizeof(*e) + kl + nl + ml + 3);
    if (!e) {
        line_invalidate(a);
        free(strmap_remove(a->sessions, key));
        return NULL;
    }
    memcpy(e->key, key, kl + 1);
    char *at = e->key + kl + 1;
    memcpy(at, ns, nl + 1);
    e->ns = at;
    memcpy(at + nl + 1, name, ml + 1);
    e->name = at + nl + 1;
    snprintf(e->uid, sizeof(e->uid), "%s",
             jget_string(meta, "uid") ? jget_string(meta, "uid") : "");
    e->created = timefmt_parse(jget_string(meta, "creationTimestamp"));
    for (int pod = 0; pod < 2; pod++)
        for (int adm = 0; adm < 2; adm++)
            e->state[pod][adm] = (unsigned char)session_limits_classify(obj, pod, adm);
    /* Most events of a session change nothing the line is made of (a waiting session's own
     * SessionLimit status, a Running one's probes): the summary, and the line, stand. */
    if (old && strcmp(old->uid, e->uid) == 0 && old->created == e->created &&
        memcmp(old->state, e->state, sizeof(e->state)) == 0) {
        free(e);
        return old;
    }
    line_invalidate(a);
    free(strmap_remove(a->sessions, key));
    if (strmap_put(a->sessions, e->key, e) < 0) {
        free(e);
        return NULL;
    }
    return e;
}

/* The state of a cached session; an admission of ours the cache shows now is forgotten (never
 * from a status of ours the cache may not show yet: other sessions' decisions read the cache). */
static enum session_limits_state summary_state(struct session_admission *a, struct summary *e)
{
    int pod = has_pod(a->r, e->ns, e->name);
    enum session_limits_state cached = (enum session_limits_state)e->state[pod][0];
    if (cached != SESSION_LIMITS_WAITS) {
        free(strmap_remove(a->admitted, e->key));
        return cached;
    }
    return (enum session_limits_state)e->state[pod][admitted_here(a, e->key, e->uid)];
}

static void summarize_one(void *ctx, const struct cache_object *co)
{
    struct json_object *obj = cache_object_parse(co);
    (void)summarize(ctx, co->key, obj);
    json_object_put(obj);
}

/* The summaries of every cached session, read once; the session events keep them. */
static void summarize_all(struct session_admission *a)
{
    if (a->summarized)
        return;
    cache_store_each(ctrl_informer_store(a->r->inf.sessions), summarize_one, a);
    a->summarized = 1;
}

/* The entries of every summarized session (the caller frees *entries), each entry's key put in
 * index (may be NULL), pointing at its entry. Returns the count, or (size_t)-1 when out of
 * memory. */
static size_t gather(struct session_admission *a, struct session_limits_entry **entries,
                     struct strmap *index)
{
    size_t n = strmap_len(a->sessions), i = 0;
    *entries = malloc((n ? n : 1) * sizeof(**entries));
    if (!*entries)
        return (size_t)-1;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (i < n && strmap_next(a->sessions, &it, &key, &v)) {
        struct summary *e = v;
        (*entries)[i] = (struct session_limits_entry){.namespace = e->ns,
                                                      .name = e->name,
                                                      .created = e->created,
                                                      .state = summary_state(a, e)};
        if (index && strmap_put(index, e->key, &(*entries)[i]) < 0) {
            free(*entries);
            return (size_t)-1;
        }
        i++;
    }
    return i;
}

static int line_make(struct session_admission *a)
{
    struct line *l = &a->line;
    line_drop(l);
    struct session_limits_config cfg = {.max_sessions = a->r->cfg->max_sessions,
                                        .max_per_namespace = a->r->cfg->max_sessions_per_namespace};
    if (!(l->index = strmap_new()) || (l->n = gather(a, &l->entries, l->index)) == (size_t)-1) {
        l->entries = NULL;
        line_drop(l);
        return -TELO_ENOMEM;
    }
    if (!(l->places = malloc((l->n ? l->n : 1) * sizeof(*l->places))) ||
        session_limits_decide_all(&cfg, l->entries, l->n, l->places) < 0) {
        line_drop(l);
        return -TELO_ENOMEM;
    }
    l->valid = 1;
    l->made = now_of(a->r);
    return 0;
}

/* --- the decision ---------------------------------------------------------------------------- */

/* key's place when its own view (WAITS) differs from the cache's: the line decided again with its
 * entry as it sees itself. Returns 0, 1 when key is not a watched session, or -TELO_ENOMEM. */
static int decide_alone(struct session_admission *a, const char *key,
                        struct session_limits_place *place)
{
    struct summary *self = strmap_get(a->sessions, key);
    if (!self)
        return 1;
    struct session_limits_entry *entries = NULL;
    size_t n = gather(a, &entries, NULL), at = n;
    if (n == (size_t)-1)
        return -TELO_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (entries[i].namespace == self->ns && entries[i].name == self->name)
            at = i;
    int rc = 1;
    if (at < n) {
        entries[at].state = SESSION_LIMITS_WAITS;
        struct session_limits_config cfg = {.max_sessions = a->r->cfg->max_sessions,
                                            .max_per_namespace =
                                                a->r->cfg->max_sessions_per_namespace};
        rc = session_limits_decide(&cfg, entries, n, at, place);
    }
    free(entries);
    return rc;
}

/* The place and message a waiting session's status shows (session_limits_shown_position). Where
 * the place it shows stays, so does the message under the same limit: the message also names how
 * many sessions hold a slot, and a count that moves while the place shown does not would still
 * write the status of every session far back in line. */
static void shown_place(struct pass *p, struct session_limits_place *place)
{
    int64_t shown = 0;
    const char *old = NULL;
    if (jget_string_is(p->s.status, "reason", SESSION_LIMITS_REASON)) {
        (void)jget_int(p->s.status, "queuePosition", &shown);
        old = jget_string(p->s.status, "message");
    }
    long real = place->position;
    place->position = session_limits_shown_position((long)shown, real);
    p->queue_position = place->position;
    char same_limit[160];
    snprintf(same_limit, sizeof(same_limit), "%s is %ld and ", place->limit, place->max);
    if (place->position != real && old && strncmp(old, same_limit, strlen(same_limit)) == 0 &&
        strlen(old) < sizeof(p->limit_message))
        snprintf(p->limit_message, sizeof(p->limit_message), "%s", old);
    else
        session_limits_message(place, p->s.namespace, p->limit_message, sizeof(p->limit_message));
}

void session_admission_decide(struct pass *p)
{
    struct session_admission *a = p->r->admission;
    if (!a)
        return;
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", p->s.namespace, p->s.name);
    /* Quick: a session holding a slot, or out, needs no line. */
    struct json_object *self = json_object_new_object();
    json_object_object_add(self, "metadata", json_object_get(jget(p->s.obj, "metadata")));
    json_object_object_add(self, "spec", json_object_get(jget(p->s.obj, "spec")));
    if (p->s.status)
        json_object_object_add(self, "status", json_object_get(p->s.status));
    enum session_limits_state state = state_of(a, key, self);
    json_object_put(self);
    if (state != SESSION_LIMITS_WAITS)
        return;
    summarize_all(a);
    if (a->line.valid && now_of(a->r) - a->line.made > LINE_TTL_S)
        line_invalidate(a);
    struct session_limits_place place;
    int rc = a->line.valid ? 0 : line_make(a);
    const struct session_limits_entry *mine = rc == 0 ? strmap_get(a->line.index, key) : NULL;
    if (mine && mine->state == SESSION_LIMITS_WAITS)
        place = a->line.places[mine - a->line.entries];
    else /* the cache does not show the session waiting yet (or no line): decide it alone */
        rc = decide_alone(a, key, &place);
    if (rc != 0) {
        /* Not in the cache (deleted meanwhile) or out of memory: wait, look again. */
        p->limit_waiting = 1;
        p->queue_position = 0;
        snprintf(p->limit_message, sizeof(p->limit_message),
                 "waiting for the session limits to be checked");
        return;
    }
    if (place.admitted) {
        admit(a, key, p->s.uid);
        line_invalidate(a);
        telo_log(TELO_LOG_DEBUG, "session admitted", "session=%s", key);
        return;
    }
    p->limit_waiting = 1;
    shown_place(p, &place);
}

/* --- the wake -------------------------------------------------------------------------------- */

static void on_wake(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct session_admission *a = t->data;
    summarize_all(a);
    int all = strmap_get(a->dirty, "") != NULL || a->r->cfg->max_sessions > 0;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(a->sessions, &it, &key, &v)) {
        struct summary *e = v;
        if ((all || strmap_get(a->dirty, e->ns)) && summary_state(a, e) == SESSION_LIMITS_WAITS)
            (void)ctrl_controller_enqueue(a->r->inf.c, e->key);
    }
    it = (struct strmap_iter){0};
    while (strmap_next(a->dirty, &it, &key, &v)) {
        strmap_remove(a->dirty, key);
        if (*key)
            free(v);
    }
}

/* A session changed: its summary is read again, and when it holds no slot now (it finished, was
 * stopped or is gone), the sessions waiting behind it are queued, once per burst. */
static void on_session_event(void *ud, const struct cache_object *obj,
                             void (*emit)(void *ctx, const char *key), void *ctx)
{
    (void)emit;
    (void)ctx;
    struct session_admission *a = ud;
    const struct cache_object *now =
        cache_store_get(ctrl_informer_store(a->r->inf.sessions), obj->key);
    if (now) {
        struct json_object *cur = cache_object_parse(now);
        struct summary *e = cur ? summarize(a, now->key, cur) : NULL;
        if (!cur)
            line_invalidate(a);
        json_object_put(cur);
        if (e && summary_state(a, e) != SESSION_LIMITS_OUT)
            return;
    } else {
        line_invalidate(a); /* before its summary goes: the line borrows its strings */
        free(strmap_remove(a->sessions, obj->key));
        free(strmap_remove(a->admitted, obj->key));
    }
    const char *slash = strchr(obj->key, '/');
    char ns[256];
    snprintf(ns, sizeof(ns), "%.*s", slash ? (int)(slash - obj->key) : 0, obj->key);
    if (!strmap_get(a->dirty, ns)) {
        char *copy = strdup(ns);
        if (!copy || strmap_put(a->dirty, copy, copy) < 0) {
            free(copy);
            /* Out of memory: wake every namespace rather than none. */
            if (!strmap_get(a->dirty, ""))
                (void)strmap_put(a->dirty, "", (void *)"");
        }
    }
    if (!ev_is_active(&a->wake)) {
        ev_timer_set(&a->wake, WAKE_DELAY_S, 0);
        ev_timer_start(kube_transport_loop(a->r->t), &a->wake);
    }
}

/* A pod came or went: a session with a pod holds a slot, so the line is decided again. */
static void on_pod_event(void *ud, const struct cache_object *obj,
                         void (*emit)(void *ctx, const char *key), void *ctx)
{
    (void)obj;
    (void)emit;
    (void)ctx;
    line_invalidate(ud);
}

int session_admission_new(struct session_reconciler *r, struct telo_err *err)
{
    if (!limits_on(r->cfg))
        return 0;
    struct session_admission *a = calloc(1, sizeof(*a));
    if (!a || !(a->admitted = strmap_new()) || !(a->dirty = strmap_new()) ||
        !(a->sessions = strmap_new())) {
        if (a) {
            strmap_free(a->admitted);
            strmap_free(a->dirty);
            free(a);
        }
        return telo_err_set(err, TELO_ENOMEM, "session limits: out of memory");
    }
    a->r = r;
    ev_timer_init(&a->wake, on_wake, WAKE_DELAY_S, 0);
    a->wake.data = a;
    r->admission = a;
    int rc = ctrl_controller_watch_mapped(r->inf.c, r->inf.sessions, on_session_event, a, err);
    if (rc < 0)
        return rc;
    return ctrl_controller_watch_mapped(r->inf.c, r->inf.pods, on_pod_event, a, err);
}

void session_admission_free(struct session_reconciler *r)
{
    struct session_admission *a = r ? r->admission : NULL;
    if (!a)
        return;
    ev_timer_stop(kube_transport_loop(r->t), &a->wake);
    struct strmap_iter it = {0};
    const char *k;
    void *v;
    while (strmap_next(a->admitted, &it, &k, &v))
        free(v);
    strmap_free(a->admitted);
    it = (struct strmap_iter){0};
    while (strmap_next(a->dirty, &it, &k, &v)) {
        if (*k)
            free(v);
    }
    strmap_free(a->dirty);
    it = (struct strmap_iter){0};
    while (strmap_next(a->sessions, &it, &k, &v))
        free(v);
    strmap_free(a->sessions);
    line_drop(&a->line);
    free(a);
    r->admission = NULL;
}

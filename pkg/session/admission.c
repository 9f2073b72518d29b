/* Session limits at the edge (issue 17): the decision of session/limits.h fed from the session
 * informer's cache, the admissions this process made that the cache does not show yet, and the
 * wake of waiting sessions when a session stops holding a slot. Only one replica reconciles
 * (leader election), so what this process admitted is all that can be missing from its cache. */
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

struct admitted {
    char key[320];
    char uid[64];
    double until;
};

struct session_admission {
    struct session_reconciler *r;
    struct strmap *admitted; /* "ns/name" -> struct admitted */
    struct strmap *dirty;    /* namespaces to wake (keys owned: strdup), or "" for all */
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

/* The state of session obj under key. cached: obj is the cache's, and an admission of ours the
 * cache shows now is forgotten (never from a status of ours the cache may not show yet: other
 * sessions' decisions read the cache). */
static enum session_limits_state state_of(struct session_admission *a, const char *key,
                                          struct json_object *obj, int cached_obj)
{
    struct json_object *meta = jget(obj, "metadata");
    const char *ns = jget_string(meta, "namespace"), *name = jget_string(meta, "name");
    if (!ns || !name)
        return SESSION_LIMITS_OUT;
    int pod = has_pod(a->r, ns, name);
    enum session_limits_state cached = session_limits_classify(obj, pod, 0);
    if (cached != SESSION_LIMITS_WAITS) {
        if (cached_obj)
            free(strmap_remove(a->admitted, key));
        return cached;
    }
    return session_limits_classify(obj, pod, admitted_here(a, key, jget_string(meta, "uid")));
}

/* --- the decision ---------------------------------------------------------------------------- */

struct scan {
    struct session_admission *a;
    const struct pass *p; /* the deciding pass: its own entry from its status */
    struct session_limits_entry *entries;
    struct json_object **objs; /* parsed, for the strings the entries borrow */
    size_t n, cap;
    size_t self;
    int found, oom;
};

static void scan_one(void *ctx, const struct cache_object *co)
{
    struct scan *sc = ctx;
    if (sc->oom)
        return;
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 64;
        struct session_limits_entry *e = realloc(sc->entries, cap * sizeof(*e));
        if (e)
            sc->entries = e;
        struct json_object **o = e ? realloc(sc->objs, cap * sizeof(struct json_object *)) : NULL;
        if (!e || !o) {
            sc->oom = 1;
            return;
        }
        sc->objs = o;
        sc->cap = cap;
    }
    struct json_object *obj = json_tokener_parse(co->json);
    struct json_object *meta = jget(obj, "metadata");
    const char *ns = jget_string(meta, "namespace"), *name = jget_string(meta, "name");
    if (!ns || !name || !session_informers_watched(sc->a->r->cfg, ns, strlen(ns))) {
        json_object_put(obj);
        return;
    }
    struct session_limits_entry *e = &sc->entries[sc->n];
    e->namespace = ns;
    e->name = name;
    e->created = timefmt_parse(jget_string(meta, "creationTimestamp"));
    if (sc->p && strcmp(ns, sc->p->s.namespace) == 0 && strcmp(name, sc->p->s.name) == 0) {
        /* Its own state from the status the pass goes by (ours, while the cache lags). */
        struct json_object *self = json_object_new_object();
        json_object_object_add(self, "metadata", json_object_get(meta));
        json_object_object_add(self, "spec", json_object_get(jget(obj, "spec")));
        if (sc->p->s.status)
            json_object_object_add(self, "status", json_object_get(sc->p->s.status));
        e->state = state_of(sc->a, co->key, self, 0);
        json_object_put(self);
        sc->self = sc->n;
        sc->found = 1;
    } else {
        e->state = state_of(sc->a, co->key, obj, 1);
    }
    sc->objs[sc->n++] = obj;
}

static void scan_release(struct scan *sc)
{
    for (size_t i = 0; i < sc->n; i++)
        json_object_put(sc->objs[i]);
    free(sc->objs);
    free(sc->entries);
}

/* Scans the sessions the limits of ns concern: its namespace's, or every one with a cluster
 * limit. */
static void scan_sessions(struct session_admission *a, const char *ns, struct scan *sc)
{
    const struct cache_store *store = ctrl_informer_store(a->r->inf.sessions);
    if (a->r->cfg->max_sessions > 0 || !ns)
        cache_store_each(store, scan_one, sc);
    else
        (void)cache_store_by_index(store, "namespace", ns, scan_one, sc, NULL);
}

void session_admission_decide(struct pass *p)
{
    struct session_admission *a = p->r->admission;
    if (!a)
        return;
    char key[320];
    snprintf(key, sizeof(key), "%s/%s", p->s.namespace, p->s.name);
    /* Quick: a session holding a slot, or out, needs no scan. */
    struct json_object *self = json_object_new_object();
    json_object_object_add(self, "metadata", json_object_get(jget(p->s.obj, "metadata")));
    json_object_object_add(self, "spec", json_object_get(jget(p->s.obj, "spec")));
    if (p->s.status)
        json_object_object_add(self, "status", json_object_get(p->s.status));
    enum session_limits_state state = state_of(a, key, self, 0);
    json_object_put(self);
    if (state != SESSION_LIMITS_WAITS)
        return;
    struct scan sc = {.a = a, .p = p};
    scan_sessions(a, p->s.namespace, &sc);
    struct session_limits_config cfg = {.max_sessions = p->r->cfg->max_sessions,
                                        .max_per_namespace = p->r->cfg->max_sessions_per_namespace};
    struct session_limits_place place;
    if (sc.oom || !sc.found || session_limits_decide(&cfg, sc.entries, sc.n, sc.self, &place) < 0) {
        /* Not in the cache (deleted meanwhile) or out of memory: wait, look again. */
        p->limit_waiting = 1;
        p->queue_position = 0;
        snprintf(p->limit_message, sizeof(p->limit_message),
                 "waiting for the session limits to be checked");
        scan_release(&sc);
        return;
    }
    scan_release(&sc);
    if (place.admitted) {
        admit(a, key, p->s.uid);
        telo_log(TELO_LOG_DEBUG, "session admitted", "session=%s", key);
        return;
    }
    p->limit_waiting = 1;
    p->queue_position = place.position;
    session_limits_message(&place, p->s.namespace, p->limit_message, sizeof(p->limit_message));
}

/* --- the wake -------------------------------------------------------------------------------- */

struct wake_scan {
    struct session_admission *a;
};

static void wake_one(void *ctx, const struct cache_object *co)
{
    struct wake_scan *w = ctx;
    struct json_object *obj = json_tokener_parse(co->json);
    if (obj && state_of(w->a, co->key, obj, 1) == SESSION_LIMITS_WAITS)
        (void)ctrl_controller_enqueue(w->a->r->inf.c, co->key);
    json_object_put(obj);
}

static void on_wake(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct session_admission *a = t->data;
    struct wake_scan w = {a};
    const struct cache_store *store = ctrl_informer_store(a->r->inf.sessions);
    int all = strmap_get(a->dirty, "") != NULL || a->r->cfg->max_sessions > 0;
    struct strmap_iter it = {0};
    const char *ns;
    void *v;
    while (strmap_next(a->dirty, &it, &ns, &v)) {
        if (!all)
            (void)cache_store_by_index(store, "namespace", ns, wake_one, &w, NULL);
        strmap_remove(a->dirty, ns);
        if (*ns)
            free(v);
    }
    if (all)
        cache_store_each(store, wake_one, &w);
}

/* A session changed: when it holds no slot now (it finished, was stopped or is gone), the
 * sessions waiting behind it are queued, once per burst. */
static void on_session_event(void *ud, const struct cache_object *obj,
                             void (*emit)(void *ctx, const char *key), void *ctx)
{
    (void)emit;
    (void)ctx;
    struct session_admission *a = ud;
    const struct cache_object *now =
        cache_store_get(ctrl_informer_store(a->r->inf.sessions), obj->key);
    if (now) {
        struct json_object *cur = json_tokener_parse(now->json);
        enum session_limits_state state = cur ? state_of(a, now->key, cur, 1) : SESSION_LIMITS_OUT;
        json_object_put(cur);
        if (state != SESSION_LIMITS_OUT)
            return;
    } else {
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

int session_admission_new(struct session_reconciler *r, struct telo_err *err)
{
    if (!limits_on(r->cfg))
        return 0;
    struct session_admission *a = calloc(1, sizeof(*a));
    if (!a || !(a->admitted = strmap_new()) || !(a->dirty = strmap_new())) {
        if (a) {
            strmap_free(a->admitted);
            free(a);
        }
        return telo_err_set(err, TELO_ENOMEM, "session limits: out of memory");
    }
    a->r = r;
    ev_timer_init(&a->wake, on_wake, WAKE_DELAY_S, 0);
    a->wake.data = a;
    r->admission = a;
    return ctrl_controller_watch_mapped(r->inf.c, r->inf.sessions, on_session_event, a, err);
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
    free(a);
    r->admission = NULL;
}

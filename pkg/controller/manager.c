/* The controller manager: informers feed work queues, reconcilers drain them, on one loop. */
#include "controller/manager.h"

#include "controller/leader.h"
#include "kube/transport.h"
#include "util/jget.h"
#include "util/jitter.h"
#include "util/log.h"
#include "util/soon.h"

#include <ev.h>
#include <json.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INFORMERS   16
#define MAX_CONTROLLERS 8
#define MAX_WATCHES     8
/* Queued keys are dispatched once the loop has handled what is pending, and at the latest this
 * long after being queued: a loop never idle (a flood of watch events) still reconciles. */
#define PUMP_MAX_DELAY_S 0.05
#define PUMP_KEYS        128

enum map_kind { MAP_SELF, MAP_OWNER, MAP_LABEL, MAP_FUNC };

/* How an informer's change becomes a key of a controller. */
struct watch {
    struct ctrl_controller *c;
    enum map_kind how;
    char *arg;       /* owner kind or label name */
    ctrl_map_fn *fn; /* MAP_FUNC */
    void *ud;
};

struct ctrl_informer {
    struct ctrl_manager *m;
    char *name;
    struct cache_reflector *reflector;
    struct watch watches[MAX_WATCHES];
    size_t nwatches;
};

struct ctrl_controller {
    struct ctrl_manager *m;
    char *name;
    struct ctrl_informer *primary;
    ctrl_reconcile_fn *fn;
    void *ud;
    struct wq *q;
    struct ctrl_controller_stats stats;
};

struct ctrl_reconcile {
    struct ctrl_controller *c;
    const char *key; /* the queue's copy, valid until wq_done */
    double started;
    ev_timer deadline;
    int timed_out;
};

struct ctrl_manager {
    struct ev_loop *loop;
    struct kube_transport *t;
    struct ctrl_manager_opts opts;
    struct ctrl_informer *informers[MAX_INFORMERS];
    size_t ninformers;
    struct ctrl_controller *controllers[MAX_CONTROLLERS];
    size_t ncontrollers;
    int started, synced, active, stopping;
    struct util_soon pump; /* dispatches queued keys outside of the callbacks that queue them */
    size_t pump_first;     /* the controller a pass starts with */
    ev_timer due;          /* wakes the queues when their earliest delayed key is due */
    ev_timer sync_timeout; /* caches must sync within the timeout */
    ev_timer resync;
    ev_timer shutdown_deadline;
    ev_signal sigterm, sigint;
    struct leader_elector *el;
    char error[TELO_ERR_MSG_MAX];
};

static void schedule(struct ctrl_manager *m);

/* --- keys from events -------------------------------------------------------------------- */

static void enqueue(struct ctrl_controller *c, const char *key, enum cache_origin origin)
{
    double now = ev_now(c->m->loop);
    /* Keys from a list or resync wait behind real changes. */
    int rc = origin == CACHE_FROM_LIST ? wq_add_low(c->q, key, now) : wq_add(c->q, key, now);
    if (rc < 0)
        telo_log(TELO_LOG_ERROR, "cannot queue key", "controller=%s key=%s", c->name, key);
    schedule(c->m);
}

/* "namespace/name" (or "name" for a cluster-scoped object) into out; 1 when it fits. */
static int object_key(const char *namespace, const char *name, char *out, size_t len)
{
    if (!name || !*name)
        return 0;
    int n = namespace && *namespace ? snprintf(out, len, "%s/%s", namespace, name)
                                    : snprintf(out, len, "%s", name);
    return n > 0 && (size_t)n < len;
}

/* The key "namespace/name" of obj's controller owner of the given kind, into out. The object
 * came from the API server: every member is type-checked (a null or a number where a string
 * belongs is no owner). */
static int owner_key(const struct cache_object *obj, const char *kind, char *out, size_t len)
{
    struct json_object *o = cache_object_parse(obj);
    struct json_object *meta = jget_object(o, "metadata");
    struct json_object *refs = jget_array(meta, "ownerReferences");
    const char *namespace = jget_string(meta, "namespace");
    int found = 0;
    for (size_t i = 0; refs && i < json_object_array_length(refs) && !found; i++) {
        struct json_object *ref = json_object_array_get_idx(refs, i);
        int controller = 0;
        if (jget_bool(ref, "controller", &controller) < 0 || !controller ||
            !jget_string_is(ref, "kind", kind))
            continue;
        found = object_key(namespace, jget_string(ref, "name"), out, len);
    }
    json_object_put(o);
    return found;
}

static int label_key(const struct cache_object *obj, const char *label, char *out, size_t len)
{
    struct json_object *o = cache_object_parse(obj);
    struct json_object *meta = jget_object(o, "metadata");
    int found = object_key(jget_string(meta, "namespace"),
                           jget_string(jget_object(meta, "labels"), label), out, len);
    json_object_put(o);
    return found;
}

struct mapped {
    struct ctrl_controller *c;
    enum cache_origin origin;
};

static void emit_mapped(void *ctx, const char *key)
{
    struct mapped *m = ctx;
    enqueue(m->c, key, m->origin);
}

static void notify(struct ctrl_informer *inf, const struct cache_object *obj,
                   enum cache_origin origin)
{
    char key[512];
    for (size_t i = 0; i < inf->nwatches; i++) {
        struct watch *w = &inf->watches[i];
        switch (w->how) {
        case MAP_SELF:
            enqueue(w->c, obj->key, origin);
            break;
        case MAP_OWNER:
            if (owner_key(obj, w->arg, key, sizeof(key)))
                enqueue(w->c, key, origin);
            break;
        case MAP_LABEL:
            if (label_key(obj, w->arg, key, sizeof(key)))
                enqueue(w->c, key, origin);
            break;
        case MAP_FUNC: {
            struct mapped m = {w->c, origin};
            w->fn(w->ud, obj, emit_mapped, &m);
            break;
        }
        }
    }
}

static void on_add(void *ud, const struct cache_object *obj, enum cache_origin origin)
{
    notify(ud, obj, origin);
}

static void on_update(void *ud, const struct cache_object *old, const struct cache_object *obj,
                      enum cache_origin origin)
{
    /* A change of owner or label moves the object between keys: both must look. */
    notify(ud, old, origin);
    notify(ud, obj, origin);
}

static void on_delete(void *ud, const struct cache_object *old, enum cache_origin origin)
{
    notify(ud, old, origin);
}

static void on_synced(void *ud)
{
    struct ctrl_informer *inf = ud;
    struct ctrl_manager *m = inf->m;
    if (m->synced)
        return;
    for (size_t i = 0; i < m->ninformers; i++) {
        if (!cache_reflector_has_synced(m->informers[i]->reflector))
            return;
    }
    m->synced = 1;
    ev_timer_stop(m->loop, &m->sync_timeout);
    telo_log(TELO_LOG_INFO, "caches synced", "informers=%zu", m->ninformers);
    schedule(m);
}

/* --- dispatch ---------------------------------------------------------------------------- */

static void finish(struct ctrl_reconcile *rec, const struct ctrl_result *res, int timed_out);

static void on_deadline(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)loop;
    (void)revents;
    struct ctrl_reconcile *rec = timer->data;
    struct ctrl_result res = {.outcome = CTRL_ERROR, .message = "reconcile timed out"};
    finish(rec, &res, 1);
}

static void start_reconcile(struct ctrl_controller *c, const char *key)
{
    struct ctrl_manager *m = c->m;
    struct ctrl_reconcile *rec = calloc(1, sizeof(*rec));
    if (!rec) {
        /* Give the key back with backoff; memory may be there next time. */
        wq_done(c->q, key, ev_now(m->loop));
        wq_add_rate_limited(c->q, key, ev_now(m->loop));
        return;
    }
    rec->c = c;
    rec->key = key;
    rec->started = ev_now(m->loop);
    ev_timer_init(&rec->deadline, on_deadline, m->opts.reconcile_timeout, 0);
    rec->deadline.data = rec;
    ev_timer_start(m->loop, &rec->deadline);
    c->stats.in_flight++;
    c->fn(c->ud, rec, key);
}

/* Starts what the queues hold, up to PUMP_KEYS reconciles a pass: most finish before they return
 * (nothing to write), so the concurrency bound alone let one pass take a whole resync (10,000
 * keys, 0.6 s) while the loop polled nothing. The rest start in the loop's next iteration. */
static void pump_queues(struct ctrl_manager *m)
{
    double now = ev_now(m->loop);
    double next_due = -1;
    int started = 0;
    size_t first = m->pump_first;
    for (size_t n = 0; n < m->ncontrollers; n++) {
        size_t i = (first + n) % m->ncontrollers;
        struct ctrl_controller *c = m->controllers[i];
        if (started == PUMP_KEYS && m->pump_first == first)
            m->pump_first = i; /* the pass ended before this one: it goes first next time */
        while ((m->active || m->stopping) && m->synced && started < PUMP_KEYS &&
               c->stats.in_flight < (size_t)m->opts.max_concurrent_reconciles) {
            const char *key = wq_get(c->q, now);
            if (!key)
                break;
            started++;
            start_reconcile(c, key);
        }
        double due = wq_next_due(c->q);
        if (due >= 0 && (next_due < 0 || due < next_due))
            next_due = due;
    }
    if (started == PUMP_KEYS)
        next_due = now; /* more may be ready: the next iteration goes on */
    ev_timer_stop(m->loop, &m->due);
    if (next_due >= 0) {
        double delay = next_due - now;
        ev_timer_set(&m->due, delay > 0 ? delay : 0, 0);
        ev_timer_start(m->loop, &m->due);
    }
}

static void on_pump(void *ud)
{
    pump_queues(ud);
}

static void on_due(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)loop;
    (void)revents;
    pump_queues(timer->data);
}

/* Dispatches once the loop is idle, or within PUMP_MAX_DELAY_S: the callers are often reflector
 * or request callbacks that should not re-enter a reconciler. */
static void schedule(struct ctrl_manager *m)
{
    util_soon_schedule(m->loop, &m->pump);
}

const char *ctrl_outcome_name(enum ctrl_outcome outcome)
{
    /* controller-runtime's result label values. */
    static const char *const names[] = {"success", "requeue_after", "error", "terminal_error"};
    return outcome <= CTRL_TERMINAL_ERROR ? names[outcome] : "unknown";
}

static void check_drained(struct ctrl_manager *m);

static void finish(struct ctrl_reconcile *rec, const struct ctrl_result *res, int timed_out)
{
    struct ctrl_controller *c = rec->c;
    struct ctrl_manager *m = c->m;
    double now = ev_now(m->loop);
    if (rec->timed_out) {
        /* The deadline already counted this reconcile; its late answer changes nothing. */
        free(rec);
        return;
    }
    ev_timer_stop(m->loop, &rec->deadline);
    enum ctrl_outcome outcome = res ? res->outcome : CTRL_SUCCESS;
    c->stats.reconciles[outcome]++;
    histogram_observe(&c->stats.reconcile_time, now - rec->started);
    c->stats.in_flight--;
    const char *key = rec->key;
    /* Copy: wq_done may free the queue's copy of the key. */
    char key_copy[512];
    snprintf(key_copy, sizeof(key_copy), "%s", key);
    wq_done(c->q, key, now);
    /* -v 4: every reconcile, as klog's V(4) traces controller-runtime's. */
    telo_log(TELO_LOG_DEBUG, "reconciled", "controller=%s key=%s outcome=%s took_ms=%.1f", c->name,
             key_copy, ctrl_outcome_name(outcome), (now - rec->started) * 1000);
    switch (outcome) {
    case CTRL_SUCCESS:
        wq_forget(c->q, key_copy);
        break;
    case CTRL_REQUEUE_AFTER:
        wq_forget(c->q, key_copy);
        wq_add_after(c->q, key_copy, res->requeue_after, now);
        break;
    case CTRL_ERROR:
        telo_log(TELO_LOG_WARN, "reconcile failed", "controller=%s key=%s error=\"%s\" retries=%u",
                 c->name, key_copy, res && res->message ? res->message : "",
                 wq_num_requeues(c->q, key_copy));
        wq_add_rate_limited(c->q, key_copy, now);
        break;
    case CTRL_TERMINAL_ERROR:
        telo_log(TELO_LOG_ERROR, "reconcile failed for good", "controller=%s key=%s error=\"%s\"",
                 c->name, key_copy, res && res->message ? res->message : "");
        wq_forget(c->q, key_copy);
        break;
    }
    if (timed_out) {
        c->stats.timeouts++;
        /* Keep rec until the reconciler's own finish arrives, then free it above. */
        rec->timed_out = 1;
    } else {
        free(rec);
    }
    schedule(m);
    if (m->stopping)
        check_drained(m);
}

void ctrl_reconcile_finish(struct ctrl_reconcile *rec, const struct ctrl_result *res)
{
    finish(rec, res, 0);
}

int ctrl_controller_enqueue(struct ctrl_controller *c, const char *key)
{
    int rc = wq_add(c->q, key, ev_now(c->m->loop));
    schedule(c->m);
    return rc;
}

/* --- resync, sync timeout, shutdown ------------------------------------------------------ */

static void arm_resync(struct ctrl_manager *m)
{
    if (m->opts.resync_period <= 0)
        return;
    double period = m->opts.resync_period * (0.9 + 0.2 * util_random_unit());
    ev_timer_set(&m->resync, period, 0);
    ev_timer_start(m->loop, &m->resync);
}

struct resync_ctx {
    struct ctrl_controller *c;
};

static void resync_one(void *ctx, const struct cache_object *obj)
{
    struct resync_ctx *r = ctx;
    enqueue(r->c, obj->key, CACHE_FROM_LIST);
}

static void on_resync(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)loop;
    (void)revents;
    struct ctrl_manager *m = timer->data;
    for (size_t i = 0; i < m->ncontrollers; i++) {
        struct resync_ctx ctx = {m->controllers[i]};
        cache_store_each(cache_reflector_store(m->controllers[i]->primary->reflector), resync_one,
                         &ctx);
    }
    arm_resync(m);
}

static void on_sync_timeout(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)revents;
    struct ctrl_manager *m = timer->data;
    for (size_t i = 0; i < m->ninformers; i++) {
        const struct cache_reflector *r = m->informers[i]->reflector;
        if (cache_reflector_has_synced(r))
            continue;
        snprintf(m->error, sizeof(m->error),
                 "informer %.64s did not sync within %.0fs (last error: %.300s); check that the "
                 "API server is reachable and that RBAC allows list and watch",
                 m->informers[i]->name, m->opts.cache_sync_timeout,
                 cache_reflector_last_error(r)[0] ? cache_reflector_last_error(r) : "none");
        break;
    }
    telo_log(TELO_LOG_ERROR, "caches did not sync", "error=\"%s\"", m->error);
    ev_break(loop, EVBREAK_ALL);
}

static void on_released(int rc, void *ud)
{
    struct ctrl_manager *m = ud;
    if (rc < 0)
        telo_log(TELO_LOG_WARN,
                 "could not release the lease; a follower takes over when it expires", "rc=%d", rc);
    telo_log(TELO_LOG_INFO, "shutdown complete", "controllers=%zu", m->ncontrollers);
    ev_break(m->loop, EVBREAK_ALL);
}

static void check_drained(struct ctrl_manager *m)
{
    for (size_t i = 0; i < m->ncontrollers; i++) {
        if (!wq_drained(m->controllers[i]->q))
            return;
    }
    /* Drained: hand the lease over so a follower need not wait for it to expire. */
    if (m->el && leader_release(m->el, on_released, m) == 0)
        return;
    telo_log(TELO_LOG_INFO, "shutdown complete", "controllers=%zu", m->ncontrollers);
    ev_break(m->loop, EVBREAK_ALL);
}

static void on_shutdown_deadline(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)revents;
    struct ctrl_manager *m = timer->data;
    telo_log(TELO_LOG_WARN, "shutdown timed out with reconciles still running", "timeout=%.0fs",
             m->opts.shutdown_timeout);
    ev_break(loop, EVBREAK_ALL);
}

void ctrl_manager_stop(struct ctrl_manager *m)
{
    if (m->stopping)
        return;
    m->stopping = 1;
    telo_log(TELO_LOG_INFO, "shutting down", "drain_timeout=%.0fs", m->opts.shutdown_timeout);
    ev_timer_stop(m->loop, &m->resync);
    for (size_t i = 0; i < m->ncontrollers; i++)
        wq_shutdown(m->controllers[i]->q);
    ev_timer_init(&m->shutdown_deadline, on_shutdown_deadline, m->opts.shutdown_timeout, 0);
    m->shutdown_deadline.data = m;
    ev_timer_start(m->loop, &m->shutdown_deadline);
    schedule(m);
    check_drained(m);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    ctrl_manager_stop(w->data);
}

/* --- lifecycle --------------------------------------------------------------------------- */

struct ctrl_manager *ctrl_manager_new(struct ev_loop *loop, struct kube_transport *t,
                                      const struct ctrl_manager_opts *opts)
{
    struct ctrl_manager *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->loop = loop;
    m->t = t;
    if (opts)
        m->opts = *opts;
    if (m->opts.max_concurrent_reconciles <= 0)
        m->opts.max_concurrent_reconciles = 1;
    if (m->opts.resync_period == 0)
        m->opts.resync_period = 10 * 3600;
    if (m->opts.cache_sync_timeout <= 0)
        m->opts.cache_sync_timeout = 120;
    if (m->opts.shutdown_timeout <= 0)
        m->opts.shutdown_timeout = 30;
    if (m->opts.reconcile_timeout <= 0)
        m->opts.reconcile_timeout = 60;
    if (m->opts.queue.backoff_base <= 0)
        wq_config_default(&m->opts.queue);
    m->active = 1;
    util_soon_init(&m->pump, PUMP_MAX_DELAY_S, on_pump, m);
    ev_timer_init(&m->due, on_due, 0, 0);
    m->due.data = m;
    ev_timer_init(&m->sync_timeout, on_sync_timeout, m->opts.cache_sync_timeout, 0);
    m->sync_timeout.data = m;
    ev_timer_init(&m->resync, on_resync, 0, 0);
    m->resync.data = m;
    return m;
}

void ctrl_manager_free(struct ctrl_manager *m)
{
    if (!m)
        return;
    util_soon_cancel(m->loop, &m->pump);
    ev_timer_stop(m->loop, &m->due);
    ev_timer_stop(m->loop, &m->sync_timeout);
    ev_timer_stop(m->loop, &m->resync);
    ev_timer_stop(m->loop, &m->shutdown_deadline);
    leader_free(m->el);
    if (m->opts.handle_signals && m->started) {
        ev_signal_stop(m->loop, &m->sigterm);
        ev_signal_stop(m->loop, &m->sigint);
    }
    for (size_t i = 0; i < m->ninformers; i++) {
        struct ctrl_informer *inf = m->informers[i];
        cache_reflector_free(inf->reflector);
        for (size_t j = 0; j < inf->nwatches; j++)
            free(inf->watches[j].arg);
        free(inf->name);
        free(inf);
    }
    for (size_t i = 0; i < m->ncontrollers; i++) {
        wq_free(m->controllers[i]->q);
        free(m->controllers[i]->name);
        free(m->controllers[i]);
    }
    free(m);
}

struct ctrl_informer *ctrl_manager_add_informer(struct ctrl_manager *m, const char *name,
                                                const struct cache_reflector_config *cfg,
                                                struct telo_err *err)
{
    if (m->ninformers == MAX_INFORMERS) {
        telo_err_set(err, TELO_EINVAL, "informer %s: at most %d informers", name, MAX_INFORMERS);
        return NULL;
    }
    struct ctrl_informer *inf = calloc(1, sizeof(*inf));
    if (!inf || !(inf->name = strdup(name))) {
        free(inf);
        telo_err_set(err, TELO_ENOMEM, "informer %s: out of memory", name);
        return NULL;
    }
    inf->m = m;
    struct cache_handlers h = {on_add, on_update, on_delete, on_synced, inf};
    inf->reflector = cache_reflector_new(m->t, cfg, &h, err);
    if (!inf->reflector) {
        free(inf->name);
        free(inf);
        return NULL;
    }
    m->informers[m->ninformers++] = inf;
    return inf;
}

const struct cache_store *ctrl_informer_store(const struct ctrl_informer *inf)
{
    return cache_reflector_store(inf->reflector);
}

static int add_watch(struct ctrl_informer *inf, struct ctrl_controller *c, enum map_kind how,
                     const char *arg, struct telo_err *err)
{
    if (inf->nwatches == MAX_WATCHES)
        return telo_err_set(err, TELO_EINVAL, "informer %s: at most %d watches", inf->name,
                            MAX_WATCHES);
    char *copy = arg ? strdup(arg) : NULL;
    if (arg && !copy)
        return telo_err_set(err, TELO_ENOMEM, "informer %s: out of memory", inf->name);
    inf->watches[inf->nwatches++] = (struct watch){c, how, copy, NULL, NULL};
    return 0;
}

struct ctrl_controller *ctrl_manager_add_controller(struct ctrl_manager *m, const char *name,
                                                    struct ctrl_informer *primary,
                                                    ctrl_reconcile_fn *fn, void *ud,
                                                    struct telo_err *err)
{
    if (m->ncontrollers == MAX_CONTROLLERS) {
        telo_err_set(err, TELO_EINVAL, "controller %s: at most %d controllers", name,
                     MAX_CONTROLLERS);
        return NULL;
    }
    struct ctrl_controller *c = calloc(1, sizeof(*c));
    if (!c || !(c->name = strdup(name)) || !(c->q = wq_new(&m->opts.queue, ev_now(m->loop)))) {
        if (c)
            free(c->name);
        free(c);
        telo_err_set(err, TELO_ENOMEM, "controller %s: out of memory", name);
        return NULL;
    }
    c->m = m;
    c->primary = primary;
    c->fn = fn;
    c->ud = ud;
    /* controller-runtime's reconcile_time_seconds buckets: 5 ms .. ~80 s, doubling. */
    histogram_init_exponential(&c->stats.reconcile_time, 0.005, 2, 15);
    if (add_watch(primary, c, MAP_SELF, NULL, err) < 0) {
        wq_free(c->q);
        free(c->name);
        free(c);
        return NULL;
    }
    m->controllers[m->ncontrollers++] = c;
    return c;
}

int ctrl_controller_watch_owned(struct ctrl_controller *c, struct ctrl_informer *inf,
                                const char *owner_kind, struct telo_err *err)
{
    return add_watch(inf, c, MAP_OWNER, owner_kind, err);
}

int ctrl_controller_watch_labelled(struct ctrl_controller *c, struct ctrl_informer *inf,
                                   const char *label, struct telo_err *err)
{
    return add_watch(inf, c, MAP_LABEL, label, err);
}

int ctrl_controller_watch_mapped(struct ctrl_controller *c, struct ctrl_informer *inf,
                                 ctrl_map_fn *fn, void *ud, struct telo_err *err)
{
    if (add_watch(inf, c, MAP_FUNC, NULL, err) < 0)
        return -err->code;
    inf->watches[inf->nwatches - 1].fn = fn;
    inf->watches[inf->nwatches - 1].ud = ud;
    return 0;
}

int ctrl_manager_start(struct ctrl_manager *m, struct telo_err *err)
{
    m->started = 1;
    if (m->opts.handle_signals) {
        ev_signal_init(&m->sigterm, on_signal, SIGTERM);
        ev_signal_init(&m->sigint, on_signal, SIGINT);
        m->sigterm.data = m->sigint.data = m;
        ev_signal_start(m->loop, &m->sigterm);
        ev_signal_start(m->loop, &m->sigint);
    }
    ev_timer_start(m->loop, &m->sync_timeout);
    for (size_t i = 0; i < m->ninformers; i++) {
        int rc = cache_reflector_start(m->informers[i]->reflector, err);
        if (rc < 0)
            return rc;
    }
    arm_resync(m);
    if (m->el)
        return leader_start(m->el, err);
    return 0;
}

static void on_started_leading(void *ud)
{
    struct ctrl_manager *m = ud;
    telo_log(TELO_LOG_INFO, "became the leader; reconciling", "controllers=%zu", m->ncontrollers);
    ctrl_manager_set_active(m, 1);
}

static void on_stopped_leading(void *ud)
{
    struct ctrl_manager *m = ud;
    ctrl_manager_set_active(m, 0);
    if (m->stopping)
        return;
    /* Another replica may be writing already: stop now rather than race it. */
    snprintf(m->error, sizeof(m->error), "lost the leader lease; restart to rejoin as a follower");
    telo_log(TELO_LOG_ERROR, "lost the leader lease", "controllers=%zu", m->ncontrollers);
    ev_break(m->loop, EVBREAK_ALL);
}

static void on_new_leader(const char *identity, void *ud)
{
    (void)ud;
    telo_log(TELO_LOG_INFO, "leader observed", "identity=%s", identity);
}

int ctrl_manager_enable_leader_election(struct ctrl_manager *m, const struct ctrl_leader_opts *o,
                                        struct telo_err *err)
{
    struct leader_config lc = {
        .namespace = o->namespace,
        .name = o->name,
        .identity = o->identity,
        .timing = o->timing,
        .callbacks = {on_started_leading, on_stopped_leading, on_new_leader, m},
    };
    m->el = leader_new(m->t, &lc, err);
    if (!m->el)
        return -err->code;
    m->active = 0;
    return 0;
}

struct leader_elector *ctrl_manager_leader(const struct ctrl_manager *m)
{
    return m->el;
}

void ctrl_manager_set_active(struct ctrl_manager *m, int active)
{
    m->active = active;
    if (active)
        schedule(m);
}

int ctrl_manager_max_concurrent(const struct ctrl_manager *m)
{
    return m->opts.max_concurrent_reconciles;
}

int ctrl_manager_synced(const struct ctrl_manager *m)
{
    return m->synced;
}

const char *ctrl_manager_error(const struct ctrl_manager *m)
{
    return m->error;
}

const struct ctrl_controller_stats *ctrl_controller_stats(const struct ctrl_controller *c)
{
    return &c->stats;
}

const struct wq *ctrl_controller_queue(const struct ctrl_controller *c)
{
    return c->q;
}

const char *ctrl_controller_name(const struct ctrl_controller *c)
{
    return c->name;
}

struct ctrl_controller *ctrl_manager_controller(const struct ctrl_manager *m, size_t i)
{
    return i < m->ncontrollers ? m->controllers[i] : NULL;
}

struct ctrl_informer *ctrl_manager_informer(const struct ctrl_manager *m, size_t i)
{
    return i < m->ninformers ? m->informers[i] : NULL;
}

const char *ctrl_informer_name(const struct ctrl_informer *inf)
{
    return inf->name;
}

const struct cache_reflector *ctrl_informer_reflector(const struct ctrl_informer *inf)
{
    return inf->reflector;
}

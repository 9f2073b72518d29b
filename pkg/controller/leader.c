/* Leader election on a coordination.k8s.io/v1 Lease, with client-go's leaderelection semantics. */
#include "controller/leader.h"

#include "kube/rest.h"
#include "kube/status.h"
#include "kube/transport.h"
#include "util/jget.h"
#include "util/jitter.h"
#include "util/log.h"
#include "util/timefmt.h"

#include <ev.h>
#include <json.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ---- the pure part ----------------------------------------------------------------------------
 */

void leader_timing_default(struct leader_timing *t)
{
    t->lease_duration = 15;
    t->renew_deadline = 10;
    t->retry_period = 2;
    t->jitter_factor = 1.2;
}

int leader_timing_check(const struct leader_timing *t, struct telo_err *err)
{
    if (!(t->lease_duration > 0 && t->renew_deadline > 0 && t->retry_period > 0 &&
          t->jitter_factor >= 0))
        return telo_err_set(err, TELO_EINVAL,
                            "leader election: lease duration, renew deadline and retry period "
                            "must be positive and the jitter factor not negative");
    if (t->lease_duration <= t->renew_deadline)
        return telo_err_set(err, TELO_EINVAL,
                            "leader election: lease duration (%gs) must be greater than the renew "
                            "deadline (%gs)",
                            t->lease_duration, t->renew_deadline);
    if (t->renew_deadline <= t->jitter_factor * t->retry_period)
        return telo_err_set(err, TELO_EINVAL,
                            "leader election: renew deadline (%gs) must be greater than jitter "
                            "factor x retry period (%g x %gs)",
                            t->renew_deadline, t->jitter_factor, t->retry_period);
    return 0;
}

int leader_timing_flag(struct leader_timing *t, const char *name, const char *value,
                       struct telo_err *err)
{
    double *field = strcmp(name, "--leader-elect-lease-duration") == 0   ? &t->lease_duration
                    : strcmp(name, "--leader-elect-renew-deadline") == 0 ? &t->renew_deadline
                    : strcmp(name, "--leader-elect-retry-period") == 0   ? &t->retry_period
                                                                         : NULL;
    if (!field)
        return 0;
    double seconds = timefmt_parse_duration(value);
    if (!(seconds > 0))
        return telo_err_set(err, TELO_EINVAL,
                            "%s %s: want a positive duration such as 15s, 1.5s or 500ms", name,
                            value ? value : "(missing)");
    *field = seconds;
    return 1;
}

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "");
}

int leader_record_from_lease(struct json_object *lease, struct leader_record *out)
{
    memset(out, 0, sizeof(*out));
    if (!json_object_is_type(lease, json_type_object))
        return -TELO_EPROTO;
    struct json_object *spec = jget_object(lease, "spec");
    if (!spec)
        return 0;
    int64_t n;
    copy_str(out->holder, sizeof(out->holder), jget_string(spec, "holderIdentity"));
    if (jget_int(spec, "leaseDurationSeconds", &n) == 0)
        out->lease_duration_s = (long)n;
    copy_str(out->acquire_time, sizeof(out->acquire_time), jget_string(spec, "acquireTime"));
    copy_str(out->renew_time, sizeof(out->renew_time), jget_string(spec, "renewTime"));
    if (jget_int(spec, "leaseTransitions", &n) == 0)
        out->transitions = (long)n;
    return 0;
}

static int set_field(struct json_object *obj, const char *key, struct json_object *val)
{
    if (!val)
        return -TELO_ENOMEM;
    if (json_object_object_add(obj, key, val) != 0) {
        json_object_put(val);
        return -TELO_ENOMEM;
    }
    return 0;
}

static int set_time(struct json_object *spec, const char *key, const char *text)
{
    if (!*text) {
        json_object_object_del(spec, key);
        return 0;
    }
    return set_field(spec, key, json_object_new_string(text));
}

int leader_record_to_lease(const struct leader_record *rec, struct json_object *lease)
{
    if (!json_object_is_type(lease, json_type_object))
        return -TELO_EINVAL;
    struct json_object *spec = jget_object(lease, "spec");
    if (spec == NULL) {
        spec = json_object_new_object();
        if (set_field(lease, "spec", spec) < 0)
            return -TELO_ENOMEM;
    }
    /* holderIdentity "" is written, not left out: that is how a released lease reads. */
    if (set_field(spec, "holderIdentity", json_object_new_string(rec->holder)) < 0 ||
        set_field(spec, "leaseDurationSeconds", json_object_new_int64(rec->lease_duration_s)) < 0 ||
        set_time(spec, "acquireTime", rec->acquire_time) < 0 ||
        set_time(spec, "renewTime", rec->renew_time) < 0 ||
        set_field(spec, "leaseTransitions", json_object_new_int64(rec->transitions)) < 0)
        return -TELO_ENOMEM;
    return 0;
}

int leader_record_equal(const struct leader_record *a, const struct leader_record *b)
{
    return strcmp(a->holder, b->holder) == 0 && a->lease_duration_s == b->lease_duration_s &&
           strcmp(a->acquire_time, b->acquire_time) == 0 &&
           strcmp(a->renew_time, b->renew_time) == 0 && a->transitions == b->transitions;
}

void leader_observe(struct leader_state *st, const struct leader_record *rec, double now)
{
    /* client-go's observedTime: the lease's age is only ever measured on our own clock, from the
     * moment we saw the record change; the holder's renewTime is never trusted as a clock. */
    if (!st->have_record || !leader_record_equal(&st->observed, rec)) {
        st->observed = *rec;
        st->observed_time = now;
    }
    st->have_record = 1;
}

void leader_observe_absent(struct leader_state *st)
{
    st->have_record = 0;
    memset(&st->observed, 0, sizeof(st->observed));
}

static long duration_seconds(const struct leader_timing *t)
{
    long s = lround(t->lease_duration);
    return s < 1 ? 1 : s;
}

static int held_by_other(const struct leader_state *st, const char *identity)
{
    return st->have_record && st->observed.holder[0] && strcmp(st->observed.holder, identity) != 0;
}

static double observed_expiry(const struct leader_state *st)
{
    return st->observed_time + (double)st->observed.lease_duration_s;
}

double leader_next_wakeup(const struct leader_timing *t, const struct leader_state *st,
                          const char *identity, double now, double jitter01)
{
    if (st->leading) {
        double next = now + t->retry_period;
        double deadline = st->last_renew + t->renew_deadline;
        return next < deadline ? next : deadline;
    }
    /* client-go's JitterUntil(RetryPeriod, JitterFactor): 2 s to 4.4 s by default. */
    double next = now + t->retry_period * (1 + t->jitter_factor * jitter01);
    /* Also wake when the lease we watch expires, so a takeover is not delayed by up to a whole
     * jittered period after it. Candidates saw the record change at different moments, so their
     * expiries are spread as much as their polls are. */
    if (held_by_other(st, identity)) {
        double expiry = observed_expiry(st);
        if (expiry > now && expiry < next)
            next = expiry;
    }
    return next;
}

void leader_decide(const struct leader_timing *t, const struct leader_state *st,
                   const char *identity, double now, double jitter01, struct leader_decision *out)
{
    memset(out, 0, sizeof(*out));
    if (st->leading && (now >= st->last_renew + t->renew_deadline || held_by_other(st, identity))) {
        struct leader_state after = *st;
        after.leading = 0;
        out->action = LEADER_STEP_DOWN;
        out->next_wakeup = leader_next_wakeup(t, &after, identity, now, jitter01);
        return;
    }
    if (held_by_other(st, identity) && now < observed_expiry(st)) {
        out->action = LEADER_WAIT;
        out->next_wakeup = leader_next_wakeup(t, st, identity, now, jitter01);
        return;
    }
    char stamp[TIMEFMT_MICRO_MAX];
    timefmt_format_micro(now, stamp, sizeof(stamp));
    struct leader_record *w = &out->write;
    copy_str(w->holder, sizeof(w->holder), identity);
    w->lease_duration_s = duration_seconds(t);
    copy_str(w->renew_time, sizeof(w->renew_time), stamp);
    if (!st->have_record) {
        out->action = LEADER_ACQUIRE;
        out->create = 1;
        copy_str(w->acquire_time, sizeof(w->acquire_time), stamp);
        w->transitions = 0;
    } else if (strcmp(st->observed.holder, identity) == 0) {
        out->action = LEADER_RENEW;
        copy_str(w->acquire_time, sizeof(w->acquire_time),
                 st->observed.acquire_time[0] ? st->observed.acquire_time : stamp);
        w->transitions = st->observed.transitions;
    } else {
        /* Free ("" holder, a released lease) or expired on our clock: take it over. */
        out->action = LEADER_ACQUIRE;
        copy_str(w->acquire_time, sizeof(w->acquire_time), stamp);
        w->transitions = st->observed.transitions + 1;
    }
}

/* ---- the I/O part -----------------------------------------------------------------------------
 */

enum call_kind { CALL_NONE, CALL_READ, CALL_WRITE, CALL_RELEASE };

struct leader_elector {
    struct kube_transport *t;
    struct ev_loop *loop;
    char *namespace;
    char *name;
    char *identity;
    struct leader_timing timing;
    struct leader_callbacks cb;
    struct leader_state st;
    struct json_object *lease; /* the Lease last read or written: the base of the next PUT */
    struct kube_call *call;
    enum call_kind call_kind;
    double call_sent;
    struct leader_record writing; /* the record of the write in flight */
    ev_timer timer;
    ev_timer done_timer; /* release: completion deferred to the loop, or the write's timeout */
    int started;
    int released;
    int release_finished;
    leader_done_fn *release_done;
    void *release_ud;
    int release_rc;
    char reported[LEADER_IDENTITY_MAX];
    struct leader_status status;
};

static void schedule(struct leader_elector *el, double when)
{
    double delay = when - ev_now(el->loop);
    ev_timer_stop(el->loop, &el->timer);
    ev_timer_set(&el->timer, delay > 0 ? delay : 0, 0);
    ev_timer_start(el->loop, &el->timer);
}

static void schedule_next(struct leader_elector *el)
{
    double now = ev_now(el->loop);
    schedule(el, leader_next_wakeup(&el->timing, &el->st, el->identity, now, util_random_unit()));
}

static void refresh_status(struct leader_elector *el)
{
    el->status.is_leader = el->st.leading;
    el->status.holder = el->st.have_record ? el->st.observed.holder : "";
    el->status.transitions = el->st.observed.transitions;
}

static void report_transition(struct leader_elector *el)
{
    const char *holder = el->st.have_record ? el->st.observed.holder : "";
    refresh_status(el);
    /* client-go also reports "" after a release; "nobody" is not a new leader, so we wait for the
     * next real holder. */
    if (!holder[0] || strcmp(holder, el->reported) == 0)
        return;
    copy_str(el->reported, sizeof(el->reported), holder);
    telo_log(TELO_LOG_INFO, "new leader", "lease=%s/%s holder=%s", el->namespace, el->name, holder);
    if (el->cb.on_new_leader)
        el->cb.on_new_leader(holder, el->cb.ud);
}

static void drop_lease(struct leader_elector *el)
{
    json_object_put(el->lease);
    el->lease = NULL;
}

static void keep_lease(struct leader_elector *el, struct json_object *obj)
{
    drop_lease(el);
    if (!obj)
        return;
    el->lease = json_object_get(obj);
    /* Written back on the next PUT; an update without managedFields keeps the server's. */
    struct json_object *meta = jget_object(el->lease, "metadata");
    if (meta)
        json_object_object_del(meta, "managedFields");
}

static void cancel_call(struct leader_elector *el)
{
    kube_call_cancel(el->call);
    el->call = NULL;
    el->call_kind = CALL_NONE;
}

static void step_down(struct leader_elector *el, const char *why)
{
    if (!el->st.leading)
        return;
    el->st.leading = 0;
    el->status.lost++;
    refresh_status(el);
    telo_log(TELO_LOG_WARN, "leader election lost", "lease=%s/%s identity=%s reason=\"%s\"",
             el->namespace, el->name, el->identity, why);
    if (el->cb.on_stopped_leading)
        el->cb.on_stopped_leading(el->cb.ud);
}

static void on_read(const struct kube_result *res, void *ud);

/* Ends a release from the loop, never from inside leader_release. */
static void release_finish_soon(struct leader_elector *el, int rc)
{
    el->release_rc = rc;
    ev_timer_stop(el->loop, &el->done_timer);
    ev_timer_set(&el->done_timer, 0, 0);
    ev_timer_start(el->loop, &el->done_timer);
}

static void on_write(const struct kube_result *res, void *ud);

static struct kube_ref lease_ref(const struct leader_elector *el, int with_name)
{
    struct kube_ref ref = {.group = "coordination.k8s.io",
                           .version = "v1",
                           .resource = "leases",
                           .namespace = el->namespace,
                           .name = with_name ? el->name : NULL};
    return ref;
}

static void start_read(struct leader_elector *el)
{
    struct telo_err err;
    struct kube_ref ref = lease_ref(el, 1);
    el->call = kube_rest_get(el->t, &ref, on_read, el, &err);
    if (!el->call) {
        el->status.read_failures++;
        telo_log(TELO_LOG_WARN, "leader election: cannot read the lease", "error=\"%s\"", err.msg);
        if (el->released)
            release_finish_soon(el, -err.code);
        else
            schedule_next(el);
        return;
    }
    el->call_kind = CALL_READ;
    el->call_sent = ev_now(el->loop);
}

/* Writes rec: a PUT of the kept Lease (its resourceVersion is the precondition), or a POST of a
 * new Lease when create is set. */
static void start_write(struct leader_elector *el, const struct leader_record *rec, int create,
                        enum call_kind kind)
{
    struct telo_err err;
    struct json_object *body = NULL;
    if (create || !el->lease) {
        body = json_object_new_object();
        struct json_object *meta = json_object_new_object();
        if (body && meta) {
            json_object_object_add(meta, "name", json_object_new_string(el->name));
            json_object_object_add(meta, "namespace", json_object_new_string(el->namespace));
            json_object_object_add(body, "apiVersion",
                                   json_object_new_string("coordination.k8s.io/v1"));
            json_object_object_add(body, "kind", json_object_new_string("Lease"));
            json_object_object_add(body, "metadata", meta);
            meta = NULL;
        }
        json_object_put(meta);
        create = 1;
    } else {
        body = NULL;
        if (json_object_deep_copy(el->lease, &body, NULL) != 0)
            body = NULL;
    }
    const char *text = NULL;
    if (body && leader_record_to_lease(rec, body) == 0)
        text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN |
                                                        JSON_C_TO_STRING_NOSLASHESCAPE);
    struct kube_ref ref = lease_ref(el, !create);
    if (!text) {
        telo_err_set(&err, TELO_ENOMEM, "out of memory building the lease");
        el->call = NULL;
    } else if (create) {
        el->call = kube_rest_create(el->t, &ref, text, strlen(text), NULL, on_write, el, &err);
    } else {
        el->call = kube_rest_update(el->t, &ref, text, strlen(text), NULL, on_write, el, &err);
    }
    json_object_put(body);
    el->writing = *rec;
    el->call_kind = kind;
    el->call_sent = ev_now(el->loop);
    if (!el->call) {
        el->call_kind = CALL_NONE;
        el->status.write_failures++;
        telo_log(TELO_LOG_WARN, "leader election: cannot write the lease", "error=\"%s\"", err.msg);
        if (kind == CALL_RELEASE)
            release_finish_soon(el, -err.code);
        else {
            schedule_next(el);
        }
    }
}

static void act(struct leader_elector *el)
{
    double now = ev_now(el->loop);
    struct leader_decision d;
    leader_decide(&el->timing, &el->st, el->identity, now, util_random_unit(), &d);
    switch (d.action) {
    case LEADER_WAIT:
        schedule(el, d.next_wakeup);
        break;
    case LEADER_STEP_DOWN:
        drop_lease(el);
        step_down(el, el->st.leading && now >= el->st.last_renew + el->timing.renew_deadline
                          ? "renew deadline passed"
                          : "the lease is held by someone else");
        schedule(el, d.next_wakeup);
        break;
    case LEADER_ACQUIRE:
    case LEADER_RENEW:
        start_write(el, &d.write, d.create, CALL_WRITE);
        break;
    }
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct leader_elector *el = w->data;
    double now = ev_now(el->loop);
    if (el->released)
        return;
    if (el->st.leading && now >= el->st.last_renew + el->timing.renew_deadline) {
        /* Whatever is in flight comes too late: a follower may take over once the lease it saw
         * is lease_duration old, and we must have stopped before. */
        cancel_call(el);
        drop_lease(el);
        step_down(el, "renew deadline passed");
        schedule_next(el);
        return;
    }
    if (el->call) {
        /* client-go bounds each attempt by the renew deadline; a request hung longer than that
         * is abandoned and the next attempt starts afresh. */
        if (now - el->call_sent < el->timing.renew_deadline) {
            schedule_next(el);
            return;
        }
        cancel_call(el);
        drop_lease(el);
    }
    /* The leader renews from the Lease it wrote last (client-go's fast path); anyone else, or a
     * leader whose last write failed, reads first. */
    if (el->st.leading && el->lease)
        act(el);
    else
        start_read(el);
}

static void finish_release(struct leader_elector *el)
{
    if (el->release_finished)
        return;
    el->release_finished = 1;
    ev_timer_stop(el->loop, &el->done_timer);
    if (el->release_done)
        el->release_done(el->release_rc, el->release_ud);
}

static void release_write(struct leader_elector *el)
{
    double now = ev_now(el->loop);
    char stamp[TIMEFMT_MICRO_MAX];
    timefmt_format_micro(now, stamp, sizeof(stamp));
    struct leader_record rec;
    memset(&rec, 0, sizeof(rec));
    /* As client-go's release: nobody holds it, and a 1 s duration so whoever saw it can take it
     * at its next retry. */
    rec.lease_duration_s = 1;
    copy_str(rec.acquire_time, sizeof(rec.acquire_time), stamp);
    copy_str(rec.renew_time, sizeof(rec.renew_time), stamp);
    rec.transitions = el->st.observed.transitions;
    start_write(el, &rec, 0, CALL_RELEASE);
}

static void on_read(const struct kube_result *res, void *ud)
{
    struct leader_elector *el = ud;
    el->call = NULL;
    el->call_kind = CALL_NONE;
    double now = ev_now(el->loop);
    if (res->rc == 0) {
        struct leader_record rec;
        if (leader_record_from_lease(res->object, &rec) < 0) {
            el->status.read_failures++;
            telo_log(TELO_LOG_WARN, "leader election: the lease is not an object", "lease=%s/%s",
                     el->namespace, el->name);
            schedule_next(el);
            return;
        }
        keep_lease(el, res->object);
        leader_observe(&el->st, &rec, now);
    } else if (res->status && kube_status_is(res->status, KUBE_REASON_NOT_FOUND)) {
        drop_lease(el);
        leader_observe_absent(&el->st);
    } else {
        el->status.read_failures++;
        telo_log(TELO_LOG_WARN, "leader election: cannot read the lease", "error=\"%s\"",
                 res->err ? res->err->msg : "unknown");
        if (el->released)
            finish_release(el);
        else
            schedule_next(el);
        return;
    }
    report_transition(el);
    if (el->released) {
        if (el->lease && strcmp(el->st.observed.holder, el->identity) == 0)
            release_write(el);
        else
            finish_release(el);
        return;
    }
    act(el);
}

static void on_write(const struct kube_result *res, void *ud)
{
    struct leader_elector *el = ud;
    enum call_kind kind = el->call_kind;
    el->call = NULL;
    el->call_kind = CALL_NONE;
    double now = ev_now(el->loop);
    if (res->rc != 0) {
        el->status.write_failures++;
        /* 409: someone else wrote the Lease since we read it (they won this round); 404: it
         * was deleted. Either way the kept copy is stale: read again next time. */
        drop_lease(el);
        int conflict = res->status && (kube_status_is(res->status, KUBE_REASON_CONFLICT) ||
                                       kube_status_is(res->status, KUBE_REASON_ALREADY_EXISTS));
        telo_log(conflict ? TELO_LOG_INFO : TELO_LOG_WARN,
                 kind == CALL_RELEASE ? "leader election: release failed"
                                      : "leader election: lease write failed",
                 "lease=%s/%s error=\"%s\"", el->namespace, el->name,
                 res->err ? res->err->msg : "unknown");
        if (kind == CALL_RELEASE) {
            el->release_rc = res->rc;
            finish_release(el);
        } else {
            schedule_next(el);
        }
        return;
    }
    struct leader_record rec = el->writing;
    if (res->object)
        leader_record_from_lease(res->object, &rec);
    keep_lease(el, res->object);
    leader_observe(&el->st, &rec, now);
    if (kind == CALL_RELEASE) {
        telo_log(TELO_LOG_INFO, "leader election: lease released", "lease=%s/%s", el->namespace,
                 el->name);
        refresh_status(el);
        el->release_rc = 0;
        finish_release(el);
        return;
    }
    el->st.last_renew = el->call_sent;
    int was_leading = el->st.leading;
    /* client-go reports the new leader before starting to lead; a callback may release us. */
    report_transition(el);
    if (el->released)
        return;
    if (!was_leading) {
        el->st.leading = 1;
        el->status.acquisitions++;
        refresh_status(el);
        telo_log(TELO_LOG_INFO, "leader election: acquired the lease",
                 "lease=%s/%s identity=%s transitions=%ld", el->namespace, el->name, el->identity,
                 rec.transitions);
        if (el->cb.on_started_leading)
            el->cb.on_started_leading(el->cb.ud);
    }
    if (!el->released)
        schedule_next(el);
}

static void on_done_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct leader_elector *el = w->data;
    if (el->call) {
        cancel_call(el);
        el->release_rc = -TELO_ETIMEDOUT;
        telo_log(TELO_LOG_WARN, "leader election: release timed out", "lease=%s/%s", el->namespace,
                 el->name);
    }
    finish_release(el);
}

int leader_default_identity(char *out, size_t outlen)
{
    char host[256];
    unsigned char rnd[8];
    if (gethostname(host, sizeof(host)) != 0)
        copy_str(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return -TELO_EIO;
    snprintf(out, outlen, "%s_%02x%02x%02x%02x%02x%02x%02x%02x", host, rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    return 0;
}

struct leader_elector *leader_new(struct kube_transport *t, const struct leader_config *cfg,
                                  struct telo_err *err)
{
    if (!t || !cfg || !cfg->namespace || !*cfg->namespace || !cfg->name || !*cfg->name ||
        !cfg->identity || !*cfg->identity) {
        telo_err_set(err, TELO_EINVAL,
                     "leader election needs a transport, the lease's namespace and name, and an "
                     "identity");
        return NULL;
    }
    if (strlen(cfg->identity) >= LEADER_IDENTITY_MAX) {
        telo_err_set(err, TELO_EINVAL, "leader election: identity longer than %d bytes",
                     LEADER_IDENTITY_MAX - 1);
        return NULL;
    }
    struct leader_timing timing;
    leader_timing_default(&timing);
    if (cfg->timing.lease_duration > 0)
        timing.lease_duration = cfg->timing.lease_duration;
    if (cfg->timing.renew_deadline > 0)
        timing.renew_deadline = cfg->timing.renew_deadline;
    if (cfg->timing.retry_period > 0)
        timing.retry_period = cfg->timing.retry_period;
    if (cfg->timing.jitter_factor > 0)
        timing.jitter_factor = cfg->timing.jitter_factor;
    if (leader_timing_check(&timing, err) < 0)
        return NULL;
    struct leader_elector *el = calloc(1, sizeof(*el));
    if (!el) {
        telo_err_set(err, TELO_ENOMEM, "out of memory");
        return NULL;
    }
    el->namespace = strdup(cfg->namespace);
    el->name = strdup(cfg->name);
    el->identity = strdup(cfg->identity);
    if (!el->namespace || !el->name || !el->identity) {
        leader_free(el);
        telo_err_set(err, TELO_ENOMEM, "out of memory");
        return NULL;
    }
    el->t = t;
    el->loop = kube_transport_loop(t);
    el->timing = timing;
    el->cb = cfg->callbacks;
    el->status.name = el->name;
    el->status.holder = "";
    ev_timer_init(&el->timer, on_tick, 0, 0);
    el->timer.data = el;
    ev_timer_init(&el->done_timer, on_done_timer, 0, 0);
    el->done_timer.data = el;
    return el;
}

int leader_start(struct leader_elector *el, struct telo_err *err)
{
    if (el->started || el->released)
        return telo_err_set(err, TELO_EINVAL, "leader election already started");
    el->started = 1;
    telo_log(TELO_LOG_INFO, "leader election: campaigning", "lease=%s/%s identity=%s",
             el->namespace, el->name, el->identity);
    schedule(el, ev_now(el->loop));
    return 0;
}

int leader_release(struct leader_elector *el, leader_done_fn *done, void *ud)
{
    if (el->released)
        return -TELO_EINVAL;
    el->released = 1;
    el->release_done = done;
    el->release_ud = ud;
    el->release_rc = 0;
    ev_timer_stop(el->loop, &el->timer);
    /* An acquire or renew cut short may still land on the server: read before releasing. */
    int writing = el->call_kind == CALL_WRITE;
    cancel_call(el);
    if (writing)
        drop_lease(el);
    if (el->st.leading) {
        /* Stop acting as leader before anyone else can take over: the release write below is
         * what lets them. */
        el->st.leading = 0;
        refresh_status(el);
        if (el->cb.on_stopped_leading)
            el->cb.on_stopped_leading(el->cb.ud);
    }
    /* Written whenever the record we last saw names us, even after a step-down: the sooner the
     * lease reads free, the sooner a follower leads. */
    int holder =
        writing || (el->st.have_record && strcmp(el->st.observed.holder, el->identity) == 0);
    /* done runs from the loop, either when the write ends or when this timer fires (at once
     * when there is nothing to write). */
    ev_timer_set(&el->done_timer, holder ? el->timing.renew_deadline : 0, 0);
    ev_timer_start(el->loop, &el->done_timer);
    if (!holder)
        return 0;
    if (el->lease)
        release_write(el);
    else
        start_read(el);
    return 0;
}

void leader_free(struct leader_elector *el)
{
    if (!el)
        return;
    if (el->loop) {
        ev_timer_stop(el->loop, &el->timer);
        ev_timer_stop(el->loop, &el->done_timer);
    }
    kube_call_cancel(el->call);
    json_object_put(el->lease);
    free(el->namespace);
    free(el->name);
    free(el->identity);
    free(el);
}

int leader_is_leader(const struct leader_elector *el)
{
    return el && el->st.leading;
}

const struct leader_status *leader_status(const struct leader_elector *el)
{
    return &el->status;
}

/* The I/O edge of a running image build's progress: the builder's log read now and then (one
 * read per Job however many sessions wait on it, bounded in bytes and lines), its step kept by
 * Job uid, and the sessions that asked queued again when what they show changes. */
#include "session/buildprogress.h"

#include "imagebuild/job.h"
#include "kube/rest.h"
#include "session/jobpod.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/strmap.h"
#include "util/timefmt.h"

#include <ev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An entry no session asked about this long is forgotten (its Job has ended, or is gone); one
 * not asked about for POLL_IDLE_S is no longer read (a build whose pod has not started wakes
 * nobody, so nobody asks: the Job's next status change brings a session, and the reads, back). */
#define IDLE_S      120.0
#define POLL_IDLE_S 60.0
/* The progress text's time moves in steps of this many seconds (build_step_describe). */
#define ELAPSED_STEP_S 10
#define TABLE_MAX      4096
/* Our Dockerfile is under 1.2 KiB (an entry is at most 1 KiB); a longer one is not ours. */
#define DOCKERFILE_MAX 4096

struct session_build_progress {
    struct session_job_table tb; /* entries by Job uid */
};

/* One running build: what its log showed, the read in flight. */
struct entry {
    struct session_build_progress *owner;
    char uid[128];
    char job[128];
    char pod[256]; /* the Job's pod once found ("" until then) */
    char dockerfile[DOCKERFILE_MAX + 1];
    struct build_step step;
    double created; /* the Job's creation (Unix time), 0 when unknown */
    long shown;     /* the elapsed time's 10 s step the waiters were last woken for */
    ev_timer poll;  /* the next read, while sessions ask */
    int in_flight;
    double read_at;  /* when the last read ended (0: never) */
    double asked_at; /* when a session last asked */
    struct session_waiters w;
    struct kube_call *call;
};

static double now_of(const struct session_build_progress *owner)
{
    return session_job_table_now(&owner->tb);
}

struct session_build_progress *session_build_progress_new(struct kube_transport *t,
                                                          const struct session_config *cfg,
                                                          session_waiters_wake_fn *wake, void *ud,
                                                          struct telo_err *err)
{
    struct session_build_progress *owner = calloc(1, sizeof(*owner));
    if (!owner) {
        telo_err_set(err, TELO_ENOMEM, "build progress: out of memory");
        return NULL;
    }
    if (session_job_table_init(&owner->tb, t, cfg, wake, ud, "build progress", err) < 0) {
        free(owner);
        return NULL;
    }
    return owner;
}

static void entry_free(void *entry)
{
    struct entry *e = entry;
    if (!e)
        return;
    ev_timer_stop(kube_transport_loop(e->owner->tb.t), &e->poll);
    kube_call_cancel(e->call);
    session_waiters_free(&e->w);
    free(e);
}

void session_build_progress_free(struct session_build_progress *owner)
{
    if (!owner)
        return;
    session_job_table_release(&owner->tb, entry_free);
    free(owner);
}

const char *session_build_progress_dockerfile(const struct json_object *job)
{
    struct json_object *inits =
        jget_array(jget(jget(jget(job, "spec"), "template"), "spec"), "initContainers");
    for (size_t i = 0; inits && i < json_object_array_length(inits); i++) {
        struct json_object *c = json_object_array_get_idx(inits, i);
        if (!jget_string_is(c, "name", BUILD_INIT_CONTAINER))
            continue;
        struct json_object *env = jget_array(c, "env");
        for (size_t j = 0; env && j < json_object_array_length(env); j++) {
            struct json_object *v = json_object_array_get_idx(env, j);
            if (jget_string_is(v, "name", "DOCKERFILE"))
                return jget_string(v, "value");
        }
    }
    return NULL;
}

/* The read ended: keep the furthest step seen (a later read of the tail may miss the line a
 * step began with), and wake the waiters when the text they show would change: another step,
 * or (once the builder is at work) the next 10 s of the elapsed time. */
static void read_done(struct entry *e, const struct build_step *seen)
{
    e->in_flight = 0;
    e->call = NULL;
    double now = now_of(e->owner);
    e->read_at = now;
    struct build_step was = e->step;
    if (seen) {
        if (seen->step > e->step.step)
            e->step.step = seen->step;
        e->step.started |= seen->started;
        e->step.pushing |= seen->pushing;
    }
    long shown = e->created > 0 && now > e->created ? (long)(now - e->created) / ELAPSED_STEP_S : 0;
    if (memcmp(&was, &e->step, sizeof(was)) != 0 || (e->step.started && shown != e->shown)) {
        e->shown = shown;
        session_waiters_wake(&e->w, e->owner->tb.wake, e->owner->tb.ud);
    }
}

static void start_read(struct entry *e);

static void on_poll(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct entry *e = w->data;
    if (now_of(e->owner) - e->asked_at > POLL_IDLE_S) {
        ev_timer_stop(loop, w);
        return;
    }
    if (!e->in_flight)
        start_read(e);
}

static void on_log(const struct kube_result *res, void *ud)
{
    struct entry *e = ud;
    if (res->rc < 0) {
        /* The builder has not started (the context is being delivered), or the pod is gone:
         * look the pod up again next time. */
        if (res->code == 404)
            e->pod[0] = '\0';
        read_done(e, NULL);
        return;
    }
    struct build_step seen;
    build_step_scan(e->dockerfile[0] ? e->dockerfile : NULL,
                    res->body && res->body->data ? res->body->data : "",
                    res->body ? res->body->len : 0, &seen);
    read_done(e, &seen);
}

static void read_log(struct entry *e)
{
    struct telo_err err;
    e->call = session_job_pod_log(e->owner->tb.t, e->owner->tb.cfg->build_namespace, e->pod,
                                  BUILD_CONTAINER, SESSION_BUILD_PROGRESS_LINES,
                                  SESSION_BUILD_PROGRESS_BYTES, on_log, e, &err);
    if (!e->call)
        read_done(e, NULL);
}

static void on_pods(const struct kube_result *res, void *ud)
{
    struct entry *e = ud;
    e->call = NULL;
    const char *name = jget_string(jget(session_job_pod_first(res), "metadata"), "name");
    if (!name || strlen(name) >= sizeof(e->pod)) {
        read_done(e, NULL);
        return;
    }
    snprintf(e->pod, sizeof(e->pod), "%s", name);
    read_log(e);
}

/* Starts a read of e's log: its pod first when not known yet (the Job's pods by the label the
 * Job controller sets). */
static void start_read(struct entry *e)
{
    e->in_flight = 1;
    if (e->pod[0]) {
        read_log(e);
        return;
    }
    struct telo_err err;
    e->call = session_job_pod_list(e->owner->tb.t, e->owner->tb.cfg->build_namespace, e->job,
                                   on_pods, e, &err);
    if (!e->call)
        read_done(e, NULL);
}

static int entry_stale(const void *entry, double now)
{
    const struct entry *e = entry;
    return !e->in_flight && now - e->asked_at > IDLE_S;
}

/* A new entry for job (uid), or NULL when the table is full or out of memory. */
static struct entry *entry_new(struct session_build_progress *owner, const struct json_object *job,
                               const char *uid, double now)
{
    const char *name = jget_string(jget(job, "metadata"), "name");
    if (!name || strlen(name) >= sizeof(((struct entry *)0)->job) ||
        strlen(uid) >= sizeof(((struct entry *)0)->uid))
        return NULL;
    session_job_table_sweep(&owner->tb, now, entry_stale, entry_free);
    struct entry *e = NULL;
    if (strmap_len(owner->tb.entries) >= TABLE_MAX || !(e = calloc(1, sizeof(*e))))
        return NULL;
    e->owner = owner;
    snprintf(e->uid, sizeof(e->uid), "%s", uid);
    snprintf(e->job, sizeof(e->job), "%s", name);
    double created = timefmt_parse(jget_string(jget(job, "metadata"), "creationTimestamp"));
    e->created = created > 0 ? created : 0;
    ev_timer_init(&e->poll, on_poll, SESSION_BUILD_PROGRESS_POLL_S, SESSION_BUILD_PROGRESS_POLL_S);
    e->poll.data = e;
    const char *dockerfile = session_build_progress_dockerfile(job);
    if (dockerfile && strlen(dockerfile) <= DOCKERFILE_MAX)
        snprintf(e->dockerfile, sizeof(e->dockerfile), "%s", dockerfile);
    /* The step count before any log: the Dockerfile's. */
    build_step_scan(e->dockerfile[0] ? e->dockerfile : NULL, NULL, 0, &e->step);
    if (strmap_put(owner->tb.entries, e->uid, e) < 0) {
        free(e);
        return NULL;
    }
    return e;
}

void session_build_progress_get(struct session_build_progress *owner, const struct json_object *job,
                                const char *waiter, int ask, struct build_step *out)
{
    memset(out, 0, sizeof(*out));
    const char *uid = jget_string(jget(job, "metadata"), "uid");
    if (!owner || !uid)
        return;
    double now = now_of(owner);
    struct entry *e = strmap_get(owner->tb.entries, uid);
    if (e)
        *out = e->step;
    if (!ask)
        return;
    if (!e && !(e = entry_new(owner, job, uid, now)))
        return;
    e->asked_at = now;
    if (waiter)
        session_waiters_add(&e->w, waiter);
    if (!ev_is_active(&e->poll)) {
        ev_timer_again(kube_transport_loop(owner->tb.t), &e->poll);
        if (!e->in_flight && now - e->read_at >= SESSION_BUILD_PROGRESS_POLL_S)
            start_read(e);
    }
}

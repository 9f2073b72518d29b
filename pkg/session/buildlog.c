/* The I/O edge of a failed image build's log: the tail of the failed container of the build
 * Job's pod, fetched once per Job uid, kept a while, and the sessions that asked queued again
 * when it is in. */
#include "session/buildlog.h"

#include "imagebuild/job.h"
#include "kube/rest.h"
#include "session/failure.h"
#include "session/jobpod.h"
#include "session/waiters.h"
#include "util/jget.h"
#include "util/strmap.h"

#include <ev.h>
#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_TTL_S 600.0
#define LOG_LINES 20
#define TABLE_MAX 4096

struct session_build_logs {
    struct session_job_table tb; /* log entries by Job uid */
};

/* A failed build's log tail, or its fetch in flight. */
struct log_entry {
    struct session_build_logs *owner;
    char uid[128];
    char job[128];
    int in_flight;
    char tail[2048];
    double at;
    struct session_waiters w;
    struct kube_call *call;
};

static double now_of(const struct session_build_logs *owner)
{
    return session_job_table_now(&owner->tb);
}

struct session_build_logs *session_build_logs_new(struct kube_transport *t,
                                                  const struct session_config *cfg,
                                                  session_waiters_wake_fn *wake, void *ud,
                                                  struct telo_err *err)
{
    struct session_build_logs *owner = calloc(1, sizeof(*owner));
    if (!owner) {
        telo_err_set(err, TELO_ENOMEM, "build logs: out of memory");
        return NULL;
    }
    if (session_job_table_init(&owner->tb, t, cfg, wake, ud, "build logs", err) < 0) {
        free(owner);
        return NULL;
    }
    return owner;
}

static void log_free(void *entry)
{
    struct log_entry *l = entry;
    if (!l)
        return;
    kube_call_cancel(l->call);
    session_waiters_free(&l->w);
    free(l);
}

void session_build_logs_free(struct session_build_logs *owner)
{
    if (!owner)
        return;
    session_job_table_release(&owner->tb, log_free);
    free(owner);
}

static void log_done(struct log_entry *l, const char *tail)
{
    l->in_flight = 0;
    l->call = NULL;
    l->at = now_of(l->owner);
    snprintf(l->tail, sizeof(l->tail), "%s", tail);
    session_waiters_wake(&l->w, l->owner->tb.wake, l->owner->tb.ud);
}

static void on_log(const struct kube_result *res, void *ud)
{
    struct log_entry *l = ud;
    char tail[2048];
    if (res->rc < 0) {
        snprintf(tail, sizeof(tail), "(the build pod's log could not be read: %s)",
                 res->err ? res->err->msg : "failed");
    } else {
        build_log_tail(res->body && res->body->data ? res->body->data : "",
                       res->body ? res->body->len : 0, LOG_LINES, tail, sizeof(tail));
    }
    log_done(l, tail);
}

static int pick_failed(struct json_object *cs, int init, void *ctx)
{
    (void)init;
    (void)ctx;
    int64_t code = 0;
    return jget_int(jget(jget(cs, "state"), "terminated"), "exitCode", &code) == 0 && code != 0 &&
           jget_string(cs, "name") != NULL;
}

/* The container whose failure failed the build: the context's delivery, else the builder. */
static const char *failed_container(struct json_object *pod)
{
    struct json_object *cs = session_failure_find_container(pod, pick_failed, NULL, NULL);
    return cs != NULL ? jget_string(cs, "name") : BUILD_CONTAINER;
}

static void on_pods(const struct kube_result *res, void *ud)
{
    struct log_entry *l = ud;
    l->call = NULL;
    struct json_object *pod = session_job_pod_first(res);
    if (!pod) {
        char tail[1024];
        snprintf(tail, sizeof(tail), "(the build pod's log could not be read: %s)",
                 res->rc < 0 && res->err ? res->err->msg : "the Job has no pod left");
        log_done(l, tail);
        return;
    }
    struct telo_err err;
    l->call = session_job_pod_log(l->owner->tb.t, l->owner->tb.cfg->build_namespace,
                                  jget_string(jget(pod, "metadata"), "name"), failed_container(pod),
                                  LOG_LINES, 0, on_log, l, &err);
    if (!l->call) {
        char tail[1024];
        snprintf(tail, sizeof(tail), "(the build pod's log could not be read: %s)", err.msg);
        log_done(l, tail);
    }
}

static int log_stale(const void *entry, double now)
{
    const struct log_entry *l = entry;
    return !l->in_flight && now - l->at > LOG_TTL_S;
}

enum session_build_log session_build_logs_get(struct session_build_logs *owner,
                                              const char *job_name, const char *job_uid,
                                              const char *waiter, int ask, const char **tail)
{
    *tail = "";
    struct log_entry *l = strmap_get(owner->tb.entries, job_uid);
    if (l && !l->in_flight) {
        *tail = l->tail;
        return SESSION_LOG_DONE;
    }
    if (l) {
        session_waiters_add(&l->w, waiter);
        return SESSION_LOG_FETCHING;
    }
    if (!ask)
        return SESSION_LOG_NONE;
    double now = now_of(owner);
    session_job_table_sweep(&owner->tb, now, log_stale, log_free);
    if (strmap_len(owner->tb.entries) >= TABLE_MAX || !(l = calloc(1, sizeof(*l))))
        return SESSION_LOG_NONE;
    l->owner = owner;
    snprintf(l->uid, sizeof(l->uid), "%s", job_uid);
    snprintf(l->job, sizeof(l->job), "%s", job_name);
    l->in_flight = 1;
    if (strmap_put(owner->tb.entries, l->uid, l) < 0) {
        free(l);
        return SESSION_LOG_NONE;
    }
    session_waiters_add(&l->w, waiter);
    struct telo_err err;
    l->call = session_job_pod_list(owner->tb.t, owner->tb.cfg->build_namespace, job_name, on_pods,
                                   l, &err);
    if (!l->call) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "(the build pod's log could not be read: %s)", err.msg);
        log_done(l, msg);
        return SESSION_LOG_DONE;
    }
    return SESSION_LOG_FETCHING;
}

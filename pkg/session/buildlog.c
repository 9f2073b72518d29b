/* The I/O edge of a failed image build's log: the tail of the failed container of the build
 * Job's pod, fetched once per Job uid, kept a while, and the sessions that asked queued again
 * when it is in. */
#include "session/buildlog.h"

#include "imagebuild/job.h"
#include "kube/rest.h"
#include "session/failure.h"
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
    struct kube_transport *t;
    const struct session_config *cfg;
    session_waiters_wake_fn *wake;
    void *ud;
    struct strmap *logs; /* by Job uid */
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
    return ev_now(kube_transport_loop(owner->t));
}

struct session_build_logs *session_build_logs_new(struct kube_transport *t,
                                                  const struct session_config *cfg,
                                                  session_waiters_wake_fn *wake, void *ud,
                                                  struct telo_err *err)
{
    struct session_build_logs *owner = calloc(1, sizeof(*owner));
    if (!owner || !(owner->logs = strmap_new())) {
        free(owner);
        telo_err_set(err, TELO_ENOMEM, "build logs: out of memory");
        return NULL;
    }
    owner->t = t;
    owner->cfg = cfg;
    owner->wake = wake;
    owner->ud = ud;
    return owner;
}

static void log_free(struct log_entry *l)
{
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
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(owner->logs, &it, &key, &value))
        log_free(value);
    strmap_free(owner->logs);
    free(owner);
}

static void log_done(struct log_entry *l, const char *tail)
{
    l->in_flight = 0;
    l->call = NULL;
    l->at = now_of(l->owner);
    snprintf(l->tail, sizeof(l->tail), "%s", tail);
    session_waiters_wake(&l->w, l->owner->wake, l->owner->ud);
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
    struct json_object *items = res->rc < 0 ? NULL : jget_array(res->object, "items");
    const char *name =
        items && json_object_array_length(items) > 0
            ? jget_string(jget(json_object_array_get_idx(items, 0), "metadata"), "name")
            : NULL;
    if (!name) {
        char tail[1024];
        snprintf(tail, sizeof(tail), "(the build pod's log could not be read: %s)",
                 res->rc < 0 && res->err ? res->err->msg : "the Job has no pod left");
        log_done(l, tail);
        return;
    }
    struct json_object *pod = json_object_array_get_idx(items, 0);
    char query[256];
    snprintf(query, sizeof(query), "?container=%s&tailLines=%d", failed_container(pod), LOG_LINES);
    struct kube_ref ref = {.version = "v1",
                           .resource = "pods",
                           .namespace = l->owner->cfg->build_namespace,
                           .name = name,
                           .subresource = "log"};
    struct telo_err err;
    l->call = kube_rest_get_text(l->owner->t, &ref, query, on_log, l, &err);
    if (!l->call) {
        char tail[1024];
        snprintf(tail, sizeof(tail), "(the build pod's log could not be read: %s)", err.msg);
        log_done(l, tail);
    }
}

static void sweep_logs(struct session_build_logs *owner, double now)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(owner->logs, &it, &key, &value)) {
        struct log_entry *l = value;
        if (!l->in_flight && now - l->at > LOG_TTL_S) {
            strmap_remove(owner->logs, key);
            log_free(l);
        }
    }
}

enum session_build_log session_build_logs_get(struct session_build_logs *owner,
                                              const char *job_name, const char *job_uid,
                                              const char *waiter, int ask, const char **tail)
{
    *tail = "";
    struct log_entry *l = strmap_get(owner->logs, job_uid);
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
    sweep_logs(owner, now);
    if (strmap_len(owner->logs) >= TABLE_MAX || !(l = calloc(1, sizeof(*l))))
        return SESSION_LOG_NONE;
    l->owner = owner;
    snprintf(l->uid, sizeof(l->uid), "%s", job_uid);
    snprintf(l->job, sizeof(l->job), "%s", job_name);
    l->in_flight = 1;
    if (strmap_put(owner->logs, l->uid, l) < 0) {
        free(l);
        return SESSION_LOG_NONE;
    }
    session_waiters_add(&l->w, waiter);
    char selector[256];
    snprintf(selector, sizeof(selector), "batch.kubernetes.io/job-name=%s", job_name);
    struct kube_ref ref = {
        .version = "v1", .resource = "pods", .namespace = owner->cfg->build_namespace};
    struct kube_list_opts o = {.label_selector = selector};
    struct telo_err err;
    l->call = kube_rest_list(owner->t, &ref, &o, on_pods, l, &err);
    if (!l->call) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "(the build pod's log could not be read: %s)", err.msg);
        log_done(l, msg);
        return SESSION_LOG_DONE;
    }
    return SESSION_LOG_FETCHING;
}

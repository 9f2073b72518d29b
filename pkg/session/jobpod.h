/* What the failed build's tail (buildlog.c) and a running build's progress (buildprogress.c)
 * share: a table of per-Job entries on the loop, and the two reads behind a build Job's log
 * (the Job's pod, then that pod's log). */
#ifndef TELO_SESSION_JOBPOD_H
#define TELO_SESSION_JOBPOD_H

#include "kube/rest.h"
#include "session/config.h"
#include "session/waiters.h"
#include "util/strmap.h"

#include <json.h>

/* Entries by Job uid, the transport their reads go through, and whom to wake with a session's
 * key when an entry changes. t and cfg are borrowed. */
struct session_job_table {
    struct kube_transport *t;
    const struct session_config *cfg;
    session_waiters_wake_fn *wake;
    void *ud;
    struct strmap *entries;
};

typedef void session_job_entry_free_fn(void *entry);
/* Whether an entry may be dropped at now (nothing in flight, and not wanted lately). */
typedef int session_job_entry_stale_fn(const void *entry, double now);

/* Sets up tb (its owner embeds it; session_job_table_release undoes it). Returns 0, or
 * -TELO_ENOMEM with err set, what naming the table in the message ("build logs"). */
int session_job_table_init(struct session_job_table *tb, struct kube_transport *t,
                           const struct session_config *cfg, session_waiters_wake_fn *wake,
                           void *ud, const char *what, struct telo_err *err);

/* Frees every entry with entry_free, then the map. */
void session_job_table_release(struct session_job_table *tb, session_job_entry_free_fn *entry_free);

/* Drops (entry_free) every entry stale says may go at now. */
void session_job_table_sweep(struct session_job_table *tb, double now,
                             session_job_entry_stale_fn *stale,
                             session_job_entry_free_fn *entry_free);

/* The loop's time. */
double session_job_table_now(const struct session_job_table *tb);

/* Lists the pod of Job job_name in ns (at most one) by the label the Job controller sets,
 * batch.kubernetes.io/job-name. cb gets the list's result; session_job_pod_first reads it.
 * Returns the call, or NULL with err set. */
struct kube_call *session_job_pod_list(struct kube_transport *t, const char *ns,
                                       const char *job_name, kube_result_fn *cb, void *ud,
                                       struct telo_err *err);

/* The pod such a list answered, or NULL: none, or the list failed. Owned by res. */
struct json_object *session_job_pod_first(const struct kube_result *res);

/* GETs the log of container in pod as text: its last `lines` lines, at most `bytes` of them
 * (bytes 0: no byte bound). Returns the call, or NULL with err set. */
struct kube_call *session_job_pod_log(struct kube_transport *t, const char *ns, const char *pod,
                                      const char *container, int lines, int bytes,
                                      kube_result_fn *cb, void *ud, struct telo_err *err);

#endif

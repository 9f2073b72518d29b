/* A table of per-Job entries and the two reads behind a build Job's log (jobpod.h). */
#include "session/jobpod.h"

#include "kube/transport.h"
#include "util/jget.h"

#include <ev.h>

#include <stdio.h>

int session_job_table_init(struct session_job_table *tb, struct kube_transport *t,
                           const struct session_config *cfg, session_waiters_wake_fn *wake,
                           void *ud, const char *what, struct telo_err *err)
{
    *tb = (struct session_job_table){.t = t, .cfg = cfg, .wake = wake, .ud = ud};
    if (!(tb->entries = strmap_new()))
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", what);
    return 0;
}

void session_job_table_release(struct session_job_table *tb, session_job_entry_free_fn *entry_free)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(tb->entries, &it, &key, &value))
        entry_free(value);
    strmap_free(tb->entries);
    tb->entries = NULL;
}

void session_job_table_sweep(struct session_job_table *tb, double now,
                             session_job_entry_stale_fn *stale,
                             session_job_entry_free_fn *entry_free)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(tb->entries, &it, &key, &value)) {
        if (stale(value, now)) {
            strmap_remove(tb->entries, key);
            entry_free(value);
        }
    }
}

double session_job_table_now(const struct session_job_table *tb)
{
    return ev_now(kube_transport_loop(tb->t));
}

struct kube_call *session_job_pod_list(struct kube_transport *t, const char *ns,
                                       const char *job_name, kube_result_fn *cb, void *ud,
                                       struct telo_err *err)
{
    char selector[256];
    snprintf(selector, sizeof(selector), "batch.kubernetes.io/job-name=%s", job_name);
    struct kube_ref ref = {.version = "v1", .resource = "pods", .namespace = ns};
    struct kube_list_opts o = {.label_selector = selector, .limit = 1};
    return kube_rest_list(t, &ref, &o, cb, ud, err);
}

struct json_object *session_job_pod_first(const struct kube_result *res)
{
    struct json_object *items = res->rc < 0 ? NULL : jget_array(res->object, "items");
    struct json_object *pod =
        items && json_object_array_length(items) > 0 ? json_object_array_get_idx(items, 0) : NULL;
    return jget_string(jget(pod, "metadata"), "name") != NULL ? pod : NULL;
}

struct kube_call *session_job_pod_log(struct kube_transport *t, const char *ns, const char *pod,
                                      const char *container, int lines, int bytes,
                                      kube_result_fn *cb, void *ud, struct telo_err *err)
{
    char query[192];
    if (bytes > 0)
        snprintf(query, sizeof(query), "?container=%s&tailLines=%d&limitBytes=%d", container, lines,
                 bytes);
    else
        snprintf(query, sizeof(query), "?container=%s&tailLines=%d", container, lines);
    struct kube_ref ref = {
        .version = "v1", .resource = "pods", .namespace = ns, .name = pod, .subresource = "log"};
    return kube_rest_get_text(t, &ref, query, cb, ud, err);
}

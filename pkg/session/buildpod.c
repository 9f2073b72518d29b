/* A build Job's pod, watched directly (buildpod.h). */
#include "session/buildpod.h"

#include "cache/store.h"
#include "controller/manager.h"
#include "util/jget.h"

#include <string.h>

int session_build_pod_succeeded(const struct json_object *pod, const char *job_uid)
{
    if (!pod || !job_uid || !*job_uid)
        return 0;
    struct json_object *labels = jget(jget((struct json_object *)pod, "metadata"), "labels");
    const char *uid = jget_string(labels, BUILD_POD_LABEL_JOB_UID);
    if (!uid)
        uid = jget_string(labels, BUILD_POD_LABEL_JOB_UID_LEGACY);
    return uid && strcmp(uid, job_uid) == 0 &&
           jget_string_is(jget((struct json_object *)pod, "status"), "phase", "Succeeded");
}

struct find {
    const char *job_uid;
    int found;
};

static void visit(void *ctx, const struct cache_object *obj)
{
    struct find *f = ctx;
    if (f->found)
        return;
    struct json_object *pod = cache_object_parse(obj);
    f->found = session_build_pod_succeeded(pod, f->job_uid);
    json_object_put(pod);
}

int session_build_pods_succeeded(const struct ctrl_informer *pods, const char *tag,
                                 const char *job_uid)
{
    if (!pods || !tag || !job_uid)
        return 0;
    struct find f = {job_uid, 0};
    (void)cache_store_by_index(ctrl_informer_store(pods), BUILD_POD_INDEX_TAG, tag, visit, &f,
                               NULL);
    return f.found;
}

/* What a session's pod says (issue 16: split from status.c): its provisioning progress, what
 * blocks it and how its session container ended. Pure functions of the pod's JSON (NULL: no
 * pod); every string returned is borrowed from the pod. */
#include "session/podview.h"

#include "session/desired.h"
#include "session/failure.h"
#include "util/jget.h"
#include "util/str.h"

#include <string.h>

struct waiting {
    int (*accept)(const char *reason); /* NULL: any */
    const char *reason;
};

static int pick_waiting(struct json_object *cs, int init, void *ctx)
{
    (void)init;
    struct waiting *w = ctx;
    const char *r = jget_string(jget(jget(cs, "state"), "waiting"), "reason");
    if (r == NULL || (w->accept != NULL && !w->accept(r)))
        return 0;
    w->reason = r;
    return 1;
}

/* The first container status, of the init containers then the containers, that waits with a
 * reason accept takes (any reason when accept is NULL); its reason in *reason. NULL when none. */
static struct json_object *first_waiting(struct json_object *pod, int (*accept)(const char *reason),
                                         const char **reason)
{
    struct waiting w = {accept, NULL};
    struct json_object *cs = session_failure_find_container(pod, pick_waiting, &w, NULL);
    *reason = w.reason;
    return cs;
}

/* The reference runner's provision texts, from the first waiting reason of init containers,
 * then containers. */
const char *session_podview_progress(struct json_object *pod, const char **waiting_reason)
{
    struct json_object *status = jget(pod, "status");
    const char *reason = NULL;
    if (first_waiting(pod, NULL, &reason) != NULL) {
        *waiting_reason = reason;
        if (strcmp(reason, "ContainerCreating") == 0)
            return "Creating container";
        if (strcmp(reason, "PodInitializing") == 0)
            return "Delivering application";
        if (strcmp(reason, "ErrImagePull") == 0 || strcmp(reason, "ImagePullBackOff") == 0)
            return "Pulling image";
        return reason;
    }
    /* Running init containers deliver the bundle. */
    struct json_object *inits = jget_array(status, "initContainerStatuses");
    if (inits && json_object_array_length(inits) &&
        jget(jget(json_object_array_get_idx(inits, 0), "state"), "running"))
        return "Delivering application";
    return "Scheduling";
}

/* The scheduler's complaint when the pod cannot be placed, or NULL. */
const char *session_podview_unschedulable(struct json_object *pod)
{
    struct json_object *conds = jget_array(jget(pod, "status"), "conditions");
    size_t n = conds ? json_object_array_length(conds) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        if (strcmp(util_str_or_empty(jget_string(c, "type")), "PodScheduled") == 0 &&
            strcmp(util_str_or_empty(jget_string(c, "status")), "False") == 0 &&
            strcmp(util_str_or_empty(jget_string(c, "reason")), "Unschedulable") == 0)
            return jget_string(c, "message") ? jget_string(c, "message") : "no node fits the pod";
    }
    return NULL;
}

/* A waiting reason that retrying cannot fix. */
static int permanent_reason(const char *reason)
{
    static const char *const permanent[] = {"InvalidImageName", "ErrImageNeverPull",
                                            "CreateContainerConfigError"};
    for (size_t p = 0; p < sizeof(permanent) / sizeof(permanent[0]); p++) {
        if (strcmp(reason, permanent[p]) == 0)
            return 1;
    }
    return 0;
}

/* The first blocking wait of any container that retrying cannot fix. */
const char *session_podview_permanent_wait(struct json_object *pod, const char **container)
{
    const char *reason = NULL;
    struct json_object *cs = first_waiting(pod, permanent_reason, &reason);
    if (cs == NULL)
        return NULL;
    *container = util_str_or_empty(jget_string(cs, "name"));
    return reason;
}

long long session_podview_exit_code(struct json_object *pod, int *found)
{
    struct json_object *arr = jget_array(jget(pod, "status"), "containerStatuses");
    size_t n = arr ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *cs = json_object_array_get_idx(arr, i);
        if (strcmp(util_str_or_empty(jget_string(cs, "name")), SESSION_CONTAINER) != 0)
            continue;
        struct json_object *term = jget(jget(cs, "state"), "terminated");
        if (term) {
            *found = 1;
            int64_t code = 0;
            (void)jget_int(term, "exitCode", &code);
            return code;
        }
    }
    *found = 0;
    return 0;
}

const char *session_podview_finished_at(struct json_object *pod)
{
    struct json_object *arr = jget_array(jget(pod, "status"), "containerStatuses");
    size_t n = arr ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *term =
            jget(jget(json_object_array_get_idx(arr, i), "state"), "terminated");
        if (term && jget_string(term, "finishedAt"))
            return jget_string(term, "finishedAt");
    }
    return NULL;
}

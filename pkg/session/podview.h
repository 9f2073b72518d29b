/* What a session's pod says (issue 16: split from status.c): its provisioning progress, what
 * blocks it and how its session container ended. Pure functions of the pod's JSON (NULL: no
 * pod); every string returned is borrowed from the pod. */
#ifndef TELO_SESSION_PODVIEW_H
#define TELO_SESSION_PODVIEW_H

#include <json.h>

/* The reference runner's provision texts ("Creating container", "Delivering application",
 * "Pulling image", "Scheduling" or the waiting reason itself), from the first waiting reason of
 * the init containers, then the containers; that reason in *waiting_reason (left alone when none
 * waits). */
const char *session_podview_progress(struct json_object *pod, const char **waiting_reason);

/* The scheduler's complaint when the pod cannot be placed ("no node fits the pod" when it gives
 * none), or NULL. */
const char *session_podview_unschedulable(struct json_object *pod);

/* The reason of the first container's wait that retrying cannot fix (InvalidImageName,
 * ErrImageNeverPull, CreateContainerConfigError), its container's name in *container; NULL when
 * none. */
const char *session_podview_permanent_wait(struct json_object *pod, const char **container);

/* The session container's exit code once it terminated (*found 1), else 0 (*found 0). */
long long session_podview_exit_code(struct json_object *pod, int *found);

/* The finishedAt of the first terminated container, or NULL. */
const char *session_podview_finished_at(struct json_object *pod);

#endif

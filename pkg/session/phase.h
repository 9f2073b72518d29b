/* A TeloSession's phase and a pod's phase: one enum and one string table each. */
#ifndef TELO_SESSION_PHASE_H
#define TELO_SESSION_PHASE_H

#include <json.h>

/* status.phase of a TeloSession. The names are the API (the CRD's enum in
 * crds/telo.run_telosessions.yaml): they never change. */
enum session_phase {
    /* Absent, not a string, or a string this operator does not write: status is read from the
     * API server, where anyone allowed to write the status subresource can put anything. Never
     * written. */
    SESSION_PHASE_UNKNOWN = 0,
    SESSION_PHASE_PENDING,      /* waiting for its image step, its pod's creation, or a fix */
    SESSION_PHASE_BUILDING,     /* its image is being built */
    SESSION_PHASE_PROVISIONING, /* its pod exists and is starting */
    SESSION_PHASE_RUNNING,
    SESSION_PHASE_SUCCEEDED, /* terminal: the app exited 0 */
    SESSION_PHASE_FAILED,    /* terminal */
    SESSION_PHASE_STOPPED,   /* terminal: spec.stopped */
};

/* Phases that are written, SESSION_PHASE_PENDING to SESSION_PHASE_STOPPED, for loops over them. */
#define SESSION_PHASE_FIRST SESSION_PHASE_PENDING
#define SESSION_PHASE_LAST  SESSION_PHASE_STOPPED

/* The wire name of p ("Running"); "Unknown" for SESSION_PHASE_UNKNOWN or a value out of range.
 * A static string; never NULL. */
const char *session_phase_name(enum session_phase p);

/* The phase named text (exact, case-sensitive as the API is), or SESSION_PHASE_UNKNOWN for NULL,
 * "Unknown" or any other text. */
enum session_phase session_phase_parse(const char *text);

/* The phase of a TeloSession's status object (status.phase), type-checked: NULL, a non-string or
 * an unknown name give SESSION_PHASE_UNKNOWN. */
enum session_phase session_phase_of(const struct json_object *status);

/* Whether p is a verdict that never changes again: Succeeded, Failed or Stopped. */
int session_phase_is_terminal(enum session_phase p);

/* status.phase of a core/v1 Pod, as the kubelet reports it. */
enum session_pod_phase {
    SESSION_POD_UNKNOWN = 0, /* absent, "Unknown" (the node stopped reporting), or other text */
    SESSION_POD_PENDING,
    SESSION_POD_RUNNING,
    SESSION_POD_SUCCEEDED,
    SESSION_POD_FAILED,
};

/* The phase of pod (a Pod object, status.phase), type-checked; SESSION_POD_UNKNOWN for NULL. */
enum session_pod_phase session_pod_phase_of(const struct json_object *pod);

#endif

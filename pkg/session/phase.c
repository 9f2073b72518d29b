/* A TeloSession's phase and a pod's phase: one enum and one string table each. */
#include "session/phase.h"

#include "util/jget.h"

#include <stddef.h>
#include <string.h>

static const char *const session_phase_names[] = {
    [SESSION_PHASE_UNKNOWN] = "Unknown",   [SESSION_PHASE_PENDING] = "Pending",
    [SESSION_PHASE_BUILDING] = "Building", [SESSION_PHASE_PROVISIONING] = "Provisioning",
    [SESSION_PHASE_RUNNING] = "Running",   [SESSION_PHASE_SUCCEEDED] = "Succeeded",
    [SESSION_PHASE_FAILED] = "Failed",     [SESSION_PHASE_STOPPED] = "Stopped",
};

/* core/v1 PodPhase. */
static const char *const pod_phase_names[] = {
    [SESSION_POD_UNKNOWN] = "Unknown", [SESSION_POD_PENDING] = "Pending",
    [SESSION_POD_RUNNING] = "Running", [SESSION_POD_SUCCEEDED] = "Succeeded",
    [SESSION_POD_FAILED] = "Failed",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The index of text in names (index 0, the unknown value, is never matched), or 0. */
static int lookup(const char *const *names, size_t n, const char *text)
{
    for (size_t i = 1; text && i < n; i++) {
        if (strcmp(names[i], text) == 0)
            return (int)i;
    }
    return 0;
}

const char *session_phase_name(enum session_phase p)
{
    return (unsigned)p < COUNT(session_phase_names) ? session_phase_names[p]
                                                    : session_phase_names[SESSION_PHASE_UNKNOWN];
}

enum session_phase session_phase_parse(const char *text)
{
    return (enum session_phase)lookup(session_phase_names, COUNT(session_phase_names), text);
}

enum session_phase session_phase_of(const struct json_object *status)
{
    return session_phase_parse(jget_string(status, "phase"));
}

int session_phase_is_terminal(enum session_phase p)
{
    return p == SESSION_PHASE_SUCCEEDED || p == SESSION_PHASE_FAILED || p == SESSION_PHASE_STOPPED;
}

enum session_pod_phase session_pod_phase_of(const struct json_object *pod)
{
    return (enum session_pod_phase)lookup(pod_phase_names, COUNT(pod_phase_names),
                                          jget_string(jget_object(pod, "status"), "phase"));
}

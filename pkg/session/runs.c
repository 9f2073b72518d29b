/* A session's runs (issue 17): resuming a stopped session and restarting one by
 * spec.restartGeneration start a new run, a new pod of the same TeloSession. */
#include "session/runs.h"

#include "session/phase.h"
#include "util/jget.h"
#include "util/timefmt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long long session_run_number(const struct json_object *status)
{
    int64_t run = 0;
    if (jget_int(status, "run", &run) < 0 || run < 1)
        return 1;
    return (long long)run;
}

long long session_run_of_pod(const struct json_object *pod)
{
    const char *text =
        jget_string(jget(jget((struct json_object *)pod, "metadata"), "labels"), SESSION_RUN_LABEL);
    if (!text)
        return 1;
    char *end = NULL;
    errno = 0;
    long long run = strtoll(text, &end, 10);
    if (errno || end == text || *end || run < 1)
        return 1;
    return run;
}

int session_run_pod_is_old(const struct session *s, const struct json_object *pod)
{
    return pod && session_run_of_pod(pod) < session_run_number(s->status);
}

static long long acted_generation(const struct json_object *status)
{
    int64_t g = 0;
    return jget_int(status, "restartGeneration", &g) == 0 ? (long long)g : 0;
}

enum session_restart session_restart_due(const struct session *s)
{
    enum session_phase phase = session_phase_of(s->status);
    if (s->stopped || phase == SESSION_PHASE_UNKNOWN)
        return SESSION_RESTART_NONE;
    if (phase == SESSION_PHASE_STOPPED)
        return SESSION_RESTART_RESUME;
    if (s->restart_generation > acted_generation(s->status))
        return SESSION_RESTART_GENERATION;
    return SESSION_RESTART_NONE;
}

static void copy_member(struct json_object *to, const char *to_key, struct json_object *from,
                        const char *key, enum json_type type)
{
    struct json_object *v = jget(from, key);
    if (v && json_object_is_type(v, type))
        json_object_object_add(to, to_key, json_object_get(v));
}

static void put_restart_generation(const struct session *s, struct json_object *status)
{
    long long g = acted_generation(s->status);
    if (s->restart_generation > g)
        g = s->restart_generation;
    if (g > 0)
        json_object_object_add(status, "restartGeneration", json_object_new_int64(g));
}

struct json_object *session_run_begin(const struct session *s, enum session_restart why, double now)
{
    struct json_object *old = s->status;
    struct json_object *status = json_object_new_object(), *last = json_object_new_object();
    if (!status || !last) {
        json_object_put(status);
        json_object_put(last);
        return NULL;
    }
    enum session_phase phase = session_phase_of(old);
    copy_member(last, "podName", old, "podName", json_type_string);
    copy_member(last, "podUID", old, "podUID", json_type_string);
    json_object_object_add(last, "phase", json_object_new_string(session_phase_name(phase)));
    const char *reason = jget_string(old, "reason");
    if (!session_phase_is_terminal(phase) || !reason || !*reason)
        /* A run still going (or waiting) ended by the restart itself. */
        reason = why == SESSION_RESTART_RESUME ? "Stopped" : "Restarted";
    json_object_object_add(last, "reason", json_object_new_string(reason));
    copy_member(last, "message", old, "message", json_type_string);
    copy_member(last, "exitCode", old, "exitCode", json_type_int);
    copy_member(last, "startTime", old, "startTime", json_type_string);
    const char *done = session_phase_is_terminal(phase) ? jget_string(old, "completionTime") : NULL;
    char text[32];
    if (!done) {
        timefmt_format(now, text, sizeof(text));
        done = text;
    }
    json_object_object_add(last, "finishedAt", json_object_new_string(done));
    json_object_object_add(status, "phase",
                           json_object_new_string(session_phase_name(SESSION_PHASE_PENDING)));
    /* status.run is read back from the cache, so it may be anything: the last run number stays
     * the last rather than overflow. */
    long long run = session_run_number(old);
    json_object_object_add(status, "run", json_object_new_int64(run < LLONG_MAX ? run + 1 : run));
    put_restart_generation(s, status);
    json_object_object_add(status, "lastRun", last);
    return status;
}

void session_run_carry(const struct session *s, struct json_object *status)
{
    struct json_object *old = s->status;
    if (session_run_number(old) > 1)
        json_object_object_add(status, "run", json_object_new_int64(session_run_number(old)));
    if (session_phase_of(old) == SESSION_PHASE_UNKNOWN)
        put_restart_generation(s, status);
    else
        copy_member(status, "restartGeneration", old, "restartGeneration", json_type_int);
    copy_member(status, "lastRun", old, "lastRun", json_type_object);
}

void session_run_label_pod(const struct session *s, struct json_object *pod)
{
    long long run = session_run_number(s->status);
    struct json_object *labels = jget_object(jget_object(pod, "metadata"), "labels");
    if (run < 2 || !labels)
        return;
    char text[24];
    snprintf(text, sizeof(text), "%lld", run);
    json_object_object_add(labels, SESSION_RUN_LABEL, json_object_new_string(text));
}

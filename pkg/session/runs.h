/* A session's runs (issue 17): resuming a stopped session and restarting one by
 * spec.restartGeneration start a new run, a new pod of the same TeloSession. */
#ifndef TELO_SESSION_RUNS_H
#define TELO_SESSION_RUNS_H

#include "session/spec.h"

#include <json.h>

/* The label that says which run of its session a pod belongs to. A pod without it is of run 1
 * (pods made before runs existed, and every first run: its pod body stays as it always was). */
#define SESSION_RUN_LABEL "telo.run/run"

/* The run a session's status is at: status.run, 1 when absent or not a positive integer. */
long long session_run_number(const struct json_object *status);

/* The run a pod belongs to: its SESSION_RUN_LABEL, 1 when absent or not a positive integer. */
long long session_run_of_pod(const struct json_object *pod);

/* Whether pod (one the session controls) belongs to an earlier run than the session's status is
 * at: it is on its way out and never the session's pod (issue 21's rule, per run). */
int session_run_pod_is_old(const struct session *s, const struct json_object *pod);

enum session_restart {
    SESSION_RESTART_NONE,
    SESSION_RESTART_RESUME,     /* phase Stopped and spec.stopped back to false */
    SESSION_RESTART_GENERATION, /* spec.restartGeneration above status.restartGeneration */
};

/* What s's spec asks of its run. A session that has no phase yet never restarts: its first
 * status takes spec.restartGeneration as acted on. spec.stopped wins over a restart. Pure. */
enum session_restart session_restart_due(const struct session *s);

/* The status a new run starts from: phase Pending, run one more, restartGeneration from the
 * spec, and lastRun: the ended run's podName, podUID, phase, reason, exitCode, startTime and
 * finishedAt (completionTime, or now for a run that was still going). NULL when out of memory;
 * the caller owns the result. */
struct json_object *session_run_begin(const struct session *s, enum session_restart why,
                                      double now);

/* The history every status of s carries on (run, restartGeneration, lastRun) put into status.
 * A session's first status records spec.restartGeneration as acted on. */
void session_run_carry(const struct session *s, struct json_object *status);

/* Labels pod (a desired pod of s) with the run it belongs to, from run 2 on: a first run's pod
 * body stays as it always was. */
void session_run_label_pod(const struct session *s, struct json_object *pod);

#endif

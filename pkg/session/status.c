/* A TeloSession's status, computed from observed state only, and what that state calls for. */
#include "session/status.h"

#include "session/access.h"
#include "session/desired.h"
#include "session/failure.h"
#include "session/owner.h"
#include "session/phase.h"
#include "session/podview.h"
#include "session/reachsummary.h"
#include "session/runs.h"
#include "util/jget.h"
#include "util/str.h"
#include "util/text.h"
#include "util/timefmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- assembling the status --------------------------------------------------------------- */

struct draft {
    enum session_phase phase;
    char reason[64];
    char message[3072];
    const char *progress_phase, *progress_message;
    int progress_done;
    long long exit_code;
    int has_exit_code;
    const char *pod_name, *pod_ip, *pod_uid;
    int blocked; /* Pending until the user fixes something */
    char progress_text[96];
    /* Reachability (issue 17), decided for a Running session (session/reachsummary.h). */
    struct session_reach_summary reach;
    /* A refused write sets the reason (issue 17): 1, or 2 when retrying cannot help until
     * something changes (Stalled). Never Ready then. */
    int refused;
};

static void put_str(struct json_object *o, const char *key, const char *v)
{
    if (v)
        json_object_object_add(o, key, json_object_new_string(v));
}

/* A message a person reads (`kubectl get -o wide`, `describe`, `kubectl telo status`): it may
 * carry a tenant's text (an app's termination message, a bundle's entry name, a registry's
 * error), so every message of the status is cleaned for a terminal here (util/text.h). */
static void put_text(struct json_object *o, const char *key, const char *v)
{
    if (!v)
        return;
    size_t n = strlen(v);
    if (util_text_is_clean(v, n)) {
        put_str(o, key, v);
        return;
    }
    char *clean = malloc(n + 1);
    if (clean)
        util_text_clean(v, n, clean);
    put_str(o, key, clean ? clean : "");
    free(clean);
}

/* Keeps a timestamp once written, so recomputing never moves it (and never causes a write). */
static void put_time_once(struct json_object *status, struct json_object *old, const char *key,
                          double t)
{
    const char *kept = jget_string(old, key);
    if (kept) {
        put_str(status, key, kept);
        return;
    }
    char text[32];
    timefmt_format(t, text, sizeof(text));
    put_str(status, key, text);
}

static struct json_object *old_condition(struct json_object *old_status, const char *type)
{
    struct json_object *conds = jget_array(old_status, "conditions");
    size_t n = conds ? json_object_array_length(conds) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        if (strcmp(util_str_or_empty(jget_string(c, "type")), type) == 0)
            return c;
    }
    return NULL;
}

static void add_condition(struct json_object *conds, struct json_object *old_status,
                          const char *type, int status, const char *reason, const char *message,
                          long long generation, double now)
{
    struct json_object *c = json_object_new_object();
    const char *value = status ? "True" : "False";
    put_str(c, "type", type);
    put_str(c, "status", value);
    json_object_object_add(c, "observedGeneration", json_object_new_int64(generation));
    /* lastTransitionTime moves only when the status flips (metav1.Condition convention). */
    struct json_object *old = old_condition(old_status, type);
    if (old && strcmp(util_str_or_empty(jget_string(old, "status")), value) == 0 &&
        jget_string(old, "lastTransitionTime"))
        put_str(c, "lastTransitionTime", jget_string(old, "lastTransitionTime"));
    else {
        char text[32];
        timefmt_format(now, text, sizeof(text));
        put_str(c, "lastTransitionTime", text);
    }
    put_str(c, "reason", reason);
    put_text(c, "message", message ? message : "");
    json_object_array_add(conds, c);
}

/* status.image: the step of this pass, else what was written, else the base image. */
static struct json_object *image_status(const struct session_observation *obs)
{
    struct json_object *image = NULL, *old = jget(obs->s->status, "image");
    if (obs->image_plan)
        return session_image_status(obs->image_plan);
    if (obs->keep_image && old && json_object_deep_copy(old, &image, NULL) == 0)
        return image;
    image = json_object_new_object();
    put_str(image, "ref", obs->image);
    put_str(image, "reason", "BaseImage");
    return image;
}

static void image_condition(struct json_object *conds, const struct session_observation *obs)
{
    const struct session *s = obs->s;
    const struct session_image_plan *plan = obs->image_plan;
    struct json_object *old = old_condition(s->status, "ImageReady");
    char ready_message[1400];
    /* A failed base-image freshness check (issue 17) stays said after the build progress is
     * gone: the condition outlives it. */
    snprintf(ready_message, sizeof(ready_message), "%.600s%s%.700s%s",
             util_str_or_empty(plan ? plan->ref : ""), plan && plan->freshness[0] ? " (" : "",
             plan ? plan->freshness : "", plan && plan->freshness[0] ? ")" : "");
    if (plan && plan->step == SESSION_IMAGE_READY)
        add_condition(conds, s->status, "ImageReady", 1, plan->reason,
                      plan->freshness[0] ? ready_message : plan->ref, s->generation, obs->now);
    else if (plan && plan->step == SESSION_IMAGE_BUILDING)
        add_condition(conds, s->status, "ImageReady", 0, "Building", plan->progress, s->generation,
                      obs->now);
    else if (plan)
        add_condition(conds, s->status, "ImageReady", 0, plan->failure, plan->message,
                      s->generation, obs->now);
    else if (obs->keep_image && old)
        add_condition(conds, s->status, "ImageReady",
                      strcmp(util_str_or_empty(jget_string(old, "status")), "True") == 0,
                      jget_string(old, "reason"), jget_string(old, "message"), s->generation,
                      obs->now);
    else
        add_condition(conds, s->status, "ImageReady", 1, "BaseImage", obs->image, s->generation,
                      obs->now);
}

/* --- deciding the phase ------------------------------------------------------------------ */

/* spec.stopped: the verdict whatever else holds, and the pod goes. */
static void decide_stopped(const struct session_observation *obs, struct draft *d,
                           struct session_verdict *v)
{
    d->phase = SESSION_PHASE_STOPPED;
    snprintf(d->reason, sizeof(d->reason), "Stopped");
    snprintf(d->message, sizeof(d->message), "stopped by spec.stopped");
    v->delete_pod = obs->pod != NULL;
}

/* Whether the session's own pod is gone: Failed (PodDisappeared), or 0 when there was none. Only
 * a pod the session had itself can have disappeared: status.podUID says it had one. A status
 * written before podUID existed names its pod only; that pod counts as the session's unless
 * another's holds the name now (a predecessor's the session reported by mistake, issue 21), which
 * is replaced instead. */
static int decide_disappeared(const struct session_observation *obs, enum session_owner owner,
                              struct draft *d)
{
    const struct session *s = obs->s;
    const char *old_pod = jget_string(s->status, "podName");
    int had_own = jget_string(s->status, "podUID") != NULL ||
                  (owner == SESSION_OWNER_NONE && !obs->replacing && !obs->conflict);
    if (!old_pod || !had_own)
        return 0;
    d->phase = SESSION_PHASE_FAILED;
    snprintf(d->reason, sizeof(d->reason), "PodDisappeared");
    snprintf(d->message, sizeof(d->message),
             "pod %s was deleted by someone else while the session ran; create the "
             "session again to restart it. Run: kubectl get events -n %s "
             "--field-selector involvedObject.name=%s",
             old_pod, s->namespace, old_pod);
    return 1;
}

/* Whether the image step decides the phase before a pod exists: a failed build fails the
 * session, a running one is Building. */
static int decide_image(const struct session_image_plan *plan, struct draft *d)
{
    if (plan && plan->step == SESSION_IMAGE_FAILED) {
        d->phase = SESSION_PHASE_FAILED;
        snprintf(d->reason, sizeof(d->reason), "%s", plan->failure);
        snprintf(d->message, sizeof(d->message), "%s", plan->message);
        return 1;
    }
    if (plan && plan->step == SESSION_IMAGE_BUILDING) {
        d->phase = SESSION_PHASE_BUILDING;
        d->progress_phase = "build";
        d->progress_message = plan->progress;
        return 1;
    }
    return 0;
}

/* A Pending session's children held under its names: someone else's (NameConflict, blocked) or a
 * deleted predecessor's (being replaced). */
static void note_children(const struct session_observation *obs, enum session_owner owner,
                          struct draft *d)
{
    char conflict[400], child[64];
    if (owner == SESSION_OWNER_FOREIGN) {
        session_child_name(obs->s, child, sizeof(child));
        session_conflict_message("pod", obs->s->namespace, child, conflict, sizeof(conflict));
    }
    if (owner == SESSION_OWNER_FOREIGN || obs->conflict) {
        /* Someone else's object holds a name the session needs: left alone, and said. */
        snprintf(d->reason, sizeof(d->reason), "NameConflict");
        snprintf(d->message, sizeof(d->message), "%s",
                 owner == SESSION_OWNER_FOREIGN ? conflict : obs->conflict);
        d->blocked = 1;
    } else if (owner == SESSION_OWNER_PREDECESSOR || obs->replacing) {
        /* A deleted session of the same name left children the garbage collector has not
         * removed yet: the operator deletes them and creates the session's own. */
        snprintf(d->progress_text, sizeof(d->progress_text), "Replacing the previous session's %s",
                 owner == SESSION_OWNER_PREDECESSOR ? "pod" : obs->replacing);
        d->progress_phase = "provision";
        d->progress_message = d->progress_text;
        d->progress_done = 0;
    }
}

/* When the start deadline counts from (issue 17): status.startTime, the session's first
 * reconcile (now when it has none yet). With builds, a session without a pod counts from its
 * image becoming ready (the build has its own deadline), and its pod from the pod's creation, as
 * before; without builds a pod counts from the earlier of the two. pod_created < 0: no pod. */
static double start_anchor(const struct session_observation *obs, double pod_created)
{
    double start = timefmt_parse(jget_string(obs->s->status, "startTime"));
    if (start < 0 || start > obs->now)
        start = obs->now;
    int builds = obs->keep_image || obs->image_plan;
    if (pod_created >= 0)
        return builds || start > pod_created ? pod_created : start;
    if (builds) {
        struct json_object *c = old_condition(obs->s->status, "ImageReady");
        double ready = obs->now;
        if (c && strcmp(util_str_or_empty(jget_string(c, "status")), "True") == 0 &&
            timefmt_parse(jget_string(c, "lastTransitionTime")) >= 0)
            ready = timefmt_parse(jget_string(c, "lastTransitionTime"));
        if (ready > start)
            start = ready;
    }
    return start;
}

/* A session kept from its pod by refused writes for startDeadlineSeconds (issue 17): Failed,
 * StartTimeout, naming the last refusal. The time counts from the later of its start and the
 * first refusal in a row: a session that waited for a slot, a bundle or a build, and only then
 * met a refusal, gets the whole deadline to see the obstacle removed. A session without a pod
 * and no refusal is waiting on something with its own look (a create in flight, a slot, a
 * missing bundle, a build and its deadline). Returns 1 when it ended. */
static int decide_no_pod_deadline(const struct session_observation *obs, struct draft *d,
                                  struct session_verdict *v)
{
    const struct session_refusal *r = obs->refusal;
    if (!r || d->blocked || d->progress_text[0] || d->phase != SESSION_PHASE_PENDING ||
        obs->waiting_reason)
        return 0;
    double anchor = start_anchor(obs, -1);
    if (r->first_at > anchor)
        anchor = r->first_at;
    double deadline = anchor + (double)obs->cfg->start_deadline_seconds;
    if (obs->now < deadline) {
        v->requeue_after = deadline - obs->now;
        return 0;
    }
    d->phase = SESSION_PHASE_FAILED;
    snprintf(d->reason, sizeof(d->reason), "StartTimeout");
    char last[2048];
    session_refusal_message(r, obs->s->namespace, 0, last, sizeof(last));
    snprintf(d->message, sizeof(d->message),
             "the session did not start within %lds: it never got a pod. Last refusal: %s",
             obs->cfg->start_deadline_seconds, last);
    return 1;
}

/* What blocks a Pending session until the user fixes it, NameConflict first: nothing else can
 * proceed. */
static void note_block(const struct session_observation *obs, struct draft *d)
{
    const struct session_image_plan *plan = obs->image_plan;
    if (d->blocked)
        return;
    if (plan && plan->step == SESSION_IMAGE_BLOCKED) {
        snprintf(d->reason, sizeof(d->reason), "%s", plan->failure);
        snprintf(d->message, sizeof(d->message), "%s", plan->message);
        d->blocked = 1;
    } else if (obs->blocked_reason) {
        snprintf(d->reason, sizeof(d->reason), "%s", obs->blocked_reason);
        snprintf(d->message, sizeof(d->message), "%s", util_str_or_empty(obs->blocked_message));
        d->blocked = 1;
    }
}

/* What a Pending session with nothing to fix waits for (issue 17): its previous run's pod to go
 * (the new run's pod takes its name), or a slot under the session limits. */
static void note_waiting(const struct session_observation *obs, enum session_owner owner,
                         struct draft *d)
{
    if (d->blocked)
        return;
    if (owner == SESSION_OWNER_OWN) {
        /* The cache holds a pod of ours that is not the run's: an earlier run's. */
        d->progress_message = "Waiting for the previous run's pod to go";
    } else if (obs->waiting_reason) {
        snprintf(d->reason, sizeof(d->reason), "%s", obs->waiting_reason);
        snprintf(d->message, sizeof(d->message), "%s", util_str_or_empty(obs->waiting_message));
        d->progress_message = "Waiting for a session slot";
    }
}

/* No pod of the session's own: it disappeared, the image step decides, or the session is
 * Pending (its pod is to be created, or something blocks it). */
static void decide_without_pod(const struct session_observation *obs, enum session_owner owner,
                               struct draft *d, struct session_verdict *v)
{
    const struct session_image_plan *plan = obs->image_plan;
    if (decide_disappeared(obs, owner, d) || decide_image(plan, d))
        return;
    d->phase = SESSION_PHASE_PENDING;
    d->progress_phase = "provision";
    d->progress_message = "Scheduling";
    if (plan && plan->step == SESSION_IMAGE_READY && plan->progress[0]) {
        /* The build phase's last word until the pod says more. */
        d->progress_phase = "build";
        d->progress_message = plan->progress;
        d->progress_done = 1;
    }
    note_children(obs, owner, d);
    note_block(obs, d);
    note_waiting(obs, owner, d);
    (void)decide_no_pod_deadline(obs, d, v);
}

/* Whether the pod's phase decides the session's: Running, Succeeded or Failed. */
static int decide_by_pod_phase(const struct session_observation *obs, struct draft *d)
{
    struct json_object *pod = obs->pod;
    enum session_pod_phase pod_phase = session_pod_phase_of(pod);
    /* Phase Unknown (the node stopped reporting) is no way back to Pending: a session that ran
     * keeps running until the pod ends or disappears, and the start deadline is behind it. */
    int ran = session_phase_of(obs->s->status) == SESSION_PHASE_RUNNING;
    if (pod_phase == SESSION_POD_RUNNING ||
        (ran && pod_phase != SESSION_POD_SUCCEEDED && pod_phase != SESSION_POD_FAILED)) {
        d->phase = SESSION_PHASE_RUNNING;
        d->progress_phase = "provision";
        d->progress_message = "Running";
        d->progress_done = 1;
        return 1;
    }
    if (pod_phase == SESSION_POD_SUCCEEDED) {
        d->phase = SESSION_PHASE_SUCCEEDED;
        d->exit_code = session_podview_exit_code(pod, &d->has_exit_code);
        d->has_exit_code = 1;
        snprintf(d->reason, sizeof(d->reason), "AppExited");
        snprintf(d->message, sizeof(d->message), "the app exited with code %lld", d->exit_code);
        return 1;
    }
    if (pod_phase == SESSION_POD_FAILED) {
        d->phase = SESSION_PHASE_FAILED;
        long long code = 0;
        session_failure_message(pod, obs->s->namespace, d->message, sizeof(d->message), d->reason,
                                sizeof(d->reason), &code);
        d->exit_code = session_podview_exit_code(pod, &d->has_exit_code);
        return 1;
    }
    return 0;
}

/* A pod that did not start within startDeadlineSeconds and that the scheduler could not place:
 * Unschedulable, with the scheduler's complaint (sched, tidied). */
static void fail_unschedulable(const struct session_observation *obs, const char *sched,
                               struct draft *d)
{
    snprintf(d->reason, sizeof(d->reason), "Unschedulable");
    snprintf(d->message, sizeof(d->message),
             "no node could run the session within %lds: %s%s Check the operator's "
             "nodeSelector and tolerations and the session's resources. Run: kubectl "
             "describe pod -n %s %s",
             obs->cfg->start_deadline_seconds, sched,
             strcmp(session_failure_run_prefix(sched), ". Run:") == 0 ? "." : "", obs->s->namespace,
             util_str_or_empty(d->pod_name));
}

/* A pod that did not start within startDeadlineSeconds: the first container complaint (init
 * containers first) classifies it, else StartTimeout; the message names the last step. */
static void fail_start_timeout(const struct session_observation *obs, struct draft *d)
{
    char detail[1024] = "";
    const char *why = NULL, *container = NULL;
    long long code = 0;
    int terminated = 0, init = 0;
    struct json_object *cs = session_failure_first_problem(obs->pod, detail, sizeof(detail), &why,
                                                           &code, &terminated, &init);
    if (cs) {
        container = util_str_or_empty(jget_string(cs, "name"));
        snprintf(d->reason, sizeof(d->reason), "%s",
                 session_failure_classify(init, container, why));
    }
    if (!why)
        snprintf(d->reason, sizeof(d->reason), "StartTimeout");
    session_failure_tidy(detail, sizeof(detail), SESSION_FAILURE_DETAIL_MAX);
    snprintf(d->message, sizeof(d->message),
             "the session did not start within %lds (last step: %s)%s%s%s kubectl describe pod "
             "-n %s %s",
             obs->cfg->start_deadline_seconds, d->progress_message, *detail ? ": " : "", detail,
             *detail ? session_failure_run_prefix(detail) : ". Run:", obs->s->namespace,
             util_str_or_empty(d->pod_name));
}

/* A pod still Pending: provisioning, unless it cannot succeed or took too long. */
static void decide_provisioning(const struct session_observation *obs, struct draft *d,
                                struct session_verdict *v)
{
    struct json_object *pod = obs->pod;
    const char *container = NULL;
    if (session_podview_permanent_wait(pod, &container)) {
        d->phase = SESSION_PHASE_FAILED;
        long long code = 0;
        session_failure_message(pod, obs->s->namespace, d->message, sizeof(d->message), d->reason,
                                sizeof(d->reason), &code);
        v->delete_pod = 1;
        return;
    }
    const char *waiting = NULL;
    d->phase = SESSION_PHASE_PROVISIONING;
    d->progress_phase = "provision";
    d->progress_message = session_podview_progress(pod, &waiting);
    const char *sched_text = session_podview_unschedulable(pod);
    char sched[1024];
    if (sched_text) {
        snprintf(sched, sizeof(sched), "%s", sched_text);
        session_failure_tidy(sched, sizeof(sched), 400);
    }
    double created = timefmt_parse(jget_string(jget(pod, "metadata"), "creationTimestamp"));
    double deadline = start_anchor(obs, created < 0 ? obs->now : created) +
                      (double)obs->cfg->start_deadline_seconds;
    if (obs->now < deadline) {
        v->requeue_after = deadline - obs->now;
        if (sched_text)
            snprintf(d->message, sizeof(d->message), "waiting for a node: %s", sched);
        return;
    }
    d->phase = SESSION_PHASE_FAILED;
    v->delete_pod = 1;
    if (sched_text)
        fail_unschedulable(obs, sched, d);
    else
        fail_start_timeout(obs, d);
}

/* A refused write of a child the session wants (issue 17) is its reason while nothing else is:
 * the object, the API's answer and the command to run. A create that found the name taken by an
 * object outside the caches is a NameConflict, as for a labelled stranger; a Running session
 * meets it when the pod's create went out with the child's (so it stays Running, not Ready). */
static void note_refusal(const struct session_observation *obs, struct draft *d)
{
    const struct session_refusal *r = obs->refusal;
    if (!r || obs->s->stopped || session_phase_is_terminal(d->phase) || d->reason[0])
        return;
    int taken = session_refusal_name_taken(r);
    snprintf(d->reason, sizeof(d->reason), "%s",
             taken ? "NameConflict" : session_refusal_reason(r->child));
    session_refusal_message(r, obs->s->namespace, 1, d->message, sizeof(d->message));
    /* A name taken is Stalled like a refusal that needs a change: its owner must act. */
    d->refused = taken || session_refusal_stalled(r->code) ? 2 : 1;
}

/* The phase of a session that has not finished. obs->pod is the session's own pod or NULL; owner
 * says what the cache held under its name. */
static void decide(const struct session_observation *obs, enum session_owner owner, struct draft *d,
                   struct session_verdict *v)
{
    struct json_object *pod = obs->pod;
    memset(d, 0, sizeof(*d));
    if (pod) {
        d->pod_name = jget_string(jget(pod, "metadata"), "name");
        d->pod_ip = jget_string(jget(pod, "status"), "podIP");
        d->pod_uid = jget_string(jget(pod, "metadata"), "uid");
    }
    if (obs->s->stopped)
        decide_stopped(obs, d, v);
    else if (!pod)
        decide_without_pod(obs, owner, d, v);
    else if (!decide_by_pod_phase(obs, d))
        decide_provisioning(obs, d, v);
    if (d->phase == SESSION_PHASE_RUNNING) {
        session_reach_summary_decide(obs, &d->reach, &v->requeue_after);
        if (d->reach.degraded) {
            snprintf(d->reason, sizeof(d->reason), "%s", d->reach.reason);
            snprintf(d->message, sizeof(d->message), "%s", d->reach.message);
        }
    }
    note_refusal(obs, d);
}

/* A finished session keeps its verdict; only what follows from the spec moves. A pod that has
 * not ended by itself has no business running for a finished session: the stop or the start
 * failure that called for its deletion may not have got through (the delete failed, the operator
 * restarted). A pod that ended is kept for its logs. */
static void decide_finished(const struct session_observation *obs, enum session_phase old_phase,
                            struct draft *d, struct session_verdict *v)
{
    memset(d, 0, sizeof(*d));
    d->phase = old_phase;
    enum session_pod_phase pod_phase = session_pod_phase_of(obs->pod);
    v->delete_pod = obs->pod != NULL && (obs->s->stopped || (pod_phase != SESSION_POD_SUCCEEDED &&
                                                             pod_phase != SESSION_POD_FAILED));
}

/* The session's own pod among what obs holds, or NULL (issue 21: a pod of the session's name is
 * the session's only when its controller reference carries the session's uid). */
static struct json_object *own_pod(const struct session_observation *obs)
{
    int own = session_child_owner(obs->pod, obs->s->name, obs->s->uid) == SESSION_OWNER_OWN &&
              !session_run_pod_is_old(obs->s, obs->pod);
    return own ? obs->pod : NULL;
}

/* A finished session's status: what it holds, with the spec's generation observed. NULL when out
 * of memory. */
static struct json_object *finished_status(const struct session *s)
{
    struct json_object *status = NULL; /* json_object_deep_copy refuses a non-NULL target */
    if (json_object_deep_copy(s->status, &status, NULL) < 0)
        return NULL;
    json_object_object_add(status, "observedGeneration", json_object_new_int64(s->generation));
    struct json_object *conds = jget_array(status, "conditions");
    size_t n = conds ? json_object_array_length(conds) : 0;
    for (size_t i = 0; i < n; i++)
        json_object_object_add(json_object_array_get_idx(conds, i), "observedGeneration",
                               json_object_new_int64(s->generation));
    return status;
}

/* phase, reason, message and progress. */
static void put_phase(struct json_object *status, const struct draft *d)
{
    put_str(status, "phase", session_phase_name(d->phase));
    if (d->reason[0])
        put_str(status, "reason", d->reason);
    if (d->message[0])
        put_text(status, "message", d->message);
    if (d->progress_phase) {
        struct json_object *p = json_object_new_object();
        put_str(p, "phase", d->progress_phase);
        put_text(p, "message", d->progress_message);
        json_object_object_add(p, "done", json_object_new_boolean(d->progress_done));
        json_object_object_add(status, "progress", p);
    }
}

/* podName, podIP and podUID. What was recorded of the session's own pod stays (a PodDisappeared
 * names it); a name reported without podUID while another's pod holds it now was never the
 * session's (issue 21) and goes. */
static void put_pod(struct json_object *status, const struct session_observation *obs,
                    enum session_owner owner, const struct draft *d)
{
    struct json_object *old = obs->s->status;
    int keep_old = jget_string(old, "podUID") != NULL ||
                   (owner == SESSION_OWNER_NONE && !obs->replacing && !obs->conflict);
    put_str(status, "podName",
            d->pod_name ? d->pod_name
            : keep_old  ? jget_string(old, "podName")
                        : NULL);
    put_str(status, "podIP", d->pod_ip ? d->pod_ip : keep_old ? jget_string(old, "podIP") : NULL);
    put_str(status, "podUID",
            d->pod_uid ? d->pod_uid
            : keep_old ? jget_string(old, "podUID")
                       : NULL);
    if (d->has_exit_code)
        json_object_object_add(status, "exitCode", json_object_new_int64(d->exit_code));
}

/* startTime at the session's first reconcile (issue 17: the start deadline counts from it; a
 * new session's first status may wait for its pod, whose creation is then the earlier time),
 * completionTime once it finished: written once, kept. */
static void put_times(struct json_object *status, const struct session_observation *obs,
                      const struct draft *d)
{
    struct json_object *old = obs->s->status;
    int terminal = session_phase_is_terminal(d->phase);
    double first = obs->now;
    double created = timefmt_parse(jget_string(jget(obs->pod, "metadata"), "creationTimestamp"));
    if (created >= 0 && created < first)
        first = created;
    put_time_once(status, old, "startTime", first);
    if (terminal) {
        const char *finished = session_podview_finished_at(obs->pod);
        put_time_once(status, old, "completionTime", finished ? timefmt_parse(finished) : obs->now);
    }
}

/* Stalled: the session failed, or waits for the user (or for an obstacle to a write). */
static int stalled(const struct draft *d)
{
    return d->phase == SESSION_PHASE_FAILED || d->blocked || d->reach.degraded || d->refused == 2;
}

/* The Ready condition. A Running session whose ports are not all reachable yet is still on its
 * way (WaitingForPorts); one with a port Unreachable for the timeout is not Ready (its reason
 * says why), nor is one with a refused write (issue 17) whatever its ports say. */
static void ready_condition(struct json_object *conds, const struct session_observation *obs,
                            const struct draft *d)
{
    const char *reason = session_phase_name(d->phase), *message = d->message;
    int running = d->phase == SESSION_PHASE_RUNNING;
    int ready = running && !d->reach.waiting && !d->reach.degraded && !d->refused;
    if (ready) {
        message = "the session is running";
    } else if (running && (d->reach.degraded || d->refused)) {
        reason = d->reason;
    } else if (running) {
        reason = "WaitingForPorts";
        message = d->reach.text;
    }
    add_condition(conds, obs->s->status, "Ready", ready, reason, message, obs->s->generation,
                  obs->now);
}

/* The AppReachable condition's reason (a Running session's only). */
static const char *reach_reason(const struct session_reach_summary *r)
{
    if (r->degraded)
        return "Unreachable";
    if (r->waiting)
        return "Checking";
    return r->probed ? "Reachable" : "NotProbed";
}

/* Ready, ImageReady, Reconciling and Stalled. */
static void put_conditions(struct json_object *status, const struct session_observation *obs,
                           const struct draft *d)
{
    const struct session *s = obs->s;
    struct json_object *old = s->status, *conds = json_object_new_array();
    const char *phase = session_phase_name(d->phase);
    int running = d->phase == SESSION_PHASE_RUNNING;
    int stuck = stalled(d);
    /* A Running session whose ports are not all reachable yet is still on its way (kstatus:
     * InProgress); one with a port Unreachable for the timeout is Stalled (Degraded). */
    int waiting = running && d->reach.waiting && !d->reach.degraded && !d->refused;
    /* A Running session retrying a refused write (409, 429, 5xx) is on its way too: read as
     * Current it would look done while not Ready. */
    int retrying = running && d->refused == 1 && !d->reach.degraded;
    int progressing =
        (!running && !session_phase_is_terminal(d->phase) && !d->blocked && d->refused != 2) ||
        waiting || retrying;
    ready_condition(conds, obs, d);
    image_condition(conds, obs);
    add_condition(conds, old, "Reconciling", progressing,
                  waiting       ? "WaitingForPorts"
                  : retrying    ? d->reason
                  : progressing ? phase
                                : "Reconciled",
                  waiting       ? d->reach.text
                  : retrying    ? d->message
                  : progressing ? d->progress_message
                                : "",
                  s->generation, obs->now);
    add_condition(conds, old, "Stalled", stuck, stuck ? d->reason : "NotStalled",
                  stuck ? d->message : "", s->generation, obs->now);
    if (running)
        add_condition(conds, old, "AppReachable", !d->reach.waiting && !d->reach.degraded,
                      reach_reason(&d->reach), d->reach.text, s->generation, obs->now);
    json_object_object_add(status, "conditions", conds);
}

/* A plain Provisioning (no reason, before and now: the pod is on its way) is recorded only once
 * it has something to say, the scheduler's complaint: the Running a moment later tells the rest
 * of the story, and under a burst the Event was one request per session (issue 20). 1: no Event
 * for this plain Provisioning; 0: its first message, recorded; -1: not a plain Provisioning. */
static int quiet_provisioning(struct json_object *old, const struct draft *d,
                              const char *old_reason)
{
    if (d->phase != SESSION_PHASE_PROVISIONING || d->reason[0] || old_reason[0] || stalled(d))
        return -1;
    if (!d->message[0])
        return 1;
    /* The first message of a plain Provisioning is its Event; a changed message is not one. */
    return session_phase_of(old) == SESSION_PHASE_PROVISIONING &&
           util_str_or_empty(jget_string(old, "message"))[0] != '\0';
}

/* An Event for every change of phase or reason: `kubectl describe` tells the story. */
static void note_event(struct json_object *old, const struct draft *d, struct session_verdict *v)
{
    const char *old_reason = util_str_or_empty(jget_string(old, "reason"));
    const char *phase = session_phase_name(d->phase);
    int quiet = quiet_provisioning(old, d, old_reason);
    if (quiet == 1 ||
        (quiet < 0 && session_phase_of(old) == d->phase && strcmp(old_reason, d->reason) == 0))
        return;
    v->event_type = stalled(d) ? "Warning" : "Normal";
    /* The phase, or what blocks a Pending session (only a Pending session is blocked). */
    snprintf(v->event_reason, sizeof(v->event_reason), "%s", d->blocked ? d->reason : phase);
    snprintf(v->event_message, sizeof(v->event_message), "%s%s%s%s", phase,
             d->reason[0] ? " (" : "", d->reason, d->reason[0] ? ")" : "");
    if (d->message[0]) {
        size_t used = strlen(v->event_message);
        snprintf(v->event_message + used, sizeof(v->event_message) - used, ": %s", d->message);
        /* Drops a character the byte bound cut in two: the note must stay UTF-8. */
        session_failure_cap(v->event_message, sizeof(v->event_message), sizeof(v->event_message));
    }
}

/* status.build: the build Job the image step involves (where to read its log, and while it
 * runs until when it may take), else what was written when the step keeps the image. */
static void put_build(struct json_object *status, const struct session_observation *obs)
{
    struct json_object *build = NULL, *old = jget(obs->s->status, "build");
    if (obs->image_plan)
        build = session_image_build_status(obs->image_plan);
    else if (obs->keep_image && old && json_object_deep_copy(old, &build, NULL) != 0)
        build = NULL;
    if (build)
        json_object_object_add(status, "build", build);
}

/* The status of a session that has not finished, from the draft; NULL when out of memory. */
static struct json_object *draft_status(const struct session_observation *obs,
                                        enum session_owner owner, const struct draft *d)
{
    struct json_object *status = json_object_new_object();
    if (!status)
        return NULL;
    put_phase(status, d);
    json_object_object_add(status, "image", image_status(obs));
    put_build(status, obs);
    put_pod(status, obs, owner, d);
    session_access_put(status, obs, &d->reach);
    put_times(status, obs, d);
    json_object_object_add(status, "observedGeneration", json_object_new_int64(obs->s->generation));
    put_conditions(status, obs, d);
    session_run_carry(obs->s, status);
    if (obs->waiting_reason && d->reason[0] && strcmp(d->reason, obs->waiting_reason) == 0)
        json_object_object_add(status, "queuePosition", json_object_new_int64(obs->queue_position));
    return status;
}

/* ttlSecondsAfterFinished: the session itself goes once it has been over for that long. */
static void apply_ttl(const struct session_observation *obs, struct json_object *status,
                      struct session_verdict *v)
{
    long long ttl = obs->s->ttl_after_finished;
    if (!session_phase_is_terminal(session_phase_of(status)) || ttl < 0)
        return;
    double done = timefmt_parse(jget_string(status, "completionTime"));
    double due = (done < 0 ? obs->now : done) + (double)ttl;
    if (obs->now >= due)
        v->delete_session = 1;
    else if (v->requeue_after == 0 || due - obs->now < v->requeue_after)
        v->requeue_after = due - obs->now;
}

/* A new run (issue 17): the verdict of the status it starts from, with an Event. The ended run's
 * pod goes; the new run's is created once it has gone (it takes the same name). */
static int begin_run(const struct session_observation *seen, enum session_restart why,
                     struct session_verdict *v)
{
    struct session next = *seen->s;
    next.status = session_run_begin(seen->s, why, seen->now);
    if (!next.status)
        return -TELO_ENOMEM;
    struct session_observation obs = *seen;
    obs.s = &next;
    obs.image_plan = NULL;
    obs.keep_image = 0;
    int rc = session_status_compute(&obs, v);
    struct json_object *pod = seen->pod;
    if (rc == 0) {
        v->changed = 1;
        v->delete_pod =
            session_child_owner(pod, seen->s->name, seen->s->uid) == SESSION_OWNER_OWN &&
            !jget(jget(pod, "metadata"), "deletionTimestamp");
        v->event_type = "Normal";
        snprintf(v->event_reason, sizeof(v->event_reason), "%s",
                 why == SESSION_RESTART_RESUME ? "Resumed" : "Restarted");
        snprintf(v->event_message, sizeof(v->event_message), "%s: run %lld starts%s",
                 why == SESSION_RESTART_RESUME ? "spec.stopped is false again"
                                               : "spec.restartGeneration was raised",
                 session_run_number(next.status),
                 v->delete_pod ? "; the previous run's pod goes" : "");
    }
    json_object_put(next.status);
    return rc;
}

int session_status_compute(const struct session_observation *seen, struct session_verdict *v)
{
    enum session_restart why = session_restart_due(seen->s);
    if (why != SESSION_RESTART_NONE)
        return begin_run(seen, why, v);
    /* From here on obs->pod is the session's own pod or NULL. */
    enum session_owner owner = session_child_owner(seen->pod, seen->s->name, seen->s->uid);
    struct session_observation own = *seen;
    own.pod = own_pod(seen);
    const struct session_observation *obs = &own;
    struct json_object *old = obs->s->status;
    enum session_phase old_phase = session_phase_of(old);
    memset(v, 0, sizeof(*v));

    struct draft d;
    struct json_object *status;
    if (session_phase_is_terminal(old_phase)) {
        decide_finished(obs, old_phase, &d, v);
        status = finished_status(obs->s);
    } else {
        decide(obs, owner, &d, v);
        /* An earlier run's pod still holds the name: it goes, then the run's pod is made. */
        if (owner == SESSION_OWNER_OWN && !obs->pod &&
            !jget(jget(seen->pod, "metadata"), "deletionTimestamp"))
            v->delete_pod = 1;
        status = draft_status(obs, owner, &d);
        if (status)
            note_event(old, &d, v);
    }
    if (!status)
        return -TELO_ENOMEM;
    apply_ttl(obs, status, v);
    v->status = status;
    v->changed = !old || !json_object_equal(old, status);
    return 0;
}

int session_status_wait_for_pod(const struct session_observation *obs,
                                const struct session_verdict *v)
{
    /* A reason on a Pending is a block the user must see now (BundleNotFound...). */
    return v->changed && !obs->s->status && !obs->image_plan && !v->delete_session &&
           session_phase_of(v->status) == SESSION_PHASE_PENDING &&
           !jget_string(v->status, "reason");
}

double session_status_settle(const struct session_observation *obs, const struct session_verdict *v)
{
    if (!v->changed || obs->s->status || obs->image_plan || !own_pod(obs) ||
        session_phase_of(v->status) != SESSION_PHASE_PROVISIONING ||
        jget_string(v->status, "reason") || jget_string(v->status, "message"))
        return 0;
    double created = timefmt_parse(jget_string(jget(obs->pod, "metadata"), "creationTimestamp"));
    if (created < 0)
        return 0;
    double left = created + SESSION_SETTLE_SECONDS - obs->now;
    /* A clock behind the API server's must not hold the status longer than the window. */
    return left <= 0 ? 0 : left > SESSION_SETTLE_SECONDS ? SESSION_SETTLE_SECONDS : left;
}

void session_verdict_release(struct session_verdict *v)
{
    json_object_put(v->status);
    v->status = NULL;
}

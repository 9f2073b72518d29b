/* A Running session's reachability summary (issue 17; issue 16: split from status.c): each
 * port's state from the prober's facts and what was written before, the text the AppReachable
 * condition and status.endpoints[] say, and the AppUnreachable verdict. Pure: no I/O, no clock
 * but obs->now. */
#include "session/reachsummary.h"

#include "session/desired.h"
#include "util/jget.h"
#include "util/str.h"
#include "util/timefmt.h"

#include <stdio.h>
#include <string.h>

static void put_str(struct json_object *o, const char *key, const char *v)
{
    if (v)
        json_object_object_add(o, key, json_object_new_string(v));
}

/* When the app started: the session container's running.startedAt, else the pod's startTime,
 * else the startTime written before, else now. */
static double app_started(const struct session_observation *obs)
{
    struct json_object *arr = jget_array(jget(obs->pod, "status"), "containerStatuses");
    size_t n = arr ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *cs = json_object_array_get_idx(arr, i);
        if (strcmp(util_str_or_empty(jget_string(cs, "name")), SESSION_CONTAINER) != 0)
            continue;
        double t = timefmt_parse(jget_string(jget(jget(cs, "state"), "running"), "startedAt"));
        if (t > 0)
            return t;
    }
    double t = timefmt_parse(jget_string(jget(obs->pod, "status"), "startTime"));
    if (t <= 0)
        t = timefmt_parse(jget_string(obs->s->status, "startTime"));
    return t > 0 ? t : obs->now;
}

/* The state written before for port i, when it was of this same pod. */
static int old_reach(const struct session_observation *obs, const char *pod_uid, size_t i,
                     struct session_reach_view *out)
{
    struct json_object *old = obs->s->status;
    const struct session_port *p = &obs->s->ports[i];
    memset(out, 0, sizeof(*out));
    if (!pod_uid || strcmp(util_str_or_empty(jget_string(old, "podUID")), pod_uid) != 0)
        return 0;
    struct json_object *eps = jget_array(old, "endpoints");
    size_t n = eps ? json_object_array_length(eps) : 0;
    for (size_t j = 0; j < n; j++) {
        struct json_object *e = json_object_array_get_idx(eps, j);
        int64_t port = 0;
        if (jget_int(e, "port", &port) == 0 && port == p->port &&
            jget_string_is(e, "protocol", p->protocol)) {
            session_reach_view_of(e, out);
            return out->state != SESSION_REACH_NONE && out->state != SESSION_REACH_NOT_PROBED;
        }
    }
    return 0;
}

/* The ports named so far in the summary's texts. */
struct tally {
    char waiting[160], bad[160], seen_text[96];
    size_t used_w, used_b;
    const char *first_why; /* why the first port not probed is not */
};

/* Whether port i is probed; when not, its view says NotProbed and d->why[i] why. */
static int port_probed(const struct session_observation *obs, const char *pod_ip, size_t i,
                       struct session_reach_summary *d)
{
    if (!obs->reach) {
        snprintf(d->why[i], sizeof(d->why[i]), "the operator runs no reachability prober");
    } else if (session_reach_probed(obs->cfg, pod_ip, obs->s->ports[i].protocol, d->why[i],
                                    sizeof(d->why[i]))) {
        return 1;
    }
    d->view[i].state = SESSION_REACH_NOT_PROBED;
    return 0;
}

/* Counts a probed port that is not Reachable: waiting, and degraded when Unreachable. */
static void count_unreachable(const struct session_port *p, const struct session_reach_view *view,
                              struct session_reach_summary *d, struct tally *t)
{
    d->waiting++;
    if (view->state == SESSION_REACH_UNREACHABLE) {
        if (!d->degraded && view->last_seen > 0) {
            char when[32];
            timefmt_format(view->last_seen, when, sizeof(when));
            snprintf(t->seen_text, sizeof(t->seen_text), " (last reachable at %s)", when);
        }
        d->degraded++;
        if (t->used_b < sizeof(t->bad))
            t->used_b += (size_t)snprintf(t->bad + t->used_b, sizeof(t->bad) - t->used_b, "%s%d",
                                          t->used_b ? ", " : "", p->port);
    } else if (t->used_w < sizeof(t->waiting)) {
        t->used_w += (size_t)snprintf(t->waiting + t->used_w, sizeof(t->waiting) - t->used_w,
                                      "%s%d", t->used_w ? ", " : "", p->port);
    }
}

/* The AppReachable text, and the AppUnreachable reason and message when degraded. */
static void say(const struct session_observation *obs, const char *pod_name, const char *pod_ip,
                const struct tally *t, struct session_reach_summary *d)
{
    const char *ip = util_str_or_empty(pod_ip);
    if (d->degraded) {
        snprintf(d->reason, sizeof(d->reason), "AppUnreachable");
        snprintf(d->message, sizeof(d->message),
                 "TCP port %s of the session's pod (%s) has not accepted a connection for %lds%s: "
                 "the app runs but does not listen there. Check that it "
                 "listens on 0.0.0.0:<port>, not 127.0.0.1, and that spec.ports is right. Run: "
                 "kubectl logs -n %s %s -c %s",
                 t->bad, ip, obs->cfg->reach_timeout_seconds, t->seen_text, obs->s->namespace,
                 util_str_or_empty(pod_name), SESSION_CONTAINER);
        snprintf(d->text, sizeof(d->text), "TCP port %s unreachable on %s", t->bad, ip);
    } else if (d->waiting) {
        snprintf(d->text, sizeof(d->text), "waiting for TCP port %s to accept connections on %s",
                 t->waiting, ip);
    } else if (d->probed) {
        snprintf(d->text, sizeof(d->text), "every probed TCP port accepts connections on %s", ip);
    } else {
        snprintf(d->text, sizeof(d->text), "no port is probed%s%s", t->first_why ? ": " : "",
                 t->first_why ? t->first_why : "");
    }
}

void session_reach_summary_decide(const struct session_observation *obs,
                                  struct session_reach_summary *d, double *requeue_after)
{
    const struct session *s = obs->s;
    const char *pod_ip = jget_string(jget(obs->pod, "status"), "podIP");
    const char *pod_name = jget_string(jget(obs->pod, "metadata"), "name");
    const char *pod_uid = jget_string(jget(obs->pod, "metadata"), "uid");
    double started = app_started(obs), timeout = (double)obs->cfg->reach_timeout_seconds;
    struct tally t;
    memset(&t, 0, sizeof(t));
    memset(d, 0, sizeof(*d));
    d->decided = 1;
    for (size_t i = 0; i < s->nports; i++) {
        struct session_reach_view *view = &d->view[i];
        if (!port_probed(obs, pod_ip, i, d)) {
            if (!t.first_why)
                t.first_why = d->why[i];
            continue;
        }
        d->probed++;
        struct session_reach_view old;
        double deadline = 0;
        int had = old_reach(obs, pod_uid, i, &old);
        session_reach_decide(&obs->reach[i], had ? &old : NULL, started, timeout, obs->now, view,
                             &deadline);
        if (deadline > obs->now && (*requeue_after == 0 || deadline - obs->now < *requeue_after))
            *requeue_after = deadline - obs->now + 0.05;
        if (view->state != SESSION_REACH_REACHABLE)
            count_unreachable(&s->ports[i], view, d, &t);
    }
    say(obs, pod_name, pod_ip, &t, d);
}

void session_reach_summary_put(struct json_object *e, const struct session_reach_summary *d,
                               size_t i)
{
    const struct session_reach_view *view = &d->view[i];
    char t[32];
    if (!d->decided || view->state == SESSION_REACH_NONE)
        return;
    put_str(e, "state", session_reach_state_name(view->state));
    if (view->state == SESSION_REACH_NOT_PROBED) {
        put_str(e, "message", d->why[i]);
        return;
    }
    if (view->since > 0) {
        timefmt_format(view->since, t, sizeof(t));
        put_str(e, "since", t);
    }
    if (view->state != SESSION_REACH_REACHABLE && view->last_seen > 0) {
        timefmt_format(view->last_seen, t, sizeof(t));
        put_str(e, "lastSeen", t);
    }
}

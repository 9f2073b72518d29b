/* A Running session's reachability summary (issue 17; issue 16: split from status.c): each
 * port's state from the prober's facts (session/reach.h) and what was written before, the text
 * the AppReachable condition and status.endpoints[] say, and the AppUnreachable verdict. Pure:
 * no I/O, no clock but obs->now. */
#ifndef TELO_SESSION_REACHSUMMARY_H
#define TELO_SESSION_REACHSUMMARY_H

#include "session/reach.h"
#include "session/spec.h"
#include "session/status.h"

#include <json.h>
#include <stddef.h>

struct session_reach_summary {
    int decided; /* 0: not a Running session, nothing to say */
    /* Each of s->ports (same index): its state, and why it is not probed when NotProbed. */
    struct session_reach_view view[SESSION_MAX_PORTS];
    char why[SESSION_MAX_PORTS][160];
    int probed;     /* ports probed */
    int waiting;    /* probed ports not Reachable yet */
    int degraded;   /* ports Unreachable for reachability.timeoutSeconds */
    char text[400]; /* the AppReachable condition's message */
    /* degraded: the session's reason ("AppUnreachable") and message, naming the ports. */
    char reason[32];
    char message[3072]; /* the size of the status message status.c holds */
};

/* Decides out for a Running session: obs->pod is its own pod, obs->s->status what was written
 * before. *requeue_after (0: none) is lowered to when a Checking port turns Unreachable. */
void session_reach_summary_decide(const struct session_observation *obs,
                                  struct session_reach_summary *out, double *requeue_after);

/* status.endpoints[i]'s state of a decided summary (nothing otherwise): state, since, lastSeen,
 * message. */
void session_reach_summary_put(struct json_object *endpoint,
                               const struct session_reach_summary *sum, size_t i);

#endif

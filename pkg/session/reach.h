/* App reachability of a session's ports (issue 17): which ports are probed, and each endpoint's
 * state from the prober's results and the clock. Pure: no I/O, no clock but the caller's. */
#ifndef TELO_SESSION_REACH_H
#define TELO_SESSION_REACH_H

#include "session/config.h"
#include "session/spec.h"

#include <json.h>
#include <stddef.h>

/* The name of the session container's port for spec.ports[i] when it is TCP ("telo-tcp-0" to
 * "telo-tcp-19"): the chart's NetworkPolicy lets the operator's pods in on these names only, so
 * on a session's declared TCP ports and no other (a policy cannot list each session's numbers). */
#define SESSION_REACH_PORT_NAME_FMT "telo-tcp-%zu"

/* status.endpoints[].state. The names are the API (the CRD's enum): they never change. */
enum session_reach_state {
    SESSION_REACH_NONE = 0,    /* not written: the session is not Running */
    SESSION_REACH_NOT_PROBED,  /* UDP, outside reachability.podCIDRs, or reachability off */
    SESSION_REACH_CHECKING,    /* not seen reachable yet, within reachability.timeoutSeconds */
    SESSION_REACH_REACHABLE,   /* the last probe connected */
    SESSION_REACH_UNREACHABLE, /* refused or timed out for reachability.timeoutSeconds */
};

/* The wire name of s ("Reachable"); "" for SESSION_REACH_NONE. A static string. */
const char *session_reach_state_name(enum session_reach_state s);

/* The state named text, or SESSION_REACH_NONE for NULL or any other text. */
enum session_reach_state session_reach_state_parse(const char *text);

/* What the prober has learnt of one endpoint (one pod IP and port) since it began probing it.
 * Times are seconds since the Unix epoch on the loop's clock. */
struct session_reach_facts {
    int results;       /* probe results so far; 0: none yet */
    int last_ok;       /* the last probe connected */
    double ok_since;   /* last_ok: when the current run of successes began */
    double fail_since; /* !last_ok: when the current run of failures began */
    double last_seen;  /* the last time a probe connected; 0: never */
};

/* One endpoint's state, as status.endpoints[] holds it. */
struct session_reach_view {
    enum session_reach_state state;
    double since;     /* when the state began; 0: not known */
    double last_seen; /* Checking, Unreachable: when it was last seen reachable; 0: never */
};

/* Why a port is not probed, or NULL when it is: UDP, reachability.enabled false, no pod IP yet,
 * or a pod IP outside reachability.podCIDRs (empty: every address). The prober asks the same
 * before it opens a socket, so an address the operator may not reach is never connected to.
 * why (len bytes) holds the sentence for status.endpoints[].message. Returns 1 when probed. */
int session_reach_probed(const struct session_config *cfg, const char *ip, const char *protocol,
                         char *why, size_t len);

/* Whether ip (a numeric IPv4 or IPv6 address) lies in one of cidrs; 0 for text that is no
 * address. IPv4 addresses mapped into IPv6 are matched as IPv4. */
int session_reach_address_in(const struct session_cidrs *cidrs, const char *ip);

/* The state of one probed endpoint. f: the prober's facts (NULL or results 0: nothing learnt
 * yet); old: the state written before for the same pod (NULL: none); started: when the session's
 * app started running; timeout: reachability.timeoutSeconds. Every time in out follows from
 * the facts and the old state, never from now, so recomputing writes nothing new. *deadline
 * (when not NULL) is when a Checking endpoint turns Unreachable, 0 otherwise. */
void session_reach_decide(const struct session_reach_facts *f, const struct session_reach_view *old,
                          double started, double timeout, double now,
                          struct session_reach_view *out, double *deadline);

/* The view written in one endpoint of status (its state, since and lastSeen), or *out zeroed
 * (SESSION_REACH_NONE) when it holds none. */
void session_reach_view_of(struct json_object *endpoint, struct session_reach_view *out);

#endif

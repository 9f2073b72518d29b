/* The reachability prober (issue 17): non-blocking TCP connects to session pods' ports on the
 * operator's libev loop, and what they found, for the session plan (session/reach.h). */
#ifndef TELO_SESSION_PROBER_H
#define TELO_SESSION_PROBER_H

#include "session/config.h"
#include "session/reach.h"
#include "util/err.h"

#include <sys/socket.h>

struct ev_loop;
struct session_prober;

/* At most this many connects are in flight at once; more wait their turn in order. */
#define SESSION_PROBER_MAX_IN_FLIGHT 64
/* A connect not answered within this long is a failed probe (the reference runner's 1 s). */
#define SESSION_PROBER_CONNECT_TIMEOUT_S 1.0

/* Called when a probe of key's endpoint found something new (its first answer, or a change
 * between reachable and not): the session is to be reconciled again. */
typedef void session_prober_requeue_fn(void *ud, const char *key);

/* Counters, for tests and logs. */
struct session_prober_stats {
    unsigned long probes;  /* connects started */
    unsigned long refused; /* probes not made: the address is not one the operator may probe */
    unsigned long targets; /* endpoints tracked now */
    unsigned long in_flight;
};

/* A prober on loop, deciding with cfg (borrowed; reachability.*) what it may probe. Returns it,
 * or NULL with err when out of memory. Free with session_prober_free. */
struct session_prober *session_prober_new(struct ev_loop *loop, const struct session_config *cfg,
                                          session_prober_requeue_fn *requeue, void *ud,
                                          struct telo_err *err);

/* Closes every probe in flight and frees p. Accepts NULL. */
void session_prober_free(struct session_prober *p);

/* What is known of the endpoint ip:port of key's pod pod_uid, into *out (zeroed when nothing is
 * known yet), and starts probing it: at once when new, then every reachability.intervalSeconds
 * until it connects; a reachable endpoint is probed again when asked after that interval (the
 * reconcile at the resync). An endpoint whose pod (uid or IP) changed starts afresh. An address
 * session_reach_probed refuses is never connected to: no socket is opened for it. Returns 0, or
 * -TELO_EINVAL for a refused address, or -TELO_ENOMEM. */
int session_prober_observe(struct session_prober *p, const char *key, const char *pod_uid,
                           const char *ip, int port, struct session_reach_facts *out);

/* Stops probing key's endpoints except those of pod pod_uid on the nports ports given (NULL,
 * 0: all of them go): the session stopped running, lost ports, or was deleted. */
void session_prober_retain(struct session_prober *p, const char *key, const char *pod_uid,
                           const int *ports, size_t nports);

const struct session_prober_stats *session_prober_stats(const struct session_prober *p);

/* Tests only: the connect(2) the prober calls on its non-blocking socket (NULL: the real one). */
typedef int session_prober_connect_fn(int fd, const struct sockaddr *sa, socklen_t len);
void session_prober_set_connect(struct session_prober *p, session_prober_connect_fn *fn);

#endif

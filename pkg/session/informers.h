/* The session reconciler's informers: TeloSessions, their children and the build Jobs, each
 * cached as a trimmed projection, and the controller they feed. */
#ifndef TELO_SESSION_INFORMERS_H
#define TELO_SESSION_INFORMERS_H

#include "controller/manager.h"
#include "session/config.h"
#include "util/err.h"

#include <json.h>
#include <stddef.h>

struct session_informers {
    struct ctrl_informer *sessions, *pods, *services, *ingresses, *secrets;
    struct ctrl_informer *jobs; /* NULL without build.repository */
    struct ctrl_controller *c;  /* the telosession controller: fn on every session key */
    /* The build Jobs' pods (buildpod.h); NULL without build.repository. */
    struct ctrl_informer *build_pods;
};

/* Registers on m the TeloSession informer and its controller (fn called with ud), the informers
 * of the children carrying the managed-by label (their events queue their owner), and with
 * build.repository the build Jobs' (their events queue the sessions waiting on their tag). cfg
 * is borrowed; inf must stay where it is while m runs (the Job mapping reads it). Returns 0, or
 * a negative code with err filled. */
int session_informers_register(struct session_informers *inf, struct ctrl_manager *m,
                               const struct session_config *cfg, ctrl_reconcile_fn *fn, void *ud,
                               struct telo_err *err);

/* Whether cfg watches namespace ns (nslen bytes). With one namespace the informers list only
 * that one; with several they list every namespace (the API has no "namespace in" selector), so
 * the others' sessions are in the cache and must be left alone. */
int session_informers_watched(const struct session_config *cfg, const char *ns, size_t nslen);

/* The cached object ns/name of inf, parsed (the caller json_object_put()s it), or NULL. */
struct json_object *session_informers_get(const struct ctrl_informer *inf, const char *ns,
                                          const char *name);

#endif

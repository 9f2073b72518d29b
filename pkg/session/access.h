/* How a session is reached (issue 16: split from status.c): status.endpoints (each port's
 * host, URL and, for a Running session, reachability), status.attach and status.inspectUrl. */
#ifndef TELO_SESSION_ACCESS_H
#define TELO_SESSION_ACCESS_H

#include "session/reachsummary.h"
#include "session/status.h"

#include <json.h>

/* Adds endpoints (when the session has ports; each with its state from reach), attach (when the
 * attach-token Secret exists: its name and the gateway's URL) and inspectUrl (spec.inspect with
 * a gateway) to status. */
void session_access_put(struct json_object *status, const struct session_observation *obs,
                        const struct session_reach_summary *reach);

#endif

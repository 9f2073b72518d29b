/* App reachability of a session's ports (issue 17): which ports are probed, and each endpoint's
 * state from the prober's results and the clock. Pure: no I/O, no clock but the caller's. */
#include "session/reach.h"

#include "util/cidr.h"
#include "util/jget.h"
#include "util/timefmt.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static const char *const names[] = {
    [SESSION_REACH_NONE] = "",
    [SESSION_REACH_NOT_PROBED] = "NotProbed",
    [SESSION_REACH_CHECKING] = "Checking",
    [SESSION_REACH_REACHABLE] = "Reachable",
    [SESSION_REACH_UNREACHABLE] = "Unreachable",
};

const char *session_reach_state_name(enum session_reach_state s)
{
    return (size_t)s < sizeof(names) / sizeof(names[0]) ? names[s] : "";
}

enum session_reach_state session_reach_state_parse(const char *text)
{
    for (size_t i = 1; text && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(text, names[i]) == 0)
            return (enum session_reach_state)i;
    }
    return SESSION_REACH_NONE;
}

int session_reach_address_in(const struct session_cidrs *cidrs, const char *ip)
{
    unsigned char a[16];
    int family;
    if (!ip)
        return 0;
    if (inet_pton(AF_INET, ip, a) == 1) {
        family = AF_INET;
    } else if (inet_pton(AF_INET6, ip, a) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        family = AF_INET6;
        if (memcmp(a, mapped, 12) == 0) {
            memmove(a, a + 12, 4);
            family = AF_INET;
        }
    } else {
        return 0;
    }
    for (size_t i = 0; i < cidrs->n; i++) {
        const struct build_cidr *c = &cidrs->items[i];
        if (c->family == family && util_cidr_contains(c->addr, c->prefix, a))
            return 1;
    }
    return 0;
}

int session_reach_probed(const struct session_config *cfg, const char *ip, const char *protocol,
                         char *why, size_t len)
{
    if (!protocol || strcmp(protocol, "TCP") != 0) {
        snprintf(why, len, "%s ports are not probed: only TCP accepts a connection to check",
                 protocol ? protocol : "this protocol's");
        return 0;
    }
    if (!cfg->reach_enabled) {
        snprintf(why, len, "the operator's reachability checks are off (reachability.enabled)");
        return 0;
    }
    unsigned char a[16];
    if (!ip || (inet_pton(AF_INET, ip, a) != 1 && inet_pton(AF_INET6, ip, a) != 1)) {
        snprintf(why, len, "the pod has no IP address yet");
        return 0;
    }
    if (cfg->reach_pod_cidrs.n && !session_reach_address_in(&cfg->reach_pod_cidrs, ip)) {
        snprintf(why, len,
                 "the pod IP %s is outside the operator's reachability.podCIDRs: not probed", ip);
        return 0;
    }
    return 1;
}

/* Checking from base until base + timeout, then Unreachable. */
static void failing(double base, double last_seen, double timeout, double now,
                    struct session_reach_view *out, double *deadline)
{
    out->last_seen = last_seen;
    if (now >= base + timeout) {
        out->state = SESSION_REACH_UNREACHABLE;
        out->since = base + timeout;
        return;
    }
    out->state = SESSION_REACH_CHECKING;
    out->since = base;
    if (deadline)
        *deadline = base + timeout;
}

/* When the state written before (NULL: none) last saw the endpoint reachable; 0: never. */
static double seen_before(const struct session_reach_view *old)
{
    if (!old)
        return 0;
    if (old->last_seen > 0)
        return old->last_seen;
    return old->state == SESSION_REACH_REACHABLE ? old->since : 0;
}

void session_reach_decide(const struct session_reach_facts *f, const struct session_reach_view *old,
                          double started, double timeout, double now,
                          struct session_reach_view *out, double *deadline)
{
    memset(out, 0, sizeof(*out));
    if (deadline)
        *deadline = 0;
    enum session_reach_state was = old ? old->state : SESSION_REACH_NONE;
    double old_seen = seen_before(old);
    if (!f || f->results == 0) {
        /* Nothing learnt yet (a new pod, or an operator restarted): what was written stands. */
        if (was == SESSION_REACH_REACHABLE || was == SESSION_REACH_UNREACHABLE) {
            *out = *old;
            return;
        }
        failing(was == SESSION_REACH_CHECKING && old->since > 0 ? old->since : started, old_seen,
                timeout, now, out, deadline);
        return;
    }
    if (f->last_ok) {
        out->state = SESSION_REACH_REACHABLE;
        out->since = was == SESSION_REACH_REACHABLE && old->since > 0 ? old->since : f->ok_since;
        return;
    }
    double seen = f->last_seen > old_seen ? f->last_seen : old_seen;
    /* Seen reachable since the written state began: a new run of failures, from its start. */
    int flapped = old && f->last_seen > 0 && f->last_seen >= old->since;
    if (was == SESSION_REACH_UNREACHABLE && !flapped) {
        *out = *old;
        out->last_seen = seen;
        return;
    }
    double base;
    if (was == SESSION_REACH_CHECKING && !flapped && old->since > 0)
        base = old->since;
    else if (was == SESSION_REACH_REACHABLE || flapped || f->last_seen > 0)
        base = f->fail_since;
    else
        base = started; /* never seen reachable: counted from the app's start */
    failing(base, seen, timeout, now, out, deadline);
}

void session_reach_view_of(struct json_object *endpoint, struct session_reach_view *out)
{
    memset(out, 0, sizeof(*out));
    out->state = session_reach_state_parse(jget_string(endpoint, "state"));
    if (out->state == SESSION_REACH_NONE)
        return;
    double since = timefmt_parse(jget_string(endpoint, "since"));
    double seen = timefmt_parse(jget_string(endpoint, "lastSeen"));
    out->since = since > 0 ? since : 0;
    out->last_seen = seen > 0 ? seen : 0;
}

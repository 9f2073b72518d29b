/* Writes of a session's children the API server refused (issue 17): what the executor remembers
 * of them, per session, and the pure rules the plan reads them by. */
#include "session/refusal.h"

#include "session/failure.h"
#include "session/owner.h"
#include "util/strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct session_refusals {
    struct strmap *map; /* "ns/name" -> struct entry */
};

struct entry {
    char key[320];
    struct session_refusal by_child[SESSION_REFUSAL_NCHILDREN];
};

struct session_refusals *session_refusals_new(void)
{
    struct session_refusals *x = calloc(1, sizeof(*x));
    if (x && !(x->map = strmap_new())) {
        free(x);
        return NULL;
    }
    return x;
}

void session_refusals_free(struct session_refusals *x)
{
    if (!x)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(x->map, &it, &key, &value))
        free(value);
    strmap_free(x->map);
    free(x);
}

static int valid_child(int child)
{
    return child >= 0 && child < SESSION_REFUSAL_NCHILDREN;
}

int session_refusals_note(struct session_refusals *x, const char *key, int child, long code,
                          const char *api_reason, const char *message, const char *object,
                          long long generation, double now)
{
    if (!x || !key || !valid_child(child))
        return -1;
    struct entry *e = strmap_get(x->map, key);
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e)
            return -1;
        snprintf(e->key, sizeof(e->key), "%s", key);
        if (strmap_put(x->map, e->key, e) < 0) {
            free(e);
            return -1;
        }
    }
    struct session_refusal *r = &e->by_child[child];
    unsigned attempts = r->held && r->generation == generation ? r->attempts + 1 : 1;
    double first_at = attempts > 1 ? r->first_at : now;
    memset(r, 0, sizeof(*r));
    r->held = 1;
    r->child = child;
    r->code = code;
    snprintf(r->api_reason, sizeof(r->api_reason), "%s", api_reason ? api_reason : "");
    session_refusal_first_line(message, r->message, sizeof(r->message));
    snprintf(r->object, sizeof(r->object), "%s", object ? object : "");
    r->at = now;
    r->attempts = attempts;
    r->first_at = first_at;
    r->generation = generation;
    return 0;
}

void session_refusals_clear(struct session_refusals *x, const char *key, int child)
{
    struct entry *e = x && key ? strmap_get(x->map, key) : NULL;
    if (!e || !valid_child(child))
        return;
    memset(&e->by_child[child], 0, sizeof(e->by_child[child]));
    for (int i = 0; i < SESSION_REFUSAL_NCHILDREN; i++) {
        if (e->by_child[i].held)
            return;
    }
    strmap_remove(x->map, key);
    free(e);
}

void session_refusals_forget(struct session_refusals *x, const char *key)
{
    if (x && key)
        free(strmap_remove(x->map, key));
}

void session_refusals_get(const struct session_refusals *x, const char *key,
                          struct session_refusal out[SESSION_REFUSAL_NCHILDREN])
{
    const struct entry *e = x && key ? strmap_get(x->map, key) : NULL;
    if (e)
        memcpy(out, e->by_child, sizeof(e->by_child));
    else
        memset(out, 0, sizeof(struct session_refusal) * SESSION_REFUSAL_NCHILDREN);
}

size_t session_refusals_count(const struct session_refusals *x)
{
    return x ? strmap_len(x->map) : 0;
}

/* --- pure rules ------------------------------------------------------------------------------ */

int session_refusal_stalled(long code)
{
    return code == 400 || code == 403 || code == 422;
}

int session_refusal_name_taken(const struct session_refusal *r)
{
    return r->held && r->code == 409 && strcmp(r->api_reason, "AlreadyExists") == 0;
}

double session_refusal_retry_at(const struct session_refusal *r)
{
    int taken = session_refusal_name_taken(r);
    double wait = taken ? SESSION_REFUSAL_TAKEN_RETRY_MIN_S : SESSION_REFUSAL_BACKOFF_MIN_S;
    double most = taken ? SESSION_REFUSAL_TAKEN_RETRY_MAX_S : SESSION_REFUSAL_BACKOFF_MAX_S;
    for (unsigned i = 1; i < r->attempts && wait < most; i++)
        wait *= 2;
    if (wait > most)
        wait = most;
    return r->at + wait;
}

const char *session_refusal_reason(int child)
{
    static const char *const reasons[SESSION_REFUSAL_NCHILDREN] = {
        "PodRejected", "SecretRejected", "ServiceRejected", "IngressRejected", "BuildJobRejected"};
    return valid_child(child) ? reasons[child] : "WriteRejected";
}

/* The kind of child as a message names it. */
static const char *child_kind(int child)
{
    static const char *const kinds[SESSION_REFUSAL_NCHILDREN] = {"pod", "Secret", "Service",
                                                                 "Ingress", "build Job"};
    return valid_child(child) ? kinds[child] : "object";
}

void session_refusal_first_line(const char *text, char *out, size_t len)
{
    if (len == 0)
        return;
    size_t n = 0;
    for (const char *c = text ? text : ""; *c && *c != '\n' && *c != '\r' && n + 1 < len; c++) {
        unsigned char u = (unsigned char)*c;
        out[n++] = *c;
        if (u < 0x20 || u == 0x7f)
            out[n - 1] = ' ';
    }
    out[n] = '\0';
    while (n > 0 && out[n - 1] == ' ')
        out[--n] = '\0';
    size_t lead = strspn(out, " ");
    if (lead)
        memmove(out, out + lead, n - lead + 1);
    session_failure_cap(out, len, SESSION_REFUSAL_MESSAGE_MAX);
}

/* The command that shows what refused the write, from the API's words. */
static void hint(const struct session_refusal *r, const char *ns, char *out, size_t len)
{
    const char *m = r->message;
    const char *obj_ns = ns;
    char own_ns[128];
    const char *slash = strchr(r->object, '/');
    if (slash && (size_t)(slash - r->object) < sizeof(own_ns)) {
        snprintf(own_ns, sizeof(own_ns), "%.*s", (int)(slash - r->object), r->object);
        obj_ns = own_ns;
    }
    if (strstr(m, "exceeded quota"))
        snprintf(out, len, "kubectl describe resourcequota -n %s", obj_ns);
    else if (strstr(m, "PodSecurity"))
        snprintf(out, len, "kubectl get namespace %s --show-labels", obj_ns);
    else if (strstr(m, "admission webhook"))
        snprintf(out, len,
                 "kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations");
    else if (strstr(m, "ValidatingAdmissionPolicy"))
        snprintf(out, len,
                 "kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings");
    else if (r->code == 403)
        snprintf(out, len, "kubectl auth can-i --list -n %s", obj_ns);
    else
        snprintf(out, len, "kubectl get events -n %s", obj_ns);
}

void session_refusal_message(const struct session_refusal *r, const char *namespace, int retrying,
                             char *out, size_t len)
{
    if (session_refusal_name_taken(r)) {
        static const char *const kinds[SESSION_REFUSAL_NCHILDREN] = {"pod", "secret", "service",
                                                                     "ingress", "job"};
        const char *slash = strchr(r->object, '/');
        char ns[128];
        snprintf(ns, sizeof(ns), "%.*s", slash ? (int)(slash - r->object) : 0, r->object);
        session_conflict_message(valid_child(r->child) ? kinds[r->child] : "object",
                                 slash ? ns : namespace, slash ? slash + 1 : r->object, out, len);
        return;
    }
    char command[200];
    hint(r, namespace, command, sizeof(command));
    const char *detail = r->message[0] ? r->message : "no message";
    const char *stop = strcmp(session_failure_run_prefix(detail), " Run:") == 0 ? "" : ".";
    snprintf(out, len, "the API server refused the session's %s %s (%ld %s): %s%s%s Run: %s",
             child_kind(r->child), r->object, r->code, r->api_reason, detail, stop,
             retrying ? " The operator tries again with backoff (5s doubling to 5min)." : "",
             command);
}

const struct session_refusal *
session_refusal_latest(const struct session_refusal rs[SESSION_REFUSAL_NCHILDREN], unsigned wanted)
{
    const struct session_refusal *best = NULL;
    for (int i = 0; i < SESSION_REFUSAL_NCHILDREN; i++) {
        if (rs[i].held && (wanted & (1u << i)) && (!best || rs[i].at > best->at))
            best = &rs[i];
    }
    return best;
}

/* Writes of a session's children the API server refused (issue 17): what the executor remembers
 * of them, per session, and the pure rules the plan reads them by (Stalled or not, when to try
 * again, the status reason and message). */
#ifndef TELO_SESSION_REFUSAL_H
#define TELO_SESSION_REFUSAL_H

#include <stddef.h>

/* The children whose refusals are kept, in enum session_plan_child's order: pod, Secret,
 * Service, Ingress, build Job. */
#define SESSION_REFUSAL_NCHILDREN 5

/* Characters of the API's message a status keeps: its first line, sanitised (the message quotes
 * names and images a tenant chose, and a webhook's own words). */
#define SESSION_REFUSAL_MESSAGE_MAX 300

/* A refused write is tried again after 5 s, doubling per refusal in a row up to 5 min; a new
 * spec (generation) tries at once. */
#define SESSION_REFUSAL_BACKOFF_MIN_S 5.0
#define SESSION_REFUSAL_BACKOFF_MAX_S 300.0

/* One refusal, as the executor observed it. */
struct session_refusal {
    long code;            /* the HTTP status of the answer */
    double at;            /* when the refusal arrived (the loop's clock) */
    long long generation; /* the session's metadata.generation then */
    int held;             /* 1: a refusal is recorded (the fields below are set) */
    int child;            /* enum session_plan_child, < SESSION_REFUSAL_NCHILDREN */
    unsigned attempts;    /* refusals in a row, at least 1 */
    char api_reason[32];  /* "Forbidden", "Invalid", ... */
    char message[SESSION_REFUSAL_MESSAGE_MAX + 8]; /* first line, sanitised and capped */
    char object[200];                              /* "ns/name" of the child */
    double first_at; /* when the first of these refusals in a row arrived */
};

struct session_refusals;

/* A new, empty set, or NULL when out of memory. Free with session_refusals_free (NULL: no-op). */
struct session_refusals *session_refusals_new(void);
void session_refusals_free(struct session_refusals *x);

/* Records that the write of child (of the session "ns/name" key) was refused at now with code,
 * api_reason and message (the API's, any length: sanitised here). A refusal in a row of the same
 * child at the same generation counts one more attempt; at another generation it starts at 1.
 * Returns 0, or -1 when out of memory (nothing recorded). */
int session_refusals_note(struct session_refusals *x, const char *key, int child, long code,
                          const char *api_reason, const char *message, const char *object,
                          long long generation, double now);

/* Forgets child's refusal of key (a write of it succeeded, or the plan no longer wants it). */
void session_refusals_clear(struct session_refusals *x, const char *key, int child);

/* Forgets every refusal of key (the session is gone). */
void session_refusals_forget(struct session_refusals *x, const char *key);

/* Copies key's refusals into out (one per child; held 0 where none). */
void session_refusals_get(const struct session_refusals *x, const char *key,
                          struct session_refusal out[SESSION_REFUSAL_NCHILDREN]);

/* Number of sessions with a refusal held. */
size_t session_refusals_count(const struct session_refusals *x);

/* --- pure rules ------------------------------------------------------------------------------ */

/* Whether retrying cannot help until something changes (Stalled=True): 400 BadRequest, 403
 * Forbidden (admission, quota, RBAC) and 422 Invalid. 409, 429, 5xx and timeouts are retried
 * without being Stalled. */
int session_refusal_stalled(long code);

/* Whether r is a create answered 409 AlreadyExists: the name is held by an object outside the
 * operator's caches (one without its labels, which no write of ours may touch). The plan reports
 * it as a NameConflict and creates again, since no event tells when that object goes: after
 * 10 s, doubling per answer in a row up to 60 s (a POST each, so a namespace of blocked sessions
 * costs the API server at most one request per session a minute once they settle). */
int session_refusal_name_taken(const struct session_refusal *r);

#define SESSION_REFUSAL_TAKEN_RETRY_MIN_S 10.0
#define SESSION_REFUSAL_TAKEN_RETRY_MAX_S 60.0

/* When r's write is tried again: at + 5 s * 2^(attempts-1), at most at + 300 s; a name taken,
 * at + 10 s * 2^(attempts-1), at most at + 60 s. */
double session_refusal_retry_at(const struct session_refusal *r);

/* The status reason of a refusal of child: "PodRejected", "SecretRejected", "ServiceRejected",
 * "IngressRejected", "BuildJobRejected". A static string. */
const char *session_refusal_reason(int child);

/* The first line of text, control characters as spaces, trimmed and capped at
 * SESSION_REFUSAL_MESSAGE_MAX characters (UTF-8 kept whole), into out (len bytes). */
void session_refusal_first_line(const char *text, char *out, size_t len);

/* The status message of r for a session in namespace: what was refused, the API's answer, that
 * it is retried (retrying 1; 0 for a session that gave up), and the kubectl command that shows
 * the obstacle. A name taken: session_conflict_message's (the object and the command to free it).
 */
void session_refusal_message(const struct session_refusal *r, const char *namespace, int retrying,
                             char *out, size_t len);

/* The most recent of the held refusals among rs whose bit is set in wanted (1 << child), or
 * NULL. */
const struct session_refusal *
session_refusal_latest(const struct session_refusal rs[SESSION_REFUSAL_NCHILDREN], unsigned wanted);

#endif

/* Session limits (issue 17): which sessions hold a slot under limits.maxSessions and
 * limits.maxSessionsPerNamespace, and whether a session waiting for one may start, oldest first.
 * Pure: the reconciler feeds it from the session informer's cache. */
#ifndef TELO_SESSION_LIMITS_H
#define TELO_SESSION_LIMITS_H

#include <json.h>
#include <stddef.h>

#define SESSION_LIMITS_REASON "SessionLimit"

/* A waiting session is looked at again this often should no event wake it (the wake is an event
 * handler: a session that stops holding a slot queues the sessions waiting behind it). */
#define SESSION_LIMITS_RECHECK_S 30.0

enum session_limits_state {
    SESSION_LIMITS_OUT,   /* finished, stopped or being deleted: holds no slot, wants none */
    SESSION_LIMITS_HOLDS, /* holds a slot: has a pod, is building or running, or was admitted */
    SESSION_LIMITS_WAITS, /* wants a slot: new, resumed or restarted after it finished */
};

/* Classifies obj, a TeloSession as cached (metadata, spec, status; type-checked). has_pod: the pod
 * cache holds a pod under the session's child name; admitted: this process admitted it and the
 * cache may not show it yet. A Pending session that was admitted shows it by a reason (it waits
 * for something else: a bundle, a name) or by a run restarted while it was going (lastRun.phase
 * Building, Provisioning or Running keeps its slot). Cannot fail. */
enum session_limits_state session_limits_classify(const struct json_object *obj, int has_pod,
                                                  int admitted);

/* One session as the decision sees it. Strings are borrowed. */
struct session_limits_entry {
    const char *namespace, *name;
    double created; /* metadata.creationTimestamp, seconds; < 0 unknown (last in line) */
    enum session_limits_state state;
};

struct session_limits_config {
    long max_sessions;      /* 0: none */
    long max_per_namespace; /* 0: none */
};

/* The decision for one session. */
struct session_limits_place {
    int admitted;      /* 1: it may start (or holds its slot already) */
    const char *limit; /* not admitted: "limits.maxSessionsPerNamespace" or "limits.maxSessions" */
    long max;          /* that limit's value */
    /* Sessions holding a slot under it, counting those ahead in line that start now: a freed
     * slot handed on is still held, so the count the message names does not dip to 0 and back
     * (a second status write for every session at the front of the line). */
    long holding;
    long position; /* place in line, 1: next to start */
};

/* Decides for entries[self] among entries (the watched sessions; for the namespace limit only
 * those of its namespace matter, the caller may pass just them when max_sessions is 0). The line
 * is oldest first: creationTimestamp, then namespace and name. A waiting session is admitted when
 * the sessions holding a slot and those waiting ahead of it that would be admitted leave room
 * under every limit; one that waits only on its namespace's limit takes no place in the cluster's
 * line. Returns 0, or -TELO_ENOMEM (out untouched). */
int session_limits_decide(const struct session_limits_config *cfg,
                          const struct session_limits_entry *entries, size_t n, size_t self,
                          struct session_limits_place *out);

/* session_limits_decide for every entry at once, into out[0..n): one sort and one walk of the
 * line, where deciding for each waiting session apart would repeat them per session. Entries
 * that do not wait are admitted. Returns 0, or -TELO_ENOMEM (out holds admitted places). */
int session_limits_decide_all(const struct session_limits_config *cfg,
                              const struct session_limits_entry *entries, size_t n,
                              struct session_limits_place *out);

/* The places in line a waiting session's status always shows as they are: the front, which people
 * watch. */
#define SESSION_LIMITS_EXACT_PLACES 10

/* The place a waiting session's status shows (issue 20), given the place it shows now (shown, 0:
 * none) and its place in line now: within the first SESSION_LIMITS_EXACT_PLACES the place itself;
 * further back, the place shown until the line has moved it up by a quarter or more (or back).
 * Each freed slot moves every waiting session up one place: shown exactly, draining a line of N
 * would write N statuses per slot; this way a session is written about log(N) times further back.
 * The place shown is never better than the real one. Pure. */
long session_limits_shown_position(long shown, long place);

/* The SessionLimit message for a place that is not admitted, into out: the limit, its value,
 * how many hold a slot, how many wait ahead. */
void session_limits_message(const struct session_limits_place *p, const char *ns, char *out,
                            size_t len);

#endif

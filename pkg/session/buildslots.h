/* Build slots: how many build Jobs run at once, in all and for one namespace's sessions, under
 * build.maxConcurrent and build.maxConcurrentPerNamespace. Without them one tenant naming many
 * dependency sets starts as many kaniko Jobs at once in the one build namespace, and every other
 * tenant's build waits behind them for the build nodes.
 *
 * A Job counts from the moment this process creates it, so a burst of sessions reconciled before
 * the informer shows the first Job cannot each take the last slot; it stops counting once it has
 * finished (Complete or Failed), or when it vanished from the cache. A Job's namespace is that of
 * the session that created it (its telo.run/requested-by annotation). Single-threaded, no I/O. */
#ifndef TELO_SESSION_BUILDSLOTS_H
#define TELO_SESSION_BUILDSLOTS_H

#include "session/config.h"

#include <json.h>
#include <stddef.h>

struct cache_store;
struct session_build_slots;

/* A session waiting for a slot is looked at again this often, and at once when a build Job
 * changes if it is its namespace's first in line (session_build_slots_heads). */
#define SESSION_BUILD_SLOTS_RECHECK_S 10.0
/* At most this many sessions are woken by one build Job's change. */
#define SESSION_BUILD_SLOTS_HEADS 16
/* A waiter that has not asked for this long (deleted, or its image appeared) leaves the line. */
#define SESSION_BUILD_SLOTS_WAITER_TTL_S (2.5 * SESSION_BUILD_SLOTS_RECHECK_S)

/* Returns an empty table, or NULL when out of memory. Free with session_build_slots_free (NULL is
 * a no-op). */
struct session_build_slots *session_build_slots_new(void);
void session_build_slots_free(struct session_build_slots *t);

/* This process is creating Job job ("ns/name") for session ("ns/name") at now: it counts until
 * the cache shows it (then the cache's copy counts) or SESSION_EXPECT_TTL_S passes, and the
 * session leaves the line. Returns 0, or -TELO_ENOMEM (the Job then counts once the cache shows
 * it). */
int session_build_slots_started(struct session_build_slots *t, const char *job, const char *session,
                                double now);

/* The create of job was refused: it does not count. */
void session_build_slots_refused(struct session_build_slots *t, const char *job);

/* Whether a Job (as cached: metadata.annotations, status) still runs: not Complete nor Failed
 * (nor SuccessCriteriaMet or FailureTarget, which come first). */
int session_build_slots_job_runs(const struct json_object *job);

/* Whether a new build for session ("ns/name") of namespace ns may start now, jobs being the
 * cached build Jobs (may be NULL: none). Returns 1 when it may (no limit, or room under both
 * that no session in line before it wants); 0 when it must wait, with msg (len bytes) saying
 * what it waits for and which key sets the limit. Under a limit the session takes a place in
 * line at its first ask: when a slot frees, it goes to the waiting session of the namespace
 * with the fewest builds running, among equals the one waiting the longest, not to whichever
 * session is looked at first. */
int session_build_slots_free_for(struct session_build_slots *t, const struct session_config *cfg,
                                 const struct cache_store *jobs, const char *ns,
                                 const char *session, double now, char *msg, size_t len);

/* session no longer wants a slot (its Job exists, its image does): it leaves the line. */
void session_build_slots_forget(struct session_build_slots *t, const char *session);

/* Calls emit(ctx, session) for the first in line of each namespace with sessions in line, the
 * longest waiting namespaces first, at most SESSION_BUILD_SLOTS_HEADS of them: the session a
 * slot freed now goes to is one of those (as long as no more namespaces wait), so queueing them
 * when a build Job changes hands the slot on without waiting for the recheck. A hint: each still
 * asks session_build_slots_free_for. */
void session_build_slots_heads(const struct session_build_slots *t,
                               void (*emit)(void *ctx, const char *session), void *ctx);

/* Sessions in line (the telo_image_build_waiting gauge). */
size_t session_build_slots_waiting(const struct session_build_slots *t);

/* How many times the cached Jobs were counted: once per change of the Job cache, however many
 * sessions ask in between. */
unsigned long session_build_slots_counts(const struct session_build_slots *t);

#endif

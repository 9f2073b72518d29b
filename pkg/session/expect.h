/* Writes of ours the informers have not shown yet: the expectations a reconcile trusts instead
 * of writing again. */
#ifndef TELO_SESSION_EXPECT_H
#define TELO_SESSION_EXPECT_H

#include "session/plan.h"

#include <json.h>
#include <stddef.h>

/* How long a child we wrote may stay unseen by its informer before we write it again. Within
 * that time a reconcile that does not find it in the cache (the watch lags the write) trusts
 * the write instead of repeating it: a second create is a wasted write, answered 409, which would
 * read as a name taken by another (NameConflict) until the cache caught up. */
#define SESSION_EXPECT_TTL_S 30.0

struct session_expectations;

/* A new, empty set, or NULL when out of memory. Free with session_expect_free (accepts NULL). */
struct session_expectations *session_expect_new(void);
void session_expect_free(struct session_expectations *x);

/* The key of a write: "resource/ns/name" ("status/ns/name" for a session's status). */
void session_expect_key(char *out, size_t len, const char *resource, const char *ns,
                        const char *name);

/* Forgets the write to key (none: nothing happens). */
void session_expect_drop(struct session_expectations *x, const char *key);

/* Records a write of body (its hash; 0: any content) to key at now, held for
 * SESSION_EXPECT_TTL_S. Returns 0, or -1 when out of memory (then nothing is expected). */
int session_expect_set(struct session_expectations *x, const char *key, unsigned long long body,
                       double now);

/* The expectation for key at now, as the plan reads it; one that lapsed is dropped. With own
 * (the cache shows the session's own child), the write it stood for has arrived: dropped. */
struct session_plan_expect session_expect_seen(struct session_expectations *x, const char *key,
                                               int own, double now);

/* Whether a write to key of an earlier pass took effect and its object is not in the cache yet.
 * A pass ends only when all its writes are answered, and a failed one drops its expectation, so
 * one still held by a later pass of the same key is a write the API server accepted. */
int session_expect_answered(const struct session_expectations *x, const char *key, double now);

/* The status write to key (already set with session_expect_set): remembers status until the
 * cache shows it. base_rv is the resourceVersion of the session it was computed from. */
void session_expect_status(struct session_expectations *x, const char *key,
                           struct json_object *status, const char *base_rv);

/* The status write to key was answered: the resourceVersion it made. */
void session_expect_status_made(struct session_expectations *x, const char *key, const char *rv);

/* The status our last write to key made, when the cached session (resourceVersion base_rv) is
 * still one from before it: a new object the caller json_object_put()s, and in made_rv (of
 * made_rv_len bytes) the resourceVersion that write made. NULL when the cache is current (the
 * expectation is dropped then) or when none is held. */
struct json_object *session_expect_written_status(struct session_expectations *x, const char *key,
                                                  const char *base_rv, double now, char *made_rv,
                                                  size_t made_rv_len);

#endif

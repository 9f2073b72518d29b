/* Bundle ConfigMaps read moments ago, and reads in flight shared by every pass that needs the same
 * ConfigMap: a burst of sessions naming one bundle costs one GET, not one each. Pure bookkeeping,
 * no I/O: the reconciler reads and hands the answer back. */
#ifndef TELO_SESSION_CMMEMO_H
#define TELO_SESSION_CMMEMO_H

#include <json.h>

#include <stddef.h>

struct session_cm_memo;

/* What session_cm_memo_begin found. */
enum session_cm_step {
    SESSION_CM_HIT,   /* read moments ago: *keys says which keys it held */
    SESSION_CM_FETCH, /* unknown: the caller reads it, then calls session_cm_memo_settle */
    SESSION_CM_WAIT,  /* another caller's read is in flight: settle hands waiter back */
};

/* Hands a parked waiter the answer that settled its key; answer is settle's argument. */
typedef void session_cm_waiter_fn(void *waiter, void *answer);

/* Returns an empty memo that keeps an answer for ttl seconds, or NULL when out of memory. */
struct session_cm_memo *session_cm_memo_new(double ttl);

/* Frees m and what it remembers. Parked waiters are dropped without a call (they belong to the
 * caller, which is shutting down). NULL is a no-op. */
void session_cm_memo_free(struct session_cm_memo *m);

/* Looks key ("namespace/name") up at time now (seconds).
 * HIT: *keys is {"binaryData": {K: true...}, "data": {K: true...}} of the ConfigMap, borrowed until
 *      the next call on m.
 * WAIT: waiter is parked until the read in flight settles.
 * FETCH: the caller must read the ConfigMap and call session_cm_memo_settle(key) whatever the
 *      outcome; callers that come meanwhile WAIT. Also the answer when out of memory (nothing is
 *      parked then, and the read is simply not shared). */
enum session_cm_step session_cm_memo_begin(struct session_cm_memo *m, const char *key, double now,
                                           void *waiter, struct json_object **keys);

/* Ends the read of key: remembers the key names of cm (a ConfigMap as the API returns it; NULL
 * when it was not found or the read failed, which is never remembered: the next pass reads again)
 * until now + ttl, then calls fn(waiter, answer) for every waiter parked on key, in the order they
 * came. fn may call into m again. cm is borrowed for the call. */
void session_cm_memo_settle(struct session_cm_memo *m, const char *key, struct json_object *cm,
                            double now, session_cm_waiter_fn *fn, void *answer);

/* Keys remembered or in flight, for tests and metrics. */
size_t session_cm_memo_len(const struct session_cm_memo *m);

#endif

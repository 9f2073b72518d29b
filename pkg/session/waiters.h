/* The sessions waiting on one answer of the image builds' I/O edge (builds.c, buildlog.c): each
 * key once, queued again together when the answer arrives. */
#ifndef TELO_SESSION_WAITERS_H
#define TELO_SESSION_WAITERS_H

#include <stddef.h>

/* Zero-initialised it is empty. */
struct session_waiters {
    char **keys;
    size_t n, cap;
};

/* Calls back with ud and one waiting session's key. */
typedef void session_waiters_wake_fn(void *ud, const char *key);

/* Adds a copy of key unless it waits already. Past 4096 keys, or out of memory, key is not
 * added: such a session is queued again by its own requeue-after. Cannot fail otherwise. */
void session_waiters_add(struct session_waiters *w, const char *key);

/* Calls wake(ud, key) for every key, then forgets them (w stays usable). */
void session_waiters_wake(struct session_waiters *w, session_waiters_wake_fn *wake, void *ud);

/* Frees w's keys (no wakes); w is empty after. */
void session_waiters_free(struct session_waiters *w);

#endif

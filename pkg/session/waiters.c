/* The sessions waiting on one answer of the image builds' I/O edge (builds.c, buildlog.c). */
#include "session/waiters.h"

#include <stdlib.h>
#include <string.h>

#define MAX_WAITERS 4096

void session_waiters_add(struct session_waiters *w, const char *key)
{
    for (size_t i = 0; i < w->n; i++) {
        if (strcmp(w->keys[i], key) == 0)
            return;
    }
    if (w->n == MAX_WAITERS)
        return; /* they are requeued by their own requeue-after */
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4;
        char **keys = realloc(w->keys, cap * sizeof(*keys));
        if (!keys)
            return;
        w->keys = keys;
        w->cap = cap;
    }
    char *copy = strdup(key);
    if (copy)
        w->keys[w->n++] = copy;
}

void session_waiters_wake(struct session_waiters *w, session_waiters_wake_fn *wake, void *ud)
{
    for (size_t i = 0; i < w->n; i++) {
        wake(ud, w->keys[i]);
        free(w->keys[i]);
    }
    w->n = 0;
}

void session_waiters_free(struct session_waiters *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->keys[i]);
    free(w->keys);
    w->keys = NULL;
    w->n = w->cap = 0;
}

/* Bundle ConfigMaps read moments ago, and reads in flight shared by every pass that needs them. */
#include "session/cmmemo.h"

#include "util/jget.h"
#include "util/strmap.h"

#include <stdlib.h>
#include <string.h>

struct entry {
    char *key;
    struct json_object *keys; /* NULL while a read is in flight */
    double until;             /* keys are good until then */
    void **waiters;           /* parked while in flight */
    size_t nwaiters, cap;
};

struct session_cm_memo {
    struct strmap *entries; /* key -> struct entry */
    double ttl;
    double last_sweep;
};

static void entry_free(struct entry *e)
{
    if (!e)
        return;
    json_object_put(e->keys);
    free(e->waiters);
    free(e->key);
    free(e);
}

struct session_cm_memo *session_cm_memo_new(double ttl)
{
    struct session_cm_memo *m = calloc(1, sizeof(*m));
    if (!m || !(m->entries = strmap_new())) {
        free(m);
        return NULL;
    }
    m->ttl = ttl;
    return m;
}

void session_cm_memo_free(struct session_cm_memo *m)
{
    if (!m)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(m->entries, &it, &key, &value))
        entry_free(value);
    strmap_free(m->entries);
    free(m);
}

/* Drops answers past their time, at most once per ttl, so keys nobody asks for again go too. */
static void sweep(struct session_cm_memo *m, double now)
{
    if (now - m->last_sweep < m->ttl)
        return;
    m->last_sweep = now;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(m->entries, &it, &key, &value)) {
        struct entry *e = value;
        if (e->keys && e->until <= now)
            entry_free(strmap_remove(m->entries, key));
    }
}

static int park(struct entry *e, void *waiter)
{
    if (e->nwaiters == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 16;
        void **w = realloc(e->waiters, cap * sizeof(*w));
        if (!w)
            return -1;
        e->waiters = w;
        e->cap = cap;
    }
    e->waiters[e->nwaiters++] = waiter;
    return 0;
}

enum session_cm_step session_cm_memo_begin(struct session_cm_memo *m, const char *key, double now,
                                           void *waiter, struct json_object **keys)
{
    sweep(m, now);
    struct entry *e = strmap_get(m->entries, key);
    if (e && e->keys && e->until > now) {
        *keys = e->keys;
        return SESSION_CM_HIT;
    }
    if (e && !e->keys)
        return park(e, waiter) == 0 ? SESSION_CM_WAIT : SESSION_CM_FETCH;
    if (e) {
        /* Expired: read again, in flight from now on. */
        json_object_put(e->keys);
        e->keys = NULL;
        return SESSION_CM_FETCH;
    }
    if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key)) ||
        strmap_put(m->entries, e->key, e) < 0)
        entry_free(e);
    return SESSION_CM_FETCH;
}

/* {"binaryData": {K: true...}, "data": {K: true...}}: all the check before a pod needs. */
static struct json_object *key_names(struct json_object *cm)
{
    static const char *const sections[] = {"binaryData", "data"};
    struct json_object *out = json_object_new_object();
    for (size_t i = 0; out && i < 2; i++) {
        struct json_object *section = jget_object(cm, sections[i]);
        struct json_object *names = json_object_new_object();
        if (!names) {
            json_object_put(out);
            return NULL;
        }
        if (section != NULL) {
            json_object_object_foreach(section, k, v)
            {
                (void)v;
                json_object_object_add(names, k, json_object_new_boolean(1));
            }
        }
        json_object_object_add(out, sections[i], names);
    }
    return out;
}

void session_cm_memo_settle(struct session_cm_memo *m, const char *key, struct json_object *cm,
                            double now, session_cm_waiter_fn *fn, void *answer)
{
    struct entry *e = strmap_remove(m->entries, key);
    if (!e)
        return;
    void **waiters = e->waiters;
    size_t n = e->nwaiters;
    e->waiters = NULL;
    e->nwaiters = e->cap = 0;
    if (cm && (e->keys = key_names(cm))) {
        e->until = now + m->ttl;
        if (strmap_put(m->entries, e->key, e) < 0)
            entry_free(e);
    } else {
        entry_free(e);
    }
    /* The list is detached first: a waiter's call may begin a read of this very key again. */
    for (size_t i = 0; i < n; i++)
        fn(waiters[i], answer);
    free(waiters);
}

size_t session_cm_memo_len(const struct session_cm_memo *m)
{
    return strmap_len(m->entries);
}

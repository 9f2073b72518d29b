/* Writes of ours the informers have not shown yet: the expectations a reconcile trusts instead
 * of writing again. */
#include "session/expect.h"

#include "cache/pack.h"
#include "util/strmap.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STALE_RVS 4

/* zlib's level for the written statuses: as the informer cache's (cache/store.c). */
#define STATUS_PACK_LEVEL 3

struct session_expectations {
    struct strmap *map; /* key -> struct expectation */
    /* Every session's status write is held until its session's next reconcile, and in a burst
     * that is every session at once (10,000 of them: 12.4 MB of expectations at the peak, 8.5 MB
     * of it status texts, heaptrack 2026-12-03). The texts share their shape, so they are kept
     * deflated against the first one, as the informer cache keeps its objects. */
    struct cache_pack *pack;
    double last_sweep;
};

/* A child written by us and not yet seen in its informer's cache. */
struct expectation {
    unsigned long long body; /* hash of what was applied; 0: any content will do */
    double until;
    /* "status/ns/name" entries: the status we wrote (packed by the set's pack: status_len bytes
     * of a status_text_len-byte text). While the cached session is one we read before that
     * write or one our earlier writes made (stale_rv), that status is the truth, not the
     * cache's; once the cache shows the resourceVersion the write made (awaited_rv), or any
     * other one (someone else's change), the cache is. */
    unsigned char *status;
    unsigned status_len, status_text_len;
    char stale_rv[STALE_RVS][32];
    char awaited_rv[32];
    char key[]; /* the map's key */
};

static void add_stale(struct expectation *e, const char *rv)
{
    if (!rv || !*rv)
        return;
    for (int i = 0; i < STALE_RVS; i++) {
        if (strcmp(e->stale_rv[i], rv) == 0)
            return;
    }
    memmove(e->stale_rv[1], e->stale_rv[0], (STALE_RVS - 1) * sizeof(e->stale_rv[0]));
    snprintf(e->stale_rv[0], sizeof(e->stale_rv[0]), "%s", rv);
}

static void expectation_free(struct expectation *e)
{
    if (e)
        free(e->status);
    free(e);
}

struct session_expectations *session_expect_new(void)
{
    struct session_expectations *x = calloc(1, sizeof(*x));
    if (x && (!(x->map = strmap_new()) || !(x->pack = cache_pack_new(STATUS_PACK_LEVEL)))) {
        session_expect_free(x);
        return NULL;
    }
    return x;
}

void session_expect_free(struct session_expectations *x)
{
    if (!x)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (x->map && strmap_next(x->map, &it, &key, &value))
        expectation_free(value);
    strmap_free(x->map);
    cache_pack_free(x->pack);
    free(x);
}

void session_expect_key(char *out, size_t len, const char *resource, const char *ns,
                        const char *name)
{
    snprintf(out, len, "%s/%s/%s", resource, ns, name);
}

void session_expect_drop(struct session_expectations *x, const char *key)
{
    expectation_free(strmap_remove(x->map, key));
}

static void sweep(struct session_expectations *x, double now)
{
    if (now - x->last_sweep < SESSION_EXPECT_TTL_S)
        return;
    x->last_sweep = now;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(x->map, &it, &key, &value)) {
        struct expectation *e = value;
        if (e->until <= now) {
            strmap_remove(x->map, key);
            expectation_free(e);
        }
    }
}

int session_expect_set(struct session_expectations *x, const char *key, unsigned long long body,
                       double now)
{
    sweep(x, now);
    struct expectation *e =
        strmap_get_or_add(x->map, key, sizeof(*e), offsetof(struct expectation, key));
    if (!e)
        return -1;
    e->body = body;
    e->until = now + SESSION_EXPECT_TTL_S;
    return 0;
}

struct session_plan_expect session_expect_seen(struct session_expectations *x, const char *key,
                                               int own, double now)
{
    struct session_plan_expect out = {0};
    const struct expectation *e = strmap_get(x->map, key);
    if (!e)
        return out;
    if (own || e->until <= now) {
        session_expect_drop(x, key);
        return out;
    }
    out.held = 1;
    out.body = e->body;
    out.until = e->until;
    return out;
}

int session_expect_answered(const struct session_expectations *x, const char *key, double now)
{
    const struct expectation *e = strmap_get(x->map, key);
    return e && e->until > now;
}

void session_expect_status(struct session_expectations *x, const char *key,
                           struct json_object *status, const char *base_rv)
{
    struct expectation *e = strmap_get(x->map, key);
    if (!e)
        return;
    free(e->status);
    e->status = NULL;
    size_t len = 0, packed_len = 0;
    const char *text = json_object_to_json_string_length(status, JSON_C_TO_STRING_PLAIN, &len);
    const unsigned char *packed;
    /* Out of memory leaves no status: the next reconcile then trusts the cache, as after a
     * lapse. */
    if (text && cache_pack_deflate(x->pack, text, len, &packed, &packed_len, NULL) == 0 &&
        (e->status = malloc(packed_len ? packed_len : 1)) != NULL) {
        memcpy(e->status, packed, packed_len);
        e->status_len = (unsigned)packed_len;
        e->status_text_len = (unsigned)len;
    }
    /* What we read, and what our previous write made, are now both behind this write. */
    add_stale(e, base_rv);
    add_stale(e, e->awaited_rv);
    e->awaited_rv[0] = '\0';
}

void session_expect_status_made(struct session_expectations *x, const char *key, const char *rv)
{
    struct expectation *e = strmap_get(x->map, key);
    if (e && rv)
        snprintf(e->awaited_rv, sizeof(e->awaited_rv), "%s", rv);
}

struct json_object *session_expect_written_status(struct session_expectations *x, const char *key,
                                                  const char *base_rv, double now, char *made_rv,
                                                  size_t made_rv_len)
{
    const struct expectation *e = strmap_get(x->map, key);
    if (!e)
        return NULL;
    int stale = 0;
    for (int i = 0; i < STALE_RVS; i++)
        stale |= e->stale_rv[i][0] && strcmp(e->stale_rv[i], base_rv) == 0;
    if (e->until <= now || !e->status || !stale) {
        session_expect_drop(x, key);
        return NULL;
    }
    snprintf(made_rv, made_rv_len, "%s", e->awaited_rv);
    return cache_pack_parse(x->pack, e->status, e->status_len, e->status_text_len);
}

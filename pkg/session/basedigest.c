/* Base-image freshness: digests kept per base image, lookups shared, and the tag they make. */
#include "session/basedigest.h"

#include "imagebuild/depkey.h"
#include "imagebuild/job.h"
#include "util/strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX 1024
#define WAITERS_MAX 4096

struct entry {
    char *image;
    int in_flight;
    int answered; /* an answer was settled at `at` */
    double at;
    int failed; /* the last answer was a failure */
    char digest[SESSION_DIGEST_MAX + 1];
    char reason[512];
    char **waiters;
    size_t nwaiters, cap;
};

struct session_base_digests {
    struct strmap *entries; /* image -> struct entry */
    size_t max;
};

int session_base_digest_wanted(const char *pull_policy, const char *image)
{
    return pull_policy && strcmp(pull_policy, "Always") == 0 && image && !strchr(image, '@');
}

void session_base_digest_tag(const char *tag, const struct session_base_digest *d, char *out)
{
    if (!d || d->state == SESSION_DIGEST_NONE || !d->digest[0]) {
        snprintf(out, BUILD_TAG_LEN + 1, "%s", tag);
        return;
    }
    const struct build_tag_record recs[] = {{"tag", tag}, {"base-digest", d->digest}};
    build_tag_of_records(recs, 2, out);
}

const char *session_base_digest_note(const struct session_base_digest *d, char *out, size_t len)
{
    if (!d || d->state != SESSION_DIGEST_FAILED || len == 0)
        return NULL;
    snprintf(out, len, "Base image freshness check failed (%.400s); using cached image",
             d->reason[0] ? d->reason : "no answer");
    return out;
}

static int lower_hex(const char *s, size_t n)
{
    return strspn(s, "0123456789abcdef") == n && s[n] == '\0';
}

int session_base_digest_valid(const char *digest)
{
    if (!digest)
        return 0;
    size_t len = strnlen(digest, SESSION_DIGEST_MAX + 1);
    if (len == 0 || len > SESSION_DIGEST_MAX)
        return 0;
    const char *colon = strchr(digest, ':');
    if (!colon || colon == digest || colon[1] == '\0')
        return 0;
    /* algorithm-component (separator algorithm-component)*: no separator first, last or twice */
    int after_separator = 1;
    for (const char *p = digest; p < colon; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')) {
            after_separator = 0;
        } else if (strchr("+._-", *p) && *p != '\0') {
            if (after_separator)
                return 0;
            after_separator = 1;
        } else {
            return 0;
        }
    }
    if (after_separator)
        return 0;
    const char *enc = colon + 1;
    size_t alg = (size_t)(colon - digest), elen = strlen(enc);
    if (strspn(enc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=_-") != elen)
        return 0;
    if (alg == 6 && strncmp(digest, "sha256", 6) == 0)
        return elen == 64 && lower_hex(enc, 64);
    if (alg == 6 && strncmp(digest, "sha512", 6) == 0)
        return elen == 128 && lower_hex(enc, 128);
    return 1;
}

/* The length of the first path component of name (nlen bytes) when it names a registry host
 * (it has a '.' or a ':', or is "localhost"), else 0: a Docker Hub path. */
static size_t host_len(const char *name, size_t nlen)
{
    const char *first_end = memchr(name, '/', nlen);
    size_t flen = first_end ? (size_t)(first_end - name) : 0;
    if (flen == 0)
        return 0;
    if (memchr(name, '.', flen) || memchr(name, ':', flen) ||
        (flen == 9 && memcmp(name, "localhost", 9) == 0))
        return flen;
    return 0;
}

/* Whether host (len bytes) is one of Docker Hub's names. */
static int docker_hub(const char *host, size_t len)
{
    return (len == 9 && memcmp(host, "docker.io", 9) == 0) ||
           (len == 15 && memcmp(host, "index.docker.io", 15) == 0);
}

/* Docker Hub's repository for path (plen bytes) into repository (rlen bytes): an official image
 * ("node") is under library/. Returns snprintf's count, or -1 for an empty path. */
static int hub_repository(const char *path, size_t plen, char *repository, size_t rlen)
{
    if (plen == 0)
        return -1;
    int library = memchr(path, '/', plen) == NULL;
    return snprintf(repository, rlen, "registry-1.docker.io/%s%.*s", library ? "library/" : "",
                    (int)plen, path);
}

int session_base_image_split(const char *image, char *repository, size_t rlen, char *tag,
                             size_t tlen)
{
    if (!image || !*image || strchr(image, '@'))
        return -1;
    const char *slash = strrchr(image, '/');
    const char *colon = strrchr(slash ? slash : image, ':');
    size_t nlen = colon ? (size_t)(colon - image) : strlen(image);
    const char *t = colon ? colon + 1 : "latest";
    if (nlen == 0 || !*t)
        return -1;
    size_t hlen = host_len(image, nlen);
    int n;
    if (hlen > 0 && !docker_hub(image, hlen)) {
        n = snprintf(repository, rlen, "%.*s", (int)nlen, image);
    } else {
        const char *path = hlen > 0 ? image + hlen + 1 : image;
        n = hub_repository(path, nlen - (size_t)(path - image), repository, rlen);
    }
    if (n < 0 || (size_t)n >= rlen || repository[n - 1] == '/')
        return -1;
    n = snprintf(tag, tlen, "%s", t);
    return n < 0 || (size_t)n >= tlen ? -1 : 0;
}

/* ---- the table ---- */

static void entry_free(struct entry *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->nwaiters; i++)
        free(e->waiters[i]);
    free(e->waiters);
    free(e->image);
    free(e);
}

struct session_base_digests *session_base_digests_new(size_t max)
{
    struct session_base_digests *t = calloc(1, sizeof(*t));
    if (!t || !(t->entries = strmap_new())) {
        free(t);
        return NULL;
    }
    t->max = max ? max : DEFAULT_MAX;
    return t;
}

void session_base_digests_free(struct session_base_digests *t)
{
    if (!t)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(t->entries, &it, &key, &value))
        entry_free(value);
    strmap_free(t->entries);
    free(t);
}

void session_base_digests_get(const struct session_base_digests *t, const char *image, double now,
                              double ttl, struct session_base_digest *out)
{
    memset(out, 0, sizeof(*out));
    const struct entry *e = image ? strmap_get(t->entries, image) : NULL;
    if (!e)
        return;
    snprintf(out->digest, sizeof(out->digest), "%s", e->digest);
    if (!e->answered || now - e->at > ttl || now < e->at - ttl)
        return;
    out->state = e->failed ? SESSION_DIGEST_FAILED : SESSION_DIGEST_FRESH;
    if (e->failed)
        snprintf(out->reason, sizeof(out->reason), "%s", e->reason);
}

static int park(struct entry *e, const char *waiter)
{
    if (!waiter)
        return 0;
    for (size_t i = 0; i < e->nwaiters; i++) {
        if (strcmp(e->waiters[i], waiter) == 0)
            return 0;
    }
    if (e->nwaiters == WAITERS_MAX)
        return -1; /* such a waiter comes back through its own requeue-after */
    if (e->nwaiters == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 4;
        char **w = realloc(e->waiters, cap * sizeof(*w));
        if (!w)
            return -1;
        e->waiters = w;
        e->cap = cap;
    }
    char *copy = strdup(waiter);
    if (!copy)
        return -1;
    e->waiters[e->nwaiters++] = copy;
    return 0;
}

/* Makes room for one more image: drops the answer settled longest ago (never a lookup in flight,
 * whose waiters are owed a wake). Returns 0, or -1 when every entry is in flight. */
static int make_room(struct session_base_digests *t)
{
    struct strmap_iter it = {0};
    const char *key, *oldest = NULL;
    void *value;
    double at = 0;
    while (strmap_next(t->entries, &it, &key, &value)) {
        const struct entry *e = value;
        if (!e->in_flight && (!oldest || e->at < at)) {
            oldest = key;
            at = e->at;
        }
    }
    if (!oldest)
        return -1;
    entry_free(strmap_remove(t->entries, oldest));
    return 0;
}

enum session_digest_ask session_base_digests_ask(struct session_base_digests *t, const char *image,
                                                 double now, double ttl, const char *waiter)
{
    struct entry *e = strmap_get(t->entries, image);
    if (e && e->in_flight) {
        (void)park(e, waiter);
        return SESSION_DIGEST_JOIN;
    }
    if (e && e->answered && now - e->at <= ttl && now >= e->at - ttl)
        return SESSION_DIGEST_HELD;
    if (!e) {
        if (strmap_len(t->entries) >= t->max && make_room(t) < 0)
            return SESSION_DIGEST_FULL;
        if (!(e = calloc(1, sizeof(*e))) || !(e->image = strdup(image)) ||
            strmap_put(t->entries, e->image, e) < 0) {
            entry_free(e);
            return SESSION_DIGEST_FULL;
        }
    }
    e->in_flight = 1;
    (void)park(e, waiter);
    return SESSION_DIGEST_LOOKUP;
}

void session_base_digests_settle(struct session_base_digests *t, const char *image,
                                 const char *digest, const char *reason, double now,
                                 session_base_digests_wake_fn *wake, void *ud)
{
    struct entry *e = strmap_get(t->entries, image);
    if (!e)
        return; /* dropped meanwhile (the table was full of other answers) */
    e->in_flight = 0;
    e->answered = 1;
    e->at = now;
    if (digest && session_base_digest_valid(digest)) {
        e->failed = 0;
        e->reason[0] = '\0';
        snprintf(e->digest, sizeof(e->digest), "%s", digest);
    } else {
        e->failed = 1;
        snprintf(e->reason, sizeof(e->reason), "%s",
                 reason && *reason ? reason : "the registry gave no valid digest");
    }
    /* The waiters are taken first: a wake may ask again (and park on a new lookup). */
    char **waiters = e->waiters;
    size_t n = e->nwaiters;
    e->waiters = NULL;
    e->nwaiters = e->cap = 0;
    for (size_t i = 0; i < n; i++) {
        if (wake)
            wake(ud, waiters[i]);
        free(waiters[i]);
    }
    free(waiters);
}

size_t session_base_digests_len(const struct session_base_digests *t)
{
    return strmap_len(t->entries);
}

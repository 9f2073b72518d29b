/* Base-image freshness (issue 17): the registry digest of a session's base image under pullPolicy
 * Always, kept per image for build.baseDigestTtlSeconds and shared by every session that asks
 * meanwhile, and what it makes of the per-app image's tag. Pure bookkeeping and decisions, no I/O:
 * the build edge (builds.c) asks the registry and settles the answer here. */
#ifndef TELO_SESSION_BASEDIGEST_H
#define TELO_SESSION_BASEDIGEST_H

#include <stddef.h>

/* The longest digest kept: "sha512:" and 128 hex characters, with room for another algorithm. */
#define SESSION_DIGEST_MAX 160

enum session_digest_state {
    SESSION_DIGEST_NONE,   /* no answer held (none asked, one in flight, or past its time) */
    SESSION_DIGEST_FRESH,  /* digest is the registry's answer, at most the TTL old */
    SESSION_DIGEST_FAILED, /* the last lookup failed: digest is the last one known, or "" */
};

/* What a session observes of its base image's digest. */
struct session_base_digest {
    enum session_digest_state state;
    char digest[SESSION_DIGEST_MAX + 1]; /* "sha256:<64 hex>", or "" */
    char reason[512];                    /* FAILED: why the lookup failed */
};

/* Whether a session with pull_policy (spec.pullPolicy, NULL: IfNotPresent) on image needs its
 * base image's digest: under Always, unless image is pinned by digest ("repo@sha256:..."), whose
 * content cannot move. Returns 1 or 0. */
int session_base_digest_wanted(const char *pull_policy, const char *image);

/* The image tag for a bundle's tag (BUILD_TAG_LEN hex characters) with d, into out (BUILD_TAG_LEN
 * + 1 bytes): tag itself when d holds no digest (NONE, or FAILED with none known, which is the
 * reference's key without the base-digest record), else the first BUILD_TAG_LEN hex characters of
 * sha256 over "tag\0<tag>\0base-digest\0<digest>\0". Keyed over the bundle's tag (as the
 * namespace is) rather than inside it: a bundle is read once, whatever its base's digest. */
void session_base_digest_tag(const char *tag, const struct session_base_digest *d, char *out);

/* The progress note of a failed lookup, the reference runner's words: "Base image freshness check
 * failed (<reason>); using cached image", into out; returns out, or NULL (nothing to say) unless
 * d is FAILED. */
const char *session_base_digest_note(const struct session_base_digest *d, char *out, size_t len);

/* Checks a Docker-Content-Digest value, the registry's word: an OCI digest
 * "<algorithm>:<encoded>" (algorithm: lowercase letters and digits, separated by one of "+._-";
 * encoded: letters, digits, '=', '_' and '-'), at most SESSION_DIGEST_MAX characters, with
 * sha256 and sha512 held to their exact lowercase-hex length. Returns 1 or 0. */
int session_base_digest_valid(const char *digest);

/* Splits a base image reference "[host[:port]/]path[:tag]" into the repository the registry
 * check takes ("host/path") and the tag ("latest" when none), as Docker reads it: a first
 * component without '.' or ':' that is not "localhost" is a Docker Hub path, asked at
 * registry-1.docker.io (with "library/" before a one-component name); "docker.io" and
 * "index.docker.io" are Docker Hub too. Returns 0, or -1 for a reference with a digest ('@'), an
 * empty part, or one that does not fit. */
int session_base_image_split(const char *image, char *repository, size_t rlen, char *tag,
                             size_t tlen);

struct session_base_digests;

/* Returns an empty table of at most max images (0: 1024), or NULL when out of memory. */
struct session_base_digests *session_base_digests_new(size_t max);

/* Frees t; parked waiters are dropped without a call. NULL is a no-op. */
void session_base_digests_free(struct session_base_digests *t);

/* What is held for image at now (seconds) into out: FRESH or FAILED while the answer is at most
 * ttl seconds old, else NONE (with the last known digest in out->digest all the same, "" when
 * none). Cannot fail. */
void session_base_digests_get(const struct session_base_digests *t, const char *image, double now,
                              double ttl, struct session_base_digest *out);

enum session_digest_ask {
    SESSION_DIGEST_HELD,   /* an answer within its time is held: nothing to ask */
    SESSION_DIGEST_JOIN,   /* a lookup is in flight: waiter is parked on it */
    SESSION_DIGEST_LOOKUP, /* the caller looks image up and settles it; waiter is parked */
    SESSION_DIGEST_FULL,   /* out of room or memory: nothing parked, ask again later */
};

/* Asks for image's digest on behalf of waiter (a session key, copied) at now. One lookup per
 * image at a time: callers that come while it runs JOIN it. */
enum session_digest_ask session_base_digests_ask(struct session_base_digests *t, const char *image,
                                                 double now, double ttl, const char *waiter);

/* Called once per parked waiter when its image settles. */
typedef void session_base_digests_wake_fn(void *ud, const char *waiter);

/* Ends image's lookup at now: digest (valid per session_base_digest_valid) makes it FRESH and the
 * last known one; NULL makes it FAILED with reason, the last known digest kept. Wakes every
 * waiter parked on image through wake (may be NULL) in the order they came, then forgets them.
 * An image with no lookup in flight is settled all the same. */
void session_base_digests_settle(struct session_base_digests *t, const char *image,
                                 const char *digest, const char *reason, double now,
                                 session_base_digests_wake_fn *wake, void *ud);

/* Images held (answered or in flight). */
size_t session_base_digests_len(const struct session_base_digests *t);

#endif

/* "Does <repository>:<tag> exist?": an OCI distribution manifest HEAD with Basic credentials
 * from a dockerconfigjson and the Bearer token challenge, asynchronous on the libev loop, with a
 * bounded retry and an in-memory cache of positive answers. */
#ifndef TELO_IMAGEBUILD_REGISTRY_H
#define TELO_IMAGEBUILD_REGISTRY_H

#include "util/err.h"

#include <stddef.h>

struct ev_loop;
struct build_registry;
struct build_registry_check;

/* The Accept header of the HEAD: OCI manifest and index, Docker v2 manifest and manifest list. */
#define BUILD_MANIFEST_ACCEPT                                                                      \
    "Accept: application/vnd.oci.image.manifest.v1+json, "                                         \
    "application/vnd.oci.image.index.v1+json, "                                                    \
    "application/vnd.docker.distribution.manifest.v2+json, "                                       \
    "application/vnd.docker.distribution.manifest.list.v2+json"

/* ---- pure helpers ---- */

/* Splits an image repository "host[:port]/path" into its registry host and repository path
 * (into host and path, hostlen and pathlen bytes). A repository without a '/' or whose first
 * part is not a host (no '.', ':' or "localhost") is refused: images are pushed to a registry
 * named explicitly. Returns 0 or -TELO_EINVAL with err saying so. */
int build_repository_split(const char *repository, char *host, size_t hostlen, char *path,
                           size_t pathlen, struct telo_err *err);

/* Finds the credentials for registry host in a .dockerconfigjson (len bytes): the `auths` entry
 * whose key is host or a URL of host ("https://host/v1/"), Docker Hub's aliases included; its
 * username/password, or its `auth` (base64 "user:password"). On success *user and *password are
 * new strings the caller frees. Returns 0, -TELO_ENOTFOUND (no entry for host; err lists the
 * hosts there are), or -TELO_EINVAL (not JSON, no `auths`, bad base64, no ':'), with err naming
 * what is wrong. Never puts a secret in err. */
int build_dockerconfig_auth(const char *json, size_t len, const char *host, char **user,
                            char **password, struct telo_err *err);

/* A parsed WWW-Authenticate challenge; values are borrowed from a caller buffer. */
struct build_auth_challenge {
    char scheme[16];                            /* "Bearer" or "Basic" as sent */
    char realm[1024], service[256], scope[512]; /* "" when absent */
};

/* Parses the first challenge of a WWW-Authenticate value (auth-params with quoted-string or
 * token values, backslash escapes, commas inside quotes). Returns 0, or -TELO_EPROTO for a value
 * that is not a challenge. */
int build_auth_challenge_parse(const char *header, struct build_auth_challenge *out);

/* Whether credentials (the push Secret's Basic pair) may go to the token service at realm (a
 * Bearer challenge's realm URL) for the registry at registry_host (the repository's host) and
 * api_url (build.registryApiUrl, or NULL): only when the realm is https (or http with insecure,
 * a registry configured as plain HTTP) and its host is the registry's own (either host, port
 * aside), or Docker Hub's token service auth.docker.io for Docker Hub. A registry names its realm
 * itself, so anything else (another host, a plain-HTTP realm of a TLS registry, a URL that does
 * not parse) would hand the Secret to whoever the answer named. Returns 1 or 0. */
int build_registry_realm_trusted(const char *realm, const char *registry_host, const char *api_url,
                                 int insecure);

/* ---- the asynchronous check ---- */

/* Zero fields take the default in the comment. */
struct build_registry_opts {
    int max_attempts;    /* tries of one check through transient failures: 3 */
    long retry_delay_ms; /* before the second try, doubling after: 500 */
    long timeout_ms;     /* one HTTP request: 10000 */
    size_t cache_max;    /* positive answers kept (oldest dropped first): 4096 */
    int no_cache;        /* 1: every check asks the registry and nothing is kept (a digest
                          * lookup, whose answer may move under the same tag) */
};

/* One question. Strings are copied by build_registry_check. */
struct build_registry_query {
    const char *repository; /* "127.0.0.1:5000/telo/apps": host and path, no tag */
    const char *tag;
    const char *api_url;          /* "http://registry.svc:5000"; NULL: https://<host>, or
                                   * http://<host> when insecure */
    const char *dockerconfigjson; /* the push Secret's .dockerconfigjson, or NULL: anonymous */
    size_t dockerconfigjson_len;
    const char *secret_name; /* "telo-builds/push-creds", for messages */
    int insecure;            /* do not verify TLS */
};

enum build_image_presence {
    BUILD_IMAGE_PRESENT, /* 200: use it, no build */
    BUILD_IMAGE_ABSENT,  /* 404: build it */
    BUILD_IMAGE_UNKNOWN, /* every try failed (connection, timeout, 5xx, 429, an unexpected
                          * answer): treat as missing and build; message says so */
    BUILD_IMAGE_DENIED,  /* the registry refused the credentials, wants some, or forbids the
                          * repository: building would fail to push too; message says what to fix */
};

struct build_registry_result {
    enum build_image_presence presence;
    const char *ref;        /* "<repository>:<tag>" */
    const char *digest;     /* Docker-Content-Digest of a present image, or NULL */
    int from_cache;         /* answered from the positive cache, no request made */
    int attempts;           /* HEAD tries made (0 from the cache) */
    const char *message;    /* "" for PRESENT and ABSENT, else one sentence a user can act on */
    const char *last_error; /* UNKNOWN: what the last try met ("HEAD ... answered HTTP 503",
                             * curl's words), without the retry count; else "" */
};

/* Called once per check not cancelled; the check is freed when it returns. The result is valid
 * only during the call. May start and cancel checks. */
typedef void build_registry_done_fn(struct build_registry_check *check,
                                    const struct build_registry_result *result, void *ud);

/* Creates a checker on loop (borrowed; must outlive it). opts may be NULL. Returns NULL with err
 * filled when out of memory. */
struct build_registry *build_registry_new(struct ev_loop *loop,
                                          const struct build_registry_opts *opts,
                                          struct telo_err *err);

/* Cancels every check without calling back and frees r. NULL is a no-op. */
void build_registry_free(struct build_registry *r);

/* Starts a check; done is called from the loop, never from inside this function (a cached
 * positive answer too). Returns the check (owned by r; valid until done returns or it is
 * cancelled), or NULL with err filled: -TELO_EINVAL for a bad repository, tag or api_url, or a
 * dockerconfigjson without usable credentials for the host (the message names the Secret);
 * -TELO_ENOMEM. */
struct build_registry_check *build_registry_check(struct build_registry *r,
                                                  const struct build_registry_query *q,
                                                  build_registry_done_fn *done, void *ud,
                                                  struct telo_err *err);

/* Cancels check: no callback, freed now. NULL is a no-op. */
void build_registry_check_cancel(struct build_registry_check *check);

/* 1 when ref ("<repository>:<tag>") is in the positive cache. */
int build_registry_cached(const struct build_registry *r, const char *ref);

/* Drops ref from the positive cache (an image deleted from the registry). */
void build_registry_forget(struct build_registry *r, const char *ref);

#endif

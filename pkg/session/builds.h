/* The I/O edge of image builds for the session reconciler: a bundle's tag (memoised), the
 * registry's answer about an image, a failed build pod's log tail. Answers wait in tables on the
 * libev loop; the sessions that asked are queued again when one arrives, and read it as observed
 * state in their next reconcile. The log tails (buildlog.c) and the base images' digests
 * (baselookup.c) have their own files; this one is their single entry point. */
#ifndef TELO_SESSION_BUILDS_H
#define TELO_SESSION_BUILDS_H

#include "imagebuild/buildstep.h"
#include "imagebuild/depkey.h"
#include "imagebuild/job.h"
#include "session/basedigest.h"
#include "session/config.h"
#include "session/image.h"
#include "session/spec.h"
#include "util/err.h"

#include <stddef.h>

struct kube_transport;
struct session_builds;

/* Queues the session key again (the reconciler's controller). */
typedef void session_builds_requeue_fn(void *ud, const char *key);

/* Creates the edge on t's loop for cfg (both borrowed; they must outlive it). requeue is called
 * with the keys of sessions whose answer arrived. spec.bundle.url's address policy is made here,
 * once: bundle.allowedUrlCidrs, bundle.deniedUrlCidrs, and the API server's address and port
 * (t's server and the in-cluster Service, when given as addresses) refused whatever is allowed.
 * Returns NULL with err filled when out of memory. */
struct session_builds *session_builds_new(struct kube_transport *t,
                                          const struct session_config *cfg,
                                          session_builds_requeue_fn *requeue, void *ud,
                                          struct telo_err *err);

/* Cancels every request in flight (no requeues) and frees b. NULL is a no-op. */
void session_builds_free(struct session_builds *b);

/* Whether the session's image comes from a build: builds are configured (build.repository)
 * and the session runs a bundle (not spec.selfContained). */
int session_builds_needed(const struct session_config *cfg, const struct session *s);

/* The build settings of cfg, as pkg/imagebuild takes them (strings borrowed from cfg). */
void session_builds_job_config(const struct session_config *cfg, struct build_config *out);

/* The tag of s's image for the bundle's tag (the reference runner's, as
 * session_builds_bundle_key and session_builds_url_key give it): that tag itself with
 * build.shareAcrossNamespaces, else the tag keyed with s's namespace (build_tag_for_namespace),
 * so one namespace's build is never another namespace's image. out holds BUILD_TAG_LEN + 1
 * bytes. */
void session_builds_tag(const struct session_config *cfg, const struct session *s, const char *tag,
                        char *out);

/* What a bundle means for the image. */
struct session_bundle_key {
    char tag[BUILD_TAG_LEN + 1];
    int no_dependencies; /* nothing to install: the base image runs as it is */
    char error[1536];    /* the bundle cannot be used: why ("" when it can) */
    char reason[32];     /* with error: "BundleFetchFailed" when it could not be downloaded,
                          * else "" (BundleInvalid) */
};

/* The longest memo string session_builds_bundle_key takes, with its NUL. */
#define SESSION_BUILDS_MEMO_MAX 2200

/* The key of s's bundle (tgz, len bytes of gzip tar, borrowed), read once per memo string (the
 * ConfigMap's namespace, name and resourceVersion say it is the same ConfigMap; NULL: not
 * memoised), s's spec.bundle.configMap.key (which picks the bytes out of it) and the tag's other
 * inputs (base image, TELO_REGISTRY_URL, entry). source names the bundle in messages. Reading is
 * capped (pkg/imagebuild/bundle.h), so a bomb costs bounded time and memory. A part longer than
 * its CRD maxLength is refused (out->error says which), never cut short into another's key. */
void session_builds_bundle_key(struct session_builds *b, const char *memo, const void *tgz,
                               size_t len, const char *source, const struct session *s,
                               struct session_bundle_key *out);

/* URL bundle downloads in flight and waiting for a slot (bundle.maxConcurrentDownloads). */
void session_builds_downloads(const struct session_builds *b, size_t *running, size_t *waiting);

/* What a session whose URL bundle is not read yet waits for (its status progress). */
#define SESSION_BUNDLE_DOWNLOADING "Downloading the bundle (spec.bundle.url)\xe2\x80\xa6"
#define SESSION_BUNDLE_SLOT_WAIT                                                                   \
    "Waiting for a bundle download slot (bundle.maxConcurrentDownloads): namespaces with fewer "   \
    "downloads running first"
#define SESSION_BUNDLE_ROOM_WAIT                                                                   \
    "Waiting for room to download the bundle: the operator holds bundle.maxQueuedDownloads "       \
    "downloads and no namespace holds two more than this one; asked again every 30 s"

/* The key of s's URL bundle (spec.bundle.url): 1 with *out filled when it is known (downloaded,
 * checked against spec.bundle.url.sha256 and read; remembered by URL and digest), 0 while it is
 * not, with *wait one of the SESSION_BUNDLE_ texts above: waiter (a session key) is queued again
 * when its download starts and when it ends (out of room, at its requeue). The download is capped
 * like the bundle it holds; the build Job downloads the URL itself, the bytes are not kept. */
int session_builds_url_key(struct session_builds *b, const struct session *s, const char *waiter,
                           struct session_bundle_key *out, const char **wait);

/* The registry's answer about <build.repository>:<tag>, or SESSION_PRESENCE_NONE. With ask, a
 * missing answer is asked for (once per tag however many sessions ask) and waiter (a session key)
 * is queued again when it arrives. *message (for UNKNOWN and DENIED) is valid until the loop runs
 * again. Answers are kept for a short while (a positive one longer: pkg/imagebuild also caches
 * those), so a session never decides on an old "absent". */
enum session_presence session_builds_presence(struct session_builds *b, const char *tag,
                                              const char *waiter, int ask, const char **message);

/* The log tail of the failed build Job job_name (uid job_uid, so a new Job of the same name is
 * read anew), or SESSION_LOG_NONE / SESSION_LOG_FETCHING. With ask, a missing one is fetched
 * (the Job's pod's failed container, its last 20 lines) and waiter queued again when it is in.
 * *tail is valid until the loop runs again. */
enum session_build_log session_builds_log(struct session_builds *b, const char *job_name,
                                          const char *job_uid, const char *waiter, int ask,
                                          const char **tail);

/* What is held of base image image's registry digest (basedigest.h) within
 * build.baseDigestTtlSeconds, into *out. With ask and nothing held, it is looked up (a manifest
 * HEAD for its Docker-Content-Digest, with the tag check's client: one lookup per image however
 * many sessions ask, and no retry storm when the registry is down: a failure stands for the TTL
 * too) and waiter (a session key) is queued again when the answer is in. A base image in
 * build.repository's registry is asked as the tag check asks (build.registryApiUrl,
 * build.insecureRegistry, the push Secret); any other over HTTPS, anonymously (Docker Hub's
 * token service included). */
void session_builds_base_digest(struct session_builds *b, const char *image, const char *waiter,
                                int ask, struct session_base_digest *out);

/* What is known of the running build Job job's step (buildprogress.h) into *out (zero:
 * nothing). With ask, its log is read again when the last read is old (one read per Job and
 * SESSION_BUILD_PROGRESS_POLL_S) and waiter (a session key) queued again when the step or the 10 s
 * step of the time moves. */
void session_builds_progress(struct session_builds *b, const struct json_object *job,
                             const char *waiter, int ask, struct build_step *out);

#endif

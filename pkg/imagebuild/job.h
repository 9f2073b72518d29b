/* The image build Job (kaniko), its context ConfigMap and Dockerfile as pure builders, and the
 * Job's status read back into a build state with the reference runner's progress texts. */
#ifndef TELO_IMAGEBUILD_JOB_H
#define TELO_IMAGEBUILD_JOB_H

#include "imagebuild/depkey.h"
#include "util/err.h"

#include <json.h>
#include <stddef.h>

/* Progress texts of the build phase, as the reference runner words them. */
#define BUILD_PROGRESS_BUILDING "Building image\xe2\x80\xa6"                /* "…" */
#define BUILD_PROGRESS_WAITING  "Waiting for in-progress build\xe2\x80\xa6" /* another's Job */
#define BUILD_PROGRESS_BUILT    "Image built"
#define BUILD_PROGRESS_CACHED   "Using cached image"

#define BUILD_LABEL_BUILD    "telo.run/build" /* "true" on the Job and its pod */
#define BUILD_LABEL_TAG      "telo.run/tag"
#define BUILD_ANNOTATION_BY  "telo.run/requested-by" /* "ns/name" of the creating session */
#define BUILD_CONTAINER      "kaniko"
#define BUILD_INIT_CONTAINER "context"
#define BUILD_CONTEXT_KEY    "bundle.tgz"

/* A URL bundle's download: its cap in bytes, shared by the operator's own download
 * (pkg/session/builds.c) and the pods' (the build Job's and the session pod's init containers), so
 * a bundle the operator could read is never refused by a pod and a pod never writes more; and the
 * build Job's time limit, the operator's own for the same bytes (a session pod's follows its start
 * deadline, session_download_timeout). */
#define BUILD_DOWNLOAD_MAX       ((size_t)16 << 20)
#define BUILD_DOWNLOAD_TIMEOUT_S 60L

/* The init scripts' download of $BUNDLE_URL into /tmp/bundle.tgz, at most $BUNDLE_MAX bytes
 * within $BUNDLE_TIMEOUT seconds; a failure writes one line to the termination log and exits
 * 66. The time bound is timeout(1), not `wget -T`: Debian's busybox 1.35 crashes on -T (SIGSEGV
 * on every download); busybox's timeout exits 143 (SIGTERM), coreutils' 124. The size bound is
 * head(1) in the pipe: an endless stream stops one byte past the cap (wget then dies of the closed
 * pipe) instead of filling the volume until the timeout. A string literal to splice into a
 * script; inputs only through the environment. */
#define BUILD_DOWNLOAD_SCRIPT                                                                      \
    "rc=0\n"                                                                                       \
    "{ timeout \"$BUNDLE_TIMEOUT\" wget -q -O - \"$BUNDLE_URL\" 2>/tmp/wget.err ||"                \
    " echo $? >/tmp/wget.rc; } | head -c $((BUNDLE_MAX + 1)) >/tmp/bundle.tgz\n"                   \
    "if [ -s /tmp/wget.rc ]; then rc=$(cat /tmp/wget.rc); fi\n"                                    \
    "if [ \"$(wc -c </tmp/bundle.tgz)\" -gt \"$BUNDLE_MAX\" ]; then\n"                             \
    "  echo \"cannot download the bundle from $BUNDLE_URL: it is larger than $BUNDLE_MAX "         \
    "bytes\" | tee /dev/termination-log >&2; exit 66\n"                                            \
    "elif [ $rc -eq 124 ] || [ $rc -eq 143 ]; then\n"                                              \
    "  echo \"cannot download the bundle from $BUNDLE_URL: it did not finish within "              \
    "$BUNDLE_TIMEOUT s\" | tee /dev/termination-log >&2; exit 66\n"                                \
    "elif [ $rc -ne 0 ]; then\n"                                                                   \
    "  echo \"cannot download the bundle from $BUNDLE_URL: $(head -c 300 /tmp/wget.err)\" | "      \
    "tee /dev/termination-log >&2; exit 66\n"                                                      \
    "fi\n"

/* The build settings, borrowed strings; NULL or 0 fields take the default in the comment. */
struct build_config {
    const char *namespace;         /* where Jobs run: "telo-builds" */
    const char *repository;        /* image repository, no tag: "registry.local:5000/telo/apps" */
    const char *builder_image;     /* kaniko-compatible: "gcr.io/kaniko-project/executor:latest" */
    const char *init_image;        /* delivers the context (sh, wget, sha256sum, tar):
                                    * "busybox:stable" */
    const char *telo_registry_url; /* --build-arg TELO_REGISTRY_URL: "https://registry.telo.run" */
    const char *push_secret;       /* dockerconfigjson Secret in namespace, mounted at
                                    * /kaniko/.docker; NULL: none (an open registry) */
    int insecure_registry;         /* 1: plain HTTP / unverified TLS for push and pull */
    long timeout_seconds;          /* the Job's activeDeadlineSeconds: 600 */
    long ttl_seconds_after_finished;   /* finished Jobs are deleted after: 300 */
    const char *managed_by;            /* app.kubernetes.io/managed-by: "telo-operator" */
    const char *cpu, *memory;          /* the builder's requests and limits; NULL: none */
    struct json_object *node_selector; /* the build pod's nodeSelector (borrowed); NULL: none */
    struct json_object *tolerations;   /* its tolerations, as in a PodSpec; NULL: none */
};

/* One build. Exactly one of bundle_configmap and bundle_url is set. */
struct build_job_input {
    const char *tag;              /* BUILD_TAG_LEN hex characters */
    const char *base_image;       /* FROM */
    const char *base_digest;      /* base_image's digest the tag was keyed with, or NULL */
    const char *entry;            /* spec.entry, for `telo install /app/<entry>` */
    const char *requested_by;     /* "ns/name" of the session creating the Job, or NULL */
    const char *bundle_configmap; /* a ConfigMap in the build namespace holding bundle.tgz (see
                                   * build_desired_context), or NULL */
    const char *bundle_url;       /* or a URL the init container downloads ... */
    const char *bundle_sha256;    /* ... and checks against this digest (64 hex) */
};

/* The longest spec.entry, and the characters it may hold (ASCII only). The entry reaches the
 * build's `telo install` and the session's `telo run` as one argument, never through a shell,
 * and this set keeps it a plain path everywhere it is shown or used. */
#define BUILD_ENTRY_MAX   1024
#define BUILD_ENTRY_CHARS "letters, digits, '.', '_', '-' and '/'"

/* Checks spec.entry: 1..BUILD_ENTRY_MAX characters of BUILD_ENTRY_CHARS, relative (no leading
 * '/'), without empty, '.' or '..' segments (so no trailing '/'). Returns 0, or -TELO_EINVAL with
 * err naming the field and the rule ("spec.entry: may contain only letters, digits, '.', '_', '-'
 * and '/' (found ';' at character 11) ..."); a rejected entry is not echoed unless it is made of
 * allowed characters. */
int build_entry_check(const char *entry, struct telo_err *err);

/* Checks a base image reference for FROM: 1..512 characters of letters, digits, '.', '_', '-',
 * ':', '@' and '/' (no whitespace, no '$', nothing a Dockerfile would read as more than one
 * word). Returns 0, or -TELO_EINVAL with err naming spec.image. */
int build_base_image_check(const char *image, struct telo_err *err);

/* One record of a derived tag: a name and its value (at most BUILD_TAG_VALUE_MAX bytes count). */
struct build_tag_record {
    const char *name;
    const char *value;
};
#define BUILD_TAG_VALUE_MAX   256
#define BUILD_TAG_RECORDS_MAX 4

/* A tag derived from records in the reference runner's form: the first BUILD_TAG_LEN hex
 * characters of sha256 over "<name>\0<value>\0" for each record in order (at most
 * BUILD_TAG_RECORDS_MAX; names under 32 bytes). out holds BUILD_TAG_LEN + 1 bytes. */
void build_tag_of_records(const struct build_tag_record *recs, size_t n, char *out);

/* The tag of a build that is not shared across namespaces: the first BUILD_TAG_LEN hex
 * characters of sha256 over "namespace\0<ns>\0tag\0<tag>\0", where tag is the reference
 * runner's tag (build_tag_compute). So no namespace ever runs an image another namespace's
 * session built (build.shareAcrossNamespaces false). out holds BUILD_TAG_LEN + 1 bytes. */
void build_tag_for_namespace(const char *tag, const char *ns, char *out);

/* "telo-build-<tag>" into out (at least 64 bytes): the Job's and the context ConfigMap's name. */
void build_job_name(const char *tag, char *out, size_t len);

/* "<repository>:<tag>" into out. Returns 0, or -1 when it does not fit in len. */
int build_image_ref(const struct build_config *cfg, const char *tag, char *out, size_t len);

/* The Dockerfile: FROM base, WORKDIR /app, COPY . /app, ARG and ENV TELO_REGISTRY_URL,
 * ENV TELO_CACHE_DIR=/telo-cache, RUN ["telo","install","/app/<entry>"]: the exec form, so no
 * shell ever reads the entry (which is JSON-escaped in the array). base_digest (NULL or "": none)
 * is the registry digest of base_image that the image's tag was keyed with: FROM names it
 * ("<base_image>@<digest>"), so a tag moved between the lookup and the build's pull cannot put
 * other content under a tag keyed with this digest; a base_image already pinned by digest is
 * left as it is. The caller free()s it; NULL with err set when base_image fails
 * build_base_image_check, base_digest is not "<algorithm>:<hex>" of at most 160 characters,
 * entry fails build_entry_check, or memory runs out. */
char *build_dockerfile(const char *base_image, const char *base_digest, const char *entry,
                       struct telo_err *err);

/* The build Job "telo-build-<tag>" in cfg->namespace, ready for a create (a 409 means another
 * session's build of the same tag runs: share it). backoffLimit 0, activeDeadlineSeconds,
 * ttlSecondsAfterFinished; an init container fetches the context (the ConfigMap's or the URL's
 * bundle, checked against its sha256) into /workspace and writes the Dockerfile to /build; the
 * builder gets --context=dir:///workspace --dockerfile=/build/Dockerfile --destination=<ref>
 * --build-arg=TELO_REGISTRY_URL=<url> --log-format=text (plus --insecure --skip-tls-verify
 * --insecure-pull --skip-tls-verify-pull when insecure) and writes the pushed digest to its
 * termination message; the push Secret is mounted at /kaniko/.docker with mode 0400, so RUN
 * steps running as the base image's (non-root) USER cannot read it.
 * No service-account token, RuntimeDefault seccomp, no privilege escalation; the init container
 * runs as uid 1000 with a read-only root; the builder runs as root, which kaniko needs to unpack
 * the base image's files as their owners. Inputs reach the shell only through environment
 * variables. The caller json_object_put()s the result; NULL with err set when out of memory or
 * when build_dockerfile refuses the inputs. */
struct json_object *build_desired_job(const struct build_config *cfg,
                                      const struct build_job_input *in, struct telo_err *err);

/* The context ConfigMap "telo-build-<tag>" in cfg->namespace holding the bundle (tgz, len bytes)
 * under binaryData bundle.tgz, owned by the Job (job_uid) so the Job's TTL removes it too. The
 * API server refuses ConfigMaps over 1 MiB: bigger bundles are delivered by URL. The caller
 * json_object_put()s the result; NULL when out of memory. */
struct json_object *build_desired_context(const struct build_config *cfg, const char *tag,
                                          const char *job_uid, const void *tgz, size_t len);

/* Where a build stands. */
enum build_state {
    BUILD_RUNNING,   /* created, not finished */
    BUILD_SUCCEEDED, /* the image is pushed */
    BUILD_FAILED,    /* the builder failed: add the pod's log tail to the message */
    BUILD_VANISHED,  /* the Job is gone (or being deleted) before it finished */
    BUILD_TIMED_OUT, /* the Job's deadline passed, or it ran past the operator's grace */
};

struct build_status {
    enum build_state state;
    const char *progress; /* one of the BUILD_PROGRESS_ texts (static) */
    int done;             /* the progress is final */
    char message[512];    /* for FAILED, VANISHED, TIMED_OUT: one actionable sentence */
    long requeue_after_s; /* RUNNING: seconds until the operator-side deadline, else 0 */
    double created;       /* the Job's creationTimestamp (Unix time), 0 when unknown */
    double deadline;      /* RUNNING: the operator-side deadline (Unix time), 0 when unknown */
};

/* Reads job (the Job object as observed, or NULL when it was not found) into out. job_name is
 * "ns/name" for messages; self is the reading session's "ns/name", compared with the
 * requested-by annotation to choose "Building image…" over "Waiting for in-progress build…";
 * now is Unix time. A Job that has not finished timeout_seconds + 30 s after its creation counts
 * as timed out (the reference's wait grace), so a stuck Job never holds a session forever.
 * Cannot fail. */
void build_status_read(const struct json_object *job, const char *job_name, const char *self,
                       long timeout_seconds, double now, struct build_status *out);

/* The last `lines` lines of a build log (trailing blank lines dropped) into out, at most len - 1
 * bytes (the tail is kept when it must be cut). Returns the length written. The text is made
 * safe to show on a terminal (it lands in status.message, and a RUN step's output is the
 * tenant's) by util_text_clean: a builder's colours go, other controls become '?', the tail is
 * UTF-8. */
size_t build_log_tail(const char *log, size_t log_len, int lines, char *out, size_t len);

#endif

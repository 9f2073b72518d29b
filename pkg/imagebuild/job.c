/* The image build Job (kaniko), its context ConfigMap and Dockerfile as pure builders, and the
 * Job's status read back into a build state with the reference runner's progress texts. */
#include "imagebuild/job.h"

#include "kube/objects.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/text.h"
#include "util/timefmt.h"

#include <openssl/sha.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_NAMESPACE  "telo-builds"
#define DEFAULT_BUILDER    "gcr.io/kaniko-project/executor:latest"
#define DEFAULT_INIT       "busybox:stable"
#define DEFAULT_TELO_REG   "https://registry.telo.run"
#define DEFAULT_MANAGED_BY "telo-operator"
#define DEFAULT_TIMEOUT_S  600L
#define DEFAULT_TTL_S      300L
#define WAIT_GRACE_S       30L /* the reference waits this long past the Job's deadline */
#define CONTEXT_DIR        "/workspace"
#define DOCKERFILE_DIR     "/build"
#define CACHE_DIR          "/telo-cache"
/* What each emptyDir of the build pod may hold (its sizeLimit; the kubelet evicts the pod past
 * it). Tenant bytes reach all three, and a gzip bundle can expand ~1000x, so none is unbounded:
 * - the context holds the extracted bundle, which the operator has read under bundle.h's default
 *   caps before any Job runs (32 MiB of files, 10000 entries): the files plus a 4 KiB block of
 *   rounding for each entry (39 MiB) fit in 3x the total cap;
 * - /tmp holds the download (BUILD_DOWNLOAD_MAX + 1 bytes at most, head(1) stops it) and the
 *   tools' error output;
 * - the Dockerfile's directory holds the Dockerfile (64 KiB at most, build_dockerfile). */
#define CONTEXT_SIZE_LIMIT_MIB    96
#define TMP_SIZE_LIMIT_MIB        24
#define DOCKERFILE_SIZE_LIMIT_MIB 1
#define MIB_QUANTITY(n)           MIB_QUANTITY_(n)
#define MIB_QUANTITY_(n)          #n "Mi"
_Static_assert(((size_t)CONTEXT_SIZE_LIMIT_MIB << 20) >= 3 * ((size_t)32 << 20),
               "the context holds 32 MiB of files and their blocks' rounding");
_Static_assert(((size_t)TMP_SIZE_LIMIT_MIB << 20) >= BUILD_DOWNLOAD_MAX + ((size_t)1 << 20),
               "/tmp holds the largest download and the tools' error output");
_Static_assert(((size_t)DOCKERFILE_SIZE_LIMIT_MIB << 20) >= ((size_t)64 << 10),
               "the Dockerfile's directory holds the largest Dockerfile");

static const char *or_default(const char *v, const char *def)
{
    return v != NULL && v[0] != '\0' ? v : def;
}

static long or_default_long(long v, long def)
{
    return v > 0 ? v : def;
}

static struct json_object *labels(const struct build_config *cfg, const char *tag)
{
    struct json_object *l = json_object_new_object();
    kube_obj_put_str(l, "app.kubernetes.io/managed-by",
                     or_default(cfg->managed_by, DEFAULT_MANAGED_BY));
    kube_obj_put_str(l, BUILD_LABEL_BUILD, "true");
    kube_obj_put_str(l, BUILD_LABEL_TAG, tag);
    return l;
}

/* ---- names and texts ---- */

void build_job_name(const char *tag, char *out, size_t len)
{
    snprintf(out, len, "telo-build-%s", tag);
}

int build_image_ref(const struct build_config *cfg, const char *tag, char *out, size_t len)
{
    const char *repo = cfg->repository != NULL ? cfg->repository : "";
    size_t rlen = strlen(repo);
    while (rlen > 0 && repo[rlen - 1] == '/')
        rlen--;
    int n = snprintf(out, len, "%.*s:%s", (int)rlen, repo, tag);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* ---- what reaches the build ---- */

#define IMAGE_MAX 512

static int entry_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '/';
}

/* The first offending character of s for messages: printable ASCII as itself in quotes, anything
 * else as its byte value, so the message never carries a control character. */
static void describe_char(unsigned char c, char *out, size_t len)
{
    if (c == '\'')
        snprintf(out, len, "\"'\"");
    else if (c > 0x20 && c < 0x7f)
        snprintf(out, len, "'%c'", c);
    else if (c == ' ')
        snprintf(out, len, "a space");
    else
        snprintf(out, len, "byte 0x%02x", c);
}

int build_entry_check(const char *entry, struct telo_err *err)
{
    if (entry == NULL || entry[0] == '\0')
        return telo_err_set(err, TELO_EINVAL,
                            "spec.entry: \"\" must be a relative path inside the bundle without "
                            "empty, '.' or '..' segments");
    size_t n = strlen(entry);
    if (n > BUILD_ENTRY_MAX)
        return telo_err_set(err, TELO_EINVAL,
                            "spec.entry: %zu characters is longer than %d: give the path of the "
                            "Telo.Application manifest inside the bundle, like app/telo.yaml",
                            n, BUILD_ENTRY_MAX);
    for (size_t i = 0; i < n; i++) {
        if (!entry_char((unsigned char)entry[i])) {
            char what[16];
            describe_char((unsigned char)entry[i], what, sizeof(what));
            return telo_err_set(err, TELO_EINVAL,
                                "spec.entry: may contain only " BUILD_ENTRY_CHARS
                                " (found %s at character %zu): give the path of the "
                                "Telo.Application manifest inside the bundle, like app/telo.yaml",
                                what, i + 1);
        }
    }
    int ok = entry[0] != '/' && entry[n - 1] != '/';
    for (const char *p = entry; ok && *p != '\0';) {
        size_t len = strcspn(p, "/");
        ok = !(len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'));
        p += len;
        if (*p == '/')
            p++;
    }
    if (!ok)
        return telo_err_set(err, TELO_EINVAL,
                            "spec.entry: \"%s\" must be a relative path inside the bundle without "
                            "empty, '.' or '..' segments",
                            entry);
    return 0;
}

int build_base_image_check(const char *image, struct telo_err *err)
{
    size_t n = image != NULL ? strlen(image) : 0;
    if (n == 0 || n > IMAGE_MAX)
        return telo_err_set(err, TELO_EINVAL,
                            "spec.image: want an image reference of 1 to %d characters", IMAGE_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)image[i];
        if (!entry_char(c) && c != ':' && c != '@') {
            char what[16];
            describe_char(c, what, sizeof(what));
            return telo_err_set(err, TELO_EINVAL,
                                "spec.image: an image reference may contain only letters, digits, "
                                "'.', '_', '-', ':', '@' and '/' (found %s at character %zu)",
                                what, i + 1);
        }
    }
    return 0;
}

void build_tag_of_records(const struct build_tag_record *recs, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char rec[BUILD_TAG_RECORDS_MAX * (32 + BUILD_TAG_VALUE_MAX + 2)];
    size_t used = 0;
    for (size_t r = 0; r < n && r < BUILD_TAG_RECORDS_MAX; r++) {
        size_t nl = strnlen(recs[r].name, 31), vl = strnlen(recs[r].value, BUILD_TAG_VALUE_MAX);
        memcpy(rec + used, recs[r].name, nl);
        used += nl;
        rec[used++] = '\0';
        memcpy(rec + used, recs[r].value, vl);
        used += vl;
        rec[used++] = '\0';
    }
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(rec, used, digest);
    for (size_t i = 0; i < BUILD_TAG_LEN / 2; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[BUILD_TAG_LEN] = '\0';
}

void build_tag_for_namespace(const char *tag, const char *ns, char *out)
{
    const struct build_tag_record recs[] = {{"namespace", ns}, {"tag", tag}};
    build_tag_of_records(recs, 2, out);
}

/* s as the body of a JSON string: quote, backslash and control characters escaped. */
static int json_escape(struct buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        int rc = c == '"' || c == '\\'   ? buf_printf(b, "\\%c", c)
                 : c < 0x20 || c == 0x7f ? buf_printf(b, "\\u%04x", c)
                                         : buf_append(b, s, 1);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* A digest as FROM may carry it, OCI's grammar: "<algorithm>:<encoded>" (algorithm: lowercase
 * letters, digits and "+._-"; encoded: letters, digits, '=', '_' and '-'), one word of at most
 * DIGEST_MAX characters. The registry's answer was checked when it came; this is FROM's guard. */
#define DIGEST_MAX 160
static int digest_check(const char *digest, struct telo_err *err)
{
    size_t n = strlen(digest), colon = strcspn(digest, ":");
    int ok = n <= DIGEST_MAX && colon > 0 && colon + 1 < n;
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char c = (unsigned char)digest[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        ok = i == colon  ? 1
             : i < colon ? alnum || strchr("+._-", c) != NULL
                         : alnum || (c >= 'A' && c <= 'Z') || strchr("=_-", c) != NULL;
    }
    if (!ok)
        return telo_err_set(err, TELO_EINVAL,
                            "the base image's digest is not <algorithm>:<encoded> (OCI) of at "
                            "most %d characters",
                            DIGEST_MAX);
    return 0;
}

char *build_dockerfile(const char *base_image, const char *base_digest, const char *entry,
                       struct telo_err *err)
{
    /* Each is checked again here, whatever the callers checked: FROM takes one word, and the
     * entry is a plain path. */
    if (build_base_image_check(base_image, err) < 0 || build_entry_check(entry, err) < 0)
        return NULL;
    int pin = base_digest != NULL && base_digest[0] != '\0' && strchr(base_image, '@') == NULL;
    if (pin && digest_check(base_digest, err) < 0)
        return NULL;
    /* The body COPYed here is whichever session built the tag first; sessions get their own
     * body at /app at run time, and TELO_CACHE_DIR keeps the baked dependencies out of /app so
     * that mount does not hide them. RUN takes the exec form: the builder runs telo with these
     * three arguments, and no shell reads them. */
    struct buf b;
    buf_init(&b, 64 << 10);
    if (buf_printf(&b,
                   "FROM %s%s%s\n"
                   "WORKDIR /app\n"
                   "COPY . /app\n"
                   "ARG TELO_REGISTRY_URL\n"
                   "ENV TELO_REGISTRY_URL=$TELO_REGISTRY_URL\n"
                   "ENV TELO_CACHE_DIR=" CACHE_DIR "\n"
                   "RUN [\"telo\",\"install\",\"/app/",
                   base_image, pin ? "@" : "", pin ? base_digest : "") != 0 ||
        json_escape(&b, entry) != 0 || buf_printf(&b, "\"]\n") != 0) {
        buf_release(&b);
        telo_err_set(err, TELO_ENOMEM, "the build's Dockerfile: out of memory");
        return NULL;
    }
    return buf_steal(&b);
}

/* ---- the Job ---- */

/* Fetches the context into /workspace and writes the Dockerfile next to it. Inputs only through
 * the environment; each failure writes one line to the termination log and exits with its own
 * code, as the session pod's bundle delivery does. */
static const char context_script[] =
    "set -e\n"
    "src=/bundle/" BUILD_CONTEXT_KEY "\n"
    "if [ -n \"$BUNDLE_URL\" ]; then\n"
    "  src=/tmp/bundle.tgz\n" BUILD_DOWNLOAD_SCRIPT "  got=$(sha256sum \"$src\" | cut -d' ' -f1)\n"
    "  if [ \"$got\" != \"$BUNDLE_SHA256\" ]; then\n"
    "    echo \"bundle sha256 mismatch for $BUNDLE_URL: expected $BUNDLE_SHA256, got $got\" | "
    "tee /dev/termination-log >&2; exit 67\n"
    "  fi\n"
    "fi\n"
    "if ! tar xzf \"$src\" -C " CONTEXT_DIR " 2>/tmp/tar.err; then\n"
    "  echo \"the bundle is not a gzip tar: $(head -c 300 /tmp/tar.err)\" | "
    "tee /dev/termination-log >&2; exit 65\n"
    "fi\n"
    "printf '%s' \"$DOCKERFILE\" >" DOCKERFILE_DIR "/Dockerfile\n";

static struct json_object *init_container(const struct build_config *cfg,
                                          const struct build_job_input *in, const char *dockerfile)
{
    struct json_object *c = kube_obj_container(BUILD_INIT_CONTAINER,
                                               or_default(cfg->init_image, DEFAULT_INIT),
                                               "IfNotPresent"),
                       *cmd = json_object_new_array(), *env = json_object_new_array(),
                       *mounts = json_object_new_array();
    kube_obj_push_str(cmd, "sh");
    kube_obj_push_str(cmd, "-c");
    kube_obj_push_str(cmd, context_script);
    kube_obj_put(c, "command", cmd);
    kube_obj_push(env, kube_obj_env("DOCKERFILE", dockerfile));
    if (in->bundle_url != NULL) {
        kube_obj_push(env, kube_obj_env("BUNDLE_URL", in->bundle_url));
        kube_obj_push(env, kube_obj_env("BUNDLE_SHA256", in->bundle_sha256));
        char n[24];
        snprintf(n, sizeof(n), "%zu", BUILD_DOWNLOAD_MAX);
        kube_obj_push(env, kube_obj_env("BUNDLE_MAX", n));
        snprintf(n, sizeof(n), "%ld", BUILD_DOWNLOAD_TIMEOUT_S);
        kube_obj_push(env, kube_obj_env("BUNDLE_TIMEOUT", n));
    } else {
        kube_obj_push(mounts, kube_obj_mount("bundle", "/bundle", 1));
    }
    kube_obj_put(c, "env", env);
    kube_obj_push(mounts, kube_obj_mount("workspace", CONTEXT_DIR, 0));
    kube_obj_push(mounts, kube_obj_mount("build", DOCKERFILE_DIR, 0));
    kube_obj_push(mounts, kube_obj_mount("tmp", "/tmp", 0));
    kube_obj_put(c, "volumeMounts", mounts);
    kube_obj_put(c, "securityContext", kube_obj_restricted_container_security(1, 1000));
    kube_obj_put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    return c;
}

static struct json_object *builder_container(const struct build_config *cfg,
                                             const struct build_job_input *in)
{
    struct json_object *c = kube_obj_container(BUILD_CONTAINER,
                                               or_default(cfg->builder_image, DEFAULT_BUILDER),
                                               "IfNotPresent"),
                       *args = json_object_new_array(), *mounts = json_object_new_array(),
                       *sc = json_object_new_object(), *caps = json_object_new_object(),
                       *drop = json_object_new_array();
    char ref[1024], line[1200];
    if (build_image_ref(cfg, in->tag, ref, sizeof(ref)) != 0)
        ref[0] = '\0';
    kube_obj_push_str(args, "--context=dir://" CONTEXT_DIR);
    kube_obj_push_str(args, "--dockerfile=" DOCKERFILE_DIR "/Dockerfile");
    snprintf(line, sizeof(line), "--destination=%s", ref);
    kube_obj_push_str(args, line);
    snprintf(line, sizeof(line), "--build-arg=TELO_REGISTRY_URL=%s",
             or_default(cfg->telo_registry_url, DEFAULT_TELO_REG));
    kube_obj_push_str(args, line);
    /* The pushed digest becomes the container's termination message; on a failure the message
     * falls back to the log's tail. */
    kube_obj_push_str(args, "--digest-file=/dev/termination-log");
    /* kaniko logs in colour by default; its log tail becomes a failed session's message. */
    kube_obj_push_str(args, "--log-format=text");
    if (cfg->insecure_registry) {
        kube_obj_push_str(args, "--insecure");
        kube_obj_push_str(args, "--skip-tls-verify");
        kube_obj_push_str(args, "--insecure-pull");
        kube_obj_push_str(args, "--skip-tls-verify-pull");
    }
    kube_obj_put(c, "args", args);
    kube_obj_push(mounts, kube_obj_mount("workspace", CONTEXT_DIR, 1));
    kube_obj_push(mounts, kube_obj_mount("build", DOCKERFILE_DIR, 1));
    if (cfg->push_secret != NULL)
        kube_obj_push(mounts, kube_obj_mount("docker-config", "/kaniko/.docker", 1));
    kube_obj_put(c, "volumeMounts", mounts);
    if (cfg->cpu != NULL || cfg->memory != NULL)
        kube_obj_put(c, "resources", kube_obj_resources(cfg->cpu, cfg->memory, NULL));
    /* kaniko runs as root and keeps the runtime's default capabilities (it chowns the base
     * image's files and RUN steps may switch users); what it never needs goes. */
    kube_obj_put_bool(sc, "allowPrivilegeEscalation", 0);
    kube_obj_put_int(sc, "runAsUser", 0);
    kube_obj_push_str(drop, "NET_RAW");
    kube_obj_put(caps, "drop", drop);
    kube_obj_put(sc, "capabilities", caps);
    kube_obj_put(c, "securityContext", sc);
    kube_obj_put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    return c;
}

struct json_object *build_desired_job(const struct build_config *cfg,
                                      const struct build_job_input *in, struct telo_err *err)
{
    char name[128];
    build_job_name(in->tag, name, sizeof(name));
    char *dockerfile = build_dockerfile(in->base_image, in->base_digest, in->entry, err);
    if (dockerfile == NULL)
        return NULL;
    struct json_object *meta = json_object_new_object(), *spec = json_object_new_object(),
                       *tmpl = json_object_new_object(), *tmeta = json_object_new_object(),
                       *pod = json_object_new_object(), *inits = json_object_new_array(),
                       *containers = json_object_new_array(), *volumes = json_object_new_array();
    kube_obj_put_str(meta, "name", name);
    kube_obj_put_str(meta, "namespace", or_default(cfg->namespace, DEFAULT_NAMESPACE));
    kube_obj_put(meta, "labels", labels(cfg, in->tag));
    if (in->requested_by != NULL) {
        struct json_object *ann = json_object_new_object();
        kube_obj_put_str(ann, BUILD_ANNOTATION_BY, in->requested_by);
        kube_obj_put(meta, "annotations", ann);
    }
    struct json_object *job = kube_obj_new("batch/v1", "Job", meta);

    kube_obj_put_int(spec, "backoffLimit", 0);
    kube_obj_put_int(spec, "activeDeadlineSeconds",
                     or_default_long(cfg->timeout_seconds, DEFAULT_TIMEOUT_S));
    kube_obj_put_int(spec, "ttlSecondsAfterFinished",
                     or_default_long(cfg->ttl_seconds_after_finished, DEFAULT_TTL_S));
    kube_obj_put(tmeta, "labels", labels(cfg, in->tag));
    kube_obj_put(tmpl, "metadata", tmeta);

    kube_obj_put_str(pod, "restartPolicy", "Never");
    kube_obj_put_bool(pod, "automountServiceAccountToken", 0);
    kube_obj_put_bool(pod, "enableServiceLinks", 0);
    kube_obj_put(pod, "securityContext", kube_obj_pod_security(-1));
    if (cfg->node_selector != NULL)
        kube_obj_put(pod, "nodeSelector", json_object_get(cfg->node_selector));
    if (cfg->tolerations != NULL)
        kube_obj_put(pod, "tolerations", json_object_get(cfg->tolerations));
    kube_obj_push(inits, init_container(cfg, in, dockerfile));
    free(dockerfile);
    kube_obj_put(pod, "initContainers", inits);
    kube_obj_push(containers, builder_container(cfg, in));
    kube_obj_put(pod, "containers", containers);
    kube_obj_push(volumes,
                  kube_obj_empty_dir_limited("workspace", MIB_QUANTITY(CONTEXT_SIZE_LIMIT_MIB)));
    kube_obj_push(volumes,
                  kube_obj_empty_dir_limited("build", MIB_QUANTITY(DOCKERFILE_SIZE_LIMIT_MIB)));
    kube_obj_push(volumes, kube_obj_empty_dir_limited("tmp", MIB_QUANTITY(TMP_SIZE_LIMIT_MIB)));
    if (in->bundle_url == NULL)
        kube_obj_push(volumes, kube_obj_configmap_volume("bundle", in->bundle_configmap,
                                                         BUILD_CONTEXT_KEY, BUILD_CONTEXT_KEY));
    if (cfg->push_secret != NULL) {
        /* 0400, root's: kaniko (root) reads it; RUN steps run as the base image's USER and
         * cannot, so an install script cannot copy the push credentials into the image. */
        struct json_object *creds = kube_obj_secret_volume("docker-config", cfg->push_secret,
                                                           ".dockerconfigjson", "config.json"),
                           *src = NULL;
        if (json_object_object_get_ex(creds, "secret", &src))
            kube_obj_put_int(src, "defaultMode", 0400);
        kube_obj_push(volumes, creds);
    }
    kube_obj_put(pod, "volumes", volumes);
    kube_obj_put(tmpl, "spec", pod);
    kube_obj_put(spec, "template", tmpl);
    kube_obj_put(job, "spec", spec);

    /* Any allocation that failed left a hole; refuse the object rather than send half of it. */
    struct json_object *c0 = NULL, *sp = NULL, *tp = NULL, *ps = NULL;
    if (job == NULL || !json_object_object_get_ex(job, "spec", &sp) ||
        !json_object_object_get_ex(sp, "template", &tp) ||
        !json_object_object_get_ex(tp, "spec", &ps) ||
        !json_object_object_get_ex(ps, "containers", &c0) || json_object_array_length(c0) != 1 ||
        !json_object_object_get_ex(ps, "volumes", NULL) ||
        !json_object_object_get_ex(ps, "initContainers", &tp) ||
        json_object_array_length(tp) != 1) {
        json_object_put(job);
        telo_err_set(err, TELO_ENOMEM, "the build Job %s: out of memory", name);
        return NULL;
    }
    return job;
}

struct json_object *build_desired_context(const struct build_config *cfg, const char *tag,
                                          const char *job_uid, const void *tgz, size_t len)
{
    char name[128];
    build_job_name(tag, name, sizeof(name));
    if (len > (size_t)INT32_MAX / 2)
        return NULL;
    size_t b64_len = 0;
    char *b64 = util_base64_encode(tgz, len, &b64_len);
    if (b64 == NULL)
        return NULL;
    struct json_object *meta = json_object_new_object(), *owners = json_object_new_array(),
                       *bin = json_object_new_object();
    kube_obj_put_str(meta, "name", name);
    kube_obj_put_str(meta, "namespace", or_default(cfg->namespace, DEFAULT_NAMESPACE));
    kube_obj_put(meta, "labels", labels(cfg, tag));
    /* Owned by the Job, not controlled: the Job's TTL (or its deletion) garbage-collects it. */
    kube_obj_push(owners, kube_obj_owner_ref("batch/v1", "Job", name, job_uid, 0));
    kube_obj_put(meta, "ownerReferences", owners);
    struct json_object *cm = kube_obj_new("v1", "ConfigMap", meta);
    kube_obj_put(bin, BUILD_CONTEXT_KEY, json_object_new_string_len(b64, (int)b64_len));
    free(b64);
    kube_obj_put(cm, "binaryData", bin);
    struct json_object *check = NULL;
    if (cm == NULL || !json_object_object_get_ex(cm, "binaryData", &check) ||
        !json_object_object_get_ex(check, BUILD_CONTEXT_KEY, NULL) ||
        !json_object_object_get_ex(cm, "metadata", NULL)) {
        json_object_put(cm);
        return NULL;
    }
    return cm;
}

/* ---- reading the Job ---- */

static long long get_int(const struct json_object *o, const char *k)
{
    int64_t v = 0;
    return jget_int(o, k, &v) == 0 ? (long long)v : 0;
}

/* The condition of type whose status is "True", or NULL. */
static struct json_object *true_condition(const struct json_object *status, const char *type)
{
    struct json_object *conds = jget_array(status, "conditions");
    if (conds == NULL)
        return NULL;
    for (size_t i = 0; i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *t = jget_string(c, "type"), *s = jget_string(c, "status");
        if (t != NULL && s != NULL && strcmp(t, type) == 0 && strcmp(s, "True") == 0)
            return c;
    }
    return NULL;
}

void build_status_read(const struct json_object *job, const char *job_name, const char *self,
                       long timeout_seconds, double now, struct build_status *out)
{
    memset(out, 0, sizeof(*out));
    timeout_seconds = or_default_long(timeout_seconds, DEFAULT_TIMEOUT_S);
    if (job == NULL) {
        out->state = BUILD_VANISHED;
        out->progress = BUILD_PROGRESS_BUILDING;
        out->done = 1;
        snprintf(out->message, sizeof(out->message),
                 "image build job '%s' disappeared before completing", job_name);
        return;
    }
    const struct json_object *meta = jget_object(job, "metadata"),
                             *status = jget_object(job, "status");
    const char *by = jget_string(jget_object(meta, "annotations"), BUILD_ANNOTATION_BY);
    int mine = self != NULL && by != NULL && strcmp(self, by) == 0;
    out->progress = mine ? BUILD_PROGRESS_BUILDING : BUILD_PROGRESS_WAITING;

    /* Conditions first (Complete / Failed with its reason); the counters, as the reference
     * reads them, for a Job controller that has not written a condition yet. */
    struct json_object *failed = true_condition(status, "Failed");
    if (failed == NULL)
        failed = true_condition(status, "FailureTarget");
    if (true_condition(status, "Complete") != NULL || get_int(status, "succeeded") >= 1) {
        out->state = BUILD_SUCCEEDED;
        out->progress = BUILD_PROGRESS_BUILT;
        out->done = 1;
        return;
    }
    const char *reason = jget_string(failed, "reason");
    if (reason != NULL && strcmp(reason, "DeadlineExceeded") == 0) {
        out->state = BUILD_TIMED_OUT;
        out->done = 1;
        snprintf(out->message, sizeof(out->message),
                 "image build did not finish within %lds (job '%s')", timeout_seconds, job_name);
        return;
    }
    if (failed != NULL || get_int(status, "failed") >= 1) {
        out->state = BUILD_FAILED;
        out->done = 1;
        snprintf(out->message, sizeof(out->message), "image build failed (job '%s')", job_name);
        return;
    }
    if (jget(meta, "deletionTimestamp") != NULL) {
        out->state = BUILD_VANISHED;
        out->done = 1;
        snprintf(out->message, sizeof(out->message),
                 "image build job '%s' was deleted before completing", job_name);
        return;
    }
    double created = timefmt_parse(jget_string(meta, "creationTimestamp"));
    double deadline = created + (double)timeout_seconds + WAIT_GRACE_S;
    if (created > 0 && now >= deadline) {
        out->state = BUILD_TIMED_OUT;
        out->done = 1;
        snprintf(out->message, sizeof(out->message),
                 "image build did not finish within %lds (job '%s')", timeout_seconds, job_name);
        return;
    }
    out->state = BUILD_RUNNING;
    out->requeue_after_s = created > 0 ? (long)(deadline - now) + 1 : timeout_seconds;
    out->created = created > 0 ? created : 0;
    out->deadline = created > 0 ? deadline : 0;
}

size_t build_log_tail(const char *log, size_t log_len, int lines, char *out, size_t len)
{
    if (len == 0)
        return 0;
    out[0] = '\0';
    if (log == NULL || lines <= 0)
        return 0;
    size_t end = log_len;
    while (end > 0 && (log[end - 1] == '\n' || log[end - 1] == '\r' || log[end - 1] == ' ' ||
                       log[end - 1] == '\t'))
        end--;
    size_t start = end;
    int seen = 0;
    while (start > 0) {
        if (log[start - 1] == '\n' && ++seen == lines)
            break;
        start--;
    }
    size_t n = end - start;
    if (n > len - 1) {
        start = end - (len - 1);
        n = len - 1;
        /* Do not start inside a UTF-8 sequence. */
        while (n > 0 && ((unsigned char)log[start] & 0xc0) == 0x80) {
            start++;
            n--;
        }
    }
    return util_text_clean(log + start, n, out);
}

/* The image build Job (kaniko), its context ConfigMap and Dockerfile as pure builders, and the
 * Job's status read back into a build state with the reference runner's progress texts. */
#include "build/job.h"

#include "util/buf.h"
#include "util/timefmt.h"

#include <openssl/evp.h>

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

static const char *or_default(const char *v, const char *def)
{
    return v != NULL && v[0] != '\0' ? v : def;
}

static long or_default_long(long v, long def)
{
    return v > 0 ? v : def;
}

/* ---- small JSON helpers (json-c takes ownership of added values; NULL values are skipped so
 * a failed allocation surfaces once, at the end) ---- */

static struct json_object *obj(void)
{
    return json_object_new_object();
}

static struct json_object *arr(void)
{
    return json_object_new_array();
}

static void put(struct json_object *o, const char *k, struct json_object *v)
{
    if (o != NULL && v != NULL)
        json_object_object_add(o, k, v);
    else
        json_object_put(v);
}

static void put_str(struct json_object *o, const char *k, const char *v)
{
    if (v != NULL)
        put(o, k, json_object_new_string(v));
}

static void put_int(struct json_object *o, const char *k, long long v)
{
    put(o, k, json_object_new_int64(v));
}

static void put_bool(struct json_object *o, const char *k, int v)
{
    put(o, k, json_object_new_boolean(v));
}

static void push(struct json_object *a, struct json_object *v)
{
    if (a != NULL && v != NULL)
        json_object_array_add(a, v);
    else
        json_object_put(v);
}

static void push_str(struct json_object *a, const char *v)
{
    push(a, json_object_new_string(v));
}

static struct json_object *kv(const char *name, const char *value)
{
    struct json_object *o = obj();
    put_str(o, "name", name);
    put_str(o, "value", value);
    return o;
}

static struct json_object *mount(const char *name, const char *path, int read_only)
{
    struct json_object *m = obj();
    put_str(m, "name", name);
    put_str(m, "mountPath", path);
    if (read_only)
        put_bool(m, "readOnly", 1);
    return m;
}

static struct json_object *empty_dir(const char *name)
{
    struct json_object *v = obj();
    put_str(v, "name", name);
    put(v, "emptyDir", obj());
    return v;
}

static struct json_object *labels(const struct build_config *cfg, const char *tag)
{
    struct json_object *l = obj();
    put_str(l, "app.kubernetes.io/managed-by", or_default(cfg->managed_by, DEFAULT_MANAGED_BY));
    put_str(l, BUILD_LABEL_BUILD, "true");
    put_str(l, BUILD_LABEL_TAG, tag);
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

static int has_control(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

char *build_dockerfile(const char *base_image, const char *entry)
{
    /* A newline in either would add Dockerfile instructions of the user's choosing. */
    if (base_image == NULL || entry == NULL || has_control(base_image) || has_control(entry))
        return NULL;
    /* The body COPYed here is whichever session built the tag first; sessions get their own
     * body at /app at run time, and TELO_CACHE_DIR keeps the baked dependencies out of /app so
     * that mount does not hide them. */
    struct buf b;
    buf_init(&b, 64 << 10);
    if (buf_printf(&b,
                   "FROM %s\n"
                   "WORKDIR /app\n"
                   "COPY . /app\n"
                   "ARG TELO_REGISTRY_URL\n"
                   "ENV TELO_REGISTRY_URL=$TELO_REGISTRY_URL\n"
                   "ENV TELO_CACHE_DIR=" CACHE_DIR "\n"
                   "RUN telo install /app/%s\n",
                   base_image, entry) != 0) {
        buf_release(&b);
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
    "  src=/tmp/bundle.tgz\n"
    "  if ! wget -q -T 30 -O \"$src\" \"$BUNDLE_URL\" 2>/tmp/wget.err; then\n"
    "    echo \"cannot download the bundle from $BUNDLE_URL: $(head -c 300 /tmp/wget.err)\" | "
    "tee /dev/termination-log >&2; exit 66\n"
    "  fi\n"
    "  got=$(sha256sum \"$src\" | cut -d' ' -f1)\n"
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
    struct json_object *c = obj(), *cmd = arr(), *env = arr(), *mounts = arr(), *sc = obj(),
                       *caps = obj(), *drop = arr();
    put_str(c, "name", BUILD_INIT_CONTAINER);
    put_str(c, "image", or_default(cfg->init_image, DEFAULT_INIT));
    put_str(c, "imagePullPolicy", "IfNotPresent");
    push_str(cmd, "sh");
    push_str(cmd, "-c");
    push_str(cmd, context_script);
    put(c, "command", cmd);
    push(env, kv("DOCKERFILE", dockerfile));
    if (in->bundle_url != NULL) {
        push(env, kv("BUNDLE_URL", in->bundle_url));
        push(env, kv("BUNDLE_SHA256", in->bundle_sha256));
    } else {
        push(mounts, mount("bundle", "/bundle", 1));
    }
    put(c, "env", env);
    push(mounts, mount("workspace", CONTEXT_DIR, 0));
    push(mounts, mount("build", DOCKERFILE_DIR, 0));
    push(mounts, mount("tmp", "/tmp", 0));
    put(c, "volumeMounts", mounts);
    put_bool(sc, "allowPrivilegeEscalation", 0);
    put_bool(sc, "readOnlyRootFilesystem", 1);
    put_bool(sc, "runAsNonRoot", 1);
    put_int(sc, "runAsUser", 1000);
    put_int(sc, "runAsGroup", 1000);
    push_str(drop, "ALL");
    put(caps, "drop", drop);
    put(sc, "capabilities", caps);
    put(c, "securityContext", sc);
    put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    return c;
}

static struct json_object *builder_container(const struct build_config *cfg,
                                             const struct build_job_input *in)
{
    struct json_object *c = obj(), *args = arr(), *mounts = arr(), *sc = obj(), *caps = obj(),
                       *drop = arr();
    put_str(c, "name", BUILD_CONTAINER);
    put_str(c, "image", or_default(cfg->builder_image, DEFAULT_BUILDER));
    put_str(c, "imagePullPolicy", "IfNotPresent");
    char ref[1024], line[1200];
    if (build_image_ref(cfg, in->tag, ref, sizeof(ref)) != 0)
        ref[0] = '\0';
    push_str(args, "--context=dir://" CONTEXT_DIR);
    push_str(args, "--dockerfile=" DOCKERFILE_DIR "/Dockerfile");
    snprintf(line, sizeof(line), "--destination=%s", ref);
    push_str(args, line);
    snprintf(line, sizeof(line), "--build-arg=TELO_REGISTRY_URL=%s",
             or_default(cfg->telo_registry_url, DEFAULT_TELO_REG));
    push_str(args, line);
    /* The pushed digest becomes the container's termination message; on a failure the message
     * falls back to the log's tail. */
    push_str(args, "--digest-file=/dev/termination-log");
    if (cfg->insecure_registry) {
        push_str(args, "--insecure");
        push_str(args, "--skip-tls-verify");
        push_str(args, "--insecure-pull");
        push_str(args, "--skip-tls-verify-pull");
    }
    put(c, "args", args);
    push(mounts, mount("workspace", CONTEXT_DIR, 1));
    push(mounts, mount("build", DOCKERFILE_DIR, 1));
    if (cfg->push_secret != NULL)
        push(mounts, mount("docker-config", "/kaniko/.docker", 1));
    put(c, "volumeMounts", mounts);
    if (cfg->cpu != NULL || cfg->memory != NULL) {
        struct json_object *r = obj(), *lim = obj(), *req = obj();
        put_str(lim, "cpu", cfg->cpu);
        put_str(lim, "memory", cfg->memory);
        put_str(req, "cpu", cfg->cpu);
        put_str(req, "memory", cfg->memory);
        put(r, "limits", lim);
        put(r, "requests", req);
        put(c, "resources", r);
    }
    /* kaniko runs as root and keeps the runtime's default capabilities (it chowns the base
     * image's files and RUN steps may switch users); what it never needs goes. */
    put_bool(sc, "allowPrivilegeEscalation", 0);
    put_int(sc, "runAsUser", 0);
    push_str(drop, "NET_RAW");
    put(caps, "drop", drop);
    put(sc, "capabilities", caps);
    put(c, "securityContext", sc);
    put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    return c;
}

struct json_object *build_desired_job(const struct build_config *cfg,
                                      const struct build_job_input *in)
{
    char name[128];
    build_job_name(in->tag, name, sizeof(name));
    char *dockerfile = build_dockerfile(in->base_image, in->entry);
    if (dockerfile == NULL)
        return NULL;
    struct json_object *job = obj(), *meta = obj(), *spec = obj(), *tmpl = obj(), *tmeta = obj(),
                       *pod = obj(), *psc = obj(), *seccomp = obj(), *inits = arr(),
                       *containers = arr(), *volumes = arr();
    put_str(job, "apiVersion", "batch/v1");
    put_str(job, "kind", "Job");
    put_str(meta, "name", name);
    put_str(meta, "namespace", or_default(cfg->namespace, DEFAULT_NAMESPACE));
    put(meta, "labels", labels(cfg, in->tag));
    if (in->requested_by != NULL) {
        struct json_object *ann = obj();
        put_str(ann, BUILD_ANNOTATION_BY, in->requested_by);
        put(meta, "annotations", ann);
    }
    put(job, "metadata", meta);

    put_int(spec, "backoffLimit", 0);
    put_int(spec, "activeDeadlineSeconds",
            or_default_long(cfg->timeout_seconds, DEFAULT_TIMEOUT_S));
    put_int(spec, "ttlSecondsAfterFinished",
            or_default_long(cfg->ttl_seconds_after_finished, DEFAULT_TTL_S));
    put(tmeta, "labels", labels(cfg, in->tag));
    put(tmpl, "metadata", tmeta);

    put_str(pod, "restartPolicy", "Never");
    put_bool(pod, "automountServiceAccountToken", 0);
    put_bool(pod, "enableServiceLinks", 0);
    put_str(seccomp, "type", "RuntimeDefault");
    put(psc, "seccompProfile", seccomp);
    put(pod, "securityContext", psc);
    push(inits, init_container(cfg, in, dockerfile));
    free(dockerfile);
    put(pod, "initContainers", inits);
    push(containers, builder_container(cfg, in));
    put(pod, "containers", containers);
    push(volumes, empty_dir("workspace"));
    push(volumes, empty_dir("build"));
    push(volumes, empty_dir("tmp"));
    if (in->bundle_url == NULL) {
        struct json_object *v = obj(), *cm = obj(), *items = arr(), *item = obj();
        put_str(v, "name", "bundle");
        put_str(cm, "name", in->bundle_configmap);
        put_str(item, "key", BUILD_CONTEXT_KEY);
        put_str(item, "path", BUILD_CONTEXT_KEY);
        push(items, item);
        put(cm, "items", items);
        put(v, "configMap", cm);
        push(volumes, v);
    }
    if (cfg->push_secret != NULL) {
        struct json_object *v = obj(), *sec = obj(), *items = arr(), *item = obj();
        put_str(v, "name", "docker-config");
        put_str(sec, "secretName", cfg->push_secret);
        put_str(item, "key", ".dockerconfigjson");
        put_str(item, "path", "config.json");
        push(items, item);
        put(sec, "items", items);
        put(v, "secret", sec);
        push(volumes, v);
    }
    put(pod, "volumes", volumes);
    put(tmpl, "spec", pod);
    put(spec, "template", tmpl);
    put(job, "spec", spec);

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
    size_t b64_len = 4 * ((len + 2) / 3);
    char *b64 = malloc(b64_len + 1);
    if (b64 == NULL)
        return NULL;
    EVP_EncodeBlock((unsigned char *)b64, tgz, (int)len);
    b64[b64_len] = '\0';
    struct json_object *cm = obj(), *meta = obj(), *owners = arr(), *owner = obj(), *bin = obj();
    put_str(cm, "apiVersion", "v1");
    put_str(cm, "kind", "ConfigMap");
    put_str(meta, "name", name);
    put_str(meta, "namespace", or_default(cfg->namespace, DEFAULT_NAMESPACE));
    put(meta, "labels", labels(cfg, tag));
    /* Owned by the Job, not controlled: the Job's TTL (or its deletion) garbage-collects it. */
    put_str(owner, "apiVersion", "batch/v1");
    put_str(owner, "kind", "Job");
    put_str(owner, "name", name);
    put_str(owner, "uid", job_uid);
    put_bool(owner, "blockOwnerDeletion", 0);
    push(owners, owner);
    put(meta, "ownerReferences", owners);
    put(cm, "metadata", meta);
    put(bin, BUILD_CONTEXT_KEY, json_object_new_string_len(b64, (int)b64_len));
    free(b64);
    put(cm, "binaryData", bin);
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

static struct json_object *get(const struct json_object *o, const char *k)
{
    struct json_object *v = NULL;
    if (o == NULL || !json_object_object_get_ex(o, k, &v))
        return NULL;
    return v;
}

static const char *get_str(const struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k);
    return v != NULL && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static long long get_int(const struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k);
    return v != NULL && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
}

/* The condition of type whose status is "True", or NULL. */
static struct json_object *true_condition(const struct json_object *status, const char *type)
{
    struct json_object *conds = get(status, "conditions");
    if (conds == NULL || !json_object_is_type(conds, json_type_array))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *t = get_str(c, "type"), *s = get_str(c, "status");
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
    const struct json_object *meta = get(job, "metadata"), *status = get(job, "status");
    const char *by = get_str(get(meta, "annotations"), BUILD_ANNOTATION_BY);
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
    const char *reason = get_str(failed, "reason");
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
    if (get_str(meta, "deletionTimestamp") != NULL) {
        out->state = BUILD_VANISHED;
        out->done = 1;
        snprintf(out->message, sizeof(out->message),
                 "image build job '%s' was deleted before completing", job_name);
        return;
    }
    double created = timefmt_parse(get_str(meta, "creationTimestamp"));
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
    memcpy(out, log + start, n);
    out[n] = '\0';
    return n;
}

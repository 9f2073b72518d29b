/* The operator's configuration: a YAML file, overridden by --set flags, validated at start. */
#include "session/config.h"

#include "imagebuild/job.h"
#include "session/meta.h"
#include "session/quantity.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/yamljson.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum kind {
    K_STRING,
    K_QUANTITY,
    K_POSINT,
    K_STRLIST,
    K_STRMAP,
    K_ARRAY,
    K_URL,
    K_BOOL,
    K_CIDRLIST,
    K_COUNT,    /* a whole number from 0 (none) to POSINT_MAX */
    K_LABELMAP, /* labels added to session children (session/meta.h) */
    K_ANNOTMAP, /* annotations added to session children */
};

/* One key: its dotted path, its kind, where it lives in the struct, and its help line. */
struct key {
    const char *path;
    enum kind kind;
    size_t offset;
    const char *help;
};

#define AT(field) offsetof(struct session_config, field)

static const struct key keys[] = {
    {"namespaces", K_STRLIST, AT(namespaces), "namespaces to watch; empty: all"},
    {"images.default", K_STRING, AT(default_image), "base image of sessions without spec.image"},
    {"images.init", K_STRING, AT(init_image), "bundle delivery: timeout, wget, sha256sum, tar"},
    {"limits.cpu", K_QUANTITY, AT(max_cpu), "CPU ceiling; requests above it are clamped"},
    {"limits.memory", K_QUANTITY, AT(max_memory), "memory ceiling"},
    {"limits.ephemeralStorage", K_QUANTITY, AT(max_ephemeral_storage), "ephemeral storage ceiling"},
    {"limits.ttlSeconds", K_POSINT, AT(max_ttl_seconds), "wall-clock ceiling of a session"},
    {"ingress.baseDomain", K_STRING, AT(ingress_base_domain),
     "session hosts are <port>-<name>-<namespace>-<hash>.<baseDomain>; unset: no Ingress"},
    {"ingress.className", K_STRING, AT(ingress_class), "ingressClassName of session Ingresses"},
    {"ingress.tlsSecretName", K_STRING, AT(ingress_tls_secret), "TLS Secret for session hosts"},
    {"runtimeClassName", K_STRING, AT(runtime_class), "runtime class of session pods"},
    {"imagePullSecret", K_STRING, AT(image_pull_secret), "pull Secret in session namespaces"},
    {"managedBy", K_STRING, AT(managed_by), "value of app.kubernetes.io/managed-by on children"},
    {"startDeadlineSeconds", K_POSINT, AT(start_deadline_seconds),
     "a pod not Running this long after creation fails the session"},
    {"nodeSelector", K_STRMAP, AT(node_selector), "nodeSelector of session pods"},
    {"tolerations", K_ARRAY, AT(tolerations), "tolerations of session pods (PodSpec form)"},
    {"registryUrl", K_URL, AT(registry_url), "default TELO_REGISTRY_URL of sessions"},
    {"gatewayUrl", K_URL, AT(gateway_url), "base URL of the terminal gateway, for status.attach"},
    {"workers", K_POSINT, AT(workers), "reconciles in flight at once"},
    {"build.repository", K_STRING, AT(build_repository),
     "image repository of per-app images (host/path); unset: no builds, base images run as is"},
    {"build.namespace", K_STRING, AT(build_namespace), "namespace of the build Jobs"},
    {"build.builderImage", K_STRING, AT(build_builder_image), "kaniko-compatible builder image"},
    {"build.timeoutSeconds", K_POSINT, AT(build_timeout_seconds), "a build's deadline"},
    {"build.ttlSecondsAfterFinished", K_POSINT, AT(build_ttl_seconds),
     "finished build Jobs are deleted after"},
    {"build.insecureRegistry", K_BOOL, AT(build_insecure),
     "plain HTTP or unverified TLS to the registry"},
    {"build.registryApiUrl", K_URL, AT(build_registry_api_url),
     "registry API base for the tag check; unset: https://<host> (http:// when insecure)"},
    {"build.pushSecret", K_STRING, AT(build_push_secret),
     "dockerconfigjson Secret in build.namespace: the push and check credentials"},
    {"build.nodeSelector", K_STRMAP, AT(build_node_selector), "nodeSelector of build pods"},
    {"build.tolerations", K_ARRAY, AT(build_tolerations), "tolerations of build pods"},
    {"build.allowedBaseImages", K_STRLIST, AT(build_allowed_base_images),
     "spec.image values a build may use as FROM besides images.default (repo:* for every tag); "
     "others stall the session (ImageNotAllowed)"},
    {"build.shareAcrossNamespaces", K_BOOL, AT(build_share_across_namespaces),
     "one image per dependency set for all namespaces (the reference runner's tag); false: "
     "the namespace is keyed into the tag"},
    {"build.maxConcurrent", K_COUNT, AT(build_max_concurrent),
     "build Jobs running at once; 0: no limit (other sessions wait in Building for a slot)"},
    {"build.maxConcurrentPerNamespace", K_COUNT, AT(build_max_concurrent_per_namespace),
     "build Jobs running at once for the sessions of one namespace; 0: no limit"},
    {"bundle.maxConcurrentDownloads", K_POSINT, AT(bundle_max_downloads),
     "spec.bundle.url downloads at once; more wait their turn"},
    {"bundle.maxQueuedDownloads", K_POSINT, AT(bundle_max_queued),
     "spec.bundle.url downloads held at once, running and waiting (about 8 KiB each); past it a "
     "namespace holding more gives up its newest waiting one, or the session asks again later"},
    {"bundle.allowedUrlCidrs", K_CIDRLIST, AT(bundle_allowed_cidrs),
     "networks spec.bundle.url may reach although private, loopback or link-local"},
    {"bundle.deniedUrlCidrs", K_CIDRLIST, AT(bundle_denied_cidrs),
     "networks spec.bundle.url may never reach, even when bundle.allowedUrlCidrs holds them "
     "(public-looking cluster addresses, e.g. GKE Services 34.118.224.0/20); the API server's "
     "address is always refused"},
    {"reachability.enabled", K_BOOL, AT(reach_enabled),
     "probe the TCP ports of Running sessions; Ready waits until they accept connections"},
    {"reachability.timeoutSeconds", K_POSINT, AT(reach_timeout_seconds),
     "a port refusing connections this long after the app started makes the session Degraded"},
    {"reachability.intervalSeconds", K_POSINT, AT(reach_interval_seconds),
     "probe a port not yet reachable this often (a reachable one again at the resync)"},
    {"reachability.podCIDRs", K_CIDRLIST, AT(reach_pod_cidrs),
     "pod addresses the operator may probe; others are NotProbed; empty: every pod IP"},
    {"build.baseDigestTtlSeconds", K_POSINT, AT(build_base_digest_ttl_seconds),
     "pullPolicy Always: a base image's registry digest (keyed into the image tag) is looked up "
     "again after this long"},
    {"limits.maxSessions", K_COUNT, AT(max_sessions),
     "sessions holding a slot at once in all watched namespaces; 0: no limit (others wait, "
     "SessionLimit)"},
    {"limits.maxSessionsPerNamespace", K_COUNT, AT(max_sessions_per_namespace),
     "sessions holding a slot at once per namespace; 0: no limit"},
    {"ingress.annotations", K_ANNOTMAP, AT(ingress_annotations),
     "annotations of session Ingresses (cert-manager, external-dns, timeouts); not telo.run/*"},
    {"pod.labels", K_LABELMAP, AT(pod_labels),
     "labels of session pods besides the operator's own (telo.run/*, managed-by)"},
    {"pod.annotations", K_ANNOTMAP, AT(pod_annotations), "annotations of session pods"},
    {"events.namespaceBurst", K_COUNT, AT(events_namespace_burst),
     "new Normal Events (Running, Stopped...) written at once per namespace before the rate "
     "below holds them back (Warnings never are); 0: no namespace budget"},
    {"events.namespaceRefillSeconds", K_POSINT, AT(events_namespace_refill_seconds),
     "seconds per Normal Event the namespace budget regains"},
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

/* The bound of every K_POSINT key. */
#define POSINT_MAX 100000000

/* Where a K_STRLIST key's length lives. */
static size_t *list_count(struct session_config *c, const struct key *k)
{
    return k->offset == AT(namespaces) ? &c->nnamespaces : &c->nbuild_allowed_base_images;
}

/* Keys the pod builders use without a fallback: they cannot be unset. */
static int required(const struct key *k)
{
    return k->offset == AT(default_image) || k->offset == AT(init_image) ||
           k->offset == AT(managed_by) || k->offset == AT(build_namespace) ||
           k->offset == AT(build_builder_image);
}

struct session_config *session_config_new(void)
{
    struct session_config *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->default_image = strdup("telorun/node:latest-slim");
    c->init_image = strdup("busybox:stable");
    c->max_cpu = strdup("500m");
    c->max_memory = strdup("512Mi");
    c->max_ephemeral_storage = strdup("1Gi");
    c->max_ttl_seconds = 21600;
    c->managed_by = strdup("telo-operator");
    c->start_deadline_seconds = 120;
    c->registry_url = strdup("https://registry.telo.run");
    c->workers = 16;
    c->build_namespace = strdup("telo-builds");
    c->build_builder_image = strdup("gcr.io/kaniko-project/executor:latest");
    c->build_timeout_seconds = 600;
    c->build_ttl_seconds = 300;
    c->bundle_max_downloads = 4;
    c->bundle_max_queued = 4096;
    c->reach_enabled = 1;
    c->reach_timeout_seconds = 30;
    c->reach_interval_seconds = 5;
    c->build_base_digest_ttl_seconds = 300;
    c->events_namespace_burst = 25;
    c->events_namespace_refill_seconds = 10;
    if (!c->default_image || !c->init_image || !c->max_cpu || !c->max_memory ||
        !c->max_ephemeral_storage || !c->managed_by || !c->registry_url || !c->build_namespace ||
        !c->build_builder_image) {
        session_config_free(c);
        return NULL;
    }
    return c;
}

static void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void session_config_free(struct session_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < NKEYS; i++) {
        void *field = (char *)c + keys[i].offset;
        switch (keys[i].kind) {
        case K_STRING:
        case K_QUANTITY:
        case K_URL:
            free(*(char **)field);
            break;
        case K_STRMAP:
        case K_ARRAY:
        case K_LABELMAP:
        case K_ANNOTMAP:
            json_object_put(*(struct json_object **)field);
            break;
        case K_STRLIST:
            free_list(*(char ***)field, *list_count(c, &keys[i]));
            break;
        case K_CIDRLIST:
            free(((struct session_cidrs *)field)->items);
            break;
        default:
            break;
        }
    }
    free(c);
}

static const struct key *find_key(const char *path)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (strcmp(keys[i].path, path) == 0)
            return &keys[i];
    }
    return NULL;
}

static int unknown_key(const char *source, const char *path, struct telo_err *err)
{
    struct buf known;
    buf_init(&known, 1024);
    for (size_t i = 0; i < NKEYS; i++)
        (void)buf_printf(&known, "%s%s", i ? ", " : "", keys[i].path);
    int rc = telo_err_set(err, TELO_EINVAL, "%s: unknown key '%s' (known keys: %s)", source, path,
                          known.data ? known.data : "");
    buf_release(&known);
    return rc;
}

static int replace_string(char **field, const char *value, const char *source, const char *path,
                          struct telo_err *err)
{
    char *copy = strdup(value);
    if (!copy)
        return telo_err_set(err, TELO_ENOMEM, "%s: %s: out of memory", source, path);
    free(*field);
    *field = copy;
    return 0;
}

/* An entry of build.allowedBaseImages: an image reference, or "repo:*". */
static int image_pattern_check(const char *pattern)
{
    size_t n = strlen(pattern);
    char repo[600];
    if (n >= 2 && strcmp(pattern + n - 2, ":*") == 0) {
        /* A repository: host[:port]/path, no tag or digest of its own. */
        if (n == 2 || n - 2 >= sizeof(repo))
            return -1;
        memcpy(repo, pattern, n - 2);
        repo[n - 2] = '\0';
        const char *last = strrchr(repo, '/');
        last = last ? last + 1 : repo;
        return !strchr(last, ':') && !strchr(repo, '@') && build_base_image_check(repo, NULL) == 0
                   ? 0
                   : -1;
    }
    return build_base_image_check(pattern, NULL);
}

/* The text of a string value, or NULL. YAML reads "cpu: 1" and "cpu: 0.5" as numbers; as in a
 * PodSpec, they are quantities too (yamljson keeps a number's text). */
static const char *value_text(const struct key *k, struct json_object *v)
{
    return k->kind == K_QUANTITY ? jget_number_or_string_of(v) : jget_string_of(v);
}

/* Whether text is a value of k's kind (a positive quantity, an http(s) URL, a string), and not
 * empty when k is required. Returns 0 or -TELO_EINVAL. */
static int check_text(const struct key *k, const char *text, const char *source,
                      struct telo_err *err)
{
    if (!text)
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a string", source, k->path);
    long long milli;
    if (k->kind == K_QUANTITY && (session_quantity_milli(text, &milli) < 0 || milli <= 0))
        return telo_err_set(err, TELO_EINVAL,
                            "%s: %s: \"%s\" is not a positive quantity (e.g. 500m, 1Gi)", source,
                            k->path, text);
    if (k->kind == K_URL && *text && strncmp(text, "https://", 8) != 0 &&
        strncmp(text, "http://", 7) != 0)
        return telo_err_set(err, TELO_EINVAL, "%s: %s: \"%s\" is not an http(s) URL", source,
                            k->path, text);
    if (!*text && required(k))
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a non-empty string", source, k->path);
    return 0;
}

/* K_STRING, K_QUANTITY, K_URL: a string; an empty one unsets an optional key. */
static int set_text(struct session_config *c, const struct key *k, struct json_object *v,
                    const char *source, struct telo_err *err)
{
    char **field = (char **)((char *)c + k->offset);
    const char *text = value_text(k, v);
    int rc = check_text(k, text, source, err);
    if (rc < 0)
        return rc;
    if (!*text && k->kind != K_QUANTITY) {
        free(*field);
        *field = NULL;
        return 0;
    }
    return replace_string(field, text, source, k->path, err);
}

/* K_POSINT: a whole number from 1 to POSINT_MAX, as a number or as text ("--set workers=8"). */
static int set_posint(struct session_config *c, const struct key *k, struct json_object *v,
                      const char *source, struct telo_err *err)
{
    const char *text = value_text(k, v);
    long long n = -1;
    if (json_object_is_type(v, json_type_int)) {
        n = json_object_get_int64(v);
    } else if (text) {
        char *end;
        errno = 0;
        n = strtoll(text, &end, 10);
        if (errno || end == text || *end)
            n = -1;
    }
    long long low = k->kind == K_COUNT ? 0 : 1;
    if (n < low || n > POSINT_MAX)
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a whole number from %lld to %d", source,
                            k->path, low, POSINT_MAX);
    *(long *)((char *)c + k->offset) = (long)n;
    return 0;
}

/* K_BOOL: a boolean, or the text true or false. */
static int set_bool(struct session_config *c, const struct key *k, struct json_object *v,
                    const char *source, struct telo_err *err)
{
    int *field = (int *)((char *)c + k->offset);
    const char *text = value_text(k, v);
    if (json_object_is_type(v, json_type_boolean)) {
        *field = json_object_get_boolean(v);
        return 0;
    }
    if (text && (strcmp(text, "true") == 0 || strcmp(text, "false") == 0)) {
        *field = text[0] == 't';
        return 0;
    }
    return telo_err_set(err, TELO_EINVAL, "%s: %s: want true or false", source, k->path);
}

/* Checks entry i of a K_STRLIST key: build.allowedBaseImages holds image patterns. */
static int check_list_item(const struct key *k, const char *item, size_t i, const char *source,
                           struct telo_err *err)
{
    if (k->offset != AT(build_allowed_base_images) || image_pattern_check(item) == 0)
        return 0;
    return telo_err_set(err, TELO_EINVAL,
                        "%s: %s[%zu]: want an image reference (letters, digits, "
                        "'.', '_', '-', ':', '@', '/'), or repo:* for every tag "
                        "of repo",
                        source, k->path, i);
}

/* K_STRLIST: a list of non-empty strings. */
static int set_strlist(struct session_config *c, const struct key *k, struct json_object *v,
                       const char *source, struct telo_err *err)
{
    if (!json_object_is_type(v, json_type_array))
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a list of strings", source, k->path);
    size_t n = json_object_array_length(v);
    char **list = calloc(n ? n : 1, sizeof(*list));
    if (!list)
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
    for (size_t i = 0; i < n; i++) {
        const char *item = jget_string_of(json_object_array_get_idx(v, i));
        if (!item || !*item || !(list[i] = strdup(item))) {
            free_list(list, i);
            return telo_err_set(err, TELO_EINVAL, "%s: %s[%zu]: want a non-empty string", source,
                                k->path, i);
        }
        int rc = check_list_item(k, list[i], i, source, err);
        if (rc < 0) {
            free_list(list, i + 1);
            return rc;
        }
    }
    char ***field = (char ***)((char *)c + k->offset);
    size_t *count = list_count(c, k);
    free_list(*field, *count);
    *field = list;
    *count = n;
    return 0;
}

/* Takes a reference to v into a K_STRMAP or K_ARRAY field, dropping the old value. */
static int keep_json(struct session_config *c, const struct key *k, struct json_object *v)
{
    struct json_object **field = (struct json_object **)((char *)c + k->offset);
    json_object_put(*field);
    *field = json_object_get(v);
    return 0;
}

/* K_STRMAP: a map of strings. */
static int set_strmap(struct session_config *c, const struct key *k, struct json_object *v,
                      const char *source, struct telo_err *err)
{
    if (!json_object_is_type(v, json_type_object))
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a map of strings", source, k->path);
    json_object_object_foreach(v, mk, mv)
    {
        if (!json_object_is_type(mv, json_type_string))
            return telo_err_set(err, TELO_EINVAL, "%s: %s.%s: want a string", source, k->path, mk);
    }
    return keep_json(c, k, v);
}

/* K_ARRAY: a list of maps. Each entry goes into every session pod: a bad one would fail every
 * pod's create. */
static int set_array(struct session_config *c, const struct key *k, struct json_object *v,
                     const char *source, struct telo_err *err)
{
    if (!json_object_is_type(v, json_type_array))
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a list", source, k->path);
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_object))
            return telo_err_set(err, TELO_EINVAL, "%s: %s[%zu]: want a map", source, k->path, i);
    }
    return keep_json(c, k, v);
}

/* K_LABELMAP, K_ANNOTMAP: a map of strings with valid keys, none of the operator's own
 * (session/meta.h). */
static int set_metamap(struct session_config *c, const struct key *k, struct json_object *v,
                       const char *source, struct telo_err *err)
{
    int rc =
        session_meta_check(k->kind == K_LABELMAP ? SESSION_META_LABELS : SESSION_META_ANNOTATIONS,
                           v, source, k->path, err);
    return rc < 0 ? rc : keep_json(c, k, v);
}

/* K_CIDRLIST: a list of CIDRs. */
static int set_cidrlist(struct session_config *c, const struct key *k, struct json_object *v,
                        const char *source, struct telo_err *err)
{
    if (!json_object_is_type(v, json_type_array))
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a list of CIDRs", source, k->path);
    size_t n = json_object_array_length(v);
    struct build_cidr *list = calloc(n ? n : 1, sizeof(*list));
    if (!list)
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(v, i);
        struct telo_err cerr;
        if (!json_object_is_type(e, json_type_string) ||
            build_cidr_parse(json_object_get_string(e), &list[i], &cerr) < 0) {
            free(list);
            return telo_err_set(err, TELO_EINVAL, "%s: %s[%zu]: %s", source, k->path, i,
                                json_object_is_type(e, json_type_string)
                                    ? cerr.msg
                                    : "want a CIDR such as 10.0.0.0/8");
        }
    }
    struct session_cidrs *cidrs = (struct session_cidrs *)((char *)c + k->offset);
    free(cidrs->items);
    cidrs->items = list;
    cidrs->n = n;
    return 0;
}

/* The setter of each kind: checks a JSON value (from the file, or made from a --set string) and
 * stores it, or leaves the field as it was and says what is wrong. */
static int (*const setters[])(struct session_config *c, const struct key *k, struct json_object *v,
                              const char *source, struct telo_err *err) = {
    [K_STRING] = set_text,     [K_QUANTITY] = set_text,    [K_POSINT] = set_posint,
    [K_STRLIST] = set_strlist, [K_STRMAP] = set_strmap,    [K_ARRAY] = set_array,
    [K_URL] = set_text,        [K_BOOL] = set_bool,        [K_CIDRLIST] = set_cidrlist,
    [K_COUNT] = set_posint,    [K_LABELMAP] = set_metamap, [K_ANNOTMAP] = set_metamap,
};

/* Sets one key from a JSON value (from the file, or made from a --set string). */
static int set_value(struct session_config *c, const struct key *k, struct json_object *v,
                     const char *source, struct telo_err *err)
{
    return setters[k->kind](c, k, v, source, err);
}

/* Walks a parsed file: maps recurse until their path names a key. */
static int walk(struct session_config *c, struct json_object *obj, const char *prefix,
                const char *source, struct telo_err *err)
{
    json_object_object_foreach(obj, name, value)
    {
        char path[256];
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", name);
        const struct key *k = find_key(path);
        if (k) {
            int rc = set_value(c, k, value, source, err);
            if (rc < 0)
                return rc;
            continue;
        }
        /* An intermediate map ("limits") is fine if some key lives below it. */
        size_t len = strlen(path);
        int is_prefix = 0;
        for (size_t i = 0; i < NKEYS && !is_prefix; i++)
            is_prefix = strncmp(keys[i].path, path, len) == 0 && keys[i].path[len] == '.';
        if (!is_prefix)
            return unknown_key(source, path, err);
        if (!json_object_is_type(value, json_type_object))
            return telo_err_set(err, TELO_EINVAL, "%s: %s: want a map", source, path);
        int rc = walk(c, value, path, source, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int session_config_load_file(struct session_config *c, const char *path, struct telo_err *err)
{
    char source[300];
    snprintf(source, sizeof(source), "config %s", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return telo_err_set(err, TELO_EIO, "%s: cannot open: %s", source, strerror(errno));
    struct buf text;
    buf_init(&text, 1 << 20);
    char chunk[8192];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = buf_append(&text, chunk, n);
    fclose(f);
    if (rc < 0) {
        buf_release(&text);
        return telo_err_set(err, TELO_ETOOBIG, "%s: larger than 1 MiB", source);
    }
    struct json_object *doc = NULL;
    rc = yamljson_parse(text.data ? text.data : "", text.len, source, &doc, err);
    buf_release(&text);
    if (rc < 0)
        return rc;
    if (!json_object_is_type(doc, json_type_object))
        rc = telo_err_set(err, TELO_EINVAL, "%s: want a map of keys at the top level", source);
    else
        rc = walk(c, doc, "", source, err);
    json_object_put(doc);
    return rc;
}

/* Turns a --set value into the JSON value its key's kind expects. */
static struct json_object *flag_value(const struct key *k, const char *value, struct telo_err *err)
{
    struct json_object *v = NULL;
    switch (k->kind) {
    case K_STRLIST:
    case K_CIDRLIST: {
        v = json_object_new_array();
        char *copy = strdup(value);
        char *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok;
             tok = strtok_r(NULL, ",", &save))
            json_object_array_add(v, json_object_new_string(tok));
        free(copy);
        return v;
    }
    case K_STRMAP:
    case K_LABELMAP:
    case K_ANNOTMAP: {
        v = json_object_new_object();
        char *copy = strdup(value);
        char *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok;
             tok = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(tok, '=');
            if (!eq) {
                telo_err_set(err, TELO_EINVAL, "--set %s: '%s' is not key=value", k->path, tok);
                json_object_put(v);
                free(copy);
                return NULL;
            }
            *eq = '\0';
            json_object_object_add(v, tok, json_object_new_string(eq + 1));
        }
        free(copy);
        return v;
    }
    case K_ARRAY:
        v = json_tokener_parse(value);
        if (!v)
            telo_err_set(err, TELO_EINVAL, "--set %s: want a JSON list", k->path);
        return v;
    default:
        return json_object_new_string(value);
    }
}

int session_config_set(struct session_config *c, const char *assignment, struct telo_err *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq)
        return telo_err_set(err, TELO_EINVAL, "--set %s: want key.path=value", assignment);
    char path[256];
    snprintf(path, sizeof(path), "%.*s", (int)(eq - assignment), assignment);
    const struct key *k = find_key(path);
    if (!k)
        return unknown_key("--set", path, err);
    struct json_object *v = flag_value(k, eq + 1, err);
    if (!v)
        return -TELO_EINVAL;
    int rc = set_value(c, k, v, "--set", err);
    json_object_put(v);
    return rc;
}

/* "repo:*" allows repo:<tag>: the rest is one tag, no digest, no further path. */
static int pattern_matches(const char *pattern, const char *image)
{
    size_t n = strlen(pattern);
    if (n < 2 || strcmp(pattern + n - 2, ":*") != 0)
        return strcmp(pattern, image) == 0;
    const char *tag = image + n - 1;
    return strncmp(pattern, image, n - 1) == 0 && *tag != '\0' && !strpbrk(tag, ":@/");
}

int session_base_image_allowed(const struct session_config *c, const char *image)
{
    if (image == NULL || build_base_image_check(image, NULL) < 0)
        return 0;
    if (c->default_image != NULL && strcmp(image, c->default_image) == 0)
        return 1;
    for (size_t i = 0; i < c->nbuild_allowed_base_images; i++) {
        if (pattern_matches(c->build_allowed_base_images[i], image))
            return 1;
    }
    return 0;
}

void session_base_image_refusal(const struct session_config *c, const char *image, char *out,
                                size_t len)
{
    struct telo_err err;
    telo_err_clear(&err);
    if (build_base_image_check(image, &err) < 0) {
        snprintf(out, len,
                 "%s; builds use spec.image as the base (FROM) of the session's image: use one "
                 "the operator allows (images.default or build.allowedBaseImages)",
                 err.msg);
        return;
    }
    struct buf allowed;
    buf_init(&allowed, 4096);
    (void)buf_printf(&allowed, "%s (images.default)", c->default_image ? c->default_image : "");
    for (size_t i = 0; i < c->nbuild_allowed_base_images; i++)
        (void)buf_printf(&allowed, ", %s", c->build_allowed_base_images[i]);
    snprintf(out, len,
             "spec.image \"%.512s\" is not an allowed base image for image builds: the operator "
             "allows %.1500s; use one of them (or leave spec.image unset), or have the operator's "
             "administrators add it to build.allowedBaseImages",
             image, allowed.data ? allowed.data : "");
    buf_release(&allowed);
}

void session_config_describe(FILE *out)
{
    for (size_t i = 0; i < NKEYS; i++)
        fprintf(out, "  %-24s %s\n", keys[i].path, keys[i].help);
}

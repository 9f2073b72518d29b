/* A TeloSession as the reconciler reads it: identity, spec and the status it last wrote. */
#include "session/spec.h"

#include "imagebuild/job.h"
#include "util/jget.h"
#include "util/str.h"

#include <openssl/sha.h>

#include <stdio.h>
#include <string.h>

/* A boolean and an integer with defaults, over util/jget (type-checked: a null or a wrong type
 * reads as absent), so the parser below reads as a list of fields. */
static int flag(struct json_object *obj, const char *key)
{
    int v = 0;
    return jget_bool(obj, key, &v) == 0 && v;
}

static long long number(struct json_object *obj, const char *key, long long missing)
{
    int64_t v = 0;
    return jget_int(obj, key, &v) == 0 ? (long long)v : missing;
}

/* spec.resources.<key> into *out (borrowed text, NULL when unset): a quantity, which the CRD
 * lets be a string or an integer (x-kubernetes-int-or-string), so 268435456 means 256Mi and is
 * not unset. Text that is not a quantity is left to the clamp, which gives the ceiling. Returns 0,
 * or -TELO_EINVAL with err filled for a value of another JSON type. */
static int quantity(struct json_object *res, const char *key, const char **out,
                    struct telo_err *err)
{
    struct json_object *v = jget(res, key);
    *out = jget_number_or_string_of(v);
    if (v && !*out)
        return telo_err_set(err, TELO_EINVAL,
                            "spec.resources.%s: want a quantity, a string like \"512Mi\" or a "
                            "number",
                            key);
    return 0;
}

/* spec.selfContained, spec.entry and spec.bundle into s. Returns 0, or -TELO_EINVAL with err
 * filled (s keeps what was read before the fault). */
static int parse_bundle(struct json_object *spec, struct session *s, struct telo_err *err)
{
    s->self_contained = flag(spec, "selfContained");
    s->entry = jget_string(spec, "entry");
    struct json_object *bundle = jget(spec, "bundle");
    struct json_object *cm = jget(bundle, "configMap"), *url = jget(bundle, "url");
    s->bundle_configmap = jget_string(cm, "name");
    s->bundle_configmap_key = jget_string(cm, "key") ? jget_string(cm, "key") : "bundle.tgz";
    s->bundle_url = jget_string(url, "url");
    s->bundle_sha256 = jget_string(url, "sha256");
    if (!s->self_contained) {
        /* The CRD allows the same entries; checked again here, since the entry becomes an
         * argument of `telo run` and of the build's `telo install`. */
        if (build_entry_check(s->entry, err) < 0)
            return -TELO_EINVAL;
        if (!s->bundle_configmap == !s->bundle_url)
            return telo_err_set(err, TELO_EINVAL,
                                "spec.bundle: set exactly one of configMap.name and url.url");
        if (s->bundle_url && (!s->bundle_sha256 || strlen(s->bundle_sha256) != 64 ||
                              strspn(s->bundle_sha256, "0123456789abcdef") != 64))
            return telo_err_set(err, TELO_EINVAL,
                                "spec.bundle.url.sha256: want 64 lowercase hex characters");
    }
    return 0;
}

/* spec.ports into s->ports and s->nports. Returns 0, or -TELO_EINVAL with err filled (s->ports
 * keeps the ports checked before the fault; s->nports is set only on success). */
static int parse_ports(struct json_object *spec, struct session *s, struct telo_err *err)
{
    struct json_object *ports = jget(spec, "ports");
    size_t n =
        ports && json_object_is_type(ports, json_type_array) ? json_object_array_length(ports) : 0;
    if (n > SESSION_MAX_PORTS)
        return telo_err_set(err, TELO_EINVAL, "spec.ports: at most %d ports", SESSION_MAX_PORTS);
    for (size_t i = 0; i < n; i++) {
        struct json_object *p = json_object_array_get_idx(ports, i);
        long long port = number(p, "port", 0);
        const char *proto = jget_string(p, "protocol") ? jget_string(p, "protocol") : "TCP";
        if (port < 1 || port > 65535)
            return telo_err_set(err, TELO_EINVAL, "spec.ports[%zu].port: %lld is not in 1..65535",
                                i, port);
        if (strcmp(proto, "TCP") != 0 && strcmp(proto, "UDP") != 0)
            return telo_err_set(err, TELO_EINVAL, "spec.ports[%zu].protocol: want TCP or UDP", i);
        for (size_t j = 0; j < i; j++) {
            if (s->ports[j].port == port && strcmp(s->ports[j].protocol, proto) == 0)
                return telo_err_set(err, TELO_EINVAL, "spec.ports[%zu]: %lld/%s is listed twice", i,
                                    port, proto);
        }
        s->ports[i] = (struct session_port){(int)port, proto, jget_string(p, "name")};
    }
    s->nports = n;
    return 0;
}

/* The CRD takes an image of printable ASCII without spaces only; a session stored before
 * that rule (or under a CRD without it) is refused here: the reference reaches the pod and, with
 * builds off, status.image.ref as it is, which `kubectl telo status` shows on a terminal. */
static int parse_image(const char *image, struct telo_err *err)
{
    for (size_t i = 0; image[i]; i++) {
        unsigned char c = (unsigned char)image[i];
        if (c <= 0x20 || c >= 0x7f)
            return telo_err_set(err, TELO_EINVAL,
                                "spec.image: a space, control or non-ASCII character at byte %zu; "
                                "give an image reference like ghcr.io/telorun/node:1",
                                i);
    }
    return 0;
}

int session_spec_parse(struct json_object *obj, struct session *s, struct telo_err *err)
{
    memset(s, 0, sizeof(*s));
    struct json_object *meta = jget(obj, "metadata"), *spec = jget(obj, "spec");
    s->name = jget_string(meta, "name");
    s->namespace = jget_string(meta, "namespace");
    s->uid = jget_string(meta, "uid");
    if (!s->name || !s->namespace || !s->uid)
        return telo_err_set(err, TELO_EINVAL, "metadata: name, namespace and uid are required");
    /* The API server checks both; every child's name and host is made from them, so a server
     * that did not (or a cache that was fed otherwise) must not get to choose those bytes. */
    if (!util_str_dns_subdomain(s->name))
        return telo_err_set(err, TELO_EINVAL,
                            "metadata.name: not a DNS-1123 subdomain (lowercase letters, "
                            "digits, '-' and '.', at most 253)");
    if (!util_str_dns_label(s->namespace, strlen(s->namespace)))
        return telo_err_set(err, TELO_EINVAL,
                            "metadata.namespace: not a DNS-1123 label (lowercase letters, "
                            "digits and '-', at most 63)");
    s->generation = number(meta, "generation", 0);
    s->deleting = jget(meta, "deletionTimestamp") != NULL;
    s->status = jget(obj, "status");
    if (!spec)
        return telo_err_set(err, TELO_EINVAL, "spec: required");

    if (parse_bundle(spec, s, err) < 0)
        return -TELO_EINVAL;
    s->image = jget_string(spec, "image");
    if (s->image && parse_image(s->image, err) < 0)
        return -TELO_EINVAL;
    s->pull_policy = jget_string(spec, "pullPolicy");
    s->registry_url = jget_string(spec, "registryUrl");
    s->env = jget_array(spec, "env");
    s->inspect = flag(spec, "inspect");
    struct json_object *res = jget(spec, "resources");
    if (quantity(res, "cpu", &s->cpu, err) < 0 || quantity(res, "memory", &s->memory, err) < 0 ||
        quantity(res, "ephemeralStorage", &s->ephemeral_storage, err) < 0)
        return -TELO_EINVAL;
    s->ttl_seconds = number(spec, "ttlSeconds", 0);
    s->stopped = flag(spec, "stopped");
    s->attach_token = flag(spec, "attachToken");
    s->ttl_after_finished = number(spec, "ttlSecondsAfterFinished", -1);
    s->restart_generation = number(spec, "restartGeneration", 0);
    if (s->restart_generation < 0)
        return telo_err_set(err, TELO_EINVAL, "spec.restartGeneration: %lld is negative",
                            s->restart_generation);

    if (parse_ports(spec, s, err) < 0)
        return -TELO_EINVAL;
    s->obj = json_object_get(obj);
    return 0;
}

void session_spec_release(struct session *s)
{
    json_object_put(s->obj);
    s->obj = NULL;
}

/* The first n (at most 32) characters of the base32 (a-z2-7) SHA-256 of text, one per byte of
 * the digest (its low 5 bits): DNS-safe and stable. out needs n + 1 bytes. */
static void hash_chars(const char *text, char *out, int n)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)text, strlen(text), digest);
    for (int i = 0; i < n; i++)
        out[i] = alphabet[digest[i] & 31];
    out[n] = '\0';
}

static void short_hash(const char *text, char out[11])
{
    hash_chars(text, out, 10);
}

void session_child_name(const struct session *s, char *out, size_t len)
{
    /* TeloSession names are DNS subdomains (up to 253); children need a DNS label (63). */
    if (strlen(s->name) + 9 <= 63 && !strchr(s->name, '.')) {
        snprintf(out, len, "telo-run-%s", s->name);
        return;
    }
    char hash[11];
    short_hash(s->name, hash);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "telo-run-%.42s", s->name);
    for (char *p = prefix; *p; p++) {
        if (*p == '.')
            *p = '-';
    }
    snprintf(out, len, "%s-%s", prefix, hash);
}

void session_host_id(const struct session *s, char *out, size_t len)
{
    /* The secret part is a hash of the session's uid (issue 15, finding 6): a host computed
     * from the name alone lets anyone who knows a session's name reach it. The uid is random
     * (a UUID the API server assigns), fixed for the object's life, and new for a session
     * re-created under the same name, so hosts survive operator restarts, differ between a
     * session and its successor, and never collide (name "a-b" in "c" and name "a" in "b-c"
     * share the prefix "a-b-c", not the hash). 16 characters of 5 bits: 80 bits to guess.
     * A readable prefix stays in front so people recognise their session.
     * "<port>-" (6) + prefix (40) + "-" + hash (16) = 63 characters, one DNS label. */
    char hash[SESSION_HOST_HASH_LEN + 1], prefix[SESSION_HOST_PREFIX_LEN + 1];
    hash_chars(s->uid ? s->uid : "", hash, SESSION_HOST_HASH_LEN);
    snprintf(prefix, sizeof(prefix), "%s-%s", s->name, s->namespace);
    size_t n = strlen(prefix);
    for (size_t i = 0; i < n; i++) {
        if (prefix[i] == '.')
            prefix[i] = '-';
    }
    /* Cut inside a name it may end on '-', which would double the separator. */
    while (n > 0 && prefix[n - 1] == '-')
        prefix[--n] = '\0';
    snprintf(out, len, "%s-%s", prefix, hash);
}

/* The objects a TeloSession owns, built as pure functions of the session and the config. */
#include "session/desired.h"

#include "imagebuild/job.h"
#include "kube/objects.h"
#include "session/meta.h"
#include "session/quantity.h"
#include "session/reach.h"
#include "util/buf.h"
#include "util/jget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *session_image(const struct session *s, const struct session_config *cfg)
{
    return s->image && *s->image ? s->image : cfg->default_image;
}

void session_limits(const struct session *s, const struct session_config *cfg,
                    struct session_limits *out)
{
    out->cpu = session_quantity_clamp(s->cpu, cfg->max_cpu);
    out->memory = session_quantity_clamp(s->memory, cfg->max_memory);
    out->ephemeral_storage =
        session_quantity_clamp(s->ephemeral_storage, cfg->max_ephemeral_storage);
    out->ttl_seconds = s->ttl_seconds > 0 && s->ttl_seconds <= cfg->max_ttl_seconds
                           ? s->ttl_seconds
                           : cfg->max_ttl_seconds;
}

/* metadata with name, namespace, labels and the controller reference to the session. */
static struct json_object *metadata(const struct session *s, const struct session_config *cfg,
                                    const char *name)
{
    struct json_object *m = json_object_new_object(), *labels = json_object_new_object(),
                       *owners = json_object_new_array();
    kube_obj_put_str(m, "name", name);
    kube_obj_put_str(m, "namespace", s->namespace);
    kube_obj_put_str(labels, SESSION_MANAGED_BY, cfg->managed_by);
    kube_obj_put_str(labels, SESSION_LABEL, s->name);
    kube_obj_put(m, "labels", labels);
    /* A controller reference: foreground deletion of the session waits for its children. */
    kube_obj_push(owners,
                  kube_obj_owner_ref("telo.run/v1alpha1", "TeloSession", s->name, s->uid, 1));
    kube_obj_put(m, "ownerReferences", owners);
    return m;
}

/* Whether the user's env names the variable. */
static int user_sets(const struct session *s, const char *name)
{
    size_t n = s->env ? json_object_array_length(s->env) : 0;
    for (size_t i = 0; i < n; i++) {
        if (jget_string_is(json_object_array_get_idx(s->env, i), "name", name))
            return 1;
    }
    return 0;
}

/* Appends name=value unless the user set name: env is a list keyed by name, and a pod that
 * names a variable twice is ambiguous (server-side apply refuses it; a create keeps the last). */
static void add_default(struct json_object *env, const struct session *s, const char *name,
                        const char *value)
{
    if (!user_sets(s, name))
        kube_obj_push(env, kube_obj_env(name, value));
}

/* The user's env, then what the telo CLI needs, each unless the user set it (as the reference
 * does for TELO_REGISTRY_URL). */
static struct json_object *session_env(const struct session *s, const struct session_config *cfg,
                                       int bundle)
{
    struct json_object *env = json_object_new_array();
    size_t n = s->env ? json_object_array_length(s->env) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *copy = NULL;
        json_object_deep_copy(json_object_array_get_idx(s->env, i), &copy, NULL);
        kube_obj_push(env, copy);
    }
    const char *registry = s->registry_url ? s->registry_url : cfg->registry_url;
    if (registry)
        add_default(env, s, "TELO_REGISTRY_URL", registry);
    if (bundle) {
        add_default(env, s, "TELO_CACHE_DIR", "/telo-cache");
        add_default(env, s, "HOME", "/home/telo");
        add_default(env, s, "npm_config_cache", "/home/telo/.npm");
    }
    add_default(env, s, "FORCE_COLOR", "1");
    return env;
}

static struct json_object *container_ports(const struct session *s)
{
    struct json_object *ports = json_object_new_array();
    for (size_t i = 0; i < s->nports; i++) {
        struct json_object *p = json_object_new_object();
        kube_obj_put_int(p, "containerPort", s->ports[i].port);
        kube_obj_put_str(p, "protocol", s->ports[i].protocol);
        if (strcmp(s->ports[i].protocol, "TCP") == 0) {
            char name[32]; /* "telo-tcp-19" at most: spec.ports holds SESSION_MAX_PORTS */
            snprintf(name, sizeof(name), SESSION_REACH_PORT_NAME_FMT, i);
            kube_obj_put_str(p, "name", name);
        }
        kube_obj_push(ports, p);
    }
    return ports;
}

long session_download_timeout(const struct session_config *cfg)
{
    long margin = cfg->start_deadline_seconds / 4;
    if (margin < 15)
        margin = 15;
    long t = cfg->start_deadline_seconds - margin;
    return t < 5 ? 5 : t;
}

/* Delivers the bundle into /app. Inputs arrive as environment variables, never spliced into the
 * script, so no spec value can change what the shell runs. A failure writes one line to the
 * termination log, which the session's failure message quotes. The download is the build Job's
 * (BUILD_DOWNLOAD_SCRIPT: bounded in time and size), with the session's own time limit. */
static struct json_object *init_container(const struct session *s, const struct session_config *cfg,
                                          const struct session_limits *lim)
{
    static const char configmap_script[] =
        "set -e\n"
        "if ! tar xzf /bundle/bundle.tgz -C /app 2>/tmp/tar.err; then\n"
        "  echo \"bundle from ConfigMap $BUNDLE_SOURCE is not a gzip tar: $(head -c 300 "
        "/tmp/tar.err)\" | tee /dev/termination-log >&2; exit 65\n"
        "fi\n";
    static const char url_script[] =
        "set -e\n" BUILD_DOWNLOAD_SCRIPT "got=$(sha256sum /tmp/bundle.tgz | cut -d' ' -f1)\n"
        "if [ \"$got\" != \"$BUNDLE_SHA256\" ]; then\n"
        "  echo \"bundle sha256 mismatch for $BUNDLE_URL: spec.bundle.url.sha256 is "
        "$BUNDLE_SHA256 but the download is $got\" | tee /dev/termination-log >&2; exit 67\n"
        "fi\n"
        "if ! tar xzf /tmp/bundle.tgz -C /app 2>/tmp/tar.err; then\n"
        "  echo \"bundle from $BUNDLE_URL is not a gzip tar: $(head -c 300 /tmp/tar.err)\" | "
        "tee /dev/termination-log >&2; exit 65\n"
        "fi\n";
    struct json_object *c = kube_obj_container(SESSION_INIT, cfg->init_image, "IfNotPresent"),
                       *cmd = json_object_new_array(), *env = json_object_new_array(),
                       *mounts = json_object_new_array();
    kube_obj_push_str(cmd, "sh");
    kube_obj_push_str(cmd, "-c");
    kube_obj_push_str(cmd, s->bundle_url ? url_script : configmap_script);
    kube_obj_put(c, "command", cmd);
    if (s->bundle_url) {
        kube_obj_push(env, kube_obj_env("BUNDLE_URL", s->bundle_url));
        kube_obj_push(env, kube_obj_env("BUNDLE_SHA256", s->bundle_sha256));
        char timeout[24];
        snprintf(timeout, sizeof(timeout), "%ld", session_download_timeout(cfg));
        kube_obj_push(env, kube_obj_env("BUNDLE_TIMEOUT", timeout));
        char max[24];
        snprintf(max, sizeof(max), "%zu", BUILD_DOWNLOAD_MAX);
        kube_obj_push(env, kube_obj_env("BUNDLE_MAX", max));
    } else {
        kube_obj_push(env, kube_obj_env("BUNDLE_SOURCE", s->bundle_configmap));
        kube_obj_push(mounts, kube_obj_mount("bundle", "/bundle", 1));
    }
    kube_obj_put(c, "env", env);
    kube_obj_push(mounts, kube_obj_mount("app", "/app", 0));
    kube_obj_push(mounts, kube_obj_mount("tmp", "/tmp", 0));
    kube_obj_put(c, "volumeMounts", mounts);
    kube_obj_put(c, "resources", kube_obj_resources(lim->cpu, lim->memory, lim->ephemeral_storage));
    kube_obj_put(c, "securityContext", kube_obj_restricted_container_security(1, -1));
    kube_obj_put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    return c;
}

struct json_object *session_desired_pod(const struct session *s, const struct session_config *cfg,
                                        const char *image)
{
    char name[64];
    session_child_name(s, name, sizeof(name));
    struct session_limits lim;
    session_limits(s, cfg, &lim);
    int bundle = !s->self_contained;

    struct json_object *meta = metadata(s, cfg, name);
    session_meta_add(meta, "labels", cfg->pod_labels);
    session_meta_add(meta, "annotations", cfg->pod_annotations);
    struct json_object *pod = kube_obj_new("v1", "Pod", meta);
    struct json_object *spec = json_object_new_object();
    kube_obj_put_str(spec, "restartPolicy", "Never");
    kube_obj_put_int(spec, "activeDeadlineSeconds", lim.ttl_seconds);
    kube_obj_put_bool(spec, "automountServiceAccountToken", 0);
    kube_obj_put_bool(spec, "enableServiceLinks", 0);
    kube_obj_put_int(spec, "terminationGracePeriodSeconds", 5);
    kube_obj_put(spec, "securityContext", kube_obj_pod_security(1000));
    if (cfg->runtime_class)
        kube_obj_put_str(spec, "runtimeClassName", cfg->runtime_class);
    if (cfg->image_pull_secret) {
        struct json_object *secrets = json_object_new_array(), *ref = json_object_new_object();
        kube_obj_put_str(ref, "name", cfg->image_pull_secret);
        kube_obj_push(secrets, ref);
        kube_obj_put(spec, "imagePullSecrets", secrets);
    }
    if (cfg->node_selector)
        kube_obj_put(spec, "nodeSelector", json_object_get(cfg->node_selector));
    if (cfg->tolerations)
        kube_obj_put(spec, "tolerations", json_object_get(cfg->tolerations));

    struct json_object *c = kube_obj_container(SESSION_CONTAINER, image,
                                               s->pull_policy ? s->pull_policy : "IfNotPresent"),
                       *mounts = json_object_new_array(), *volumes = json_object_new_array();
    if (bundle) {
        struct json_object *cmd = json_object_new_array();
        char entry[sizeof("/app/") + BUILD_ENTRY_MAX];
        snprintf(entry, sizeof(entry), "/app/%s", s->entry);
        kube_obj_push_str(cmd, "telo");
        kube_obj_push_str(cmd, "run");
        kube_obj_push_str(cmd, entry);
        kube_obj_push_str(cmd, "--no-cache-write");
        if (s->inspect) {
            kube_obj_push_str(cmd, "--inspect");
            kube_obj_push_str(cmd, "0.0.0.0:9230");
            kube_obj_push_str(cmd, "--no-open");
        }
        kube_obj_put(c, "command", cmd);
        kube_obj_put_str(c, "workingDir", "/work");
        kube_obj_push(mounts, kube_obj_mount("app", "/app", 0));
        kube_obj_push(mounts, kube_obj_mount("work", "/work", 0));
        kube_obj_push(mounts, kube_obj_mount("home", "/home/telo", 0));
        kube_obj_push(volumes, kube_obj_empty_dir("app"));
        kube_obj_push(volumes, kube_obj_empty_dir("work"));
        kube_obj_push(volumes, kube_obj_empty_dir("home"));
    }
    kube_obj_push(mounts, kube_obj_mount("tmp", "/tmp", 0));
    kube_obj_push(volumes, kube_obj_empty_dir("tmp"));
    kube_obj_put_bool(c, "stdin", 1);
    kube_obj_put_bool(c, "tty", 1);
    if (s->nports)
        kube_obj_put(c, "ports", container_ports(s));
    kube_obj_put(c, "env", session_env(s, cfg, bundle));
    /* limits == requests: Guaranteed QoS, so a session is never the first evicted. */
    kube_obj_put(c, "resources", kube_obj_resources(lim.cpu, lim.memory, lim.ephemeral_storage));
    kube_obj_put(c, "volumeMounts", mounts);
    /* Self-contained images may write to their root filesystem; bundles never need to. */
    kube_obj_put(c, "securityContext", kube_obj_restricted_container_security(bundle, -1));
    kube_obj_put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    struct json_object *containers = json_object_new_array();
    kube_obj_push(containers, c);
    kube_obj_put(spec, "containers", containers);

    if (bundle) {
        struct json_object *inits = json_object_new_array();
        kube_obj_push(inits, init_container(s, cfg, &lim));
        kube_obj_put(spec, "initContainers", inits);
        if (s->bundle_configmap)
            kube_obj_push(volumes,
                          kube_obj_configmap_volume("bundle", s->bundle_configmap,
                                                    s->bundle_configmap_key, "bundle.tgz"));
    }
    kube_obj_put(spec, "volumes", volumes);
    kube_obj_put(pod, "spec", spec);
    return pod;
}

struct json_object *session_desired_service(const struct session *s,
                                            const struct session_config *cfg)
{
    if (s->nports == 0)
        return NULL;
    char name[64];
    session_child_name(s, name, sizeof(name));
    struct json_object *svc = kube_obj_new("v1", "Service", metadata(s, cfg, name));
    struct json_object *spec = json_object_new_object(), *selector = json_object_new_object(),
                       *ports = json_object_new_array();
    kube_obj_put_str(selector, SESSION_LABEL, s->name);
    kube_obj_put(spec, "selector", selector);
    for (size_t i = 0; i < s->nports; i++) {
        struct json_object *p = json_object_new_object();
        char pname[16];
        /* One port number may serve TCP and UDP: names must differ. */
        snprintf(pname, sizeof(pname), "p%d%s", s->ports[i].port,
                 strcmp(s->ports[i].protocol, "UDP") == 0 ? "-udp" : "");
        kube_obj_put_str(p, "name", pname);
        kube_obj_put_int(p, "port", s->ports[i].port);
        kube_obj_put_int(p, "targetPort", s->ports[i].port);
        kube_obj_put_str(p, "protocol", s->ports[i].protocol);
        kube_obj_push(ports, p);
    }
    kube_obj_put(spec, "ports", ports);
    kube_obj_put(svc, "spec", spec);
    return svc;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* meta's annotations gain SESSION_INGRESS_ANNOTATION_KEYS for the keys of wanted, when there are
 * any (an Ingress without them is as it always was). */
static void note_annotation_keys(struct json_object *meta, struct json_object *wanted)
{
    size_t n = wanted ? (size_t)json_object_object_length(wanted) : 0, i = 0;
    if (n == 0)
        return;
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    struct json_object *annotations = jget_object(meta, "annotations");
    if (!annotations) {
        annotations = json_object_new_object();
        kube_obj_put(meta, "annotations", annotations);
    }
    if (!keys)
        return; /* out of memory: the apply fails on the object's other allocations anyway */
    json_object_object_foreach(wanted, key, value)
    {
        (void)value;
        keys[i++] = key;
    }
    qsort(keys, i, sizeof(*keys), by_text);
    struct buf b;
    buf_init(&b, 256 << 10);
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < i; k++)
        rc = buf_printf(&b, "%s%s", k ? "," : "", keys[k]);
    if (rc == 0)
        kube_obj_put_str(annotations, SESSION_INGRESS_ANNOTATION_KEYS, b.data ? b.data : "");
    buf_release(&b);
    free(keys);
}

struct json_object *session_desired_ingress(const struct session *s,
                                            const struct session_config *cfg)
{
    if (!cfg->ingress_base_domain)
        return NULL;
    char name[64], id[64];
    session_child_name(s, name, sizeof(name));
    session_host_id(s, id, sizeof(id));
    struct json_object *rules = json_object_new_array(), *hosts = json_object_new_array();
    for (size_t i = 0; i < s->nports; i++) {
        if (strcmp(s->ports[i].protocol, "TCP") != 0)
            continue;
        char host[320];
        snprintf(host, sizeof(host), "%d-%s.%s", s->ports[i].port, id, cfg->ingress_base_domain);
        struct json_object *rule = json_object_new_object(), *http = json_object_new_object(),
                           *paths = json_object_new_array(), *path = json_object_new_object();
        struct json_object *backend = json_object_new_object(), *service = json_object_new_object(),
                           *port = json_object_new_object();
        kube_obj_put_str(rule, "host", host);
        kube_obj_put_str(path, "path", "/");
        kube_obj_put_str(path, "pathType", "Prefix");
        kube_obj_put_int(port, "number", s->ports[i].port);
        kube_obj_put_str(service, "name", name);
        kube_obj_put(service, "port", port);
        kube_obj_put(backend, "service", service);
        kube_obj_put(path, "backend", backend);
        kube_obj_push(paths, path);
        kube_obj_put(http, "paths", paths);
        kube_obj_put(rule, "http", http);
        kube_obj_push(rules, rule);
        kube_obj_push_str(hosts, host);
    }
    if (json_object_array_length(rules) == 0) {
        json_object_put(rules);
        json_object_put(hosts);
        return NULL;
    }
    struct json_object *meta = metadata(s, cfg, name);
    session_meta_add(meta, "annotations", cfg->ingress_annotations);
    note_annotation_keys(meta, cfg->ingress_annotations);
    struct json_object *ing = kube_obj_new("networking.k8s.io/v1", "Ingress", meta);
    struct json_object *spec = json_object_new_object();
    if (cfg->ingress_class)
        kube_obj_put_str(spec, "ingressClassName", cfg->ingress_class);
    kube_obj_put(spec, "rules", rules);
    if (cfg->ingress_tls_secret) {
        struct json_object *tls = json_object_new_array(), *entry = json_object_new_object();
        kube_obj_put(entry, "hosts", hosts);
        kube_obj_put_str(entry, "secretName", cfg->ingress_tls_secret);
        kube_obj_push(tls, entry);
        kube_obj_put(spec, "tls", tls);
    } else {
        json_object_put(hosts);
    }
    kube_obj_put(ing, "spec", spec);
    return ing;
}

void session_secret_name(const struct session *s, char *out, size_t len)
{
    char name[64];
    session_child_name(s, name, sizeof(name));
    snprintf(out, len, "%s-attach", name);
}

struct json_object *session_desired_secret(const struct session *s,
                                           const struct session_config *cfg, const char *token)
{
    char name[80];
    session_secret_name(s, name, sizeof(name));
    struct json_object *secret = kube_obj_new("v1", "Secret", metadata(s, cfg, name));
    struct json_object *data = json_object_new_object();
    kube_obj_put_str(data, "token", token);
    kube_obj_put_str(secret, "type", "Opaque");
    kube_obj_put(secret, "stringData", data);
    return secret;
}

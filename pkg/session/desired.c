/* The objects a TeloSession owns, built as pure functions of the session and the config. */
#include "session/desired.h"

#include "session/quantity.h"

#include <stdio.h>
#include <string.h>

/* json-c helpers that keep the builders readable. */
static struct json_object *obj(void)
{
    return json_object_new_object();
}

static struct json_object *arr(void)
{
    return json_object_new_array();
}

static void put(struct json_object *o, const char *key, struct json_object *v)
{
    json_object_object_add(o, key, v);
}

static void put_str(struct json_object *o, const char *key, const char *v)
{
    json_object_object_add(o, key, json_object_new_string(v));
}

static void put_int(struct json_object *o, const char *key, long long v)
{
    json_object_object_add(o, key, json_object_new_int64(v));
}

static void put_bool(struct json_object *o, const char *key, int v)
{
    json_object_object_add(o, key, json_object_new_boolean(v));
}

static struct json_object *kv(const char *key, const char *value)
{
    struct json_object *o = obj();
    put_str(o, "name", key);
    put_str(o, "value", value);
    return o;
}

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
    struct json_object *m = obj(), *labels = obj(), *owner = obj(), *owners = arr();
    put_str(m, "name", name);
    put_str(m, "namespace", s->namespace);
    put_str(labels, SESSION_MANAGED_BY, cfg->managed_by);
    put_str(labels, SESSION_LABEL, s->name);
    put(m, "labels", labels);
    put_str(owner, "apiVersion", "telo.run/v1alpha1");
    put_str(owner, "kind", "TeloSession");
    put_str(owner, "name", s->name);
    put_str(owner, "uid", s->uid);
    put_bool(owner, "controller", 1);
    /* Foreground deletion of the session waits for its children. */
    put_bool(owner, "blockOwnerDeletion", 1);
    json_object_array_add(owners, owner);
    put(m, "ownerReferences", owners);
    return m;
}

static struct json_object *object(const char *api_version, const char *kind,
                                  struct json_object *meta)
{
    struct json_object *o = obj();
    put_str(o, "apiVersion", api_version);
    put_str(o, "kind", kind);
    put(o, "metadata", meta);
    return o;
}

/* The container securityContext Pod Security "restricted" asks for. */
static struct json_object *hardened(int read_only_root)
{
    struct json_object *sc = obj(), *caps = obj(), *drop = arr();
    put_bool(sc, "allowPrivilegeEscalation", 0);
    put_bool(sc, "readOnlyRootFilesystem", read_only_root);
    put_bool(sc, "runAsNonRoot", 1);
    json_object_array_add(drop, json_object_new_string("ALL"));
    put(caps, "drop", drop);
    put(sc, "capabilities", caps);
    return sc;
}

static struct json_object *resources(const struct session_limits *lim)
{
    /* limits == requests: Guaranteed QoS, so a session is never the first evicted. */
    struct json_object *r = obj(), *limits = obj(), *requests = obj();
    put_str(limits, "cpu", lim->cpu);
    put_str(limits, "memory", lim->memory);
    put_str(limits, "ephemeral-storage", lim->ephemeral_storage);
    put_str(requests, "cpu", lim->cpu);
    put_str(requests, "memory", lim->memory);
    put_str(requests, "ephemeral-storage", lim->ephemeral_storage);
    put(r, "limits", limits);
    put(r, "requests", requests);
    return r;
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

/* Whether the user's env names the variable. */
static int user_sets(const struct session *s, const char *name)
{
    size_t n = s->env ? json_object_array_length(s->env) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(s->env, i), *v;
        if (json_object_object_get_ex(e, "name", &v) &&
            strcmp(json_object_get_string(v), name) == 0)
            return 1;
    }
    return 0;
}

/* Appends name=value unless the user set name: env is a list keyed by name, and server-side
 * apply refuses a pod that names a variable twice. */
static void add_default(struct json_object *env, const struct session *s, const char *name,
                        const char *value)
{
    if (!user_sets(s, name))
        json_object_array_add(env, kv(name, value));
}

/* The user's env, then what the telo CLI needs, each unless the user set it (as the reference
 * does for TELO_REGISTRY_URL). */
static struct json_object *session_env(const struct session *s, const struct session_config *cfg,
                                       int bundle)
{
    struct json_object *env = arr();
    size_t n = s->env ? json_object_array_length(s->env) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *copy = NULL;
        json_object_deep_copy(json_object_array_get_idx(s->env, i), &copy, NULL);
        json_object_array_add(env, copy);
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
    struct json_object *ports = arr();
    for (size_t i = 0; i < s->nports; i++) {
        struct json_object *p = obj();
        put_int(p, "containerPort", s->ports[i].port);
        put_str(p, "protocol", s->ports[i].protocol);
        json_object_array_add(ports, p);
    }
    return ports;
}

/* Delivers the bundle into /app. Inputs arrive as environment variables, never spliced into the
 * script, so no spec value can change what the shell runs. A failure writes one line to the
 * termination log, which the session's failure message quotes. */
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
        "set -e\n"
        "if ! wget -q -T 30 -O /tmp/bundle.tgz \"$BUNDLE_URL\" 2>/tmp/wget.err; then\n"
        "  echo \"cannot download the bundle from $BUNDLE_URL: $(head -c 300 /tmp/wget.err)\" | "
        "tee /dev/termination-log >&2; exit 66\n"
        "fi\n"
        "got=$(sha256sum /tmp/bundle.tgz | cut -d' ' -f1)\n"
        "if [ \"$got\" != \"$BUNDLE_SHA256\" ]; then\n"
        "  echo \"bundle sha256 mismatch for $BUNDLE_URL: spec.bundle.url.sha256 is "
        "$BUNDLE_SHA256 but the download is $got\" | tee /dev/termination-log >&2; exit 67\n"
        "fi\n"
        "if ! tar xzf /tmp/bundle.tgz -C /app 2>/tmp/tar.err; then\n"
        "  echo \"bundle from $BUNDLE_URL is not a gzip tar: $(head -c 300 /tmp/tar.err)\" | "
        "tee /dev/termination-log >&2; exit 65\n"
        "fi\n";
    struct json_object *c = obj(), *cmd = arr(), *env = arr(), *mounts = arr();
    put_str(c, "name", SESSION_INIT);
    put_str(c, "image", cfg->init_image);
    put_str(c, "imagePullPolicy", "IfNotPresent");
    json_object_array_add(cmd, json_object_new_string("sh"));
    json_object_array_add(cmd, json_object_new_string("-c"));
    json_object_array_add(cmd,
                          json_object_new_string(s->bundle_url ? url_script : configmap_script));
    put(c, "command", cmd);
    if (s->bundle_url) {
        json_object_array_add(env, kv("BUNDLE_URL", s->bundle_url));
        json_object_array_add(env, kv("BUNDLE_SHA256", s->bundle_sha256));
    } else {
        json_object_array_add(env, kv("BUNDLE_SOURCE", s->bundle_configmap));
        json_object_array_add(mounts, mount("bundle", "/bundle", 1));
    }
    put(c, "env", env);
    json_object_array_add(mounts, mount("app", "/app", 0));
    json_object_array_add(mounts, mount("tmp", "/tmp", 0));
    put(c, "volumeMounts", mounts);
    put(c, "resources", resources(lim));
    put(c, "securityContext", hardened(1));
    put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
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

    struct json_object *pod = object("v1", "Pod", metadata(s, cfg, name));
    struct json_object *spec = obj(), *psc = obj(), *seccomp = obj();
    put_str(spec, "restartPolicy", "Never");
    put_int(spec, "activeDeadlineSeconds", lim.ttl_seconds);
    put_bool(spec, "automountServiceAccountToken", 0);
    put_bool(spec, "enableServiceLinks", 0);
    put_int(spec, "terminationGracePeriodSeconds", 5);
    put_bool(psc, "runAsNonRoot", 1);
    put_int(psc, "runAsUser", 1000);
    put_int(psc, "runAsGroup", 1000);
    put_int(psc, "fsGroup", 1000);
    put_str(seccomp, "type", "RuntimeDefault");
    put(psc, "seccompProfile", seccomp);
    put(spec, "securityContext", psc);
    if (cfg->runtime_class)
        put_str(spec, "runtimeClassName", cfg->runtime_class);
    if (cfg->image_pull_secret) {
        struct json_object *secrets = arr(), *ref = obj();
        put_str(ref, "name", cfg->image_pull_secret);
        json_object_array_add(secrets, ref);
        put(spec, "imagePullSecrets", secrets);
    }
    if (cfg->node_selector)
        put(spec, "nodeSelector", json_object_get(cfg->node_selector));
    if (cfg->tolerations)
        put(spec, "tolerations", json_object_get(cfg->tolerations));

    struct json_object *c = obj(), *mounts = arr(), *volumes = arr();
    put_str(c, "name", SESSION_CONTAINER);
    put_str(c, "image", image);
    put_str(c, "imagePullPolicy", s->pull_policy ? s->pull_policy : "IfNotPresent");
    if (bundle) {
        struct json_object *cmd = arr();
        char entry[1024];
        snprintf(entry, sizeof(entry), "/app/%s", s->entry);
        json_object_array_add(cmd, json_object_new_string("telo"));
        json_object_array_add(cmd, json_object_new_string("run"));
        json_object_array_add(cmd, json_object_new_string(entry));
        json_object_array_add(cmd, json_object_new_string("--no-cache-write"));
        if (s->inspect) {
            json_object_array_add(cmd, json_object_new_string("--inspect"));
            json_object_array_add(cmd, json_object_new_string("0.0.0.0:9230"));
            json_object_array_add(cmd, json_object_new_string("--no-open"));
        }
        put(c, "command", cmd);
        put_str(c, "workingDir", "/work");
        json_object_array_add(mounts, mount("app", "/app", 0));
        json_object_array_add(mounts, mount("work", "/work", 0));
        json_object_array_add(mounts, mount("home", "/home/telo", 0));
        json_object_array_add(volumes, empty_dir("app"));
        json_object_array_add(volumes, empty_dir("work"));
        json_object_array_add(volumes, empty_dir("home"));
    }
    json_object_array_add(mounts, mount("tmp", "/tmp", 0));
    json_object_array_add(volumes, empty_dir("tmp"));
    put_bool(c, "stdin", 1);
    put_bool(c, "tty", 1);
    if (s->nports)
        put(c, "ports", container_ports(s));
    put(c, "env", session_env(s, cfg, bundle));
    put(c, "resources", resources(&lim));
    put(c, "volumeMounts", mounts);
    /* Self-contained images may write to their root filesystem; bundles never need to. */
    put(c, "securityContext", hardened(bundle));
    put_str(c, "terminationMessagePolicy", "FallbackToLogsOnError");
    struct json_object *containers = arr();
    json_object_array_add(containers, c);
    put(spec, "containers", containers);

    if (bundle) {
        struct json_object *inits = arr();
        json_object_array_add(inits, init_container(s, cfg, &lim));
        put(spec, "initContainers", inits);
        if (s->bundle_configmap) {
            struct json_object *v = obj(), *cm = obj(), *items = arr(), *item = obj();
            put_str(v, "name", "bundle");
            put_str(cm, "name", s->bundle_configmap);
            put_str(item, "key", s->bundle_configmap_key);
            put_str(item, "path", "bundle.tgz");
            json_object_array_add(items, item);
            put(cm, "items", items);
            put(v, "configMap", cm);
            json_object_array_add(volumes, v);
        }
    }
    put(spec, "volumes", volumes);
    put(pod, "spec", spec);
    return pod;
}

struct json_object *session_desired_service(const struct session *s,
                                            const struct session_config *cfg)
{
    if (s->nports == 0)
        return NULL;
    char name[64];
    session_child_name(s, name, sizeof(name));
    struct json_object *svc = object("v1", "Service", metadata(s, cfg, name));
    struct json_object *spec = obj(), *selector = obj(), *ports = arr();
    put_str(selector, SESSION_LABEL, s->name);
    put(spec, "selector", selector);
    for (size_t i = 0; i < s->nports; i++) {
        struct json_object *p = obj();
        char pname[16];
        /* One port number may serve TCP and UDP: names must differ. */
        snprintf(pname, sizeof(pname), "p%d%s", s->ports[i].port,
                 strcmp(s->ports[i].protocol, "UDP") == 0 ? "-udp" : "");
        put_str(p, "name", pname);
        put_int(p, "port", s->ports[i].port);
        put_int(p, "targetPort", s->ports[i].port);
        put_str(p, "protocol", s->ports[i].protocol);
        json_object_array_add(ports, p);
    }
    put(spec, "ports", ports);
    put(svc, "spec", spec);
    return svc;
}

struct json_object *session_desired_ingress(const struct session *s,
                                            const struct session_config *cfg)
{
    if (!cfg->ingress_base_domain)
        return NULL;
    char name[64], id[64];
    session_child_name(s, name, sizeof(name));
    session_host_id(s, id, sizeof(id));
    struct json_object *rules = arr(), *hosts = arr();
    for (size_t i = 0; i < s->nports; i++) {
        if (strcmp(s->ports[i].protocol, "TCP") != 0)
            continue;
        char host[320];
        snprintf(host, sizeof(host), "%d-%s.%s", s->ports[i].port, id, cfg->ingress_base_domain);
        struct json_object *rule = obj(), *http = obj(), *paths = arr(), *path = obj();
        struct json_object *backend = obj(), *service = obj(), *port = obj();
        put_str(rule, "host", host);
        put_str(path, "path", "/");
        put_str(path, "pathType", "Prefix");
        put_int(port, "number", s->ports[i].port);
        put_str(service, "name", name);
        put(service, "port", port);
        put(backend, "service", service);
        put(path, "backend", backend);
        json_object_array_add(paths, path);
        put(http, "paths", paths);
        put(rule, "http", http);
        json_object_array_add(rules, rule);
        json_object_array_add(hosts, json_object_new_string(host));
    }
    if (json_object_array_length(rules) == 0) {
        json_object_put(rules);
        json_object_put(hosts);
        return NULL;
    }
    struct json_object *ing = object("networking.k8s.io/v1", "Ingress", metadata(s, cfg, name));
    struct json_object *spec = obj();
    if (cfg->ingress_class)
        put_str(spec, "ingressClassName", cfg->ingress_class);
    put(spec, "rules", rules);
    if (cfg->ingress_tls_secret) {
        struct json_object *tls = arr(), *entry = obj();
        put(entry, "hosts", hosts);
        put_str(entry, "secretName", cfg->ingress_tls_secret);
        json_object_array_add(tls, entry);
        put(spec, "tls", tls);
    } else {
        json_object_put(hosts);
    }
    put(ing, "spec", spec);
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
    struct json_object *secret = object("v1", "Secret", metadata(s, cfg, name));
    struct json_object *data = obj();
    put_str(data, "token", token);
    put_str(secret, "type", "Opaque");
    put(secret, "stringData", data);
    return secret;
}

/* Tests for pkg/session/desired.c: the pod, Service, Ingress and Secret a TeloSession owns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/config.h"
#include "session/desired.h"
#include "session/spec.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UID "0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00"

/* A TeloSession named name in namespace "demo" with the given spec (JSON text). */
struct fixture {
    struct session_config *cfg;
    struct json_object *obj;
    struct session s;
};

static void setup_named(struct fixture *f, const char *name, const char *spec)
{
    char doc[4096];
    snprintf(doc, sizeof(doc),
             "{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"metadata\":"
             "{\"name\":\"%s\",\"namespace\":\"demo\",\"uid\":\"" UID "\",\"generation\":1},"
             "\"spec\":%s}",
             name, spec);
    f->cfg = session_config_new();
    assert_non_null(f->cfg);
    f->obj = json_tokener_parse(doc);
    assert_non_null(f->obj);
    struct telo_err err;
    if (session_spec_parse(f->obj, &f->s, &err) != 0)
        fail_msg("session_spec_parse: %s", err.msg);
}

static void setup(struct fixture *f, const char *spec)
{
    setup_named(f, "hello", spec);
}

static void teardown(struct fixture *f)
{
    session_spec_release(&f->s);
    json_object_put(f->obj);
    session_config_free(f->cfg);
}

static void set_cfg(char **field, const char *value)
{
    free(*field);
    *field = value ? strdup(value) : NULL;
}

#define CM_SPEC "{\"entry\":\"app/telo.yaml\",\"bundle\":{\"configMap\":{\"name\":\"hello-app\"}}"

/* The value at a dotted path; "name[2]" indexes an array. */
static struct json_object *at(struct json_object *o, const char *path)
{
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        snprintf(key, sizeof(key), "%.*s", (int)n, path);
        char *bracket = strchr(key, '[');
        int index = -1;
        if (bracket) {
            index = atoi(bracket + 1);
            *bracket = '\0';
        }
        struct json_object *next = NULL;
        if (*key && !json_object_object_get_ex(o, key, &next))
            return NULL;
        if (!*key)
            next = o;
        if (index >= 0) {
            if (!json_object_is_type(next, json_type_array) ||
                (size_t)index >= json_object_array_length(next))
                return NULL;
            next = json_object_array_get_idx(next, (size_t)index);
        }
        o = next;
        path += n + (path[n] == '.');
    }
    return o;
}

static const char *text(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static int flag(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    assert_non_null(v);
    assert_true(json_object_is_type(v, json_type_boolean));
    return json_object_get_boolean(v);
}

static size_t length(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    return v ? json_object_array_length(v) : 0;
}

/* The env entry named name in a container, or NULL; *index gets its position. */
static struct json_object *env_var(struct json_object *container, const char *name, int *index)
{
    struct json_object *env = at(container, "env");
    for (size_t i = 0; env && i < json_object_array_length(env); i++) {
        struct json_object *e = json_object_array_get_idx(env, i);
        if (strcmp(text(e, "name"), name) == 0) {
            if (index)
                *index = (int)i;
            return e;
        }
    }
    return NULL;
}

/* --- the pod ----------------------------------------------------------------------------- */

static void pod_meets_pod_security_restricted(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC "}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "telorun/node:latest-slim");
    assert_non_null(pod);
    assert_string_equal(text(pod, "apiVersion"), "v1");
    assert_string_equal(text(pod, "kind"), "Pod");
    assert_true(flag(pod, "spec.securityContext.runAsNonRoot"));
    assert_int_equal(json_object_get_int(at(pod, "spec.securityContext.runAsUser")), 1000);
    assert_int_equal(json_object_get_int(at(pod, "spec.securityContext.runAsGroup")), 1000);
    assert_int_equal(json_object_get_int(at(pod, "spec.securityContext.fsGroup")), 1000);
    assert_string_equal(text(pod, "spec.securityContext.seccompProfile.type"), "RuntimeDefault");
    assert_false(flag(pod, "spec.automountServiceAccountToken"));
    assert_string_equal(text(pod, "spec.restartPolicy"), "Never");
    assert_null(at(pod, "spec.hostNetwork"));
    assert_null(at(pod, "spec.hostPID"));
    const char *lists[] = {"spec.containers", "spec.initContainers"};
    for (int l = 0; l < 2; l++) {
        assert_int_equal(length(pod, lists[l]), 1);
        struct json_object *c = json_object_array_get_idx(at(pod, lists[l]), 0);
        assert_false(flag(c, "securityContext.allowPrivilegeEscalation"));
        assert_true(flag(c, "securityContext.runAsNonRoot"));
        assert_true(flag(c, "securityContext.readOnlyRootFilesystem"));
        assert_int_equal(length(c, "securityContext.capabilities.drop"), 1);
        assert_string_equal(text(c, "securityContext.capabilities.drop[0]"), "ALL");
        assert_null(at(c, "securityContext.capabilities.add"));
        assert_null(at(c, "securityContext.privileged"));
    }
    /* Every volume is an emptyDir or the bundle ConfigMap: nothing from the host. */
    struct json_object *volumes = at(pod, "spec.volumes");
    for (size_t i = 0; i < json_object_array_length(volumes); i++) {
        struct json_object *v = json_object_array_get_idx(volumes, i);
        assert_true(at(v, "emptyDir") || at(v, "configMap"));
        assert_null(at(v, "hostPath"));
    }
    json_object_put(pod);
    teardown(&f);
}

static void pod_identity_labels_and_owner(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC "}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_string_equal(text(pod, "metadata.name"), "telo-run-hello");
    assert_string_equal(text(pod, "metadata.namespace"), "demo");
    struct json_object *labels = at(pod, "metadata.labels");
    struct json_object *v = NULL;
    assert_true(json_object_object_get_ex(labels, "app.kubernetes.io/managed-by", &v));
    assert_string_equal(json_object_get_string(v), "telo-operator");
    assert_true(json_object_object_get_ex(labels, "telo.run/session", &v));
    assert_string_equal(json_object_get_string(v), "hello");
    assert_int_equal(length(pod, "metadata.ownerReferences"), 1);
    struct json_object *owner = at(pod, "metadata.ownerReferences[0]");
    assert_string_equal(text(owner, "apiVersion"), "telo.run/v1alpha1");
    assert_string_equal(text(owner, "kind"), "TeloSession");
    assert_string_equal(text(owner, "name"), "hello");
    assert_string_equal(text(owner, "uid"), UID);
    assert_true(flag(owner, "controller"));
    assert_true(flag(owner, "blockOwnerDeletion"));
    json_object_put(pod);

    /* The managed-by value follows the configuration. */
    set_cfg(&f.cfg->managed_by, "telo-staging");
    pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_true(
        json_object_object_get_ex(at(pod, "metadata.labels"), "app.kubernetes.io/managed-by", &v));
    assert_string_equal(json_object_get_string(v), "telo-staging");
    json_object_put(pod);
    teardown(&f);
}

static void command_runs_the_entry_without_cache_writes(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC "}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *c = at(pod, "spec.containers[0]");
    assert_string_equal(text(c, "name"), "session");
    assert_string_equal(text(c, "image"), "img");
    assert_string_equal(text(c, "imagePullPolicy"), "IfNotPresent");
    assert_string_equal(text(c, "workingDir"), "/work");
    assert_int_equal(length(c, "command"), 4);
    assert_string_equal(text(c, "command[0]"), "telo");
    assert_string_equal(text(c, "command[1]"), "run");
    assert_string_equal(text(c, "command[2]"), "/app/app/telo.yaml");
    assert_string_equal(text(c, "command[3]"), "--no-cache-write");
    assert_true(flag(c, "stdin"));
    assert_true(flag(c, "tty"));
    assert_null(at(c, "ports"));
    json_object_put(pod);
    teardown(&f);

    setup(&f, CM_SPEC ",\"inspect\":true,\"pullPolicy\":\"Always\"}");
    pod = session_desired_pod(&f.s, f.cfg, "img");
    c = at(pod, "spec.containers[0]");
    assert_int_equal(length(c, "command"), 7);
    assert_string_equal(text(c, "command[4]"), "--inspect");
    assert_string_equal(text(c, "command[5]"), "0.0.0.0:9230");
    assert_string_equal(text(c, "command[6]"), "--no-open");
    assert_string_equal(text(c, "imagePullPolicy"), "Always");
    json_object_put(pod);
    teardown(&f);
}

static void deadline_is_the_clamped_ttl(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC "}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_int_equal(json_object_get_int64(at(pod, "spec.activeDeadlineSeconds")), 21600);
    json_object_put(pod);
    teardown(&f);

    setup(&f, CM_SPEC ",\"ttlSeconds\":600}");
    pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_int_equal(json_object_get_int64(at(pod, "spec.activeDeadlineSeconds")), 600);
    json_object_put(pod);
    teardown(&f);

    setup(&f, CM_SPEC ",\"ttlSeconds\":999999}");
    pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_int_equal(json_object_get_int64(at(pod, "spec.activeDeadlineSeconds")), 21600);
    json_object_put(pod);
    f.cfg->max_ttl_seconds = 3600;
    pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_int_equal(json_object_get_int64(at(pod, "spec.activeDeadlineSeconds")), 3600);
    json_object_put(pod);
    teardown(&f);
}

/* The resources of the session container: limits and requests, both equal to want. */
static void expect_resources(struct json_object *pod, const char *cpu, const char *memory,
                             const char *storage)
{
    const char *kinds[] = {"limits", "requests"};
    const char *containers[] = {"spec.containers[0]", "spec.initContainers[0]"};
    for (int c = 0; c < 2; c++) {
        struct json_object *res = at(at(pod, containers[c]), "resources");
        if (!res)
            continue;
        for (int k = 0; k < 2; k++) {
            struct json_object *r = at(res, kinds[k]);
            assert_string_equal(text(r, "cpu"), cpu);
            assert_string_equal(text(r, "memory"), memory);
            assert_string_equal(text(r, "ephemeral-storage"), storage);
        }
    }
}

/* The pod of a session whose spec is CM_SPEC followed by spec_tail has these resources. */
static void spec_gives_resources(const char *spec_tail, const char *cpu, const char *memory,
                                 const char *storage)
{
    struct fixture f;
    char spec[512];
    snprintf(spec, sizeof(spec), "%s%s", CM_SPEC, spec_tail);
    setup(&f, spec);
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    expect_resources(pod, cpu, memory, storage);
    json_object_put(pod);
    teardown(&f);
}

static void limits_are_clamped_to_the_ceilings(void **state)
{
    (void)state;
    /* Unset: the ceilings. */
    spec_gives_resources("}", "500m", "512Mi", "1Gi");
    /* Below: kept as written. */
    spec_gives_resources(",\"resources\":{\"cpu\":\"0.25\",\"memory\":\"256M\","
                         "\"ephemeralStorage\":\"100Mi\"}}",
                         "0.25", "256M", "100Mi");
    /* Above: the ceiling, never raised. */
    spec_gives_resources(",\"resources\":{\"cpu\":\"2\",\"memory\":\"1Gi\","
                         "\"ephemeralStorage\":\"10G\"}}",
                         "500m", "512Mi", "1Gi");
    /* Equal: kept. Unparseable: the ceiling. */
    spec_gives_resources(",\"resources\":{\"cpu\":\"500m\",\"memory\":\"lots\","
                         "\"ephemeralStorage\":\"1Gi\"}}",
                         "500m", "512Mi", "1Gi");
    /* An exponent is a quantity too: 2e-1 is 200m, 5e8 is 500 MB, under 512Mi. */
    spec_gives_resources(",\"resources\":{\"cpu\":\"2e-1\",\"memory\":\"5e8\"}}", "2e-1", "5e8",
                         "1Gi");
}

/* The CRD marks the quantities x-kubernetes-int-or-string: a JSON integer is the quantity's text,
 * not an absent field (which got the pod the ceiling, 512Mi, for 256Mi asked). */
static void integer_quantities_are_quantities(void **state)
{
    (void)state;
    spec_gives_resources(",\"resources\":{\"memory\":268435456,\"ephemeralStorage\":1000}}", "500m",
                         "268435456", "1000");
    /* Above the ceiling or not positive: the ceiling, as for the same text in a string. */
    spec_gives_resources(",\"resources\":{\"cpu\":2,\"memory\":-5}}", "500m", "512Mi", "1Gi");
}

static void init_container_gets_the_url_through_env(void **state)
{
    (void)state;
    struct fixture f;
    /* A URL that would break out of a shell string if it were spliced into the script. */
    setup(&f, "{\"entry\":\"main.yaml\",\"bundle\":{\"url\":{\"url\":\"https://example.com/"
              "a.tgz?x=\\\"$(reboot)\\\";`id`\",\"sha256\":\""
              "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}}}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *init = at(pod, "spec.initContainers[0]");
    assert_string_equal(text(init, "name"), "fetch-bundle");
    assert_string_equal(text(init, "image"), "busybox:stable");
    assert_string_equal(text(init, "command[0]"), "sh");
    assert_string_equal(text(init, "command[1]"), "-c");
    const char *script = text(init, "command[2]");
    assert_non_null(strstr(script, "\"$BUNDLE_URL\""));
    assert_non_null(strstr(script, "$BUNDLE_SHA256"));
    assert_null(strstr(script, "example.com"));
    assert_null(strstr(script, "0123456789abcdef"));
    struct json_object *url = env_var(init, "BUNDLE_URL", NULL);
    assert_non_null(url);
    assert_string_equal(text(url, "value"), "https://example.com/a.tgz?x=\"$(reboot)\";`id`");
    assert_string_equal(text(env_var(init, "BUNDLE_SHA256", NULL), "value"),
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    /* Bounded by timeout(1), 30 s short of the 120 s start deadline: busybox 1.35's
     * `wget -T` crashes on every download. */
    assert_non_null(strstr(script, "timeout \"$BUNDLE_TIMEOUT\" wget "));
    assert_null(strstr(script, "-T"));
    assert_string_equal(text(env_var(init, "BUNDLE_TIMEOUT", NULL), "value"), "90");
    /* No ConfigMap volume for a URL bundle. */
    struct json_object *volumes = at(pod, "spec.volumes");
    for (size_t i = 0; i < json_object_array_length(volumes); i++)
        assert_null(at(json_object_array_get_idx(volumes, i), "configMap"));
    assert_string_equal(text(pod, "spec.containers[0].command[2]"), "/app/main.yaml");
    json_object_put(pod);
    /* Short deadlines keep 15 s for what comes before the download; the download always gets
     * a few seconds. */
    f.cfg->start_deadline_seconds = 40;
    assert_int_equal(session_download_timeout(f.cfg), 25);
    f.cfg->start_deadline_seconds = 15;
    assert_int_equal(session_download_timeout(f.cfg), 5);
    f.cfg->start_deadline_seconds = 600;
    assert_int_equal(session_download_timeout(f.cfg), 450);
    teardown(&f);
}

static void init_container_reads_the_configmap_read_only(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, "{\"entry\":\"app/telo.yaml\",\"bundle\":{\"configMap\":{\"name\":\"hello-app\","
              "\"key\":\"app.tgz\"}}}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *init = at(pod, "spec.initContainers[0]");
    assert_string_equal(text(env_var(init, "BUNDLE_SOURCE", NULL), "value"), "hello-app");
    assert_null(strstr(text(init, "command[2]"), "hello-app"));
    int found = 0;
    struct json_object *mounts = at(init, "volumeMounts");
    for (size_t i = 0; i < json_object_array_length(mounts); i++) {
        struct json_object *m = json_object_array_get_idx(mounts, i);
        if (strcmp(text(m, "name"), "bundle") == 0) {
            assert_string_equal(text(m, "mountPath"), "/bundle");
            assert_true(flag(m, "readOnly"));
            found = 1;
        }
    }
    assert_true(found);
    struct json_object *volumes = at(pod, "spec.volumes");
    found = 0;
    for (size_t i = 0; i < json_object_array_length(volumes); i++) {
        struct json_object *v = json_object_array_get_idx(volumes, i);
        if (at(v, "configMap")) {
            assert_string_equal(text(v, "configMap.name"), "hello-app");
            assert_string_equal(text(v, "configMap.items[0].key"), "app.tgz");
            assert_string_equal(text(v, "configMap.items[0].path"), "bundle.tgz");
            found = 1;
        }
    }
    assert_true(found);
    json_object_put(pod);
    teardown(&f);
}

static void self_contained_runs_the_image_entrypoint(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, "{\"selfContained\":true,\"image\":\"ghcr.io/acme/app:1\"}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, session_image(&f.s, f.cfg));
    assert_null(at(pod, "spec.initContainers"));
    struct json_object *c = at(pod, "spec.containers[0]");
    assert_string_equal(text(c, "image"), "ghcr.io/acme/app:1");
    assert_null(at(c, "command"));
    assert_null(at(c, "args"));
    assert_null(at(c, "workingDir"));
    /* Its own image may write to its root filesystem; the rest of "restricted" holds. */
    assert_false(flag(c, "securityContext.readOnlyRootFilesystem"));
    assert_false(flag(c, "securityContext.allowPrivilegeEscalation"));
    assert_true(flag(c, "securityContext.runAsNonRoot"));
    assert_string_equal(text(c, "securityContext.capabilities.drop[0]"), "ALL");
    assert_string_equal(text(pod, "spec.securityContext.seccompProfile.type"), "RuntimeDefault");
    assert_null(env_var(c, "TELO_CACHE_DIR", NULL));
    assert_null(env_var(c, "HOME", NULL));
    assert_non_null(env_var(c, "FORCE_COLOR", NULL));
    json_object_put(pod);
    teardown(&f);
}

static void env_order_user_then_operator(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC ",\"env\":[{\"name\":\"API\",\"value\":\"x\"},{\"name\":\"TOKEN\","
                      "\"valueFrom\":{\"secretKeyRef\":{\"name\":\"s\",\"key\":\"k\"}}}]}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *env = at(pod, "spec.containers[0].env");
    const char *want[] = {
        "API",        "TOKEN", "TELO_REGISTRY_URL", "TELO_CACHE_DIR", "HOME", "npm_config_cache",
        "FORCE_COLOR"};
    assert_int_equal(json_object_array_length(env), 7);
    for (size_t i = 0; i < 7; i++)
        assert_string_equal(text(json_object_array_get_idx(env, i), "name"), want[i]);
    assert_string_equal(text(env, "[1].valueFrom.secretKeyRef.name"), "s");
    assert_string_equal(text(env, "[2].value"), "https://registry.telo.run");
    assert_string_equal(text(env, "[3].value"), "/telo-cache");
    assert_string_equal(text(env, "[4].value"), "/home/telo");
    assert_string_equal(text(env, "[5].value"), "/home/telo/.npm");
    assert_string_equal(text(env, "[6].value"), "1");
    json_object_put(pod);
    teardown(&f);
}

static void registry_url_precedence(void **state)
{
    (void)state;
    struct fixture f;
    int index = -1;
    /* The user's own TELO_REGISTRY_URL wins and is not repeated. */
    setup(&f, CM_SPEC ",\"registryUrl\":\"https://spec.example\",\"env\":[{\"name\":"
                      "\"TELO_REGISTRY_URL\",\"value\":\"https://user.example\"}]}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *c = at(pod, "spec.containers[0]");
    assert_string_equal(text(env_var(c, "TELO_REGISTRY_URL", &index), "value"),
                        "https://user.example");
    assert_int_equal(index, 0);
    assert_int_equal(length(c, "env"), 5);
    json_object_put(pod);
    teardown(&f);
    /* Then spec.registryUrl, then the operator's. */
    setup(&f, CM_SPEC ",\"registryUrl\":\"https://spec.example\"}");
    pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_string_equal(
        text(env_var(at(pod, "spec.containers[0]"), "TELO_REGISTRY_URL", NULL), "value"),
        "https://spec.example");
    json_object_put(pod);
    set_cfg(&f.cfg->registry_url, NULL);
    teardown(&f);
    setup(&f, CM_SPEC "}");
    set_cfg(&f.cfg->registry_url, NULL);
    pod = session_desired_pod(&f.s, f.cfg, "img");
    assert_null(env_var(at(pod, "spec.containers[0]"), "TELO_REGISTRY_URL", NULL));
    json_object_put(pod);
    teardown(&f);
}

/* env is a list keyed by name: server-side apply refuses a pod whose env names a variable
 * twice, so a user's HOME or FORCE_COLOR must not be followed by the operator's. */
static void env_names_are_unique(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC ",\"env\":[{\"name\":\"FORCE_COLOR\",\"value\":\"0\"},{\"name\":\"HOME\","
                      "\"value\":\"/tmp\"},{\"name\":\"TELO_CACHE_DIR\",\"value\":\"/c\"},"
                      "{\"name\":\"npm_config_cache\",\"value\":\"/n\"}]}");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *env = at(pod, "spec.containers[0].env");
    for (size_t i = 0; i < json_object_array_length(env); i++)
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(text(json_object_array_get_idx(env, i), "name"),
                                    text(json_object_array_get_idx(env, j), "name"));
    assert_string_equal(text(env_var(at(pod, "spec.containers[0]"), "FORCE_COLOR", NULL), "value"),
                        "0");
    json_object_put(pod);
    teardown(&f);
}

static void ports_placement_and_pull_secret(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC ",\"ports\":[{\"port\":8080},{\"port\":8080,\"protocol\":\"UDP\"}]}");
    set_cfg(&f.cfg->runtime_class, "gvisor");
    set_cfg(&f.cfg->image_pull_secret, "regcred");
    f.cfg->node_selector = json_tokener_parse("{\"telo.run/node\":\"real\"}");
    f.cfg->tolerations = json_tokener_parse(
        "[{\"key\":\"telo.run/sessions\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]");
    struct json_object *pod = session_desired_pod(&f.s, f.cfg, "img");
    struct json_object *c = at(pod, "spec.containers[0]");
    assert_int_equal(length(c, "ports"), 2);
    assert_int_equal(json_object_get_int(at(c, "ports[0].containerPort")), 8080);
    /* Named for the chart's NetworkPolicy: the operator's probes may reach it (issue 17). */
    assert_string_equal(json_object_get_string(at(c, "ports[0].name")), "telo-tcp-0");
    assert_string_equal(text(c, "ports[0].protocol"), "TCP");
    assert_string_equal(text(c, "ports[1].protocol"), "UDP");
    assert_null(at(c, "ports[0].hostPort"));
    assert_string_equal(text(pod, "spec.runtimeClassName"), "gvisor");
    assert_string_equal(text(pod, "spec.imagePullSecrets[0].name"), "regcred");
    assert_true(json_object_equal(at(pod, "spec.nodeSelector"), f.cfg->node_selector));
    assert_true(json_object_equal(at(pod, "spec.tolerations"), f.cfg->tolerations));
    json_object_put(pod);
    teardown(&f);
}

/* --- Service and Ingress ----------------------------------------------------------------- */

static void service_port_names_are_unique_across_protocols(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC ",\"ports\":[{\"port\":53,\"protocol\":\"UDP\"},{\"port\":53},"
                      "{\"port\":8080,\"name\":\"web\"}]}");
    struct json_object *svc = session_desired_service(&f.s, f.cfg);
    assert_non_null(svc);
    assert_string_equal(text(svc, "kind"), "Service");
    assert_string_equal(text(svc, "metadata.name"), "telo-run-hello");
    assert_true(flag(svc, "metadata.ownerReferences[0].controller"));
    struct json_object *v = NULL;
    assert_true(json_object_object_get_ex(at(svc, "spec.selector"), "telo.run/session", &v));
    assert_string_equal(json_object_get_string(v), "hello");
    struct json_object *ports = at(svc, "spec.ports");
    assert_int_equal(json_object_array_length(ports), 3);
    assert_string_equal(text(ports, "[0].name"), "p53-udp");
    assert_string_equal(text(ports, "[0].protocol"), "UDP");
    assert_string_equal(text(ports, "[1].name"), "p53");
    assert_string_equal(text(ports, "[1].protocol"), "TCP");
    assert_string_equal(text(ports, "[2].name"), "p8080");
    assert_int_equal(json_object_get_int(at(ports, "[2].port")), 8080);
    assert_int_equal(json_object_get_int(at(ports, "[2].targetPort")), 8080);
    json_object_put(svc);
    teardown(&f);

    setup(&f, CM_SPEC "}");
    assert_null(session_desired_service(&f.s, f.cfg));
    teardown(&f);
}

static void ingress_one_rule_per_tcp_port(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC ",\"ports\":[{\"port\":8080},{\"port\":53,\"protocol\":\"UDP\"},"
                      "{\"port\":9000}]}");
    /* No base domain: no Ingress. */
    assert_null(session_desired_ingress(&f.s, f.cfg));
    set_cfg(&f.cfg->ingress_base_domain, "sessions.example.com");
    struct json_object *ing = session_desired_ingress(&f.s, f.cfg);
    assert_non_null(ing);
    assert_string_equal(text(ing, "apiVersion"), "networking.k8s.io/v1");
    assert_string_equal(text(ing, "kind"), "Ingress");
    assert_string_equal(text(ing, "metadata.name"), "telo-run-hello");
    assert_true(flag(ing, "metadata.ownerReferences[0].blockOwnerDeletion"));
    assert_int_equal(length(ing, "spec.rules"), 2);
    assert_string_equal(text(ing, "spec.rules[0].host"),
                        "8080-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    assert_string_equal(text(ing, "spec.rules[1].host"),
                        "9000-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    struct json_object *path = at(ing, "spec.rules[1].http.paths[0]");
    assert_string_equal(text(path, "path"), "/");
    assert_string_equal(text(path, "pathType"), "Prefix");
    assert_string_equal(text(path, "backend.service.name"), "telo-run-hello");
    assert_int_equal(json_object_get_int(at(path, "backend.service.port.number")), 9000);
    assert_null(at(ing, "spec.tls"));
    assert_null(at(ing, "spec.ingressClassName"));
    json_object_put(ing);

    set_cfg(&f.cfg->ingress_class, "nginx");
    set_cfg(&f.cfg->ingress_tls_secret, "sessions-tls");
    ing = session_desired_ingress(&f.s, f.cfg);
    assert_string_equal(text(ing, "spec.ingressClassName"), "nginx");
    assert_int_equal(length(ing, "spec.tls"), 1);
    assert_string_equal(text(ing, "spec.tls[0].secretName"), "sessions-tls");
    assert_int_equal(length(ing, "spec.tls[0].hosts"), 2);
    assert_string_equal(text(ing, "spec.tls[0].hosts[0]"),
                        "8080-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    assert_string_equal(text(ing, "spec.tls[0].hosts[1]"),
                        "9000-hello-demo-cjouygjdnwlb5vco.sessions.example.com");
    json_object_put(ing);
    teardown(&f);

    /* UDP only: a Service, no Ingress. */
    setup(&f, CM_SPEC ",\"ports\":[{\"port\":53,\"protocol\":\"UDP\"}]}");
    set_cfg(&f.cfg->ingress_base_domain, "sessions.example.com");
    assert_null(session_desired_ingress(&f.s, f.cfg));
    struct json_object *svc = session_desired_service(&f.s, f.cfg);
    assert_non_null(svc);
    json_object_put(svc);
    teardown(&f);
}

static void secret_holds_the_token(void **state)
{
    (void)state;
    struct fixture f;
    setup(&f, CM_SPEC "}");
    char token[65];
    memset(token, 'a', 64);
    token[64] = '\0';
    struct json_object *secret = session_desired_secret(&f.s, f.cfg, token);
    assert_string_equal(text(secret, "kind"), "Secret");
    assert_string_equal(text(secret, "metadata.name"), "telo-run-hello-attach");
    assert_string_equal(text(secret, "type"), "Opaque");
    assert_string_equal(text(secret, "stringData.token"), token);
    assert_true(flag(secret, "metadata.ownerReferences[0].controller"));
    json_object_put(secret);
    teardown(&f);
}

/* --- names ------------------------------------------------------------------------------- */

static int dns_label(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 63 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n &&
           s[0] != '-' && s[n - 1] != '-';
}

static void long_names_are_hashed_into_dns_labels(void **state)
{
    (void)state;
    struct fixture f;
    char name[64];
    /* 54 characters: "telo-run-" + name is exactly 63. */
    memset(name, 'a', 54);
    name[54] = '\0';
    setup_named(&f, name, CM_SPEC ",\"ports\":[{\"port\":65535}]}");
    char child[64], id[64];
    session_child_name(&f.s, child, sizeof(child));
    assert_int_equal(strlen(child), 63);
    assert_memory_equal(child, "telo-run-", 9);
    assert_string_equal(child + 9, name);
    teardown(&f);

    /* 63 characters: hashed, still unique and stable. */
    memset(name, 'a', 63);
    name[63] = '\0';
    setup_named(&f, name, CM_SPEC ",\"ports\":[{\"port\":65535}]}");
    session_child_name(&f.s, child, sizeof(child));
    assert_true(dns_label(child));
    assert_true(strlen(child) <= 63);
    char again[64];
    session_child_name(&f.s, again, sizeof(again));
    assert_string_equal(child, again);
    session_host_id(&f.s, id, sizeof(id));
    char host[80];
    snprintf(host, sizeof(host), "65535-%s", id);
    assert_true(dns_label(host));
    set_cfg(&f.cfg->ingress_base_domain, "s.example.com");
    struct json_object *ing = session_desired_ingress(&f.s, f.cfg);
    assert_string_equal(text(ing, "metadata.name"), child);
    char want[120];
    snprintf(want, sizeof(want), "%s.s.example.com", host);
    assert_string_equal(text(ing, "spec.rules[0].host"), want);
    json_object_put(ing);
    teardown(&f);

    /* Two long names that share their first 42 characters still differ. */
    char other[64];
    memcpy(other, name, sizeof(other));
    other[62] = 'b';
    setup_named(&f, other, CM_SPEC "}");
    session_child_name(&f.s, again, sizeof(again));
    assert_string_not_equal(child, again);
    assert_true(dns_label(again));
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pod_meets_pod_security_restricted),
        cmocka_unit_test(pod_identity_labels_and_owner),
        cmocka_unit_test(command_runs_the_entry_without_cache_writes),
        cmocka_unit_test(deadline_is_the_clamped_ttl),
        cmocka_unit_test(limits_are_clamped_to_the_ceilings),
        cmocka_unit_test(integer_quantities_are_quantities),
        cmocka_unit_test(init_container_gets_the_url_through_env),
        cmocka_unit_test(init_container_reads_the_configmap_read_only),
        cmocka_unit_test(self_contained_runs_the_image_entrypoint),
        cmocka_unit_test(env_order_user_then_operator),
        cmocka_unit_test(registry_url_precedence),
        cmocka_unit_test(env_names_are_unique),
        cmocka_unit_test(ports_placement_and_pull_secret),
        cmocka_unit_test(service_port_names_are_unique_across_protocols),
        cmocka_unit_test(ingress_one_rule_per_tcp_port),
        cmocka_unit_test(secret_holds_the_token),
        cmocka_unit_test(long_names_are_hashed_into_dns_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

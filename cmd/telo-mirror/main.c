/* telo-mirror: a test controller on pkg/controller. For every ConfigMap labelled
 * mirror.telo.run/source=true it keeps a ConfigMap <name>-mirror with the same data, owned by
 * the source. It exists to prove the controller runtime end to end (restarts, relists, leader
 * election); it is not part of the product. */
#include "controller/leader.h"
#include "controller/manager.h"
#include "kube/config.h"
#include "kube/rest.h"
#include "kube/transport.h"
#include "util/argv.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/memtune.h"

#include <ev.h>
#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SOURCE_LABEL  "mirror.telo.run/source"
#define MIRROR_LABEL  "mirror.telo.run/mirror-of"
#define FIELD_MANAGER "telo-mirror"

struct app {
    struct ev_loop *loop;
    struct kube_transport *t;
    struct ctrl_manager *m;
    struct ctrl_informer *sources, *mirrors;
    const char *namespace;
};

struct pending {
    struct ctrl_reconcile *rec;
    char mirror[512];
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: telo-mirror [--kubeconfig FILE] [-n NAMESPACE] [--workers N]\n"
        "                   [--leader-elect --lease-namespace NS --identity ID]\n"
        "                   [--leader-elect-lease-duration D] [--leader-elect-renew-deadline D]\n"
        "                   [--leader-elect-retry-period D]\n"
        "\n"
        "Mirrors every ConfigMap labelled " SOURCE_LABEL "=true into <name>-mirror.\n"
        "Prints \"APPLY <namespace>/<name>\" for each write. A test controller.\n");
}

static struct json_object *parse_cached(const struct cache_store *store, const char *key)
{
    const struct cache_object *o = cache_store_get(store, key);
    return o ? cache_object_parse(o) : NULL;
}

/* Whether the cached mirror already has the source's data and is owned by it. */
static int mirror_current(struct json_object *mirror, struct json_object *data, const char *uid)
{
    if (!mirror)
        return 0;
    struct json_object *mdata = jget(mirror, "data");
    if (!json_object_equal(mdata, data) && !(mdata == NULL && json_object_object_length(data) == 0))
        return 0;
    struct json_object *refs = jget_array(jget(mirror, "metadata"), "ownerReferences");
    for (size_t i = 0; refs && i < json_object_array_length(refs); i++) {
        const char *ref_uid = jget_string(json_object_array_get_idx(refs, i), "uid");
        if (ref_uid && strcmp(ref_uid, uid) == 0)
            return 1;
    }
    return 0;
}

static void on_applied(const struct kube_result *res, void *ud)
{
    struct pending *p = ud;
    struct ctrl_result r = {.outcome = CTRL_SUCCESS};
    if (res->rc < 0) {
        r.outcome = CTRL_ERROR;
        r.message = res->err ? res->err->msg : "apply failed";
    } else {
        printf("APPLY %s\n", p->mirror);
    }
    ctrl_reconcile_finish(p->rec, &r);
    free(p);
}

static void reconcile(void *ud, struct ctrl_reconcile *rec, const char *key)
{
    struct app *app = ud;
    struct ctrl_result done = {.outcome = CTRL_SUCCESS};
    struct json_object *source = parse_cached(ctrl_informer_store(app->sources), key);
    if (!source) {
        /* Gone: the garbage collector removes the mirror through its owner reference. */
        ctrl_reconcile_finish(rec, &done);
        return;
    }
    struct json_object *meta = jget(source, "metadata");
    const char *ns = jget_string(meta, "namespace");
    const char *name = jget_string(meta, "name");
    const char *uid = jget_string(meta, "uid");
    struct json_object *data = jget_object(source, "data");
    if (!ns || !name || !uid) {
        json_object_put(source);
        ctrl_reconcile_finish(rec, &done);
        return;
    }
    struct json_object *empty = json_object_new_object();
    if (!data)
        data = empty;

    struct pending *p = calloc(1, sizeof(*p));
    snprintf(p->mirror, sizeof(p->mirror), "%s/%s-mirror", ns, name);
    struct json_object *mirror = parse_cached(ctrl_informer_store(app->mirrors), p->mirror);
    int current = mirror_current(mirror, data, uid);
    json_object_put(mirror);
    if (current) {
        /* Steady state makes no write. */
        free(p);
        json_object_put(empty);
        json_object_put(source);
        ctrl_reconcile_finish(rec, &done);
        return;
    }
    p->rec = rec;
    char mirror_name[300];
    snprintf(mirror_name, sizeof(mirror_name), "%s-mirror", name);
    struct json_object *desired = json_object_new_object();
    struct json_object *dmeta = json_object_new_object();
    struct json_object *labels = json_object_new_object();
    struct json_object *owner = json_object_new_object();
    struct json_object *owners = json_object_new_array();
    json_object_object_add(desired, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(desired, "kind", json_object_new_string("ConfigMap"));
    json_object_object_add(dmeta, "name", json_object_new_string(mirror_name));
    json_object_object_add(dmeta, "namespace", json_object_new_string(ns));
    json_object_object_add(labels, MIRROR_LABEL, json_object_new_string(name));
    json_object_object_add(dmeta, "labels", labels);
    json_object_object_add(owner, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(owner, "kind", json_object_new_string("ConfigMap"));
    json_object_object_add(owner, "name", json_object_new_string(name));
    json_object_object_add(owner, "uid", json_object_new_string(uid));
    json_object_object_add(owner, "controller", json_object_new_boolean(1));
    json_object_array_add(owners, owner);
    json_object_object_add(dmeta, "ownerReferences", owners);
    json_object_object_add(desired, "metadata", dmeta);
    json_object_object_add(desired, "data", json_object_get(data));
    size_t len;
    const char *body = json_object_to_json_string_length(
        desired, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    struct kube_ref ref = {
        .version = "v1", .resource = "configmaps", .namespace = ns, .name = mirror_name};
    struct kube_write_opts wo = {.field_manager = FIELD_MANAGER, .force = 1};
    struct telo_err err;
    struct kube_call *call = kube_rest_apply(app->t, &ref, body, len, &wo, on_applied, p, &err);
    json_object_put(desired);
    json_object_put(empty);
    json_object_put(source);
    if (!call) {
        free(p);
        struct ctrl_result failed = {.outcome = CTRL_ERROR, .message = err.msg};
        ctrl_reconcile_finish(rec, &failed);
    }
}

int main(int argc, char **argv)
{
    util_memtune();
    struct app app;
    memset(&app, 0, sizeof(app));
    struct util_kube_args kube = {0};
    const char *lease_namespace = NULL, *identity = NULL;
    int workers = 4, leader_elect = 0;
    struct leader_timing timing = {0};
    struct telo_err err;
    for (int i = 1; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        int timing_flag =
            arg.value != NULL ? leader_timing_flag(&timing, arg.name, arg.value, &err) : 0;
        if (timing_flag < 0) {
            fprintf(stderr, "telo-mirror: %s\n", err.msg);
            return 2;
        }
        if (timing_flag) {
            util_arg_take(&arg, &i);
            continue;
        }
        if (strcmp(arg.name, "--help") == 0 || strcmp(arg.name, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (util_arg_kube(&arg, &i, &kube) > 0) {
            /* --kubeconfig, --context, -n: read into kube */
        } else if (arg.value != NULL && strcmp(arg.name, "--workers") == 0) {
            workers = atoi(util_arg_take(&arg, &i));
        } else if (strcmp(arg.name, "--leader-elect") == 0) {
            leader_elect = 1;
        } else if (arg.value != NULL && strcmp(arg.name, "--lease-namespace") == 0) {
            lease_namespace = util_arg_take(&arg, &i);
        } else if (arg.value != NULL && strcmp(arg.name, "--identity") == 0) {
            identity = util_arg_take(&arg, &i);
        } else {
            fprintf(stderr, "telo-mirror: unknown or incomplete argument '%s'\n", arg.name);
            usage(stderr);
            return 2;
        }
    }
    app.namespace = kube.namespace;
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct kube_config *cfg = NULL;
    if (kube_config_load_env(kube.kubeconfig, kube.context, &cfg, &err) < 0) {
        fprintf(stderr, "telo-mirror: %s\n", err.msg);
        return 1;
    }
    app.loop = ev_default_loop(0);
    /* The identity in the user agent lets tests tell replicas apart in the audit log. */
    char agent[160];
    snprintf(agent, sizeof(agent), "telo-operator/%s telo-mirror/%s", TELO_VERSION,
             identity ? identity : "-");
    struct kube_transport_opts topts = {.user_agent = agent};
    app.t = kube_transport_new(app.loop, cfg, &topts, &err);
    struct ctrl_manager_opts mopts = {.max_concurrent_reconciles = workers, .handle_signals = 1};
    app.m = app.t ? ctrl_manager_new(app.loop, app.t, &mopts) : NULL;
    const struct cache_index_def idx[] = {{"namespace", cache_index_namespace, NULL}};
    struct cache_reflector_config sources = {
        .ref = {.version = "v1", .resource = "configmaps", .namespace = app.namespace},
        .label_selector = SOURCE_LABEL "=true",
        .indexes = idx,
        .nindexes = 1,
    };
    struct cache_reflector_config mirrors = sources;
    mirrors.label_selector = MIRROR_LABEL;
    int status = 1;
    struct ctrl_controller *c = NULL;
    if (app.m && (app.sources = ctrl_manager_add_informer(app.m, "sources", &sources, &err)) &&
        (app.mirrors = ctrl_manager_add_informer(app.m, "mirrors", &mirrors, &err)) &&
        (c = ctrl_manager_add_controller(app.m, "mirror", app.sources, reconcile, &app, &err)) &&
        ctrl_controller_watch_owned(c, app.mirrors, "ConfigMap", &err) == 0 &&
        (!leader_elect ||
         ctrl_manager_enable_leader_election(
             app.m,
             &(struct ctrl_leader_opts){lease_namespace ? lease_namespace : app.namespace,
                                        "telo-mirror", identity ? identity : "telo-mirror", timing},
             &err) == 0) &&
        ctrl_manager_start(app.m, &err) == 0) {
        ev_run(app.loop, 0);
        status = ctrl_manager_error(app.m)[0] ? 1 : 0;
        if (status)
            fprintf(stderr, "telo-mirror: %s\n", ctrl_manager_error(app.m));
    } else {
        fprintf(stderr, "telo-mirror: %s\n", err.msg);
    }
    ctrl_manager_free(app.m);
    kube_transport_free(app.t);
    kube_config_free(cfg);
    ev_loop_destroy(app.loop);
    return status;
}

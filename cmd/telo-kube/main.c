/* telo-kube: a small kubectl-like client over pkg/kube, for development, e2e and benchmarks; not
 * part of the operator's image. */

#include "kube/config.h"
#include "kube/discovery.h"
#include "kube/rest.h"
#include "kube/transport.h"
#include "kube/watch.h"
#include "util/argv.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/yamljson.h"

#include <ev.h>
#include <json.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FILE_BYTES ((size_t)16 << 20)
#define MAX_DOCS       256

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: telo-kube [--kubeconfig FILE] [--context NAME] [-v] COMMAND ...\n"
        "\n"
        "A small client for the API server built on pkg/kube (HTTP/2, one connection).\n"
        "RESOURCE is what kubectl accepts: configmaps, cm, deployments.apps, ...\n"
        "\n"
        "  get RESOURCE NAME [-n NS]                 print the object as JSON\n"
        "  list RESOURCE [-n NS | -A] [-l SEL] [--field-selector SEL] [--limit N]\n"
        "                                            print all pages as one List\n"
        "  watch RESOURCE [NAME] [-n NS | -A] [-l SEL] [--resource-version RV]\n"
        "        [--timeout SECONDS] [--max-events N] [--duration SECONDS] [--rewatch] [--json]\n"
        "                                            one line per event: TYPE ns/name RV\n"
        "                                            (--json: the object), then END reason\n"
        "  apply -f FILE --field-manager NAME [--force] [-n NS]\n"
        "                                            server-side apply every document\n"
        "  create -f FILE [-n NS]                    POST every document\n"
        "  update -f FILE [-n NS]                    PUT every document (its\n"
        "                                            metadata.resourceVersion is the "
        "precondition)\n"
        "  patch RESOURCE NAME -p PATCH [--type merge|json] [-n NS] [--subresource status]\n"
        "  delete RESOURCE NAME [-n NS] [--propagation-policy P] [--grace-period N]\n"
        "        [--uid UID] [--resource-version RV]\n"
        "  stress [--requests N] [--with-watch] [--hold SECONDS] [-n NS]\n"
        "                                            N concurrent GETs (and a watch); prints\n"
        "                                            the connections curl opened as JSON\n"
        "  bench-create -n NS [--count N] [--prefix P]\n"
        "                                            create N ConfigMaps concurrently; prints\n"
        "                                            the wall time as JSON\n"
        "\n"
        "Exit status: 0 success, 1 error, 2 usage, 3 watch ended with Expired (410).\n");
}

/* ---- arguments ---- */

struct args {
    struct util_kube_args kube;
    const char *command;
    const char *pos[4];
    int npos;
    const char *file, *selector, *field_selector, *rv, *field_manager, *patch, *patch_type;
    const char *propagation, *uid, *subresource, *prefix;
    int all_ns, force, rewatch, json, with_watch, verbose;
    long limit, timeout, max_events, grace, requests, count;
    double duration, hold;
};

struct app;
typedef void resolved_fn(struct app *app);

struct app {
    struct ev_loop *loop;
    struct kube_config *cfg;
    struct kube_transport *t;
    struct kube_discovery *disc;
    struct args *a;
    int exit_code;
    /* per-command state */
    struct json_object *docs[MAX_DOCS];
    int ndocs, next_doc;
    struct kube_api_resource res; /* resolved; strings borrowed from the discovery cache */
    char ref_group[128], ref_version[64], ref_resource[128];
    int namespaced;
    resolved_fn *resolved; /* what to do once discovery has answered */
    struct kube_watch *watch;
    char last_rv[128];
    long events;
    ev_timer deadline, rewatch_timer;
    long outstanding, ok, failed;
    ev_tstamp started;
};

static int parse_long(const char *s, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof(*a));
    a->grace = -1;
    a->requests = 200;
    a->count = 2000;
    a->prefix = "bench-";
    a->patch_type = "merge";
    for (int i = 1; i < argc; i++) {
        /* --flag=value as well as --flag value. */
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        const char *s = arg.name, *v = arg.value;
#define TAKE(flag, field)                                                                          \
    if (strcmp(s, flag) == 0) {                                                                    \
        if (v == NULL) {                                                                           \
            fprintf(stderr, "telo-kube: %s needs a value\n", flag);                                \
            return -1;                                                                             \
        }                                                                                          \
        (field) = v;                                                                               \
        i += util_arg_consumed(&arg);                                                              \
        continue;                                                                                  \
    }
#define TAKE_LONG(flag, field)                                                                     \
    if (strcmp(s, flag) == 0) {                                                                    \
        if (v == NULL || parse_long(v, &(field)) != 0) {                                           \
            fprintf(stderr, "telo-kube: %s needs an integer\n", flag);                             \
            return -1;                                                                             \
        }                                                                                          \
        i += util_arg_consumed(&arg);                                                              \
        continue;                                                                                  \
    }
#define FLAG(flag, field)                                                                          \
    if (strcmp(s, flag) == 0) {                                                                    \
        (field) = 1;                                                                               \
        continue;                                                                                  \
    }
        int kube = util_arg_kube(&arg, &i, &a->kube);
        if (kube < 0) {
            fprintf(stderr, "telo-kube: %s needs a value\n", s);
            return -1;
        }
        if (kube > 0)
            continue;
        TAKE("-f", a->file)
        TAKE("--filename", a->file)
        TAKE("-l", a->selector)
        TAKE("--selector", a->selector)
        TAKE("--field-selector", a->field_selector)
        TAKE("--resource-version", a->rv)
        TAKE("--field-manager", a->field_manager)
        TAKE("-p", a->patch)
        TAKE("--patch", a->patch)
        TAKE("--type", a->patch_type)
        TAKE("--propagation-policy", a->propagation)
        TAKE("--uid", a->uid)
        TAKE("--subresource", a->subresource)
        TAKE("--prefix", a->prefix)
        TAKE_LONG("--limit", a->limit)
        TAKE_LONG("--timeout", a->timeout)
        TAKE_LONG("--max-events", a->max_events)
        TAKE_LONG("--grace-period", a->grace)
        TAKE_LONG("--requests", a->requests)
        TAKE_LONG("--count", a->count)
        FLAG("-A", a->all_ns)
        FLAG("--all-namespaces", a->all_ns)
        FLAG("--force", a->force)
        FLAG("--rewatch", a->rewatch)
        FLAG("--json", a->json)
        FLAG("--with-watch", a->with_watch)
        FLAG("-v", a->verbose)
        if (strcmp(s, "--duration") == 0 || strcmp(s, "--hold") == 0) {
            if (v == NULL) {
                fprintf(stderr, "telo-kube: %s needs seconds\n", s);
                return -1;
            }
            *(s[2] == 'd' ? &a->duration : &a->hold) = atof(v);
            i += util_arg_consumed(&arg);
            continue;
        }
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0)
            return 1;
        if (s[0] == '-' && s[1] != '\0') {
            fprintf(stderr, "telo-kube: unknown option '%s'\n", s);
            return -1;
        }
        if (a->command == NULL) {
            a->command = s;
        } else if (a->npos < 4) {
            a->pos[a->npos++] = s;
        } else {
            fprintf(stderr, "telo-kube: too many arguments at '%s'\n", s);
            return -1;
        }
#undef TAKE
#undef TAKE_LONG
#undef FLAG
    }
    if (a->command == NULL)
        return 1;
    return 0;
}

/* ---- output helpers ---- */

static void print_json(struct json_object *obj)
{
    puts(json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
}

static void fail(struct app *app, const char *msg)
{
    fprintf(stderr, "telo-kube: %s\n", msg);
    app->exit_code = 1;
}

/* ---- YAML -> JSON (for -f files): enough of YAML 1.2 core schema for manifests ---- */

static int read_file(const char *path, struct buf *out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL)
        return -1;
    char chunk[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (buf_append(out, chunk, n) != 0) {
            rc = -1;
            break;
        }
    if (f != stdin)
        fclose(f);
    return rc;
}

/* Keeps one document in app->docs; a "...List" kind is expanded into its items. */
static int add_doc(void *ud, struct json_object *doc, int index)
{
    (void)index;
    struct app *app = ud;
    const char *kind = jget_string(doc, "kind");
    struct json_object *items = jget_array(doc, "items");
    size_t klen = kind != NULL ? strlen(kind) : 0;
    if (klen > 4 && strcmp(kind + klen - 4, "List") == 0 && items != NULL) {
        for (size_t i = 0; i < json_object_array_length(items) && app->ndocs < MAX_DOCS; i++)
            app->docs[app->ndocs++] = json_object_get(json_object_array_get_idx(items, i));
    } else if (app->ndocs < MAX_DOCS) {
        app->docs[app->ndocs++] = json_object_get(doc);
    }
    return 0;
}

/* Loads every document of file (YAML stream or JSON) into app->docs; "List" kinds are expanded. */
static int load_docs(struct app *app, const char *path)
{
    struct buf b;
    buf_init(&b, MAX_FILE_BYTES);
    if (read_file(path, &b) != 0 || b.len == 0) {
        fprintf(stderr, "telo-kube: cannot read %s (missing, empty or over 16 MiB)\n", path);
        buf_release(&b);
        return -1;
    }
    struct telo_err err;
    telo_err_clear(&err);
    int rc = yamljson_parse_docs(b.data, b.len, path, add_doc, app, &err);
    buf_release(&b);
    if (rc != 0) {
        fprintf(stderr, "telo-kube: %s\n", err.msg);
        return -1;
    }
    if (app->ndocs == 0) {
        fprintf(stderr, "telo-kube: %s holds no objects\n", path);
        return -1;
    }
    return 0;
}

/* ---- resolution ---- */

/* Discovery answered: keep the resource and go on with app->resolved. */
static void on_resolved(const struct kube_api_resource *res, int rc, const struct telo_err *err,
                        void *ud)
{
    struct app *app = ud;
    if (rc != 0) {
        fail(app, err->msg);
        return;
    }
    snprintf(app->ref_group, sizeof(app->ref_group), "%s", res->group);
    snprintf(app->ref_version, sizeof(app->ref_version), "%s", res->version);
    snprintf(app->ref_resource, sizeof(app->ref_resource), "%s", res->resource);
    app->namespaced = res->namespaced;
    app->resolved(app);
}

static int resolve_name(struct app *app, const char *name, resolved_fn *next)
{
    struct telo_err err;
    telo_err_clear(&err);
    app->resolved = next;
    if (kube_discovery_resolve_name(app->disc, name, on_resolved, app, &err) != 0) {
        fail(app, err.msg);
        return -1;
    }
    return 0;
}

static const char *ref_namespace(struct app *app)
{
    if (!app->namespaced || app->a->all_ns)
        return NULL;
    return app->a->kube.namespace != NULL ? app->a->kube.namespace : app->cfg->namespace;
}

static struct kube_ref app_ref(struct app *app, const char *name)
{
    struct kube_ref ref = {.group = app->ref_group,
                           .version = app->ref_version,
                           .resource = app->ref_resource,
                           .namespace = ref_namespace(app),
                           .name = name};
    return ref;
}

/* ---- get / list / delete / patch ---- */

static void on_print_result(const struct kube_result *res, void *ud)
{
    struct app *app = ud;
    if (res->rc != 0) {
        fail(app, res->err->msg);
        return;
    }
    if (res->object != NULL)
        print_json(res->object);
}

static void do_get(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct kube_ref ref = app_ref(app, app->a->pos[1]);
    ref.subresource = app->a->subresource;
    if (kube_rest_get(app->t, &ref, on_print_result, app, &err) == NULL)
        fail(app, err.msg);
}

static void do_list(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct kube_ref ref = app_ref(app, NULL);
    struct kube_list_opts o = {.label_selector = app->a->selector,
                               .field_selector = app->a->field_selector,
                               .resource_version = app->a->rv,
                               .limit = app->a->limit};
    if (kube_rest_list_all(app->t, &ref, &o, on_print_result, app, &err) != 0)
        fail(app, err.msg);
}

static void do_delete(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct kube_ref ref = app_ref(app, app->a->pos[1]);
    struct kube_delete_opts o = {.propagation_policy = app->a->propagation,
                                 .precondition_uid = app->a->uid,
                                 .precondition_rv = app->a->rv,
                                 .grace_period_seconds = app->a->grace};
    if (kube_rest_delete(app->t, &ref, &o, on_print_result, app, &err) == NULL)
        fail(app, err.msg);
}

static void do_patch(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct kube_ref ref = app_ref(app, app->a->pos[1]);
    ref.subresource = app->a->subresource;
    enum kube_patch_type type;
    if (strcmp(app->a->patch_type, "merge") == 0) {
        type = KUBE_PATCH_MERGE;
    } else if (strcmp(app->a->patch_type, "json") == 0) {
        type = KUBE_PATCH_JSON;
    } else if (strcmp(app->a->patch_type, "strategic") == 0) {
        type = KUBE_PATCH_STRATEGIC;
    } else {
        fail(app, "--type must be merge, json or strategic");
        return;
    }
    struct kube_write_opts o = {.field_manager = app->a->field_manager};
    if (kube_rest_patch(app->t, &ref, type, app->a->patch, strlen(app->a->patch), &o,
                        on_print_result, app, &err) == NULL)
        fail(app, err.msg);
}

/* ---- apply / create / update: one document after the other, in file order ---- */

static void next_doc(struct app *app);

static void on_doc_result(const struct kube_result *res, void *ud)
{
    on_print_result(res, ud);
    if (res->rc == 0)
        next_doc(ud);
}

static void doc_resolved(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct json_object *doc = app->docs[app->next_doc - 1];
    const char *ns = jget_string(jget(doc, "metadata"), "namespace");
    if (ns == NULL)
        ns = app->a->kube.namespace != NULL ? app->a->kube.namespace : app->cfg->namespace;
    struct kube_ref ref = app_ref(app, jget_string(jget(doc, "metadata"), "name"));
    ref.namespace = app->namespaced ? ns : NULL;
    if (app->namespaced && ns != NULL && jget_string(jget(doc, "metadata"), "namespace") == NULL) {
        /* Apply and update need the namespace in the body to match the URL. */
        struct json_object *meta = NULL;
        if (json_object_object_get_ex(doc, "metadata", &meta))
            json_object_object_add(meta, "namespace", json_object_new_string(ns));
        ref.namespace = jget_string(jget(doc, "metadata"), "namespace");
    }
    const char *body = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
                                                               JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t len = strlen(body);
    struct kube_write_opts o = {.field_manager = app->a->field_manager, .force = app->a->force};
    struct kube_call *c = NULL;
    if (strcmp(app->a->command, "apply") == 0) {
        c = kube_rest_apply(app->t, &ref, body, len, &o, on_doc_result, app, &err);
    } else if (strcmp(app->a->command, "create") == 0) {
        c = kube_rest_create(app->t, &ref, body, len, &o, on_doc_result, app, &err);
    } else {
        c = kube_rest_update(app->t, &ref, body, len, &o, on_doc_result, app, &err);
    }
    if (c == NULL)
        fail(app, err.msg);
}

static void next_doc(struct app *app)
{
    if (app->next_doc >= app->ndocs)
        return;
    struct json_object *doc = app->docs[app->next_doc++];
    struct telo_err err;
    telo_err_clear(&err);
    const char *api_version = jget_string(doc, "apiVersion"), *kind = jget_string(doc, "kind");
    if (api_version == NULL || kind == NULL || jget_string(jget(doc, "metadata"), "name") == NULL) {
        fail(app, "every object needs apiVersion, kind and metadata.name");
        return;
    }
    app->resolved = doc_resolved;
    if (kube_discovery_resolve_kind(app->disc, api_version, kind, on_resolved, app, &err) != 0)
        fail(app, err.msg);
}

/* ---- watch ---- */

static void start_watch(struct app *app);

static int on_watch_event(struct kube_watch *w, enum kube_watch_type type, struct json_object *obj,
                          void *ud)
{
    (void)w;
    struct app *app = ud;
    const char *ns = jget_string(jget(obj, "metadata"), "namespace"),
               *name = jget_string(jget(obj, "metadata"), "name");
    const char *rv = jget_string(jget(obj, "metadata"), "resourceVersion");
    if (app->a->json) {
        struct json_object *ev = json_object_new_object();
        json_object_object_add(ev, "type", json_object_new_string(kube_watch_type_name(type)));
        json_object_object_add(ev, "object", json_object_get(obj));
        puts(json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN));
        json_object_put(ev);
    } else {
        printf("%s %s%s%s %s\n", kube_watch_type_name(type), ns != NULL ? ns : "",
               ns != NULL ? "/" : "", name != NULL ? name : "", rv != NULL ? rv : "");
    }
    fflush(stdout);
    app->events++;
    if (app->a->max_events > 0 && app->events >= app->a->max_events)
        return 1;
    return 0;
}

static void stop_watching(struct app *app)
{
    ev_timer_stop(app->loop, &app->deadline);
    ev_timer_stop(app->loop, &app->rewatch_timer);
}

static void on_watch_end(struct kube_watch *w, enum kube_watch_end reason,
                         const struct kube_status *st, const struct telo_err *err, void *ud)
{
    struct app *app = ud;
    snprintf(app->last_rv, sizeof(app->last_rv), "%s", kube_watch_resource_version(w));
    printf("END %s rv=%s%s%s\n", kube_watch_end_name(reason), app->last_rv,
           st != NULL ? " code=" : "", st != NULL ? st->reason_text : "");
    fflush(stdout);
    if (err != NULL && reason != KUBE_WATCH_END_RECEIVER)
        fprintf(stderr, "telo-kube: watch ended (%s): %s\n", kube_watch_end_name(reason), err->msg);
    kube_watch_free(w);
    app->watch = NULL;
    if (reason == KUBE_WATCH_END_RECEIVER) {
        stop_watching(app);
        return;
    }
    if (app->a->rewatch && reason != KUBE_WATCH_END_EXPIRED && reason != KUBE_WATCH_END_ERROR) {
        /* A clean end or a lost connection: resume from the last version after a pause. */
        ev_timer_set(&app->rewatch_timer, reason == KUBE_WATCH_END_CLOSED ? 0. : 1., 0.);
        ev_timer_start(app->loop, &app->rewatch_timer);
        return;
    }
    stop_watching(app);
    if (reason == KUBE_WATCH_END_EXPIRED)
        app->exit_code = 3;
    else if (reason != KUBE_WATCH_END_CLOSED)
        app->exit_code = 1;
}

static void rewatch_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct app *app = w->data;
    start_watch(app);
}

static void deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct app *app = w->data;
    if (app->watch != NULL) {
        snprintf(app->last_rv, sizeof(app->last_rv), "%s", kube_watch_resource_version(app->watch));
        printf("END duration rv=%s\n", app->last_rv);
        fflush(stdout);
        kube_watch_free(app->watch);
        app->watch = NULL;
    }
    stop_watching(app);
}

static void start_watch(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct kube_ref ref = app_ref(app, app->a->pos[1]);
    struct kube_watch_opts o = {.resource_version = app->last_rv[0] != '\0' ? app->last_rv : NULL,
                                .label_selector = app->a->selector,
                                .field_selector = app->a->field_selector,
                                .timeout_seconds = app->a->timeout};
    app->watch = kube_watch_start(app->t, &ref, &o, on_watch_event, on_watch_end, app, &err);
    if (app->watch == NULL) {
        stop_watching(app);
        fail(app, err.msg);
    }
}

static void do_watch(struct app *app)
{
    if (app->a->rv != NULL)
        snprintf(app->last_rv, sizeof(app->last_rv), "%s", app->a->rv);
    if (app->a->duration > 0) {
        ev_timer_set(&app->deadline, app->a->duration, 0.);
        ev_timer_start(app->loop, &app->deadline);
    }
    start_watch(app);
}

/* ---- stress: many concurrent requests (and a watch) on one connection ---- */

/* Established TCP connections this process holds: an independent check of curl's count (curl
 * also holds a Unix socket pair for wake-ups, which this leaves out). */
static int count_tcp_connections(void)
{
    unsigned long inodes[256];
    int ninodes = 0;
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL && ninodes < 256) {
        char path[300], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            if (sscanf(target, "socket:[%lu]", &inodes[ninodes]) == 1)
                ninodes++;
        }
    }
    closedir(dir);
    int n = 0;
    const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        if (f == NULL)
            continue;
        char line[512];
        while (fgets(line, sizeof(line), f) != NULL) {
            unsigned state = 0;
            unsigned long inode = 0;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &state, &inode) != 2)
                continue;
            for (int i = 0; i < ninodes; i++)
                if (inodes[i] == inode && state == 1)
                    n++;
        }
        fclose(f);
    }
    return n;
}

static void stress_report(struct app *app)
{
    int tcp = count_tcp_connections();
    int watch_open = app->watch != NULL;
    /* A watch's connection is counted when its transfer ends: end it first. */
    kube_watch_free(app->watch);
    app->watch = NULL;
    const struct kube_metrics *m = kube_transport_metrics(app->t);
    printf("{\"requests\": %ld, \"ok\": %ld, \"failed\": %ld, \"watch\": %s, \"watch_open\": %s, "
           "\"connections\": %lu, \"tcp_connections\": %d, \"seconds\": %.3f}\n",
           app->a->requests, app->ok, app->failed, app->a->with_watch ? "true" : "false",
           watch_open ? "true" : "false", m->connects, tcp, ev_now(app->loop) - app->started);
    fflush(stdout);
}

static void hold_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct app *app = w->data;
    stress_report(app);
    kube_watch_free(app->watch);
    app->watch = NULL;
}

static void on_stress_result(const struct kube_result *res, void *ud)
{
    struct app *app = ud;
    if (res->rc == 0)
        app->ok++;
    else {
        app->failed++;
        if (app->failed == 1)
            fprintf(stderr, "telo-kube: %s\n", res->err->msg);
    }
    if (--app->outstanding > 0)
        return;
    if (app->failed > 0)
        app->exit_code = 1;
    ev_now_update(app->loop);
    if (app->a->hold > 0) {
        /* Keep the connection (and watch) open so `ss -tnp` can count it. */
        printf("{\"holding\": %.1f}\n", app->a->hold);
        fflush(stdout);
        ev_timer_set(&app->deadline, app->a->hold, 0.);
        ev_timer_start(app->loop, &app->deadline);
        return;
    }
    stress_report(app);
    kube_watch_free(app->watch);
    app->watch = NULL;
}

static int on_stress_event(struct kube_watch *w, enum kube_watch_type type, struct json_object *obj,
                           void *ud)
{
    (void)w;
    (void)type;
    (void)obj;
    ((struct app *)ud)->events++;
    return 0;
}

static void on_stress_watch_end(struct kube_watch *w, enum kube_watch_end reason,
                                const struct kube_status *st, const struct telo_err *err, void *ud)
{
    (void)st;
    struct app *app = ud;
    fprintf(stderr, "telo-kube: stress watch ended early (%s): %s\n", kube_watch_end_name(reason),
            err != NULL ? err->msg : "");
    kube_watch_free(w);
    app->watch = NULL;
}

static void do_stress(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    const char *ns = app->a->kube.namespace != NULL ? app->a->kube.namespace : app->cfg->namespace;
    struct kube_ref coll = {.version = "v1", .resource = "configmaps", .namespace = ns};
    app->started = ev_now(app->loop);
    if (app->a->with_watch) {
        struct kube_watch_opts o = {.timeout_seconds = 0};
        app->watch =
            kube_watch_start(app->t, &coll, &o, on_stress_event, on_stress_watch_end, app, &err);
        if (app->watch == NULL) {
            fail(app, err.msg);
            return;
        }
    }
    ev_timer_init(&app->deadline, hold_cb, 0., 0.);
    app->deadline.data = app;
    struct kube_ref nsref = {.version = "v1", .resource = "namespaces", .name = ns};
    for (long i = 0; i < app->a->requests; i++) {
        struct kube_call *c =
            (i % 2 == 0) ? kube_rest_get(app->t, &nsref, on_stress_result, app, &err)
                         : kube_rest_list(app->t, &coll, &(struct kube_list_opts){.limit = 5},
                                          on_stress_result, app, &err);
        if (c == NULL) {
            fail(app, err.msg);
            return;
        }
        app->outstanding++;
    }
}

/* ---- bench-create ---- */

static void on_bench_result(const struct kube_result *res, void *ud)
{
    struct app *app = ud;
    if (res->rc == 0) {
        app->ok++;
    } else {
        app->failed++;
        if (app->failed <= 3)
            fprintf(stderr, "telo-kube: %s\n", res->err->msg);
    }
    if (--app->outstanding > 0)
        return;
    ev_now_update(app->loop);
    const struct kube_metrics *m = kube_transport_metrics(app->t);
    printf("{\"count\": %ld, \"ok\": %ld, \"failed\": %ld, \"seconds\": %.3f, \"connections\": "
           "%lu, \"retries\": %lu}\n",
           app->a->count, app->ok, app->failed, ev_now(app->loop) - app->started, m->connects,
           m->retries);
    if (app->failed > 0)
        app->exit_code = 1;
}

static void do_bench_create(struct app *app)
{
    struct telo_err err;
    telo_err_clear(&err);
    if (app->a->kube.namespace == NULL) {
        fail(app, "bench-create needs -n NAMESPACE");
        return;
    }
    struct kube_ref coll = {
        .version = "v1", .resource = "configmaps", .namespace = app->a->kube.namespace};
    ev_now_update(app->loop);
    app->started = ev_now(app->loop);
    char body[512];
    for (long i = 0; i < app->a->count; i++) {
        int n = snprintf(body, sizeof(body),
                         "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                         "\"%s%ld\"},\"data\":{\"index\":\"%ld\"}}",
                         app->a->prefix, i, i);
        if (kube_rest_create(app->t, &coll, body, (size_t)n, NULL, on_bench_result, app, &err) ==
            NULL) {
            fail(app, err.msg);
            return;
        }
        app->outstanding++;
    }
}

/* ---- main ---- */

static int need(struct app *app, int npos, const char *what)
{
    if (app->a->npos < npos) {
        fprintf(stderr, "telo-kube %s: needs %s\n", app->a->command, what);
        app->exit_code = 2;
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    int prc = parse_args(argc, argv, &a);
    if (prc != 0) {
        usage(prc > 0 ? stdout : stderr);
        return prc > 0 ? 0 : 2;
    }
    if (a.verbose)
        telo_log_set_level(TELO_LOG_DEBUG);
    struct app app;
    memset(&app, 0, sizeof(app));
    app.a = &a;
    struct telo_err err;
    telo_err_clear(&err);
    if (kube_config_load_env(a.kube.kubeconfig, a.kube.context, &app.cfg, &err) != 0) {
        fprintf(stderr, "telo-kube: %s\n", err.msg);
        return 1;
    }
    app.loop = ev_default_loop(0);
    app.t = kube_transport_new(app.loop, app.cfg, NULL, &err);
    app.disc = app.t != NULL ? kube_discovery_new(app.t) : NULL;
    if (app.t == NULL || app.disc == NULL) {
        fprintf(stderr, "telo-kube: %s\n", err.msg);
        kube_transport_free(app.t);
        kube_config_free(app.cfg);
        return 1;
    }
    ev_timer_init(&app.deadline, deadline_cb, 0., 0.);
    app.deadline.data = &app;
    ev_timer_init(&app.rewatch_timer, rewatch_cb, 0., 0.);
    app.rewatch_timer.data = &app;

    const char *cmd = a.command;
    if (strcmp(cmd, "get") == 0) {
        if (need(&app, 2, "RESOURCE NAME") == 0)
            resolve_name(&app, a.pos[0], do_get);
    } else if (strcmp(cmd, "list") == 0) {
        if (need(&app, 1, "RESOURCE") == 0)
            resolve_name(&app, a.pos[0], do_list);
    } else if (strcmp(cmd, "watch") == 0) {
        if (need(&app, 1, "RESOURCE") == 0)
            resolve_name(&app, a.pos[0], do_watch);
    } else if (strcmp(cmd, "delete") == 0) {
        if (need(&app, 2, "RESOURCE NAME") == 0)
            resolve_name(&app, a.pos[0], do_delete);
    } else if (strcmp(cmd, "patch") == 0) {
        if (need(&app, 2, "RESOURCE NAME") == 0) {
            if (a.patch == NULL) {
                fprintf(stderr, "telo-kube patch: needs -p PATCH\n");
                app.exit_code = 2;
            } else {
                resolve_name(&app, a.pos[0], do_patch);
            }
        }
    } else if (strcmp(cmd, "apply") == 0 || strcmp(cmd, "create") == 0 ||
               strcmp(cmd, "update") == 0) {
        if (a.file == NULL) {
            fprintf(stderr, "telo-kube %s: needs -f FILE\n", cmd);
            app.exit_code = 2;
        } else if (strcmp(cmd, "apply") == 0 && a.field_manager == NULL) {
            fprintf(stderr, "telo-kube apply: needs --field-manager NAME\n");
            app.exit_code = 2;
        } else if (load_docs(&app, a.file) != 0) {
            app.exit_code = 1;
        } else {
            next_doc(&app);
        }
    } else if (strcmp(cmd, "stress") == 0) {
        do_stress(&app);
    } else if (strcmp(cmd, "bench-create") == 0) {
        do_bench_create(&app);
    } else {
        fprintf(stderr, "telo-kube: unknown command '%s'\n", cmd);
        usage(stderr);
        app.exit_code = 2;
    }
    if (app.exit_code == 0)
        ev_run(app.loop, 0);
    kube_watch_free(app.watch);
    stop_watching(&app);
    kube_discovery_free(app.disc);
    kube_transport_free(app.t);
    kube_config_free(app.cfg);
    for (int i = 0; i < app.ndocs; i++)
        json_object_put(app.docs[i]);
    ev_loop_destroy(app.loop);
    return app.exit_code;
}

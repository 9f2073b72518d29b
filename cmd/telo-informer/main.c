/* telo-informer: runs one reflector and prints what it sees; a development and test tool for
 * pkg/cache (and the subject of the cache memory benchmark). */
#include "cache/reflector.h"
#include "cache/transform.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "util/argv.h"
#include "util/log.h"
#include "util/memtune.h"

#include <ev.h>
#include <json.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATHS 32

struct options {
    struct util_kube_args kube;
    const char *selector;
    const char *field_selector;
    const char *resource; /* resource[.version[.group]] */
    const char *paths[MAX_PATHS];
    size_t npaths;
    int quiet; /* no per-event lines (benchmarks) */
    long page_size;
};

struct app {
    struct options opt;
    struct ev_loop *loop;
    struct cache_reflector *reflector;
    ev_signal sigterm, sigint, sigusr1;
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: telo-informer [--kubeconfig FILE] [--context NAME] [-n NAMESPACE]\n"
        "                     [-l SELECTOR] [--field-selector SELECTOR] [--keep PATH]...\n"
        "                     [--quiet] RESOURCE[.VERSION[.GROUP]]\n"
        "\n"
        "Lists and watches RESOURCE (\"pods\", \"configmaps\", \"leases.v1.coordination.k8s.io\")\n"
        "into an informer cache and prints one line per change:\n"
        "  ADD|UPDATE|DELETE <key> rv=<resourceVersion> from=list|watch\n"
        "  SYNCED objects=<n> rv=<resourceVersion>\n"
        "--keep PATH stores only that dotted path (repeatable) besides the object's identity.\n"
        "SIGUSR1 prints: STATS objects=<n> bytes=<store bytes> rss_kib=<n> lists=<n>\n"
        "relists_410=<n> watches=<n> failures=<n>. SIGTERM or SIGINT exits 0.\n");
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kib;
}

static const char *origin_name(enum cache_origin origin)
{
    return origin == CACHE_FROM_LIST ? "list" : "watch";
}

static void on_add(void *ud, const struct cache_object *obj, enum cache_origin origin)
{
    struct app *app = ud;
    if (!app->opt.quiet)
        printf("ADD %s rv=%s from=%s\n", obj->key, obj->resource_version, origin_name(origin));
}

static void on_update(void *ud, const struct cache_object *old, const struct cache_object *obj,
                      enum cache_origin origin)
{
    struct app *app = ud;
    (void)old;
    if (!app->opt.quiet)
        printf("UPDATE %s rv=%s from=%s\n", obj->key, obj->resource_version, origin_name(origin));
}

static void on_delete(void *ud, const struct cache_object *old, enum cache_origin origin)
{
    struct app *app = ud;
    if (!app->opt.quiet)
        printf("DELETE %s rv=%s from=%s\n", old->key, old->resource_version, origin_name(origin));
}

static void on_synced(void *ud)
{
    struct app *app = ud;
    const struct cache_store *store = cache_reflector_store(app->reflector);
    printf("SYNCED objects=%zu rv=%s\n", cache_store_len(store),
           cache_reflector_resource_version(app->reflector));
    fflush(stdout);
}

static struct json_object *project(struct json_object *obj, void *arg)
{
    const struct options *opt = arg;
    return cache_transform_project(obj, opt->paths, opt->npaths);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    struct app *app = w->data;
    if (w->signum != SIGUSR1) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    const struct cache_store *store = cache_reflector_store(app->reflector);
    const struct cache_reflector_stats *st = cache_reflector_stats(app->reflector);
    printf("STATS objects=%zu bytes=%zu rss_kib=%ld lists=%lu relists_410=%lu watches=%lu "
           "failures=%lu\n",
           cache_store_len(store), cache_store_bytes(store), rss_kib(), st->lists, st->relists_410,
           st->watches, st->failures);
    fflush(stdout);
}

static int parse_args(int argc, char **argv, struct options *o)
{
    for (int i = 1; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        const char *a = arg.name, *next = arg.value;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
        } else if (a[0] != '-') {
            if (o->resource) {
                fprintf(stderr, "telo-informer: one RESOURCE only ('%s' and '%s')\n", o->resource,
                        a);
                return -1;
            }
            o->resource = a;
        } else if (!next) {
            fprintf(stderr, "telo-informer: %s needs a value\n", a);
            return -1;
        } else if (util_arg_kube(&arg, &i, &o->kube) > 0) {
            continue;
        } else if (strcmp(a, "-l") == 0 || strcmp(a, "--selector") == 0) {
            o->selector = util_arg_take(&arg, &i);
        } else if (strcmp(a, "--field-selector") == 0) {
            o->field_selector = util_arg_take(&arg, &i);
        } else if (strcmp(a, "--page-size") == 0) {
            o->page_size = atol(util_arg_take(&arg, &i));
        } else if (strcmp(a, "--keep") == 0) {
            if (o->npaths == MAX_PATHS) {
                fprintf(stderr, "telo-informer: at most %d --keep paths\n", MAX_PATHS);
                return -1;
            }
            o->paths[o->npaths++] = util_arg_take(&arg, &i);
        } else {
            fprintf(stderr, "telo-informer: unknown option '%s'\n", a);
            return -1;
        }
    }
    if (!o->resource) {
        fprintf(stderr, "telo-informer: RESOURCE is required (for example: pods)\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    util_memtune();
    struct app app;
    memset(&app, 0, sizeof(app));
    if (parse_args(argc, argv, &app.opt) < 0) {
        usage(stderr);
        return 2;
    }
    /* RESOURCE[.VERSION[.GROUP]], as kubectl spells fully qualified resources. */
    char spec[256];
    snprintf(spec, sizeof(spec), "%s", app.opt.resource);
    char *version = strchr(spec, '.');
    char *group = NULL;
    if (version) {
        *version++ = '\0';
        group = strchr(version, '.');
        if (group)
            *group++ = '\0';
    }

    struct telo_err err;
    struct kube_config *cfg = NULL;
    if (kube_config_load_env(app.opt.kube.kubeconfig, app.opt.kube.context, &cfg, &err) < 0) {
        fprintf(stderr, "telo-informer: %s\n", err.msg);
        return 1;
    }
    app.loop = ev_default_loop(0);
    struct kube_transport *t = kube_transport_new(app.loop, cfg, NULL, &err);
    if (!t) {
        fprintf(stderr, "telo-informer: %s\n", err.msg);
        kube_config_free(cfg);
        return 1;
    }
    const struct cache_index_def indexes[] = {
        {"namespace", cache_index_namespace, NULL},
        {"owner", cache_index_owner_uid, NULL},
    };
    struct cache_reflector_config rcfg = {
        .ref = {.group = group,
                .version = version ? version : "v1",
                .resource = spec,
                .namespace = app.opt.kube.namespace},
        .label_selector = app.opt.selector,
        .field_selector = app.opt.field_selector,
        .transform = app.opt.npaths ? project : NULL,
        .transform_arg = &app.opt,
        .indexes = indexes,
        .nindexes = 2,
        .page_size = app.opt.page_size,
    };
    struct cache_handlers handlers = {on_add, on_update, on_delete, on_synced, &app};
    app.reflector = cache_reflector_new(t, &rcfg, &handlers, &err);
    int status = 0;
    if (!app.reflector || cache_reflector_start(app.reflector, &err) < 0) {
        fprintf(stderr, "telo-informer: %s\n", err.msg);
        status = 1;
    } else {
        setvbuf(stdout, NULL, _IOLBF, 0);
        ev_signal_init(&app.sigterm, on_signal, SIGTERM);
        ev_signal_init(&app.sigint, on_signal, SIGINT);
        ev_signal_init(&app.sigusr1, on_signal, SIGUSR1);
        app.sigterm.data = app.sigint.data = app.sigusr1.data = &app;
        ev_signal_start(app.loop, &app.sigterm);
        ev_signal_start(app.loop, &app.sigint);
        ev_signal_start(app.loop, &app.sigusr1);
        ev_run(app.loop, 0);
    }
    cache_reflector_free(app.reflector);
    kube_transport_free(t);
    kube_config_free(cfg);
    ev_loop_destroy(app.loop);
    return status;
}

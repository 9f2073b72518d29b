/* telo-leader-demo: runs leader election (and optionally the event recorder) and prints what
 * happens; a development and test tool for pkg/controller/leader and pkg/controller/events. */
#include "controller/events.h"
#include "controller/leader.h"
#include "kube/config.h"
#include "kube/rest.h"
#include "kube/transport.h"
#include "util/argv.h"
#include "util/jget.h"
#include "util/log.h"

#include <ev.h>
#include <json.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct options {
    struct util_kube_args kube;
    const char *lease_name;
    const char *identity;
    struct leader_timing timing;
    const char *event_configmap; /* --event-demo */
    long event_count;
    double event_interval;
    int event_distinct;
    const char *event_reason;
};

struct app {
    struct options opt;
    struct ev_loop *loop;
    struct kube_transport *t;
    struct leader_elector *el;
    struct events_recorder *rec;
    char identity[LEADER_IDENTITY_MAX];
    char cm_uid[128];
    long events_sent;
    ev_timer event_timer;
    ev_signal sigterm, sigint;
    int stopping;
    int status;
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: telo-leader-demo [--kubeconfig FILE] [--context NAME] --namespace NS\n"
        "                        --lease-name NAME [--identity ID] [--lease-duration S]\n"
        "                        [--renew-deadline S] [--retry-period S]\n"
        "                        [--event-demo CONFIGMAP [--event-count N]\n"
        "                         [--event-interval S] [--event-distinct] [--event-reason R]]\n"
        "\n"
        "Campaigns for the Lease NS/NAME and prints one line per change:\n"
        "  NEW_LEADER <identity>   the Lease's holder changed\n"
        "  LEADING                 this process leads\n"
        "  STOPPED                 this process stopped leading\n"
        "With --event-demo it records N (default 20) events about the ConfigMap, the same note\n"
        "each time unless --event-distinct, then prints\n"
        "  EVENTS recorded=<n> created=<n> patched=<n> filtered=<n> coalesced=<n> dropped=<n>\n"
        "SIGTERM or SIGINT releases the Lease (when held), prints RELEASED rc=<n>, exits 0.\n");
}

static void on_started(void *ud)
{
    (void)ud;
    printf("LEADING\n");
}

static void on_stopped(void *ud)
{
    (void)ud;
    printf("STOPPED\n");
}

static void on_new_leader(const char *identity, void *ud)
{
    (void)ud;
    printf("NEW_LEADER %s\n", identity);
}

static void on_flushed(int rc, void *ud)
{
    struct app *app = ud;
    const struct events_stats *s = events_recorder_stats(app->rec);
    printf("EVENTS recorded=%lu created=%lu patched=%lu filtered=%lu coalesced=%lu dropped=%lu "
           "failed=%lu flush_rc=%d\n",
           s->recorded, s->created, s->patched, s->filtered, s->coalesced, s->dropped, s->failed,
           rc);
    if (app->stopping)
        ev_break(app->loop, EVBREAK_ALL);
}

static void on_event_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct app *app = w->data;
    struct events_object obj = {"v1", "ConfigMap", app->opt.kube.namespace,
                                app->opt.event_configmap, app->cm_uid[0] ? app->cm_uid : NULL};
    do {
        long i = ++app->events_sent;
        int rc = app->opt.event_distinct
                     ? events_record(app->rec, &obj, "Normal", app->opt.event_reason, "Demo",
                                     "demo event number %ld", i)
                     : events_record(app->rec, &obj, "Normal", app->opt.event_reason, "Demo",
                                     "the same demo event");
        if (rc < 0)
            fprintf(stderr, "telo-leader-demo: event %ld not recorded (%d)\n", i, rc);
    } while (app->opt.event_interval <= 0 && app->events_sent < app->opt.event_count);
    if (app->events_sent < app->opt.event_count) {
        ev_timer_set(w, app->opt.event_interval, 0);
        ev_timer_start(app->loop, w);
    } else {
        events_recorder_flush(app->rec, 30, on_flushed, app);
    }
}

static void on_configmap(const struct kube_result *res, void *ud)
{
    struct app *app = ud;
    const char *uid = res->rc == 0 ? jget_string(jget(res->object, "metadata"), "uid") : NULL;
    if (uid != NULL)
        snprintf(app->cm_uid, sizeof(app->cm_uid), "%s", uid);
    else
        fprintf(stderr, "telo-leader-demo: configmap: %s\n", res->err ? res->err->msg : "no uid");
    ev_timer_set(&app->event_timer, 0, 0);
    ev_timer_start(app->loop, &app->event_timer);
}

static void on_released(int rc, void *ud)
{
    struct app *app = ud;
    printf("RELEASED rc=%d\n", rc);
    if (app->rec && app->events_sent < app->opt.event_count) {
        ev_break(app->loop, EVBREAK_ALL);
        return;
    }
    if (app->rec)
        events_recorder_flush(app->rec, 5, on_flushed, app);
    else
        ev_break(app->loop, EVBREAK_ALL);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    struct app *app = w->data;
    if (app->stopping) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    app->stopping = 1;
    ev_timer_stop(loop, &app->event_timer);
    if (leader_release(app->el, on_released, app) < 0)
        ev_break(loop, EVBREAK_ALL);
}

static int parse_seconds(const char *flag, const char *v, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (*end || d <= 0) {
        fprintf(stderr, "telo-leader-demo: %s needs a positive number of seconds\n", flag);
        return -1;
    }
    *out = d;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    o->event_count = 20;
    o->event_reason = "DemoEvent";
    for (int i = 1; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        const char *a = arg.name, *next = arg.value;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--event-distinct") == 0) {
            o->event_distinct = 1;
        } else if (a[0] != '-' || !next) {
            /* Every other argument is a flag followed by its value. */
            if (a[0] != '-')
                fprintf(stderr, "telo-leader-demo: unknown argument '%s'\n", a);
            else
                fprintf(stderr, "telo-leader-demo: %s needs a value\n", a);
            return -1;
        } else if (util_arg_kube(&arg, &i, &o->kube) > 0) {
            continue;
        } else if (strcmp(a, "--lease-name") == 0) {
            o->lease_name = util_arg_take(&arg, &i);
        } else if (strcmp(a, "--identity") == 0) {
            o->identity = util_arg_take(&arg, &i);
        } else if (strcmp(a, "--lease-duration") == 0) {
            if (parse_seconds(a, util_arg_take(&arg, &i), &o->timing.lease_duration) < 0)
                return -1;
        } else if (strcmp(a, "--renew-deadline") == 0) {
            if (parse_seconds(a, util_arg_take(&arg, &i), &o->timing.renew_deadline) < 0)
                return -1;
        } else if (strcmp(a, "--retry-period") == 0) {
            if (parse_seconds(a, util_arg_take(&arg, &i), &o->timing.retry_period) < 0)
                return -1;
        } else if (strcmp(a, "--event-demo") == 0) {
            o->event_configmap = util_arg_take(&arg, &i);
        } else if (strcmp(a, "--event-count") == 0) {
            o->event_count = strtol(util_arg_take(&arg, &i), NULL, 10);
        } else if (strcmp(a, "--event-interval") == 0) {
            o->event_interval = strtod(util_arg_take(&arg, &i), NULL);
        } else if (strcmp(a, "--event-reason") == 0) {
            o->event_reason = util_arg_take(&arg, &i);
        } else {
            fprintf(stderr, "telo-leader-demo: unknown argument '%s'\n", a);
            return -1;
        }
    }
    if (!o->kube.namespace || !o->lease_name) {
        fprintf(stderr, "telo-leader-demo: --namespace and --lease-name are required\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct app app;
    memset(&app, 0, sizeof(app));
    if (parse_args(argc, argv, &app.opt) < 0) {
        usage(stderr);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (app.opt.identity) {
        snprintf(app.identity, sizeof(app.identity), "%s", app.opt.identity);
    } else if (leader_default_identity(app.identity, sizeof(app.identity)) < 0) {
        fprintf(stderr, "telo-leader-demo: no random bytes for an identity\n");
        return 1;
    }
    struct telo_err err;
    struct kube_config *cfg = NULL;
    if (kube_config_load_env(app.opt.kube.kubeconfig, app.opt.kube.context, &cfg, &err) < 0) {
        fprintf(stderr, "telo-leader-demo: %s\n", err.msg);
        return 1;
    }
    app.loop = ev_default_loop(0);
    app.t = kube_transport_new(app.loop, cfg, NULL, &err);
    struct leader_config lcfg = {
        .namespace = app.opt.kube.namespace,
        .name = app.opt.lease_name,
        .identity = app.identity,
        .timing = app.opt.timing,
        .callbacks = {on_started, on_stopped, on_new_leader, &app},
    };
    if (app.t)
        app.el = leader_new(app.t, &lcfg, &err);
    if (app.el && app.opt.event_configmap) {
        struct events_recorder_config rcfg = {.reporting_instance = app.identity};
        app.rec = events_recorder_new(app.t, &rcfg, &err);
        if (!app.rec) {
            leader_free(app.el);
            app.el = NULL;
        }
    }
    if (!app.el || leader_start(app.el, &err) < 0) {
        fprintf(stderr, "telo-leader-demo: %s\n", err.msg);
        app.status = 1;
    } else {
        ev_signal_init(&app.sigterm, on_signal, SIGTERM);
        ev_signal_init(&app.sigint, on_signal, SIGINT);
        app.sigterm.data = app.sigint.data = &app;
        ev_signal_start(app.loop, &app.sigterm);
        ev_signal_start(app.loop, &app.sigint);
        ev_timer_init(&app.event_timer, on_event_timer, 0, 0);
        app.event_timer.data = &app;
        if (app.rec) {
            struct kube_ref ref = {.version = "v1",
                                   .resource = "configmaps",
                                   .namespace = app.opt.kube.namespace,
                                   .name = app.opt.event_configmap};
            if (!kube_rest_get(app.t, &ref, on_configmap, &app, &err)) {
                fprintf(stderr, "telo-leader-demo: %s\n", err.msg);
                app.status = 1;
            }
        }
        if (!app.status)
            ev_run(app.loop, 0);
    }
    events_recorder_free(app.rec);
    leader_free(app.el);
    kube_transport_free(app.t);
    kube_config_free(cfg);
    ev_loop_destroy(app.loop);
    return app.status;
}

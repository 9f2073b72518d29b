/* `telo-operator run`: the controller manager that runs TeloSessions. */
#include "operator_cmd.h"

#include "controller/endpoints.h"
#include "controller/events.h"
#include "controller/events_metrics.h"
#include "controller/leader.h"
#include "controller/manager.h"
#include "controller/metrics.h"
#include "controller/runtime_metrics.h"
#include "httpd/server.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "session/config.h"
#include "session/reconciler.h"
#include "util/argv.h"
#include "util/log.h"
#include "util/memtune.h"

#include <ev.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SETS 64

struct options {
    const char *kubeconfig, *context, *config;
    const char *sets[MAX_SETS];
    size_t nsets;
    int leader_elect;
    const char *lease_namespace, *lease_name;
    struct leader_timing lease_timing; /* zero fields: client-go's defaults */
    const char *http_address;          /* "host:port", or "0" for none */
    const char *health_address;        /* the probes' own listener, or "0" for none */
    double resync_period;              /* seconds; 0: the manager's default (10 h) */
};

struct run_state {
    struct options opt;
    struct ev_loop *loop;
    struct session_config *cfg;
    struct kube_config *kcfg;
    struct kube_transport *t;
    struct ctrl_manager *m;
    struct events_recorder *events;
    struct session_reconciler *reconciler;
    struct metrics_registry *reg;
    struct ctrl_metrics *runtime_metrics;
    struct events_metrics events_metrics;
    struct httpd_server *http, *health;
    char identity[128];
    int shutting_down;
    ev_timer trim; /* hands the heap's free pages back after a burst */
};

/* How often the heap is looked at, and the free bytes that make a trim worth its page faults. */
#define TRIM_PERIOD_S 5.0
#define TRIM_MIN_FREE ((size_t)4 << 20)

void operator_cmd_usage(FILE *out)
{
    fprintf(
        out,
        "usage: telo-operator [run] [--kubeconfig FILE] [--context NAME] [--config FILE]\n"
        "                     [--set KEY=VALUE]... [--leader-elect]\n"
        "                     [--leader-election-namespace NS] [--leader-election-id NAME]\n"
        "                     [--leader-elect-lease-duration D] [--leader-elect-renew-deadline D]\n"
        "                     [--leader-elect-retry-period D]\n"
        "                     [--http-bind-address HOST:PORT|0]\n"
        "                     [--health-bind-address HOST:PORT|0] [--log-level LEVEL]\n"
        "                     [--log-format logfmt|json] [-v N]\n"
        "                     [--resync-period SECONDS]\n"
        "\n"
        "Runs the TeloSession controller. Serves /healthz, /readyz and /metrics on\n"
        "--http-bind-address (default 0.0.0.0:8080; 0 turns it off). --health-bind-address\n"
        "(default 0: none) serves the same on a listener of its own for the kubelet's probes,\n"
        "so clients filling the first one's connections cannot fail them and get the\n"
        "operator restarted. --config reads a YAML\n"
        "file of the keys below; --set KEY=VALUE overrides one (lists comma-separated,\n"
        "maps k=v,k2=v2). SIGTERM drains reconciles, releases the lease and exits 0.\n"
        "--resync-period reconciles every TeloSession again that often (default 36000,\n"
        "jittered by 10%%), from the cache: a resync of unchanged sessions writes nothing.\n"
        "The --leader-elect-* durations (Go syntax: 15s, 1.5s) are kube-controller-manager's,\n"
        "with its defaults 15s, 10s and 2s: a follower replaces a crashed leader about one\n"
        "lease duration after its last renew. Logs go to stderr, one line per event, logfmt\n"
        "or JSON (--log-format); -v 4 and up is --log-level debug, as kube components count.\n"
        "\nConfiguration keys:\n");
    session_config_describe(out);
}

/* 0: run with o; 1: --help was asked for; -1: a bad argument (said on stderr). */
static int parse_args(int argc, char **argv, struct options *o)
{
    o->http_address = "0.0.0.0:8080";
    o->health_address = "0";
    o->lease_name = "telo-operator.telo.run";
    o->lease_namespace = getenv("POD_NAMESPACE") ? getenv("POD_NAMESPACE") : "telo-system";
    for (int i = 0; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        const char *a = arg.name, *v = arg.value;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (strcmp(a, "--leader-elect") == 0) {
            /* A switch: bare, or =true / =false as Go's boolean flags take it. */
            if (arg.joined && strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
                fprintf(stderr, "telo-operator: --leader-elect=%s: want true or false\n", v);
                return -1;
            }
            o->leader_elect = !arg.joined || strcmp(v, "true") == 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "telo-operator: unknown or incomplete argument '%s'\n", a);
            return -1;
        }
        char log_err[128];
        int log_flag = telo_log_flag(a, v, log_err, sizeof(log_err));
        if (log_flag < 0) {
            fprintf(stderr, "telo-operator: %s\n", log_err);
            return -1;
        }
        if (log_flag) {
            i += util_arg_consumed(&arg);
            continue;
        }
        struct telo_err err;
        int timing = leader_timing_flag(&o->lease_timing, a, v, &err);
        if (timing < 0) {
            fprintf(stderr, "telo-operator: %s\n", err.msg);
            return -1;
        }
        if (timing) {
            i += util_arg_consumed(&arg);
            continue;
        }
        if (strcmp(a, "--kubeconfig") == 0)
            o->kubeconfig = v;
        else if (strcmp(a, "--context") == 0)
            o->context = v;
        else if (strcmp(a, "--config") == 0)
            o->config = v;
        else if (strcmp(a, "--set") == 0 && o->nsets < MAX_SETS)
            o->sets[o->nsets++] = v;
        else if (strcmp(a, "--leader-election-namespace") == 0)
            o->lease_namespace = v;
        else if (strcmp(a, "--leader-election-id") == 0)
            o->lease_name = v;
        else if (strcmp(a, "--http-bind-address") == 0)
            o->http_address = v;
        else if (strcmp(a, "--health-bind-address") == 0)
            o->health_address = v;
        else if (strcmp(a, "--resync-period") == 0) {
            char *end = NULL;
            o->resync_period = strtod(v, &end);
            if (!end || *end || !(o->resync_period >= 1 && o->resync_period <= 86400 * 7)) {
                fprintf(stderr, "telo-operator: --resync-period %s: want seconds in 1..604800\n",
                        v);
                return -1;
            }
        } else {
            fprintf(stderr, "telo-operator: unknown argument '%s'\n", a);
            return -1;
        }
        i += util_arg_consumed(&arg);
    }
    return 0;
}

/* --- readiness, leadership, shutdown ------------------------------------------------------ */

static int ready(void *user, struct buf *reason)
{
    struct run_state *op = user;
    if (op->shutting_down) {
        buf_append_str(reason, "shutting down");
        return 0;
    }
    if (!ctrl_manager_synced(op->m)) {
        buf_append_str(reason, "informer caches not synced yet");
        return 0;
    }
    /* A follower with warm caches is ready: it can take over at once. */
    return 1;
}

static void on_flushed(int rc, void *ud)
{
    struct run_state *op = ud;
    if (rc < 0)
        telo_log(TELO_LOG_WARN, "some Events were not written before exit", "rc=%d", rc);
    ev_break(op->loop, EVBREAK_ALL);
}

/* --- setup -------------------------------------------------------------------------------- */

static int load_config(struct run_state *op, struct telo_err *err)
{
    op->cfg = session_config_new();
    if (!op->cfg)
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    if (op->opt.config && session_config_load_file(op->cfg, op->opt.config, err) < 0)
        return -err->code;
    for (size_t i = 0; i < op->opt.nsets; i++) {
        if (session_config_set(op->cfg, op->opt.sets[i], err) < 0)
            return -err->code;
    }
    return kube_config_load_env(op->opt.kubeconfig, op->opt.context, &op->kcfg, err);
}

static void on_trim(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)loop;
    (void)timer;
    (void)revents;
    (void)util_memtune_trim(TRIM_MIN_FREE);
}

/* Issue 20: after a burst of 10,000 sessions the process held its peak (75.7 MiB) though the
 * burst's garbage was freed; a periodic look returns it. Unreferenced: the timer alone does not
 * keep the loop running (the shutdown's ev_run ends when the Events are out). */
static void start_trim(struct run_state *op)
{
    ev_timer_init(&op->trim, on_trim, TRIM_PERIOD_S, TRIM_PERIOD_S);
    ev_timer_start(op->loop, &op->trim);
    ev_unref(op->loop);
}

/* Serves /healthz, /readyz and /metrics on address ("HOST:PORT", or "0" for nothing; flag names
 * it in errors) into *out. */
static int serve(struct run_state *op, const char *flag, const char *address,
                 struct httpd_server **out, struct telo_err *err)
{
    if (strcmp(address, "0") == 0)
        return 0;
    char host[128];
    const char *colon = strrchr(address, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || (size_t)(colon - address) >= sizeof(host) || end == colon + 1 || *end != '\0' ||
        port < 0 || port > 65535)
        return telo_err_set(err, TELO_EINVAL, "%s %s: want HOST:PORT (e.g. 0.0.0.0:8080) or 0",
                            flag, address);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - address), address);
    struct httpd_config hc = {.address = host, .port = (int)port};
    *out = httpd_new(op->loop, &hc, err);
    if (!*out || endpoints_register(*out, op->reg, ready, op, err) < 0 ||
        httpd_start(*out, err) < 0)
        return -err->code;
    telo_log(TELO_LOG_INFO, "serving health and metrics", "flag=%s address=%s port=%d", flag, host,
             httpd_port(*out));
    return 0;
}

static int start_http(struct run_state *op, struct telo_err *err)
{
    int rc = serve(op, "--http-bind-address", op->opt.http_address, &op->http, err);
    return rc < 0 ? rc
                  : serve(op, "--health-bind-address", op->opt.health_address, &op->health, err);
}

static int setup(struct run_state *op, struct telo_err *err)
{
    int rc = load_config(op, err);
    if (rc < 0)
        return rc;
    op->loop = ev_default_loop(0);
    if (!(op->t = kube_transport_new(op->loop, op->kcfg, NULL, err)))
        return -err->code;
    if (leader_default_identity(op->identity, sizeof(op->identity)) < 0)
        snprintf(op->identity, sizeof(op->identity), "telo-operator-%d", (int)getpid());
    const char *pod = getenv("POD_NAME");
    struct events_recorder_config ecfg = {
        .reporting_instance = pod ? pod : op->identity,
        .correlator = {.namespace_burst = (int)op->cfg->events_namespace_burst,
                       .namespace_qps = 1.0 / (double)op->cfg->events_namespace_refill_seconds}};
    if (!(op->events = events_recorder_new(op->t, &ecfg, err)))
        return -err->code;
    struct ctrl_manager_opts mopts = {.max_concurrent_reconciles = (int)op->cfg->workers,
                                      .resync_period = op->opt.resync_period,
                                      .handle_signals = 1};
    if (!(op->m = ctrl_manager_new(op->loop, op->t, &mopts)))
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    if (!(op->reconciler = session_reconciler_new(op->m, op->t, op->cfg, op->events, err)))
        return -err->code;
    if (op->opt.leader_elect) {
        struct ctrl_leader_opts lo = {op->opt.lease_namespace, op->opt.lease_name, op->identity,
                                      op->opt.lease_timing};
        if (ctrl_manager_enable_leader_election(op->m, &lo, err) < 0)
            return -err->code;
    }
    if (!(op->reg = metrics_registry_new()))
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    if (metrics_register_process(op->reg, NULL, err) < 0 ||
        !(op->runtime_metrics =
              ctrl_metrics_register(op->reg, op->m, op->t, ctrl_manager_leader(op->m), err)) ||
        session_reconciler_register_metrics(op->reconciler, op->reg, err) < 0 ||
        events_metrics_register(&op->events_metrics, events_recorder_stats(op->events), op->reg,
                                err) < 0)
        return -err->code;
    if ((rc = start_http(op, err)) < 0)
        return rc;
    start_trim(op);
    return ctrl_manager_start(op->m, err);
}

static void teardown(struct run_state *op)
{
    if (op->loop && ev_is_active(&op->trim)) {
        ev_ref(op->loop);
        ev_timer_stop(op->loop, &op->trim);
    }
    httpd_free(op->http);
    httpd_free(op->health);
    metrics_registry_free(op->reg);
    ctrl_metrics_free(op->runtime_metrics);
    ctrl_manager_free(op->m);
    session_reconciler_free(op->reconciler);
    events_recorder_free(op->events);
    kube_transport_free(op->t);
    kube_config_free(op->kcfg);
    session_config_free(op->cfg);
    if (op->loop)
        ev_loop_destroy(op->loop);
}

int operator_cmd_main(int argc, char **argv)
{
    struct run_state op;
    memset(&op, 0, sizeof(op));
    int parsed = parse_args(argc, argv, &op.opt);
    if (parsed < 0) {
        operator_cmd_usage(stderr);
        return 2;
    }
    if (parsed > 0) { /* --help */
        operator_cmd_usage(stdout);
        return 0;
    }
    struct telo_err err;
    telo_err_clear(&err);
    int status = 0;
    if (setup(&op, &err) < 0) {
        fprintf(stderr, "telo-operator: %s\n", err.msg);
        teardown(&op);
        return 1;
    }
    telo_log(TELO_LOG_INFO, "telo-operator started", "version=%s identity=%s leader_elect=%d",
             TELO_VERSION, op.identity, op.opt.leader_elect);
    ev_run(op.loop, 0);
    if (ctrl_manager_error(op.m)[0]) {
        fprintf(stderr, "telo-operator: %s\n", ctrl_manager_error(op.m));
        status = 1;
    }
    /* Drained, lease released (or failed): get the last Events out, briefly. */
    op.shutting_down = 1;
    events_recorder_flush(op.events, 5, on_flushed, &op);
    ev_run(op.loop, 0);
    teardown(&op);
    return status;
}

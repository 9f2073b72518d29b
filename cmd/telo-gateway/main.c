/* telo-gateway: terminal attach to TeloSessions over WebSocket (the Kubernetes channel protocol
 * and telo.io.v1), one pods/attach upstream per session, fanned out to every client. */
#include "gateway/hub.h"
#include "gateway/server.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "util/argv.h"
#include "util/log.h"

#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ORIGINS 32

struct options {
    const char *kubeconfig;
    const char *context;
    const char *bind;   /* HOST:PORT */
    const char *health; /* HOST:PORT; NULL: no health listener */
    const char *origins[MAX_ORIGINS];
    size_t norigins;
    char *owned[MAX_ORIGINS]; /* items split from --allowed-origins */
    size_t nowned;
    struct gw_server_config cfg;
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: telo-gateway [--kubeconfig FILE] [--context NAME] [--bind-address HOST:PORT]\n"
        "                    [--health-listen HOST:PORT]\n"
        "                    [--allowed-origin ORIGIN]... [--allowed-origins O1,O2]\n"
        "                    [--token-audience AUD] [--reauth-seconds S] [--ring-bytes N]\n"
        "                    [--client-queue-bytes N] [--client-queue-total-bytes N]\n"
        "                    [--max-sessions N] [--max-sessions-per-namespace N]\n"
        "                    [--ping-interval SECONDS]\n"
        "                    [--auth-cache-seconds S] [--ended-keep-seconds S]\n"
        "                    [--idle-keep-seconds S]\n"
        "                    [--max-pending N] [--max-pending-per-ip N]\n"
        "                    [--first-byte-seconds S]\n"
        "                    [--trusted-proxies CIDR,...] [--max-pending-per-proxy N]\n"
        "                    [--max-clients N] [--max-clients-per-session N]\n"
        "                    [--max-clients-per-namespace N]\n"
        "                    [--max-debug-streams N] [--max-debug-streams-per-namespace N]\n"
        "                    [--admission-cache-seconds S] [--admission-rate N]\n"
        "                    [--admission-burst N] [--admission-rate-per-ip N]\n"
        "                    [--admission-burst-per-ip N]\n"
        "                    [--tls-cert-file PEM --tls-private-key-file PEM]\n"
        "                    [--log-level debug|info|warn|error] [--log-format logfmt|json]\n"
        "                    [-v N]\n"
        "       telo-gateway --version | --help\n\n"
        "Serves GET /v1/namespaces/NS/telosessions/NAME/attach as a WebSocket with the\n"
        "subprotocols v5.channel.k8s.io, v4.channel.k8s.io and telo.io.v1, plus /healthz,\n"
        "/readyz and /metrics, on --bind-address (default 0.0.0.0:8081). A client presents\n"
        "the session's attach token (its Secret status.attach.secretName) or a Kubernetes\n"
        "token allowed to create telosessions/attach, as Authorization: Bearer or the\n"
        "base64url.bearer.authorization.k8s.io.<token> subprotocol. The gateway reaches the\n"
        "session pod through the API server's pods/attach with its own credentials (the\n"
        "kubeconfig as kubectl finds it, or the in-cluster service account).\n"
        "--allowed-origin (repeatable; --allowed-origins takes a comma-separated list; '*'\n"
        "for any) names the browser origins allowed: a request carrying an Origin header\n"
        "is refused (403) unless its origin is listed, so without the flag no browser page\n"
        "may attach; clients that send no Origin (kubectl telo, client-go) are unaffected.\n"
        "--token-audience makes Kubernetes tokens count only when issued for that audience\n"
        "(TokenReview spec.audiences; default none: tokens for the API server itself).\n"
        "Every attached client's credential is checked again every --reauth-seconds\n"
        "(default 60): a revoked one closes the stream with a Status (v4/v5) or an error\n"
        "frame (telo.io.v1).\n"
        "--ring-bytes is the replay buffer per session (default 1 MiB). At most\n"
        "--max-sessions (128) sessions are held at once, each with its ring (up to 1.25x\n"
        "--ring-bytes with its index) and its pods/attach: a new one takes the place of the\n"
        "session that has been without a client the longest (its scrollback goes early), or\n"
        "is refused 503 with Retry-After when every one has a client. One namespace holds at\n"
        "most --max-sessions-per-namespace of them (a quarter of --max-sessions; all of it\n"
        "under 8): past it a new one takes the place of that namespace's own session without\n"
        "a client, or is refused 429, so one tenant cannot hold them all.\n"
        "A client's send queue stops at --client-queue-bytes (256 KiB), or at its share of\n"
        "--client-queue-total-bytes (32 MiB) among all attached clients (at least 16 KiB);\n"
        "what it has not taken waits in the ring.\n"
        "A running session nobody is attached to for --idle-keep-seconds (default 3600)\n"
        "closes its pods/attach and drops its scrollback; an ended one is kept for\n"
        "--ended-keep-seconds (default 300).\n"
        "With --tls-cert-file and --tls-private-key-file it serves HTTPS and WSS (TLS 1.2+);\n"
        "changed files (a renewed certificate, a Secret volume's update) are loaded again for\n"
        "new connections, looked at at most once a second as connections arrive: no restart.\n"
        "GET .../telosessions/NAME/debug relays the session's inspector as server-sent events.\n"
        "Limits: connections before admission (the first byte must arrive within\n"
        "--first-byte-seconds (2), the whole head within 10 s) at most\n"
        "--max-pending (1024) overall and --max-pending-per-ip (64) per address (an IPv6 /64),\n"
        "answered 503 and 429 with Retry-After; attached clients and debug streams at most\n"
        "--max-clients (4096) overall (503), --max-clients-per-namespace (a quarter of\n"
        "--max-clients; all of it under 8) over one namespace's sessions and\n"
        "--max-clients-per-session (64) (both 429);\n"
        "debug streams (up to 1.5 MiB each) at most --max-debug-streams (32), 503, and\n"
        "--max-debug-streams-per-namespace (a quarter of it; all of it under 8), 429.\n"
        "Admission verdicts (401, 403, 404, and allows for running or ended sessions) are\n"
        "reused for --admission-cache-seconds (2; 0: never), so a revoked token or binding is\n"
        "honoured at most that late; identical requests share one lookup; lookups that reach\n"
        "the API server are limited to --admission-rate a second (10, burst --admission-burst\n"
        "2x) overall and --admission-rate-per-ip (5, burst --admission-burst-per-ip 4x) per\n"
        "address; beyond that 429 with Retry-After. An address whose lookup failed (401, 403,\n"
        "404) in the last 10 s, or with 4 lookups already unanswered, takes from the overall\n"
        "budget only while it holds more than 3/4 of its burst, so garbage tokens cannot\n"
        "take the whole budget from others. Out of file descriptors, accepting pauses\n"
        "for 0.2 s at a time.\n"
        "--trusted-proxies (comma-separated networks: 10.0.0.0/8,fd00::/8,192.0.2.7) names\n"
        "proxies such as the Ingress controller's pods or the API server: their connections\n"
        "count per client, the rightmost X-Forwarded-For address that is not itself a\n"
        "trusted proxy, for the per-address limits; X-Forwarded-For from anyone else is\n"
        "ignored. Default: none, every client is the address it connects from. Until its\n"
        "head names the client, a trusted proxy's connection counts under the proxy's own\n"
        "address, at most --max-pending-per-proxy (4x --max-pending-per-ip: 256) of them.\n"
        "--health-listen HOST:PORT serves /healthz, /readyz and /metrics on a listener of\n"
        "their own (default none), with a cap of 16 connections and a 2 s deadline apart\n"
        "from the clients': point the kubelet's probes there, so clients filling\n"
        "--max-pending cannot fail them and get the gateway restarted.\n");
}

static int parse_number(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end = NULL;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || !(d >= lo && d <= hi)) {
        fprintf(stderr, "telo-gateway: %s %s: want a number in %g..%g\n", flag, v, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* --allowed-origins a,b,c: each item kept in o's own storage (the argument is not modified). */
static int split_origins(struct options *o, const char *list)
{
    const char *p = list;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n > 0) {
            if (o->norigins == MAX_ORIGINS || o->nowned == MAX_ORIGINS) {
                fprintf(stderr, "telo-gateway: at most %d allowed origins\n", MAX_ORIGINS);
                return -1;
            }
            char *item = strndup(p, n);
            if (item == NULL)
                return -1;
            o->owned[o->nowned++] = item;
            o->origins[o->norigins++] = item;
        }
        p += n + (comma != NULL ? 1 : 0);
    }
    return 0;
}

/* HOST:PORT ("[::1]:8081" too) into host and *port. Returns 0, or -1 after saying why. */
static int split_host_port(const char *flag, const char *v, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(v, ':');
    if (colon == NULL || (size_t)(colon - v) >= hostlen) {
        fprintf(stderr, "telo-gateway: %s %s: want HOST:PORT (e.g. 0.0.0.0:8081)\n", flag, v);
        return -1;
    }
    snprintf(host, hostlen, "%.*s", (int)(colon - v), v);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    *port = atoi(colon + 1);
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    o->bind = "0.0.0.0:8081";
    for (int i = 1; i < argc; i++) {
        /* --flag=value as well as --flag value (the chart writes the first). */
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        const char *a = arg.name, *v = arg.value;
        double d = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--version") == 0) {
            printf("telo-gateway %s\n", TELO_VERSION);
            exit(0);
        }
        if (v == NULL) {
            fprintf(stderr, "telo-gateway: unknown or incomplete argument '%s'\n", a);
            return -1;
        }
        char log_err[128];
        int log_flag = telo_log_flag(a, v, log_err, sizeof(log_err));
        if (log_flag < 0) {
            fprintf(stderr, "telo-gateway: %s\n", log_err);
            return -1;
        }
        if (log_flag) {
            /* applied at once */
        } else if (strcmp(a, "--kubeconfig") == 0) {
            o->kubeconfig = v;
        } else if (strcmp(a, "--context") == 0) {
            o->context = v;
        } else if (strcmp(a, "--bind-address") == 0) {
            o->bind = v;
        } else if (strcmp(a, "--health-listen") == 0) {
            o->health = v;
        } else if (strcmp(a, "--tls-cert-file") == 0) {
            o->cfg.tls_cert_path = v;
        } else if (strcmp(a, "--tls-private-key-file") == 0) {
            o->cfg.tls_key_path = v;
        } else if (strcmp(a, "--allowed-origin") == 0) {
            if (o->norigins == MAX_ORIGINS) {
                fprintf(stderr, "telo-gateway: at most %d --allowed-origin\n", MAX_ORIGINS);
                return -1;
            }
            o->origins[o->norigins++] = v;
        } else if (strcmp(a, "--allowed-origins") == 0) {
            if (split_origins(o, v) != 0)
                return -1;
        } else if (strcmp(a, "--token-audience") == 0) {
            o->cfg.token_audience = v;
        } else if (strcmp(a, "--reauth-seconds") == 0) {
            if (parse_number(a, v, 0.1, 86400, &d) != 0)
                return -1;
            o->cfg.hub.reauth_s = d;
        } else if (strcmp(a, "--ring-bytes") == 0) {
            if (parse_number(a, v, 4096, 1 << 30, &d) != 0)
                return -1;
            o->cfg.hub.ring_bytes = (size_t)d;
        } else if (strcmp(a, "--client-queue-bytes") == 0) {
            if (parse_number(a, v, 4096, 1 << 28, &d) != 0)
                return -1;
            o->cfg.hub.client_queue_bytes = (size_t)d;
        } else if (strcmp(a, "--client-queue-total-bytes") == 0) {
            if (parse_number(a, v, 1 << 16, (double)((size_t)1 << 34), &d) != 0)
                return -1;
            o->cfg.hub.client_queue_total = (size_t)d;
        } else if (strcmp(a, "--max-sessions") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.hub.max_sessions = (size_t)d;
        } else if (strcmp(a, "--max-sessions-per-namespace") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.hub.max_sessions_per_namespace = (size_t)d;
        } else if (strcmp(a, "--ping-interval") == 0) {
            if (parse_number(a, v, 1, 3600, &d) != 0)
                return -1;
            o->cfg.hub.ping_interval_s = d;
        } else if (strcmp(a, "--auth-cache-seconds") == 0) {
            if (parse_number(a, v, 0.001, 3600, &d) != 0)
                return -1;
            o->cfg.auth_cache_s = d;
        } else if (strcmp(a, "--ended-keep-seconds") == 0) {
            if (parse_number(a, v, 1, 86400, &d) != 0)
                return -1;
            o->cfg.hub.ended_keep_s = d;
        } else if (strcmp(a, "--max-pending") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_pending = (size_t)d;
        } else if (strcmp(a, "--max-pending-per-ip") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_pending_per_source = (size_t)d;
        } else if (strcmp(a, "--first-byte-seconds") == 0) {
            if (parse_number(a, v, 0.1, 10, &d) != 0)
                return -1;
            o->cfg.first_byte_s = d;
        } else if (strcmp(a, "--max-pending-per-proxy") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_pending_per_proxy = (size_t)d;
        } else if (strcmp(a, "--trusted-proxies") == 0) {
            o->cfg.trusted_proxies = v; /* checked by gw_server_start */
        } else if (strcmp(a, "--max-clients") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_clients = (size_t)d;
        } else if (strcmp(a, "--max-clients-per-session") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_clients_per_session = (size_t)d;
        } else if (strcmp(a, "--max-clients-per-namespace") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_clients_per_namespace = (size_t)d;
        } else if (strcmp(a, "--max-debug-streams") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_debug_streams = (size_t)d;
        } else if (strcmp(a, "--max-debug-streams-per-namespace") == 0) {
            if (parse_number(a, v, 1, 1 << 20, &d) != 0)
                return -1;
            o->cfg.max_debug_streams_per_namespace = (size_t)d;
        } else if (strcmp(a, "--admission-cache-seconds") == 0) {
            if (parse_number(a, v, 0, 60, &d) != 0)
                return -1;
            o->cfg.admission.cache_s = d > 0 ? d : -1;
        } else if (strcmp(a, "--admission-rate") == 0) {
            if (parse_number(a, v, 0.01, 100000, &d) != 0)
                return -1;
            o->cfg.admission.rate = d;
        } else if (strcmp(a, "--admission-burst") == 0) {
            if (parse_number(a, v, 1, 100000, &d) != 0)
                return -1;
            o->cfg.admission.burst = d;
        } else if (strcmp(a, "--admission-rate-per-ip") == 0) {
            if (parse_number(a, v, 0.01, 100000, &d) != 0)
                return -1;
            o->cfg.admission.rate_per_source = d;
        } else if (strcmp(a, "--admission-burst-per-ip") == 0) {
            if (parse_number(a, v, 1, 100000, &d) != 0)
                return -1;
            o->cfg.admission.burst_per_source = d;
        } else if (strcmp(a, "--idle-keep-seconds") == 0) {
            if (parse_number(a, v, 1, 86400 * 7, &d) != 0)
                return -1;
            o->cfg.hub.idle_keep_s = d;
        } else {
            fprintf(stderr, "telo-gateway: unknown argument '%s'\n", a);
            return -1;
        }
        i += util_arg_consumed(&arg);
    }
    o->cfg.origins = o->origins;
    o->cfg.norigins = o->norigins;
    return 0;
}

static void free_options(struct options *o)
{
    for (size_t i = 0; i < o->nowned; i++)
        free(o->owned[i]);
    o->nowned = 0;
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    telo_log(TELO_LOG_INFO, "shutting down", "signal=%d", w->signum);
    ev_break(loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
    struct options o;
    memset(&o, 0, sizeof(o));
    if (parse_args(argc, argv, &o) != 0) {
        free_options(&o);
        usage(stderr);
        return 2;
    }
    char host[128], health_host[128];
    if (split_host_port("--bind-address", o.bind, host, sizeof(host), &o.cfg.port) != 0 ||
        (o.health != NULL && split_host_port("--health-listen", o.health, health_host,
                                             sizeof(health_host), &o.cfg.health_port) != 0)) {
        free_options(&o);
        return 2;
    }
    o.cfg.address = host;
    o.cfg.health_address = o.health != NULL ? health_host : NULL;
    /* Socket writes use MSG_NOSIGNAL, but OpenSSL's (through libcurl) do not. */
    signal(SIGPIPE, SIG_IGN);

    struct telo_err err = {0};
    struct kube_config *kcfg = NULL;
    struct kube_transport *t = NULL;
    struct gw_server *srv = NULL;
    struct ev_loop *loop = ev_default_loop(0);
    struct kube_transport_opts topts = {.user_agent = GW_USER_AGENT};
    int rc = 1;
    if (kube_config_load_env(o.kubeconfig, o.context, &kcfg, &err) != 0 ||
        (t = kube_transport_new(loop, kcfg, &topts, &err)) == NULL ||
        (srv = gw_server_new(loop, t, &o.cfg, &err)) == NULL || gw_server_start(srv, &err) != 0) {
        telo_log(TELO_LOG_ERROR, "cannot start", "error=\"%s\"", err.msg);
        goto out;
    }
    telo_log(TELO_LOG_INFO, "serving attach",
             "address=%s port=%d tls=%s api_server=%s token_audience=\"%s\" allowed_origins=%zu "
             "trusted_proxies=\"%s\" health_port=%d",
             host, gw_server_port(srv), o.cfg.tls_cert_path ? "on" : "off", kcfg->server,
             o.cfg.token_audience ? o.cfg.token_audience : "", o.norigins,
             o.cfg.trusted_proxies ? o.cfg.trusted_proxies : "", gw_server_health_port(srv));
    ev_signal sigterm, sigint;
    ev_signal_init(&sigterm, on_signal, SIGTERM);
    ev_signal_init(&sigint, on_signal, SIGINT);
    ev_signal_start(loop, &sigterm);
    ev_signal_start(loop, &sigint);
    ev_run(loop, 0);
    ev_signal_stop(loop, &sigterm);
    ev_signal_stop(loop, &sigint);
    rc = 0;
out:
    gw_server_free(srv);
    kube_transport_free(t);
    kube_config_free(kcfg);
    free_options(&o);
    return rc;
}

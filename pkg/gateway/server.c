/* The gateway's HTTP front: the attach route with its WebSocket handshake and admission, and
 * /healthz, /readyz and /metrics, on the client listening socket of the libev loop; the last
 * three also on a health listener of their own, for the kubelet's probes. */
#include "gateway/server.h"

#include "gateway/auth.h"
#include "gateway/debug.h"
#include "gateway/front.h"
#include "gateway/limits.h"
#include "gateway/linger.h"
#include "gateway/proto.h"
#include "gateway/proxies.h"
#include "session/phase.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/lograte.h"
#include "ws/frame.h"
#include "ws/http.h"
#include "ws/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define HEAD_S   10.0 /* the whole head, and admission, within this (slow senders included) */
/* The health listener: the kubelet probes every few seconds with one connection at a time, so a
 * small cap of its own, not the clients' max_pending, and a short deadline for the whole head. */
#define HEALTH_PENDING_MAX 16
#define HEALTH_HEAD_S      2.0
#define TOKEN_MAX          8192
#define LINGER_MAX         256 /* refused connections read to their end before the close */
#define LINGER_S           2.0
#define ACCEPT_BACKOFF_S   0.2 /* out of descriptors: accept again this much later */
#define ACCEPT_BATCH       16  /* accepts per event, so a connect flood cannot hold the loop */
#define DRAIN_READS        16  /* reads of a refused peer's bytes before its answer, at most */
#define TLS_RELOAD_S       1.0 /* a renewed certificate file is looked for this often, at most */
/* Refusal lines: 100 at once, 10 a second after; those held back are told within 10 s. */
#define REFUSAL_LOG_BURST   100
#define REFUSAL_LOG_PER_S   10
#define REFUSAL_LOG_FLUSH_S 10.0
#define RETRY_AFTER_S       5    /* over a client cap: when to try again */
#define WRITE_S             10.0 /* an answer not taken by the peer within this: dropped */

struct conn {
    struct gw_server *srv;
    int fd;
    struct ws_conn_io sock; /* how to read and write fd: plain, or TLS (then owning it) */
    int handshaking;        /* TLS handshake not finished */
    ev_io io;
    ev_timer timer;
    char head[HEAD_MAX + 1];
    size_t len;
    size_t head_end;
    char remote[GW_ADDRESS_KEY_MAX];
    char source[GW_ADDRESS_KEY_MAX]; /* what it is limited under (gw_source_key) */
    int counted;                     /* source holds one of pending_by_source's counts */
    int proxy_counted;               /* source (a proxy's) holds one of pending_by_proxy's */
    struct sockaddr_storage peer;    /* a trusted proxy's: the client is read from the head */
    int via_proxy;
    int health;      /* from the health listener: health and metrics only, counted apart */
    int heard;       /* the peer has sent something (the first-byte deadline is behind it) */
    double accepted; /* when, for the head deadline */
    struct gw_gate_req *adm;
    struct gw_target target;
    enum gw_proto proto;
    char accept[WS_ACCEPT_KEY_SIZE];
    int has_last_seq;
    uint32_t last_seq;
    char *token;     /* the credential under admission, kept for the hub's re-authorization */
    struct buf out;  /* the answer, written as the peer takes it (bounded; within WRITE_S) */
    size_t out_sent; /* bytes of out written */
    void (*then)(struct conn *c); /* once out is written: end the connection or hand it on */
    struct gw_attach up;          /* an upgraded request waiting for its 101 to be written */
    char *up_strings[4];          /* up's pod, phase, uid and subject, owned */
    struct conn *prev, *next;
};

struct gw_server {
    struct ev_loop *loop;
    struct kube_transport *t;
    struct gw_server_config cfg;
    char *address;
    char *health_address; /* NULL: no health listener */
    char **origins;
    int fd;
    int port;
    ev_io accept_io;
    int health_fd; /* -1: no health listener */
    int health_port;
    ev_io health_io;
    size_t health_pending; /* connections from the health listener */
    struct gw_auth *auth;
    struct gw_hub *hub;
    struct gw_relays *relays;
    struct ws_tls_ctx *tls; /* NULL: plain HTTP */
    struct conn *conns;
    struct gw_front_stats stats;
    struct gw_gate *gate;
    struct gw_sources *pending_by_source;
    struct gw_sources *pending_by_proxy; /* a trusted proxy's connections before their head */
    struct gw_proxies *proxies;          /* NULL: none trusted */
    size_t pending;                      /* connections in conns */
    struct gw_lingering *lingering;      /* refused at accept, their answer out */
    ev_timer accept_backoff;
    int accept_stalled;
    /* Refusals are caused at will by anyone who can connect: their lines have a budget, and
     * the count of those held back is told within REFUSAL_LOG_FLUSH_S. */
    struct telo_log_rate refusal_log;
    ev_timer refusal_log_flush;
};

static void conn_free(struct conn *c)
{
    struct gw_server *srv = c->srv;
    ev_io_stop(srv->loop, &c->io);
    ev_timer_stop(srv->loop, &c->timer);
    gw_gate_cancel(c->adm);
    if (c->health)
        srv->health_pending--;
    else
        srv->pending--;
    if (c->counted)
        gw_sources_add(srv->pending_by_source, c->source, -1, ev_now(srv->loop));
    if (c->proxy_counted)
        gw_sources_add(srv->pending_by_proxy, c->source, -1, ev_now(srv->loop));
    if (c->token != NULL) {
        OPENSSL_cleanse(c->token, strlen(c->token));
        free(c->token);
    }
    buf_release(&c->out);
    for (size_t i = 0; i < sizeof(c->up_strings) / sizeof(c->up_strings[0]); i++)
        free(c->up_strings[i]);
    if (c->sock.close != NULL)
        c->sock.close(c->sock.io_ud);
    if (c->fd >= 0)
        close(c->fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c);
}

static ssize_t plain_recv(void *io_ud, void *buf, size_t len)
{
    return read(*(int *)io_ud, buf, len);
}

static ssize_t plain_send(void *io_ud, const void *buf, size_t len)
{
    return send(*(int *)io_ud, buf, len, MSG_NOSIGNAL);
}

/* Writes what the socket takes of c->out. Returns 1 when all of it is out, 0 when the socket is
 * full, -1 when the connection failed. */
static int flush_out(struct conn *c)
{
    while (c->out_sent < c->out.len) {
        ssize_t n =
            c->sock.send(c->sock.io_ud, c->out.data + c->out_sent, c->out.len - c->out_sent);
        if (n > 0) {
            c->out_sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
    return 1;
}

static void conn_write(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct conn *c = w->data;
    int rc = flush_out(c);
    if (rc < 0)
        return conn_free(c);
    if (rc > 0) {
        ev_io_stop(loop, &c->io);
        c->then(c);
    }
}

/* Sends c->out without blocking the loop: what the socket does not take now goes out as the peer
 * reads (a write watcher), and a peer that has not taken all of it within WRITE_S is dropped
 * (conn_timeout). Then runs then(c), which ends the connection or hands it on. */
static void send_out(struct conn *c, void (*then)(struct conn *c))
{
    struct ev_loop *loop = c->srv->loop;
    /* An admission still running (a refusal on its timeout) must not answer this one again. */
    gw_gate_cancel(c->adm);
    c->adm = NULL;
    c->then = then;
    int rc = c->out.data != NULL ? flush_out(c) : -1;
    if (rc < 0)
        return conn_free(c);
    if (rc > 0)
        return then(c);
    ev_io_stop(loop, &c->io);
    ev_io_set(&c->io, c->fd, EV_WRITE);
    ev_set_cb(&c->io, conn_write);
    ev_io_start(loop, &c->io);
    ev_timer_stop(loop, &c->timer);
    ev_timer_set(&c->timer, WRITE_S, 0.);
    ev_timer_start(loop, &c->timer);
}

/* After an answer: no more from us, then the connection ends. */
static void end_answer(struct conn *c)
{
    shutdown(c->fd, SHUT_WR);
    conn_free(c);
}

/* Hands fd and its TLS stream (when there is one) to a new owner: the connection keeps neither. */
static int take_socket(struct conn *c, struct ws_conn_io *io)
{
    int fd = c->fd;
    *io = c->sock;
    c->fd = -1;
    memset(&c->sock, 0, sizeof(c->sock));
    return fd;
}

/* Sends a whole answer (at most 1 MiB) and ends the connection. */
static void respond(struct conn *c, int code, const char *content_type, const char *body,
                    const char *extra_headers)
{
    buf_release(&c->out);
    buf_init(&c->out, (size_t)1 << 20);
    c->out_sent = 0;
    if (gw_http_answer(&c->out, code, content_type, body, extra_headers) != 0)
        return conn_free(c);
    send_out(c, end_answer);
}

static void refuse(struct conn *c, int code, const char *reason, const char *message,
                   const char *subject);

/* Whether a refusal's line may be written now (see refusal_log). */
static int refusal_logged(struct gw_server *srv)
{
    if (telo_log_rate_allow(&srv->refusal_log, ev_now(srv->loop)))
        return 1;
    if (!ev_is_active(&srv->refusal_log_flush)) {
        ev_timer_set(&srv->refusal_log_flush, REFUSAL_LOG_FLUSH_S, 0.);
        ev_timer_start(srv->loop, &srv->refusal_log_flush);
    }
    return 0;
}

static void refusal_log_flush(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct gw_server *srv = w->data;
    telo_log_rate_flush(&srv->refusal_log, ev_now(loop));
}

/* Refuses over a limit: 429 or 503 with Retry-After (whole seconds, at least 1), counted. */
static void refuse_limited(struct conn *c, enum gw_limit which, int code, const char *message,
                           double retry_after_s)
{
    gw_front_limited(&c->srv->stats, which, code);
    if (refusal_logged(c->srv))
        telo_log(TELO_LOG_INFO, "attach refused",
                 "session=%s/%s code=%d limit=%s remote=%s why=\"%s\"", c->target.namespace,
                 c->target.name, code, gw_limit_name(which), c->remote, message);
    struct buf b;
    buf_init(&b, 4096);
    gw_error_status_json(&b, code, code == 429 ? "TooManyRequests" : "ServiceUnavailable", message);
    char extra[64];
    long secs = retry_after_s < 1 ? 1 : (long)(retry_after_s + 0.999);
    snprintf(extra, sizeof(extra), "Retry-After: %ld\r\n", secs);
    respond(c, code, "application/json", b.data, extra);
    buf_release(&b);
}

/* Refuses an attach with a Kubernetes Status body, and logs why (never the token). */
static void refuse(struct conn *c, int code, const char *reason, const char *message,
                   const char *subject)
{
    gw_front_refused(&c->srv->stats, code);
    if (refusal_logged(c->srv))
        telo_log(code >= 500 ? TELO_LOG_WARN : TELO_LOG_INFO, "attach refused",
                 "session=%s/%s code=%d reason=%s subject=\"%s\" remote=%s why=\"%s\"",
                 c->target.namespace, c->target.name, code, reason, subject ? subject : "",
                 c->remote, message);
    struct buf b;
    buf_init(&b, 4096);
    /* The client may not even be authenticated: API error text and the like stay in the log. */
    gw_error_status_json(&b, code, reason,
                         code == 503 ? "authorization unavailable, retry" : message);
    respond(c, code, "application/json", b.data,
            code == 401 ? "WWW-Authenticate: Bearer realm=\"telo-gateway\"\r\n" : NULL);
    buf_release(&b);
}

/* Refuses (and returns 1) when one more attached client would pass a cap. */
static int over_client_caps(struct conn *c)
{
    struct gw_server *srv = c->srv;
    size_t all = gw_hub_metrics(srv->hub)->clients + gw_relays_count(srv->relays);
    if (all >= srv->cfg.max_clients) {
        refuse_limited(c, GW_L_CLIENTS, 503, "the gateway serves as many clients as it may",
                       RETRY_AFTER_S);
        return 1;
    }
    /* Debug streams count with the attach clients: each holds up to ~1.5 MiB (its queue and the
     * event being parsed), so one session's viewers must not be able to open them unbounded. */
    if (gw_hub_namespace_clients(srv->hub, c->target.namespace) +
            gw_relays_namespace_count(srv->relays, c->target.namespace) >=
        srv->cfg.max_clients_per_namespace) {
        refuse_limited(c, GW_L_CLIENTS_PER_NAMESPACE, 429,
                       "as many clients are attached to this namespace's sessions as it may have "
                       "(--max-clients-per-namespace)",
                       RETRY_AFTER_S);
        return 1;
    }
    char session[600];
    snprintf(session, sizeof(session), "%s/%s", c->target.namespace, c->target.name);
    if (gw_hub_session_clients(srv->hub, c->target.namespace, c->target.name) +
            gw_relays_session_count(srv->relays, session) >=
        srv->cfg.max_clients_per_session) {
        refuse_limited(c, GW_L_CLIENTS_PER_SESSION, 429,
                       "as many clients are attached to this session as it may have",
                       RETRY_AFTER_S);
        return 1;
    }
    return 0;
}

/* The 101 is out: the hub takes the socket; the request (target, head bytes past the handshake)
 * stays ours until it returns. */
static void hand_to_hub(struct conn *c)
{
    struct gw_server *srv = c->srv;
    struct ws_conn_io io;
    int fd = take_socket(c, &io);
    struct telo_err err = {0};
    int rc =
        gw_hub_attach(srv->hub, fd, &io, c->head + c->head_end, c->len - c->head_end, &c->up, &err);
    if (rc != 0)
        telo_log(TELO_LOG_WARN, "attach failed after the upgrade", "session=%s/%s error=\"%s\"",
                 c->up.namespace, c->up.name, err.msg);
    conn_free(c);
}

static void upgrade(struct conn *c, const struct gw_admitted *a)
{
    struct gw_server *srv = c->srv;
    /* Copied: the answer may go out after a has gone. */
    const char *from[4] = {a->pod, a->phase, a->uid, a->subject};
    for (size_t i = 0; i < 4; i++) {
        if ((c->up_strings[i] = strdup(from[i] != NULL ? from[i] : "")) == NULL)
            return refuse(c, 503, "ServiceUnavailable", "out of memory", a->subject);
    }
    c->up = (struct gw_attach){.namespace = c->target.namespace,
                               .name = c->target.name,
                               .pod = c->up_strings[0],
                               .phase = c->up_strings[1],
                               .exit_code = a->exit_code,
                               .uid = c->up_strings[2],
                               .ready_since = a->ready_since,
                               .proto = c->proto,
                               .has_last_seq = c->has_last_seq,
                               .last_seq = c->last_seq,
                               .subject = c->up_strings[3],
                               .token = c->token};
    const char *why = NULL;
    int code = gw_hub_check(srv->hub, &c->up, &why);
    if (code == 503)
        return refuse_limited(c, GW_L_SESSIONS, 503, why, RETRY_AFTER_S);
    if (code == 429)
        return refuse_limited(c, GW_L_SESSIONS_PER_NAMESPACE, 429, why, RETRY_AFTER_S);
    if (code != 0)
        return refuse(c, code, "Conflict", why, a->subject);
    if (over_client_caps(c))
        return;
    buf_release(&c->out);
    buf_init(&c->out, 512);
    c->out_sent = 0;
    if (buf_printf(&c->out,
                   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                   "Sec-WebSocket-Protocol: %s\r\n\r\n",
                   c->accept, gw_proto_name(c->proto)) != 0)
        return conn_free(c);
    send_out(c, hand_to_hub);
}

static void relay(struct conn *c, const struct gw_admitted *a)
{
    struct gw_server *srv = c->srv;
    if (!a->inspect)
        return refuse(c, 404, "NotFound",
                      "the session has no debug stream: start it with spec.inspect: true",
                      a->subject);
    if (session_phase_parse(a->phase) != SESSION_PHASE_RUNNING || a->pod_ip[0] == '\0')
        return refuse(c, 409, "Conflict",
                      "the session is not running; its debug stream starts with it", a->subject);
    if (over_client_caps(c))
        return;
    /* Each holds a 1 MiB queue and a 256 KiB event at most: bounded apart from the attach
     * clients, whose queues share --client-queue-total-bytes. */
    if (gw_relays_count(srv->relays) >= srv->cfg.max_debug_streams)
        return refuse_limited(c, GW_L_DEBUG_STREAMS, 503,
                              "the gateway relays as many debug streams as it may", RETRY_AFTER_S);
    if (gw_relays_namespace_count(srv->relays, c->target.namespace) >=
        srv->cfg.max_debug_streams_per_namespace)
        return refuse_limited(c, GW_L_DEBUG_STREAMS_PER_NAMESPACE, 429,
                              "as many debug streams of this namespace's sessions are relayed as "
                              "it may have (--max-debug-streams-per-namespace)",
                              RETRY_AFTER_S);
    char session[600];
    snprintf(session, sizeof(session), "%s/%s", c->target.namespace, c->target.name);
    struct ws_conn_io io;
    int fd = take_socket(c, &io);
    struct telo_err err = {0};
    struct gw_relay_client who = {.namespace = c->target.namespace,
                                  .name = c->target.name,
                                  .uid = a->uid,
                                  .pod = a->pod,
                                  .token = c->token};
    if (gw_relays_add(srv->relays, fd, &io, a->pod_ip, GW_INSPECT_PORT, session, &who, &err) != 0)
        telo_log(TELO_LOG_WARN, "debug relay failed", "session=%s error=\"%s\"", session, err.msg);
    conn_free(c);
}

static void admitted(const struct gw_admitted *a, void *ud)
{
    struct conn *c = ud;
    c->adm = NULL;
    switch (a->verdict) {
    case GW_ALLOW:
        return strcmp(c->target.action, "debug") == 0 ? relay(c, a) : upgrade(c, a);
    case GW_UNAUTHENTICATED:
        return refuse(c, 401, "Unauthorized", a->reason, a->subject);
    case GW_FORBIDDEN:
        return refuse(c, 403, "Forbidden", a->reason, a->subject);
    case GW_NOT_FOUND:
        return refuse(c, 404, "NotFound", a->reason, a->subject);
    case GW_TOO_MANY:
        return refuse_limited(c,
                              strcmp(a->reason, GW_GATE_PER_SOURCE_REASON) == 0
                                  ? GW_L_ADMISSION_RATE_PER_SOURCE
                                  : GW_L_ADMISSION_RATE,
                              429, a->reason, a->retry_after);
    case GW_UNAVAILABLE:
        break;
    }
    refuse(c, 503, "ServiceUnavailable", a->reason, a->subject);
}

/* A request without Origin is no browser's and passes; a browser's must name an allowed origin
 * (none configured: no browser origin is allowed). */
static int origin_allowed(const struct gw_server *srv, const char *origin)
{
    if (origin == NULL)
        return 1;
    for (size_t i = 0; i < srv->cfg.norigins; i++) {
        if (strcmp(srv->origins[i], "*") == 0 || strcasecmp(srv->origins[i], origin) == 0)
            return 1;
    }
    return 0;
}

static void metrics(struct conn *c)
{
    struct gw_server *srv = c->srv;
    struct gw_front_gauges g = {.hub = gw_hub_metrics(srv->hub),
                                .gate = gw_gate_metrics(srv->gate),
                                .debug_streams = gw_relays_count(srv->relays),
                                .debug_frames = gw_relays_frames(srv->relays),
                                .debug_stalled = gw_relays_stalled(srv->relays),
                                .pending = srv->pending - (c->health ? 0 : 1), /* not itself */
                                .client_queued = gw_hub_queued_bytes(srv->hub),
                                .accept_backoff_s = ACCEPT_BACKOFF_S,
                                .log_lines_suppressed = srv->refusal_log.held_total};
    struct buf b;
    buf_init(&b, (size_t)1 << 20);
    if (gw_front_metrics(&b, &srv->stats, &g) != 0) {
        buf_release(&b);
        return respond(c, 503, "text/plain; charset=utf-8", "out of memory\n", NULL);
    }
    respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, NULL);
    buf_release(&b);
}

/* The bearer token of the request: the Authorization header, else the subprotocol's. */
static void request_token(const struct ws_http_head *h, const char *sub_token, char *out,
                          size_t outlen)
{
    const char *auth = ws_http_header(h, "Authorization");
    out[0] = '\0';
    if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0) {
        const char *t = auth + 7;
        while (*t == ' ')
            t++;
        snprintf(out, outlen, "%s", t);
        return;
    }
    snprintf(out, outlen, "%s", sub_token);
}

/* Starts admission of token for the request's session; the verdict arrives in admitted. */
static void admit(struct conn *c, char *token)
{
    struct telo_err err = {0};
    c->adm = gw_gate_admit(c->srv->gate, c->source, c->target.namespace, c->target.name, token,
                           admitted, c, &err);
    c->token = token; /* kept for re-authorization; freed (cleansed) with the connection */
    if (c->adm == NULL)
        return refuse(c, 503, "ServiceUnavailable", err.msg, NULL);
    /* Wait for the verdict; the connection's timer still bounds the whole exchange. */
}

/* GET .../debug: a server-sent-event stream, authorized as attach is. */
static void debug_request(struct conn *c, const struct ws_http_head *h)
{
    if (strcmp(h->method, "GET") != 0)
        return refuse(c, 400, "BadRequest", "the debug stream is GET only", NULL);
    if (!origin_allowed(c->srv, ws_http_header(h, "Origin")))
        return refuse(c, 403, "Forbidden", "forbidden origin", NULL);
    char *token = malloc(TOKEN_MAX);
    if (token == NULL)
        return refuse(c, 503, "ServiceUnavailable", "out of memory", NULL);
    request_token(h, "", token, TOKEN_MAX);
    if (token[0] == '\0') {
        free(token);
        return refuse(c, 401, "Unauthorized", "no token: send Authorization: Bearer <token>", NULL);
    }
    admit(c, token);
}

/* Headers a request must not repeat: we read the first, a proxy or an authorizer in front of us
 * may read the last, and the two would then decide on different values. */
static const char *const single_headers[] = {"Upgrade", "Sec-WebSocket-Key", "Authorization",
                                             "Origin"};

static void attach_request(struct conn *c, const struct ws_http_head *h)
{
    struct gw_server *srv = c->srv;
    for (size_t i = 0; i < sizeof(single_headers) / sizeof(single_headers[0]); i++) {
        if (ws_http_header_count(h, single_headers[i]) > 1) {
            char message[80];
            snprintf(message, sizeof(message), "the request repeats the %s header",
                     single_headers[i]);
            return refuse(c, 400, "BadRequest", message, NULL);
        }
    }
    if (strcmp(c->target.action, "debug") == 0)
        return debug_request(c, h);
    const char *key = ws_http_header(h, "Sec-WebSocket-Key");
    const char *version = ws_http_header(h, "Sec-WebSocket-Version");
    if (strcmp(h->method, "GET") != 0 ||
        !ws_http_list_has(ws_http_header(h, "Upgrade"), "websocket") ||
        !ws_http_list_has(ws_http_header(h, "Connection"), "upgrade") || key == NULL ||
        ws_accept_key(key, c->accept) != 0)
        return refuse(c, 400, "BadRequest",
                      "attach is a WebSocket endpoint: send GET with Upgrade: websocket and a "
                      "valid Sec-WebSocket-Key",
                      NULL);
    if (version == NULL || strcmp(version, "13") != 0)
        return refuse(c, 400, "BadRequest", "Sec-WebSocket-Version must be 13", NULL);
    if (!origin_allowed(srv, ws_http_header(h, "Origin")))
        return refuse(c, 403, "Forbidden", "forbidden origin", NULL);
    char *sub_token = malloc(TOKEN_MAX), *token = malloc(TOKEN_MAX);
    if (sub_token == NULL || token == NULL) {
        free(sub_token);
        free(token);
        return refuse(c, 503, "ServiceUnavailable", "out of memory", NULL);
    }
    int bad_token = 0;
    c->proto = gw_pick_protocol(ws_http_header(h, "Sec-WebSocket-Protocol"), sub_token, TOKEN_MAX,
                                &bad_token);
    request_token(h, sub_token, token, TOKEN_MAX);
    free(sub_token);
    if (c->proto == GW_PROTO_NONE) {
        free(token);
        return refuse(c, 400, "BadRequest",
                      "no supported subprotocol: offer v5.channel.k8s.io, v4.channel.k8s.io or "
                      "telo.io.v1",
                      NULL);
    }
    char value[32];
    if (ws_http_query_param(c->target.query, "lastSeq", value, sizeof(value))) {
        char *end = NULL;
        unsigned long long n = strtoull(value, &end, 10);
        if (end != value && *end == '\0' && n <= 0xFFFFFFFFull) {
            c->has_last_seq = 1;
            c->last_seq = (uint32_t)n;
        }
    }
    if (token[0] == '\0') {
        free(token);
        return refuse(c, 401, "Unauthorized",
                      bad_token ? "the bearer token subprotocol does not decode"
                                : "no token: send Authorization: Bearer <token> or the "
                                  "base64url.bearer.authorization.k8s.io.<token> subprotocol",
                      NULL);
    }
    admit(c, token);
}

/* A trusted proxy's request: the client its X-Forwarded-For names takes over the pending count
 * the proxy's connection held under the proxy's own address since accept. Every X-Forwarded-For
 * line counts, in order: a proxy may append its own line after a client's rather than extend the
 * client's. Returns 0, or -1 when that client is over its cap (answered 429). */
static int count_forwarded_client(struct conn *c, const struct ws_http_head *h)
{
    struct gw_server *srv = c->srv;
    char joined[HEAD_MAX + 1];
    size_t used = 0;
    joined[0] = '\0';
    for (size_t i = 0; i < h->nheaders; i++) {
        if (strcasecmp(h->headers[i].name, "X-Forwarded-For") != 0)
            continue;
        int n = snprintf(joined + used, sizeof(joined) - used, "%s%s", used > 0 ? "," : "",
                         h->headers[i].value);
        if (n < 0 || (size_t)n >= sizeof(joined) - used)
            break; /* cannot happen: the values come from a head of at most HEAD_MAX bytes */
        used += (size_t)n;
    }
    gw_sources_add(srv->pending_by_proxy, c->source, -1, ev_now(srv->loop));
    c->proxy_counted = 0;
    gw_proxies_client(srv->proxies, (const struct sockaddr *)&c->peer, used > 0 ? joined : NULL,
                      c->source, c->remote);
    if ((size_t)gw_sources_count(srv->pending_by_source, c->source) >=
        srv->cfg.max_pending_per_source) {
        refuse_limited(c, GW_L_PENDING_PER_SOURCE, 429,
                       "too many connections waiting from this address", 1.0);
        return -1;
    }
    gw_sources_add(srv->pending_by_source, c->source, 1, ev_now(srv->loop));
    c->counted = 1;
    return 0;
}

static void handle(struct conn *c)
{
    struct ws_http_head h;
    struct telo_err err = {0};
    c->srv->stats.requests++;
    char saved = c->head[c->head_end];
    if (ws_http_parse_request(c->head, c->head_end, &h, &err) != 0)
        return respond(c, 400, "text/plain; charset=utf-8", "bad request\n", NULL);
    c->head[c->head_end] = saved;
    if (c->via_proxy && count_forwarded_client(c, &h) != 0)
        return;
    const char *target = h.target;
    if (!c->health && gw_parse_target(target, &c->target) == 0)
        return attach_request(c, &h);
    const char *q = strchr(target, '?');
    size_t plen = q != NULL ? (size_t)(q - target) : strlen(target);
    int health = (plen == 8 && strncmp(target, "/healthz", 8) == 0) ||
                 (plen == 7 && strncmp(target, "/readyz", 7) == 0);
    int is_metrics = plen == 8 && strncmp(target, "/metrics", 8) == 0;
    if (!health && !is_metrics)
        return respond(c, 404, "text/plain; charset=utf-8", "not found\n", NULL);
    if (strcmp(h.method, "GET") != 0)
        return respond(c, 405, "text/plain; charset=utf-8", "method not allowed\n",
                       "Allow: GET\r\n");
    if (health)
        return respond(c, 200, "text/plain; charset=utf-8", "ok\n", NULL);
    metrics(c);
}

static void conn_read(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct conn *c = w->data;
    if (!c->heard) {
        /* Something came (or the end): from now on the head deadline alone. */
        c->heard = 1;
        double left = c->accepted + (c->health ? HEALTH_HEAD_S : HEAD_S) - ev_now(loop);
        ev_timer_stop(loop, &c->timer);
        ev_timer_set(&c->timer, left > 0 ? left : 0., 0.);
        ev_timer_start(loop, &c->timer);
    }
    if (c->adm != NULL) {
        /* Waiting for admission: a peer that hangs up frees its slot; bytes it sends early (a
         * first WebSocket frame) stay in the kernel until the upgrade. */
        char probe;
        ssize_t n = recv(c->fd, &probe, 1, MSG_PEEK);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            conn_free(c);
        else
            ev_io_stop(c->srv->loop, &c->io);
        return;
    }
    if (c->handshaking) {
        int want_write = 0;
        int rc = ws_tls_handshake(c->sock.io_ud, &want_write);
        if (rc < 0)
            return conn_free(c); /* not TLS, or nothing in common: no HTTP answer possible */
        ev_io_stop(c->srv->loop, &c->io);
        ev_io_set(&c->io, c->fd, want_write ? EV_WRITE : EV_READ);
        ev_io_start(c->srv->loop, &c->io);
        if (rc == 0)
            return;
        c->handshaking = 0;
    }
    for (;;) {
        ssize_t n = c->sock.recv(c->sock.io_ud, c->head + c->len, HEAD_MAX - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0)
            return conn_free(c);
        size_t searched = c->len;
        c->len += (size_t)n;
        long end = ws_http_head_end(c->head, c->len, searched, HEAD_MAX);
        if (end < 0)
            return respond(c, 431, "text/plain; charset=utf-8", "request head too large\n", NULL);
        if (end > 0) {
            c->head_end = (size_t)end;
            return handle(c);
        }
        if (c->len == HEAD_MAX)
            return respond(c, 431, "text/plain; charset=utf-8", "request head too large\n", NULL);
    }
}

static void conn_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct conn *c = w->data;
    if (c->adm != NULL)
        return refuse(c, 503, "ServiceUnavailable", "admission timed out", NULL);
    /* The first-byte deadline met by a loop that came back late (busy with another tenant's
     * flood) while the client's bytes wait unread: read them, under the head's deadline,
     * rather than close on them (which resets the connection). */
    char probe;
    if (!c->heard && recv(c->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
        return conn_read(loop, &c->io, EV_READ);
    conn_free(c);
}

/* Answers a connection over a pending cap at once, before anything is read or allocated for it:
 * a Status with Retry-After on plain HTTP (a TLS one is closed: the handshake is the cost being
 * refused). */
static void refuse_at_accept(struct gw_server *srv, int fd, int code, enum gw_limit which,
                             const char *message, const char *remote)
{
    gw_front_limited(&srv->stats, which, code);
    telo_log(TELO_LOG_DEBUG, "connection refused", "code=%d limit=%s remote=%s", code,
             gw_limit_name(which), remote);
    if (srv->tls != NULL) {
        close(fd);
        return;
    }
    /* What already came gets no reset; bounded, so a peer that keeps sending cannot hold the
     * loop here (the lingering close reads the rest). */
    char sink[4096];
    for (int i = 0; i < DRAIN_READS && recv(fd, sink, sizeof(sink), 0) > 0; i++)
        ;
    struct buf body, answer;
    buf_init(&body, 4096);
    buf_init(&answer, 4096);
    gw_error_status_json(&body, code, code == 429 ? "TooManyRequests" : "ServiceUnavailable",
                         message);
    /* One small send that never waits: a peer with no room for it is closed. */
    int sent =
        body.data != NULL &&
        gw_http_answer(&answer, code, "application/json", body.data, "Retry-After: 1\r\n") == 0 &&
        send(fd, answer.data, answer.len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)answer.len;
    buf_release(&body);
    buf_release(&answer);
    if (sent && shutdown(fd, SHUT_WR) == 0)
        gw_lingering_add(srv->lingering, fd); /* what the peer still sends gets no reset */
    else
        close(fd);
}

static void accept_resume(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct gw_server *srv = w->data;
    ev_io_start(loop, &srv->accept_io);
    if (srv->health_fd >= 0)
        ev_io_start(loop, &srv->health_io);
}

/* A renewed certificate (cert-manager, a Secret volume's update) is served from the next
 * connection on: the files are looked at, at most every TLS_RELOAD_S, when connections arrive. */
static void reload_tls(struct gw_server *srv, double now)
{
    struct telo_err err = {0};
    int rc = ws_tls_ctx_reload(srv->tls, now, TLS_RELOAD_S, &err);
    if (rc > 0)
        telo_log(TELO_LOG_INFO, "tls certificate reloaded", "cert=%s", srv->cfg.tls_cert_path);
    else if (rc < 0)
        telo_log(TELO_LOG_WARN, "tls certificate reload failed; serving the previous one",
                 "error=\"%s\"", err.msg);
}

/* Every pending slot is taken. One address's silent or trickling connections (each may hold
 * its slot up to the head's 10 s) must not keep everyone else out: the oldest connection still
 * sending its head from the address holding the most goes, when that address holds at least two
 * more than the newcomer's (mine counts it). Returns whether a slot was freed. */
static int make_pending_room(struct gw_server *srv, const struct gw_sources *mine,
                             const char *source)
{
    int theirs = 0, own = gw_sources_count(mine, source);
    struct conn *victim = NULL;
    /* The list is newest first: on a tie the later one met is the older. */
    for (struct conn *c = srv->conns; c != NULL; c = c->next) {
        if (!c->counted || c->adm != NULL)
            continue; /* a proxy's (capped apart), or past its head and awaiting its verdict */
        int n = gw_sources_count(srv->pending_by_source, c->source);
        if (n > theirs || (n == theirs && victim != NULL && c->accepted <= victim->accepted)) {
            theirs = n;
            victim = c;
        }
    }
    if (victim == NULL || theirs < own + 2)
        return 0;
    gw_front_limited(&srv->stats, GW_L_PENDING, 503);
    conn_free(victim);
    return 1;
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct gw_server *srv = w->data;
    int health = w == &srv->health_io;
    if (srv->tls != NULL)
        reload_tls(srv, ev_now(loop));
    /* The watcher is level-triggered: what is left in the backlog is taken on the next turn,
     * after the other watchers have had theirs. */
    for (int batch = 0; batch < ACCEPT_BATCH; batch++) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof(addr);
        int fd = accept(w->fd, (struct sockaddr *)&addr, &alen);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            /* The connection stays in the backlog and the level-triggered watcher would fire
             * again at once: pause accepting instead of spinning until a descriptor frees. */
            srv->stats.accept_exhausted++;
            if (!srv->accept_stalled)
                telo_log(TELO_LOG_WARN, "accept paused: out of file descriptors or memory",
                         "error=\"%s\" retry_s=%g", strerror(errno), ACCEPT_BACKOFF_S);
            srv->accept_stalled = 1;
            ev_io_stop(loop, &srv->accept_io);
            ev_io_stop(loop, &srv->health_io);
            ev_timer_set(&srv->accept_backoff, ACCEPT_BACKOFF_S, 0.);
            ev_timer_start(loop, &srv->accept_backoff);
            return;
        }
        if (fd < 0)
            return; /* EAGAIN, or a peer's failure: try on the next event */
        if (srv->accept_stalled) {
            srv->accept_stalled = 0;
            telo_log(TELO_LOG_INFO, "accepting again", "exhausted_total=%lu",
                     srv->stats.accept_exhausted);
        }
        if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
            close(fd);
            continue;
        }
        char source[GW_ADDRESS_KEY_MAX], remote[GW_ADDRESS_KEY_MAX] = "";
        gw_source_key((const struct sockaddr *)&addr, source, sizeof(source));
        /* A proxy carries many clients: until the head names one (count_forwarded_client) its
         * connections count under its own address against max_pending_per_proxy, larger than a
         * client's cap, so a host in a trusted range (an Ingress pod CIDR holds tenant pods too)
         * cannot hold more than that silent; the overall cap holds for them as for any. */
        int via_proxy = gw_proxies_trusts(srv->proxies, (const struct sockaddr *)&addr);
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&addr;
            inet_ntop(AF_INET, &in->sin_addr, remote, sizeof(remote));
        } else if (addr.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr;
            inet_ntop(AF_INET6, &in6->sin6_addr, remote, sizeof(remote));
        }
        if (health && srv->health_pending >= HEALTH_PENDING_MAX) {
            refuse_at_accept(srv, fd, 503, GW_L_PENDING,
                             "the health listener has as many connections as it may", remote);
            continue;
        }
        if (!health && srv->pending >= srv->cfg.max_pending &&
            !make_pending_room(srv, via_proxy ? srv->pending_by_proxy : srv->pending_by_source,
                               source)) {
            refuse_at_accept(srv, fd, 503, GW_L_PENDING,
                             "the gateway has as many connections waiting as it may", remote);
            continue;
        }
        if (!health && via_proxy &&
            (size_t)gw_sources_count(srv->pending_by_proxy, source) >=
                srv->cfg.max_pending_per_proxy) {
            refuse_at_accept(srv, fd, 429, GW_L_PENDING_PER_SOURCE,
                             "too many connections waiting from this proxy", remote);
            continue;
        }
        if (!health && !via_proxy &&
            (size_t)gw_sources_count(srv->pending_by_source, source) >=
                srv->cfg.max_pending_per_source) {
            refuse_at_accept(srv, fd, 429, GW_L_PENDING_PER_SOURCE,
                             "too many connections waiting from this address", remote);
            continue;
        }
        struct conn *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->srv = srv;
        c->fd = fd;
        c->sock = (struct ws_conn_io){.recv = plain_recv, .send = plain_send, .io_ud = &c->fd};
        if (srv->tls != NULL) {
            struct ws_tls *t = ws_tls_new(srv->tls, fd);
            if (t == NULL) {
                close(fd);
                free(c);
                continue;
            }
            ws_tls_io(t, &c->sock);
            c->handshaking = 1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memcpy(c->remote, remote, sizeof(c->remote));
        memcpy(c->source, source, sizeof(c->source));
        c->accepted = ev_now(loop);
        if (health) {
            c->health = 1;
            srv->health_pending++;
        } else if (via_proxy) {
            srv->pending++;
            gw_sources_add(srv->pending_by_proxy, source, 1, ev_now(loop));
            c->proxy_counted = 1;
            c->via_proxy = 1;
            memcpy(&c->peer, &addr, sizeof(addr));
        } else {
            srv->pending++;
            gw_sources_add(srv->pending_by_source, source, 1, ev_now(loop));
            c->counted = 1;
        }
        c->next = srv->conns;
        if (srv->conns != NULL)
            srv->conns->prev = c;
        srv->conns = c;
        ev_io_init(&c->io, conn_read, fd, EV_READ);
        /* A health connection's whole head has HEALTH_HEAD_S, no less than this. */
        ev_timer_init(&c->timer, conn_timeout, srv->cfg.first_byte_s, 0.);
        c->io.data = c->timer.data = c;
        ev_io_start(loop, &c->io);
        ev_timer_start(loop, &c->timer);
    }
}

static struct gw_admission *auth_admit(void *ud, const char *namespace, const char *name,
                                       const char *token, gw_admit_fn *cb, void *cb_ud,
                                       struct telo_err *err)
{
    struct gw_server *srv = ud;
    return gw_admit(srv->auth, namespace, name, token, cb, cb_ud, err);
}

struct gw_server *gw_server_new(struct ev_loop *loop, struct kube_transport *t,
                                const struct gw_server_config *cfg, struct telo_err *err)
{
    struct gw_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        goto nomem;
    srv->loop = loop;
    srv->t = t;
    srv->fd = -1;
    srv->port = -1;
    srv->health_fd = -1;
    srv->cfg = *cfg;
    srv->address = strdup(cfg->address != NULL ? cfg->address : "");
    srv->origins = calloc(cfg->norigins + 1, sizeof(char *));
    if (srv->address == NULL || srv->origins == NULL)
        goto nomem;
    if (cfg->health_address != NULL && (srv->health_address = strdup(cfg->health_address)) == NULL)
        goto nomem;
    for (size_t i = 0; i < cfg->norigins; i++) {
        if ((srv->origins[i] = strdup(cfg->origins[i])) == NULL)
            goto nomem;
    }
    if (srv->cfg.max_pending == 0)
        srv->cfg.max_pending = 1024;
    if (!(srv->cfg.first_byte_s > 0))
        srv->cfg.first_byte_s = 2.0;
    if (srv->cfg.max_pending_per_source == 0)
        srv->cfg.max_pending_per_source = 64;
    if (srv->cfg.max_pending_per_proxy == 0)
        srv->cfg.max_pending_per_proxy = 4 * srv->cfg.max_pending_per_source;
    if (srv->cfg.max_clients == 0)
        srv->cfg.max_clients = 4096;
    if (srv->cfg.max_clients_per_session == 0)
        srv->cfg.max_clients_per_session = 64;
    if (srv->cfg.max_clients_per_namespace == 0)
        srv->cfg.max_clients_per_namespace = gw_hub_namespace_share(srv->cfg.max_clients);
    if (srv->cfg.max_debug_streams == 0)
        srv->cfg.max_debug_streams = 32;
    if (srv->cfg.max_debug_streams_per_namespace == 0)
        srv->cfg.max_debug_streams_per_namespace =
            gw_hub_namespace_share(srv->cfg.max_debug_streams);
    ev_timer_init(&srv->accept_backoff, accept_resume, 0., 0.);
    srv->accept_backoff.data = srv;
    telo_log_rate_init(&srv->refusal_log, "attach refused", REFUSAL_LOG_PER_S, REFUSAL_LOG_BURST);
    ev_timer_init(&srv->refusal_log_flush, refusal_log_flush, 0., 0.);
    srv->refusal_log_flush.data = srv;
    srv->auth = gw_auth_new(t, cfg->auth_cache_s > 0 ? cfg->auth_cache_s : 10);
    struct gw_gate_backend be = {.admit = auth_admit, .cancel = gw_admission_cancel, .ud = srv};
    srv->gate = gw_gate_new(loop, &be, &cfg->admission);
    /* Counts only (no bucket); one entry per source with a connection waiting, at most
     * max_pending of them. */
    srv->pending_by_source = gw_sources_new(srv->cfg.max_pending + 1, 0, 0);
    srv->pending_by_proxy = gw_sources_new(srv->cfg.max_pending + 1, 0, 0);
    struct gw_hub_opts hub = cfg->hub;
    hub.auth = srv->auth;
    srv->hub = srv->auth != NULL ? gw_hub_new(loop, t, &hub) : NULL;
    if (srv->auth != NULL && gw_auth_set_audience(srv->auth, cfg->token_audience) != 0)
        goto nomem;
    srv->relays = gw_relays_new(loop, t, cfg->hub.ping_interval_s);
    srv->lingering = gw_lingering_new(loop, LINGER_MAX, LINGER_S);
    if (srv->auth == NULL || srv->lingering == NULL || srv->gate == NULL ||
        srv->pending_by_source == NULL || srv->pending_by_proxy == NULL || srv->hub == NULL ||
        srv->relays == NULL)
        goto nomem;
    gw_relays_set_auth(srv->relays, srv->auth, cfg->hub.reauth_s);
    return srv;
nomem:
    gw_server_free(srv);
    telo_err_set(err, TELO_ENOMEM, "gateway: out of memory");
    return NULL;
}

/* Listens on address ("": every interface) and port (0: the kernel picks; *bound gets the port).
 * Returns the socket, or -TELO_EINVAL / -TELO_EIO with err naming the address. */
static int listen_on(const char *address, int port, int *bound, struct telo_err *err)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t slen;
    const char *addr = address[0] != '\0' ? address : "::";
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        slen = sizeof(*in);
    } else if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        slen = sizeof(*in6);
    } else {
        return telo_err_set(err, TELO_EINVAL,
                            "gateway: bind address '%s' is not an IPv4 or IPv6 literal", addr);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ss.ss_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, slen) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return telo_err_set(err, TELO_EIO, "gateway: cannot listen on [%s]:%d: %s", addr, port,
                            strerror(e));
    }
    socklen_t alen = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &alen);
    *bound = ntohs(ss.ss_family == AF_INET ? in->sin_port : in6->sin6_port);
    return fd;
}

int gw_server_start(struct gw_server *srv, struct telo_err *err)
{
    int has_cert = srv->cfg.tls_cert_path != NULL && srv->cfg.tls_cert_path[0] != '\0';
    int has_key = srv->cfg.tls_key_path != NULL && srv->cfg.tls_key_path[0] != '\0';
    if (has_cert != has_key)
        return telo_err_set(err, TELO_EINVAL,
                            "gateway: TLS needs both a certificate and a key file; got only the %s",
                            has_cert ? "certificate" : "key");
    if (srv->proxies == NULL &&
        gw_proxies_parse("--trusted-proxies", srv->cfg.trusted_proxies, &srv->proxies, err) != 0)
        return -err->code;
    if (has_cert && srv->tls == NULL &&
        (srv->tls = ws_tls_ctx_new(srv->cfg.tls_cert_path, srv->cfg.tls_key_path, err)) == NULL)
        return -err->code;
    int fd = listen_on(srv->address, srv->cfg.port, &srv->port, err);
    if (fd < 0)
        return fd;
    srv->fd = fd;
    ev_io_init(&srv->accept_io, accept_cb, fd, EV_READ);
    srv->accept_io.data = srv;
    ev_io_start(srv->loop, &srv->accept_io);
    if (srv->health_address == NULL)
        return 0;
    if ((fd = listen_on(srv->health_address, srv->cfg.health_port, &srv->health_port, err)) < 0)
        return fd;
    srv->health_fd = fd;
    ev_io_init(&srv->health_io, accept_cb, fd, EV_READ);
    srv->health_io.data = srv;
    ev_io_start(srv->loop, &srv->health_io);
    return 0;
}

int gw_server_port(const struct gw_server *srv)
{
    return srv->port;
}

int gw_server_health_port(const struct gw_server *srv)
{
    return srv->health_fd >= 0 ? srv->health_port : -1;
}

void gw_server_free(struct gw_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->fd >= 0) {
        ev_io_stop(srv->loop, &srv->accept_io);
        close(srv->fd);
    }
    if (srv->health_fd >= 0) {
        ev_io_stop(srv->loop, &srv->health_io);
        close(srv->health_fd);
    }
    ev_timer_stop(srv->loop, &srv->accept_backoff);
    ev_timer_stop(srv->loop, &srv->refusal_log_flush);
    telo_log_rate_flush(&srv->refusal_log, ev_now(srv->loop));
    while (srv->conns != NULL)
        conn_free(srv->conns); // NOLINT(clang-analyzer-unix.Malloc): conn_free unlinks it
    gw_lingering_free(srv->lingering);
    gw_gate_free(srv->gate);
    gw_sources_free(srv->pending_by_source);
    gw_sources_free(srv->pending_by_proxy);
    gw_proxies_free(srv->proxies);
    gw_relays_free(srv->relays);
    ws_tls_ctx_free(srv->tls);
    gw_hub_free(srv->hub);
    gw_auth_free(srv->auth);
    if (srv->origins != NULL) {
        for (size_t i = 0; i < srv->cfg.norigins; i++)
            free(srv->origins[i]);
    }
    free(srv->origins);
    free(srv->address);
    free(srv->health_address);
    free(srv);
}

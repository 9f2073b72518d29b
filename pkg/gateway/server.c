/* The gateway's HTTP front: the attach route with its WebSocket handshake and admission, and
 * /healthz, /readyz and /metrics, on one listening socket of the libev loop. */
#include "gateway/server.h"

#include "gateway/auth.h"
#include "gateway/debug.h"
#include "gateway/proto.h"
#include "util/buf.h"
#include "util/log.h"
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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX  8192
#define HEAD_S    10.0
#define TOKEN_MAX 8192

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
    char remote[64];
    struct gw_admission *adm;
    struct gw_target target;
    enum gw_proto proto;
    char accept[WS_ACCEPT_KEY_SIZE];
    int has_last_seq;
    uint32_t last_seq;
    char *token; /* the credential under admission, kept for the hub's re-authorization */
    struct conn *prev, *next;
};

struct gw_server {
    struct ev_loop *loop;
    struct kube_transport *t;
    struct gw_server_config cfg;
    char *address;
    char **origins;
    int fd;
    int port;
    ev_io accept_io;
    struct gw_auth *auth;
    struct gw_hub *hub;
    struct gw_relays *relays;
    struct ws_tls_ctx *tls; /* NULL: plain HTTP */
    struct conn *conns;
    unsigned long refusals[6]; /* 400, 401, 403, 404, 409, 503 */
    unsigned long requests;
};

static const int refusal_codes[6] = {400, 401, 403, 404, 409, 503};

static void conn_free(struct conn *c)
{
    struct gw_server *srv = c->srv;
    ev_io_stop(srv->loop, &c->io);
    ev_timer_stop(srv->loop, &c->timer);
    gw_admission_cancel(c->adm);
    if (c->token != NULL) {
        OPENSSL_cleanse(c->token, strlen(c->token));
        free(c->token);
    }
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

/* Writes all of data, waiting up to a second for room: answers are small and the socket's buffer
 * is empty, so this does not block in practice. Returns 0 or -1. */
static int write_all(struct conn *c, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = c->sock.send(c->sock.io_ud, data, len);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* TLS may wait to read (a key update) as well as to write. */
            struct pollfd p = {.fd = c->fd, .events = POLLOUT | POLLIN};
            if (poll(&p, 1, 1000) == 1)
                continue;
        }
        return -1;
    }
    return 0;
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

static const char *status_text(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    default:
        return "Service Unavailable";
    }
}

/* Sends a whole answer and ends the connection. */
static void respond(struct conn *c, int code, const char *content_type, const char *body,
                    const char *extra_headers)
{
    struct buf b;
    buf_init(&b, (size_t)1 << 20);
    size_t blen = body != NULL ? strlen(body) : 0;
    if (buf_printf(&b,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                   "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                   code, status_text(code), content_type, blen,
                   extra_headers != NULL ? extra_headers : "") == 0 &&
        blen > 0)
        buf_append(&b, body, blen);
    if (b.data != NULL)
        write_all(c, b.data, b.len);
    buf_release(&b);
    shutdown(c->fd, SHUT_WR);
    conn_free(c);
}

/* Refuses an attach with a Kubernetes Status body, and logs why (never the token). */
static void refuse(struct conn *c, int code, const char *reason, const char *message,
                   const char *subject)
{
    struct gw_server *srv = c->srv;
    for (size_t i = 0; i < sizeof(refusal_codes) / sizeof(refusal_codes[0]); i++) {
        if (refusal_codes[i] == code)
            srv->refusals[i]++;
    }
    telo_log(code >= 500 ? TELO_LOG_WARN : TELO_LOG_INFO, "attach refused",
             "session=%s/%s code=%d reason=%s subject=\"%s\" remote=%s why=\"%s\"",
             c->target.namespace, c->target.name, code, reason, subject ? subject : "", c->remote,
             message);
    struct buf b;
    buf_init(&b, 4096);
    /* The client may not even be authenticated: API error text and the like stay in the log. */
    gw_error_status_json(&b, code, reason,
                         code == 503 ? "authorization unavailable, retry" : message);
    respond(c, code, "application/json", b.data,
            code == 401 ? "WWW-Authenticate: Bearer realm=\"telo-gateway\"\r\n" : NULL);
    buf_release(&b);
}

static void upgrade(struct conn *c, const struct gw_admitted *a)
{
    struct gw_server *srv = c->srv;
    struct gw_attach req = {.namespace = c->target.namespace,
                            .name = c->target.name,
                            .pod = a->pod,
                            .phase = a->phase,
                            .exit_code = a->exit_code,
                            .uid = a->uid,
                            .ready_since = a->ready_since,
                            .proto = c->proto,
                            .has_last_seq = c->has_last_seq,
                            .last_seq = c->last_seq,
                            .subject = a->subject,
                            .token = c->token};
    const char *why = NULL;
    int code = gw_hub_check(srv->hub, &req, &why);
    if (code != 0)
        return refuse(c, code, "Conflict", why, a->subject);
    char answer[512];
    snprintf(answer, sizeof(answer),
             "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: %s\r\n\r\n",
             c->accept, gw_proto_name(c->proto));
    if (write_all(c, answer, strlen(answer)) != 0)
        return conn_free(c);
    /* The hub takes the socket; the request (target, head bytes past the handshake) stays ours
     * until it returns. */
    struct ws_conn_io io;
    int fd = take_socket(c, &io);
    struct telo_err err = {0};
    int rc =
        gw_hub_attach(srv->hub, fd, &io, c->head + c->head_end, c->len - c->head_end, &req, &err);
    if (rc != 0)
        telo_log(TELO_LOG_WARN, "attach failed after the upgrade", "session=%s/%s error=\"%s\"",
                 req.namespace, req.name, err.msg);
    conn_free(c);
}

static void relay(struct conn *c, const struct gw_admitted *a)
{
    struct gw_server *srv = c->srv;
    if (!a->inspect)
        return refuse(c, 404, "NotFound",
                      "the session has no debug stream: start it with spec.inspect: true",
                      a->subject);
    if (strcmp(a->phase, "Running") != 0 || a->pod_ip[0] == '\0')
        return refuse(c, 409, "Conflict",
                      "the session is not running; its debug stream starts with it", a->subject);
    char session[600];
    snprintf(session, sizeof(session), "%s/%s", c->target.namespace, c->target.name);
    struct ws_conn_io io;
    int fd = take_socket(c, &io);
    struct telo_err err = {0};
    struct gw_relay_client who = {
        .namespace = c->target.namespace, .name = c->target.name, .token = c->token};
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
    const struct gw_hub_metrics *m = gw_hub_metrics(c->srv->hub);
    struct buf b;
    buf_init(&b, (size_t)1 << 20);
    buf_printf(&b,
               "# HELP telo_gateway_sessions Attach sessions in memory (live or ended).\n"
               "# TYPE telo_gateway_sessions gauge\ntelo_gateway_sessions %lu\n"
               "# HELP telo_gateway_clients Attached clients.\n"
               "# TYPE telo_gateway_clients gauge\ntelo_gateway_clients %lu\n"
               "# HELP telo_gateway_clients_total Clients ever attached.\n"
               "# TYPE telo_gateway_clients_total counter\ntelo_gateway_clients_total %lu\n"
               "# HELP telo_gateway_upstream_connects_total pods/attach upgrades accepted.\n"
               "# TYPE telo_gateway_upstream_connects_total counter\n"
               "telo_gateway_upstream_connects_total %lu\n"
               "# HELP telo_gateway_upstream_failures_total pods/attach connections that failed.\n"
               "# TYPE telo_gateway_upstream_failures_total counter\n"
               "telo_gateway_upstream_failures_total %lu\n"
               "# HELP telo_gateway_gaps_total Times a client fell behind the replay ring.\n"
               "# TYPE telo_gateway_gaps_total counter\ntelo_gateway_gaps_total %lu\n"
               "# HELP telo_gateway_idle_closes_total Running sessions dropped after the idle "
               "keep time without a client.\n"
               "# TYPE telo_gateway_idle_closes_total counter\n"
               "telo_gateway_idle_closes_total %lu\n"
               "# HELP telo_gateway_resizes_total Resizes sent to containers.\n"
               "# TYPE telo_gateway_resizes_total counter\ntelo_gateway_resizes_total %lu\n"
               "# HELP telo_gateway_output_bytes_total Output read from containers.\n"
               "# TYPE telo_gateway_output_bytes_total counter\n"
               "telo_gateway_output_bytes_total %llu\n"
               "# HELP telo_gateway_sent_bytes_total Output queued to clients.\n"
               "# TYPE telo_gateway_sent_bytes_total counter\ntelo_gateway_sent_bytes_total %llu\n"
               "# HELP telo_gateway_stdin_bytes_total Input forwarded to containers.\n"
               "# TYPE telo_gateway_stdin_bytes_total counter\n"
               "telo_gateway_stdin_bytes_total %llu\n"
               "# HELP telo_gateway_refusals_total Attach requests refused, by HTTP status.\n"
               "# TYPE telo_gateway_refusals_total counter\n",
               m->sessions, m->clients, m->clients_total, m->upstream_connects,
               m->upstream_failures, m->gaps, m->idle_closes, m->resizes, m->bytes_in, m->bytes_out,
               m->stdin_bytes);
    for (size_t i = 0; i < sizeof(refusal_codes) / sizeof(refusal_codes[0]); i++)
        buf_printf(&b, "telo_gateway_refusals_total{code=\"%d\"} %lu\n", refusal_codes[i],
                   c->srv->refusals[i]);
    buf_printf(&b,
               "# HELP telo_gateway_debug_streams Debug streams being relayed.\n"
               "# TYPE telo_gateway_debug_streams gauge\ntelo_gateway_debug_streams %zu\n"
               "# HELP telo_gateway_debug_frames_total Debug frames relayed to clients.\n"
               "# TYPE telo_gateway_debug_frames_total counter\n"
               "telo_gateway_debug_frames_total %lu\n"
               "# HELP telo_gateway_reauth_closes_total Clients closed because their credential "
               "no longer admitted them.\n"
               "# TYPE telo_gateway_reauth_closes_total counter\n"
               "telo_gateway_reauth_closes_total %lu\n",
               gw_relays_count(c->srv->relays), gw_relays_frames(c->srv->relays), m->reauth_closes);
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
    c->adm = gw_admit(c->srv->auth, c->target.namespace, c->target.name, token, admitted, c, &err);
    c->token = token; /* freed (cleansed) with the connection */
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

static void attach_request(struct conn *c, const struct ws_http_head *h)
{
    struct gw_server *srv = c->srv;
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

static void handle(struct conn *c)
{
    struct ws_http_head h;
    struct telo_err err = {0};
    c->srv->requests++;
    char saved = c->head[c->head_end];
    if (ws_http_parse_request(c->head, c->head_end, &h, &err) != 0)
        return respond(c, 400, "text/plain; charset=utf-8", "bad request\n", NULL);
    c->head[c->head_end] = saved;
    const char *target = h.target;
    if (gw_parse_target(target, &c->target) == 0)
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
    (void)loop;
    (void)revents;
    struct conn *c = w->data;
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
        c->len += (size_t)n;
        long end = ws_http_head_end(c->head, c->len, HEAD_MAX);
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
    (void)loop;
    (void)revents;
    struct conn *c = w->data;
    if (c->adm != NULL)
        return refuse(c, 503, "ServiceUnavailable", "admission timed out", NULL);
    conn_free(c);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct gw_server *srv = w->data;
    for (;;) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof(addr);
        int fd = accept(srv->fd, (struct sockaddr *)&addr, &alen);
        if (fd < 0)
            return; /* EAGAIN, or a transient error (EMFILE...): try on the next event */
        if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
            close(fd);
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
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&addr;
            inet_ntop(AF_INET, &in->sin_addr, c->remote, sizeof(c->remote));
        } else if (addr.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr;
            inet_ntop(AF_INET6, &in6->sin6_addr, c->remote, sizeof(c->remote));
        }
        c->next = srv->conns;
        if (srv->conns != NULL)
            srv->conns->prev = c;
        srv->conns = c;
        ev_io_init(&c->io, conn_read, fd, EV_READ);
        ev_timer_init(&c->timer, conn_timeout, HEAD_S, 0.);
        c->io.data = c->timer.data = c;
        ev_io_start(loop, &c->io);
        ev_timer_start(loop, &c->timer);
    }
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
    srv->cfg = *cfg;
    srv->address = strdup(cfg->address != NULL ? cfg->address : "");
    srv->origins = calloc(cfg->norigins + 1, sizeof(char *));
    if (srv->address == NULL || srv->origins == NULL)
        goto nomem;
    for (size_t i = 0; i < cfg->norigins; i++) {
        if ((srv->origins[i] = strdup(cfg->origins[i])) == NULL)
            goto nomem;
    }
    srv->auth = gw_auth_new(t, cfg->auth_cache_s > 0 ? cfg->auth_cache_s : 10);
    struct gw_hub_opts hub = cfg->hub;
    hub.auth = srv->auth;
    srv->hub = srv->auth != NULL ? gw_hub_new(loop, t, &hub) : NULL;
    if (srv->auth != NULL && gw_auth_set_audience(srv->auth, cfg->token_audience) != 0)
        goto nomem;
    srv->relays = gw_relays_new(loop, cfg->hub.ping_interval_s);
    if (srv->auth == NULL || srv->hub == NULL || srv->relays == NULL)
        goto nomem;
    gw_relays_set_auth(srv->relays, srv->auth, cfg->hub.reauth_s);
    return srv;
nomem:
    gw_server_free(srv);
    telo_err_set(err, TELO_ENOMEM, "gateway: out of memory");
    return NULL;
}

int gw_server_start(struct gw_server *srv, struct telo_err *err)
{
    int has_cert = srv->cfg.tls_cert_path != NULL && srv->cfg.tls_cert_path[0] != '\0';
    int has_key = srv->cfg.tls_key_path != NULL && srv->cfg.tls_key_path[0] != '\0';
    if (has_cert != has_key)
        return telo_err_set(err, TELO_EINVAL,
                            "gateway: TLS needs both a certificate and a key file; got only the %s",
                            has_cert ? "certificate" : "key");
    if (has_cert && srv->tls == NULL &&
        (srv->tls = ws_tls_ctx_new(srv->cfg.tls_cert_path, srv->cfg.tls_key_path, err)) == NULL)
        return -err->code;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t slen;
    const char *addr = srv->address[0] != '\0' ? srv->address : "::";
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)srv->cfg.port);
        slen = sizeof(*in);
    } else if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)srv->cfg.port);
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
        return telo_err_set(err, TELO_EIO, "gateway: cannot listen on [%s]:%d: %s", addr,
                            srv->cfg.port, strerror(e));
    }
    socklen_t alen = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &alen);
    srv->port = ntohs(ss.ss_family == AF_INET ? in->sin_port : in6->sin6_port);
    srv->fd = fd;
    ev_io_init(&srv->accept_io, accept_cb, fd, EV_READ);
    srv->accept_io.data = srv;
    ev_io_start(srv->loop, &srv->accept_io);
    return 0;
}

int gw_server_port(const struct gw_server *srv)
{
    return srv->port;
}

void gw_server_free(struct gw_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->fd >= 0) {
        ev_io_stop(srv->loop, &srv->accept_io);
        close(srv->fd);
    }
    while (srv->conns != NULL)
        conn_free(srv->conns);
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
    free(srv);
}

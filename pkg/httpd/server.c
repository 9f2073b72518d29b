/* A small HTTP/1.1 server on the caller's libev loop: its own accept loop, the request head parsed
 * by pkg/ws/http.c (the parser the gateway's handshake uses, fuzzed by fuzz_http_head) and TLS by
 * pkg/ws/tls.c.
 *
 * Bounds: a request's line and headers within max_request bytes (a longer one, a body over
 * max_request or of unknown length closes the connection unanswered); at most MAX_CONNS
 * connections, HTTPD_MAX_CONNS_PER_PEER of them from one address (more are closed at accept); a
 * request whose head and body have not arrived request_timeout seconds after its first byte is
 * closed unanswered, however steadily its bytes come (a byte every few seconds would otherwise
 * hold the connection for good); a connection with no request under way that sends nothing for
 * IDLE_S seconds (and a reader that takes nothing of its answer for as long) is closed. Exactly
 * one of the two timers runs at a time. One request at a time per connection:
 * pipelined requests wait in the kernel while an answer is written, so a client that never reads
 * holds at most one answer in memory. */
#include "httpd/server.h"

#include "util/log.h"
#include "util/lograte.h"
#include "ws/http.h"
#include "ws/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS         256
#define IDLE_S            30.0
#define ACCEPT_BURST      16   /* accepts per readiness event */
#define HEADER_SPACE      1024 /* our response heads are small and fixed */
#define REQUESTS_PER_TURN 4    /* answered per connection before the loop polls again */

struct route {
    char *path;
    httpd_handler_fn *handler;
    void *user;
    httpd_user_free_fn *user_free;
};

struct conn;

struct httpd_server {
    struct ev_loop *loop;
    char *address; /* NULL: every interface */
    char *tls_cert_path;
    char *tls_key_path;
    int port_config;
    size_t max_request;
    size_t max_response;
    double request_timeout;

    struct route *routes;
    size_t nroutes;
    size_t routes_cap;

    int lfd; /* -1 until started */
    int port;
    ev_io accept_w;
    struct ws_tls_ctx *tls;
    struct conn *conns; /* a doubly linked list */
    size_t nconns;
    /* Anyone who can connect causes a refusal at will: their lines have a budget, and those
     * held back are told with the next one written (and at the server's end). */
    struct telo_log_rate refusal_log;
};

enum conn_state { C_TLS, C_HEAD, C_BODY, C_WRITE };

struct conn {
    struct httpd_server *srv;
    struct conn *prev, *next;
    int fd;
    struct ws_tls *tls; /* NULL: plain */
    struct ws_conn_io io;
    ev_io w;
    ev_timer idle;        /* between requests and while an answer is written */
    ev_timer deadline;    /* from a request's first byte until it is all read */
    ev_timer resume;      /* a turn's requests answered: the next ones in the loop's next pass */
    struct in6_addr peer; /* an IPv4 peer as ::ffff:a.b.c.d, as a dual-stack socket sees it */
    enum conn_state state;
    char *in; /* max_request + 1 bytes: the head being read and what follows it */
    size_t in_len;
    size_t head_searched;         /* of in, searched for the head's end without finding it */
    unsigned long long body_left; /* bytes of the request body still to drop */
    struct buf out;               /* the answer being written */
    size_t out_off;
    int close_after;
};

static char *dup_or_null(const char *s)
{
    if (s == NULL || s[0] == '\0')
        return NULL;
    return strdup(s);
}

static const struct route *route_find(const struct httpd_server *srv, const char *path)
{
    for (size_t i = 0; i < srv->nroutes; i++) {
        if (strcmp(srv->routes[i].path, path) == 0)
            return &srv->routes[i];
    }
    return NULL;
}

/* ---- connections ---- */

static ssize_t plain_recv(void *io_ud, void *buf, size_t len)
{
    return recv(*(int *)io_ud, buf, len, 0);
}

static ssize_t plain_send(void *io_ud, const void *buf, size_t len)
{
    return send(*(int *)io_ud, buf, len, MSG_NOSIGNAL);
}

static void conn_free(struct conn *c)
{
    struct httpd_server *srv = c->srv;
    ev_io_stop(srv->loop, &c->w);
    ev_timer_stop(srv->loop, &c->idle);
    ev_timer_stop(srv->loop, &c->deadline);
    ev_timer_stop(srv->loop, &c->resume);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    srv->nconns--;
    ws_tls_free(c->tls);
    close(c->fd);
    free(c->in);
    buf_release(&c->out);
    free(c);
}

static void conn_watch(struct conn *c, int events)
{
    if (ev_is_active(&c->w) && (c->w.events & (EV_READ | EV_WRITE)) == events)
        return;
    ev_io_stop(c->srv->loop, &c->w);
    ev_io_set(&c->w, c->fd, events);
    ev_io_start(c->srv->loop, &c->w);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
    }
}

/* Queues the answer: status line, headers and (unless head) body. Returns 0 or -1 (no memory). */
static int respond(struct conn *c, int status, const char *content_type, const char *body,
                   size_t len, int head, int allow)
{
    buf_reset(&c->out);
    c->out_off = 0;
    int rc = buf_printf(&c->out,
                        "HTTP/1.1 %d %s\r\nserver: telo-operator\r\ncontent-type: %s\r\n"
                        "content-length: %zu\r\n%s%s\r\n",
                        status, reason_phrase(status), content_type, len,
                        allow ? "allow: GET, HEAD\r\n" : "",
                        c->close_after ? "connection: close\r\n" : "");
    if (rc == 0 && !head && len > 0)
        rc = buf_append(&c->out, body, len);
    if (rc != 0)
        return -1;
    c->state = C_WRITE;
    return 0;
}

static int respond_text(struct conn *c, int status, const char *text, int head, int allow)
{
    return respond(c, status, "text/plain; charset=utf-8", text, strlen(text), head, allow);
}

/* Runs the route's handler and queues its answer. */
static int run_handler(struct conn *c, const struct route *route, const char *path,
                       const char *query, int head)
{
    struct httpd_server *srv = c->srv;
    struct httpd_request req = {.path = path, .query = query, .head = head};
    struct httpd_response resp = {.status = 200};
    snprintf(resp.content_type, sizeof(resp.content_type), "text/plain; charset=utf-8");
    buf_init(&resp.body, srv->max_response);
    int rc = route->handler(&req, &resp, route->user);
    if (rc < 0 || resp.status < 100 || resp.status > 599) {
        telo_log(TELO_LOG_ERROR, "http handler failed", "path=%s code=%d status=%d", path, -rc,
                 resp.status);
        buf_release(&resp.body);
        return respond_text(c, 500, "internal server error\n", head, 0);
    }
    resp.content_type[sizeof(resp.content_type) - 1] = '\0';
    /* A content type with a line break would end the head: the handler's bug, answered 500. */
    if (strpbrk(resp.content_type, "\r\n") != NULL) {
        buf_release(&resp.body);
        return respond_text(c, 500, "internal server error\n", head, 0);
    }
    rc = respond(c, resp.status, resp.content_type, resp.body.data, resp.body.len, head, 0);
    buf_release(&resp.body);
    return rc;
}

/* A whole head is in c->in[0..hlen). Returns 0 with an answer queued (or a body to drop first),
 * or -1 to close the connection unanswered. */
static int serve(struct conn *c, size_t hlen)
{
    struct httpd_server *srv = c->srv;
    struct ws_http_head h;
    struct telo_err err;
    if (ws_http_parse_request(c->in, hlen, &h, &err) != 0) {
        c->close_after = 1;
        return respond_text(c, 400, "bad request\n", 0, 0);
    }
    /* Only GET and HEAD are served, so a body is read and dropped before the answer (answering
     * first and closing would make the kernel reset the connection and lose the answer). A body
     * larger than a request may be, or of unknown length, closes the connection unanswered, as
     * oversized headers do. */
    const char *te = ws_http_header(&h, "Transfer-Encoding");
    const char *cl = ws_http_header(&h, "Content-Length");
    unsigned long long body = 0;
    if (te != NULL)
        return -1;
    if (cl != NULL) {
        char *end = NULL;
        errno = 0;
        body = strtoull(cl, &end, 10);
        if (end == cl || *end != '\0' || errno != 0 || cl[0] == '-' || body > srv->max_request)
            return -1;
    }
    int get = strcmp(h.method, "GET") == 0;
    int head = strcmp(h.method, "HEAD") == 0;
    c->close_after =
        h.minor_version == 0 || ws_http_list_has(ws_http_header(&h, "Connection"), "close");
    /* The target: "/path?query"; the path is percent-decoded, the query given as sent. */
    char *target = (char *)h.target;
    char *q = strchr(target, '?');
    const char *query = "";
    if (q != NULL) {
        *q = '\0';
        query = q + 1;
    }
    int rc;
    const struct route *route = NULL;
    if (target[0] != '/' || ws_http_path_decode(target) != 0) {
        c->close_after = 1;
        rc = respond_text(c, 400, "bad request\n", head, 0);
    } else if ((route = route_find(srv, target)) == NULL) {
        rc = respond_text(c, 404, "not found\n", head, 0);
    } else if (!get && !head) {
        rc = respond_text(c, 405, "method not allowed\n", 0, 1);
    } else {
        rc = run_handler(c, route, target, query, head);
    }
    if (rc != 0)
        return -1;
    /* The head is done with: what follows it is the body, then the next request. */
    memmove(c->in, c->in + hlen, c->in_len - hlen);
    c->in_len -= hlen;
    c->head_searched = 0;
    c->body_left = body;
    if (c->body_left > 0)
        c->state = C_BODY;
    return 0;
}

/* Drops body bytes at the start of c->in; the answer goes once none is left. */
static void drop_buffered_body(struct conn *c)
{
    size_t n = c->body_left < c->in_len ? (size_t)c->body_left : c->in_len;
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
    c->head_searched = 0;
    c->body_left -= n;
    if (c->body_left == 0)
        c->state = C_WRITE;
}

/* Advances the connection as far as it can go without waiting, or until it has answered its
 * turn's share of requests: a client pipelining requests (a /metrics each) and reading the
 * answers as fast as they come would otherwise keep this loop, and the whole operator on it,
 * from ever polling. Returns -1 when it must close. */
static int step(struct conn *c)
{
    struct httpd_server *srv = c->srv;
    int answered = 0;
    for (;;) {
        if (c->state == C_TLS) {
            int want_write = 0;
            int rc = ws_tls_handshake(c->tls, &want_write);
            if (rc < 0)
                return -1;
            if (rc == 0) {
                conn_watch(c, want_write ? EV_WRITE : EV_READ);
                return 0;
            }
            ws_tls_io(c->tls, &c->io);
            c->io.close = NULL; /* still ours */
            c->state = C_HEAD;
            continue;
        }
        if (c->state == C_WRITE) {
            if (ev_is_active(&c->deadline)) { /* the request is read: the answer's time starts */
                ev_timer_stop(srv->loop, &c->deadline);
                ev_timer_again(srv->loop, &c->idle);
            }
            while (c->out_off < c->out.len) {
                ssize_t n =
                    c->io.send(c->io.io_ud, c->out.data + c->out_off, c->out.len - c->out_off);
                if (n > 0) {
                    c->out_off += (size_t)n;
                    ev_timer_again(srv->loop, &c->idle); /* a slow reader, not a dead one */
                    continue;
                }
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                    conn_watch(c, EV_WRITE);
                    return 0;
                }
                return -1;
            }
            if (c->close_after)
                return -1;
            buf_reset(&c->out);
            c->out_off = 0;
            c->state = C_HEAD;
            ev_timer_again(srv->loop, &c->idle); /* a new request's time starts */
        }
        if (c->state == C_BODY) {
            drop_buffered_body(c);
            if (c->state == C_WRITE)
                continue;
        }
        if (c->state == C_HEAD && c->in_len > 0) {
            if (!ev_is_active(&c->deadline)) { /* a request's first byte */
                ev_timer_stop(srv->loop, &c->idle);
                ev_timer_set(&c->deadline, srv->request_timeout, 0.0);
                ev_timer_start(srv->loop, &c->deadline);
            }
            long hlen = ws_http_head_end(c->in, c->in_len, c->head_searched, srv->max_request);
            if (hlen < 0)
                return -1; /* over the bound: closed unanswered */
            if (hlen == 0)
                c->head_searched = c->in_len;
            if (hlen > 0) {
                if (answered == REQUESTS_PER_TURN) {
                    ev_io_stop(srv->loop, &c->w);
                    ev_timer_start(srv->loop, &c->resume);
                    return 0;
                }
                answered++;
                if (serve(c, (size_t)hlen) != 0)
                    return -1;
                continue;
            }
        }
        /* C_HEAD or C_BODY wanting bytes: read what there is. */
        size_t room = srv->max_request - c->in_len;
        if (room == 0)
            return -1;
        ssize_t n = c->io.recv(c->io.io_ud, c->in + c->in_len, room);
        if (n > 0) {
            c->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_watch(c, EV_READ);
            return 0;
        }
        return -1; /* the client left, or the connection failed */
    }
}

static void advance(struct conn *c)
{
    if (step(c) != 0)
        conn_free(c);
}

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    advance(w->data);
}

static void resume_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    advance(w->data);
}

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    conn_free(w->data);
}

/* The peer's address from accept, IPv4 written as IPv4-mapped IPv6 so that one host counts once
 * whichever kind of socket accepted it. */
static void peer_of(const struct sockaddr_storage *ss, struct in6_addr *peer)
{
    memset(peer, 0, sizeof(*peer));
    if (ss->ss_family == AF_INET6) {
        *peer = ((const struct sockaddr_in6 *)ss)->sin6_addr;
    } else if (ss->ss_family == AF_INET) {
        peer->s6_addr[10] = 0xff;
        peer->s6_addr[11] = 0xff;
        memcpy(&peer->s6_addr[12], &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
}

/* Connections open from peer. A walk of at most MAX_CONNS entries per accept: cheaper than
 * keeping a map in step with every close. */
static size_t peer_conns(const struct httpd_server *srv, const struct in6_addr *peer)
{
    size_t n = 0;
    for (const struct conn *c = srv->conns; c != NULL; c = c->next)
        n += memcmp(&c->peer, peer, sizeof(*peer)) == 0;
    return n;
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct httpd_server *srv = w->data;
    for (int i = 0; i < ACCEPT_BURST; i++) {
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof(ss);
        int fd = accept(srv->lfd, (struct sockaddr *)&ss, &sslen);
        if (fd < 0)
            return; /* EAGAIN, or a connection that went away before we took it */
        if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
            close(fd);
            continue;
        }
        struct in6_addr peer;
        peer_of(&ss, &peer);
        if (srv->nconns >= MAX_CONNS || peer_conns(srv, &peer) >= HTTPD_MAX_CONNS_PER_PEER) {
            char text[INET6_ADDRSTRLEN] = "?";
            if (IN6_IS_ADDR_V4MAPPED(&peer))
                inet_ntop(AF_INET, &peer.s6_addr[12], text, sizeof(text));
            else
                inet_ntop(AF_INET6, &peer, text, sizeof(text));
            if (telo_log_rate_allow(&srv->refusal_log, ev_now(loop)))
                telo_log(TELO_LOG_WARN, "http connection refused", "reason=\"%d open%s\" peer=%s",
                         srv->nconns >= MAX_CONNS ? MAX_CONNS : HTTPD_MAX_CONNS_PER_PEER,
                         srv->nconns >= MAX_CONNS ? "" : " from this address", text);
            close(fd);
            continue;
        }
        struct conn *c = calloc(1, sizeof(*c));
        char *in = c != NULL ? malloc(srv->max_request + 1) : NULL;
        struct ws_tls *tls = in != NULL && srv->tls != NULL ? ws_tls_new(srv->tls, fd) : NULL;
        if (in == NULL || (srv->tls != NULL && tls == NULL)) {
            free(in);
            free(c);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->srv = srv;
        c->fd = fd;
        c->peer = peer;
        c->in = in;
        c->tls = tls;
        c->state = tls != NULL ? C_TLS : C_HEAD;
        c->io = (struct ws_conn_io){.recv = plain_recv, .send = plain_send, .io_ud = &c->fd};
        buf_init(&c->out, srv->max_response + HEADER_SPACE);
        c->next = srv->conns;
        if (srv->conns != NULL)
            srv->conns->prev = c;
        srv->conns = c;
        srv->nconns++;
        ev_io_init(&c->w, conn_cb, fd, EV_READ);
        c->w.data = c;
        ev_io_start(loop, &c->w);
        ev_init(&c->deadline, timeout_cb);
        c->deadline.data = c;
        ev_init(&c->idle, timeout_cb);
        c->idle.repeat = IDLE_S;
        c->idle.data = c;
        ev_timer_init(&c->resume, resume_cb, 0., 0.);
        c->resume.data = c;
        ev_timer_again(loop, &c->idle);
    }
}

/* ---- the server ---- */

struct httpd_server *httpd_new(struct ev_loop *loop, const struct httpd_config *cfg,
                               struct telo_err *err)
{
    struct httpd_config defaults = {0};
    if (cfg == NULL)
        cfg = &defaults;
    int has_cert = cfg->tls_cert_path != NULL && cfg->tls_cert_path[0] != '\0';
    int has_key = cfg->tls_key_path != NULL && cfg->tls_key_path[0] != '\0';
    if (loop == NULL) {
        telo_err_set(err, TELO_EINVAL, "httpd: no event loop given");
        return NULL;
    }
    if (has_cert != has_key) {
        telo_err_set(err, TELO_EINVAL,
                     "httpd: TLS needs both a certificate and a key file; got only the %s",
                     has_cert ? "certificate" : "key");
        return NULL;
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        telo_err_set(err, TELO_EINVAL, "httpd: port %d is outside 0..65535", cfg->port);
        return NULL;
    }
    if (cfg->max_request_bytes > HTTPD_LIMIT_MAX_REQUEST ||
        (cfg->max_request_bytes != 0 && cfg->max_request_bytes < 256)) {
        telo_err_set(err, TELO_EINVAL, "httpd: max_request_bytes %zu is outside 256..%d",
                     cfg->max_request_bytes, HTTPD_LIMIT_MAX_REQUEST);
        return NULL;
    }
    /* Written to reject NaN as well. */
    if (!(cfg->request_timeout_s >= 0 && cfg->request_timeout_s <= HTTPD_LIMIT_REQUEST_TIMEOUT_S)) {
        telo_err_set(err, TELO_EINVAL, "httpd: request_timeout_s %g is outside 0..%g",
                     cfg->request_timeout_s, HTTPD_LIMIT_REQUEST_TIMEOUT_S);
        return NULL;
    }

    struct httpd_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        goto nomem;
    srv->loop = loop;
    srv->lfd = -1;
    srv->port = -1;
    telo_log_rate_init(&srv->refusal_log, "http connection refused", 10, 100);
    srv->port_config = cfg->port;
    srv->max_request = cfg->max_request_bytes ? cfg->max_request_bytes : HTTPD_DEFAULT_MAX_REQUEST;
    srv->max_response =
        cfg->max_response_bytes ? cfg->max_response_bytes : HTTPD_DEFAULT_MAX_RESPONSE;
    srv->request_timeout =
        cfg->request_timeout_s > 0 ? cfg->request_timeout_s : HTTPD_DEFAULT_REQUEST_TIMEOUT_S;
    srv->address = dup_or_null(cfg->address);
    srv->tls_cert_path = dup_or_null(cfg->tls_cert_path);
    srv->tls_key_path = dup_or_null(cfg->tls_key_path);
    if ((cfg->address != NULL && cfg->address[0] != '\0' && srv->address == NULL) ||
        (has_cert && (srv->tls_cert_path == NULL || srv->tls_key_path == NULL)))
        goto nomem;
    return srv;
nomem:
    httpd_free(srv);
    telo_err_set(err, TELO_ENOMEM, "httpd: out of memory");
    return NULL;
}

int httpd_route(struct httpd_server *srv, const char *path, httpd_handler_fn *handler, void *user,
                httpd_user_free_fn *user_free, struct telo_err *err)
{
    int rc;
    if (path == NULL || path[0] != '/' || strchr(path, '?') != NULL) {
        rc = telo_err_set(err, TELO_EINVAL,
                          "httpd: route path '%s' must start with '/' and "
                          "hold no query",
                          path ? path : "(null)");
        goto fail;
    }
    if (handler == NULL) {
        rc = telo_err_set(err, TELO_EINVAL, "httpd: route %s has no handler", path);
        goto fail;
    }
    if (route_find(srv, path) != NULL) {
        rc = telo_err_set(err, TELO_EINVAL, "httpd: route %s is already registered", path);
        goto fail;
    }
    if (srv->nroutes == srv->routes_cap) {
        size_t cap = srv->routes_cap ? srv->routes_cap * 2 : 8;
        struct route *routes = realloc(srv->routes, cap * sizeof(*routes));
        if (routes == NULL)
            goto nomem;
        srv->routes = routes;
        srv->routes_cap = cap;
    }
    char *copy = strdup(path);
    if (copy == NULL)
        goto nomem;
    srv->routes[srv->nroutes++] =
        (struct route){.path = copy, .handler = handler, .user = user, .user_free = user_free};
    return 0;
nomem:
    rc = telo_err_set(err, TELO_ENOMEM, "httpd: out of memory registering route %s", path);
fail:
    if (user_free != NULL)
        user_free(user);
    return rc;
}

/* A listening socket on address (NULL: every interface, IPv6 and IPv4 where the host has IPv6)
 * and port. Returns the socket, or -1 with errno set. */
static int listen_on(const char *address, int port)
{
    char service[8];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    hints.ai_family = address == NULL ? AF_INET6 : AF_UNSPEC;
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(address, service, &hints, &ai);
    if (rc != 0 && address == NULL) {
        hints.ai_family = AF_INET;
        rc = getaddrinfo(address, service, &hints, &ai);
    }
    if (rc != 0 || ai == NULL) {
        errno = EINVAL;
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 && address == NULL && ai->ai_family == AF_INET6) {
        /* No IPv6 on this host: every IPv4 interface. */
        freeaddrinfo(ai);
        ai = NULL;
        hints.ai_family = AF_INET;
        if (getaddrinfo(NULL, service, &hints, &ai) != 0 || ai == NULL) {
            errno = EINVAL;
            return -1;
        }
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    }
    if (fd < 0) {
        int e = errno;
        freeaddrinfo(ai);
        errno = e;
        return -1;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6 && address == NULL)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        freeaddrinfo(ai);
        errno = e;
        return -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

int httpd_start(struct httpd_server *srv, struct telo_err *err)
{
    if (srv->lfd >= 0)
        return telo_err_set(err, TELO_EINVAL, "httpd: server already started");
    if (srv->tls_cert_path != NULL) {
        struct telo_err terr;
        srv->tls = ws_tls_ctx_new(srv->tls_cert_path, srv->tls_key_path, &terr);
        if (srv->tls == NULL)
            return telo_err_set(err, TELO_EIO, "httpd: cannot serve TLS with cert %s key %s: %s",
                                srv->tls_cert_path, srv->tls_key_path, terr.msg);
    }
    srv->lfd = listen_on(srv->address, srv->port_config);
    if (srv->lfd < 0) {
        int e = errno;
        ws_tls_ctx_free(srv->tls);
        srv->tls = NULL;
        return telo_err_set(err, TELO_EIO, "httpd: cannot serve on %s:%d: %s",
                            srv->address ? srv->address : "*", srv->port_config, strerror(e));
    }
    srv->port = bound_port(srv->lfd);
    ev_io_init(&srv->accept_w, accept_cb, srv->lfd, EV_READ);
    srv->accept_w.data = srv;
    ev_io_start(srv->loop, &srv->accept_w);
    return 0;
}

int httpd_port(const struct httpd_server *srv)
{
    if (srv == NULL || srv->lfd < 0)
        return -1;
    return srv->port;
}

int httpd_response_text(struct httpd_response *resp, int status, const char *content_type,
                        const char *text)
{
    resp->status = status;
    if (content_type != NULL)
        snprintf(resp->content_type, sizeof(resp->content_type), "%s", content_type);
    buf_reset(&resp->body);
    if (text == NULL)
        return 0;
    return buf_append_str(&resp->body, text);
}

void httpd_free(struct httpd_server *srv)
{
    if (srv == NULL)
        return;
    /* next is read before each free: the analyzer cannot see that conn_free unlinks c from this
     * very list, and reported the loop on srv->conns as a use after free. */
    struct conn *next;
    for (struct conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        conn_free(c);
    }
    telo_log_rate_flush(&srv->refusal_log, ev_now(srv->loop));
    if (srv->lfd >= 0) {
        ev_io_stop(srv->loop, &srv->accept_w);
        close(srv->lfd);
    }
    ws_tls_ctx_free(srv->tls);
    for (size_t i = 0; i < srv->nroutes; i++) {
        if (srv->routes[i].user_free != NULL)
            srv->routes[i].user_free(srv->routes[i].user);
        free(srv->routes[i].path);
    }
    free(srv->routes);
    free(srv->address);
    free(srv->tls_cert_path);
    free(srv->tls_key_path);
    free(srv);
}

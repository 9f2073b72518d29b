/* A WebSocket client for the remote-command channel protocol (pods/attach, the gateway's attach),
 * on the project's own WebSocket stack (pkg/ws: the handshake's head parser, the frame parser and
 * the connection) and the caller's libev loop. TLS through OpenSSL.
 *
 * Bounds: the upgrade request is at most REQUEST_MAX bytes, the server's response head at most
 * HEAD_MAX (a longer one ends the attempt); a message (fragments joined) or frame from the server
 * is at most MESSAGE_MAX bytes (a bigger one closes the stream with 1009); what waits to be sent
 * is at most QUEUE_MAX of stdin plus a few control frames. Reading is never unbounded: the
 * connection reads at most one maximal frame plus 64 KiB ahead, and the kernel's TCP window
 * holds back a server that sends faster than the callbacks take it. Nothing blocks the loop but
 * the name lookup of a host that is not an IP address (getaddrinfo). */
#include "kube/attach.h"

#include "kube/attach_tls.h"
#include "kube/config.h"
#include "kube/rest.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/url.h"
#include "ws/conn.h"
#include "ws/frame.h"
#include "ws/http.h"
#include "ws/tls.h"

#include <curl/curl.h>
#include <errno.h>
#include <ev.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PROTOCOLS   8
#define QUEUE_MAX       ((size_t)1 << 20) /* stdin bytes waiting for the server */
#define CHUNK_MAX       ((size_t)32768)   /* payload bytes of one stdin message */
#define STATUS_MAX      KUBE_CHANNEL_JSON_MAX
#define TOKEN_MAX       16384
#define URL_MAX         8192
#define REQUEST_MAX     (URL_MAX + TOKEN_MAX + 2048) /* the upgrade request's head */
#define HEAD_MAX        16384                        /* the response's head */
#define MESSAGE_MAX     ((size_t)1 << 20)            /* one message from the server */
#define HANDSHAKE_S     30.0                         /* from connect to 101: the whole upgrade */
#define HOST_MAX        256                          /* a DNS name is at most 253 */
#define BEARER_PROTOCOL "base64url.bearer.authorization.k8s.io."

enum phase { P_CONNECT, P_TLS, P_REQUEST, P_HEAD, P_OPEN, P_DONE };

struct kube_attach {
    struct ev_loop *loop;
    struct kube_attach_callbacks cb;
    void *ud;

    /* Where: from the URL. */
    char host[HOST_MAX]; /* without brackets */
    char port[8];
    int tls;
    char *target; /* "/path?query" */
    char *token;  /* bearer token, or NULL */
    char *offer;  /* "v5.channel.k8s.io,v4.channel.k8s.io" */
    char user_agent[96];
    SSL_CTX *ssl_ctx;
    int ping_s;

    /* The upgrade. */
    enum phase phase;
    struct addrinfo *addrs, *next_addr;
    int fd;               /* ours until the connection takes it */
    struct ws_tls *tls_s; /* ours until the connection takes it */
    struct ws_conn_io io; /* how the handshake reads and writes fd */
    ev_io watcher;
    ev_timer deadline; /* the handshake's */
    ev_timer later;    /* reports a failure found inside kube_attach_open */
    char accept[WS_ACCEPT_KEY_SIZE];
    struct buf request;
    size_t request_sent;
    char *head; /* HEAD_MAX bytes: the response head and what came after it */
    size_t head_len;

    struct ws_conn *conn; /* after the upgrade */
    int open;             /* between on_open and the end */
    int ended;            /* on_end was called (or the handle is being freed) */
    int freed;            /* kube_attach_free was called inside a callback */
    int depth;            /* our entry points on the stack */
    char protocol[64];    /* the subprotocol the server chose */

    int resize_pending; /* the newest size waits for room in the send queue */
    struct kube_term_size resize;
    int close_pending; /* [255, 0] waits for room */

    struct kube_attach_end end; /* what on_end will report */
    struct telo_err end_err;
};

/* ---- ending and freeing ---- */

static void destroy(struct kube_attach *a)
{
    ev_io_stop(a->loop, &a->watcher);
    ev_timer_stop(a->loop, &a->deadline);
    ev_timer_stop(a->loop, &a->later);
    ws_conn_free(a->conn);
    ws_tls_free(a->tls_s);
    if (a->fd >= 0)
        close(a->fd);
    if (a->addrs != NULL)
        freeaddrinfo(a->addrs);
    SSL_CTX_free(a->ssl_ctx);
    if (a->request.data != NULL)
        OPENSSL_cleanse(a->request.data, a->request.len); /* it holds the token */
    buf_release(&a->request);
    free(a->head);
    free(a->target);
    if (a->token != NULL)
        OPENSSL_cleanse(a->token, strlen(a->token));
    free(a->token);
    if (a->offer != NULL)
        OPENSSL_cleanse(a->offer, strlen(a->offer)); /* it may hold a token */
    free(a->offer);
    free(a);
}

static void enter(struct kube_attach *a)
{
    a->depth++;
}

/* Leaves an entry point; a handle freed inside it goes now. a must not be used afterwards. */
static void send_pending(struct kube_attach *a);

/* Leaves an entry point: a resize asked for inside our callbacks goes out now (the newest only,
 * so kubectl's nudge from on_open, size + 1 then size, reaches the server as the size alone, as
 * the libwebsockets client sent it); a handle freed inside it goes now. a must not be used
 * afterwards. */
static void leave(struct kube_attach *a)
{
    if (--a->depth > 0)
        return;
    if (a->freed)
        destroy(a);
    else if (a->open && a->conn != NULL && (a->resize_pending || a->close_pending))
        send_pending(a);
}

/* Stops the handshake's watchers. */
static void stop_handshake(struct kube_attach *a)
{
    ev_io_stop(a->loop, &a->watcher);
    ev_timer_stop(a->loop, &a->deadline);
    ev_timer_stop(a->loop, &a->later);
}

/* Reports the end once. */
static void finish(struct kube_attach *a)
{
    if (a->ended)
        return;
    a->ended = 1;
    a->open = 0;
    a->phase = P_DONE;
    stop_handshake(a);
    a->end.err = a->end.rc != 0 ? &a->end_err : NULL;
    enter(a);
    a->cb.on_end(a, &a->end, a->ud);
    a->depth--; /* the caller's leave frees */
}

static void fail(struct kube_attach *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keeps the first failure for on_end. */
static void fail(struct kube_attach *a, int code, const char *fmt, ...)
{
    if (a->end.rc != 0)
        return;
    char msg[TELO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    a->end.rc = telo_err_set(&a->end_err, code, "%s", msg);
}

/* ---- after the upgrade: the connection's callbacks ---- */

static void receive(struct kube_attach *a, const uint8_t *data, size_t len)
{
    if (len == 0)
        return; /* no channel byte */
    int channel = data[0];
    data++;
    len--;
    if (channel == KUBE_CHANNEL_STDOUT || channel == KUBE_CHANNEL_STDERR) {
        if (len > 0) /* the server's hello is an empty message on stdout */
            a->cb.on_output(a, channel, data, len, a->ud);
        return;
    }
    if (channel != KUBE_CHANNEL_ERROR)
        return;
    struct telo_err err;
    if (len > STATUS_MAX)
        telo_log(TELO_LOG_WARN, "attach: exit status over the size limit", "len=%zu", len);
    else if (kube_exit_status_parse(data, len, &a->end.exit, &err) == 0)
        a->end.have_status = 1;
    else
        telo_log(TELO_LOG_WARN, "attach: unreadable exit status", "error=\"%s\"", err.msg);
}

static void on_message(struct ws_conn *c, int opcode, const uint8_t *data, size_t len, void *ud)
{
    (void)c;
    struct kube_attach *a = ud;
    if (a->freed || a->ended)
        return;
    if (opcode != WS_OP_BINARY) {
        /* client-go treats a text message as a protocol error; keep the session going. */
        telo_log(TELO_LOG_DEBUG, "attach: text message dropped", "len=%zu", len);
        return;
    }
    enter(a);
    receive(a, data, len);
    leave(a);
}

/* Sends a resize or the stdin close that waited for room. */
static void send_pending(struct kube_attach *a)
{
    if (a->resize_pending) {
        struct buf b;
        buf_init(&b, 64);
        unsigned char ch = KUBE_CHANNEL_RESIZE;
        if (kube_resize_format(&b, a->resize.width, a->resize.height) == 0 &&
            ws_conn_send(a->conn, WS_OP_BINARY, &ch, 1, b.data, b.len, 0) == 0)
            a->resize_pending = 0;
        buf_release(&b);
    }
    if (a->close_pending && !a->resize_pending) {
        static const unsigned char close_msg[2] = {KUBE_CHANNEL_CLOSE, KUBE_CHANNEL_STDIN};
        if (ws_conn_send(a->conn, WS_OP_BINARY, NULL, 0, close_msg, 2, 0) == 0)
            a->close_pending = 0;
    }
}

static void on_drain(struct ws_conn *c, void *ud)
{
    (void)c;
    struct kube_attach *a = ud;
    if (a->freed || a->ended)
        return;
    send_pending(a);
}

static void on_closed(struct ws_conn *c, int code, const char *reason, void *ud)
{
    struct kube_attach *a = ud;
    if (a->freed || a->ended)
        return;
    enter(a);
    if (ws_conn_local_error(c)) {
        /* We closed it: the server broke the protocol or sent more than MESSAGE_MAX at once. */
        fail(a, TELO_EPROTO, "attach: %s", reason);
    } else if (code != 1005 && code != 1006) {
        a->end.close_code = code;
    }
    a->conn = NULL;
    ws_conn_free(c); /* deferred by the connection until its callback returns */
    finish(a);
    leave(a);
}

/* ---- the upgrade ---- */

static ssize_t plain_recv(void *io_ud, void *buf, size_t len)
{
    return recv(*(int *)io_ud, buf, len, 0);
}

static ssize_t plain_send(void *io_ud, const void *buf, size_t len)
{
    return send(*(int *)io_ud, buf, len, MSG_NOSIGNAL);
}

static void watch(struct kube_attach *a, int events)
{
    ev_io_stop(a->loop, &a->watcher);
    ev_io_set(&a->watcher, a->fd, events);
    ev_io_start(a->loop, &a->watcher);
}

/* The response head is complete in a->head[0..hlen): checks it and hands the socket to a
 * WebSocket connection. */
static void upgrade(struct kube_attach *a, size_t hlen)
{
    struct ws_http_head h;
    struct telo_err err;
    if (ws_http_parse_response(a->head, hlen, &h, &err) != 0)
        return fail(a, TELO_EPROTO, "attach: the upgrade's response: %s", err.msg);
    if (h.status != 101) {
        a->end.http_status = h.status;
        return fail(a, h.status >= 300 ? TELO_EAPI : TELO_EPROTO,
                    "attach: the server answered the WebSocket upgrade with HTTP %d", h.status);
    }
    const char *accept = ws_http_header(&h, "Sec-WebSocket-Accept");
    if (!ws_http_list_has(ws_http_header(&h, "Upgrade"), "websocket") ||
        !ws_http_list_has(ws_http_header(&h, "Connection"), "upgrade"))
        return fail(a, TELO_EPROTO, "attach: %s",
                    "the 101 response lacks Upgrade: websocket or Connection: upgrade");
    if (accept == NULL || strcmp(accept, a->accept) != 0)
        return fail(a, TELO_EPROTO, "attach: %s",
                    "the 101 response's Sec-WebSocket-Accept does not match our key");
    const char *protocol = ws_http_header(&h, "Sec-WebSocket-Protocol");
    if (protocol != NULL &&
        (strlen(protocol) >= sizeof(a->protocol) || strchr(protocol, ',') != NULL ||
         strncmp(protocol, BEARER_PROTOCOL, strlen(BEARER_PROTOCOL)) == 0 ||
         !ws_http_list_has(a->offer, protocol)))
        return fail(a, TELO_EPROTO,
                    "attach: the server chose the subprotocol %.64s, not one we offered", protocol);
    snprintf(a->protocol, sizeof(a->protocol), "%s", protocol != NULL ? protocol : "");

    /* The socket and its TLS stream go to the connection. */
    stop_handshake(a);
    struct ws_conn_io io;
    if (a->tls_s != NULL)
        ws_tls_io(a->tls_s, &io);
    struct ws_conn_opts opts = {
        .client = 1,
        .max_message = MESSAGE_MAX,
        .max_queued = QUEUE_MAX + 2 * CHUNK_MAX,
        .ping_interval_s = a->ping_s,
    };
    static const struct ws_conn_callbacks cbs = {on_message, on_drain, on_closed};
    int fd = a->fd;
    a->fd = -1;
    a->tls_s = NULL;
    a->conn = ws_conn_new(a->loop, fd, a->tls ? &io : NULL, &opts, &cbs, a, &err);
    if (a->conn == NULL)
        return fail(a, err.code, "attach: %s", err.msg);
    a->phase = P_OPEN;
    a->open = 1;
    if (a->cb.on_open != NULL)
        a->cb.on_open(a, a->protocol, a->ud);
    /* Frames that came in the same reads as the head. */
    if (!a->freed && !a->ended && a->head_len > hlen)
        ws_conn_feed(a->conn, a->head + hlen, a->head_len - hlen);
    free(a->head);
    a->head = NULL;
}

static void read_head(struct kube_attach *a)
{
    for (;;) {
        ssize_t n = a->io.recv(a->io.io_ud, a->head + a->head_len, HEAD_MAX - a->head_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            const char *why = a->tls_s != NULL && ws_tls_error(a->tls_s)[0]
                                  ? ws_tls_error(a->tls_s)
                                  : (n == 0 ? "closed by the server" : strerror(errno));
            return fail(a, TELO_EIO,
                        "attach: the connection ended before the WebSocket upgrade completed (%s)",
                        why);
        }
        size_t searched = a->head_len;
        a->head_len += (size_t)n;
        long hlen = ws_http_head_end(a->head, a->head_len, searched, HEAD_MAX);
        if (hlen == -TELO_ETOOBIG)
            return fail(a, TELO_EPROTO,
                        "attach: the upgrade's response head is over the limit of %d bytes",
                        HEAD_MAX);
        if (hlen > 0)
            return upgrade(a, (size_t)hlen);
    }
}

static void send_request(struct kube_attach *a)
{
    while (a->request_sent < a->request.len) {
        ssize_t n = a->io.send(a->io.io_ud, a->request.data + a->request_sent,
                               a->request.len - a->request_sent);
        if (n > 0) {
            a->request_sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return watch(a, EV_WRITE);
        const char *why = a->tls_s != NULL && ws_tls_error(a->tls_s)[0] ? ws_tls_error(a->tls_s)
                                                                        : strerror(errno);
        return fail(a, TELO_EIO, "attach: sending the upgrade request failed: %s", why);
    }
    OPENSSL_cleanse(a->request.data, a->request.len);
    buf_release(&a->request);
    a->phase = P_HEAD;
    watch(a, EV_READ);
    read_head(a); /* the response may be there already with TLS's buffering */
}

static void tls_step(struct kube_attach *a)
{
    int want_write = 0;
    int rc = ws_tls_handshake(a->tls_s, &want_write);
    if (rc < 0)
        return fail(a, TELO_EIO, "attach: TLS handshake failed: %s", ws_tls_error(a->tls_s));
    if (rc == 0)
        return watch(a, want_write ? EV_WRITE : EV_READ);
    ws_tls_io(a->tls_s, &a->io);
    a->io.close = NULL; /* still ours: destroy or the connection frees it */
    a->phase = P_REQUEST;
    send_request(a);
}

static void start_connect(struct kube_attach *a);

/* The socket is connected: TLS, or the request. */
static void connected(struct kube_attach *a)
{
    int one = 1;
    setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (a->tls) {
        a->tls_s = ws_tls_client_new(a->ssl_ctx, a->fd, a->host);
        if (a->tls_s == NULL)
            return fail(a, TELO_ENOMEM, "attach: %s", "out of memory");
        a->phase = P_TLS;
        return tls_step(a);
    }
    a->io = (struct ws_conn_io){.recv = plain_recv, .send = plain_send, .io_ud = &a->fd};
    a->phase = P_REQUEST;
    send_request(a);
}

static void connect_failed(struct kube_attach *a, int error)
{
    close(a->fd);
    a->fd = -1;
    ev_io_stop(a->loop, &a->watcher);
    if (a->next_addr != NULL)
        return start_connect(a);
    fail(a, TELO_EIO, "attach: cannot connect to %s port %s: %s", a->host, a->port,
         strerror(error));
}

/* Connects to the next address of the host. */
static void start_connect(struct kube_attach *a)
{
    struct addrinfo *ai = a->next_addr;
    a->next_addr = ai->ai_next;
    a->phase = P_CONNECT;
    a->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0)
        return fail(a, TELO_EIO, "attach: socket: %s", strerror(errno));
    if (connect(a->fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return connected(a);
    if (errno != EINPROGRESS)
        return connect_failed(a, errno);
    watch(a, EV_WRITE);
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kube_attach *a = w->data;
    enter(a);
    switch (a->phase) {
    case P_CONNECT: {
        int error = 0;
        socklen_t elen = sizeof(error);
        if (getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &error, &elen) != 0)
            error = errno;
        if (error != 0)
            connect_failed(a, error);
        else
            connected(a);
        break;
    }
    case P_TLS:
        tls_step(a);
        break;
    case P_REQUEST:
        send_request(a);
        break;
    case P_HEAD:
        read_head(a);
        break;
    default:
        break;
    }
    if (a->end.rc != 0 && a->phase != P_OPEN)
        finish(a);
    leave(a);
}

static void deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kube_attach *a = w->data;
    enter(a);
    fail(a, TELO_ETIMEDOUT, "attach: no WebSocket upgrade from %s within 30 s", a->host);
    finish(a);
    leave(a);
}

static void later_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kube_attach *a = w->data;
    enter(a);
    finish(a);
    leave(a);
}

/* ---- options ---- */

/* The URL's pieces, by libcurl's URL parser (the one the REST transport uses): scheme, host (an
 * IPv6 address without its brackets), port and "/path?query" as given (no dot-segment
 * rewriting). User info is refused, and so is any blank or control character (they would end up
 * in the request head). */
static int split_url(struct kube_attach *a, const char *url, struct telo_err *err)
{
    if (strlen(url) > URL_MAX)
        return telo_err_set(err, TELO_EINVAL, "attach: the URL is longer than %d bytes", URL_MAX);
    for (const char *p = url; *p; p++) {
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p == 0x7F)
            return telo_err_set(err, TELO_EINVAL,
                                "attach: cannot parse the URL %.200s (blank or control character)",
                                url);
    }
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *query = NULL, *user = NULL;
    int rc = 0;
    if (u == NULL)
        rc = telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    else if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS) !=
                 CURLUE_OK ||
             curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host == NULL ||
             host[0] == '\0' || curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK ||
             path == NULL || curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK)
        rc = telo_err_set(err, TELO_EINVAL, "attach: cannot parse the URL %.200s", url);
    else if (strcasecmp(scheme, "https") == 0 || strcasecmp(scheme, "wss") == 0)
        a->tls = 1;
    else if (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "ws") == 0)
        a->tls = 0;
    else
        rc = telo_err_set(err, TELO_EINVAL,
                          "attach: URL %.200s: scheme must be https, wss, http or ws", url);
    if (rc == 0 && host != NULL && path != NULL) {
        /* curl gives an IPv6 address in brackets (and a zone as %25zone: not supported here). */
        size_t hlen = strlen(host);
        const char *h = host;
        if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
            h++;
            hlen -= 2;
        }
        if (hlen == 0 || hlen >= sizeof(a->host))
            rc = telo_err_set(err, TELO_EINVAL, "attach: cannot parse the URL %.200s", url);
        else
            snprintf(a->host, sizeof(a->host), "%.*s", (int)hlen, h);
    }
    if (rc == 0 && path != NULL) {
        if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK)
            snprintf(a->port, sizeof(a->port), "%s", port);
        else
            snprintf(a->port, sizeof(a->port), "%s", a->tls ? "443" : "80");
        if (curl_url_get(u, CURLUPART_QUERY, &query, 0) != CURLUE_OK)
            query = NULL;
        size_t n = strlen(path) + (query ? strlen(query) + 1 : 0) + 2;
        a->target = malloc(n);
        if (a->target == NULL)
            rc = telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
        else
            snprintf(a->target, n, "%s%s%s%s", path[0] == '/' ? "" : "/", path, query ? "?" : "",
                     query ? query : "");
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_free(user);
    curl_url_cleanup(u);
    return rc;
}

/* Appends ", base64url.bearer.authorization.k8s.io.<unpadded base64url of token>" to b. */
static int offer_token(struct buf *b, const char *token, struct telo_err *err)
{
    size_t n = strlen(token);
    if (n == 0 || n > TOKEN_MAX || strpbrk(token, "\r\n") != NULL)
        return telo_err_set(err, TELO_EINVAL,
                            "attach: the subprotocol token is empty, longer than %d bytes or "
                            "holds a line break",
                            TOKEN_MAX);
    char *enc = malloc(UTIL_BASE64_ENCODED_SIZE(n));
    if (enc == NULL)
        return telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    size_t len = util_base64_encode_into(enc, token, n);
    while (len > 0 && enc[len - 1] == '=')
        len--;
    for (size_t i = 0; i < len; i++) {
        if (enc[i] == '+')
            enc[i] = '-';
        else if (enc[i] == '/')
            enc[i] = '_';
    }
    int rc = buf_printf(b, ", %s%.*s", BEARER_PROTOCOL, (int)len, enc);
    OPENSSL_cleanse(enc, len);
    free(enc);
    if (rc != 0)
        return telo_err_set(err, TELO_EINVAL, "attach: subprotocol list too long");
    return 0;
}

static int make_offer(struct kube_attach *a, const char *const *protocols,
                      const char *protocol_token, struct telo_err *err)
{
    static const char *const defaults[] = {KUBE_CHANNEL_V5, KUBE_CHANNEL_V4, NULL};
    if (protocols == NULL || protocols[0] == NULL)
        protocols = defaults;
    struct buf b;
    buf_init(&b, 1024);
    for (int i = 0; i < MAX_PROTOCOLS && protocols[i] != NULL; i++) {
        if (protocols[i][0] == '\0' || strpbrk(protocols[i], ", \t\r\n") != NULL) {
            buf_release(&b);
            return telo_err_set(err, TELO_EINVAL, "attach: bad subprotocol name");
        }
        if (buf_printf(&b, "%s%s", i ? ", " : "", protocols[i]) != 0) {
            buf_release(&b);
            return telo_err_set(err, TELO_EINVAL, "attach: subprotocol list too long");
        }
    }
    if (protocol_token != NULL) {
        b.max += (size_t)TOKEN_MAX * 2; /* room for the encoded token */
        int rc = offer_token(&b, protocol_token, err);
        if (rc != 0) {
            if (b.data != NULL)
                OPENSSL_cleanse(b.data, b.len);
            buf_release(&b);
            return rc;
        }
    }
    a->offer = buf_steal(&b);
    return a->offer ? 0 : telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
}

static int take_user_agent(struct kube_attach *a, const char *ua, struct telo_err *err)
{
    if (ua == NULL)
        ua = "telo/" TELO_VERSION;
    if (strlen(ua) >= sizeof(a->user_agent) || strpbrk(ua, "\r\n") != NULL)
        return telo_err_set(err, TELO_EINVAL,
                            "attach: the user agent is longer than %zu bytes or holds a line break",
                            sizeof(a->user_agent) - 1);
    snprintf(a->user_agent, sizeof(a->user_agent), "%s", ua);
    return 0;
}

static int take_token(struct kube_attach *a, const struct kube_attach_opts *opts,
                      struct telo_err *err)
{
    const char *token = opts->token;
    if (token == NULL && opts->cfg != NULL) {
        int rc = kube_config_token(opts->cfg, &token, err);
        if (rc != 0)
            return rc;
    }
    if (token == NULL)
        return 0;
    if (strlen(token) > TOKEN_MAX || strpbrk(token, "\r\n") != NULL)
        return telo_err_set(err, TELO_EINVAL,
                            "attach: the bearer token is longer than %d bytes or holds a line "
                            "break",
                            TOKEN_MAX);
    a->token = strdup(token);
    return a->token ? 0 : telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
}

/* The upgrade request (RFC 6455 section 4.1) and the accept key its answer must carry. */
static int build_request(struct kube_attach *a, struct telo_err *err)
{
    unsigned char nonce[16];
    char key[25];
    if (RAND_bytes(nonce, sizeof(nonce)) != 1)
        return telo_err_set(err, TELO_EIO, "attach: no random bytes for the WebSocket key");
    EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
    if (ws_accept_key(key, a->accept) != 0)
        return telo_err_set(err, TELO_EIO, "attach: cannot compute the WebSocket accept key");
    int v6 = strchr(a->host, ':') != NULL;
    int default_port = strcmp(a->port, a->tls ? "443" : "80") == 0;
    buf_init(&a->request, REQUEST_MAX);
    int rc = buf_printf(&a->request,
                        "GET %s HTTP/1.1\r\nHost: %s%s%s%s%s\r\nUser-Agent: %s\r\n"
                        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                        "Sec-WebSocket-Protocol: %s\r\n",
                        a->target, v6 ? "[" : "", a->host, v6 ? "]" : "", default_port ? "" : ":",
                        default_port ? "" : a->port, a->user_agent, key, a->offer);
    if (rc == 0 && a->token != NULL)
        rc = buf_printf(&a->request, "Authorization: Bearer %s\r\n", a->token);
    /* No Origin: it is what a browser sends, and servers (the gateway with --allowed-origin)
     * check it only then; client-go sends none either. */
    if (rc == 0)
        rc = buf_append_str(&a->request, "\r\n");
    if (rc != 0)
        return telo_err_set(err, TELO_EINVAL, "attach: the upgrade request is over %d bytes",
                            REQUEST_MAX);
    return 0;
}

static int resolve(struct kube_attach *a, struct telo_err *err)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
    int rc = getaddrinfo(a->host, a->port, &hints, &a->addrs);
    if (rc == EAI_NONAME) {
        /* A name: the only lookup that can wait (the system's resolver). */
        hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
        rc = getaddrinfo(a->host, a->port, &hints, &a->addrs);
    }
    if (rc != 0 || a->addrs == NULL)
        return telo_err_set(err, TELO_EIO, "attach: cannot resolve %s: %s", a->host,
                            rc != 0 ? gai_strerror(rc) : "no address");
    a->next_addr = a->addrs;
    return 0;
}

/* ---- public ---- */

struct kube_attach *kube_attach_open(struct ev_loop *loop, const struct kube_attach_opts *opts,
                                     const struct kube_attach_callbacks *cb, void *ud,
                                     struct telo_err *err)
{
    if (loop == NULL || opts == NULL || opts->url == NULL || cb == NULL || cb->on_output == NULL ||
        cb->on_end == NULL) {
        telo_err_set(err, TELO_EINVAL, "attach: loop, url, on_output and on_end are required");
        return NULL;
    }
    struct kube_attach *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
        return NULL;
    }
    a->loop = loop;
    a->cb = *cb;
    a->ud = ud;
    a->fd = -1;
    a->ping_s = opts->ping_interval_s > 0 ? opts->ping_interval_s : 20;
    ev_io_init(&a->watcher, io_cb, -1, EV_WRITE);
    ev_timer_init(&a->deadline, deadline_cb, HANDSHAKE_S, 0.);
    ev_timer_init(&a->later, later_cb, 0., 0.);
    a->watcher.data = a->deadline.data = a->later.data = a;

    if (split_url(a, opts->url, err) != 0 ||
        make_offer(a, opts->protocols, opts->protocol_token, err) != 0 ||
        take_token(a, opts, err) != 0 || take_user_agent(a, opts->user_agent, err) != 0 ||
        build_request(a, err) != 0)
        goto fail;
    a->head = malloc(HEAD_MAX);
    if (a->head == NULL) {
        telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
        goto fail;
    }
    if (a->tls && (a->ssl_ctx = kube_attach_ssl_ctx(opts, a->host, err)) == NULL)
        goto fail;
    if (resolve(a, err) != 0)
        goto fail;
    ev_timer_start(loop, &a->deadline);
    enter(a);
    start_connect(a);
    a->depth--;
    /* A failure found here (a refused loopback connect) is reported from the loop, as any
     * other: the caller has no handle yet. */
    if (a->end.rc != 0)
        ev_timer_start(loop, &a->later);
    return a;
fail:
    a->ended = 1;
    destroy(a);
    return NULL;
}

static int writable_now(struct kube_attach *a)
{
    if (!a->open || a->freed || a->ended || a->conn == NULL)
        return -TELO_EINVAL;
    return 0;
}

int kube_attach_write(struct kube_attach *a, const void *data, size_t len)
{
    int rc = writable_now(a);
    if (rc != 0)
        return rc;
    /* All or nothing: the chunks go out only when they all fit under QUEUE_MAX. */
    size_t chunks = (len + CHUNK_MAX - 1) / CHUNK_MAX;
    if (ws_conn_queued(a->conn) + len + chunks * (WS_MAX_HEADER + 1) > QUEUE_MAX)
        return -TELO_ETOOBIG;
    const unsigned char *p = data;
    unsigned char ch = KUBE_CHANNEL_STDIN;
    while (len > 0) {
        size_t n = len > CHUNK_MAX ? CHUNK_MAX : len;
        rc = ws_conn_send(a->conn, WS_OP_BINARY, &ch, 1, p, n, 1);
        if (rc != 0)
            return rc == -TELO_EIO ? -TELO_EINVAL : rc;
        p += n;
        len -= n;
    }
    return 0;
}

int kube_attach_resize(struct kube_attach *a, unsigned width, unsigned height)
{
    int rc = writable_now(a);
    if (rc != 0)
        return rc;
    if (width == 0 && height == 0)
        return 0;
    if (width < 1 || height < 1 || width > KUBE_TERM_MAX || height > KUBE_TERM_MAX)
        return -TELO_EINVAL;
    a->resize = (struct kube_term_size){width, height};
    a->resize_pending = 1;
    if (a->depth == 0) /* else when our callback returns: see leave */
        send_pending(a);
    return 0;
}

int kube_attach_close_stdin(struct kube_attach *a)
{
    int rc = writable_now(a);
    if (rc != 0)
        return rc;
    if (strcmp(a->protocol, KUBE_CHANNEL_V5) != 0)
        return 0;
    a->close_pending = 1;
    send_pending(a);
    return 0;
}

const char *kube_attach_protocol(const struct kube_attach *a)
{
    return a->open || a->protocol[0] ? a->protocol : NULL;
}

size_t kube_attach_queued(const struct kube_attach *a)
{
    return a->conn != NULL ? ws_conn_queued(a->conn) : 0;
}

void kube_attach_free(struct kube_attach *a)
{
    if (a == NULL)
        return;
    a->ended = 1;
    if (a->conn != NULL) {
        /* A normal close if it can go out now; the socket closes either way. */
        ws_conn_close(a->conn, WS_CLOSE_NORMAL, NULL);
        ws_conn_free(a->conn);
        a->conn = NULL;
    }
    stop_handshake(a);
    if (a->depth > 0) {
        a->freed = 1; /* the outermost entry point destroys it */
        return;
    }
    destroy(a);
}

int kube_attach_pod_url(const char *server, const char *namespace, const char *pod,
                        const char *container, struct buf *out, struct telo_err *err)
{
    const struct kube_ref ref = {.version = "v1",
                                 .resource = "pods",
                                 .namespace = namespace,
                                 .name = pod,
                                 .subresource = "attach"};
    int rc = buf_append_str(out, server != NULL ? server : "");
    rc = rc ? rc : kube_ref_path(&ref, out, err);
    rc = rc ? rc : url_query_add(out, "container", container);
    rc = rc ? rc : url_query_add(out, "stdin", "true");
    rc = rc ? rc : url_query_add(out, "stdout", "true");
    rc = rc ? rc : url_query_add(out, "stderr", "false");
    rc = rc ? rc : url_query_add(out, "tty", "true");
    return rc;
}

/* The gateway's one connection per session to the API server's pods/attach, over WebSocket
 * v5.channel.k8s.io with the gateway's own credentials. */
#include "gateway/upstream.h"

#include "gateway/proto.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "util/buf.h"
#include "util/url.h"
#include "ws/conn.h"
#include "ws/frame.h"
#include "ws/http.h"

#include <curl/curl.h>
#include <errno.h>
#include <ev.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_MAX    16384
#define HANDSHAKE_S 10.0
#define MAX_QUEUED  (1 << 20)
#define MAX_MESSAGE (1 << 20)
#define SUBPROTOCOL "v5.channel.k8s.io"

enum phase { SENDING, READING, OPEN, CLOSED };

struct gw_upstream {
    struct ev_loop *loop;
    CURL *easy; /* owns the TCP and TLS connection */
    int fd;
    enum phase phase;
    struct gw_upstream_callbacks cb;
    void *ud;
    double ping_interval_s;

    struct buf request; /* the upgrade request; sent from offset sent */
    size_t sent;
    char head[HEAD_MAX + 1];
    size_t head_len;
    char accept[WS_ACCEPT_KEY_SIZE];

    ev_io io;
    ev_timer deadline;
    struct ws_conn *ws;
};

static ssize_t tls_recv(void *io_ud, void *buf, size_t len)
{
    struct gw_upstream *u = io_ud;
    size_t n = 0;
    CURLcode rc = curl_easy_recv(u->easy, buf, len, &n);
    if (rc == CURLE_OK)
        return (ssize_t)n;
    errno = rc == CURLE_AGAIN ? EAGAIN : EIO;
    return -1;
}

static ssize_t tls_send(void *io_ud, const void *buf, size_t len)
{
    struct gw_upstream *u = io_ud;
    size_t n = 0;
    CURLcode rc = curl_easy_send(u->easy, buf, len, &n);
    if (rc == CURLE_OK)
        return (ssize_t)n;
    errno = rc == CURLE_AGAIN ? EAGAIN : EIO;
    return -1;
}

/* Reports the end once; nothing touches u after the callback, which may free it. */
static void end(struct gw_upstream *u, int http_status, const char *why)
{
    if (u->phase == CLOSED)
        return;
    u->phase = CLOSED;
    ev_io_stop(u->loop, &u->io);
    ev_timer_stop(u->loop, &u->deadline);
    u->cb.on_closed(http_status, why, u->ud);
}

static void ws_message(struct ws_conn *c, int opcode, const uint8_t *data, size_t len, void *ud)
{
    (void)c;
    struct gw_upstream *u = ud;
    if (opcode != WS_OP_BINARY || len == 0)
        return;
    if ((data[0] == GW_CH_STDOUT || data[0] == GW_CH_STDERR) && len > 1)
        u->cb.on_output(data + 1, len - 1, u->ud);
    else if (data[0] == GW_CH_STATUS && u->cb.on_status != NULL)
        u->cb.on_status(data + 1, len - 1, u->ud);
}

static void ws_closed(struct ws_conn *c, int code, const char *reason, void *ud)
{
    (void)c;
    struct gw_upstream *u = ud;
    char why[160];
    snprintf(why, sizeof(why), "attach stream closed (%d%s%s)", code, reason[0] ? ": " : "",
             reason);
    end(u, 0, why);
}

/* The 101 answer is complete in u->head[0..head_end): check it, then hand the socket to the
 * WebSocket connection with whatever followed the head. */
static void upgrade_done(struct gw_upstream *u, size_t head_end)
{
    struct ws_http_head h;
    struct telo_err err = {0};
    char saved = u->head[head_end];
    if (ws_http_parse_response(u->head, head_end, &h, &err) != 0)
        return end(u, 0, err.msg);
    u->head[head_end] = saved;
    if (h.status != 101) {
        char why[160];
        snprintf(why, sizeof(why), "the API server answered the attach with %d", h.status);
        return end(u, h.status, why);
    }
    const char *accept = ws_http_header(&h, "Sec-WebSocket-Accept");
    const char *proto = ws_http_header(&h, "Sec-WebSocket-Protocol");
    if (accept == NULL || strcmp(accept, u->accept) != 0)
        return end(u, 0, "the API server's upgrade has a wrong Sec-WebSocket-Accept");
    if (proto == NULL || strcmp(proto, SUBPROTOCOL) != 0)
        return end(u, 0, "the API server did not agree to " SUBPROTOCOL);
    ev_io_stop(u->loop, &u->io);
    ev_timer_stop(u->loop, &u->deadline);
    struct ws_conn_io io = {.recv = tls_recv, .send = tls_send, .io_ud = u};
    struct ws_conn_opts opts = {.client = 1,
                                .max_message = MAX_MESSAGE,
                                .max_queued = MAX_QUEUED,
                                .ping_interval_s = u->ping_interval_s,
                                .keep_fd = 1};
    struct ws_conn_callbacks cbs = {.on_message = ws_message, .on_closed = ws_closed};
    u->ws = ws_conn_new(u->loop, u->fd, &io, &opts, &cbs, u, &err);
    if (u->ws == NULL)
        return end(u, 0, err.msg);
    u->phase = OPEN;
    size_t rest = u->head_len - head_end;
    char *tail = malloc(rest + 1);
    if (rest > 0 && tail == NULL)
        return end(u, 0, "out of memory");
    memcpy(tail, u->head + head_end, rest);
    u->cb.on_open(u->ud);
    /* on_open may have closed us; a CLOSED upstream is the owner's to free, not ours to feed. */
    if (u->phase == OPEN && rest > 0)
        ws_conn_feed(u->ws, tail, rest);
    free(tail);
}

static void handshake_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct gw_upstream *u = w->data;
    if (u->phase == SENDING) {
        while (u->sent < u->request.len) {
            ssize_t n = tls_send(u, u->request.data + u->sent, u->request.len - u->sent);
            if (n < 0 && errno == EAGAIN)
                return;
            if (n <= 0)
                return end(u, 0, "sending the attach request failed");
            u->sent += (size_t)n;
        }
        u->phase = READING;
        ev_io_stop(u->loop, &u->io);
        ev_io_set(&u->io, u->fd, EV_READ);
        ev_io_start(u->loop, &u->io);
    }
    /* TLS may hold decrypted bytes the socket no longer signals: read until EAGAIN. */
    for (;;) {
        if (u->head_len == HEAD_MAX)
            return end(u, 0, "the API server's answer head is too long");
        ssize_t n = tls_recv(u, u->head + u->head_len, HEAD_MAX - u->head_len);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0)
            return end(u, 0, "the API server closed the connection during the upgrade");
        u->head_len += (size_t)n;
        long head_end = ws_http_head_end(u->head, u->head_len, HEAD_MAX);
        if (head_end > 0)
            return upgrade_done(u, (size_t)head_end);
    }
}

static void deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    end(w->data, 0, "the API server did not answer the attach upgrade in time");
}

/* Builds the upgrade request into u->request and the accept value we expect. */
static int build_request(struct gw_upstream *u, const char *host, const char *namespace,
                         const char *pod, const char *container, const char *token)
{
    unsigned char nonce[16];
    char key[32];
    if (RAND_bytes(nonce, sizeof(nonce)) != 1)
        return -TELO_EIO;
    EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
    if (ws_accept_key(key, u->accept) != 0)
        return -TELO_EIO;
    struct buf *b = &u->request;
    int rc = buf_append_str(b, "GET /api/v1/namespaces/");
    rc = rc ? rc : url_escape(b, namespace);
    rc = rc ? rc : buf_append_str(b, "/pods/");
    rc = rc ? rc : url_escape(b, pod);
    rc = rc ? rc : buf_append_str(b, "/attach");
    rc = rc ? rc : url_query_add(b, "container", container);
    rc = rc ? rc : url_query_add(b, "stdin", "true");
    rc = rc ? rc : url_query_add(b, "stdout", "true");
    rc = rc ? rc : url_query_add(b, "tty", "true");
    rc = rc ? rc
            : buf_printf(b,
                         " HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                         "Sec-WebSocket-Protocol: " SUBPROTOCOL "\r\n"
                         "User-Agent: telo-gateway/" TELO_VERSION "\r\n",
                         host, key);
    if (rc == 0 && token != NULL)
        rc = buf_printf(b, "Authorization: Bearer %s\r\n", token);
    return rc ? rc : buf_append_str(b, "\r\n");
}

struct gw_upstream *gw_upstream_open(struct ev_loop *loop, struct kube_config *cfg,
                                     const char *namespace, const char *pod, const char *container,
                                     long connect_timeout_ms, double ping_interval_s,
                                     const struct gw_upstream_callbacks *cb, void *ud,
                                     struct telo_err *err)
{
    struct gw_upstream *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
        return NULL;
    }
    u->loop = loop;
    u->cb = *cb;
    u->ud = ud;
    u->fd = -1;
    u->ping_interval_s = ping_interval_s;
    buf_init(&u->request, 32768);
    u->easy = curl_easy_init();
    if (u->easy == NULL) {
        telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
        goto fail;
    }
    const char *token = NULL;
    if (kube_transport_setup_easy(u->easy, cfg, &token, err) != 0)
        goto fail;
    CURL *e = u->easy;
    curl_easy_setopt(e, CURLOPT_URL, cfg->server);
    curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
    /* HTTP/1.1 so ALPN cannot choose h2: the upgrade needs a connection of its own. */
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    CURLcode rc = curl_easy_perform(e);
    curl_socket_t sock = CURL_SOCKET_BAD;
    if (rc == CURLE_OK)
        rc = curl_easy_getinfo(e, CURLINFO_ACTIVESOCKET, &sock);
    if (rc != CURLE_OK || sock == CURL_SOCKET_BAD) {
        telo_err_set(err, TELO_EIO, "attach: cannot connect to %s: %s", cfg->server,
                     curl_easy_strerror(rc));
        goto fail;
    }
    u->fd = (int)sock;
    const char *host = strstr(cfg->server, "://");
    host = host != NULL ? host + 3 : cfg->server;
    if (build_request(u, host, namespace, pod, container, token) != 0) {
        telo_err_set(err, TELO_ENOMEM, "attach: cannot build the upgrade request");
        goto fail;
    }
    ev_io_init(&u->io, handshake_io, u->fd, EV_WRITE);
    ev_timer_init(&u->deadline, deadline_cb, HANDSHAKE_S, 0.);
    u->io.data = u->deadline.data = u;
    ev_io_start(loop, &u->io);
    ev_timer_start(loop, &u->deadline);
    return u;
fail:
    gw_upstream_free(u);
    return NULL;
}

int gw_upstream_stdin(struct gw_upstream *u, const void *data, size_t len)
{
    static const uint8_t ch = GW_CH_STDIN;
    if (u == NULL || u->phase != OPEN)
        return -TELO_EIO;
    return ws_conn_send(u->ws, WS_OP_BINARY, &ch, 1, data, len, 0);
}

int gw_upstream_resize(struct gw_upstream *u, int width, int height)
{
    static const uint8_t ch = GW_CH_RESIZE;
    if (u == NULL || u->phase != OPEN)
        return -TELO_EIO;
    struct buf text;
    buf_init(&text, 64);
    int rc = gw_resize_json(&text, width, height);
    if (rc == 0)
        rc = ws_conn_send(u->ws, WS_OP_BINARY, &ch, 1, text.data, text.len, 0);
    buf_release(&text);
    return rc;
}

int gw_upstream_is_open(const struct gw_upstream *u)
{
    return u != NULL && u->phase == OPEN;
}

void gw_upstream_free(struct gw_upstream *u)
{
    if (u == NULL)
        return;
    /* Stopping a watcher that never started is a no-op for libev (zeroed by calloc). */
    ev_io_stop(u->loop, &u->io);
    ev_timer_stop(u->loop, &u->deadline);
    ws_conn_free(u->ws);
    curl_easy_cleanup(u->easy);
    buf_release(&u->request);
    free(u);
}

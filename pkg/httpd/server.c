/* A small HTTP/1.1 server on the caller's libev loop, built on libwebsockets. */
#include "httpd/server.h"

#include "util/log.h"

#include <ev.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

/* Body bytes handed to lws_write per writable callback: large bodies go out in pieces so lws
 * never has to copy what the kernel did not take (it would malloc the remainder). */
#define WRITE_CHUNK 16384

/* Headers of our responses are small and fixed; this bounds them. */
#define HEADER_SPACE 1024

struct route {
    char *path;
    httpd_handler_fn *handler;
    void *user;
    httpd_user_free_fn *user_free;
};

struct httpd_server {
    struct ev_loop *loop;
    char *address; /* NULL: every interface */
    char *tls_cert_path;
    char *tls_key_path;
    int port_config;
    size_t max_request;
    size_t max_response;

    struct route *routes;
    size_t nroutes;
    size_t routes_cap;

    struct lws_context *context; /* NULL until started */
    struct lws_vhost *vhost;
    /* The "http" protocol and the terminator. WebSocket routes will become further protocols
     * here (with LWSMPRO_CALLBACK mounts selecting them by path), registered before start. */
    struct lws_protocols protocols[2];

    /* Shared by every connection: all callbacks run on the one loop thread. lws_write needs
     * LWS_PRE writable bytes in front of what it sends. */
    unsigned char scratch[LWS_PRE + WRITE_CHUNK + HEADER_SPACE];
};

/* One HTTP transaction; storage is lws's (zeroed per transaction, per_session_data_size). */
struct transaction {
    int status;
    char content_type[HTTPD_CONTENT_TYPE_MAX];
    int allow;  /* add "Allow: GET, HEAD" (a 405) */
    int head;   /* send the headers of the body but not the body */
    char *body; /* owned; the part not yet written starts at off */
    size_t len;
    size_t off;
    int awaiting_body; /* answer after the request's body has been read (and dropped) */
    int close_after;   /* close the connection after the answer instead of keeping it */
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

/* The request body's announced length: 0 for none, -1 when it is chunked or unparsable. */
static long long request_body_length(struct lws *wsi)
{
    char value[32];
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0)
        return -1;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
        return 0;
    if (lws_hdr_copy(wsi, value, (int)sizeof(value), WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0)
        return -1;
    char *end = NULL;
    long long n = strtoll(value, &end, 10);
    return (end == value || *end != '\0' || n < 0) ? -1 : n;
}

/* Ends the transaction: the next request on the connection may follow (keep-alive). Returns 0 to
 * keep the connection, -1 to close it (lws's convention). */
static int finish(struct lws *wsi, struct transaction *tx)
{
    free(tx->body);
    tx->body = NULL;
    if (tx->close_after)
        return -1;
    return lws_http_transaction_completed(wsi) != 0 ? -1 : 0;
}

/* Writes the status line and headers now and queues the body for the writable callback. */
static int send_headers(struct httpd_server *srv, struct lws *wsi, struct transaction *tx)
{
    unsigned char *start = srv->scratch + LWS_PRE;
    unsigned char *p = start;
    unsigned char *end = srv->scratch + sizeof(srv->scratch) - 1;
    static const char allow[] = "GET, HEAD";

    if (lws_add_http_common_headers(wsi, (unsigned int)tx->status, tx->content_type, tx->len, &p,
                                    end) != 0)
        return -1;
    if (tx->allow &&
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_ALLOW, (const unsigned char *)allow,
                                     (int)strlen(allow), &p, end) != 0)
        return -1;
    if (lws_finalize_write_http_header(wsi, start, &p, end) != 0)
        return -1;
    if (tx->len == 0 || tx->head)
        return finish(wsi, tx);
    tx->off = 0;
    lws_callback_on_writable(wsi);
    return 0;
}

static int set_text(struct transaction *tx, int status, const char *text)
{
    tx->status = status;
    snprintf(tx->content_type, sizeof(tx->content_type), "text/plain; charset=utf-8");
    tx->body = strdup(text);
    if (tx->body == NULL)
        return -1;
    tx->len = strlen(text);
    return 0;
}

/* Runs the route's handler into tx. Returns 0, or -1 when out of memory. */
static int run_handler(struct httpd_server *srv, struct lws *wsi, struct transaction *tx,
                       const struct route *route, const char *path)
{
    /* The query is part of the request, which max_http_header_data already bounds. */
    char *query = calloc(1, srv->max_request + 1);
    if (query == NULL)
        return -1;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS) > 0 &&
        lws_hdr_copy(wsi, query, (int)srv->max_request + 1, WSI_TOKEN_HTTP_URI_ARGS) < 0)
        query[0] = '\0';

    struct httpd_request req = {.path = path, .query = query, .head = tx->head};
    struct httpd_response resp = {.status = 200};
    snprintf(resp.content_type, sizeof(resp.content_type), "text/plain; charset=utf-8");
    buf_init(&resp.body, srv->max_response);
    int rc = route->handler(&req, &resp, route->user);
    free(query);
    if (rc < 0 || resp.status < 100 || resp.status > 599) {
        telo_log(TELO_LOG_ERROR, "http handler failed", "path=%s code=%d status=%d", path, -rc,
                 resp.status);
        buf_release(&resp.body);
        return set_text(tx, 500, "internal server error\n");
    }
    tx->status = resp.status;
    memcpy(tx->content_type, resp.content_type, sizeof(tx->content_type));
    tx->content_type[sizeof(tx->content_type) - 1] = '\0';
    tx->len = resp.body.len;
    tx->body = buf_steal(&resp.body);
    return 0;
}

static int serve(struct httpd_server *srv, struct lws *wsi, struct transaction *tx,
                 const char *path)
{
    char *uri = NULL;
    int uri_len = 0;
    int method = lws_http_get_uri_and_method(wsi, &uri, &uri_len);
    long long body_length = request_body_length(wsi);
    int rc;

    /* Only GET and HEAD are served, so a body is read and dropped before the answer (answering
     * first and closing would make the kernel reset the connection and lose the answer). A body
     * larger than a request may be, or of unknown length, closes the connection unanswered, as
     * oversized headers do. */
    if (body_length < 0 || (unsigned long long)body_length > srv->max_request)
        return -1;

    memset(tx, 0, sizeof(*tx));
    tx->head = method == LWSHUMETH_HEAD;
    const struct route *route = route_find(srv, path);
    if (route == NULL) {
        rc = set_text(tx, 404, "not found\n");
    } else if (method != LWSHUMETH_GET && !tx->head) {
        tx->allow = 1;
        rc = set_text(tx, 405, "method not allowed\n");
    } else {
        rc = run_handler(srv, wsi, tx, route, path);
    }
    if (rc < 0)
        return -1;
    if (body_length > 0) {
        tx->awaiting_body = 1;
        return 0;
    }
    /* lws 4.1.6 keeps a POST or PUT without Content-Length waiting for a body after the answer
     * (measured: "Connection: close" was not honoured), so any method we do not serve gets its
     * answer and then a close; GET and HEAD keep the connection. */
    tx->close_after = method != LWSHUMETH_GET && !tx->head;
    return send_headers(srv, wsi, tx);
}

static int write_body(struct httpd_server *srv, struct lws *wsi, struct transaction *tx)
{
    if (tx->body == NULL || tx->awaiting_body)
        return 0;
    size_t n = tx->len - tx->off;
    if (n > WRITE_CHUNK)
        n = WRITE_CHUNK;
    int last = tx->off + n == tx->len;
    unsigned char *start = srv->scratch + LWS_PRE;
    memcpy(start, tx->body + tx->off, n);
    if (lws_write(wsi, start, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)n)
        return -1;
    tx->off += n;
    if (last)
        return finish(wsi, tx);
    lws_callback_on_writable(wsi);
    return 0;
}

static int http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    struct transaction *tx = user;
    struct httpd_server *srv = lws_context_user(lws_get_context(wsi));

    switch (reason) {
    case LWS_CALLBACK_HTTP:
        return serve(srv, wsi, tx, in != NULL ? (const char *)in : "/");
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return tx != NULL ? write_body(srv, wsi, tx) : 0;
    case LWS_CALLBACK_HTTP_BODY:
        return 0; /* dropped: see serve() */
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (tx == NULL || !tx->awaiting_body)
            return 0; /* lws reports an empty body too; the answer is already on its way */
        tx->awaiting_body = 0;
        return send_headers(srv, wsi, tx);
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (tx != NULL) {
            free(tx->body);
            tx->body = NULL;
        }
        break;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

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

    struct httpd_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        goto nomem;
    srv->loop = loop;
    srv->port_config = cfg->port;
    srv->max_request = cfg->max_request_bytes ? cfg->max_request_bytes : HTTPD_DEFAULT_MAX_REQUEST;
    srv->max_response =
        cfg->max_response_bytes ? cfg->max_response_bytes : HTTPD_DEFAULT_MAX_RESPONSE;
    srv->address = dup_or_null(cfg->address);
    srv->tls_cert_path = dup_or_null(cfg->tls_cert_path);
    srv->tls_key_path = dup_or_null(cfg->tls_key_path);
    if ((cfg->address != NULL && cfg->address[0] != '\0' && srv->address == NULL) ||
        (has_cert && (srv->tls_cert_path == NULL || srv->tls_key_path == NULL)))
        goto nomem;
    srv->protocols[0].name = "http";
    srv->protocols[0].callback = http_callback;
    srv->protocols[0].per_session_data_size = sizeof(struct transaction);
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

int httpd_start(struct httpd_server *srv, struct telo_err *err)
{
    if (srv->context != NULL)
        return telo_err_set(err, TELO_EINVAL, "httpd: server already started");

    /* Process-wide in lws; errors and warnings go to our log, the rest is dropped. */
    lws_set_log_level(LLL_ERR | LLL_WARN, telo_log_lws);

    void *foreign_loops[1] = {srv->loop};
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.options = LWS_SERVER_OPTION_LIBEV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    if (srv->tls_cert_path != NULL)
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.foreign_loops = foreign_loops; /* read only during lws_create_context */
    info.user = srv;
    info.port = CONTEXT_PORT_NO_LISTEN;
    /* Every request's line and headers must fit this (per context in lws, not per vhost); a
     * request that does not is closed without an answer. */
    info.max_http_header_data = (unsigned short)srv->max_request;
    srv->context = lws_create_context(&info);
    if (srv->context == NULL)
        return telo_err_set(err, TELO_EIO,
                            "httpd: libwebsockets could not start on the libev loop (is the "
                            "libwebsockets-evlib-ev package installed?)");

    memset(&info, 0, sizeof(info));
    info.vhost_name = "telo";
    info.port = srv->port_config;
    info.iface = srv->address;
    info.protocols = srv->protocols;
    info.server_string = "telo-operator";
    /* HTTP/1.1 only, also over TLS: h2 would be a second protocol surface for three endpoints. */
    info.alpn = "http/1.1";
    if (srv->tls_cert_path != NULL) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = srv->tls_cert_path;
        info.ssl_private_key_filepath = srv->tls_key_path;
    }
    srv->vhost = lws_create_vhost(srv->context, &info);
    if (srv->vhost == NULL) {
        lws_context_destroy(srv->context);
        srv->context = NULL;
        return telo_err_set(err, TELO_EIO,
                            "httpd: cannot serve on %s:%d%s%s%s%s: address in use, not local, or "
                            "an unreadable certificate or key (see the libwebsockets log line)",
                            srv->address ? srv->address : "*", srv->port_config,
                            srv->tls_cert_path ? " with TLS cert " : "",
                            srv->tls_cert_path ? srv->tls_cert_path : "",
                            srv->tls_key_path ? " key " : "",
                            srv->tls_key_path ? srv->tls_key_path : "");
    }
    return 0;
}

int httpd_port(const struct httpd_server *srv)
{
    if (srv == NULL || srv->vhost == NULL)
        return -1;
    return lws_get_vhost_listen_port(srv->vhost);
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
    /* With a foreign libev loop, lws stops its watchers synchronously here, and closing each
     * connection runs CLOSED_HTTP, which frees the bodies in flight. */
    if (srv->context != NULL)
        lws_context_destroy(srv->context);
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

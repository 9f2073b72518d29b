/* A small HTTP/1.1 server on the caller's libev loop (GET and HEAD of registered paths), on the
 * project's own stack: pkg/ws/http.c parses the request head, pkg/ws/tls.c serves TLS. */
#ifndef TELO_HTTPD_SERVER_H
#define TELO_HTTPD_SERVER_H

#include "util/buf.h"
#include "util/err.h"

#include <stddef.h>

struct ev_loop;
struct httpd_server;

#define HTTPD_DEFAULT_MAX_REQUEST  8192               /* request line plus headers, bytes */
#define HTTPD_LIMIT_MAX_REQUEST    65535              /* the largest request head we read */
#define HTTPD_DEFAULT_MAX_RESPONSE ((size_t)16 << 20) /* a handler's body, bytes */
#define HTTPD_CONTENT_TYPE_MAX     96
/* A request's head and body must arrive within this many seconds of its first byte, however
 * steadily the bytes trickle in: a slow sender cannot hold a connection (and its share of the
 * server's connection cap) for longer. */
#define HTTPD_DEFAULT_REQUEST_TIMEOUT_S 10.0
#define HTTPD_LIMIT_REQUEST_TIMEOUT_S   3600.0
/* Open connections from one peer address; more from it are closed at accept, so one pod cannot
 * take every connection the server allows and starve the kubelet's probes. */
#define HTTPD_MAX_CONNS_PER_PEER 16

struct httpd_config {
    const char *address;       /* IPv4 or IPv6 literal to bind; NULL or "" binds every interface */
    int port;                  /* 0 lets the kernel choose; read it back with httpd_port */
    const char *tls_cert_path; /* PEM certificate chain; with tls_key_path turns on TLS */
    const char *tls_key_path;  /* PEM private key; both NULL serves plain HTTP */
    size_t max_request_bytes;  /* request line plus headers; 0 = HTTPD_DEFAULT_MAX_REQUEST */
    size_t max_response_bytes; /* a handler's body; 0 = HTTPD_DEFAULT_MAX_RESPONSE */
    double request_timeout_s;  /* head plus body; 0 = HTTPD_DEFAULT_REQUEST_TIMEOUT_S */
};

/* What a handler may read about the request. Valid only during the handler call. */
struct httpd_request {
    const char *path;  /* the path, percent-decoded and without the query, e.g. "/metrics" */
    const char *query; /* the raw query string without '?', "" when there is none */
    int head;          /* 1 for HEAD: the handler runs as for GET and the body is not sent */
};

/* What a handler fills. The server presets status 200, content type "text/plain;
 * charset=utf-8" and an empty body bounded by the server's max_response_bytes. */
struct httpd_response {
    int status;
    char content_type[HTTPD_CONTENT_TYPE_MAX];
    struct buf body;
};

/* Answers one request synchronously from in-memory state. Returns 0 to send resp, or a negative
 * telo error code: the server then answers 500 with a generic text (and logs the code), and the
 * body the handler wrote is discarded. */
typedef int httpd_handler_fn(const struct httpd_request *req, struct httpd_response *resp,
                             void *user);

/* Releases a route's user data when the route goes away (httpd_free). */
typedef void httpd_user_free_fn(void *user);

/* Creates a stopped server for loop with a copy of cfg (cfg NULL: every interface, an ephemeral
 * port, plain HTTP, default bounds). loop is borrowed and must outlive the server. Returns NULL
 * with err filled: -TELO_EINVAL when only one of the TLS paths is set, a bound is out of range or
 * the port is outside 0..65535; -TELO_ENOMEM. */
struct httpd_server *httpd_new(struct ev_loop *loop, const struct httpd_config *cfg,
                               struct telo_err *err);

/* Serves GET (and HEAD) for exactly path (no prefix match, no query in path) with handler;
 * any other method on that path gets 405 with an Allow header. user is passed to the handler;
 * user_free (may be NULL) releases it in httpd_free, and also here when registration fails, so
 * the caller never frees user after passing it. May be called before or after httpd_start.
 * Returns 0, or -TELO_EINVAL (path not starting with '/', already registered, NULL handler), or
 * -TELO_ENOMEM. */
int httpd_route(struct httpd_server *srv, const char *path, httpd_handler_fn *handler, void *user,
                httpd_user_free_fn *user_free, struct telo_err *err);

/* Binds and starts accepting on the loop; requests are served while the caller runs the loop.
 * Returns 0, or -TELO_EINVAL when already started, or -TELO_EIO when it cannot listen (address in
 * use or not local) or the certificate or key cannot be used: err says which. */
int httpd_start(struct httpd_server *srv, struct telo_err *err);

/* The port the server listens on (the chosen one when the config said 0), or -1 when not
 * started. Cannot fail. */
int httpd_port(const struct httpd_server *srv);

/* Sets resp's status, content type (NULL keeps the current one) and body text (NULL leaves the
 * body empty), replacing what was there. Returns 0, or -TELO_ETOOBIG when text exceeds the
 * body's bound (resp then holds the status and type and an empty body). */
int httpd_response_text(struct httpd_response *resp, int status, const char *content_type,
                        const char *text);

/* Stops listening, closes every connection (responses in flight are cut), releases every route's
 * user data and frees srv. Leaves no watcher on the loop. NULL is a no-op. */
void httpd_free(struct httpd_server *srv);

#endif

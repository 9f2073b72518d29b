/* TLS for a connection (OpenSSL): the server side (a context from certificate and key files) and
 * the client side (the caller's SSL_CTX: its trust and client certificate), as a per-connection
 * stream that reads and writes like a non-blocking socket (struct ws_conn_io). */
#ifndef TELO_WS_TLS_H
#define TELO_WS_TLS_H

#include "util/err.h"
#include "ws/conn.h"

#include <stddef.h>
#include <sys/types.h>

struct ssl_ctx_st;

struct ws_tls_ctx;
struct ws_tls;

/* Loads the PEM certificate chain and private key (TLS 1.2 and newer, ALPN http/1.1). Returns the
 * context, or NULL with err naming the file that could not be used (-TELO_EINVAL) or
 * -TELO_ENOMEM. */
struct ws_tls_ctx *ws_tls_ctx_new(const char *cert_path, const char *key_path,
                                  struct telo_err *err);

/* Loads ctx's certificate and key files again when either changed since they were last loaded
 * (stat: inode, device, size, modification time; a Secret volume's update swaps a symlink), so a
 * renewed certificate is served to new connections without a restart. Looks at the files at most
 * once per min_interval_s (now is the caller's clock in seconds). Returns 1 when the new pair is
 * in use, 0 when nothing changed or it was too early to look, or a negative code with err filled
 * when the changed files do not load: the previous certificate stays in use, and the pair is
 * tried again when it changes again. Connections already made keep their certificate. */
int ws_tls_ctx_reload(struct ws_tls_ctx *ctx, double now, double min_interval_s,
                      struct telo_err *err);

/* Frees ctx; connections made from it keep what they need. NULL is a no-op. */
void ws_tls_ctx_free(struct ws_tls_ctx *ctx);

/* A server-side TLS stream on the connected, non-blocking socket fd (borrowed: the caller closes
 * it after ws_tls_free). Returns NULL when out of memory. */
struct ws_tls *ws_tls_new(struct ws_tls_ctx *ctx, int fd);

/* A client-side TLS stream on the connected, non-blocking socket fd (borrowed, as for ws_tls_new)
 * with ctx's trust, verification and client certificate (ctx is referenced: the caller may free
 * its own reference). server_name, when not NULL and not an IP address, goes out as SNI. Offers
 * ALPN http/1.1. Returns NULL when out of memory. */
struct ws_tls *ws_tls_client_new(struct ssl_ctx_st *ctx, int fd, const char *server_name);

/* What made the last handshake or read fail ("SSL: certificate verify failed: ..."), or "". */
const char *ws_tls_error(const struct ws_tls *t);

/* Advances the handshake. Returns 1 when it is done, 0 when it waits for the socket (*want_write
 * says whether for writing or reading), -1 when it failed (the peer is not speaking TLS, or no
 * common version or cipher). */
int ws_tls_handshake(struct ws_tls *t, int *want_write);

/* Fills io with t's recv and send (non-blocking-socket conventions: bytes, or -1 with errno
 * EAGAIN when the socket would block, 0 at the peer's end) and close (ws_tls_free), for
 * ws_conn_new; from then on io owns t. */
void ws_tls_io(struct ws_tls *t, struct ws_conn_io *io);

/* Sends close_notify when it can without waiting and frees t (not the socket). NULL is a no-op. */
void ws_tls_free(struct ws_tls *t);

#endif

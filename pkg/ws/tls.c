/* TLS for a connection (OpenSSL): the server side (a context from certificate and key files) and
 * the client side (the caller's SSL_CTX: its trust and client certificate), as a per-connection
 * stream that reads and writes like a non-blocking socket (struct ws_conn_io). */
#include "ws/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define READ_AHEAD ((size_t)65536) /* a client stream's read buffer with read-ahead */

struct ws_tls_ctx {
    SSL_CTX *ctx;
    /* For ws_tls_ctx_reload: the files and what stat said of them when last loaded. */
    char *cert_path, *key_path;
    struct stat cert_seen, key_seen;
    double checked; /* when the files were last looked at; 0: never */
};

struct ws_tls {
    SSL *ssl;
    char why[200]; /* the last failure, for messages */
};

/* Keeps what OpenSSL says about a failure (the certificate check's verdict first), then clears
 * its error queue. */
static void note_failure(struct ws_tls *t, int ssl_error)
{
    char detail[160] = "";
    unsigned long e = ERR_peek_error();
    if (e != 0)
        ERR_error_string_n(e, detail, sizeof(detail));
    long verify = SSL_get_verify_result(t->ssl);
    if (verify != X509_V_OK)
        snprintf(t->why, sizeof(t->why), "SSL: %s%s%s", X509_verify_cert_error_string(verify),
                 detail[0] ? ": " : "", detail);
    else if (detail[0])
        snprintf(t->why, sizeof(t->why), "SSL: %s", detail);
    else
        snprintf(t->why, sizeof(t->why), "SSL: %s",
                 ssl_error == SSL_ERROR_SYSCALL ? "the peer closed the connection"
                                                : "protocol error");
    ERR_clear_error();
}

/* Offers only http/1.1: the handshake that follows is an HTTP/1.1 upgrade. */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    static const unsigned char ours[] = "\x08http/1.1";
    unsigned char *chosen = NULL;
    if (SSL_select_next_proto(&chosen, outlen, ours, sizeof(ours) - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

/* A server context with cert_path and key_path loaded: NULL with err filled when they cannot be
 * used. */
static SSL_CTX *server_ctx(const char *cert_path, const char *key_path, struct telo_err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        telo_err_set(err, TELO_ENOMEM, "tls: out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* The connection's send queue moves and grows between a blocked write and its retry. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    const char *bad = NULL;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_path) != 1)
        bad = cert_path;
    else if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1 ||
             SSL_CTX_check_private_key(ctx) != 1)
        bad = key_path;
    if (bad != NULL) {
        char why[256];
        ERR_error_string_n(ERR_get_error(), why, sizeof(why));
        ERR_clear_error();
        telo_err_set(err, TELO_EINVAL,
                     "tls: cannot use %s (a PEM certificate chain, and the PEM key that matches "
                     "it): %s",
                     bad, why);
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* What identifies a file's content for a reload: a Secret volume's update swaps a symlink (a new
 * inode), an in-place write changes the modification time or size. A file that cannot be
 * stat'ed reads as all zero. */
static void fingerprint(const char *path, struct stat *st)
{
    if (stat(path, st) != 0)
        memset(st, 0, sizeof(*st));
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

struct ws_tls_ctx *ws_tls_ctx_new(const char *cert_path, const char *key_path, struct telo_err *err)
{
    struct ws_tls_ctx *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->cert_path = strdup(cert_path);
        c->key_path = strdup(key_path);
    }
    if (c == NULL || c->cert_path == NULL || c->key_path == NULL) {
        ws_tls_ctx_free(c);
        telo_err_set(err, TELO_ENOMEM, "tls: out of memory");
        return NULL;
    }
    /* Seen before loading: a change while loading is picked up by the next reload. */
    fingerprint(cert_path, &c->cert_seen);
    fingerprint(key_path, &c->key_seen);
    if ((c->ctx = server_ctx(cert_path, key_path, err)) == NULL) {
        ws_tls_ctx_free(c);
        return NULL;
    }
    return c;
}

int ws_tls_ctx_reload(struct ws_tls_ctx *ctx, double now, double min_interval_s,
                      struct telo_err *err)
{
    if (ctx == NULL || (ctx->checked > 0 && now - ctx->checked < min_interval_s))
        return 0;
    ctx->checked = now;
    struct stat cert, key;
    fingerprint(ctx->cert_path, &cert);
    fingerprint(ctx->key_path, &key);
    if (same_file(&cert, &ctx->cert_seen) && same_file(&key, &ctx->key_seen))
        return 0;
    /* Seen whether or not they load: a broken pair is not retried until it changes again (a
     * key written after its certificate is such a change). */
    ctx->cert_seen = cert;
    ctx->key_seen = key;
    SSL_CTX *fresh = server_ctx(ctx->cert_path, ctx->key_path, err);
    if (fresh == NULL)
        return -err->code;
    /* Connections made from the old context hold their own reference to it. */
    SSL_CTX_free(ctx->ctx);
    ctx->ctx = fresh;
    return 1;
}

void ws_tls_ctx_free(struct ws_tls_ctx *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ctx);
    free(ctx->cert_path);
    free(ctx->key_path);
    free(ctx);
}

struct ws_tls *ws_tls_new(struct ws_tls_ctx *ctx, int fd)
{
    struct ws_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ssl = SSL_new(ctx->ctx);
    if (t->ssl == NULL || SSL_set_fd(t->ssl, fd) != 1) {
        SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    SSL_set_accept_state(t->ssl);
    return t;
}

struct ws_tls *ws_tls_client_new(struct ssl_ctx_st *ctx, int fd, const char *server_name)
{
    static const unsigned char alpn[] = "\x08http/1.1";
    struct ws_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ssl = SSL_new(ctx);
    if (t->ssl == NULL || SSL_set_fd(t->ssl, fd) != 1 ||
        SSL_set_alpn_protos(t->ssl, alpn, sizeof(alpn) - 1) != 0) {
        SSL_free(t->ssl);
        free(t);
        ERR_clear_error();
        return NULL;
    }
    /* The connection's send queue moves and grows between a blocked write and its retry. */
    SSL_set_mode(t->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* A flood from the server (the attach upstream): OpenSSL reads what the socket holds, up to
     * READ_AHEAD bytes, in one read instead of a record's header and body in two. Safe with
     * ws_conn and the handshake, which call recv until it says EAGAIN (records OpenSSL holds are
     * never left waiting for a socket event). */
    SSL_set_read_ahead(t->ssl, 1);
    SSL_set_default_read_buffer_len(t->ssl, READ_AHEAD);
    ASN1_OCTET_STRING *ip = server_name != NULL ? a2i_IPADDRESS(server_name) : NULL;
    if (ip == NULL && server_name != NULL && server_name[0] != '\0')
        SSL_set_tlsext_host_name(t->ssl, server_name); /* RFC 6066: no SNI for an address */
    ASN1_OCTET_STRING_free(ip);
    ERR_clear_error();
    SSL_set_connect_state(t->ssl);
    return t;
}

const char *ws_tls_error(const struct ws_tls *t)
{
    return t->why;
}

int ws_tls_handshake(struct ws_tls *t, int *want_write)
{
    *want_write = 0;
    int rc = SSL_do_handshake(t->ssl);
    if (rc == 1)
        return 1;
    int e = SSL_get_error(t->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        *want_write = e == SSL_ERROR_WANT_WRITE;
        return 0;
    }
    note_failure(t, e);
    return -1;
}

/* Maps an SSL_read/SSL_write result to socket conventions. */
static ssize_t result(struct ws_tls *t, int rc)
{
    if (rc > 0)
        return rc;
    int e = SSL_get_error(t->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        return 0; /* close_notify: the peer's orderly end */
    }
    note_failure(t, e);
    errno = EIO;
    return -1;
}

static ssize_t tls_recv(void *io_ud, void *buf, size_t len)
{
    struct ws_tls *t = io_ud;
    return result(t, SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len));
}

static ssize_t tls_send(void *io_ud, const void *buf, size_t len)
{
    struct ws_tls *t = io_ud;
    return result(t, SSL_write(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len));
}

static void tls_close(void *io_ud)
{
    ws_tls_free(io_ud);
}

void ws_tls_io(struct ws_tls *t, struct ws_conn_io *io)
{
    io->recv = tls_recv;
    io->send = tls_send;
    io->close = tls_close;
    io->io_ud = t;
}

void ws_tls_free(struct ws_tls *t)
{
    if (t == NULL)
        return;
    /* One attempt at close_notify; a peer that left or a full socket does not get it. */
    if (SSL_is_init_finished(t->ssl))
        SSL_shutdown(t->ssl);
    ERR_clear_error();
    SSL_free(t->ssl);
    free(t);
}

/* A WebSocket client for the remote-command channel protocol (pods/attach, the gateway's attach),
 * on libwebsockets and the caller's libev loop. */
#include "kube/attach.h"

#include "kube/config.h"
#include "kube/rest.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/url.h"

#include <ev.h>
#include <libwebsockets.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_PROTOCOLS 8
#define QUEUE_MAX     ((size_t)1 << 20) /* stdin bytes waiting for the server */
#define CHUNK_MAX     32768             /* payload bytes of one stdin message */
#define STATUS_MAX    KUBE_CHANNEL_JSON_MAX
#define TOKEN_MAX     16384
#define READ_MAX      65536 /* bytes of one socket read, and of one output callback */

struct kube_attach {
    struct ev_loop *loop;
    struct kube_attach_callbacks cb;
    void *ud;

    char *url_copy; /* lws_parse_uri cuts it into the pieces below */
    char *path;     /* "/" + path and query */
    char *token;    /* bearer token, or NULL */
    char *offer;    /* "v5.channel.k8s.io,v4.channel.k8s.io" */
    char user_agent[96];
    SSL_CTX *ssl_ctx;
    lws_retry_bo_t idle_policy;

    struct lws_protocols protocols[2];
    struct lws_context *context;
    struct lws *wsi;

    int open;          /* between ESTABLISHED and the end */
    int ended;         /* on_end was called (or the handle is being freed) */
    int freed;         /* kube_attach_free was called inside a callback */
    int depth;         /* nesting of lws callbacks on the stack */
    char protocol[64]; /* the subprotocol the server chose */
    ev_timer reaper;   /* destroys the context after a free inside a callback */

    struct buf queue;   /* stdin messages: [u32 length][channel byte + payload]... */
    int resize_pending; /* the newest size waits in resize */
    struct kube_term_size resize;
    int close_pending; /* [255, 0] waits */

    int in_message;             /* a message's first bytes have arrived, not its last */
    int channel;                /* of the message being received */
    struct buf status;          /* channel 3 bytes of the message being received */
    struct kube_attach_end end; /* what on_end will report */
    struct telo_err end_err;
    unsigned char *scratch; /* LWS_PRE + 1 + CHUNK_MAX for lws_write */
};

/* ---- TLS ---- */

static int ssl_fail(struct telo_err *err, const char *what)
{
    char detail[160] = "";
    unsigned long e = ERR_get_error();
    if (e != 0)
        ERR_error_string_n(e, detail, sizeof(detail));
    ERR_clear_error();
    return telo_err_set(err, TELO_EIO, "attach TLS: %s%s%s", what, detail[0] ? ": " : "", detail);
}

static int load_ca_pem(SSL_CTX *ctx, const char *pem, size_t len, struct telo_err *err)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    STACK_OF(X509_INFO) *infos = bio ? PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (infos == NULL)
        return ssl_fail(err, "certificate-authority-data holds no PEM certificate");
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    int added = 0;
    for (int i = 0; i < sk_X509_INFO_num(infos); i++) {
        X509_INFO *info = sk_X509_INFO_value(infos, i);
        if (info->x509 != NULL && X509_STORE_add_cert(store, info->x509) == 1)
            added++;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    if (added == 0)
        return ssl_fail(err, "certificate-authority-data holds no PEM certificate");
    return 0;
}

static int load_client_pem(SSL_CTX *ctx, const char *cert_pem, const char *key_pem,
                           struct telo_err *err)
{
    BIO *bio = BIO_new_mem_buf(cert_pem, -1);
    X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    int ok = cert != NULL && SSL_CTX_use_certificate(ctx, cert) == 1;
    X509_free(cert);
    /* Intermediates after the leaf go into the chain the handshake presents. */
    while (ok) {
        X509 *extra = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        if (extra == NULL)
            break;
        if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) {
            X509_free(extra);
            ok = 0;
        }
    }
    ERR_clear_error(); /* the end of the PEM stream is reported as an error */
    BIO_free(bio);
    if (!ok)
        return ssl_fail(err, "client-certificate-data is not a usable PEM certificate");
    bio = BIO_new_mem_buf(key_pem, -1);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    ok = key != NULL && SSL_CTX_use_PrivateKey(ctx, key) == 1;
    EVP_PKEY_free(key);
    if (!ok || SSL_CTX_check_private_key(ctx) != 1)
        return ssl_fail(err, "client-key-data is not the PEM key of the client certificate");
    return 0;
}

/* The SSL_CTX for one connection to host: trust, the name to verify (a DNS name or an IP
 * address; lws's own check would treat an IP as a DNS name) and the client certificate. */
static SSL_CTX *make_ssl_ctx(const struct kube_attach_opts *opts, const char *host,
                             struct telo_err *err)
{
    struct kube_config *cfg = opts->cfg;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        ssl_fail(err, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    int insecure = opts->insecure_skip_tls_verify || (cfg && cfg->insecure_skip_tls_verify);
    if (insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int rc = 0;
        if (opts->ca_file != NULL) {
            if (SSL_CTX_load_verify_locations(ctx, opts->ca_file, NULL) != 1)
                rc = ssl_fail(err, opts->ca_file);
        } else if (cfg && cfg->ca_pem != NULL)
            rc = load_ca_pem(ctx, cfg->ca_pem, cfg->ca_pem_len, err);
        else if (cfg && cfg->ca_file != NULL &&
                 SSL_CTX_load_verify_locations(ctx, cfg->ca_file, NULL) != 1)
            rc = ssl_fail(err, cfg->ca_file);
        else if (!(cfg && (cfg->ca_pem || cfg->ca_file)) &&
                 SSL_CTX_set_default_verify_paths(ctx) != 1)
            rc = ssl_fail(err, "cannot load the system's certificate authorities");
        const char *name = cfg && cfg->tls_server_name ? cfg->tls_server_name : host;
        X509_VERIFY_PARAM *param = SSL_CTX_get0_param(ctx);
        if (rc == 0 && X509_VERIFY_PARAM_set1_ip_asc(param, name) != 1) {
            ERR_clear_error();
            X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            if (X509_VERIFY_PARAM_set1_host(param, name, 0) != 1)
                rc = ssl_fail(err, "bad server name");
        }
        if (rc != 0) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    if (cfg != NULL) {
        const char *cert_pem = NULL, *key_pem = NULL;
        int rc = kube_config_client_cert(cfg, &cert_pem, &key_pem, err);
        if (rc == 0 && cert_pem != NULL && key_pem != NULL)
            rc = load_client_pem(ctx, cert_pem, key_pem, err);
        else if (rc == 0 && cfg->client_cert_file != NULL && cfg->client_key_file != NULL) {
            if (SSL_CTX_use_certificate_chain_file(ctx, cfg->client_cert_file) != 1)
                rc = ssl_fail(err, cfg->client_cert_file);
            else if (SSL_CTX_use_PrivateKey_file(ctx, cfg->client_key_file, SSL_FILETYPE_PEM) != 1)
                rc = ssl_fail(err, cfg->client_key_file);
        }
        if (rc != 0) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    return ctx;
}

/* ---- ending and freeing ---- */

static void destroy(struct kube_attach *a)
{
    ev_timer_stop(a->loop, &a->reaper);
    if (a->context != NULL)
        lws_context_destroy(a->context);
    SSL_CTX_free(a->ssl_ctx);
    buf_release(&a->queue);
    buf_release(&a->status);
    free(a->scratch);
    free(a->url_copy);
    free(a->path);
    free(a->token);
    free(a->offer);
    free(a);
}

static void reap_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    destroy(w->data);
}

/* Reports the end once. */
static void finish(struct kube_attach *a)
{
    if (a->ended)
        return;
    a->ended = 1;
    a->open = 0;
    a->wsi = NULL;
    a->end.err = a->end.rc != 0 ? &a->end_err : NULL;
    a->cb.on_end(a, &a->end, a->ud);
}

static void fail(struct kube_attach *a, int code, const char *detail)
{
    if (a->end.rc == 0)
        a->end.rc = telo_err_set(&a->end_err, code, "attach: %s", detail);
}

/* ---- receiving ---- */

static void receive(struct kube_attach *a, struct lws *wsi, const unsigned char *in, size_t len)
{
    if (!a->in_message) {
        if (len == 0)
            return; /* lws reports an empty message's end without bytes; it has no channel */
        if (!lws_frame_is_binary(wsi)) {
            /* client-go treats a text message as a protocol error; keep the session going. */
            telo_log(TELO_LOG_DEBUG, "attach: text message dropped", "len=%zu", len);
            if (!lws_is_final_fragment(wsi)) {
                a->in_message = 1;
                a->channel = -1;
            }
            return;
        }
        a->in_message = 1;
        a->channel = in[0];
        in++;
        len--;
        buf_reset(&a->status);
    }
    if (a->channel == KUBE_CHANNEL_STDOUT || a->channel == KUBE_CHANNEL_STDERR) {
        if (len > 0) {
            a->depth++;
            a->cb.on_output(a, a->channel, in, len, a->ud);
            a->depth--;
        }
    } else if (a->channel == KUBE_CHANNEL_ERROR && buf_append(&a->status, in, len) != 0) {
        a->channel = -1; /* oversized: not a Status we could read */
    }
    if (!lws_is_final_fragment(wsi))
        return;
    a->in_message = 0;
    if (a->channel == KUBE_CHANNEL_ERROR && !a->freed) {
        struct telo_err err;
        if (kube_exit_status_parse(a->status.data, a->status.len, &a->end.exit, &err) == 0)
            a->end.have_status = 1;
        else
            telo_log(TELO_LOG_WARN, "attach: unreadable exit status", "error=\"%s\"", err.msg);
    }
}

/* ---- sending ---- */

static int queue_message(struct kube_attach *a, int channel, const void *data, size_t len)
{
    uint32_t n = (uint32_t)(len + 1);
    unsigned char c = (unsigned char)channel;
    size_t before = a->queue.len;
    if (buf_append(&a->queue, &n, sizeof(n)) != 0 || buf_append(&a->queue, &c, 1) != 0 ||
        (len > 0 && buf_append(&a->queue, data, len) != 0)) {
        buf_truncate(&a->queue, before); /* all or nothing */
        return -TELO_ETOOBIG;
    }
    return 0;
}

static int send_one(struct kube_attach *a, struct lws *wsi)
{
    unsigned char *p = a->scratch + LWS_PRE;
    size_t n;
    if (a->resize_pending) {
        struct buf b;
        buf_init(&b, 64);
        p[0] = KUBE_CHANNEL_RESIZE;
        if (kube_resize_format(&b, a->resize.width, a->resize.height) != 0) {
            buf_release(&b);
            return -1;
        }
        memcpy(p + 1, b.data, b.len);
        n = b.len + 1;
        buf_release(&b);
        a->resize_pending = 0;
    } else if (a->queue.len >= sizeof(uint32_t)) {
        uint32_t len;
        memcpy(&len, a->queue.data, sizeof(len));
        memcpy(p, a->queue.data + sizeof(len), len);
        n = len;
        buf_consume(&a->queue, sizeof(len) + len);
    } else if (a->close_pending) {
        p[0] = KUBE_CHANNEL_CLOSE;
        p[1] = KUBE_CHANNEL_STDIN;
        n = 2;
        a->close_pending = 0;
    } else {
        return 0;
    }
    if (lws_write(wsi, p, n, LWS_WRITE_BINARY) < (int)n)
        return -1;
    if (a->resize_pending || a->queue.len > 0 || a->close_pending)
        lws_callback_on_writable(wsi);
    return 0;
}

/* Sends now what waits, instead of asking lws for a writable callback: that callback costs a loop
 * turn and two epoll_ctl calls per keystroke (the socket is writable nearly always). lws takes a
 * write outside the callback when none of its own is still buffered (lws_partial_buffered), and
 * buffers a partial one itself; inside our lws callbacks (depth > 0) it is left to the callback.
 * send_one keeps the order (resize, then stdin, then close) and asks for the callback when more
 * waits; when the write fails the callback runs send_one again, and lws reports the broken
 * connection as usual. */
static void kick(struct kube_attach *a)
{
    if (a->depth == 0 && !lws_partial_buffered(a->wsi) && send_one(a, a->wsi) == 0)
        return;
    lws_callback_on_writable(a->wsi);
}

/* ---- the lws callback ---- */

static int add_headers(struct kube_attach *a, struct lws *wsi, unsigned char **p,
                       unsigned char *end)
{
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_USER_AGENT,
                                     (const unsigned char *)a->user_agent,
                                     (int)strlen(a->user_agent), p, end) != 0)
        return -1;
    if (a->token == NULL)
        return 0;
    size_t len = strlen(a->token) + sizeof("Bearer ");
    char *value = malloc(len);
    if (value == NULL)
        return -1;
    snprintf(value, len, "Bearer %s", a->token);
    int rc = lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
                                          (const unsigned char *)value, (int)strlen(value), p, end);
    OPENSSL_cleanse(value, len);
    free(value);
    return rc;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    struct kube_attach *a = ctx ? lws_context_user(ctx) : NULL;
    (void)user;
    if (a == NULL)
        return 0;
    if (a->freed)
        return -1;
    int rc = 0;
    a->depth++;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
        rc = add_headers(a, wsi, (unsigned char **)in, (unsigned char *)in + len) ? -1 : 0;
        break;
    case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH:
        /* The last moment the response headers are there: lws frees them before ESTABLISHED. */
        if (lws_hdr_copy(wsi, a->protocol, (int)sizeof(a->protocol), WSI_TOKEN_PROTOCOL) < 0)
            a->protocol[0] = '\0';
        break;
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        a->wsi = wsi;
        a->open = 1;
        if (a->cb.on_open != NULL)
            a->cb.on_open(a, a->protocol, a->ud);
        if (!a->freed && (a->resize_pending || a->queue.len > 0 || a->close_pending))
            lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        a->end.http_status = (long)lws_http_client_http_response(wsi);
        const char *why = in != NULL && len > 0 ? (const char *)in : "connection failed";
        fail(a, a->end.http_status >= 300 ? TELO_EAPI : TELO_EIO, why);
        finish(a);
        break;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE:
        receive(a, wsi, in, len);
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        rc = send_one(a, wsi);
        break;
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) {
            const unsigned char *c = in;
            a->end.close_code = (c[0] << 8) | c[1];
        }
        break;
    case LWS_CALLBACK_CLIENT_CLOSED:
        finish(a);
        break;
    case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
    case LWS_CALLBACK_WSI_DESTROY:
        /* lws can drop a connection before the upgrade without a connection error: a TLS 1.3
         * server that refuses our certificate does so after the client's half of the handshake
         * has finished. Without this the stream would wait forever. */
        if (!a->ended) {
            fail(a, TELO_EIO, "the connection closed before the WebSocket upgrade completed");
            finish(a);
        }
        break;
    default:
        break;
    }
    a->depth--;
    return a->freed ? -1 : rc;
}

/* ---- public ---- */

static int split_url(struct kube_attach *a, const char *url, const char **host, int *port, int *tls,
                     struct telo_err *err)
{
    const char *scheme = NULL, *path = NULL;
    a->url_copy = strdup(url);
    if (a->url_copy == NULL)
        return telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    if (lws_parse_uri(a->url_copy, &scheme, host, port, &path) != 0 || (*host)[0] == '\0')
        return telo_err_set(err, TELO_EINVAL, "attach: cannot parse the URL %s", url);
    if (strcasecmp(scheme, "https") == 0 || strcasecmp(scheme, "wss") == 0)
        *tls = 1;
    else if (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "ws") == 0)
        *tls = 0;
    else
        return telo_err_set(err, TELO_EINVAL,
                            "attach: URL %s: scheme must be https, wss, http or ws", url);
    size_t n = strlen(path) + 2;
    a->path = malloc(n);
    if (a->path == NULL)
        return telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    snprintf(a->path, n, "/%s", path);
    return 0;
}

static int make_offer(struct kube_attach *a, const char *const *protocols, struct telo_err *err)
{
    static const char *const defaults[] = {KUBE_CHANNEL_V5, KUBE_CHANNEL_V4, NULL};
    if (protocols == NULL || protocols[0] == NULL)
        protocols = defaults;
    struct buf b;
    buf_init(&b, 1024);
    for (int i = 0; i < MAX_PROTOCOLS && protocols[i] != NULL; i++) {
        if (buf_printf(&b, "%s%s", i ? "," : "", protocols[i]) != 0) {
            buf_release(&b);
            return telo_err_set(err, TELO_EINVAL, "attach: subprotocol list too long");
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
    buf_init(&a->queue, QUEUE_MAX + sizeof(uint32_t) + 1);
    buf_init(&a->status, STATUS_MAX);
    ev_timer_init(&a->reaper, reap_cb, 0., 0.);
    a->reaper.data = a;

    const char *host = NULL;
    int port = 0, tls = 0;
    if (split_url(a, opts->url, &host, &port, &tls, err) != 0 ||
        make_offer(a, opts->protocols, err) != 0 || take_token(a, opts, err) != 0 ||
        take_user_agent(a, opts->user_agent, err) != 0)
        goto fail;
    a->scratch = malloc(LWS_PRE + 1 + CHUNK_MAX);
    if (a->scratch == NULL) {
        telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
        goto fail;
    }
    if (tls && (a->ssl_ctx = make_ssl_ctx(opts, host, err)) == NULL)
        goto fail;

    lws_set_log_level(LLL_ERR | LLL_WARN, telo_log_lws);
    void *foreign_loops[1] = {loop};
    a->protocols[0].name = "telo-attach";
    a->protocols[0].callback = callback;
    a->protocols[0].rx_buffer_size = READ_MAX;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.options = LWS_SERVER_OPTION_LIBEV;
    if (tls)
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.foreign_loops = foreign_loops;
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = a->protocols;
    info.user = a;
    info.provided_client_ssl_ctx = a->ssl_ctx;
    /* lws reads a WebSocket into this per-thread buffer: at its default of 4 KiB a flood of
     * output costs a read and a loop turn per 4 KiB (the gateway's clients read it in 4100-byte
     * frames), and the output callback gets no more than that at a time. */
    info.pt_serv_buf_size = READ_MAX;
    a->context = lws_create_context(&info);
    if (a->context == NULL) {
        telo_err_set(err, TELO_EIO,
                     "attach: libwebsockets could not start on the libev loop (is the "
                     "libwebsockets-evlib-ev package installed?)");
        goto fail;
    }

    int ping = opts->ping_interval_s > 0 ? opts->ping_interval_s : 20;
    a->idle_policy.secs_since_valid_ping = (uint16_t)ping;
    a->idle_policy.secs_since_valid_hangup = (uint16_t)(ping * 3 + 1);

    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof(ci));
    ci.context = a->context;
    ci.address = host;
    ci.port = port;
    ci.path = a->path;
    ci.host = host;
    /* No Origin: it is what a browser sends, and servers (the gateway with --allowed-origin)
     * check it only then; client-go sends none either. */
    ci.origin = NULL;
    ci.protocol = a->offer;
    ci.local_protocol_name = a->protocols[0].name;
    ci.retry_and_idle_policy = &a->idle_policy;
    /* HTTP/1.1: the upgrade does not exist in h2 for us (RFC 8441 is not what the servers do). */
    ci.alpn = "http/1.1";
    if (tls) {
        ci.ssl_connection = LCCSCF_USE_SSL;
        /* make_ssl_ctx verifies the name (as an IP address where it is one). */
        ci.ssl_connection |= LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK;
        if (opts->insecure_skip_tls_verify || (opts->cfg && opts->cfg->insecure_skip_tls_verify))
            ci.ssl_connection |=
                LCCSCF_ALLOW_SELFSIGNED | LCCSCF_ALLOW_EXPIRED | LCCSCF_ALLOW_INSECURE;
    }
    ci.pwsi = &a->wsi;
    a->depth++;
    struct lws *wsi = lws_client_connect_via_info(&ci);
    a->depth--;
    if (wsi == NULL && !a->ended) {
        telo_err_set(err, TELO_EIO, "attach: cannot start connecting to %s:%d", host, port);
        goto fail;
    }
    if (wsi == NULL && a->ended) {
        /* Failed at once (name resolution): report it like any other failure. */
        *err = a->end_err;
        goto fail;
    }
    return a;
fail:
    a->ended = 1;
    destroy(a);
    return NULL;
}

static int writable_now(struct kube_attach *a)
{
    if (!a->open || a->freed || a->wsi == NULL)
        return -TELO_EINVAL;
    return 0;
}

int kube_attach_write(struct kube_attach *a, const void *data, size_t len)
{
    int rc = writable_now(a);
    if (rc != 0)
        return rc;
    const unsigned char *p = data;
    size_t before = a->queue.len;
    while (len > 0) {
        size_t n = len > CHUNK_MAX ? CHUNK_MAX : len;
        if (queue_message(a, KUBE_CHANNEL_STDIN, p, n) != 0) {
            buf_truncate(&a->queue, before);
            return -TELO_ETOOBIG;
        }
        p += n;
        len -= n;
    }
    kick(a);
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
    kick(a);
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
    kick(a);
    return 0;
}

const char *kube_attach_protocol(const struct kube_attach *a)
{
    return a->open || a->protocol[0] ? a->protocol : NULL;
}

size_t kube_attach_queued(const struct kube_attach *a)
{
    return a->queue.len;
}

void kube_attach_free(struct kube_attach *a)
{
    if (a == NULL)
        return;
    a->ended = 1;
    if (a->depth > 0) {
        /* lws is on the stack: tell it to close this connection (callbacks return -1 from now
         * on) and destroy the context once the loop is back in control. */
        a->freed = 1;
        if (a->wsi != NULL)
            lws_set_timeout(a->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
        ev_timer_start(a->loop, &a->reaper);
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

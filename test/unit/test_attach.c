/* Tests for pkg/kube/attach.c: the channel-protocol client against an in-process libwebsockets
 * server on the same libev loop, playing the API server's pods/attach. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include <ev.h>
#include <libwebsockets.h>
#include <openssl/ssl.h>

#include "kube/attach.h"
#include "kube/channel.h"
#include "kube/config.h"
#include "util/buf.h"

/* An output message larger than any rx buffer: arrives in pieces. */
#define BIG        ((size_t)200 * 1024)
#define BURST_MSGS 32 /* "#" asks for this many output messages of BURST_LEN, written at once */
#define BURST_LEN  2000

/* ---- the server ---- */

struct server {
    struct ev_loop *loop;
    struct lws_context *context;
    struct lws_vhost *vhost;
    int port;
    int refuse;         /* answer the upgrade with 403 */
    char auth[256];     /* the Authorization header the client sent */
    char agent[128];    /* its User-Agent */
    char protocol[64];  /* the subprotocol it negotiated */
    struct buf pending; /* messages to send: [u32 len][bytes]... */
    int close_after;    /* close once pending is empty */
    struct buf stdin_seen;
    char resize_seen[64];
    int closes_seen;     /* [255, 0] messages */
    int burst;           /* write every pending message in one writable callback */
    char client_ca[128]; /* TLS: the CA client certificates must chain to */
};

static struct server srv;

static void push(int channel, const void *data, size_t len)
{
    uint32_t n = (uint32_t)(len + 1);
    unsigned char c = (unsigned char)channel;
    buf_append(&srv.pending, &n, sizeof(n));
    buf_append(&srv.pending, &c, 1);
    if (len)
        buf_append(&srv.pending, data, len);
}

static int server_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
    switch (reason) {
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
        if (srv.client_ca[0] == '\0')
            return 0;
        if (SSL_CTX_load_verify_locations((SSL_CTX *)user, srv.client_ca, NULL) != 1)
            return 1;
        SSL_CTX_set_verify((SSL_CTX *)user, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                           NULL);
        return 0;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        if (lws_hdr_copy(wsi, srv.auth, sizeof(srv.auth), WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
            srv.auth[0] = '\0';
        if (lws_hdr_copy(wsi, srv.agent, sizeof(srv.agent), WSI_TOKEN_HTTP_USER_AGENT) < 0)
            srv.agent[0] = '\0';
        if (srv.refuse) {
            lws_return_http_status(wsi, 403, "forbidden");
            return -1;
        }
        return 0;
    case LWS_CALLBACK_ESTABLISHED:
        snprintf(srv.protocol, sizeof(srv.protocol), "%s", lws_get_protocol(wsi)->name);
        push(KUBE_CHANNEL_STDOUT, NULL, 0); /* the hello */
        lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_RECEIVE: {
        const unsigned char *p = in;
        if (len == 0)
            return 0;
        if (p[0] == KUBE_CHANNEL_STDIN) {
            buf_append(&srv.stdin_seen, p + 1, len - 1);
            if (memchr(p + 1, '#', len - 1) != NULL) {
                char msg[BURST_LEN];
                memset(msg, '#', sizeof(msg));
                for (int i = 0; i < BURST_MSGS; i++)
                    push(KUBE_CHANNEL_STDOUT, msg, sizeof(msg));
                srv.burst = 1;
            } else if (memchr(p + 1, '!', len - 1) != NULL) {
                /* "!" asks for a big message, then the end with exit code 3. */
                char *big = malloc(BIG);
                if (!big)
                    return -1; /* drops the connection: the test fails on it */
                for (size_t i = 0; i < BIG; i++)
                    big[i] = (char)('a' + i % 26);
                push(KUBE_CHANNEL_STDOUT, big, BIG);
                free(big);
                struct buf st;
                buf_init(&st, 1024);
                kube_exit_status_format(&st, 3, NULL);
                push(KUBE_CHANNEL_ERROR, st.data, st.len);
                buf_release(&st);
                srv.close_after = 1;
            } else {
                push(KUBE_CHANNEL_STDOUT, p + 1, len - 1); /* the TTY's echo */
            }
        } else if (p[0] == KUBE_CHANNEL_RESIZE) {
            snprintf(srv.resize_seen, sizeof(srv.resize_seen), "%.*s", (int)(len - 1),
                     (const char *)p + 1);
        } else if (p[0] == KUBE_CHANNEL_CLOSE && len == 2 && p[1] == 0) {
            srv.closes_seen++;
        }
        lws_callback_on_writable(wsi);
        return 0;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        while (srv.pending.len >= sizeof(uint32_t)) {
            uint32_t n;
            memcpy(&n, srv.pending.data, sizeof(n));
            unsigned char *frame = malloc(LWS_PRE + n);
            if (!frame)
                return -1;
            memcpy(frame + LWS_PRE, srv.pending.data + sizeof(n), n);
            buf_consume(&srv.pending, sizeof(n) + n);
            int wrote = lws_write(wsi, frame + LWS_PRE, n, LWS_WRITE_BINARY);
            free(frame);
            if (wrote < (int)n)
                return -1;
            if (srv.burst && srv.pending.len > 0 && !lws_send_pipe_choked(wsi))
                continue;
            lws_callback_on_writable(wsi);
            return 0;
        }
        if (srv.close_after) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
            return -1;
        }
        return 0;
    }
    default:
        return 0;
    }
}

static struct lws_protocols server_protocols[4];

/* TLS files for the server (NULL: plain); a client certificate signed by ca is required. */
struct tls_files {
    const char *cert, *key, *ca;
};

static void server_start_tls(struct ev_loop *loop, const char *const *protocols,
                             const struct tls_files *tls)
{
    lws_set_log_level(LLL_ERR | LLL_WARN, NULL);
    memset(&srv, 0, sizeof(srv));
    srv.loop = loop;
    buf_init(&srv.pending, 4u << 20);
    buf_init(&srv.stdin_seen, 1u << 20);
    memset(server_protocols, 0, sizeof(server_protocols));
    for (int i = 0; protocols[i] != NULL; i++) {
        server_protocols[i].name = protocols[i];
        server_protocols[i].callback = server_cb;
        server_protocols[i].rx_buffer_size = 4096;
    }
    void *loops[1] = {loop};
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.options = LWS_SERVER_OPTION_LIBEV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    if (tls)
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.foreign_loops = loops;
    info.port = CONTEXT_PORT_NO_LISTEN;
    srv.context = lws_create_context(&info);
    assert_non_null(srv.context);
    memset(&info, 0, sizeof(info));
    info.port = 0;
    info.iface = "127.0.0.1";
    info.protocols = server_protocols;
    if (tls) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = tls->cert;
        info.ssl_private_key_filepath = tls->key;
        /* Client certificates are required in LOAD_EXTRA_SERVER_VERIFY_CERTS: lws 4.1.6 leaks
         * an SSL_CTX with its CA store on destroy when given ssl_ca_filepath or
         * REQUIRE_VALID_OPENSSL_CLIENT_CERT (valgrind). */
        snprintf(srv.client_ca, sizeof(srv.client_ca), "%s", tls->ca);
    }
    srv.vhost = lws_create_vhost(srv.context, &info);
    assert_non_null(srv.vhost);
    srv.port = lws_get_vhost_listen_port(srv.vhost);
}

static void server_start(struct ev_loop *loop, const char *const *protocols)
{
    server_start_tls(loop, protocols, NULL);
}

static void server_stop(void)
{
    lws_context_destroy(srv.context);
    buf_release(&srv.pending);
    buf_release(&srv.stdin_seen);
}

/* ---- the client under test ---- */

struct client {
    struct ev_loop *loop;
    int opened;
    char protocol[64];
    struct buf out;
    int ended;
    struct kube_attach_end end;
    struct telo_err end_err;
    int free_in; /* 1: free the handle in on_output, 2: in on_end */
    int freed;
};

static void on_open(struct kube_attach *a, const char *protocol, void *ud)
{
    (void)a;
    struct client *c = ud;
    c->opened = 1;
    snprintf(c->protocol, sizeof(c->protocol), "%s", protocol);
}

static void on_output(struct kube_attach *a, int channel, const unsigned char *data, size_t len,
                      void *ud)
{
    (void)a;
    struct client *c = ud;
    assert_int_equal(channel, KUBE_CHANNEL_STDOUT);
    assert_false(c->freed);
    buf_append(&c->out, data, len);
    if (c->free_in == 1) {
        kube_attach_free(a);
        c->freed = 1;
    }
}

static void on_end(struct kube_attach *a, const struct kube_attach_end *end, void *ud)
{
    struct client *c = ud;
    assert_false(c->freed);
    c->ended = 1;
    if (c->free_in == 2) {
        kube_attach_free(a);
        c->freed = 1;
    }
    c->end = *end;
    if (end->err) {
        c->end_err = *end->err;
        c->end.err = &c->end_err;
    }
}

static const struct kube_attach_callbacks callbacks = {on_open, on_output, on_end};

/* Runs the loop until *flag or a 10 s budget is spent. */
static void run_until(struct ev_loop *loop, const int *flag)
{
    ev_tstamp deadline = ev_time() + 10;
    while (!*flag && ev_time() < deadline)
        ev_run(loop, EVRUN_ONCE);
    assert_true(*flag);
}

static struct kube_attach *connect_client(struct ev_loop *loop, struct client *c,
                                          const char *const *offer)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/namespaces/ns/pods/p/attach?tty=true",
             srv.port);
    memset(c, 0, sizeof(*c));
    c->loop = loop;
    buf_init(&c->out, 1u << 20);
    struct kube_attach_opts opts = {.url = url, .token = "s3cret", .protocols = offer};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    return a;
}

/* Frees what connect_client and server_start made, in the order the loop needs. */
static void client_done(struct ev_loop *loop, struct kube_attach *a, struct client *c)
{
    kube_attach_free(a);
    buf_release(&c->out);
    server_stop();
    ev_loop_destroy(loop);
}

/* A v5 attach, open, with the hello and any writable callbacks of the opening settled: what
 * follows is the test's own traffic only. */
static struct kube_attach *open_settled_v5(struct ev_loop *loop, struct client *c)
{
    static const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    struct kube_attach *a = connect_client(loop, c, NULL);
    run_until(loop, &c->opened);
    for (int i = 0; i < 20; i++)
        ev_run(loop, EVRUN_NOWAIT);
    return a;
}

static void typed_resized_and_ended_with_a_status(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, KUBE_CHANNEL_V4, NULL};
    server_start(loop, protocols);
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    assert_int_equal(kube_attach_write(a, "early", 5), -TELO_EINVAL); /* not open yet */
    run_until(loop, &c.opened);
    assert_string_equal(c.protocol, KUBE_CHANNEL_V5);
    assert_string_equal(kube_attach_protocol(a), KUBE_CHANNEL_V5);
    assert_string_equal(srv.auth, "Bearer s3cret");
    assert_string_equal(srv.agent, "telo/" TELO_VERSION); /* the audit log names the client */

    /* Two resizes before the loop turns: only the newest goes out. */
    assert_int_equal(kube_attach_resize(a, 81, 25), 0);
    assert_int_equal(kube_attach_resize(a, 80, 24), 0);
    assert_int_equal(kube_attach_resize(a, 0, 0), 0);
    assert_int_equal(kube_attach_resize(a, 70000, 2), -TELO_EINVAL);
    assert_int_equal(kube_attach_write(a, "ls\r", 3), 0);
    while (c.out.len < 3 && !c.ended)
        ev_run(loop, EVRUN_ONCE);
    assert_string_equal(c.out.data, "ls\r"); /* the hello is not output */
    assert_string_equal(srv.resize_seen, "{\"Width\":80,\"Height\":24}");

    /* A big output message arrives whole, in order, then the Status and the close. */
    buf_reset(&c.out);
    assert_int_equal(kube_attach_close_stdin(a), 0);
    assert_int_equal(kube_attach_write(a, "!", 1), 0);
    run_until(loop, &c.ended);
    assert_int_equal(srv.closes_seen, 1);
    assert_int_equal(c.out.len, BIG);
    for (size_t i = 0; i < BIG; i += 4099)
        assert_int_equal(c.out.data[i], 'a' + i % 26);
    assert_int_equal(c.end.rc, 0);
    assert_true(c.end.have_status);
    assert_int_equal(c.end.exit.code, 3);
    assert_int_equal(c.end.close_code, 1000);
    assert_int_equal(kube_attach_write(a, "late", 4), -TELO_EINVAL);
    client_done(loop, a, &c);
}

/* A keystroke is on the wire when kube_attach_write returns (no writable callback and loop turn
 * in between, which cost a keystroke's round trip two epoll_ctl calls and a wakeup): the next
 * turn of the loop is the server's read. Two resizes in a row both go out, in order: kubectl's
 * redraw nudge (size + 1, then size) needs the first to arrive. */
static void typed_bytes_leave_before_the_loop_turns(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct client c;
    struct kube_attach *a = open_settled_v5(loop, &c);
    for (int k = 0; k < 5; k++) {
        buf_reset(&srv.stdin_seen);
        assert_int_equal(kube_attach_write(a, "k", 1), 0);
        ev_run(loop, EVRUN_NOWAIT);
        assert_int_equal(srv.stdin_seen.len, 1);
        assert_int_equal(srv.stdin_seen.data[0], 'k');
    }
    assert_int_equal(kube_attach_resize(a, 81, 25), 0);
    ev_run(loop, EVRUN_NOWAIT);
    assert_string_equal(srv.resize_seen, "{\"Width\":81,\"Height\":25}");
    assert_int_equal(kube_attach_resize(a, 80, 24), 0);
    ev_run(loop, EVRUN_NOWAIT);
    assert_string_equal(srv.resize_seen, "{\"Width\":80,\"Height\":24}");
    client_done(loop, a, &c);
}

/* Output that is in the socket together is read together: a flood reaches the client (the
 * gateway's upstream, kubectl telo's terminal) in reads of up to 64 KiB, not lws's default 4 KiB,
 * which cost a read and a loop turn per 4 KiB (about 16 turns for these 64 KB). */
static void output_sent_together_is_read_in_few_turns(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct client c;
    struct kube_attach *a = open_settled_v5(loop, &c);
    assert_int_equal(kube_attach_write(a, "#", 1), 0);
    /* The server reads "#", then writes every message in one callback. */
    while (srv.pending.len == 0 && !srv.burst)
        ev_run(loop, EVRUN_ONCE);
    while (srv.pending.len > 0)
        ev_run(loop, EVRUN_ONCE);
    unsigned turns = 0;
    ev_tstamp deadline = ev_time() + 10;
    while (c.out.len < (size_t)BURST_MSGS * BURST_LEN && ev_time() < deadline) {
        ev_run(loop, EVRUN_ONCE);
        turns++;
    }
    assert_int_equal(c.out.len, (size_t)BURST_MSGS * BURST_LEN);
    for (size_t i = 0; i < c.out.len; i++)
        assert_int_equal(c.out.data[i], '#');
    assert_in_range(turns, 1, 6);
    client_done(loop, a, &c);
}

/* What the gateway does: free the handle from inside its own callbacks, mid-stream or at the
 * end; nothing is called afterwards, and the loop frees the rest (valgrind and ASan check). */
static void freed_from_its_own_callbacks(void **state)
{
    (void)state;
    for (int where = 1; where <= 2; where++) {
        struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
        const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
        server_start(loop, protocols);
        struct client c;
        struct kube_attach *a = connect_client(loop, &c, NULL);
        c.free_in = where;
        run_until(loop, &c.opened);
        assert_int_equal(kube_attach_write(a, where == 1 ? "x\r" : "!", where == 1 ? 2 : 1), 0);
        run_until(loop, &c.freed);
        ev_tstamp deadline = ev_time() + 0.5;
        while (ev_time() < deadline)
            ev_run(loop, EVRUN_NOWAIT);
        assert_int_equal(c.ended, where == 2);
        buf_release(&c.out);
        server_stop();
        ev_loop_destroy(loop);
    }
}

static void v4_when_the_server_has_no_v5(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V4, NULL};
    server_start(loop, protocols);
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.opened);
    assert_string_equal(c.protocol, KUBE_CHANNEL_V4);
    /* v4 has no close channel: closing stdin sends nothing. */
    assert_int_equal(kube_attach_close_stdin(a), 0);
    assert_int_equal(kube_attach_write(a, "x\r", 2), 0);
    while (c.out.len < 2)
        ev_run(loop, EVRUN_ONCE);
    assert_int_equal(srv.closes_seen, 0);
    /* Freeing an open stream ends it without on_end. */
    kube_attach_free(a);
    assert_false(c.ended);
    buf_release(&c.out);
    server_stop();
    ev_loop_destroy(loop);
}

static void a_refused_upgrade_reports_the_http_status(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    srv.refuse = 1;
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.ended);
    assert_false(c.opened);
    assert_int_equal(c.end.rc, -TELO_EAPI);
    assert_int_equal(c.end.http_status, 403);
    client_done(loop, a, &c);
}

static void nobody_listening_is_a_connection_error(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    int port = srv.port;
    server_stop(); /* the port is free again */
    memset(&srv, 0, sizeof(srv));
    srv.port = port;
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.ended);
    assert_int_equal(c.end.rc, -TELO_EIO);
    assert_int_equal(c.end.http_status, 0);
    assert_non_null(c.end.err);
    kube_attach_free(a);
    buf_release(&c.out);
    ev_loop_destroy(loop);
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err;
    struct kube_attach_opts opts = {.url = "ftp://example/x"};
    assert_null(kube_attach_open(loop, &opts, &callbacks, NULL, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    assert_non_null(strstr(err.msg, "scheme must be"));
    opts.url = "http://127.0.0.1:1/x";
    opts.token = "line\r\nbreak";
    assert_null(kube_attach_open(loop, &opts, &callbacks, NULL, &err));
    assert_non_null(strstr(err.msg, "line break"));
    struct kube_attach_callbacks none = {0};
    opts.token = NULL;
    assert_null(kube_attach_open(loop, &opts, &none, NULL, &err));
    kube_attach_free(NULL);
    ev_loop_destroy(loop);
}

/* ---- TLS: trust, the server's name (an IP address) and the client certificate ---- */

static char pki[64];

static const char *pki_path(const char *name)
{
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof(paths[0]), "%s/%s", pki, name);
    return p;
}

static int make_pki(void **state)
{
    (void)state;
    snprintf(pki, sizeof(pki), "/tmp/test_attach.XXXXXX");
    if (mkdtemp(pki) == NULL)
        return -1;
    char cmd[4096];
    /* A CA, a server certificate for 127.0.0.1 and one for 127.0.0.2 (a wrong name), a client
     * certificate, and a CA nobody trusts. */
    snprintf(cmd, sizeof(cmd),
             "cd %s && set -e; k() { f=$1; shift; openssl req -newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes -keyout $f.key -subj /CN=$f \"$@\" "
             "2>/dev/null; }; "
             "k ca -x509 -days 1 -out ca.crt >/dev/null; k other -x509 -days 1 -out other.crt "
             ">/dev/null; "
             "for n in srv:IP:127.0.0.1 wrong:IP:127.0.0.2 client:DNS:client; do "
             "name=${n%%%%:*}; k $name -out $name.csr >/dev/null; printf 'subjectAltName=%%s\\n' "
             "${n#*:} > $name.ext; openssl x509 -req -in $name.csr -CA ca.crt -CAkey ca.key "
             "-CAcreateserial -days 1 -extfile $name.ext -out $name.crt 2>/dev/null; done",
             pki);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_pki(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", pki);
    return system(cmd) == 0 ? 0 : -1;
}

/* A kubeconfig for https://127.0.0.1:port trusting ca (a file in pki), with the client
 * certificate when with_cert. */
static struct kube_config *tls_config(int port, const char *ca, int with_cert)
{
    const char *path = pki_path("kubeconfig");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            "clusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:%d\n"
            "    certificate-authority: %s\n"
            "contexts:\n- name: t\n  context: {cluster: t, user: u}\n"
            "users:\n- name: u\n  user: {%s%s%s%s}\n",
            port, pki_path(ca), with_cert ? "client-certificate: " : "",
            with_cert ? pki_path("client.crt") : "", with_cert ? ", client-key: " : "",
            with_cert ? pki_path("client.key") : "");
    fclose(f);
    struct kube_config_options opts = {.kubeconfig = path};
    struct kube_config *cfg = NULL;
    struct telo_err err;
    if (kube_config_load(&opts, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    return cfg;
}

/* Connects to the TLS server with cfg; returns 1 when the stream opened, 0 when it failed. */
static int tls_attach(struct ev_loop *loop, struct kube_config *cfg, int insecure)
{
    char url[128];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/api/v1/namespaces/ns/pods/p/attach", srv.port);
    struct client c;
    memset(&c, 0, sizeof(c));
    buf_init(&c.out, 1024);
    struct kube_attach_opts opts = {.url = url, .cfg = cfg, .insecure_skip_tls_verify = insecure};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, &c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    int opened = 0;
    ev_tstamp deadline = ev_time() + 10;
    while (!c.opened && !c.ended && ev_time() < deadline)
        ev_run(loop, EVRUN_ONCE);
    opened = c.opened;
    assert_true(c.opened || c.ended);
    if (!opened)
        assert_int_equal(c.end.rc, -TELO_EIO);
    kube_attach_free(a);
    buf_release(&c.out);
    return opened;
}

/* Runs a TLS server in a child process and returns its pid (*port set): lws 4.1.6 leaks a
 * server vhost's SSL_CTX and CA store once TLS clients have come and gone (valgrind shows it in
 * lws_create_vhost), which is the harness's problem, not the client's under test. */
static pid_t tls_server_process(const struct tls_files *tls, int *port)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
        const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
        server_start_tls(loop, protocols, tls);
        if (write(fds[1], &srv.port, sizeof(srv.port)) != (ssize_t)sizeof(srv.port))
            _exit(1);
        ev_run(loop, 0);
        _exit(0);
    }
    close(fds[1]);
    assert_int_equal(read(fds[0], port, sizeof(*port)), (ssize_t)sizeof(*port));
    close(fds[0]);
    return pid;
}

static void stop_process(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void tls_verifies_the_server_and_presents_the_client_certificate(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct tls_files good = {pki_path("srv.crt"), pki_path("srv.key"), pki_path("ca.crt")};
    pid_t server = tls_server_process(&good, &srv.port);

    struct kube_config *trusted = tls_config(srv.port, "ca.crt", 1);
    assert_true(tls_attach(loop, trusted, 0));
    kube_config_free(trusted);

    /* A CA that did not sign the server's certificate: refused, unless told not to verify. */
    struct kube_config *untrusted = tls_config(srv.port, "other.crt", 1);
    assert_false(tls_attach(loop, untrusted, 0));
    assert_true(tls_attach(loop, untrusted, 1));
    kube_config_free(untrusted);

    /* The server wants a client certificate. */
    struct kube_config *anonymous = tls_config(srv.port, "ca.crt", 0);
    assert_false(tls_attach(loop, anonymous, 0));
    kube_config_free(anonymous);
    stop_process(server);

    /* A certificate the right CA signed for another address: the name check refuses it. */
    struct tls_files wrong = {pki_path("wrong.crt"), pki_path("wrong.key"), pki_path("ca.crt")};
    server = tls_server_process(&wrong, &srv.port);
    struct kube_config *cfg = tls_config(srv.port, "ca.crt", 1);
    assert_false(tls_attach(loop, cfg, 0));
    kube_config_free(cfg);
    stop_process(server);
    ev_loop_destroy(loop);
}

static void pod_attach_url_is_escaped_and_asks_for_a_tty(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(
        kube_attach_pod_url("https://127.0.0.1:6443", "ns", "p/1", "session", &b, NULL), 0);
    assert_string_equal(b.data, "https://127.0.0.1:6443/api/v1/namespaces/ns/pods/p%2F1/attach"
                                "?container=session&stdin=true&stdout=true&stderr=false&tty=true");
    buf_release(&b);
    struct telo_err err = {0};
    buf_init(&b, 4096);
    assert_int_equal(kube_attach_pod_url("https://h", "ns", NULL, "session", &b, &err),
                     -TELO_EINVAL); /* no pod: kube_ref_path refuses a subresource without one */
    assert_true(err.msg[0] != '\0');
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pod_attach_url_is_escaped_and_asks_for_a_tty),
        cmocka_unit_test(typed_resized_and_ended_with_a_status),
        cmocka_unit_test(typed_bytes_leave_before_the_loop_turns),
        cmocka_unit_test(output_sent_together_is_read_in_few_turns),
        cmocka_unit_test(freed_from_its_own_callbacks),
        cmocka_unit_test(v4_when_the_server_has_no_v5),
        cmocka_unit_test(a_refused_upgrade_reports_the_http_status),
        cmocka_unit_test(nobody_listening_is_a_connection_error),
        cmocka_unit_test(bad_options_are_refused),
        cmocka_unit_test_setup_teardown(tls_verifies_the_server_and_presents_the_client_certificate,
                                        make_pki, remove_pki),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

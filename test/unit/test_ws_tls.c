/* Tests for pkg/ws/tls.c: the server context's certificate reload (ws_tls_ctx_reload), with real
 * handshakes over a socket pair that show which certificate is served. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ws/tls.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char dir[64];

static const char *path(const char *name)
{
    static char paths[4][128];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof(paths[0]), "%s/%s", dir, name);
    return p;
}

/* Two self-signed pairs, CN=first and CN=second, and the served pair tls.crt/tls.key (first). */
static int make_certs(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_ws_tls.XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd %s && set -e; for n in first second; do openssl req -x509 -newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=$n -keyout $n.key -out "
             "$n.crt >/dev/null 2>&1; done; cp first.crt tls.crt; cp first.key tls.key",
             dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_certs(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Replaces dst by a copy of src written beside it and renamed over it (a new inode, as a Secret
 * volume's symlink swap gives). */
static void replace(const char *src, const char *dst)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s.new' && mv '%s.new' '%s'", path(src), path(dst),
             path(dst), path(dst));
    assert_int_equal(system(cmd), 0);
}

/* The CN of the certificate a TLS client is served by ctx, over a socket pair. */
static void served_cn(struct ws_tls_ctx *ctx, char *cn, size_t cnlen)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    for (int i = 0; i < 2; i++)
        fcntl(sv[i], F_SETFL, fcntl(sv[i], F_GETFL) | O_NONBLOCK);
    struct ws_tls *server = ws_tls_new(ctx, sv[0]);
    assert_non_null(server);
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(cctx);
    SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
    SSL *client = SSL_new(cctx);
    assert_non_null(client);
    SSL_set_fd(client, sv[1]);
    SSL_set_connect_state(client);
    int server_done = 0, client_done = 0;
    for (int i = 0; i < 1000 && !(server_done && client_done); i++) {
        if (!client_done) {
            int rc = SSL_do_handshake(client);
            if (rc == 1)
                client_done = 1;
            else
                assert_true(SSL_get_error(client, rc) == SSL_ERROR_WANT_READ ||
                            SSL_get_error(client, rc) == SSL_ERROR_WANT_WRITE);
        }
        if (!server_done) {
            int want_write = 0;
            int rc = ws_tls_handshake(server, &want_write);
            assert_true(rc >= 0);
            server_done = rc == 1;
        }
    }
    assert_true(server_done && client_done);
    X509 *peer = SSL_get1_peer_certificate(client);
    assert_non_null(peer);
    cn[0] = '\0';
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, (int)cnlen);
    X509_free(peer);
    SSL_free(client);
    SSL_CTX_free(cctx);
    ws_tls_free(server);
    close(sv[0]);
    close(sv[1]);
    ERR_clear_error();
}

static void a_renewed_certificate_is_served_without_a_restart(void **state)
{
    (void)state;
    struct telo_err err;
    struct ws_tls_ctx *ctx = ws_tls_ctx_new(path("tls.crt"), path("tls.key"), &err);
    if (ctx == NULL)
        fail_msg("%s", err.msg);
    char cn[64];
    served_cn(ctx, cn, sizeof(cn));
    assert_string_equal(cn, "first");
    /* Nothing changed: nothing is loaded. */
    assert_int_equal(ws_tls_ctx_reload(ctx, 100.0, 1.0, &err), 0);

    /* The pair is swapped; a check within the interval does not look yet, the next one does. */
    replace("second.crt", "tls.crt");
    replace("second.key", "tls.key");
    assert_int_equal(ws_tls_ctx_reload(ctx, 100.5, 1.0, &err), 0);
    served_cn(ctx, cn, sizeof(cn));
    assert_string_equal(cn, "first");
    assert_int_equal(ws_tls_ctx_reload(ctx, 101.5, 1.0, &err), 1);
    served_cn(ctx, cn, sizeof(cn));
    assert_string_equal(cn, "second");
    assert_int_equal(ws_tls_ctx_reload(ctx, 103.0, 1.0, &err), 0);
    ws_tls_ctx_free(ctx);
}

/* A certificate written before its key: the mismatched pair is refused and the previous
 * certificate stays in use; the key's arrival is a change, and the pair loads then. */
static void a_half_written_pair_keeps_the_old_certificate_until_complete(void **state)
{
    (void)state;
    struct telo_err err;
    replace("first.crt", "tls.crt");
    replace("first.key", "tls.key");
    struct ws_tls_ctx *ctx = ws_tls_ctx_new(path("tls.crt"), path("tls.key"), &err);
    if (ctx == NULL)
        fail_msg("%s", err.msg);
    replace("second.crt", "tls.crt");
    assert_int_equal(ws_tls_ctx_reload(ctx, 10.0, 1.0, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "tls.key"));
    char cn[64];
    served_cn(ctx, cn, sizeof(cn));
    assert_string_equal(cn, "first");
    /* Not retried while unchanged. */
    assert_int_equal(ws_tls_ctx_reload(ctx, 12.0, 1.0, &err), 0);
    replace("second.key", "tls.key");
    assert_int_equal(ws_tls_ctx_reload(ctx, 14.0, 1.0, &err), 1);
    served_cn(ctx, cn, sizeof(cn));
    assert_string_equal(cn, "second");
    ws_tls_ctx_free(ctx);
    /* NULL is no context to reload. */
    assert_int_equal(ws_tls_ctx_reload(NULL, 1.0, 1.0, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_renewed_certificate_is_served_without_a_restart,
                                        make_certs, remove_certs),
        cmocka_unit_test_setup_teardown(
            a_half_written_pair_keeps_the_old_certificate_until_complete, make_certs, remove_certs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

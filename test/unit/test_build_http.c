/* Tests for pkg/imagebuild/http.c: the address policy of tenant URLs (CIDRs, the refused classes),
 * enforced on the address actually connected to, redirects included, and summaries that carry
 * no remote text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/http.h"
#include "mock_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdio.h>
#include <string.h>

static int allowed(const char *addr, const struct build_cidr *allow, size_t n, char *why,
                   size_t len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else
        fail_msg("bad test address %s", addr);
    why[0] = '\0';
    return build_address_allowed((struct sockaddr *)&ss, allow, n, why, len);
}

static void cidrs(void **state)
{
    (void)state;
    struct build_cidr c;
    struct telo_err err;
    assert_int_equal(build_cidr_parse("10.0.0.0/8", &c, &err), 0);
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix, 8);
    assert_int_equal(build_cidr_parse("fd00::/8", &c, &err), 0);
    assert_int_equal(c.family, AF_INET6);
    assert_int_equal(build_cidr_parse("127.0.0.1", &c, &err), 0);
    assert_int_equal(c.prefix, 32);
    assert_int_equal(build_cidr_parse("10.0.0.0/33", &c, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "\"10.0.0.0/33\": the prefix length must be 0 to 32");
    assert_int_equal(build_cidr_parse("10.0.0.0/", &c, &err), -TELO_EINVAL);
    assert_int_equal(build_cidr_parse("10.0.0.0/8x", &c, &err), -TELO_EINVAL);
    assert_int_equal(build_cidr_parse("example.com/8", &c, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "\"example.com/8\" is not a CIDR (e.g. 10.0.0.0/8)");
    assert_int_equal(build_cidr_parse("", &c, &err), -TELO_EINVAL);
}

static void refused_classes(void **state)
{
    (void)state;
    static const struct {
        const char *addr, *why;
    } refused[] = {
        {"127.0.0.1", "the address 127.0.0.1 is loopback"},
        {"127.255.0.9", "the address 127.255.0.9 is loopback"},
        {"169.254.169.254",
         "the address 169.254.169.254 is the cloud metadata service (link-local)"},
        {"169.254.1.1", "the address 169.254.1.1 is link-local"},
        {"10.1.2.3", "the address 10.1.2.3 is private (RFC 1918)"},
        {"172.16.0.1", "the address 172.16.0.1 is private (RFC 1918)"},
        {"172.31.255.255", "the address 172.31.255.255 is private (RFC 1918)"},
        {"192.168.1.1", "the address 192.168.1.1 is private (RFC 1918)"},
        {"100.64.0.1", "the address 100.64.0.1 is carrier-grade NAT (shared, RFC 6598)"},
        {"100.127.255.254", "the address 100.127.255.254 is carrier-grade NAT (shared, RFC 6598)"},
        {"0.0.0.0", "the address 0.0.0.0 is \"this network\" (0.0.0.0/8)"},
        {"224.0.0.1", "the address 224.0.0.1 is multicast"},
        {"255.255.255.255", "the address 255.255.255.255 is reserved (240.0.0.0/4, broadcast)"},
        {"::1", "the address ::1 is loopback"},
        {"::", "the address :: is unspecified"},
        {"fe80::1", "the address fe80::1 is link-local"},
        {"fc00::1", "the address fc00::1 is private (unique local)"},
        {"fd12:3456::1", "the address fd12:3456::1 is private (unique local)"},
        {"ff02::1", "the address ff02::1 is multicast"},
        {"::ffff:127.0.0.1", "the address ::ffff:127.0.0.1 is loopback"},
        {"::ffff:169.254.169.254",
         "the address ::ffff:169.254.169.254 is the cloud metadata service (link-local)"},
        {"64:ff9b::a00:1", "the address 64:ff9b::a00:1 is private (RFC 1918)"},
    };
    char why[160];
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        if (allowed(refused[i].addr, NULL, 0, why, sizeof(why)))
            fail_msg("%s was allowed", refused[i].addr);
        assert_string_equal(why, refused[i].why);
    }
    static const char *const public[] = {"8.8.8.8",         "172.32.0.1",    "172.15.255.255",
                                         "100.128.0.1",     "192.169.0.1",   "1.1.1.1",
                                         "2606:4700::1111", "::ffff:8.8.8.8"};
    for (size_t i = 0; i < sizeof(public) / sizeof(public[0]); i++)
        if (!allowed(public[i], NULL, 0, why, sizeof(why)))
            fail_msg("%s was refused: %s", public[i], why);

    /* bundle.allowedUrlCidrs opens exactly its networks. */
    struct build_cidr allow[2];
    struct telo_err err;
    assert_int_equal(build_cidr_parse("127.0.0.0/8", &allow[0], &err), 0);
    assert_int_equal(build_cidr_parse("fd00::/8", &allow[1], &err), 0);
    assert_true(allowed("127.0.0.1", allow, 2, why, sizeof(why)));
    assert_true(allowed("::ffff:127.0.0.1", allow, 2, why, sizeof(why)));
    assert_true(allowed("fd12::1", allow, 2, why, sizeof(why)));
    assert_false(allowed("fc00::1", allow, 2, why, sizeof(why)));
    assert_false(allowed("::1", allow, 2, why, sizeof(why)));
    assert_false(allowed("169.254.169.254", allow, 2, why, sizeof(why)));
}

/* ---- the policy on real connections ---- */

struct result {
    int called;
    int rc, refused;
    long code;
    char summary[256];
    char msg[512];
};

static void on_done(struct build_http_call *call, const struct build_http_response *resp, void *ud)
{
    (void)call;
    struct result *r = ud;
    r->called++;
    r->rc = resp->rc;
    r->refused = resp->refused;
    r->code = resp->code;
    snprintf(r->summary, sizeof(r->summary), "%s", resp->summary ? resp->summary : "");
    snprintf(r->msg, sizeof(r->msg), "%s", resp->rc != 0 ? resp->err->msg : "");
}

static void get(const char *url, const struct build_cidr *allow, size_t nallow, struct result *r)
{
    memset(r, 0, sizeof(*r));
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err;
    struct build_http *h = build_http_new(loop, &err);
    assert_non_null(h);
    struct build_http_request req = {.method = "GET",
                                     .url = url,
                                     .timeout_ms = 3000,
                                     .restrict_addresses = 1,
                                     .allow = allow,
                                     .nallow = nallow,
                                     .follow_redirects = 1};
    assert_non_null(build_http_submit(h, &req, on_done, r, &err));
    for (int i = 0; i < 2000 && r->called == 0; i++)
        ev_run(loop, EVRUN_ONCE);
    assert_int_equal(r->called, 1);
    build_http_free(h);
    ev_loop_destroy(loop);
}

/* A listener that never accepts: a connection attempt would sit in its backlog. */
static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 8), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static int pending_connection(int lfd)
{
    int c = accept(lfd, NULL, NULL);
    if (c >= 0) {
        close(c);
        return 1;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
}

static void refused_before_connecting(void **state)
{
    (void)state;
    int port;
    int lfd = listener(&port);
    char url[128];
    struct result r;
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/app.tgz", port);
    get(url, NULL, 0, &r);
    assert_int_not_equal(r.rc, 0);
    assert_int_equal(r.refused, 1);
    assert_string_equal(r.summary, "refused: the address 127.0.0.1 is loopback");
    /* The same through a name: localhost resolves to loopback, which is what is checked. */
    snprintf(url, sizeof(url), "http://localhost:%d/app.tgz", port);
    get(url, NULL, 0, &r);
    assert_int_equal(r.refused, 1);
    assert_non_null(strstr(r.summary, "is loopback"));
    assert_int_equal(pending_connection(lfd), 0);

    /* Allowed by a CIDR, the same URL connects (and the listener sees it). */
    struct build_cidr allow;
    struct telo_err err;
    assert_int_equal(build_cidr_parse("127.0.0.1/32", &allow, &err), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/app.tgz", port);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct build_http *h = build_http_new(loop, &err);
    struct build_http_request req = {.method = "GET",
                                     .url = url,
                                     .timeout_ms = 300,
                                     .restrict_addresses = 1,
                                     .allow = &allow,
                                     .nallow = 1};
    memset(&r, 0, sizeof(r));
    assert_non_null(build_http_submit(h, &req, on_done, &r, &err));
    for (int i = 0; i < 2000 && r.called == 0; i++)
        ev_run(loop, EVRUN_ONCE);
    assert_int_equal(r.refused, 0);
    assert_string_equal(r.summary, "timed out");
    assert_int_equal(pending_connection(lfd), 1);
    build_http_free(h);
    ev_loop_destroy(loop);
    close(lfd);
}

static void route(int fd, const struct mock_req *r)
{
    char extra[256];
    if (strcmp(r->path, "/to-other-loopback") == 0) {
        struct sockaddr_in self;
        socklen_t slen = sizeof(self);
        getsockname(fd, (struct sockaddr *)&self, &slen);
        snprintf(extra, sizeof(extra), "Location: http://127.0.0.2:%d/x\r\n", ntohs(self.sin_port));
        mock_reply(fd, 302, extra, NULL);
    } else if (strcmp(r->path, "/missing") == 0) {
        mock_reply(fd, 404, NULL, "remote text that must not reach a status");
    } else {
        mock_reply(fd, 200, NULL, "ok");
    }
}

static void redirects_are_checked_too(void **state)
{
    (void)state;
    struct mock_server m = {0};
    assert_int_equal(mock_start(&m, route), 0);
    struct build_cidr allow;
    struct telo_err err;
    assert_int_equal(build_cidr_parse("127.0.0.1/32", &allow, &err), 0);
    char url[128];
    struct result r;
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok", m.port);
    get(url, &allow, 1, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.code, 200);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/missing", m.port);
    get(url, &allow, 1, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.code, 404);
    /* Allowed first hop, refused second: 127.0.0.2 is loopback outside 127.0.0.1/32. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/to-other-loopback", m.port);
    get(url, &allow, 1, &r);
    assert_int_equal(r.refused, 1);
    assert_string_equal(r.summary, "refused: the address 127.0.0.2 is loopback");
    mock_stop(&m);
}

int main(void)
{
    (void)mock_kubeconfig;
    (void)mock_stream_start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cidrs),
        cmocka_unit_test(refused_classes),
        cmocka_unit_test(refused_before_connecting),
        cmocka_unit_test(redirects_are_checked_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/imagebuild/http.c: the address policy of tenant URLs (CIDRs, the refused classes,
 * the deny list), enforced on the address actually connected to, redirects included and never
 * through a proxy from the environment, and summaries that carry no remote text; and a name that
 * resolves slowly does not stall the loop. */
#define _GNU_SOURCE /* unshare, struct ifreq */
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
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* build_address_allowed for addr (text) on port under p. */
static int allowed_under(const char *addr, unsigned port, const struct build_address_policy *p,
                         struct build_refusal *r)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
    } else {
        fail_msg("bad test address %s", addr);
    }
    memset(r, 0, sizeof(*r));
    return build_address_allowed((struct sockaddr *)&ss, p, r);
}

/* Whether addr is allowed with only an allow list (n entries); why (len bytes) says why not. */
static int allowed(const char *addr, const struct build_cidr *allow, size_t n, char *why,
                   size_t len)
{
    struct build_address_policy p = {.allow = allow, .nallow = n};
    struct build_refusal r;
    int ok = allowed_under(addr, 0, &p, &r);
    snprintf(why, len, "%s", r.why);
    return ok;
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
        {"192.0.0.170", "the address 192.0.0.170 is IETF protocol assignments (192.0.0.0/24)"},
        {"198.18.0.1", "the address 198.18.0.1 is benchmarking (198.18.0.0/15)"},
        {"198.19.255.255", "the address 198.19.255.255 is benchmarking (198.18.0.0/15)"},
        /* IPv6 forms that carry the metadata service's address. */
        {"::a9fe:a9fe", "the address ::169.254.169.254 is IPv4-compatible (deprecated, ::/96)"},
        {"::8.8.8.8", "the address ::8.8.8.8 is IPv4-compatible (deprecated, ::/96)"},
        {"::ffff:0:a9fe:a9fe",
         "the address ::ffff:0:a9fe:a9fe is IPv4-translated (SIIT, ::ffff:0:0:0/96)"},
        {"64:ff9b:1::a9fe:a9fe",
         "the address 64:ff9b:1::a9fe:a9fe is local-use NAT64 (64:ff9b:1::/48)"},
        {"2002:a9fe:a9fe::1", "the address 2002:a9fe:a9fe::1 is 6to4 (2002::/16)"},
        {"2001:0:a9fe:a9fe::1", "the address 2001:0:a9fe:a9fe::1 is Teredo (2001::/32)"},
    };
    char why[160];
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        if (allowed(refused[i].addr, NULL, 0, why, sizeof(why)))
            fail_msg("%s was allowed", refused[i].addr);
        assert_string_equal(why, refused[i].why);
    }
    static const char *const public[] = {"8.8.8.8",         "172.32.0.1",          "172.15.255.255",
                                         "100.128.0.1",     "192.169.0.1",         "1.1.1.1",
                                         "2606:4700::1111", "::ffff:8.8.8.8",      "192.0.1.1",
                                         "198.20.0.1",      "2001:4860:4860::8888"};
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

/* bundle.deniedUrlCidrs and the API server: refused before the allow list is looked at. */
static void denied_networks(void **state)
{
    (void)state;
    struct build_denied deny[2];
    struct build_cidr allow;
    struct telo_err err;
    assert_int_equal(build_cidr_parse("34.118.224.0/20", &deny[0].net, &err), 0);
    deny[0].port = 0;
    deny[0].what = "in bundle.deniedUrlCidrs";
    assert_int_equal(build_cidr_parse("34.0.0.0/8", &allow, &err), 0);
    assert_int_equal(
        build_url_denied("https://104.154.0.1:443", "the Kubernetes API server", &deny[1]), 1);
    struct build_address_policy p = {.deny = deny, .ndeny = 2, .allow = &allow, .nallow = 1};
    struct build_refusal r;
    assert_false(allowed_under("34.118.230.5", 443, &p, &r));
    assert_string_equal(r.why, "the address 34.118.230.5 is in bundle.deniedUrlCidrs");
    assert_int_equal(r.denied, 1);
    assert_false(allowed_under("::ffff:34.118.224.1", 80, &p, &r));
    assert_int_equal(r.denied, 1);
    assert_true(allowed_under("34.118.240.1", 443, &p, &r));
    assert_true(allowed_under("35.1.2.3", 443, &p, &r));
    /* The API server on its port; the same address on another port is judged like any. */
    assert_false(allowed_under("104.154.0.1", 443, &p, &r));
    assert_string_equal(r.why, "the address 104.154.0.1 is the Kubernetes API server");
    assert_int_equal(r.denied, 1);
    assert_true(allowed_under("104.154.0.1", 80, &p, &r));
    /* Refused by class, not denied: the allow list could open it. */
    assert_false(allowed_under("10.0.0.1", 443, &p, &r));
    assert_int_equal(r.denied, 0);

    /* The endpoint of a server URL: the scheme's port when none is written; names are not. */
    struct build_denied d;
    assert_int_equal(build_url_denied("https://[fd00::1]:6443/", "api", &d), 1);
    assert_int_equal(d.net.family, AF_INET6);
    assert_int_equal(d.net.prefix, 128);
    assert_int_equal(d.port, 6443);
    assert_string_equal(d.what, "api");
    assert_int_equal(build_url_denied("https://10.96.0.1", "api", &d), 1);
    assert_int_equal(d.net.prefix, 32);
    assert_int_equal(d.port, 443);
    assert_int_equal(build_url_denied("https://kubernetes.default.svc:443", "api", &d), 0);
    assert_int_equal(build_url_denied("not a url", "api", &d), 0);
}

/* ---- the policy on real connections ---- */

struct result {
    int called;
    int rc, refused;
    long code;
    char summary[256];
    char msg[512];
    char body[64];
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
    snprintf(r->body, sizeof(r->body), "%.*s", (int)resp->body->len,
             resp->body->data != NULL ? resp->body->data : "");
}

static void get(const char *url, const struct build_cidr *allow, size_t nallow, struct result *r)
{
    struct build_address_policy policy = {.allow = allow, .nallow = nallow};
    memset(r, 0, sizeof(*r));
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err;
    struct build_http *h = build_http_new(loop, &err);
    assert_non_null(h);
    struct build_http_request req = {.method = "GET",
                                     .url = url,
                                     .timeout_ms = 3000,
                                     .restrict_addresses = 1,
                                     .policy = &policy,
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
    struct build_address_policy policy = {.allow = &allow, .nallow = 1};
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct build_http *h = build_http_new(loop, &err);
    struct build_http_request req = {
        .method = "GET", .url = url, .timeout_ms = 300, .restrict_addresses = 1, .policy = &policy};
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
        struct sockaddr_in self = {0};
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

/* A forward proxy: answers every proxied request (absolute-form target) itself, and says on
 * /proxied how many it has answered. */
static void proxy_route(int fd, const struct mock_req *r)
{
    static int proxied;
    char count[16];
    if (strcmp(r->path, "/proxied") == 0) {
        snprintf(count, sizeof(count), "%d", proxied);
        mock_reply(fd, 200, NULL, count);
    } else {
        proxied++;
        mock_reply(fd, 200, NULL, "from the proxy");
    }
}

/* Sets (value) or unsets (NULL) the environment variable name; returns its previous value
 * (malloc'd, or NULL when it was unset) for env_restore. */
static char *env_swap(const char *name, const char *value)
{
    const char *was = getenv(name);
    char *saved = was != NULL ? strdup(was) : NULL;
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
    return saved;
}

static void env_restore(const char *name, char *saved)
{
    if (saved != NULL)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

/* With a proxy from the environment, curl connects to the proxy, so the policy would judge the
 * proxy's address and the proxy would fetch any destination for us: a tenant's URL must ignore
 * http_proxy and its kin and connect, checked, to the destination itself. */
static void environment_proxy_is_not_used(void **state)
{
    (void)state;
    struct mock_server m = {0};
    assert_int_equal(mock_start(&m, proxy_route), 0);
    char proxy[64];
    snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", m.port);
    static const char *const names[] = {"http_proxy", "no_proxy", "NO_PROXY"};
    char *saved[3];
    for (size_t i = 0; i < 3; i++)
        saved[i] = env_swap(names[i], i == 0 ? proxy : NULL);
    struct build_cidr allow;
    struct telo_err err;
    assert_int_equal(build_cidr_parse("127.0.0.1/32", &allow, &err), 0);
    struct result r;
    get("http://169.254.169.254/x", &allow, 1, &r);
    for (size_t i = 0; i < 3; i++)
        env_restore(names[i], saved[i]);
    assert_int_equal(r.code, 0);
    assert_int_equal(r.refused, 1);
    assert_string_equal(
        r.summary,
        "refused: the address 169.254.169.254 is the cloud metadata service (link-local)");
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/proxied", m.port);
    get(url, &allow, 1, &r);
    assert_int_equal(r.code, 200);
    assert_string_equal(r.body, "0");
    mock_stop(&m);
}

/* ---- a name that resolves slowly ---- */

struct ticks {
    double last, largest_gap;
};

static void tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct ticks *t = w->data;
    double now = ev_time();
    if (now - t->last > t->largest_gap)
        t->largest_gap = now - t->last;
    t->last = now;
}

/* Answers the queries waiting on dns with NXDOMAIN, then waits (up to 5 s) for this process to be
 * its only thread: curl's resolver thread, left to finish alone, would otherwise still hold its
 * memory when valgrind looks for leaks at exit. */
static void let_resolver_finish(int dns)
{
    unsigned char q[512];
    struct sockaddr_in from;
    socklen_t flen = sizeof(from);
    ssize_t n;
    while ((n = recvfrom(dns, q, sizeof(q), MSG_DONTWAIT, (struct sockaddr *)&from, &flen)) >= 12) {
        q[2] |= 0x80;                     /* QR: a response */
        q[3] = (unsigned char)(0x80 | 3); /* RA, RCODE 3: no such name */
        sendto(dns, q, (size_t)n, 0, (struct sockaddr *)&from, flen);
        flen = sizeof(from);
    }
    for (int i = 0; i < 500; i++) {
        struct stat st;
        if (stat("/proc/self/task", &st) == 0 && st.st_nlink <= 3)
            return;
        usleep(10000);
    }
}

/* Writes text to path, or returns -1. */
static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
}

/* In a network and mount namespace of its own, where names are looked up only through a DNS
 * server on 127.0.0.1:53 that never answers (glibc gives up after 3 s): a GET of such a name
 * with a 500 ms timeout, while a 50 ms timer ticks. Writes "gap SECONDS" (the largest gap between
 * ticks), "skip WHY" or "fail WHY" to fd; returns the exit status. */
static int slow_name_child(int fd, const char *dir)
{
    char resolv[128], nsswitch[128];
    snprintf(resolv, sizeof(resolv), "%s/resolv.conf", dir);
    snprintf(nsswitch, sizeof(nsswitch), "%s/nsswitch.conf", dir);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0) {
        dprintf(fd, "skip unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWNET): %s", strerror(errno));
        return 0;
    }
    /* Private mounts, so the bind mounts below never reach the host's /etc. The kernel ignores
     * the type of these; valgrind wants it readable. */
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(resolv, "/etc/resolv.conf", "none", MS_BIND, NULL) != 0 ||
        mount(nsswitch, "/etc/nsswitch.conf", "none", MS_BIND, NULL) != 0) {
        dprintf(fd, "skip mount: %s", strerror(errno));
        return 0;
    }
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    int ifd = socket(AF_INET, SOCK_DGRAM, 0);
    if (ifd < 0 || ioctl(ifd, SIOCGIFFLAGS, &ifr) != 0) {
        dprintf(fd, "fail lo: %s", strerror(errno));
        return 1;
    }
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(ifd, SIOCSIFFLAGS, &ifr) != 0) {
        dprintf(fd, "fail lo up: %s", strerror(errno));
        return 1;
    }
    int dns = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (dns < 0 || bind(dns, (struct sockaddr *)&a, sizeof(a)) != 0) {
        dprintf(fd, "fail a DNS socket on 127.0.0.1:53: %s", strerror(errno));
        return 1;
    }

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err;
    struct build_http *h = build_http_new(loop, &err);
    if (h == NULL) {
        dprintf(fd, "fail %s", err.msg);
        return 1;
    }
    struct result r = {0};
    struct build_http_request req = {
        .method = "GET", .url = "http://x.slow.test/", .timeout_ms = 500, .restrict_addresses = 1};
    if (build_http_submit(h, &req, on_done, &r, &err) == NULL) {
        dprintf(fd, "fail %s", err.msg);
        return 1;
    }
    struct ticks t = {.last = ev_time()};
    ev_timer timer;
    ev_timer_init(&timer, tick, 0.05, 0.05);
    timer.data = &t;
    ev_timer_start(loop, &timer);
    double until = ev_time() + 6;
    while (r.called == 0 && ev_time() < until)
        ev_run(loop, EVRUN_ONCE);
    /* One more tick after the answer: a stall inside the timeout's handling shows here. */
    ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &timer);
    if (r.called == 0) {
        dprintf(fd, "fail no answer in 6 s");
        return 1;
    }
    dprintf(fd, "gap %.3f %s", t.largest_gap, r.summary);
    build_http_free(h);
    ev_loop_destroy(loop);
    let_resolver_finish(dns);
    return 0;
}

/* curl's threaded resolver: a transfer that times out while the name is still being resolved
 * waited, in curl_multi_socket_action, for getaddrinfo to return (curl issues #2975, #4852,
 * #8515), so a tenant's URL under a slow-answering domain stalled the operator's only loop for
 * the resolver's whole timeout; CURLOPT_QUICK_EXIT leaves the thread to finish alone. */
static void slow_name_does_not_stall_the_loop(void **state)
{
    (void)state;
    char dir[64], path[128];
    snprintf(dir, sizeof(dir), "/tmp/telo-test-build-http-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/resolv.conf", dir);
    assert_int_equal(write_file(path, "nameserver 127.0.0.1\noptions timeout:3 attempts:1\n"), 0);
    snprintf(path, sizeof(path), "%s/nsswitch.conf", dir);
    assert_int_equal(write_file(path, "hosts: dns\n"), 0);
    int out[2];
    assert_int_equal(pipe(out), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(out[0]);
        alarm(20);
        _exit(slow_name_child(out[1], dir));
    }
    close(out[1]);
    char said[512] = "";
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(said) - 1 && (n = read(out[0], said + len, sizeof(said) - 1 - len)) > 0)
        len += (size_t)n;
    said[len] = '\0';
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    snprintf(path, sizeof(path), "%s/resolv.conf", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/nsswitch.conf", dir);
    unlink(path);
    rmdir(dir);
    if (strncmp(said, "skip ", 5) == 0) {
        print_message("skipped: %s\n", said + 5);
        skip();
    }
    double gap = 0;
    char summary[64] = "";
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        sscanf(said, "gap %lf %63[^\n]", &gap, summary) < 1)
        fail_msg("the child said \"%s\" (wait status %d)", said, status);
    print_message("largest gap between 50 ms ticks: %.3f s (%s)\n", gap, summary);
    assert_true(gap < 0.3);
}

int main(void)
{
    (void)mock_kubeconfig;
    (void)mock_stream_start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cidrs),
        cmocka_unit_test(refused_classes),
        cmocka_unit_test(denied_networks),
        cmocka_unit_test(refused_before_connecting),
        cmocka_unit_test(redirects_are_checked_too),
        cmocka_unit_test(environment_proxy_is_not_used),
        cmocka_unit_test(slow_name_does_not_stall_the_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

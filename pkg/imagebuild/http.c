/* A small HTTP client for arbitrary hosts (image registries and their token services): libcurl
 * multi-socket on a libev loop, one request at a time per call, no retries of its own. */
#include "imagebuild/http.h"

#include "util/cidr.h"
#include "util/curlev.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <ev.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_TIMEOUT_MS 10000L
#define DEFAULT_MAX_BODY   ((size_t)1 << 20)
#define CONNECT_TIMEOUT_MS 5000L
#define HEADER_VALUE_MAX   4096
#define MAX_REDIRECTS      5L

enum call_state { CALL_QUEUED, CALL_RUNNING, CALL_DONE };

struct build_http_call {
    struct build_http *h;
    struct build_http_call *prev, *next; /* h->calls */
    enum call_state state;
    int cancelled;
    CURL *easy;
    struct curl_slist *headers;
    char errbuf[CURL_ERROR_SIZE];
    struct buf body;
    int too_big;
    char *www_authenticate;
    char *content_digest;
    build_http_done_fn *done;
    void *ud;
    int restrict_addresses;
    const struct build_address_policy *policy;
    struct build_refusal refused; /* the first address the policy refused, why */
};

struct build_http {
    struct ev_loop *loop;
    struct curlev *cv;
    ev_timer kick;
    struct build_http_call *calls;
    size_t ncalls;
};

/* ---- the address policy ---- */

int build_cidr_parse(const char *text, struct build_cidr *out, struct telo_err *err)
{
    memset(out, 0, sizeof(*out));
    char host[INET6_ADDRSTRLEN + 1];
    const char *slash = text != NULL ? strchr(text, '/') : NULL;
    size_t n = text == NULL ? 0 : slash != NULL ? (size_t)(slash - text) : strlen(text);
    if (n == 0 || n >= sizeof(host))
        return telo_err_set(err, TELO_EINVAL, "\"%s\" is not a CIDR (e.g. 10.0.0.0/8)",
                            text != NULL ? text : "");
    memcpy(host, text, n);
    host[n] = '\0';
    unsigned max;
    if (inet_pton(AF_INET, host, out->addr) == 1) {
        out->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, host, out->addr) == 1) {
        out->family = AF_INET6;
        max = 128;
    } else {
        return telo_err_set(err, TELO_EINVAL, "\"%s\" is not a CIDR (e.g. 10.0.0.0/8)", text);
    }
    out->prefix = max;
    if (slash != NULL) {
        char *end = NULL;
        unsigned long p = strtoul(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || p > max)
            return telo_err_set(err, TELO_EINVAL, "\"%s\": the prefix length must be 0 to %u", text,
                                max);
        out->prefix = (unsigned)p;
    }
    return 0;
}

struct net_class {
    int family;
    unsigned char net[16];
    unsigned prefix;
    const char *what;
};

/* Checked in order: the first match names the class. */
static const struct net_class refused_nets[] = {
    {AF_INET, {169, 254, 169, 254}, 32, "the cloud metadata service (link-local)"},
    {AF_INET, {127}, 8, "loopback"},
    {AF_INET, {169, 254}, 16, "link-local"},
    {AF_INET, {10}, 8, "private (RFC 1918)"},
    {AF_INET, {172, 16}, 12, "private (RFC 1918)"},
    {AF_INET, {192, 168}, 16, "private (RFC 1918)"},
    {AF_INET, {100, 64}, 10, "carrier-grade NAT (shared, RFC 6598)"},
    {AF_INET, {0}, 8, "\"this network\" (0.0.0.0/8)"},
    {AF_INET, {192, 0, 0}, 24, "IETF protocol assignments (192.0.0.0/24)"},
    {AF_INET, {198, 18}, 15, "benchmarking (198.18.0.0/15)"},
    {AF_INET, {224}, 4, "multicast"},
    {AF_INET, {240}, 4, "reserved (240.0.0.0/4, broadcast)"},
    {AF_INET6, {0}, 128, "unspecified"},
    {AF_INET6, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "loopback"},
    /* Forms that carry an IPv4 address, where a translator, tunnel or relay we cannot see
     * decides what is reached (6to4 is deprecated, RFC 7526; Teredo hides its client's address
     * under an XOR): judging the IPv4 inside would trust that path. Refusing costs no registry we
     * know of, and bundle.allowedUrlCidrs opens one that needs it. */
    {AF_INET6, {0}, 96, "IPv4-compatible (deprecated, ::/96)"},
    {AF_INET6, {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96, "IPv4-translated (SIIT, ::ffff:0:0:0/96)"},
    {AF_INET6, {0, 0x64, 0xff, 0x9b, 0, 1}, 48, "local-use NAT64 (64:ff9b:1::/48)"},
    {AF_INET6, {0x20, 0x02}, 16, "6to4 (2002::/16)"},
    {AF_INET6, {0x20, 0x01, 0, 0}, 32, "Teredo (2001::/32)"},
    {AF_INET6, {0xfe, 0x80}, 10, "link-local"},
    {AF_INET6, {0xfe, 0xc0}, 10, "site-local"},
    {AF_INET6, {0xfc}, 7, "private (unique local)"},
    {AF_INET6, {0xff}, 8, "multicast"},
};

int build_address_allowed(const struct sockaddr *sa, const struct build_address_policy *policy,
                          struct build_refusal *out)
{
    static const struct build_address_policy none = {0};
    const struct build_address_policy *p = policy != NULL ? policy : &none;
    unsigned char a[16];
    int family;
    unsigned port;
    out->denied = 0;
    if (sa == NULL) {
        snprintf(out->why, sizeof(out->why), "no address");
        return 0;
    }
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        family = AF_INET;
        memcpy(a, &in->sin_addr, 4);
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        family = AF_INET6;
        memcpy(a, &in6->sin6_addr, 16);
        port = ntohs(in6->sin6_port);
    } else {
        snprintf(out->why, sizeof(out->why), "the address is neither IPv4 nor IPv6");
        return 0;
    }
    char text[INET6_ADDRSTRLEN];
    inet_ntop(family, a, text, sizeof(text));
    /* IPv4 in IPv6 clothing: mapped (::ffff:0:0/96) and NAT64 (64:ff9b::/96) reach the IPv4
     * address they carry. */
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (family == AF_INET6 && (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)) {
        memmove(a, a + 12, 4);
        family = AF_INET;
    }
    for (size_t i = 0; i < p->ndeny; i++) {
        const struct build_cidr *d = &p->deny[i].net;
        if (d->family == family && util_cidr_contains(d->addr, d->prefix, a) &&
            (p->deny[i].port == 0 || p->deny[i].port == port)) {
            snprintf(out->why, sizeof(out->why), "the address %s is %s", text, p->deny[i].what);
            out->denied = 1;
            return 0;
        }
    }
    for (size_t i = 0; i < p->nallow; i++)
        if (p->allow[i].family == family &&
            util_cidr_contains(p->allow[i].addr, p->allow[i].prefix, a))
            return 1;
    for (size_t i = 0; i < sizeof(refused_nets) / sizeof(refused_nets[0]); i++) {
        const struct net_class *c = &refused_nets[i];
        if (c->family == family && util_cidr_contains(c->net, c->prefix, a)) {
            snprintf(out->why, sizeof(out->why), "the address %s is %s", text, c->what);
            return 0;
        }
    }
    return 1;
}

int build_url_denied(const char *url, const char *what, struct build_denied *out)
{
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL;
    int ok = 0;
    memset(out, 0, sizeof(*out));
    if (u != NULL && url != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        /* curl keeps an IPv6 host's brackets. */
        size_t n = strlen(host);
        if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
            memmove(host, host + 1, n - 2);
            host[n - 2] = '\0';
        }
        struct telo_err err;
        ok = build_cidr_parse(host, &out->net, &err) == 0;
        out->port = (unsigned)strtoul(port, NULL, 10);
        out->what = what;
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return ok;
}

/* Every connection curl opens for a restricted call: the resolved address it is about to use,
 * so what is checked is what is connected to. */
static curl_socket_t on_opensocket(void *clientp, curlsocktype purpose,
                                   struct curl_sockaddr *address)
{
    struct build_http_call *c = clientp;
    struct build_refusal r;
    if (purpose == CURLSOCKTYPE_IPCXN && !build_address_allowed(&address->addr, c->policy, &r)) {
        if (c->refused.why[0] == '\0')
            c->refused = r;
        return CURL_SOCKET_BAD;
    }
    return socket(address->family, address->socktype, address->protocol);
}

/* ---- per call ---- */

static void keep_header(char **slot, const char *value, size_t len)
{
    while (len > 0 && (value[0] == ' ' || value[0] == '\t')) {
        value++;
        len--;
    }
    while (len > 0 && (value[len - 1] == '\r' || value[len - 1] == '\n' || value[len - 1] == ' '))
        len--;
    if (len > HEADER_VALUE_MAX)
        len = HEADER_VALUE_MAX;
    free(*slot);
    *slot = strndup(value, len);
}

static size_t on_header(char *data, size_t size, size_t n, void *userp)
{
    struct build_http_call *c = userp;
    size_t len = size * n;
    static const char wa[] = "www-authenticate:", dcd[] = "docker-content-digest:";
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* A new response (after a redirect or 100 Continue): forget the previous headers. */
        free(c->www_authenticate);
        free(c->content_digest);
        c->www_authenticate = c->content_digest = NULL;
    } else if (len > sizeof(wa) - 1 && strncasecmp(data, wa, sizeof(wa) - 1) == 0) {
        keep_header(&c->www_authenticate, data + sizeof(wa) - 1, len - (sizeof(wa) - 1));
    } else if (len > sizeof(dcd) - 1 && strncasecmp(data, dcd, sizeof(dcd) - 1) == 0) {
        keep_header(&c->content_digest, data + sizeof(dcd) - 1, len - (sizeof(dcd) - 1));
    }
    return len;
}

static size_t on_write(char *data, size_t size, size_t n, void *userp)
{
    struct build_http_call *c = userp;
    size_t len = size * n;
    if (c->cancelled)
        return 0;
    if (buf_append(&c->body, data, len) != 0) {
        c->too_big = 1;
        return 0;
    }
    return len;
}

static void call_free(struct build_http_call *c)
{
    struct build_http *h = c->h;
    if (c->easy != NULL) {
        curlev_remove(h->cv, c->easy);
        curl_easy_cleanup(c->easy);
    }
    curl_slist_free_all(c->headers);
    if (h->calls == c)
        h->calls = c->next;
    else
        c->prev->next = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    h->ncalls--;
    buf_release(&c->body);
    free(c->www_authenticate);
    free(c->content_digest);
    free(c);
}

/* A transfer finished: answer its call, then free it. */
static void on_done(CURL *easy, CURLcode cc, void *ud)
{
    struct build_http_call *c = ud;
    c->state = CALL_DONE;
    if (cc != CURLE_OK && c->errbuf[0] == '\0')
        snprintf(c->errbuf, sizeof(c->errbuf), "%s", curl_easy_strerror(cc));
    if (cc == CURLE_OK)
        c->errbuf[0] = '\0';
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    char *url = NULL;
    curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &url);
    struct telo_err err;
    telo_err_clear(&err);
    int rc = 0;
    char summary[sizeof(c->refused.why) + 16] = "";
    if (c->refused.why[0] != '\0' && cc != CURLE_OK) {
        rc = telo_err_set(&err, TELO_EINVAL, "%s: refused: %s", url ? url : "", c->refused.why);
        snprintf(summary, sizeof(summary), "refused: %s", c->refused.why);
    } else if (c->too_big) {
        rc = telo_err_set(&err, TELO_ETOOBIG, "%s: response larger than %zu bytes", url ? url : "",
                          c->body.max);
        snprintf(summary, sizeof(summary), "larger than %zu bytes", c->body.max);
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        rc = telo_err_set(&err, TELO_ETIMEDOUT, "%s: %s", url ? url : "", c->errbuf);
        snprintf(summary, sizeof(summary), "timed out");
    } else if (c->errbuf[0] != '\0') {
        rc = telo_err_set(&err, TELO_EIO, "%s: %s", url ? url : "", c->errbuf);
        snprintf(summary, sizeof(summary), "%s",
                 cc == CURLE_COULDNT_RESOLVE_HOST   ? "cannot resolve the host"
                 : cc == CURLE_COULDNT_CONNECT      ? "cannot connect"
                 : cc == CURLE_TOO_MANY_REDIRECTS   ? "too many redirects"
                 : cc == CURLE_UNSUPPORTED_PROTOCOL ? "a redirect to a scheme other than http(s)"
                 : cc == CURLE_PEER_FAILED_VERIFICATION
                     ? "the server's TLS certificate is not trusted"
                 : cc == CURLE_SSL_CONNECT_ERROR ? "the TLS handshake failed"
                                                 : "the transfer failed");
    }
    struct build_http_response resp = {
        .rc = rc,
        .err = &err,
        .summary = summary,
        .refused = c->refused.why[0] != '\0' && rc != 0,
        .denied = c->refused.denied && rc != 0,
        .code = rc == 0 ? code : 0,
        .www_authenticate = c->www_authenticate,
        .content_digest = c->content_digest,
        .body = &c->body,
    };
    c->done(c, &resp, c->ud);
    call_free(c);
}

static void kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct build_http *h = w->data;
    for (struct build_http_call *c = h->calls; c != NULL; c = c->next) {
        if (c->state != CALL_QUEUED)
            continue;
        c->state = CALL_RUNNING;
        if (curlev_add(h->cv, c->easy, c) != 0) {
            /* Reported like a transport failure, through the normal path. */
            snprintf(c->errbuf, sizeof(c->errbuf), "curl refused the request");
            c->state = CALL_DONE;
        }
    }
    /* Calls curl refused never reach on_done: answer them here. */
    for (struct build_http_call *c = h->calls, *next; c != NULL; c = next) {
        next = c->next; // NOLINT(clang-analyzer-unix.Malloc): c is unlinked before it is freed
        if (c->state == CALL_DONE && !c->cancelled && c->errbuf[0] != '\0') {
            struct telo_err err;
            telo_err_set(&err, TELO_ENOMEM, "%s", c->errbuf);
            struct build_http_response resp = {
                .rc = -TELO_ENOMEM, .err = &err, .summary = "out of memory", .body = &c->body};
            curl_easy_cleanup(c->easy);
            c->easy = NULL;
            c->done(c, &resp, c->ud);
            call_free(c);
            next = h->calls; /* the callback may have changed the list */
        }
    }
}

struct build_http_call *build_http_submit(struct build_http *h,
                                          const struct build_http_request *req,
                                          build_http_done_fn *done, void *ud, struct telo_err *err)
{
    if (req == NULL || req->method == NULL || req->url == NULL || done == NULL ||
        (strncmp(req->url, "http://", 7) != 0 && strncmp(req->url, "https://", 8) != 0)) {
        telo_err_set(err, TELO_EINVAL,
                     "http request '%s': needs a method, an http:// or https:// "
                     "URL and a callback",
                     req && req->url ? req->url : "");
        return NULL;
    }
    struct build_http_call *c = calloc(1, sizeof(*c));
    CURL *e = curl_easy_init();
    if (c == NULL || e == NULL) {
        free(c);
        curl_easy_cleanup(e);
        telo_err_set(err, TELO_ENOMEM, "out of memory for %s %s", req->method, req->url);
        return NULL;
    }
    c->h = h;
    c->easy = e;
    c->done = done;
    c->ud = ud;
    c->restrict_addresses = req->restrict_addresses;
    c->policy = req->policy;
    buf_init(&c->body, req->max_body ? req->max_body : DEFAULT_MAX_BODY);
    int ok = 1;
    for (const char *const *hd = req->headers; ok && hd != NULL && *hd != NULL; hd++) {
        struct curl_slist *n = curl_slist_append(c->headers, *hd);
        ok = n != NULL;
        if (ok)
            c->headers = n;
    }
    struct curl_slist *ua =
        ok ? curl_slist_append(c->headers, "User-Agent: telo-operator/" TELO_VERSION) : NULL;
    if (!ok || ua == NULL) {
        curl_slist_free_all(c->headers);
        curl_easy_cleanup(e);
        free(c);
        telo_err_set(err, TELO_ENOMEM, "out of memory for %s %s", req->method, req->url);
        return NULL;
    }
    c->headers = ua;
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* A transfer that ends (timed out, cancelled) while its name is still being resolved would
     * otherwise wait for the resolver thread's getaddrinfo, stalling the loop for as long as a
     * tenant's slow DNS takes (curl issues #2975, #4852, #8515); the thread finishes alone. */
    curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     req->timeout_ms > 0 ? req->timeout_ms : DEFAULT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    if (req->restrict_addresses) {
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
        curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, c);
        /* Through a proxy (curl takes one from http_proxy, HTTPS_PROXY, ALL_PROXY) the address
         * checked would be the proxy's and the proxy would reach any destination for us: "" turns
         * proxies off, so the destination itself is connected to and checked. */
        curl_easy_setopt(e, CURLOPT_PROXY, "");
    }
    /* Registries redirect blob reads to storage; manifests and tokens answer directly, and an
     * Authorization header must not follow a redirect to another host. A download without
     * credentials may follow (release assets redirect to storage): each hop's connection goes
     * through the address policy like the first. */
    if (req->follow_redirects) {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    } else {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    }
    if (strcmp(req->method, "HEAD") == 0)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(req->method, "GET") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    if (req->insecure_tls) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    c->state = CALL_QUEUED;
    c->next = h->calls;
    if (h->calls != NULL)
        h->calls->prev = c;
    h->calls = c;
    h->ncalls++;
    if (!ev_is_active(&h->kick)) {
        ev_timer_set(&h->kick, 0., 0.);
        ev_timer_start(h->loop, &h->kick);
    }
    return c;
}

void build_http_cancel(struct build_http_call *c)
{
    if (c == NULL || c->cancelled)
        return;
    if (c->state == CALL_DONE) {
        /* Its completion is being delivered: on_done or kick_cb frees it. */
        c->cancelled = 1;
        return;
    }
    c->cancelled = 1;
    call_free(c);
}

size_t build_http_pending(const struct build_http *h)
{
    return h->ncalls;
}

struct build_http *build_http_new(struct ev_loop *loop, struct telo_err *err)
{
    struct build_http *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory creating the registry HTTP client");
        return NULL;
    }
    h->cv = curlev_new(loop, on_done, NULL, NULL, err);
    if (h->cv == NULL) {
        free(h);
        return NULL;
    }
    h->loop = loop;
    /* Bounded: one registry should not get more than a few connections from us. */
    curl_multi_setopt(curlev_multi(h->cv), CURLMOPT_MAX_HOST_CONNECTIONS, 4L);
    ev_timer_init(&h->kick, kick_cb, 0., 0.);
    h->kick.data = h;
    return h;
}

void build_http_free(struct build_http *h)
{
    if (h == NULL)
        return;
    /* call_free calls back no one, so the list changes only by c. */
    for (struct build_http_call *c = h->calls, *next; c != NULL; c = next) {
        next = c->next;
        call_free(c);
    }
    ev_timer_stop(h->loop, &h->kick);
    curlev_free(h->cv);
    free(h);
}

/* A small HTTP client for arbitrary hosts (image registries and their token services): libcurl
 * multi-socket on a libev loop, one request at a time per call, no retries of its own. */
#ifndef TELO_IMAGEBUILD_HTTP_H
#define TELO_IMAGEBUILD_HTTP_H

#include "util/buf.h"
#include "util/err.h"

#include <stddef.h>

struct ev_loop;
struct sockaddr;
struct build_http;
struct build_http_call;

/* An IP network, "10.0.0.0/8" or "fd00::/8". */
struct build_cidr {
    int family; /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    unsigned prefix;
};

/* Parses text ("127.0.0.0/8", "::1/128"; a bare address is a /32 or /128) into *out. Returns 0,
 * or -TELO_EINVAL with err saying what is wrong. */
int build_cidr_parse(const char *text, struct build_cidr *out, struct telo_err *err);

/* A network (on one port, or all) a tenant's URL may not reach whatever the allow list says, and
 * what it is ("the Kubernetes API server", "in bundle.deniedUrlCidrs"). */
struct build_denied {
    struct build_cidr net;
    unsigned port;    /* 0: every port */
    const char *what; /* borrowed */
};

/* Where a tenant's URL may connect beyond the public addresses: deny is looked at first, then
 * allow, then the refused classes. Arrays borrowed. */
struct build_address_policy {
    const struct build_denied *deny;
    size_t ndeny;
    const struct build_cidr *allow;
    size_t nallow;
};

/* Why an address was refused. */
struct build_refusal {
    char why[160]; /* "the address 127.0.0.1 is loopback" */
    int denied;    /* 1: by policy->deny, which the allow list does not open */
};

/* Whether the operator may connect to sa (AF_INET or AF_INET6) on a tenant's behalf, under
 * policy (NULL: the refused classes alone): an address in a network of policy->deny (on its port,
 * when it names one) is refused;
 * else one in a network of policy->allow is allowed; else one of these classes is refused:
 * loopback, link-local (cloud metadata 169.254.169.254 among them), private (RFC 1918, unique
 * local fc00::/7, carrier-grade NAT 100.64.0.0/10), "this network" 0.0.0.0/8 and the unspecified
 * address, IETF protocol assignments 192.0.0.0/24, benchmarking 198.18.0.0/15, multicast,
 * broadcast and reserved 240.0.0.0/4, and the IPv6 forms that carry an IPv4 address we do not
 * judge (IPv4-compatible ::/96, SIIT ::ffff:0:0:0/96, local-use NAT64 64:ff9b:1::/48, 6to4
 * 2002::/16, Teredo 2001::/32); every other address is allowed. IPv4 addresses mapped into IPv6
 * (::ffff:a.b.c.d, 64:ff9b::/96) are judged as IPv4. Returns 1, or 0 with *out saying why. */
int build_address_allowed(const struct sockaddr *sa, const struct build_address_policy *policy,
                          struct build_refusal *out);

/* The endpoint url names (its host's address as a /32 or /128, and its port, the scheme's when
 * none is written) into *out, labelled what (borrowed). Returns 1, or 0 when url does not parse
 * or its host is a name. */
int build_url_denied(const char *url, const char *what, struct build_denied *out);

/* One request. Pointers are borrowed and only read during build_http_submit. pkg/kube's
 * transport talks to one API server with its credentials; this one goes wherever url says. */
struct build_http_request {
    const char *method;         /* "GET" or "HEAD" */
    const char *url;            /* http:// or https:// */
    const char *const *headers; /* NULL-terminated "Name: value" lines, or NULL */
    long timeout_ms;            /* whole request; 0: 10000 */
    size_t max_body;            /* response body cap; 0: 1 MiB */
    int insecure_tls;           /* 1: do not verify the server's certificate */
    /* A tenant's URL: 1 checks every address connected to (each try of each resolved address,
     * after every redirect) with build_address_allowed under policy, so a name that resolves,
     * or rebinds, to a refused address is never connected to; and never through a proxy (curl's
     * http_proxy and kin from the environment are ignored), so the address checked is the
     * destination's. */
    int restrict_addresses;
    const struct build_address_policy *policy; /* borrowed; must outlive the call; or NULL */
    int follow_redirects; /* up to 5, http(s) only; never with credentials in headers */
};

/* What came back; valid only during the callback. */
struct build_http_response {
    int rc;                       /* 0 when an HTTP response arrived, else negative */
    const struct telo_err *err;   /* why, when rc != 0 ("connection refused", "timed out") */
    long code;                    /* HTTP status; 0 when none arrived */
    const char *www_authenticate; /* the last WWW-Authenticate header, or NULL */
    const char *content_digest;   /* Docker-Content-Digest, or NULL */
    const struct buf *body;       /* up to max_body bytes */
    /* When rc != 0: what went wrong in words of our own, never the remote's ("timed out",
     * "cannot connect", "refused: the address 127.0.0.1 is loopback"), fit for a tenant's
     * status; err->msg has the detail for the log. */
    const char *summary;
    int refused; /* a connection was refused by the address policy */
    int denied;  /* ... by its deny list, which the allow list does not open */
};

/* Called once per call that was not cancelled; the call is freed when it returns. It may submit
 * and cancel other calls. */
typedef void build_http_done_fn(struct build_http_call *call,
                                const struct build_http_response *resp, void *ud);

/* Creates a client on loop (borrowed; must outlive it). Returns NULL with err filled when out of
 * memory or libcurl cannot start. */
struct build_http *build_http_new(struct ev_loop *loop, struct telo_err *err);

/* Cancels every call without calling back and frees h. NULL is a no-op. */
void build_http_free(struct build_http *h);

/* Starts req on the next loop iteration (never calls back from inside this function). Returns the
 * call (owned by h; valid until its callback returns or it is cancelled), or NULL with err filled:
 * -TELO_EINVAL for a missing method, a url that is not http(s), or a missing callback;
 * -TELO_ENOMEM. */
struct build_http_call *build_http_submit(struct build_http *h,
                                          const struct build_http_request *req,
                                          build_http_done_fn *done, void *ud, struct telo_err *err);

/* Cancels call: no callback, freed now. NULL is a no-op. */
void build_http_cancel(struct build_http_call *call);

/* Calls in flight or queued. */
size_t build_http_pending(const struct build_http *h);

#endif

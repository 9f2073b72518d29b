/* The API server's service proxy as a way to a Service's in-cluster URL: from
 * "http://gw.telo-system.svc:80/v1/..." to
 * "<server>/api/v1/namespaces/telo-system/services/http:gw:80/proxy/v1/...", which a client
 * outside the cluster network reaches with only its kubeconfig. Pure. */
#ifndef TELO_KUBE_SVCPROXY_H
#define TELO_KUBE_SVCPROXY_H

#include "util/err.h"

struct buf;

/* What an in-cluster Service URL names. */
struct kube_service_url {
    char scheme[8];     /* "http" or "https" (ws and wss map to them) */
    char namespace[64]; /* a DNS-1123 label */
    char name[64];      /* the Service, a DNS-1123 label */
    int port;           /* the URL's port, else 80 or 443 */
};

/* Parses url (http, https, ws or wss) whose host is a Service's cluster DNS name:
 * NAME.NAMESPACE.svc, optionally followed by the cluster domain (NAME.NAMESPACE.svc.cluster.local).
 * Returns 0 with *out filled; -TELO_ENOTFOUND (err filled) when the host is not such a name (an
 * Ingress host, an IP address); -TELO_EINVAL for a URL that does not parse or has another scheme
 * or user info. */
int kube_service_url_parse(const char *url, struct kube_service_url *out, struct telo_err *err);

/* Appends to out the URL of the same request through the API server at server (the kubeconfig's
 * base URL, a path prefix kept): server + "/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy"
 * + url's path and query, unchanged. The API server's proxy authorizes it as get on
 * services/proxy with the resource name "SCHEME:NAME:PORT" and supports WebSocket upgrades.
 * Returns 0, or what kube_service_url_parse returns, -TELO_ETOOBIG / -TELO_ENOMEM from out. */
int kube_service_proxy_url(const char *server, const char *url, struct buf *out,
                           struct telo_err *err);

#endif

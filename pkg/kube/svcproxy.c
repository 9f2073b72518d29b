/* The API server's service proxy as a way to a Service's in-cluster URL (see svcproxy.h). */
#include "kube/svcproxy.h"

#include "util/buf.h"
#include "util/str.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define URL_MAX 8192

/* NAME.NAMESPACE.svc[.cluster.domain]: the first two labels into out. */
static int service_host(const char *host, struct kube_service_url *out)
{
    const char *dot1 = strchr(host, '.');
    if (dot1 == NULL)
        return 0;
    const char *ns = dot1 + 1, *dot2 = strchr(ns, '.');
    if (dot2 == NULL)
        return 0;
    const char *svc = dot2 + 1;
    size_t svc_len = strcspn(svc, ".");
    if (svc_len != 3 || strncasecmp(svc, "svc", 3) != 0)
        return 0;
    /* Whatever follows is the cluster domain; a trailing dot (an absolute name) is fine. */
    size_t name_len = (size_t)(dot1 - host), ns_len = (size_t)(dot2 - ns);
    if (!util_str_dns_label(host, name_len) || !util_str_dns_label(ns, ns_len))
        return 0;
    snprintf(out->name, sizeof(out->name), "%.*s", (int)name_len, host);
    snprintf(out->namespace, sizeof(out->namespace), "%.*s", (int)ns_len, ns);
    return 1;
}

/* Parses url into out, and its "/path?query" into *target when target is not NULL (free). */
static int parse(const char *url, struct kube_service_url *out, char **target, struct telo_err *err)
{
    memset(out, 0, sizeof(*out));
    if (target != NULL)
        *target = NULL;
    if (url == NULL || strlen(url) > URL_MAX)
        return telo_err_set(err, TELO_EINVAL, "service URL: missing or longer than %d bytes",
                            URL_MAX);
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *query = NULL, *user = NULL;
    int rc = 0;
    if (u == NULL)
        return telo_err_set(err, TELO_ENOMEM, "service URL: out of memory");
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS) !=
            CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host == NULL ||
        curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK || path == NULL ||
        curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
        rc = telo_err_set(err, TELO_EINVAL, "service URL %.200s: cannot parse it", url);
        goto out;
    }
    int tls = 0;
    if (strcasecmp(scheme, "https") == 0 || strcasecmp(scheme, "wss") == 0)
        tls = 1;
    else if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "ws") != 0) {
        rc = telo_err_set(err, TELO_EINVAL,
                          "service URL %.200s: scheme must be https, wss, http or ws", url);
        goto out;
    }
    snprintf(out->scheme, sizeof(out->scheme), "%s", tls ? "https" : "http");
    out->port = tls ? 443 : 80;
    if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK)
        out->port = atoi(port);
    if (!service_host(host, out)) {
        rc = telo_err_set(err, TELO_ENOTFOUND,
                          "service URL %.200s: host %.100s is not a Service's cluster DNS name "
                          "(NAME.NAMESPACE.svc[.cluster.local])",
                          url, host);
        goto out;
    }
    if (target != NULL) {
        if (curl_url_get(u, CURLUPART_QUERY, &query, 0) != CURLUE_OK)
            query = NULL;
        size_t n = strlen(path) + (query != NULL ? strlen(query) + 1 : 0) + 2;
        *target = malloc(n);
        if (*target != NULL)
            snprintf(*target, n, "%s%s%s%s", path[0] == '/' ? "" : "/", path,
                     query != NULL ? "?" : "", query != NULL ? query : "");
        if (*target == NULL)
            rc = telo_err_set(err, TELO_ENOMEM, "service URL: out of memory");
    }
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_free(user);
    curl_url_cleanup(u);
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    return rc;
}

int kube_service_url_parse(const char *url, struct kube_service_url *out, struct telo_err *err)
{
    return parse(url, out, NULL, err);
}

int kube_service_proxy_url(const char *server, const char *url, struct buf *out,
                           struct telo_err *err)
{
    struct kube_service_url s;
    char *target = NULL;
    int rc = parse(url, &s, &target, err);
    if (rc != 0)
        return rc;
    size_t slen = server != NULL ? strlen(server) : 0;
    while (slen > 0 && server[slen - 1] == '/')
        slen--;
    if (slen == 0) {
        free(target);
        return telo_err_set(err, TELO_EINVAL, "service proxy: no API server URL");
    }
    rc = buf_printf(out, "%.*s/api/v1/namespaces/%s/services/%s:%s:%d/proxy%s", (int)slen, server,
                    s.namespace, s.scheme, s.name, s.port, target);
    free(target);
    if (rc != 0)
        return telo_err_set(err, -rc, "service proxy: the URL does not fit");
    return 0;
}

/* In-cluster configuration: the API server from the pod's KUBERNETES_SERVICE_HOST and _PORT, and
 * the mounted service account's token, CA certificate and namespace. */
#include "kube/incluster.h"

#include "kube/config.h"
#include "util/err.h"
#include "util/file.h"
#include "util/str.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NAMESPACE_FILE (4u << 20) /* as every file the config reads */

int kube_incluster_available(const char *dir, const char *host, const char *port)
{
    if (!host || !*host || !port || !*port)
        return 0;
    char *token = util_str_printf("%s/token", dir);
    int have = token && util_file_exists(token);
    free(token);
    return have;
}

/* The namespace file's content, trimmed, or "default" when it is missing or empty. */
static char *read_namespace(const char *dir)
{
    char *path = util_str_printf("%s/namespace", dir);
    if (!path)
        return NULL;
    char *ns = NULL;
    size_t len;
    const char *why;
    int rc = util_file_read(path, MAX_NAMESPACE_FILE, &ns, &len, &why);
    free(path);
    if (rc == 0) {
        util_str_trim(ns);
        if (*ns)
            return ns;
        free(ns);
    } else if (rc == -TELO_ENOMEM) {
        return NULL;
    }
    return strdup("default");
}

int kube_incluster_apply(const char *dir, const char *host, const char *port,
                         struct kube_config *cfg, struct telo_err *err)
{
    /* net.JoinHostPort: an IPv6 literal needs brackets. */
    int v6 = strchr(host, ':') != NULL && host[0] != '[';
    if (!(cfg->source = strdup("in-cluster")))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    char *server = util_str_printf(v6 ? "https://[%s]:%s" : "https://%s:%s", host, port);
    if (!server)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    int rc = kube_config_set_server(cfg, "in-cluster config", server, err);
    free(server);
    if (rc < 0)
        return rc;
    char *ca = util_str_printf("%s/ca.crt", dir);
    if (!ca)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    /* client-go also carries on without ca.crt, leaving verification to the system roots. */
    if (util_file_exists(ca))
        cfg->ca_file = ca;
    else
        free(ca);
    if (!(cfg->namespace = read_namespace(dir)))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    char *prefix = util_str_printf("in-cluster config %s", dir);
    char *token = util_str_printf("%s/token", dir);
    rc = prefix && token ? kube_config_use_token_file(cfg, prefix, token, err)
                         : telo_err_oom(err, KUBE_CONFIG_LOADING);
    free(prefix);
    free(token);
    return rc;
}

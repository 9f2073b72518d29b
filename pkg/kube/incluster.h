/* In-cluster configuration: the API server from the pod's KUBERNETES_SERVICE_HOST and _PORT, and
 * the mounted service account's token, CA certificate and namespace. */
#ifndef TELO_KUBE_INCLUSTER_H
#define TELO_KUBE_INCLUSTER_H

#include "util/err.h"

struct kube_config;

/* Where the kubelet mounts the service account. */
#define KUBE_INCLUSTER_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* 1 when host and port are set and not empty and dir holds a token file, as client-go's
 * InClusterConfig requires; else 0. Cannot fail. */
int kube_incluster_available(const char *dir, const char *host, const char *port);

/* Fills cfg (new, from kube_config_new) from dir, host and port: server https://host:port
 * (IPv6 literals bracketed), dir/ca.crt when it exists, the namespace file's content or "default",
 * and dir/token as a token file, read once now so that a broken mount fails at start-up. Returns
 * 0, or -TELO_EINVAL / -TELO_EIO / -TELO_ENOMEM with err filled; cfg is then partly filled and
 * the caller frees it. */
int kube_incluster_apply(const char *dir, const char *host, const char *port,
                         struct kube_config *cfg, struct telo_err *err);

#endif

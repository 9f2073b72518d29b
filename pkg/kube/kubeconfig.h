/* Kubeconfig files: reading and merging them as clientcmd does, and building a kube_config from
 * one of their contexts (cluster, user and the user's credentials). */
#ifndef TELO_KUBE_KUBECONFIG_H
#define TELO_KUBE_KUBECONFIG_H

#include <stddef.h>

#include "util/err.h"

struct kube_config;
struct kube_config_options;

/* A set of parsed kubeconfig documents, in merge order. */
struct kube_kubeconfig;

/* Reads the files kube_config_load would: opts->kubeconfig (must exist), else every file of
 * opts->env_kubeconfig (missing ones skipped, duplicates once), else $HOME/.kube/config when it
 * exists. Returns 0 with a new set in *out (free with kube_kubeconfig_free), possibly empty; or
 * -TELO_EINVAL (invalid YAML, a top level that is not a mapping, a missing explicit file),
 * -TELO_EIO, -TELO_ETOOBIG or -TELO_ENOMEM with err naming the file. */
int kube_kubeconfig_read(const struct kube_config_options *opts, struct kube_kubeconfig **out,
                         struct telo_err *err);

/* A set of one document held in memory (text, len bytes), path naming it in messages and
 * anchoring its relative paths. Returns as kube_kubeconfig_read. */
int kube_kubeconfig_read_text(const char *path, const char *text, size_t len,
                              struct kube_kubeconfig **out, struct telo_err *err);

/* 1 when no document of set has any content (kubectl then falls back to in-cluster), else 0. */
int kube_kubeconfig_is_empty(const struct kube_kubeconfig *set);

/* Fills cfg (new, from kube_config_new) from the context named context, or the first
 * current-context of the set when context is NULL or empty: server and TLS settings, namespace,
 * client certificate and key (-data fields decoded), and credentials (a static token, a token
 * file read once now, or an exec plugin with timeout exec_timeout_ms, parsed but not run).
 * Returns 0, or -TELO_EINVAL (naming the file, the entry and the field), -TELO_EIO (token file)
 * or -TELO_ENOMEM with err filled; cfg is then partly filled and the caller frees it. */
int kube_kubeconfig_apply(struct kube_kubeconfig *set, const char *context, int exec_timeout_ms,
                          struct kube_config *cfg, struct telo_err *err);

/* Frees set. NULL is a no-op. */
void kube_kubeconfig_free(struct kube_kubeconfig *set);

#endif

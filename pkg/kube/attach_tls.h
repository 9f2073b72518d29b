/* The TLS settings of an attach connection (pkg/kube/attach.c): an OpenSSL context from the
 * kubeconfig's trust and client certificate, or the attach options' overrides. */
#ifndef TELO_KUBE_ATTACH_TLS_H
#define TELO_KUBE_ATTACH_TLS_H

#include "kube/attach.h"
#include "util/err.h"

#include <openssl/ssl.h>

/* The SSL_CTX for connections to host: TLS 1.2 or newer; trust from opts->ca_file, else the
 * kubeconfig's certificate-authority(-data), else the system's, unless verification is off
 * (opts or kubeconfig insecure-skip-tls-verify); the name to verify (the kubeconfig's
 * tls-server-name, else host; an IP address is checked as one); the client certificate and key
 * (data, files or an exec plugin's). Returns NULL with err filled (-TELO_EIO naming the file or
 * field that could not be used). */
SSL_CTX *kube_attach_ssl_ctx(const struct kube_attach_opts *opts, const char *host,
                             struct telo_err *err);

#endif

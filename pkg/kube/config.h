/* Kubernetes client configuration: kubeconfig files, in-cluster service account, credentials. */
#ifndef TELO_KUBE_CONFIG_H
#define TELO_KUBE_CONFIG_H

#include <stddef.h>
#include <time.h>

#include "util/err.h"

/* Private credential state (token file cache, exec plugin and its cached credential). */
struct kube_config_auth;

/* The resolved connection settings for one API server, as kubectl would use them. All strings are
 * owned by the config, NUL-terminated, and freed by kube_config_free. Paths are absolute or
 * relative to the process's working directory (relative kubeconfig paths are already resolved
 * against the directory of the file that defined them). */
struct kube_config {
    char *source;          /* "kubeconfig /path (context \"x\")" or "in-cluster"; for messages */
    char *server;          /* "https://127.0.0.1:6443", no trailing slash */
    char *tls_server_name; /* SNI / verification name override, or NULL */
    int insecure_skip_tls_verify;
    char *ca_file; /* certificate-authority path, or NULL */
    char *ca_pem;  /* decoded certificate-authority-data, or NULL */
    size_t ca_pem_len;
    char *client_cert_file;        /* client-certificate path, or NULL */
    char *client_key_file;         /* client-key path, or NULL */
    char *client_cert_pem;         /* decoded client-certificate-data, or NULL */
    char *client_key_pem;          /* decoded client-key-data, or NULL */
    char *namespace;               /* the context's namespace; "default" when unset */
    char *proxy_url;               /* cluster proxy-url, or NULL */
    struct kube_config_auth *auth; /* private; use kube_config_token / kube_config_client_cert */
};

struct kube_config_options {
    const char *kubeconfig;      /* explicit --kubeconfig path, must exist; NULL for none */
    const char *context;         /* --context override; NULL uses current-context */
    const char *env_kubeconfig;  /* value of $KUBECONFIG (":"-separated), or NULL */
    const char *home;            /* value of $HOME for ~/.kube/config, or NULL */
    const char *in_cluster_dir;  /* NULL: /var/run/secrets/kubernetes.io/serviceaccount */
    const char *in_cluster_host; /* value of KUBERNETES_SERVICE_HOST, or NULL */
    const char *in_cluster_port; /* value of KUBERNETES_SERVICE_PORT, or NULL */
    int exec_timeout_ms;         /* exec plugin time limit; 0 means 30000 */
};

/* Loads the configuration the way kubectl does: opts->kubeconfig if set (it must exist), else
 * every file of opts->env_kubeconfig merged (the first file to define a cluster, user or context
 * name wins; current-context comes from the first file that sets it; missing files are skipped),
 * else $HOME/.kube/config, else the in-cluster service account when host, port and token file
 * exist. Certificate and key -data fields are decoded and token files read once (so a broken
 * mount fails here); exec plugins are parsed but not run until kube_config_token. On success
 * returns 0 and stores a new config in *out, which the caller frees with kube_config_free. On
 * failure returns -TELO_EINVAL (bad or missing configuration), -TELO_EIO (a file could not be read)
 * or -TELO_ENOMEM, fills err with a message naming the file, entry and field, and leaves *out
 * untouched. */
int kube_config_load(const struct kube_config_options *opts, struct kube_config **out,
                     struct telo_err *err);

/* Builds the configuration from one kubeconfig document held in memory (text, len bytes), as
 * kube_config_load does for opts->kubeconfig = path holding that text: path names the file in
 * messages and relative paths in it resolve against its directory; context overrides
 * current-context when not NULL or empty; exec_timeout_ms as in kube_config_options. Token files
 * and certificate-authority files the document names are read as kube_config_load reads them.
 * Returns, fills and owns as kube_config_load. Exposed for tests and test/fuzz. */
int kube_config_parse(const char *path, const char *text, size_t len, const char *context,
                      int exec_timeout_ms, struct kube_config **out, struct telo_err *err);

/* The credential an exec plugin printed (an ExecCredential's status). Strings are owned. */
struct kube_exec_credential {
    char *token;    /* status.token, or NULL */
    char *cert_pem; /* status.clientCertificateData, or NULL (then key_pem is NULL too) */
    char *key_pem;  /* status.clientKeyData, or NULL */
    time_t expiry;  /* status.expirationTimestamp, 0 when none */
};

/* Parses an exec plugin's output text (NUL-terminated) as client-go does: an ExecCredential
 * JSON object of apiVersion api_version whose status holds a token or a certificate and key
 * pair, and an optional RFC 3339 expirationTimestamp. prefix and command start every message
 * ("<prefix>: exec plugin <command>: ..."). Returns 0 with *out filled (release it with
 * kube_exec_credential_release), or -TELO_EPROTO / -TELO_ENOMEM with err filled and *out empty.
 */
int kube_exec_credential_parse(const char *prefix, const char *command, const char *api_version,
                               const char *text, struct kube_exec_credential *out,
                               struct telo_err *err);

/* Frees what c owns and empties it. */
void kube_exec_credential_release(struct kube_exec_credential *c);

/* kube_config_load for a command: kubeconfig and context as its --kubeconfig and --context flags
 * give them (NULL when not given), the rest from the process environment (KUBECONFIG, HOME,
 * KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT). Returns, fills and owns as kube_config_load.
 */
int kube_config_load_env(const char *kubeconfig, const char *context, struct kube_config **out,
                         struct telo_err *err);

/* Frees cfg and everything it owns, including any cached credential. NULL is a no-op. */
void kube_config_free(struct kube_config *cfg);

/* Sets *token to the bearer token to send, or to NULL when the config authenticates otherwise
 * (client certificate, or an exec plugin that returned only a certificate). A static token is
 * returned as is; a tokenFile (and the in-cluster token) is re-read when its mtime, size or inode
 * changed, at least every 60 s, and after kube_config_invalidate_credentials; an exec plugin is run
 * when there is no cached credential, it expired, or it was invalidated. The string is owned by cfg
 * and stays valid until the next kube_config_token, kube_config_client_cert,
 * kube_config_invalidate_credentials or kube_config_free call. Returns 0, or a negative code with
 * err filled (token file unreadable or empty, plugin not found, failed, timed out or returned bad
 * output); *token is NULL on failure. Runs the plugin synchronously. Not thread-safe. */
int kube_config_token(struct kube_config *cfg, const char **token, struct telo_err *err);

/* Sets *cert_pem and *key_pem to the client certificate and key to present: the ones an exec
 * plugin returned (running it if needed, as kube_config_token does), else the decoded
 * client-certificate-data/client-key-data, else both NULL (then use client_cert_file and
 * client_key_file, which may also be NULL). Ownership and lifetime as for kube_config_token.
 * Returns 0, or a negative code with err filled and both pointers NULL. */
int kube_config_client_cert(struct kube_config *cfg, const char **cert_pem, const char **key_pem,
                            struct telo_err *err);

/* Call after the server answered 401: drops the cached file token and exec credential, so the
 * next kube_config_token re-reads the file or re-runs the plugin. Static credentials are kept.
 * NULL is a no-op. Cannot fail. */
void kube_config_invalidate_credentials(struct kube_config *cfg);

#endif

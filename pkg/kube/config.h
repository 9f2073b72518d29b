/* Kubernetes client configuration: where the API server is and how to authenticate, loaded from
 * kubeconfig files (kubeconfig.c) or the in-cluster service account (incluster.c); the credentials
 * (static token, token file, exec plugin in execcred.c), refreshed synchronously or on a loop. */
#ifndef TELO_KUBE_CONFIG_H
#define TELO_KUBE_CONFIG_H

#include <stddef.h>
#include <time.h>

#include "kube/execcred.h"
#include "util/err.h"

struct ev_loop;

/* What the configuration's out-of-memory errors say was going on (telo_err_oom). */
#define KUBE_CONFIG_LOADING "loading the Kubernetes configuration"

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
 * output); *token is NULL on failure. Runs the plugin synchronously, blocking the caller up to its
 * timeout: code on an event loop calls kube_config_fetch_credentials first. Not thread-safe. */
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

/* Makes the credentials ready without blocking loop. Returns 0 when they are ready now (static;
 * a token file, re-read as kube_config_token does; a cached unexpired exec credential): fn is not
 * called and *wait is NULL. Returns 1 when an exec plugin runs (started now, or already running
 * for an earlier request) as a child process watched by loop: fn(ud) is called from the loop once
 * it ended, with 0 (read the result with kube_config_current_credentials, not kube_config_token,
 * which would run the plugin again if the credential came back already expired) or a negative
 * code and the error kube_config_token would give; *wait can cancel it with
 * kube_execcred_wait_cancel. Returns a negative code with err filled when the credentials cannot
 * be had (token file unreadable, plugin not found, fork failed). */
int kube_config_fetch_credentials(struct kube_config *cfg, struct ev_loop *loop,
                                  kube_execcred_fn *fn, void *ud, struct kube_execcred_wait **wait,
                                  struct telo_err *err);

/* The credentials as they stand, never reading a file or running a plugin: *token as
 * kube_config_token gives it, *cert_pem and *key_pem as kube_config_client_cert does (each may be
 * NULL). Lifetime as for kube_config_token. Cannot fail. */
void kube_config_current_credentials(const struct kube_config *cfg, const char **token,
                                     const char **cert_pem, const char **key_pem);

/* ---- for the loaders (kubeconfig.c, incluster.c) ---- */

/* A new, empty config (no server, no credentials): fill it and give it out, or free it with
 * kube_config_free. Returns NULL when out of memory. */
struct kube_config *kube_config_new(void);

/* Sets cfg->server to server, an http(s) URL with a host, trailing slashes removed. where starts
 * the message ("kubeconfig /p: cluster \"c\""). Returns 0, -TELO_EINVAL or -TELO_ENOMEM. */
int kube_config_set_server(struct kube_config *cfg, const char *where, const char *server,
                           struct telo_err *err);

/* Authenticate with the static bearer token (copied). Returns 0 or -TELO_ENOMEM. */
int kube_config_use_token(struct kube_config *cfg, const char *token, struct telo_err *err);

/* Authenticate with the token in the file at path (copied), read now and re-read as
 * kube_config_token says; prefix (copied) starts its messages. Returns 0, or -TELO_EIO (cannot
 * read), -TELO_EINVAL (empty) or -TELO_ENOMEM with err filled. */
int kube_config_use_token_file(struct kube_config *cfg, const char *prefix, const char *path,
                               struct telo_err *err);

/* Authenticate with the exec plugin ec, which cfg takes. Cannot fail. */
void kube_config_use_exec(struct kube_config *cfg, struct kube_execcred *ec);

#endif

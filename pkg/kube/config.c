/* Kubernetes client configuration: where the API server is and how to authenticate, loaded from
 * kubeconfig files (kubeconfig.c) or the in-cluster service account (incluster.c); the credentials
 * (static token, token file, exec plugin in execcred.c), refreshed synchronously or on a loop. */
#include "kube/config.h"

#include "kube/execcred.h"
#include "kube/incluster.h"
#include "kube/kubeconfig.h"
#include "util/err.h"
#include "util/file.h"
#include "util/str.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_TOKEN_FILE       (4u << 20)
#define DEFAULT_EXEC_TIMEOUT 30000
/* client-go's cachingTokenSource re-reads service account tokens at least once a minute; the
 * kubelet rotates them well before expiry, so a minute of staleness is harmless. */
#define TOKEN_FILE_MAX_AGE_S 60

enum auth_kind { AUTH_NONE, AUTH_STATIC, AUTH_FILE, AUTH_EXEC };

struct kube_config_auth {
    enum auth_kind kind;
    char *static_token;
    /* AUTH_FILE: the file, its message prefix, and the token last read from it. */
    char *token_file;
    char *prefix;
    char *file_token; /* NULL when not read or invalidated */
    struct timespec read_at;
    struct stat file_id;
    struct kube_execcred *exec; /* AUTH_EXEC */
};

/* ---- building ---- */

struct kube_config *kube_config_new(void)
{
    struct kube_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return NULL;
    cfg->auth = calloc(1, sizeof(*cfg->auth));
    if (!cfg->auth) {
        free(cfg);
        return NULL;
    }
    return cfg;
}

int kube_config_set_server(struct kube_config *cfg, const char *where, const char *server,
                           struct telo_err *err)
{
    const char *rest = NULL;
    if (!strncmp(server, "https://", 8))
        rest = server + 8;
    else if (!strncmp(server, "http://", 7))
        rest = server + 7;
    if (!rest || !*rest || *rest == '/' || strpbrk(server, " \t\r\n"))
        return telo_err_set(err, TELO_EINVAL, "%s: server \"%s\" is not an http(s) URL", where,
                            server);
    if (!(cfg->server = strdup(server)))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    size_t n = strlen(cfg->server);
    while (n > (size_t)(rest - server) && cfg->server[n - 1] == '/')
        cfg->server[--n] = '\0';
    return 0;
}

int kube_config_use_token(struct kube_config *cfg, const char *token, struct telo_err *err)
{
    cfg->auth->kind = AUTH_STATIC;
    if (!(cfg->auth->static_token = strdup(token)))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    return 0;
}

static int refresh_token_file(struct kube_config_auth *a, struct telo_err *err);

int kube_config_use_token_file(struct kube_config *cfg, const char *prefix, const char *path,
                               struct telo_err *err)
{
    struct kube_config_auth *a = cfg->auth;
    a->kind = AUTH_FILE;
    if (!(a->prefix = strdup(prefix)) || !(a->token_file = strdup(path)))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    return refresh_token_file(a, err);
}

void kube_config_use_exec(struct kube_config *cfg, struct kube_execcred *ec)
{
    cfg->auth->kind = AUTH_EXEC;
    cfg->auth->exec = ec;
}

/* ---- loading ---- */

int kube_config_load(const struct kube_config_options *opts, struct kube_config **out,
                     struct telo_err *err)
{
    struct kube_kubeconfig *set = NULL;
    struct kube_config *cfg = kube_config_new();
    if (!cfg)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    int timeout_ms = opts->exec_timeout_ms > 0 ? opts->exec_timeout_ms : DEFAULT_EXEC_TIMEOUT;
    int rc = kube_kubeconfig_read(opts, &set, err);
    if (rc < 0)
        goto fail;
    /* Like client-go's deferred loader: an empty or absent kubeconfig falls back to in-cluster. */
    if (kube_kubeconfig_is_empty(set) && !(opts->kubeconfig && *opts->kubeconfig)) {
        const char *dir = opts->in_cluster_dir ? opts->in_cluster_dir : KUBE_INCLUSTER_DIR;
        if (kube_incluster_available(dir, opts->in_cluster_host, opts->in_cluster_port))
            rc = kube_incluster_apply(dir, opts->in_cluster_host, opts->in_cluster_port, cfg, err);
        else
            rc = telo_err_set(err, TELO_EINVAL,
                              "no kubeconfig: set KUBECONFIG, pass --kubeconfig or run in a "
                              "cluster");
    } else {
        rc = kube_kubeconfig_apply(set, opts->context, timeout_ms, cfg, err);
    }
    if (rc < 0)
        goto fail;
    kube_kubeconfig_free(set);
    *out = cfg;
    return 0;
fail:
    kube_kubeconfig_free(set);
    kube_config_free(cfg);
    return rc;
}

int kube_config_parse(const char *path, const char *text, size_t len, const char *context,
                      int exec_timeout_ms, struct kube_config **out, struct telo_err *err)
{
    struct kube_kubeconfig *set = NULL;
    struct kube_config *cfg = kube_config_new();
    if (!cfg)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    int timeout_ms = exec_timeout_ms > 0 ? exec_timeout_ms : DEFAULT_EXEC_TIMEOUT;
    int rc = kube_kubeconfig_read_text(path, text, len, &set, err);
    if (rc == 0)
        rc = kube_kubeconfig_apply(set, context, timeout_ms, cfg, err);
    kube_kubeconfig_free(set);
    if (rc < 0) {
        kube_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
}

int kube_config_load_env(const char *kubeconfig, const char *context, struct kube_config **out,
                         struct telo_err *err)
{
    struct kube_config_options opts = {
        .kubeconfig = kubeconfig,
        .context = context,
        .env_kubeconfig = getenv("KUBECONFIG"),
        .home = getenv("HOME"),
        .in_cluster_host = getenv("KUBERNETES_SERVICE_HOST"),
        .in_cluster_port = getenv("KUBERNETES_SERVICE_PORT"),
    };
    return kube_config_load(&opts, out, err);
}

void kube_config_free(struct kube_config *cfg)
{
    if (!cfg)
        return;
    struct kube_config_auth *a = cfg->auth;
    if (a) {
        free(a->static_token);
        free(a->token_file);
        free(a->prefix);
        free(a->file_token);
        kube_execcred_free(a->exec);
        free(a);
    }
    free(cfg->source);
    free(cfg->server);
    free(cfg->tls_server_name);
    free(cfg->ca_file);
    free(cfg->ca_pem);
    free(cfg->client_cert_file);
    free(cfg->client_key_file);
    free(cfg->client_cert_pem);
    free(cfg->client_key_pem);
    free(cfg->namespace);
    free(cfg->proxy_url);
    free(cfg);
}

/* ---- token file ---- */

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static int refresh_token_file(struct kube_config_auth *a, struct telo_err *err)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    struct stat st;
    int stat_ok = stat(a->token_file, &st) == 0;
    if (a->file_token && stat_ok && same_file(&st, &a->file_id) &&
        now.tv_sec - a->read_at.tv_sec < TOKEN_FILE_MAX_AGE_S)
        return 0;
    char *text = NULL;
    size_t len;
    const char *why;
    int rc = util_file_read(a->token_file, MAX_TOKEN_FILE, &text, &len, &why);
    if (rc == -TELO_ENOMEM)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (rc < 0)
        return telo_err_set(err, rc == -TELO_ENOTFOUND ? TELO_EIO : -rc,
                            "%s: tokenFile %s: cannot read: %s", a->prefix, a->token_file, why);
    util_str_trim(text);
    if (!*text) {
        free(text);
        return telo_err_set(err, TELO_EINVAL, "%s: tokenFile %s is empty", a->prefix,
                            a->token_file);
    }
    free(a->file_token);
    a->file_token = text;
    a->read_at = now;
    if (stat_ok)
        a->file_id = st;
    return 0;
}

/* ---- credentials ---- */

void kube_config_invalidate_credentials(struct kube_config *cfg)
{
    if (!cfg || !cfg->auth)
        return;
    struct kube_config_auth *a = cfg->auth;
    free(a->file_token);
    a->file_token = NULL;
    if (a->exec)
        kube_execcred_invalidate(a->exec);
}

static int refresh(struct kube_config *cfg, struct telo_err *err)
{
    struct kube_config_auth *a = cfg->auth;
    switch (a->kind) {
    case AUTH_FILE:
        return refresh_token_file(a, err);
    case AUTH_EXEC:
        return kube_execcred_refresh(a->exec, err);
    default:
        return 0;
    }
}

void kube_config_current_credentials(const struct kube_config *cfg, const char **token,
                                     const char **cert_pem, const char **key_pem)
{
    const struct kube_config_auth *a = cfg->auth;
    const char *exec_cert = NULL, *exec_key = NULL;
    *token = NULL;
    if (a->kind == AUTH_STATIC)
        *token = a->static_token;
    else if (a->kind == AUTH_FILE)
        *token = a->file_token;
    else if (a->kind == AUTH_EXEC)
        kube_execcred_current(a->exec, token, &exec_cert, &exec_key);
    /* A certificate from the plugin wins over the kubeconfig's. */
    *cert_pem = exec_cert ? exec_cert : cfg->client_cert_pem;
    *key_pem = exec_cert ? exec_key : cfg->client_key_pem;
}

int kube_config_token(struct kube_config *cfg, const char **token, struct telo_err *err)
{
    *token = NULL;
    int rc = refresh(cfg, err);
    if (rc < 0)
        return rc;
    const char *cert, *key;
    kube_config_current_credentials(cfg, token, &cert, &key);
    return 0;
}

int kube_config_client_cert(struct kube_config *cfg, const char **cert_pem, const char **key_pem,
                            struct telo_err *err)
{
    *cert_pem = *key_pem = NULL;
    int rc = refresh(cfg, err);
    if (rc < 0)
        return rc;
    const char *token;
    kube_config_current_credentials(cfg, &token, cert_pem, key_pem);
    return 0;
}

int kube_config_fetch_credentials(struct kube_config *cfg, struct ev_loop *loop,
                                  kube_execcred_fn *fn, void *ud, struct kube_execcred_wait **wait,
                                  struct telo_err *err)
{
    *wait = NULL;
    struct kube_config_auth *a = cfg->auth;
    if (a->kind == AUTH_EXEC)
        return kube_execcred_fetch(a->exec, loop, fn, ud, wait, err);
    /* A token file is a small read of a local mount: done at once, as kube_config_token does. */
    return refresh(cfg, err);
}

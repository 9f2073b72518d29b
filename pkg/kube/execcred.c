/* Exec credential plugins (client.authentication.k8s.io): running a kubeconfig user's exec plugin,
 * synchronously or as a child process watched by a libev loop, and caching what it prints. */
#include "kube/execcred.h"

#include "kube/config.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/file.h"
#include "util/jget.h"
#include "util/str.h"
#include "util/subproc.h"
#include "util/timefmt.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_EXEC_STDOUT      (1u << 20)
#define MAX_EXEC_STDERR      4096
#define MAX_EXEC_STDERR_TAIL 400
#define MAX_CA_FILE          (4u << 20)

struct kube_execcred_wait {
    struct kube_execcred *ec;
    struct kube_execcred_wait *next;
    kube_execcred_fn *fn;
    void *ud;
};

struct kube_execcred {
    char *prefix;
    char *api_version;
    char *command;      /* as written in the kubeconfig, for messages */
    char *path;         /* resolved executable, or NULL when not found yet */
    char **argv;        /* NULL-terminated; argv[0] is the command to run */
    size_t argc;        /* entries before the NULL */
    char **env;         /* NULL-terminated "NAME=value" list from the kubeconfig */
    size_t envc;        /* entries before the NULL */
    char *install_hint; /* or NULL */
    char *exec_info;    /* KUBERNETES_EXEC_INFO=... */
    int timeout_ms;
    /* The cached credential. */
    int cached;
    struct kube_exec_credential cred;
    /* The run in flight and the requests waiting for it, in arrival order; the ones being told
     * the result (so that a callback can cancel another). */
    struct subproc *run;
    struct kube_execcred_wait *waits, *notifying;
};

/* ---- the ExecCredential document ---- */

/* A non-empty string member, else NULL (client-go treats "" as unset). */
static const char *json_str(json_object *obj, const char *key)
{
    const char *s = jget_string(obj, key);
    return s && *s ? s : NULL;
}

void kube_exec_credential_release(struct kube_exec_credential *c)
{
    free(c->token);
    free(c->cert_pem);
    free(c->key_pem);
    memset(c, 0, sizeof(*c));
}

/* Checks status as client-go does and copies it into out. */
static int take_status(const char *prefix, const char *command, json_object *status,
                       struct kube_exec_credential *out, struct telo_err *err)
{
    const char *token = json_str(status, "token");
    const char *cert = json_str(status, "clientCertificateData");
    const char *key = json_str(status, "clientKeyData");
    const char *expiry = json_str(status, "expirationTimestamp");
    if (!!cert != !!key)
        return telo_err_set(err, TELO_EPROTO,
                            "%s: exec plugin %s: returned only certificate or key, not both",
                            prefix, command);
    if (!token && !cert)
        return telo_err_set(err, TELO_EPROTO,
                            "%s: exec plugin %s: did not return a token or cert/key pair", prefix,
                            command);
    double when = expiry ? timefmt_parse(expiry) : 0;
    if (when == -1)
        return telo_err_set(err, TELO_EPROTO,
                            "%s: exec plugin %s: expirationTimestamp \"%s\" is not RFC 3339",
                            prefix, command, expiry);
    out->token = token ? strdup(token) : NULL;
    out->cert_pem = cert ? strdup(cert) : NULL;
    out->key_pem = key ? strdup(key) : NULL;
    if ((token && !out->token) || (cert && (!out->cert_pem || !out->key_pem))) {
        kube_exec_credential_release(out);
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    out->expiry = (time_t)when;
    return 0;
}

int kube_exec_credential_parse(const char *prefix, const char *command, const char *api_version,
                               const char *text, struct kube_exec_credential *out,
                               struct telo_err *err)
{
    memset(out, 0, sizeof(*out));
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    json_object *root = json_tokener_parse_ex(tok, text, (int)strlen(text));
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    int rc = 0;
    const char *api = json_str(root, "apiVersion");
    const char *kind = json_str(root, "kind");
    json_object *status = jget_object(root, "status");
    if (!root || jerr != json_tokener_success || !json_object_is_type(root, json_type_object))
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: output is not an ExecCredential JSON object", prefix,
                          command);
    else if (!api || strcmp(api, api_version) != 0)
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: is configured to use API version %s, plugin "
                          "returned version %s",
                          prefix, command, api_version, api ? api : "(none)");
    else if (!kind || strcmp(kind, "ExecCredential") != 0)
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: returned kind %s, not ExecCredential", prefix,
                          command, kind ? kind : "(none)");
    else if (!status)
        rc = telo_err_set(err, TELO_EPROTO, "%s: exec plugin %s: did not return a status field",
                          prefix, command);
    else
        rc = take_status(prefix, command, status, out, err);
    json_object_put(root);
    return rc;
}

/* ---- building ---- */

/* Looks the command up in PATH as execvp would, so that "not found" is reported with the
 * installHint before forking. */
static char *find_executable(const char *command)
{
    if (strchr(command, '/'))
        return access(command, X_OK) == 0 ? strdup(command) : NULL;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        char *candidate = n ? util_str_printf("%.*s/%s", (int)n, path, command) : strdup(command);
        if (!candidate)
            return NULL;
        struct stat st;
        if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && access(candidate, X_OK) == 0)
            return candidate;
        free(candidate);
        path += n;
        if (*path == ':')
            path++;
    }
    return NULL;
}

struct kube_execcred *kube_execcred_new(const char *prefix, const char *api_version,
                                        const char *command, const char *argv0,
                                        const char *install_hint, int timeout_ms)
{
    struct kube_execcred *ec = calloc(1, sizeof(*ec));
    if (!ec)
        return NULL;
    ec->prefix = strdup(prefix);
    ec->api_version = strdup(api_version);
    ec->command = strdup(command);
    ec->install_hint = install_hint ? strdup(install_hint) : NULL;
    ec->argv = calloc(2, sizeof(char *));
    ec->env = calloc(1, sizeof(char *));
    ec->timeout_ms = timeout_ms;
    if (ec->argv)
        ec->argv[0] = strdup(argv0);
    ec->argc = 1;
    if (!ec->prefix || !ec->api_version || !ec->command || (install_hint && !ec->install_hint) ||
        !ec->argv || !ec->argv[0] || !ec->env) {
        kube_execcred_free(ec);
        return NULL;
    }
    ec->path = find_executable(argv0);
    return ec;
}

/* Appends s (taken) to the NULL-terminated list *v of *n entries. */
static int strv_push(char ***v, size_t *n, char *s)
{
    char **grown = s ? realloc(*v, (*n + 2) * sizeof(char *)) : NULL;
    if (!grown) {
        free(s);
        return -TELO_ENOMEM;
    }
    grown[(*n)++] = s;
    grown[*n] = NULL;
    *v = grown;
    return 0;
}

int kube_execcred_add_arg(struct kube_execcred *ec, const char *arg)
{
    return strv_push(&ec->argv, &ec->argc, strdup(arg));
}

int kube_execcred_add_env(struct kube_execcred *ec, const char *name, const char *value)
{
    return strv_push(&ec->env, &ec->envc, util_str_printf("%s=%s", name, value));
}

/* The cluster part of KUBERNETES_EXEC_INFO, field names as in client-go's Cluster type. */
static json_object *cluster_info(const struct kube_config *cfg)
{
    json_object *c = json_object_new_object();
    if (!c)
        return NULL;
    json_object_object_add(c, "server", json_object_new_string(cfg->server));
    if (cfg->tls_server_name)
        json_object_object_add(c, "tls-server-name", json_object_new_string(cfg->tls_server_name));
    if (cfg->insecure_skip_tls_verify)
        json_object_object_add(c, "insecure-skip-tls-verify", json_object_new_boolean(1));
    char *ca = NULL;
    if (cfg->ca_pem) {
        ca = util_base64_encode(cfg->ca_pem, cfg->ca_pem_len, NULL);
    } else if (cfg->ca_file) {
        char *text = NULL;
        size_t len = 0;
        const char *why;
        if (util_file_read(cfg->ca_file, MAX_CA_FILE, &text, &len, &why) == 0)
            ca = util_base64_encode(text, len, NULL);
        free(text);
    }
    if (ca)
        json_object_object_add(c, "certificate-authority-data", json_object_new_string(ca));
    free(ca);
    if (cfg->proxy_url)
        json_object_object_add(c, "proxy-url", json_object_new_string(cfg->proxy_url));
    return c;
}

int kube_execcred_set_info(struct kube_execcred *ec, const struct kube_config *cfg,
                           int with_cluster)
{
    json_object *root = json_object_new_object();
    json_object *spec = json_object_new_object();
    if (!root || !spec) {
        json_object_put(root);
        json_object_put(spec);
        return -TELO_ENOMEM;
    }
    json_object_object_add(root, "apiVersion", json_object_new_string(ec->api_version));
    json_object_object_add(root, "kind", json_object_new_string("ExecCredential"));
    /* We never hand the plugin a terminal, so it must not prompt. */
    json_object_object_add(spec, "interactive", json_object_new_boolean(0));
    if (with_cluster)
        json_object_object_add(spec, "cluster", cluster_info(cfg));
    json_object_object_add(root, "spec", spec);
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    char *info = text ? util_str_printf("KUBERNETES_EXEC_INFO=%s", text) : NULL;
    json_object_put(root);
    if (!info)
        return -TELO_ENOMEM;
    free(ec->exec_info);
    ec->exec_info = info;
    return 0;
}

/* ---- the cache ---- */

int kube_execcred_valid(const struct kube_execcred *ec)
{
    return ec->cached && (ec->cred.expiry == 0 || time(NULL) < ec->cred.expiry);
}

void kube_execcred_current(const struct kube_execcred *ec, const char **token,
                           const char **cert_pem, const char **key_pem)
{
    *token = ec->cached ? ec->cred.token : NULL;
    *cert_pem = ec->cached ? ec->cred.cert_pem : NULL;
    *key_pem = ec->cached ? ec->cred.key_pem : NULL;
}

void kube_execcred_invalidate(struct kube_execcred *ec)
{
    kube_exec_credential_release(&ec->cred);
    ec->cached = 0;
}

/* Parses the plugin's stdout and caches the credential, following client-go's checks. */
static int store(struct kube_execcred *ec, const char *text, struct telo_err *err)
{
    struct kube_exec_credential c;
    int rc = kube_exec_credential_parse(ec->prefix, ec->command, ec->api_version, text, &c, err);
    if (rc < 0)
        return rc;
    kube_exec_credential_release(&ec->cred);
    ec->cred = c;
    ec->cached = 1;
    return 0;
}

/* ---- starting a plugin ---- */

/* The parent's environment with the kubeconfig's env entries and KUBERNETES_EXEC_INFO over it. The
 * list is new, its strings borrowed. */
static char **exec_environment(const struct kube_execcred *ec)
{
    size_t n_parent = 0;
    while (environ && environ[n_parent])
        n_parent++;
    char **env = calloc(n_parent + ec->envc + 2, sizeof(char *));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n_parent; i++) {
        const char *v = environ[i];
        size_t name_len = strcspn(v, "=");
        int overridden = !strncmp(v, "KUBERNETES_EXEC_INFO=", 21);
        for (size_t j = 0; j < ec->envc && !overridden; j++)
            overridden = !strncmp(ec->env[j], v, name_len) && ec->env[j][name_len] == '=';
        if (!overridden)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < ec->envc; j++)
        env[k++] = ec->env[j];
    env[k] = ec->exec_info;
    return env;
}

/* Fills spec to run the plugin, with a new environment in *env that the caller frees. Returns 0,
 * or -TELO_ENOTFOUND (with the installHint) or -TELO_ENOMEM with err filled. */
static int prepare(struct kube_execcred *ec, struct subproc_spec *spec, char ***env,
                   struct telo_err *err)
{
    if (!ec->path) {
        /* Looked up again so a plugin installed after start-up is found. */
        ec->path = find_executable(ec->argv[0]);
        if (!ec->path && ec->install_hint)
            return telo_err_set(err, TELO_ENOTFOUND, "%s: exec plugin: executable %s not found: %s",
                                ec->prefix, ec->command, ec->install_hint);
        if (!ec->path)
            return telo_err_set(err, TELO_ENOTFOUND, "%s: exec plugin: executable %s not found",
                                ec->prefix, ec->command);
    }
    if (!(*env = exec_environment(ec)))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    *spec = (struct subproc_spec){.path = ec->path,
                                  .argv = ec->argv,
                                  .envp = *env,
                                  .timeout_ms = ec->timeout_ms,
                                  .max_stdout = MAX_EXEC_STDOUT,
                                  .stderr_kept = MAX_EXEC_STDERR};
    return 0;
}

/* The end of stderr, trimmed, with line breaks turned into spaces so the message stays one log
 * line. */
static const char *stderr_tail(struct buf *b)
{
    if (!b->data)
        return "";
    util_str_trim(b->data);
    for (char *p = b->data; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    size_t n = strlen(b->data);
    return n > MAX_EXEC_STDERR_TAIL ? b->data + n - MAX_EXEC_STDERR_TAIL : b->data;
}

/* What a finished run makes: the cached credential, or an error naming the plugin (rc and
 * run_err are subproc's, for a run that failed before the plugin's exit). */
static int finish_run(struct kube_execcred *ec, int rc, const struct telo_err *run_err,
                      struct subproc_result *res, struct telo_err *err)
{
    if (rc == -TELO_ENOMEM)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (rc < 0)
        return telo_err_set(err, -rc, "%s: exec plugin %s%s%s", ec->prefix, ec->command,
                            rc == -TELO_EIO ? ": " : " ", run_err->msg);
    int status = res->status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !res->out.len && !res->err.len)
        return telo_err_set(err, TELO_ENOTFOUND, "%s: exec plugin: cannot execute %s", ec->prefix,
                            ec->command);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        const char *tail = stderr_tail(&res->err);
        return telo_err_set(err, TELO_EIO, "%s: exec plugin %s exited with status %d%s%s",
                            ec->prefix, ec->command, WEXITSTATUS(status), *tail ? ": " : "", tail);
    }
    if (WIFSIGNALED(status))
        return telo_err_set(err, TELO_EIO, "%s: exec plugin %s killed by signal %d", ec->prefix,
                            ec->command, WTERMSIG(status));
    return store(ec, res->out.data ? res->out.data : "", err);
}

int kube_execcred_refresh(struct kube_execcred *ec, struct telo_err *err)
{
    if (kube_execcred_valid(ec))
        return 0;
    struct subproc_spec spec;
    char **env = NULL;
    int rc = prepare(ec, &spec, &env, err);
    if (rc < 0)
        return rc;
    struct subproc_result res;
    struct telo_err run_err;
    telo_err_clear(&run_err);
    rc = subproc_run(&spec, &res, &run_err);
    free(env);
    rc = finish_run(ec, rc, &run_err, &res, err);
    subproc_result_release(&res);
    return rc;
}

/* ---- running on a loop ---- */

/* Tells every waiting request how the run ended. Callbacks may add waits (for a new run) and
 * cancel waits not yet told. */
static void notify(struct kube_execcred *ec, int rc, const struct telo_err *err)
{
    ec->notifying = ec->waits;
    ec->waits = NULL;
    while (ec->notifying) {
        struct kube_execcred_wait *w = ec->notifying;
        ec->notifying = w->next;
        kube_execcred_fn *fn = w->fn;
        void *ud = w->ud;
        free(w);
        fn(rc, err, ud);
    }
}

static void run_done(int rc, const struct telo_err *run_err, struct subproc_result *res, void *ud)
{
    struct kube_execcred *ec = ud;
    struct telo_err err;
    telo_err_clear(&err);
    ec->run = NULL;
    rc = finish_run(ec, rc, run_err, res, &err);
    notify(ec, rc, &err);
}

static int run_start(struct kube_execcred *ec, struct ev_loop *loop, struct telo_err *err)
{
    struct subproc_spec spec;
    char **env = NULL;
    int rc = prepare(ec, &spec, &env, err);
    if (rc < 0)
        return rc;
    struct telo_err run_err;
    ec->run = subproc_start(loop, &spec, run_done, ec, &run_err);
    free(env);
    if (!ec->run) {
        struct subproc_result none = {0};
        return finish_run(ec, run_err.code > 0 ? -run_err.code : -TELO_EIO, &run_err, &none, err);
    }
    return 0;
}

int kube_execcred_fetch(struct kube_execcred *ec, struct ev_loop *loop, kube_execcred_fn *fn,
                        void *ud, struct kube_execcred_wait **wait, struct telo_err *err)
{
    *wait = NULL;
    if (kube_execcred_valid(ec))
        return 0;
    struct kube_execcred_wait *w = calloc(1, sizeof(*w));
    if (!w)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (!ec->run) {
        int rc = run_start(ec, loop, err);
        if (rc < 0) {
            free(w);
            return rc;
        }
    }
    w->ec = ec;
    w->fn = fn;
    w->ud = ud;
    struct kube_execcred_wait **tail = &ec->waits;
    while (*tail)
        tail = &(*tail)->next;
    *tail = w;
    *wait = w;
    return 1;
}

static int unlink_wait(struct kube_execcred_wait **list, struct kube_execcred_wait *w)
{
    for (struct kube_execcred_wait **p = list; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            return 1;
        }
    }
    return 0;
}

void kube_execcred_wait_cancel(struct kube_execcred_wait *w)
{
    if (!w)
        return;
    if (unlink_wait(&w->ec->waits, w) || unlink_wait(&w->ec->notifying, w))
        free(w);
}

static void free_waits(struct kube_execcred_wait *w)
{
    while (w) {
        struct kube_execcred_wait *next = w->next;
        free(w);
        w = next;
    }
}

void kube_execcred_free(struct kube_execcred *ec)
{
    if (!ec)
        return;
    subproc_cancel(ec->run);
    free_waits(ec->waits);
    free_waits(ec->notifying);
    kube_exec_credential_release(&ec->cred);
    free(ec->prefix);
    free(ec->api_version);
    free(ec->command);
    free(ec->path);
    for (size_t i = 0; ec->argv && ec->argv[i]; i++)
        free(ec->argv[i]);
    free(ec->argv);
    for (size_t i = 0; ec->env && ec->env[i]; i++)
        free(ec->env[i]);
    free(ec->env);
    free(ec->install_hint);
    free(ec->exec_info);
    free(ec);
}

/* Tests for pkg/kube/config.c: kubeconfig loading, merging, in-cluster config and credentials. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the headers above. */
#include <cmocka.h>

#include "kube/config.h"
#include "util/err.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A fresh temporary directory per test, removed with everything in it afterwards. */
struct fixture {
    char dir[64];
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    strcpy(fx->dir, "/tmp/telo-config-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
    int rc = system(cmd);
    free(fx);
    return rc == 0 ? 0 : -1;
}

/* Returns a static-lifetime path under the fixture dir (a small ring so several can be live). */
static const char *path_in(struct fixture *fx, const char *name)
{
    static char ring[8][256];
    static int next;
    char *p = ring[next++ % 8];
    snprintf(p, 256, "%s/%s", fx->dir, name);
    return p;
}

static void write_file(struct fixture *fx, const char *name, const char *text)
{
    const char *p = path_in(fx, name);
    char *slash = strrchr(p, '/');
    if (slash) {
        char parent[256];
        snprintf(parent, sizeof(parent), "%.*s", (int)(slash - p), p);
        (void)mkdir(parent, 0700);
    }
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void write_script(struct fixture *fx, const char *name, const char *body)
{
    write_file(fx, name, body);
    assert_int_equal(chmod(path_in(fx, name), 0755), 0);
}

/* Sets the file's mtime to an explicit value, so a rewrite is detectable even within the
 * filesystem's timestamp granularity. */
static void set_mtime(struct fixture *fx, const char *name, time_t when)
{
    struct timespec times[2] = {{when, 0}, {when, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path_in(fx, name), times, 0), 0);
}

static int count_lines(struct fixture *fx, const char *name)
{
    FILE *f = fopen(path_in(fx, name), "r");
    if (!f)
        return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static char *slurp(struct fixture *fx, const char *name)
{
    FILE *f = fopen(path_in(fx, name), "r");
    assert_non_null(f);
    static char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* Loads an explicit kubeconfig; asserts success. */
static struct kube_config *load_explicit(struct fixture *fx, const char *name)
{
    struct kube_config_options opts = {.kubeconfig = path_in(fx, name)};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    int rc = kube_config_load(&opts, &cfg, &err);
    if (rc != 0)
        fail_msg("load failed: %s", err.msg);
    assert_non_null(cfg);
    return cfg;
}

/* Loads an explicit kubeconfig and expects failure; returns the message. */
static const char *load_error(struct fixture *fx, const char *name, int code)
{
    static struct telo_err err;
    struct kube_config_options opts = {.kubeconfig = path_in(fx, name)};
    struct kube_config *cfg = NULL;
    telo_err_clear(&err);
    assert_int_equal(kube_config_load(&opts, &cfg, &err), -code);
    assert_null(cfg);
    assert_int_equal(err.code, code);
    return err.msg;
}

#define CLUSTER_LOCAL                                                                              \
    "clusters:\n"                                                                                  \
    "- name: local\n"                                                                              \
    "  cluster:\n"                                                                                 \
    "    server: https://127.0.0.1:6443\n"

#define CONTEXT_LOCAL_ADMIN                                                                        \
    "contexts:\n"                                                                                  \
    "- name: ctx\n"                                                                                \
    "  context: {cluster: local, user: admin}\n"                                                   \
    "current-context: ctx\n"

/* base64 of "-----CERT-----\n" and "-----KEY-----\n" */
#define CERT_B64 "LS0tLS1DRVJULS0tLS0K"
#define KEY_B64  "LS0tLS1LRVktLS0tLQo="

/* ---- basic loading and static credentials ---- */

static void static_token_and_cluster_fields(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "apiVersion: v1\nkind: Config\n"
               "clusters:\n"
               "- name: prod\n"
               "  cluster:\n"
               "    server: https://api.example.com:6443/\n"
               "    tls-server-name: kubernetes.internal\n"
               "    insecure-skip-tls-verify: true\n"
               "    proxy-url: http://proxy:3128\n"
               "users:\n"
               "- name: admin\n"
               "  user:\n"
               "    token: s3cr3t\n"
               "contexts:\n"
               "- name: prod\n"
               "  context:\n"
               "    cluster: prod\n"
               "    user: admin\n"
               "    namespace: telo-system\n"
               "current-context: prod\n");
    struct kube_config *cfg = load_explicit(fx, "config");
    assert_string_equal(cfg->server, "https://api.example.com:6443");
    assert_string_equal(cfg->tls_server_name, "kubernetes.internal");
    assert_int_equal(cfg->insecure_skip_tls_verify, 1);
    assert_string_equal(cfg->proxy_url, "http://proxy:3128");
    assert_string_equal(cfg->namespace, "telo-system");
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s (context \"prod\")", path_in(fx, "config"));
    assert_string_equal(cfg->source, want);
    assert_null(cfg->ca_file);
    assert_null(cfg->ca_pem);
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "s3cr3t");
    /* Invalidation keeps static credentials: there is nothing to re-read. */
    kube_config_invalidate_credentials(cfg);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "s3cr3t");
    kube_config_free(cfg);
}

static void namespace_defaults_and_anonymous_user(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               CLUSTER_LOCAL "contexts:\n- name: c\n  context: {cluster: local}\n"
                             "current-context: c\n");
    struct kube_config *cfg = load_explicit(fx, "config");
    assert_string_equal(cfg->namespace, "default");
    assert_int_equal(cfg->insecure_skip_tls_verify, 0);
    const char *token = "x", *cert = "x", *key = "x";
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_null(token);
    assert_int_equal(kube_config_client_cert(cfg, &cert, &key, &err), 0);
    assert_null(cert);
    assert_null(key);
    kube_config_free(cfg);
}

static void certificate_data_is_decoded(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "clusters:\n- name: local\n  cluster:\n    server: https://127.0.0.1:6443\n"
               "    certificate-authority-data: " CERT_B64 "\n"
               "    certificate-authority: ignored-when-data-is-set.crt\n"
               "users:\n- name: admin\n  user:\n"
               "    client-certificate-data: " CERT_B64 "\n"
               "    client-key-data: " KEY_B64 "\n" CONTEXT_LOCAL_ADMIN);
    struct kube_config *cfg = load_explicit(fx, "config");
    assert_string_equal(cfg->ca_pem, "-----CERT-----\n");
    assert_int_equal(cfg->ca_pem_len, 15);
    assert_null(cfg->ca_file);
    assert_string_equal(cfg->client_cert_pem, "-----CERT-----\n");
    assert_string_equal(cfg->client_key_pem, "-----KEY-----\n");
    const char *token = "x", *cert = NULL, *key = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_null(token);
    assert_int_equal(kube_config_client_cert(cfg, &cert, &key, &err), 0);
    assert_string_equal(cert, "-----CERT-----\n");
    assert_string_equal(key, "-----KEY-----\n");
    kube_config_free(cfg);
}

static void relative_paths_resolve_against_the_defining_file(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "kube/config",
               "clusters:\n- name: local\n  cluster:\n    server: https://127.0.0.1:6443\n"
               "    certificate-authority: pki/ca.crt\n"
               "users:\n- name: admin\n  user:\n"
               "    client-certificate: pki/admin.crt\n"
               "    client-key: /etc/absolute/admin.key\n" CONTEXT_LOCAL_ADMIN);
    struct kube_config *cfg = load_explicit(fx, "kube/config");
    assert_string_equal(cfg->ca_file, path_in(fx, "kube/pki/ca.crt"));
    assert_string_equal(cfg->client_cert_file, path_in(fx, "kube/pki/admin.crt"));
    assert_string_equal(cfg->client_key_file, "/etc/absolute/admin.key");
    assert_null(cfg->client_cert_pem);
    kube_config_free(cfg);
}

static void token_file_is_read_and_reread_when_it_changes(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "kube/token", "first\n");
    set_mtime(fx, "kube/token", 1000000);
    write_file(fx, "kube/config",
               CLUSTER_LOCAL
               "users:\n- name: admin\n  user:\n    tokenFile: token\n" CONTEXT_LOCAL_ADMIN);
    struct kube_config *cfg = load_explicit(fx, "kube/config");
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "first");

    /* Rewritten with a new mtime: picked up without invalidation. */
    write_file(fx, "kube/token", "second");
    set_mtime(fx, "kube/token", 2000000);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "second");

    /* Same size and mtime: the cache is trusted until invalidated (a 401). */
    write_file(fx, "kube/token", "third!");
    set_mtime(fx, "kube/token", 2000000);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "second");
    kube_config_invalidate_credentials(cfg);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "third!");
    kube_config_free(cfg);
}

static void token_file_errors_name_the_user_and_file(void **state)
{
    struct fixture *fx = *state;
    char want[512];
    write_file(
        fx, "config",
        CLUSTER_LOCAL
        "users:\n- name: admin\n  user:\n    tokenFile: missing-token\n" CONTEXT_LOCAL_ADMIN);
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": tokenFile %s: cannot read: No such file or directory",
             path_in(fx, "config"), path_in(fx, "missing-token"));
    assert_string_equal(load_error(fx, "config", TELO_EIO), want);

    write_file(fx, "empty-token", " \n");
    write_file(fx, "config",
               CLUSTER_LOCAL
               "users:\n- name: admin\n  user:\n    tokenFile: empty-token\n" CONTEXT_LOCAL_ADMIN);
    snprintf(want, sizeof(want), "kubeconfig %s: user \"admin\": tokenFile %s is empty",
             path_in(fx, "config"), path_in(fx, "empty-token"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    /* Deleted after start-up: the next refresh reports it. */
    write_file(fx, "token", "t");
    write_file(fx, "config",
               CLUSTER_LOCAL
               "users:\n- name: admin\n  user:\n    tokenFile: token\n" CONTEXT_LOCAL_ADMIN);
    struct kube_config *cfg = load_explicit(fx, "config");
    assert_int_equal(unlink(path_in(fx, "token")), 0);
    kube_config_invalidate_credentials(cfg);
    const char *token = "x";
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_EIO);
    assert_null(token);
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": tokenFile %s: cannot read: No such file or directory",
             path_in(fx, "config"), path_in(fx, "token"));
    assert_string_equal(err.msg, want);
    kube_config_free(cfg);
}

static void token_wins_over_token_file(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               CLUSTER_LOCAL "users:\n- name: admin\n  user:\n    token: inline\n"
                             "    tokenFile: does-not-exist\n" CONTEXT_LOCAL_ADMIN);
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "inline");
    kube_config_free(cfg);
}

/* ---- file selection and merging ---- */

static void kubeconfig_list_merges_first_definition_wins(void **state)
{
    struct fixture *fx = *state;
    /* a: no current-context, defines cluster "shared" first. */
    write_file(fx, "a",
               "clusters:\n- name: shared\n  cluster: {server: https://a.example}\n"
               "users:\n- name: u\n  user: {token: from-a}\n");
    /* b: sets current-context, redefines cluster "shared" and user "u", defines the context. */
    write_file(fx, "b",
               "current-context: bctx\n"
               "clusters:\n- name: shared\n  cluster: {server: https://b.example}\n"
               "users:\n- name: u\n  user: {token: from-b}\n"
               "contexts:\n- name: bctx\n  context: {cluster: shared, user: u, "
               "namespace: nb}\n");
    /* c: a later current-context is ignored. */
    write_file(fx, "c", "current-context: other\n");
    char list[1024];
    snprintf(list, sizeof(list), "%s::%s:%s:%s", path_in(fx, "a"), path_in(fx, "missing"),
             path_in(fx, "b"), path_in(fx, "c"));
    struct kube_config_options opts = {.env_kubeconfig = list, .home = fx->dir};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://a.example");
    assert_string_equal(cfg->namespace, "nb");
    const char *token = NULL;
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "from-a");
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s (context \"bctx\")", path_in(fx, "b"));
    assert_string_equal(cfg->source, want);
    kube_config_free(cfg);
}

static void context_override_selects_another_context(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "current-context: one\n"
               "clusters:\n- name: c1\n  cluster: {server: https://one}\n"
               "- name: c2\n  cluster: {server: 'http://two:8080'}\n"
               "contexts:\n- name: one\n  context: {cluster: c1}\n"
               "- name: two\n  context: {cluster: c2, namespace: ns2}\n");
    struct kube_config_options opts = {.kubeconfig = path_in(fx, "config"), .context = "two"};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    assert_string_equal(cfg->server, "http://two:8080");
    assert_string_equal(cfg->namespace, "ns2");
    kube_config_free(cfg);

    opts.context = "three";
    cfg = NULL;
    assert_int_equal(kube_config_load(&opts, &cfg, &err), -TELO_EINVAL);
    assert_null(cfg);
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s: context \"three\" not found",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);
}

static void explicit_kubeconfig_beats_env_and_must_exist(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "env",
               CLUSTER_LOCAL "contexts:\n- name: c\n  context: {cluster: local}\n"
                             "current-context: c\n");
    write_file(fx, "explicit",
               "clusters:\n- name: x\n  cluster: {server: https://explicit}\n"
               "contexts:\n- name: c\n  context: {cluster: x}\n"
               "current-context: c\n");
    struct kube_config_options opts = {.kubeconfig = path_in(fx, "explicit"),
                                       .env_kubeconfig = path_in(fx, "env")};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://explicit");
    kube_config_free(cfg);

    opts.kubeconfig = path_in(fx, "nope");
    cfg = NULL;
    assert_int_equal(kube_config_load(&opts, &cfg, &err), -TELO_EINVAL);
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s: cannot read: No such file or directory",
             path_in(fx, "nope"));
    assert_string_equal(err.msg, want);
}

static void home_kube_config_is_the_fallback(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, ".kube/config",
               CLUSTER_LOCAL "contexts:\n- name: c\n  context: {cluster: "
                             "local}\ncurrent-context: c\n");
    /* An in-cluster environment is ignored when a kubeconfig exists. */
    write_file(fx, "sa/token", "sa-token");
    struct kube_config_options opts = {.home = fx->dir,
                                       .in_cluster_dir = path_in(fx, "sa"),
                                       .in_cluster_host = "10.0.0.1",
                                       .in_cluster_port = "443"};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    kube_config_free(cfg);
}

/* kube_config_load_env reads $KUBECONFIG and $HOME itself; flags win over both. */
static void load_env_reads_the_environment(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, ".kube/config",
               CLUSTER_LOCAL "contexts:\n- name: c\n  context: {cluster: "
                             "local}\ncurrent-context: c\n");
    write_file(fx, "env.yaml",
               "clusters:\n- name: e\n  cluster: {server: 'https://10.0.0.9:6443'}\n"
               "contexts:\n- name: e\n  context: {cluster: e}\n"
               "- name: other\n  context: {cluster: e, namespace: other}\n"
               "current-context: e\n");
    const char *home = getenv("HOME"), *kc = getenv("KUBECONFIG");
    char *saved_home = home ? strdup(home) : NULL;
    char *saved_kc = kc ? strdup(kc) : NULL;
    assert_int_equal(setenv("HOME", fx->dir, 1), 0);
    assert_int_equal(unsetenv("KUBECONFIG"), 0);
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load_env(NULL, NULL, &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    kube_config_free(cfg);

    assert_int_equal(setenv("KUBECONFIG", path_in(fx, "env.yaml"), 1), 0);
    cfg = NULL;
    assert_int_equal(kube_config_load_env(NULL, "other", &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://10.0.0.9:6443");
    assert_string_equal(cfg->namespace, "other");
    kube_config_free(cfg);

    cfg = NULL;
    assert_int_equal(kube_config_load_env(path_in(fx, ".kube/config"), NULL, &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    kube_config_free(cfg);

    if (saved_home)
        setenv("HOME", saved_home, 1);
    else
        unsetenv("HOME");
    if (saved_kc)
        setenv("KUBECONFIG", saved_kc, 1);
    else
        unsetenv("KUBECONFIG");
    free(saved_home);
    free(saved_kc);
}

static void nothing_found_is_an_error(void **state)
{
    struct fixture *fx = *state;
    char list[600];
    snprintf(list, sizeof(list), "%s:%s", path_in(fx, "x"), path_in(fx, "y"));
    struct kube_config_options opts = {.env_kubeconfig = list,
                                       .home = fx->dir,
                                       .in_cluster_dir = path_in(fx, "no-sa"),
                                       .in_cluster_host = "10.0.0.1",
                                       .in_cluster_port = "443"};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), -TELO_EINVAL);
    assert_null(cfg);
    assert_string_equal(err.msg,
                        "no kubeconfig: set KUBECONFIG, pass --kubeconfig or run in a cluster");
}

/* ---- in-cluster ---- */

static void in_cluster_reads_the_service_account(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "sa/token", "sa-token-1\n");
    set_mtime(fx, "sa/token", 1000000);
    write_file(fx, "sa/ca.crt", "-----BEGIN CERTIFICATE-----\n");
    write_file(fx, "sa/namespace", "telo-system\n");
    struct kube_config_options opts = {.home = path_in(fx, "no-home"),
                                       .in_cluster_dir = path_in(fx, "sa"),
                                       .in_cluster_host = "10.96.0.1",
                                       .in_cluster_port = "443"};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    assert_string_equal(cfg->source, "in-cluster");
    assert_string_equal(cfg->server, "https://10.96.0.1:443");
    assert_string_equal(cfg->ca_file, path_in(fx, "sa/ca.crt"));
    assert_string_equal(cfg->namespace, "telo-system");
    const char *token = NULL;
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "sa-token-1");

    /* The kubelet rotates the token: an mtime change is noticed on the next call. */
    write_file(fx, "sa/token", "sa-token-2\n");
    set_mtime(fx, "sa/token", 1000100);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "sa-token-2");

    /* Same size and mtime: re-read only after a 401 invalidates the cache. */
    write_file(fx, "sa/token", "sa-token-3\n");
    set_mtime(fx, "sa/token", 1000100);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "sa-token-2");
    kube_config_invalidate_credentials(cfg);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "sa-token-3");
    kube_config_free(cfg);
}

static void in_cluster_ipv6_host_and_defaults(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "sa/token", "t");
    struct kube_config_options opts = {.in_cluster_dir = path_in(fx, "sa"),
                                       .in_cluster_host = "fd00::1",
                                       .in_cluster_port = "6443"};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    assert_string_equal(cfg->server, "https://[fd00::1]:6443");
    assert_string_equal(cfg->namespace, "default");
    assert_null(cfg->ca_file);
    kube_config_free(cfg);
}

static void in_cluster_needs_host_and_port(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "sa/token", "t");
    struct kube_config_options opts = {.in_cluster_dir = path_in(fx, "sa"),
                                       .in_cluster_host = "10.0.0.1"};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), -TELO_EINVAL);
    assert_string_equal(err.msg,
                        "no kubeconfig: set KUBECONFIG, pass --kubeconfig or run in a cluster");
}

/* ---- validation ---- */

static void context_with_missing_cluster(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "contexts:\n- name: ctx\n  context: {cluster: gone, user: admin}\n"
               "current-context: ctx\n");
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s: context \"ctx\": cluster \"gone\" not found",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void context_with_missing_user(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config", CLUSTER_LOCAL CONTEXT_LOCAL_ADMIN);
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s: context \"ctx\": user \"admin\" not found",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void cluster_without_server(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "clusters:\n- name: local\n  cluster:\n    insecure-skip-tls-verify: "
               "true\n"
               "users:\n- name: admin\n  user: {token: t}\n" CONTEXT_LOCAL_ADMIN);
    char want[300];
    snprintf(want, sizeof(want), "kubeconfig %s: cluster \"local\": server is not set",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void server_must_be_an_http_url(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "clusters:\n- name: local\n  cluster: {server: '127.0.0.1:6443'}\n"
               "users:\n- name: admin\n  user: {token: t}\n" CONTEXT_LOCAL_ADMIN);
    char want[300];
    snprintf(want, sizeof(want),
             "kubeconfig %s: cluster \"local\": server \"127.0.0.1:6443\" is not an http(s) URL",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void bad_base64_names_the_field(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               CLUSTER_LOCAL "users:\n- name: admin\n  user:\n"
                             "    client-certificate-data: " CERT_B64 "\n"
                             "    client-key-data: 'not base64!'\n" CONTEXT_LOCAL_ADMIN);
    char want[300];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": client-key-data is not valid base64",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    /* Missing padding is rejected too, as Go's StdEncoding does. */
    write_file(fx, "config",
               "clusters:\n- name: local\n  cluster:\n"
               "    server: https://127.0.0.1:6443\n"
               "    certificate-authority-data: LS0tLS1LRVktLS0tLQo\n"
               "users:\n- name: admin\n  user: {token: t}\n" CONTEXT_LOCAL_ADMIN);
    snprintf(want, sizeof(want),
             "kubeconfig %s: cluster \"local\": certificate-authority-data is not valid base64",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void certificate_without_key_and_key_without_certificate(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               CLUSTER_LOCAL "users:\n- name: admin\n  user:\n"
                             "    client-certificate: admin.crt\n" CONTEXT_LOCAL_ADMIN);
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": client certificate given without a client key (set "
             "client-key or client-key-data)",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    write_file(fx, "config",
               CLUSTER_LOCAL "users:\n- name: admin\n  user:\n"
                             "    client-key-data: " KEY_B64 "\n" CONTEXT_LOCAL_ADMIN);
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": client key given without a client certificate (set "
             "client-certificate or client-certificate-data)",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void malformed_yaml_reports_line_and_column(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               "clusters:\n- name: local\n  cluster: [unterminated\n"
               "current-context: x\n");
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: invalid YAML at line 4 column 16: did not find expected ',' or ']' "
             "while parsing a flow sequence",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void wrong_shapes_are_reported(void **state)
{
    struct fixture *fx = *state;
    char want[400];
    write_file(fx, "config", "- just\n- a list\n");
    snprintf(want, sizeof(want), "kubeconfig %s: top level is not a mapping",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    write_file(fx, "config", "clusters: {local: {server: https://x}}\ncurrent-context: c\n");
    snprintf(want, sizeof(want), "kubeconfig %s: contexts is not a list", path_in(fx, "config"));
    write_file(fx, "config", "contexts: oops\ncurrent-context: c\n");
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    write_file(fx, "config", "contexts:\n- context: {cluster: a}\ncurrent-context: c\n");
    snprintf(want, sizeof(want), "kubeconfig %s: contexts[0] has no name", path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    write_file(fx, "config",
               "clusters:\n- name: local\n  cluster:\n"
               "    server: https://x\n    insecure-skip-tls-verify: maybe\n"
               "contexts:\n- name: c\n  context: {cluster: local}\n"
               "current-context: c\n");
    snprintf(want, sizeof(want),
             "kubeconfig %s: cluster \"local\": insecure-skip-tls-verify must be true or false",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void no_current_context(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config", CLUSTER_LOCAL);
    char want[300];
    snprintf(want, sizeof(want),
             "kubeconfig %s: current-context is not set and no context was given",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

/* ---- exec plugins ---- */

/* A kubeconfig whose user runs ./plugin (relative to the kubeconfig) with the given API version
 * and extra exec fields. */
static void write_exec_config(struct fixture *fx, const char *api, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "clusters:\n- name: local\n  cluster:\n    server: https://127.0.0.1:6443\n"
             "    certificate-authority-data: " CERT_B64 "\n"
             "    tls-server-name: api.local\n"
             "users:\n- name: admin\n  user:\n    exec:\n"
             "      apiVersion: %s\n"
             "      command: ./plugin\n"
             "%s" CONTEXT_LOCAL_ADMIN,
             api, extra);
    write_file(fx, "config", text);
}

/* A plugin that logs each run to runs, then prints an ExecCredential. */
static void write_credential_plugin(struct fixture *fx, const char *api, const char *status)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "#!/bin/sh\n"
             "echo run >> \"$(dirname \"$0\")/runs\"\n"
             "cat <<'JSON'\n"
             "{\"apiVersion\": \"%s\", \"kind\": \"ExecCredential\", \"status\": %s}\n"
             "JSON\n",
             api, status);
    write_script(fx, "plugin", text);
}

static void exec_v1_token_is_cached_until_invalidated(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1", "      interactiveMode: Never\n");
    write_credential_plugin(fx, "client.authentication.k8s.io/v1",
                            "{\"token\": \"exec-token\", "
                            "\"expirationTimestamp\": \"2999-01-01T00:00:00+02:00\"}");
    struct kube_config *cfg = load_explicit(fx, "config");
    assert_int_equal(count_lines(fx, "runs"), 0); /* loading does not run the plugin */
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "exec-token");
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "exec-token");
    assert_int_equal(count_lines(fx, "runs"), 1);
    kube_config_invalidate_credentials(cfg);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_int_equal(count_lines(fx, "runs"), 2);
    kube_config_free(cfg);
}

static void exec_expired_token_is_refreshed(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1beta1", "");
    write_credential_plugin(fx, "client.authentication.k8s.io/v1beta1",
                            "{\"token\": \"old\", "
                            "\"expirationTimestamp\": \"2001-02-03T04:05:06.789Z\"}");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "old");
    assert_int_equal(count_lines(fx, "runs"), 1);
    write_credential_plugin(
        fx, "client.authentication.k8s.io/v1beta1",
        "{\"token\": \"new\", \"expirationTimestamp\": \"2999-01-01T00:00:00Z\"}");
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "new");
    assert_int_equal(count_lines(fx, "runs"), 2);
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_int_equal(count_lines(fx, "runs"), 2);
    kube_config_free(cfg);
}

static void exec_gets_args_env_and_exec_info(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1",
                      "      args: [--region, eu-west-1]\n"
                      "      env:\n      - name: PLUGIN_MODE\n        value: test\n"
                      "      provideClusterInfo: true\n");
    write_script(fx, "plugin",
                 "#!/bin/sh\n"
                 "dir=$(dirname \"$0\")\n"
                 "echo \"$*\" > \"$dir/args\"\n"
                 "echo \"$PLUGIN_MODE\" > \"$dir/mode\"\n"
                 "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$dir/info\"\n"
                 "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",'\n"
                 "echo '\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(token, "t");
    assert_string_equal(slurp(fx, "args"), "--region eu-west-1\n");
    assert_string_equal(slurp(fx, "mode"), "test\n");
    assert_string_equal(slurp(fx, "info"),
                        "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
                        "\"ExecCredential\",\"spec\":{\"interactive\":false,\"cluster\":{"
                        "\"server\":\"https://127.0.0.1:6443\",\"tls-server-name\":\"api.local\","
                        "\"certificate-authority-data\":\"" CERT_B64 "\"}}}");
    kube_config_free(cfg);
}

static void exec_without_cluster_info(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1beta1", "");
    write_script(fx, "plugin",
                 "#!/bin/sh\n"
                 "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$(dirname \"$0\")/info\"\n"
                 "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",'\n"
                 "echo '\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_string_equal(slurp(fx, "info"),
                        "{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":"
                        "\"ExecCredential\",\"spec\":{\"interactive\":false}}");
    kube_config_free(cfg);
}

static void exec_client_certificate(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1", "");
    write_credential_plugin(fx, "client.authentication.k8s.io/v1",
                            "{\"clientCertificateData\": \"-----CERT-----\\n\", "
                            "\"clientKeyData\": \"-----KEY-----\\n\"}");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = "x", *cert = NULL, *key = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_client_cert(cfg, &cert, &key, &err), 0);
    assert_string_equal(cert, "-----CERT-----\n");
    assert_string_equal(key, "-----KEY-----\n");
    assert_int_equal(kube_config_token(cfg, &token, &err), 0);
    assert_null(token);
    assert_int_equal(count_lines(fx, "runs"), 1);
    kube_config_free(cfg);
}

static void exec_failure_reports_exit_status_and_stderr(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1", "");
    write_script(fx, "plugin",
                 "#!/bin/sh\necho 'noise' >&2\n"
                 "echo 'error: SSO session expired, run aws sso login' >&2\n"
                 "exit 3\n");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = "x";
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_EIO);
    assert_null(token);
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin exited with status 3: noise "
             "error: SSO session expired, run aws sso login",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);
    kube_config_free(cfg);
}

static void exec_command_not_found_shows_install_hint(void **state)
{
    struct fixture *fx = *state;
    write_file(fx, "config",
               CLUSTER_LOCAL "users:\n- name: admin\n  user:\n    exec:\n"
                             "      apiVersion: client.authentication.k8s.io/v1\n"
                             "      command: telo-no-such-plugin\n"
                             "      installHint: install it with brew\n" CONTEXT_LOCAL_ADMIN);
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = "x";
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_ENOTFOUND);
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin: executable telo-no-such-plugin not "
             "found: install it with brew",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);
    kube_config_free(cfg);
}

static void exec_wrong_api_version_and_bad_json(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1", "");
    write_credential_plugin(fx, "client.authentication.k8s.io/v1beta1", "{\"token\": \"t\"}");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = "x";
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_EPROTO);
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin: is configured to use API "
             "version client.authentication.k8s.io/v1, plugin returned version "
             "client.authentication.k8s.io/v1beta1",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);

    write_script(fx, "plugin", "#!/bin/sh\necho '{\"apiVersion\": '\n");
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_EPROTO);
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin: output is not an "
             "ExecCredential JSON object",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);

    write_credential_plugin(fx, "client.authentication.k8s.io/v1", "{}");
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_EPROTO);
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin: did not return a token or "
             "cert/key pair",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);

    write_credential_plugin(fx, "client.authentication.k8s.io/v1",
                            "{\"token\": \"t\", \"expirationTimestamp\": \"tomorrow\"}");
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_EPROTO);
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin: expirationTimestamp "
             "\"tomorrow\" is not RFC 3339",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);
    kube_config_free(cfg);
}

static void exec_timeout_kills_the_plugin(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1", "");
    write_script(fx, "plugin", "#!/bin/sh\nexec sleep 10\n");
    struct kube_config_options opts = {.kubeconfig = path_in(fx, "config"), .exec_timeout_ms = 200};
    struct kube_config *cfg = NULL;
    struct telo_err err = {0};
    assert_int_equal(kube_config_load(&opts, &cfg, &err), 0);
    const char *token = "x";
    time_t start = time(NULL);
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_ETIMEDOUT);
    assert_true(time(NULL) - start < 5);
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin timed out after 200 ms",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);
    kube_config_free(cfg);
}

static void exec_output_is_bounded(void **state)
{
    struct fixture *fx = *state;
    write_exec_config(fx, "client.authentication.k8s.io/v1", "");
    write_script(fx, "plugin", "#!/bin/sh\nhead -c 2000000 /dev/zero | tr '\\0' x\n");
    struct kube_config *cfg = load_explicit(fx, "config");
    const char *token = "x";
    struct telo_err err = {0};
    assert_int_equal(kube_config_token(cfg, &token, &err), -TELO_ETOOBIG);
    char want[400];
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec plugin ./plugin wrote more than 1048576 bytes",
             path_in(fx, "config"));
    assert_string_equal(err.msg, want);
    kube_config_free(cfg);
}

static void exec_config_validation(void **state)
{
    struct fixture *fx = *state;
    char want[400];
    write_exec_config(fx, "client.authentication.k8s.io/v1alpha1", "");
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec.apiVersion \"client.authentication.k8s.io/"
             "v1alpha1\" is not supported (use client.authentication.k8s.io/v1 or "
             "client.authentication.k8s.io/v1beta1)",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    write_exec_config(fx, "client.authentication.k8s.io/v1", "      interactiveMode: Always\n");
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec.interactiveMode is Always but no terminal is "
             "available",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);

    write_exec_config(fx, "client.authentication.k8s.io/v1", "      env:\n      - value: x\n");
    snprintf(want, sizeof(want),
             "kubeconfig %s: user \"admin\": exec.env[0] needs a name and a string value",
             path_in(fx, "config"));
    assert_string_equal(load_error(fx, "config", TELO_EINVAL), want);
}

static void free_null_is_a_noop(void **state)
{
    (void)state;
    kube_config_free(NULL);
    kube_config_invalidate_credentials(NULL);
}

/* kube_config_parse reads a document from memory as kube_config_load reads the file: relative
 * paths against the named path's directory, the exec section parsed but not run. */
static void parse_from_memory(void **state)
{
    (void)state;
    const char *text =
        "current-context: dev\n"
        "clusters:\n"
        "- name: dev\n"
        "  cluster: {server: \"https://127.0.0.1:6443/\", certificate-authority: ca.crt}\n"
        "contexts:\n"
        "- name: dev\n"
        "  context: {cluster: dev, user: eks, namespace: team-a}\n"
        "users:\n"
        "- name: eks\n"
        "  user:\n"
        "    exec:\n"
        "      apiVersion: client.authentication.k8s.io/v1\n"
        "      command: telo-no-such-plugin\n"
        "      args: [a, b]\n";
    struct kube_config *cfg = NULL;
    struct telo_err err;
    assert_int_equal(kube_config_parse("/etc/kube/config", text, strlen(text), NULL, 0, &cfg, &err),
                     0);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    assert_string_equal(cfg->namespace, "team-a");
    assert_string_equal(cfg->ca_file, "/etc/kube/ca.crt");
    assert_non_null(strstr(cfg->source, "/etc/kube/config"));
    kube_config_free(cfg);

    cfg = NULL;
    assert_int_equal(kube_config_parse("/k", "current-context: [x]\n", 20, NULL, 0, &cfg, &err),
                     -TELO_EINVAL);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "current-context must be a string"));
}

/* An ExecCredential whose members are null or of the wrong type is refused by name, never read
 * as text ("5") or passed on as NULL. */
static void exec_credential_mistyped_members(void **state)
{
    (void)state;
    const char *v1 = "client.authentication.k8s.io/v1";
    struct {
        const char *text;
        const char *want;
    } cases[] = {
        {"{\"apiVersion\":null,\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}",
         "plugin returned version (none)"},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":7,\"status\":{\"token\":"
         "\"t\"}}",
         "returned kind (none)"},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":null}",
         "did not return a status field"},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":null,\"clientCertificateData\":5}}",
         "did not return a token or cert/key pair"},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"2026-13-01T00:00:00Z\"}}",
         "is not RFC 3339"},
        {"[1]", "output is not an ExecCredential JSON object"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kube_exec_credential c;
        struct telo_err err;
        assert_int_equal(kube_exec_credential_parse("user \"u\"", "p", v1, cases[i].text, &c, &err),
                         -TELO_EPROTO);
        assert_null(c.token);
        assert_null(c.cert_pem);
        if (!strstr(err.msg, cases[i].want))
            fail_msg("case %zu: %s", i, err.msg);
    }
    struct kube_exec_credential c;
    struct telo_err err;
    const char *ok = "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
                     "\"ExecCredential\",\"status\":{\"token\":\"tok\",\"expirationTimestamp\":"
                     "\"1970-01-01T00:01:40Z\",\"clientKeyData\":null}}";
    assert_int_equal(kube_exec_credential_parse("u", "p", v1, ok, &c, &err), 0);
    assert_string_equal(c.token, "tok");
    assert_null(c.cert_pem);
    assert_int_equal((long long)c.expiry, 100);
    kube_exec_credential_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(static_token_and_cluster_fields),
        T(namespace_defaults_and_anonymous_user),
        T(certificate_data_is_decoded),
        T(relative_paths_resolve_against_the_defining_file),
        T(token_file_is_read_and_reread_when_it_changes),
        T(token_file_errors_name_the_user_and_file),
        T(token_wins_over_token_file),
        T(kubeconfig_list_merges_first_definition_wins),
        T(context_override_selects_another_context),
        T(explicit_kubeconfig_beats_env_and_must_exist),
        T(home_kube_config_is_the_fallback),
        T(load_env_reads_the_environment),
        T(nothing_found_is_an_error),
        T(in_cluster_reads_the_service_account),
        T(in_cluster_ipv6_host_and_defaults),
        T(in_cluster_needs_host_and_port),
        T(context_with_missing_cluster),
        T(context_with_missing_user),
        T(cluster_without_server),
        T(server_must_be_an_http_url),
        T(bad_base64_names_the_field),
        T(certificate_without_key_and_key_without_certificate),
        T(malformed_yaml_reports_line_and_column),
        T(wrong_shapes_are_reported),
        T(no_current_context),
        T(exec_v1_token_is_cached_until_invalidated),
        T(exec_expired_token_is_refreshed),
        T(exec_gets_args_env_and_exec_info),
        T(exec_without_cluster_info),
        T(exec_client_certificate),
        T(exec_failure_reports_exit_status_and_stderr),
        T(exec_command_not_found_shows_install_hint),
        T(exec_wrong_api_version_and_bad_json),
        T(exec_timeout_kills_the_plugin),
        T(exec_output_is_bounded),
        T(exec_config_validation),
        T(free_null_is_a_noop),
        T(parse_from_memory),
        T(exec_credential_mistyped_members),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

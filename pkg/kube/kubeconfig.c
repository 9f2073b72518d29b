/* Kubeconfig files: reading and merging them as clientcmd does, and building a kube_config from
 * one of their contexts (cluster, user and the user's credentials). */
#include "kube/kubeconfig.h"

#include "kube/config.h"
#include "kube/execcred.h"
#include "util/base64.h"
#include "util/err.h"
#include "util/file.h"
#include "util/str.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_FILE_SIZE (4u << 20)

/* Joins a path found in a kubeconfig to the directory of that kubeconfig, as clientcmd's
 * ResolvePaths does; absolute paths are kept. */
static char *resolve_path(const char *dir, const char *path)
{
    if (path[0] == '/' || !dir)
        return strdup(path);
    return util_str_printf("%s/%s", dir, path);
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return util_str_printf("%.*s", (int)(slash - path), path);
}

/* ---- kubeconfig documents ---- */

struct kc_file {
    char *path;
    char *dir;
    int has_root;
    yaml_document_t doc;
};

struct kube_kubeconfig {
    struct kc_file *files;
    size_t n;
    char *paths; /* "a:b" for messages that concern the merged set */
};

static void kc_set_release(struct kube_kubeconfig *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++) {
        free(set->files[i].path);
        free(set->files[i].dir);
        yaml_document_delete(&set->files[i].doc);
    }
    free(set->files);
    free(set->paths);
    memset(set, 0, sizeof(*set));
}

static yaml_node_t *kc_root(struct kc_file *f)
{
    return f->has_root ? yaml_document_get_root_node(&f->doc) : NULL;
}

static yaml_node_t *map_get(struct kc_file *f, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(&f->doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
            memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
            return yaml_document_get_node(&f->doc, p->value);
    }
    return NULL;
}

/* YAML's null: an absent value, "~", "null" or an empty plain scalar. */
static int is_null(yaml_node_t *n)
{
    if (!n)
        return 1;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *v = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    return len == 0 || (len == 1 && v[0] == '~') ||
           (len == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) || !memcmp(v, "NULL", 4)));
}

/* The scalar value of key in map, or NULL when absent, null or empty. Sets *wrong_type when the
 * value is a list or mapping. The pointer is owned by the document (libyaml NUL-terminates
 * scalars). */
static const char *map_str(struct kc_file *f, yaml_node_t *map, const char *key, int *wrong_type)
{
    yaml_node_t *n = map_get(f, map, key);
    *wrong_type = 0;
    if (is_null(n))
        return NULL;
    if (n->type != YAML_SCALAR_NODE) {
        *wrong_type = 1;
        return NULL;
    }
    return (const char *)n->data.scalar.value;
}

static int load_yaml(const char *path, const char *text, size_t len, struct kc_file *f,
                     struct telo_err *err)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = 0;
    if (!yaml_parser_load(&parser, &f->doc)) {
        /* libyaml counts lines and columns from 0. */
        const char *problem = parser.problem ? parser.problem : "parse error";
        if (parser.context)
            rc = telo_err_set(err, TELO_EINVAL,
                              "kubeconfig %s: invalid YAML at line %zu column %zu: %s %s", path,
                              parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem,
                              parser.context);
        else
            rc = telo_err_set(
                err, TELO_EINVAL, "kubeconfig %s: invalid YAML at line %zu column %zu: %s", path,
                parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem);
        if (parser.error == YAML_MEMORY_ERROR)
            rc = telo_err_oom(err, KUBE_CONFIG_LOADING);
        yaml_parser_delete(&parser);
        return rc;
    }
    yaml_parser_delete(&parser);
    yaml_node_t *root = yaml_document_get_root_node(&f->doc);
    f->has_root = root != NULL && !is_null(root);
    if (f->has_root && root->type != YAML_MAPPING_NODE) {
        yaml_document_delete(&f->doc);
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: top level is not a mapping", path);
    }
    return 0;
}

static int kc_set_add_text(struct kube_kubeconfig *set, const char *path, const char *text,
                           size_t len, struct telo_err *err);

/* Loads path into the set. Missing files are skipped unless required. */
static int kc_set_add(struct kube_kubeconfig *set, const char *path, int required,
                      struct telo_err *err)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->files[i].path, path) == 0)
            return 0; /* clientcmd de-duplicates KUBECONFIG entries */
    char *text = NULL;
    size_t len = 0;
    const char *why;
    int rc = util_file_read(path, MAX_FILE_SIZE, &text, &len, &why);
    if (rc == -TELO_ENOTFOUND && !required)
        return 0;
    if (rc == -TELO_ENOMEM)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (rc < 0)
        return telo_err_set(err, rc == -TELO_ENOTFOUND ? TELO_EINVAL : -rc,
                            "kubeconfig %s: cannot read: %s", path, why);
    rc = kc_set_add_text(set, path, text, len, err);
    free(text);
    return rc;
}

/* Adds the kubeconfig text (len bytes, read from path) to the set. */
static int kc_set_add_text(struct kube_kubeconfig *set, const char *path, const char *text,
                           size_t len, struct telo_err *err)
{
    struct kc_file *files = realloc(set->files, (set->n + 1) * sizeof(*files));
    if (!files)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    set->files = files;
    struct kc_file *f = &files[set->n];
    memset(f, 0, sizeof(*f));
    int rc = load_yaml(path, text, len, f, err);
    if (rc < 0)
        return rc;
    f->path = strdup(path);
    f->dir = dir_of(path);
    if (!f->path || !f->dir) {
        free(f->path);
        free(f->dir);
        yaml_document_delete(&f->doc);
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    set->n++;
    return 0;
}

/* Finds the entry called name in the list `section` ("clusters", "users", "contexts") across the
 * files in order: the first file to define a name wins, as in clientcmd's merge. On success sets
 * *file and *entry (the inner "cluster"/"user"/"context" mapping, possibly NULL when empty) and
 * returns 1; returns 0 when not found, or a negative code for a malformed list. */
static int kc_find(struct kube_kubeconfig *set, const char *section, const char *inner,
                   const char *name, struct kc_file **file, yaml_node_t **entry,
                   struct telo_err *err)
{
    for (size_t i = 0; i < set->n; i++) {
        struct kc_file *f = &set->files[i];
        yaml_node_t *list = map_get(f, kc_root(f), section);
        if (is_null(list))
            continue;
        if (list->type != YAML_SEQUENCE_NODE)
            return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: %s is not a list", f->path,
                                section);
        size_t idx = 0;
        for (yaml_node_item_t *it = list->data.sequence.items.start;
             it < list->data.sequence.items.top; it++, idx++) {
            yaml_node_t *item = yaml_document_get_node(&f->doc, *it);
            int wrong;
            const char *n = map_str(f, item, "name", &wrong);
            if (!item || item->type != YAML_MAPPING_NODE || wrong || !n)
                return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: %s[%zu] has no name", f->path,
                                    section, idx);
            if (strcmp(n, name) != 0)
                continue;
            yaml_node_t *body = map_get(f, item, inner);
            if (!is_null(body) && body->type != YAML_MAPPING_NODE)
                return telo_err_set(err, TELO_EINVAL,
                                    "kubeconfig %s: %s \"%s\": %s is not a mapping", f->path, inner,
                                    name, inner);
            *file = f;
            *entry = is_null(body) ? NULL : body;
            return 1;
        }
    }
    return 0;
}

/* Fetches an optional string field of an entry, failing on lists and mappings. */
static int entry_str(struct kc_file *f, yaml_node_t *entry, const char *kind, const char *name,
                     const char *key, const char **out, struct telo_err *err)
{
    int wrong;
    *out = map_str(f, entry, key, &wrong);
    if (!wrong)
        return 0;
    /* f is the file kc_find found the entry in. The analyzer cannot see that kc_find's errors
     * (telo_err_set, in another file) are negative, so it tries a failed kc_find with f NULL. */
    const char *path = f->path; // NOLINT(clang-analyzer-core.NullDereference): see above
    return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: %s \"%s\": %s must be a string", path,
                        kind, name, key);
}

static int entry_bool(struct kc_file *f, yaml_node_t *entry, const char *kind, const char *name,
                      const char *key, int *out, struct telo_err *err)
{
    const char *v;
    int rc = entry_str(f, entry, kind, name, key, &v, err);
    if (rc < 0)
        return rc;
    *out = 0;
    if (!v || !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE"))
        return 0;
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE")) {
        *out = 1;
        return 0;
    }
    return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: %s \"%s\": %s must be true or false",
                        f->path, kind, name, key);
}

static int decode_field(struct kc_file *f, const char *kind, const char *name, const char *key,
                        const char *value, char **out, size_t *len, struct telo_err *err)
{
    int bad;
    size_t n = 0;
    *out = (char *)util_base64_decode_std(value, strlen(value), &n, &bad);
    if (bad)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: %s \"%s\": %s is not valid base64",
                            f->path, kind, name, key);
    if (!*out)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (len)
        *len = n;
    return 0;
}

/* ---- exec plugin configuration ---- */

/* Checks the exec section's scalar fields as clientcmd does; sets *provide from
 * provideClusterInfo. */
static int check_exec(struct kc_file *f, const char *user, yaml_node_t *node, const char **api,
                      const char **command, const char **hint, int *provide, struct telo_err *err)
{
    if (node->type != YAML_MAPPING_NODE)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: user \"%s\": exec is not a mapping",
                            f->path, user);
    const char *mode;
    int rc;
    if ((rc = entry_str(f, node, "user", user, "apiVersion", api, err)) < 0 ||
        (rc = entry_str(f, node, "user", user, "command", command, err)) < 0 ||
        (rc = entry_str(f, node, "user", user, "installHint", hint, err)) < 0 ||
        (rc = entry_str(f, node, "user", user, "interactiveMode", &mode, err)) < 0 ||
        (rc = entry_bool(f, node, "user", user, "provideClusterInfo", provide, err)) < 0)
        return rc;
    if (!*command)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: user \"%s\": exec.command is not set",
                            f->path, user);
    if (!*api)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": exec.apiVersion is not set", f->path,
                            user);
    if (strcmp(*api, KUBE_EXEC_API_V1) != 0 && strcmp(*api, KUBE_EXEC_API_V1BETA1) != 0)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": exec.apiVersion \"%s\" is not supported "
                            "(use " KUBE_EXEC_API_V1 " or " KUBE_EXEC_API_V1BETA1 ")",
                            f->path, user, *api);
    if (mode && strcmp(mode, "Never") != 0 && strcmp(mode, "IfAvailable") != 0 &&
        strcmp(mode, "Always") != 0)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": exec.interactiveMode \"%s\" is not one of "
                            "Never, IfAvailable, Always",
                            f->path, user, mode);
    /* An operator has no terminal: a plugin that insists on one can never work here. */
    if (mode && !strcmp(mode, "Always"))
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": exec.interactiveMode is Always but no "
                            "terminal is available",
                            f->path, user);
    return 0;
}

/* Adds the exec section's args and env to ec. */
static int exec_lists(struct kc_file *f, const char *user, yaml_node_t *node,
                      struct kube_execcred *ec, struct telo_err *err)
{
    yaml_node_t *args = map_get(f, node, "args");
    yaml_node_t *env = map_get(f, node, "env");
    if (!is_null(args) && args->type != YAML_SEQUENCE_NODE)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: user \"%s\": exec.args is not a list",
                            f->path, user);
    if (!is_null(env) && env->type != YAML_SEQUENCE_NODE)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: user \"%s\": exec.env is not a list",
                            f->path, user);
    size_t nargs = is_null(args)
                       ? 0
                       : (size_t)(args->data.sequence.items.top - args->data.sequence.items.start);
    size_t nenv =
        is_null(env) ? 0 : (size_t)(env->data.sequence.items.top - env->data.sequence.items.start);
    for (size_t i = 0; i < nargs; i++) {
        yaml_node_t *a = yaml_document_get_node(&f->doc, args->data.sequence.items.start[i]);
        if (!a || a->type != YAML_SCALAR_NODE)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: user \"%s\": exec.args[%zu] must be a string",
                                f->path, user, i);
        if (kube_execcred_add_arg(ec, (const char *)a->data.scalar.value) < 0)
            return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    for (size_t i = 0; i < nenv; i++) {
        yaml_node_t *item = yaml_document_get_node(&f->doc, env->data.sequence.items.start[i]);
        int w1 = 0, w2 = 0;
        const char *name = map_str(f, item, "name", &w1);
        const char *value = map_str(f, item, "value", &w2);
        if (!item || item->type != YAML_MAPPING_NODE || !name || w1 || w2)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: user \"%s\": exec.env[%zu] needs a name and a "
                                "string value",
                                f->path, user, i);
        if (kube_execcred_add_env(ec, name, value ? value : "") < 0)
            return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    return 0;
}

/* Builds the user's exec plugin into *out (owned by the caller). */
static int parse_exec(struct kc_file *f, const char *user, yaml_node_t *node,
                      const struct kube_config *cfg, int timeout_ms, struct kube_execcred **out,
                      struct telo_err *err)
{
    const char *api = NULL, *command = NULL, *hint = NULL;
    int provide = 0;
    int rc = check_exec(f, user, node, &api, &command, &hint, &provide, err);
    /* check_exec fails when either is missing; the analyzer cannot see telo_err_set's sign. */
    if (rc < 0 || !api || !command)
        return rc < 0 ? rc : -TELO_EINVAL;
    /* clientcmd resolves a command containing a path separator against the kubeconfig's
     * directory; a bare name is looked up in PATH. */
    char *resolved = strchr(command, '/') ? resolve_path(f->dir, command) : strdup(command);
    char *prefix = util_str_printf("kubeconfig %s: user \"%s\"", f->path, user);
    struct kube_execcred *ec =
        resolved && prefix ? kube_execcred_new(prefix, api, command, resolved, hint, timeout_ms)
                           : NULL;
    free(resolved);
    free(prefix);
    if (!ec)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    rc = exec_lists(f, user, node, ec, err);
    if (rc == 0 && kube_execcred_set_info(ec, cfg, provide) < 0)
        rc = telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (rc < 0) {
        kube_execcred_free(ec);
        return rc;
    }
    *out = ec;
    return 0;
}

static int build_cluster(struct kube_config *cfg, struct kc_file *f, const char *name,
                         yaml_node_t *c, struct telo_err *err)
{
    const char *server, *ca, *ca_data, *sni, *proxy;
    int rc;
    if ((rc = entry_str(f, c, "cluster", name, "server", &server, err)) < 0 ||
        (rc = entry_str(f, c, "cluster", name, "certificate-authority", &ca, err)) < 0 ||
        (rc = entry_str(f, c, "cluster", name, "certificate-authority-data", &ca_data, err)) < 0 ||
        (rc = entry_str(f, c, "cluster", name, "tls-server-name", &sni, err)) < 0 ||
        (rc = entry_str(f, c, "cluster", name, "proxy-url", &proxy, err)) < 0 ||
        (rc = entry_bool(f, c, "cluster", name, "insecure-skip-tls-verify",
                         &cfg->insecure_skip_tls_verify, err)) < 0)
        return rc;
    if (!server)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: cluster \"%s\": server is not set",
                            f->path, name);
    char where[TELO_ERR_MSG_MAX];
    (void)snprintf(where, sizeof(where), "kubeconfig %s: cluster \"%s\"", f->path, name);
    if ((rc = kube_config_set_server(cfg, where, server, err)) < 0)
        return rc;
    /* clientcmd lets certificate-authority-data override certificate-authority. */
    if (ca_data) {
        rc = decode_field(f, "cluster", name, "certificate-authority-data", ca_data, &cfg->ca_pem,
                          &cfg->ca_pem_len, err);
        if (rc < 0)
            return rc;
    } else if (ca && !(cfg->ca_file = resolve_path(f->dir, ca))) {
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    if (sni && !(cfg->tls_server_name = strdup(sni)))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (proxy) {
        if (strncmp(proxy, "http://", 7) != 0 && strncmp(proxy, "https://", 8) != 0 &&
            strncmp(proxy, "socks5://", 9) != 0)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: cluster \"%s\": proxy-url \"%s\" is not an http, "
                                "https or socks5 URL",
                                f->path, name, proxy);
        if (!(cfg->proxy_url = strdup(proxy)))
            return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    return 0;
}

static int build_user(struct kube_config *cfg, struct kc_file *f, const char *name, yaml_node_t *u,
                      int exec_timeout_ms, struct telo_err *err)
{
    const char *token, *token_file, *cert, *cert_data, *key, *key_data;
    int rc;
    if ((rc = entry_str(f, u, "user", name, "token", &token, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "tokenFile", &token_file, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-certificate", &cert, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-certificate-data", &cert_data, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-key", &key, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-key-data", &key_data, err)) < 0)
        return rc;
    if ((cert || cert_data) && !(key || key_data))
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": client certificate given without a client "
                            "key (set client-key or client-key-data)",
                            f->path, name);
    if ((key || key_data) && !(cert || cert_data))
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": client key given without a client "
                            "certificate (set client-certificate or client-certificate-data)",
                            f->path, name);
    /* As for the CA, the -data form wins over the file when both are set. */
    if (cert_data) {
        if ((rc = decode_field(f, "user", name, "client-certificate-data", cert_data,
                               &cfg->client_cert_pem, NULL, err)) < 0)
            return rc;
    } else if (cert && !(cfg->client_cert_file = resolve_path(f->dir, cert))) {
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }
    if (key_data) {
        if ((rc = decode_field(f, "user", name, "client-key-data", key_data, &cfg->client_key_pem,
                               NULL, err)) < 0)
            return rc;
    } else if (key && !(cfg->client_key_file = resolve_path(f->dir, key))) {
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    }

    yaml_node_t *exec = map_get(f, u, "exec");
    if (!is_null(exec)) {
        if (token || token_file)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: user \"%s\": exec cannot be combined with token or "
                                "tokenFile",
                                f->path, name);
        struct kube_execcred *ec = NULL;
        rc = parse_exec(f, name, exec, cfg, exec_timeout_ms, &ec, err);
        if (rc == 0)
            kube_config_use_exec(cfg, ec);
        return rc;
    }
    /* The kubeconfig API documents that token takes precedence over tokenFile when both are
     * set (clientcmd/api/v1 AuthInfo.TokenFile); we follow that and never read the file then. */
    if (token)
        return kube_config_use_token(cfg, token, err);
    if (token_file) {
        char *path = resolve_path(f->dir, token_file);
        char *prefix = util_str_printf("kubeconfig %s: user \"%s\"", f->path, name);
        /* clientcmd reads the file while building the config, so a missing token fails at
         * start-up rather than at the first request. */
        rc = path && prefix ? kube_config_use_token_file(cfg, prefix, path, err)
                            : telo_err_oom(err, KUBE_CONFIG_LOADING);
        free(path);
        free(prefix);
        return rc;
    }
    return 0;
}

int kube_kubeconfig_apply(struct kube_kubeconfig *set, const char *context_override,
                          int exec_timeout_ms, struct kube_config *cfg, struct telo_err *err)
{
    const char *context = context_override;
    struct kc_file *ctx_file = NULL;
    if (!context || !*context) {
        context = NULL;
        for (size_t i = 0; i < set->n && !context; i++) {
            int wrong;
            struct kc_file *f = &set->files[i];
            context = map_str(f, kc_root(f), "current-context", &wrong);
            if (wrong)
                return telo_err_set(err, TELO_EINVAL,
                                    "kubeconfig %s: current-context must be a string", f->path);
        }
        if (!context)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: current-context is not set and no context was "
                                "given",
                                set->paths);
    }
    yaml_node_t *ctx = NULL;
    int rc = kc_find(set, "contexts", "context", context, &ctx_file, &ctx, err);
    if (rc < 0)
        return rc;
    /* kc_find sets ctx_file when it returns 1; the analyzer cannot see telo_err_set's sign. */
    if (rc == 0 || !ctx_file)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: context \"%s\" not found", set->paths,
                            context);
    const char *cluster_name, *user_name, *ns;
    if ((rc = entry_str(ctx_file, ctx, "context", context, "cluster", &cluster_name, err)) < 0 ||
        (rc = entry_str(ctx_file, ctx, "context", context, "user", &user_name, err)) < 0 ||
        (rc = entry_str(ctx_file, ctx, "context", context, "namespace", &ns, err)) < 0)
        return rc;
    if (!(cfg->source =
              util_str_printf("kubeconfig %s (context \"%s\")", ctx_file->path, context)) ||
        !(cfg->namespace = strdup(ns ? ns : "default")))
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (!cluster_name)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: context \"%s\": cluster is not set",
                            ctx_file->path, context);

    struct kc_file *cf = NULL;
    yaml_node_t *cluster = NULL;
    rc = kc_find(set, "clusters", "cluster", cluster_name, &cf, &cluster, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: context \"%s\": cluster \"%s\" not found",
                            ctx_file->path, context, cluster_name);
    if ((rc = build_cluster(cfg, cf, cluster_name, cluster, err)) < 0)
        return rc;

    /* A context without a user is anonymous access, which clientcmd allows. */
    if (!user_name)
        return 0;
    struct kc_file *uf = NULL;
    yaml_node_t *user = NULL;
    rc = kc_find(set, "users", "user", user_name, &uf, &user, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: context \"%s\": user \"%s\" not found", ctx_file->path,
                            context, user_name);
    return build_user(cfg, uf, user_name, user, exec_timeout_ms, err);
}

static int collect_files(const struct kube_config_options *opts, struct kube_kubeconfig *set,
                         struct telo_err *err)
{
    int rc;
    if (opts->kubeconfig && *opts->kubeconfig) {
        if (!(set->paths = strdup(opts->kubeconfig)))
            return telo_err_oom(err, KUBE_CONFIG_LOADING);
        return kc_set_add(set, opts->kubeconfig, 1, err);
    }
    if (opts->env_kubeconfig && *opts->env_kubeconfig) {
        if (!(set->paths = strdup(opts->env_kubeconfig)))
            return telo_err_oom(err, KUBE_CONFIG_LOADING);
        const char *p = opts->env_kubeconfig;
        while (*p) {
            size_t n = strcspn(p, ":");
            if (n) {
                char *path = util_str_printf("%.*s", (int)n, p);
                if (!path)
                    return telo_err_oom(err, KUBE_CONFIG_LOADING);
                rc = kc_set_add(set, path, 0, err);
                free(path);
                if (rc < 0)
                    return rc;
            }
            p += n;
            if (*p == ':')
                p++;
        }
        return 0;
    }
    if (opts->home && *opts->home) {
        char *path = util_str_printf("%s/.kube/config", opts->home);
        if (!path || !(set->paths = strdup(path))) {
            free(path);
            return telo_err_oom(err, KUBE_CONFIG_LOADING);
        }
        rc = kc_set_add(set, path, 0, err);
        free(path);
        return rc;
    }
    return 0;
}

int kube_kubeconfig_is_empty(const struct kube_kubeconfig *set)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->files[i].has_root)
            return 0;
    return 1;
}

int kube_kubeconfig_read(const struct kube_config_options *opts, struct kube_kubeconfig **out,
                         struct telo_err *err)
{
    struct kube_kubeconfig *set = calloc(1, sizeof(*set));
    if (!set)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    int rc = collect_files(opts, set, err);
    if (rc < 0) {
        kube_kubeconfig_free(set);
        return rc;
    }
    *out = set;
    return 0;
}

int kube_kubeconfig_read_text(const char *path, const char *text, size_t len,
                              struct kube_kubeconfig **out, struct telo_err *err)
{
    struct kube_kubeconfig *set = calloc(1, sizeof(*set));
    if (!set)
        return telo_err_oom(err, KUBE_CONFIG_LOADING);
    int rc = 0;
    if (!(set->paths = strdup(path)))
        rc = telo_err_oom(err, KUBE_CONFIG_LOADING);
    if (rc == 0)
        rc = kc_set_add_text(set, path, text, len, err);
    if (rc < 0) {
        kube_kubeconfig_free(set);
        return rc;
    }
    *out = set;
    return 0;
}

void kube_kubeconfig_free(struct kube_kubeconfig *set)
{
    kc_set_release(set);
    free(set);
}

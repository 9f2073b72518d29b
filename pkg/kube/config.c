/* Kubernetes client configuration: kubeconfig files, in-cluster service account, credentials. */
#include "kube/config.h"

#include "util/buf.h"
#include "util/err.h"
#include "util/jget.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

extern char **environ;

#define DEFAULT_IN_CLUSTER_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_FILE_SIZE          (4u << 20) /* kubeconfig, token and CA files */
#define MAX_EXEC_STDOUT        (1u << 20)
#define MAX_EXEC_STDERR_TAIL   400
#define DEFAULT_EXEC_TIMEOUT   30000
/* client-go's cachingTokenSource re-reads service account tokens at least once a minute; the
 * kubelet rotates them well before expiry, so a minute of staleness is harmless. */
#define TOKEN_FILE_MAX_AGE_S 60
#define EXEC_API_V1          "client.authentication.k8s.io/v1"
#define EXEC_API_V1BETA1     "client.authentication.k8s.io/v1beta1"

enum auth_kind { AUTH_NONE, AUTH_STATIC, AUTH_FILE, AUTH_EXEC };

struct exec_plugin {
    char *api_version;
    char *command;      /* as written in the kubeconfig, for messages */
    char *path;         /* resolved executable, or NULL when not found at load time */
    char **argv;        /* NULL-terminated; argv[0] is command */
    char **env;         /* NULL-terminated "NAME=value" list from the kubeconfig */
    char *install_hint; /* or NULL */
    char *exec_info;    /* KUBERNETES_EXEC_INFO=... */
    int timeout_ms;
};

struct kube_config_auth {
    enum auth_kind kind;
    char *prefix; /* "kubeconfig /p: user \"u\"" or "in-cluster config": starts every message */
    char *static_token;
    char *token_file;
    struct exec_plugin exec;
    /* Cached credential from the token file or the plugin. */
    int cached;
    char *token;
    char *cert_pem;
    char *key_pem;
    time_t expiry; /* wall clock, 0 = never */
    struct timespec read_at;
    struct stat file_id;
};

/* ---- small helpers ---- */

static char *dup_str(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    (void)vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static void free_strv(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static int oom(struct telo_err *err)
{
    return telo_err_set(err, TELO_ENOMEM, "out of memory loading the Kubernetes configuration");
}

/* Removes leading and trailing whitespace in place, as client-go's strings.TrimSpace does for
 * token and namespace files. */
static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", s[n - 1]))
        s[--n] = '\0';
    size_t lead = strspn(s, " \t\r\n");
    if (lead)
        memmove(s, s + lead, n - lead + 1);
}

/* Reads a whole file into a new NUL-terminated string. Returns 0, -TELO_ENOTFOUND when it does not
 * exist, -TELO_EIO or -TELO_ETOOBIG (with errno-style detail in *why), or -TELO_ENOMEM. */
static int read_file(const char *path, char **out, size_t *len, const char **why)
{
    *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return errno == ENOENT ? -TELO_ENOTFOUND : -TELO_EIO;
    }
    struct buf b;
    buf_init(&b, MAX_FILE_SIZE);
    char chunk[4096];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *why = strerror(errno);
            rc = -TELO_EIO;
            break;
        }
        if (n == 0)
            break;
        rc = buf_append(&b, chunk, (size_t)n);
        if (rc < 0) {
            *why = rc == -TELO_ETOOBIG ? "file too large" : "out of memory";
            break;
        }
    }
    close(fd);
    if (rc < 0) {
        buf_release(&b);
        return rc;
    }
    if (!b.data && buf_append(&b, "", 0) < 0) {
        *why = "out of memory";
        return -TELO_ENOMEM;
    }
    *len = b.len;
    *out = buf_steal(&b);
    return 0;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Joins a path found in a kubeconfig to the directory of that kubeconfig, as clientcmd's
 * ResolvePaths does; absolute paths are kept. */
static char *resolve_path(const char *dir, const char *path)
{
    if (path[0] == '/' || !dir)
        return dup_str(path);
    return dup_printf("%s/%s", dir, path);
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return dup_str(".");
    if (slash == path)
        return dup_str("/");
    return dup_printf("%.*s", (int)(slash - path), path);
}

/* Strict RFC 4648 standard base64 with padding, as Go's base64.StdEncoding (which kubeconfig
 * -data fields use); like Go it skips CR and LF. Returns a new NUL-terminated buffer or NULL with
 * *bad set when the input is not valid base64. */
static char *base64_decode(const char *in, size_t *out_len, int *bad)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in);
    char *out = malloc(n / 4 * 3 + 4);
    *bad = 0;
    if (!out)
        return NULL;
    size_t o = 0, q = 0, pad = 0;
    unsigned acc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '\r' || c == '\n')
            continue;
        if (c == '=') {
            pad++;
            if (q < 2 || q + pad > 4)
                goto bad;
            continue;
        }
        const char *p = c ? strchr(alphabet, c) : NULL;
        if (!p || pad)
            goto bad;
        acc = (acc << 6) | (unsigned)(p - alphabet);
        if (++q == 4) {
            out[o++] = (char)(acc >> 16);
            out[o++] = (char)(acc >> 8);
            out[o++] = (char)acc;
            q = 0;
            acc = 0;
        }
    }
    if (pad) {
        if (q + pad != 4)
            goto bad;
        if (q == 2) {
            out[o++] = (char)(acc >> 4);
        } else {
            out[o++] = (char)(acc >> 10);
            out[o++] = (char)(acc >> 2);
        }
    } else if (q) {
        goto bad;
    }
    out[o] = '\0';
    *out_len = o;
    return out;
bad:
    free(out);
    *bad = 1;
    return NULL;
}

static char *base64_encode(const char *in, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
        /* A missing input byte turns its output character into padding (RFC 4648, section 4). */
        if (i + 1 >= n)
            out[o - 2] = '=';
        if (i + 2 >= n)
            out[o - 1] = '=';
    }
    out[o] = '\0';
    return out;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil); avoids
 * the non-standard timegm. */
static long days_from_civil(long y, long m, long d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Parses an RFC 3339 timestamp ("2024-05-01T10:00:00Z", "...T10:00:00.5+02:00"). */
static int parse_rfc3339(const char *s, time_t *out)
{
    int y, mo, d, h, mi, sec, used = 0;
    if (sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
        used != 19)
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 0 || h < 0 ||
        mi < 0 || sec < 0)
        return -1;
    const char *p = s + used;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, n2 = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n2) != 2 || n2 != 5 || oh > 23 || om > 59)
            return -1;
        offset = (oh * 60L + om) * 60L * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    long long t = (long long)days_from_civil(y, mo, d) * 86400LL + h * 3600LL + mi * 60LL + sec;
    *out = (time_t)(t - offset);
    return 0;
}

/* ---- kubeconfig documents ---- */

struct kc_file {
    char *path;
    char *dir;
    int has_root;
    yaml_document_t doc;
};

struct kc_set {
    struct kc_file *files;
    size_t n;
    char *paths; /* "a:b" for messages that concern the merged set */
};

static void kc_set_release(struct kc_set *set)
{
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
        return oom(err);
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
            rc = oom(err);
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

static int kc_set_add_text(struct kc_set *set, const char *path, const char *text, size_t len,
                           struct telo_err *err);

/* Loads path into the set. Missing files are skipped unless required. */
static int kc_set_add(struct kc_set *set, const char *path, int required, struct telo_err *err)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->files[i].path, path) == 0)
            return 0; /* clientcmd de-duplicates KUBECONFIG entries */
    char *text = NULL;
    size_t len = 0;
    const char *why;
    int rc = read_file(path, &text, &len, &why);
    if (rc == -TELO_ENOTFOUND && !required)
        return 0;
    if (rc == -TELO_ENOMEM)
        return oom(err);
    if (rc < 0)
        return telo_err_set(err, rc == -TELO_ENOTFOUND ? TELO_EINVAL : -rc,
                            "kubeconfig %s: cannot read: %s", path, why);
    rc = kc_set_add_text(set, path, text, len, err);
    free(text);
    return rc;
}

/* Adds the kubeconfig text (len bytes, read from path) to the set. */
static int kc_set_add_text(struct kc_set *set, const char *path, const char *text, size_t len,
                           struct telo_err *err)
{
    struct kc_file *files = realloc(set->files, (set->n + 1) * sizeof(*files));
    if (!files)
        return oom(err);
    set->files = files;
    struct kc_file *f = &files[set->n];
    memset(f, 0, sizeof(*f));
    int rc = load_yaml(path, text, len, f, err);
    if (rc < 0)
        return rc;
    f->path = dup_str(path);
    f->dir = dir_of(path);
    if (!f->path || !f->dir) {
        free(f->path);
        free(f->dir);
        yaml_document_delete(&f->doc);
        return oom(err);
    }
    set->n++;
    return 0;
}

/* Finds the entry called name in the list `section` ("clusters", "users", "contexts") across the
 * files in order: the first file to define a name wins, as in clientcmd's merge. On success sets
 * *file and *entry (the inner "cluster"/"user"/"context" mapping, possibly NULL when empty) and
 * returns 1; returns 0 when not found, or a negative code for a malformed list. */
static int kc_find(struct kc_set *set, const char *section, const char *inner, const char *name,
                   struct kc_file **file, yaml_node_t **entry, struct telo_err *err)
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
    *out = base64_decode(value, &n, &bad);
    if (bad)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: %s \"%s\": %s is not valid base64",
                            f->path, kind, name, key);
    if (!*out)
        return oom(err);
    if (len)
        *len = n;
    return 0;
}

/* ---- exec plugin configuration ---- */

/* Looks the command up in PATH as execvp would, so that "not found" is reported with the
 * installHint before forking. */
static char *find_executable(const char *command)
{
    if (strchr(command, '/'))
        return access(command, X_OK) == 0 ? dup_str(command) : NULL;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        char *candidate = n ? dup_printf("%.*s/%s", (int)n, path, command) : dup_str(command);
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
    size_t ca_len = 0;
    if (cfg->ca_pem) {
        ca = base64_encode(cfg->ca_pem, cfg->ca_pem_len);
    } else if (cfg->ca_file) {
        char *text = NULL;
        const char *why;
        if (read_file(cfg->ca_file, &text, &ca_len, &why) == 0)
            ca = base64_encode(text, ca_len);
        free(text);
    }
    if (ca)
        json_object_object_add(c, "certificate-authority-data", json_object_new_string(ca));
    free(ca);
    if (cfg->proxy_url)
        json_object_object_add(c, "proxy-url", json_object_new_string(cfg->proxy_url));
    return c;
}

static char *make_exec_info(const char *api_version, const struct kube_config *cfg,
                            int with_cluster)
{
    json_object *root = json_object_new_object();
    json_object *spec = json_object_new_object();
    if (!root || !spec) {
        json_object_put(root);
        json_object_put(spec);
        return NULL;
    }
    json_object_object_add(root, "apiVersion", json_object_new_string(api_version));
    json_object_object_add(root, "kind", json_object_new_string("ExecCredential"));
    /* We never hand the plugin a terminal, so it must not prompt. */
    json_object_object_add(spec, "interactive", json_object_new_boolean(0));
    if (with_cluster)
        json_object_object_add(spec, "cluster", cluster_info(cfg));
    json_object_object_add(root, "spec", spec);
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = text ? dup_printf("KUBERNETES_EXEC_INFO=%s", text) : NULL;
    json_object_put(root);
    return out;
}

static void exec_release(struct exec_plugin *e)
{
    free(e->api_version);
    free(e->command);
    free(e->path);
    free_strv(e->argv);
    free_strv(e->env);
    free(e->install_hint);
    free(e->exec_info);
    memset(e, 0, sizeof(*e));
}

static int parse_exec(struct kc_file *f, const char *user, yaml_node_t *node,
                      const struct kube_config *cfg, struct exec_plugin *e, struct telo_err *err)
{
    if (node->type != YAML_MAPPING_NODE)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: user \"%s\": exec is not a mapping",
                            f->path, user);
    const char *api, *command, *hint, *mode;
    int provide = 0, rc;
    if ((rc = entry_str(f, node, "user", user, "apiVersion", &api, err)) < 0 ||
        (rc = entry_str(f, node, "user", user, "command", &command, err)) < 0 ||
        (rc = entry_str(f, node, "user", user, "installHint", &hint, err)) < 0 ||
        (rc = entry_str(f, node, "user", user, "interactiveMode", &mode, err)) < 0 ||
        (rc = entry_bool(f, node, "user", user, "provideClusterInfo", &provide, err)) < 0)
        return rc;
    if (!command)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: user \"%s\": exec.command is not set",
                            f->path, user);
    if (!api)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": exec.apiVersion is not set", f->path,
                            user);
    if (strcmp(api, EXEC_API_V1) != 0 && strcmp(api, EXEC_API_V1BETA1) != 0)
        return telo_err_set(err, TELO_EINVAL,
                            "kubeconfig %s: user \"%s\": exec.apiVersion \"%s\" is not supported "
                            "(use " EXEC_API_V1 " or " EXEC_API_V1BETA1 ")",
                            f->path, user, api);
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

    e->api_version = dup_str(api);
    e->command = dup_str(command);
    e->install_hint = dup_str(hint);
    e->argv = calloc(nargs + 2, sizeof(char *));
    e->env = calloc(nenv + 1, sizeof(char *));
    if (!e->api_version || !e->command || (hint && !e->install_hint) || !e->argv || !e->env)
        return oom(err);
    /* clientcmd resolves a command containing a path separator against the kubeconfig's
     * directory; a bare name is looked up in PATH. */
    char *resolved = strchr(command, '/') ? resolve_path(f->dir, command) : dup_str(command);
    if (!resolved)
        return oom(err);
    e->path = find_executable(resolved);
    e->argv[0] = resolved;
    for (size_t i = 0; i < nargs; i++) {
        yaml_node_t *a = yaml_document_get_node(&f->doc, args->data.sequence.items.start[i]);
        if (!a || a->type != YAML_SCALAR_NODE)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: user \"%s\": exec.args[%zu] must be a string",
                                f->path, user, i);
        if (!(e->argv[i + 1] = dup_str((const char *)a->data.scalar.value)))
            return oom(err);
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
        if (!(e->env[i] = dup_printf("%s=%s", name, value ? value : "")))
            return oom(err);
    }
    if (!(e->exec_info = make_exec_info(api, cfg, provide)))
        return oom(err);
    return 0;
}

static int refresh_token_file(struct kube_config_auth *a, struct telo_err *err);

/* ---- building the config from a context ---- */

static struct kube_config *config_new(void)
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

static int set_server(struct kube_config *cfg, const char *where, const char *server,
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
    if (!(cfg->server = dup_str(server)))
        return oom(err);
    size_t n = strlen(cfg->server);
    while (n > (size_t)(rest - server) && cfg->server[n - 1] == '/')
        cfg->server[--n] = '\0';
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
    if ((rc = set_server(cfg, where, server, err)) < 0)
        return rc;
    /* clientcmd lets certificate-authority-data override certificate-authority. */
    if (ca_data) {
        rc = decode_field(f, "cluster", name, "certificate-authority-data", ca_data, &cfg->ca_pem,
                          &cfg->ca_pem_len, err);
        if (rc < 0)
            return rc;
    } else if (ca && !(cfg->ca_file = resolve_path(f->dir, ca))) {
        return oom(err);
    }
    if (sni && !(cfg->tls_server_name = dup_str(sni)))
        return oom(err);
    if (proxy) {
        if (strncmp(proxy, "http://", 7) != 0 && strncmp(proxy, "https://", 8) != 0 &&
            strncmp(proxy, "socks5://", 9) != 0)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: cluster \"%s\": proxy-url \"%s\" is not an http, "
                                "https or socks5 URL",
                                f->path, name, proxy);
        if (!(cfg->proxy_url = dup_str(proxy)))
            return oom(err);
    }
    return 0;
}

static int build_user(struct kube_config *cfg, struct kc_file *f, const char *name, yaml_node_t *u,
                      struct telo_err *err)
{
    struct kube_config_auth *a = cfg->auth;
    const char *token, *token_file, *cert, *cert_data, *key, *key_data;
    int rc;
    if ((rc = entry_str(f, u, "user", name, "token", &token, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "tokenFile", &token_file, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-certificate", &cert, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-certificate-data", &cert_data, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-key", &key, err)) < 0 ||
        (rc = entry_str(f, u, "user", name, "client-key-data", &key_data, err)) < 0)
        return rc;
    if (!(a->prefix = dup_printf("kubeconfig %s: user \"%s\"", f->path, name)))
        return oom(err);

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
        return oom(err);
    }
    if (key_data) {
        if ((rc = decode_field(f, "user", name, "client-key-data", key_data, &cfg->client_key_pem,
                               NULL, err)) < 0)
            return rc;
    } else if (key && !(cfg->client_key_file = resolve_path(f->dir, key))) {
        return oom(err);
    }

    yaml_node_t *exec = map_get(f, u, "exec");
    if (!is_null(exec)) {
        if (token || token_file)
            return telo_err_set(err, TELO_EINVAL,
                                "kubeconfig %s: user \"%s\": exec cannot be combined with token or "
                                "tokenFile",
                                f->path, name);
        a->kind = AUTH_EXEC;
        return parse_exec(f, name, exec, cfg, &a->exec, err);
    }
    /* The kubeconfig API documents that token takes precedence over tokenFile when both are
     * set (clientcmd/api/v1 AuthInfo.TokenFile); we follow that and never read the file then. */
    if (token) {
        a->kind = AUTH_STATIC;
        if (!(a->static_token = dup_str(token)))
            return oom(err);
    } else if (token_file) {
        a->kind = AUTH_FILE;
        if (!(a->token_file = resolve_path(f->dir, token_file)))
            return oom(err);
        /* clientcmd reads the file while building the config, so a missing token fails at
         * start-up rather than at the first request. */
        return refresh_token_file(a, err);
    }
    return 0;
}

static int build_from_kubeconfig(struct kc_set *set, const char *context_override,
                                 struct kube_config *cfg, struct telo_err *err)
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
    if (rc == 0)
        return telo_err_set(err, TELO_EINVAL, "kubeconfig %s: context \"%s\" not found", set->paths,
                            context);
    const char *cluster_name, *user_name, *ns;
    if ((rc = entry_str(ctx_file, ctx, "context", context, "cluster", &cluster_name, err)) < 0 ||
        (rc = entry_str(ctx_file, ctx, "context", context, "user", &user_name, err)) < 0 ||
        (rc = entry_str(ctx_file, ctx, "context", context, "namespace", &ns, err)) < 0)
        return rc;
    /* kc_find returned 1, so ctx_file is set (see entry_str on the analyzer's doubt). */
    // NOLINTNEXTLINE(clang-analyzer-core.NullDereference)
    if (!(cfg->source = dup_printf("kubeconfig %s (context \"%s\")", ctx_file->path, context)) ||
        !(cfg->namespace = dup_str(ns ? ns : "default")))
        return oom(err);
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
    return build_user(cfg, uf, user_name, user, err);
}

/* ---- in-cluster ---- */

static int build_in_cluster(const struct kube_config_options *opts, const char *dir,
                            struct kube_config *cfg, struct telo_err *err)
{
    struct kube_config_auth *a = cfg->auth;
    const char *host = opts->in_cluster_host, *port = opts->in_cluster_port;
    /* net.JoinHostPort: an IPv6 literal needs brackets. */
    int v6 = strchr(host, ':') != NULL && host[0] != '[';
    if (!(cfg->source = dup_str("in-cluster")) ||
        !(a->prefix = dup_printf("in-cluster config %s", dir)) ||
        !(a->token_file = dup_printf("%s/token", dir)))
        return oom(err);
    a->kind = AUTH_FILE;
    char *server = dup_printf(v6 ? "https://[%s]:%s" : "https://%s:%s", host, port);
    if (!server)
        return oom(err);
    int rc = set_server(cfg, "in-cluster config", server, err);
    free(server);
    if (rc < 0)
        return rc;
    char *ca = dup_printf("%s/ca.crt", dir);
    if (!ca)
        return oom(err);
    /* client-go also carries on without ca.crt, leaving verification to the system roots. */
    if (file_exists(ca))
        cfg->ca_file = ca;
    else
        free(ca);

    char *ns_path = dup_printf("%s/namespace", dir);
    if (!ns_path)
        return oom(err);
    char *ns = NULL;
    size_t len;
    const char *why;
    rc = read_file(ns_path, &ns, &len, &why);
    free(ns_path);
    if (rc == -TELO_ENOMEM)
        return oom(err);
    if (rc == 0) {
        trim(ns);
        if (!*ns) {
            free(ns);
            ns = NULL;
        }
    }
    cfg->namespace = ns ? ns : dup_str("default");
    if (!cfg->namespace)
        return oom(err);
    /* Read the token once now so that a broken mount fails at start-up, not at the first call. */
    const char *tok;
    rc = kube_config_token(cfg, &tok, err);
    return rc;
}

/* ---- loading ---- */

static int collect_files(const struct kube_config_options *opts, struct kc_set *set,
                         struct telo_err *err)
{
    int rc;
    if (opts->kubeconfig && *opts->kubeconfig) {
        if (!(set->paths = dup_str(opts->kubeconfig)))
            return oom(err);
        return kc_set_add(set, opts->kubeconfig, 1, err);
    }
    if (opts->env_kubeconfig && *opts->env_kubeconfig) {
        if (!(set->paths = dup_str(opts->env_kubeconfig)))
            return oom(err);
        const char *p = opts->env_kubeconfig;
        while (*p) {
            size_t n = strcspn(p, ":");
            if (n) {
                char *path = dup_printf("%.*s", (int)n, p);
                if (!path)
                    return oom(err);
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
        char *path = dup_printf("%s/.kube/config", opts->home);
        if (!path || !(set->paths = dup_str(path))) {
            free(path);
            return oom(err);
        }
        rc = kc_set_add(set, path, 0, err);
        free(path);
        return rc;
    }
    return 0;
}

static int set_is_empty(struct kc_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->files[i].has_root)
            return 0;
    return 1;
}

int kube_config_load(const struct kube_config_options *opts, struct kube_config **out,
                     struct telo_err *err)
{
    struct kc_set set = {0};
    struct kube_config *cfg = config_new();
    if (!cfg)
        return oom(err);
    int rc = collect_files(opts, &set, err);
    if (rc < 0)
        goto fail;
    cfg->auth->exec.timeout_ms =
        opts->exec_timeout_ms > 0 ? opts->exec_timeout_ms : DEFAULT_EXEC_TIMEOUT;
    /* Like client-go's deferred loader: an empty or absent kubeconfig falls back to in-cluster. */
    if (set_is_empty(&set) && !(opts->kubeconfig && *opts->kubeconfig)) {
        const char *dir = opts->in_cluster_dir ? opts->in_cluster_dir : DEFAULT_IN_CLUSTER_DIR;
        char *token = dup_printf("%s/token", dir);
        if (!token) {
            rc = oom(err);
            goto fail;
        }
        int have_token = file_exists(token);
        free(token);
        if (opts->in_cluster_host && *opts->in_cluster_host && opts->in_cluster_port &&
            *opts->in_cluster_port && have_token) {
            rc = build_in_cluster(opts, dir, cfg, err);
        } else {
            rc = telo_err_set(err, TELO_EINVAL,
                              "no kubeconfig: set KUBECONFIG, pass --kubeconfig or run in a "
                              "cluster");
        }
    } else {
        rc = build_from_kubeconfig(&set, opts->context, cfg, err);
    }
    if (rc < 0)
        goto fail;
    kc_set_release(&set);
    *out = cfg;
    return 0;
fail:
    kc_set_release(&set);
    kube_config_free(cfg);
    return rc;
}

int kube_config_parse(const char *path, const char *text, size_t len, const char *context,
                      int exec_timeout_ms, struct kube_config **out, struct telo_err *err)
{
    struct kc_set set = {0};
    struct kube_config *cfg = config_new();
    if (!cfg)
        return oom(err);
    int rc = 0;
    if (!(set.paths = dup_str(path)))
        rc = oom(err);
    if (rc == 0)
        rc = kc_set_add_text(&set, path, text, len, err);
    cfg->auth->exec.timeout_ms = exec_timeout_ms > 0 ? exec_timeout_ms : DEFAULT_EXEC_TIMEOUT;
    if (rc == 0)
        rc = build_from_kubeconfig(&set, context, cfg, err);
    kc_set_release(&set);
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

static void drop_cached(struct kube_config_auth *a)
{
    free(a->token);
    free(a->cert_pem);
    free(a->key_pem);
    a->token = a->cert_pem = a->key_pem = NULL;
    a->cached = 0;
    a->expiry = 0;
}

void kube_config_free(struct kube_config *cfg)
{
    if (!cfg)
        return;
    struct kube_config_auth *a = cfg->auth;
    if (a) {
        drop_cached(a);
        free(a->prefix);
        free(a->static_token);
        free(a->token_file);
        exec_release(&a->exec);
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

void kube_config_invalidate_credentials(struct kube_config *cfg)
{
    if (cfg && cfg->auth)
        drop_cached(cfg->auth);
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
    if (a->cached && stat_ok && same_file(&st, &a->file_id) &&
        now.tv_sec - a->read_at.tv_sec < TOKEN_FILE_MAX_AGE_S)
        return 0;
    char *text = NULL;
    size_t len;
    const char *why;
    int rc = read_file(a->token_file, &text, &len, &why);
    if (rc == -TELO_ENOMEM)
        return oom(err);
    if (rc < 0)
        return telo_err_set(err, rc == -TELO_ENOTFOUND ? TELO_EIO : -rc,
                            "%s: tokenFile %s: cannot read: %s", a->prefix, a->token_file, why);
    trim(text);
    if (!*text) {
        free(text);
        return telo_err_set(err, TELO_EINVAL, "%s: tokenFile %s is empty", a->prefix,
                            a->token_file);
    }
    drop_cached(a);
    a->token = text;
    a->cached = 1;
    a->read_at = now;
    if (stat_ok)
        a->file_id = st;
    return 0;
}

/* ---- exec plugin ---- */

static char **exec_environment(const struct exec_plugin *e)
{
    size_t n_parent = 0, n_extra = 0;
    while (environ && environ[n_parent])
        n_parent++;
    while (e->env[n_extra])
        n_extra++;
    char **env = calloc(n_parent + n_extra + 2, sizeof(char *));
    if (!env)
        return NULL;
    size_t k = 0;
    /* The kubeconfig's env entries and KUBERNETES_EXEC_INFO override inherited variables. */
    for (size_t i = 0; i < n_parent; i++) {
        const char *v = environ[i];
        size_t name_len = strcspn(v, "=");
        int overridden = !strncmp(v, "KUBERNETES_EXEC_INFO=", 21);
        for (size_t j = 0; j < n_extra && !overridden; j++)
            overridden = !strncmp(e->env[j], v, name_len) && e->env[j][name_len] == '=';
        if (!overridden)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < n_extra; j++)
        env[k++] = e->env[j];
    env[k] = e->exec_info;
    return env;
}

static long elapsed_ms(const struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000L + (now.tv_nsec - since->tv_nsec) / 1000000L;
}

/* The end of stderr, trimmed, with line breaks turned into spaces so the message stays one log
 * line. */
static const char *stderr_tail(struct buf *b)
{
    if (!b->data)
        return "";
    trim(b->data);
    for (char *p = b->data; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    size_t n = strlen(b->data);
    return n > MAX_EXEC_STDERR_TAIL ? b->data + n - MAX_EXEC_STDERR_TAIL : b->data;
}

/* Runs the plugin, capturing stdout (bounded) and the tail of stderr, killing it at the timeout. */
static int run_plugin(struct kube_config_auth *a, struct buf *out, struct buf *errb,
                      struct telo_err *err)
{
    struct exec_plugin *e = &a->exec;
    if (!e->path) {
        /* Looked up again so a plugin installed after start-up is found. */
        e->path = find_executable(e->argv[0]);
        if (!e->path) {
            if (e->install_hint)
                return telo_err_set(err, TELO_ENOTFOUND,
                                    "%s: exec plugin: executable %s not found: %s", a->prefix,
                                    e->command, e->install_hint);
            return telo_err_set(err, TELO_ENOTFOUND, "%s: exec plugin: executable %s not found",
                                a->prefix, e->command);
        }
    }
    char **env = exec_environment(e);
    if (!env)
        return oom(err);
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    /* CLOEXEC so that no other child forked meanwhile inherits them; dup2 in our child clears
     * the flag on the copies it keeps. */
    if (pipe(out_pipe) < 0 || pipe(err_pipe) < 0 || fcntl(out_pipe[0], F_SETFD, FD_CLOEXEC) < 0 ||
        fcntl(out_pipe[1], F_SETFD, FD_CLOEXEC) < 0 ||
        fcntl(err_pipe[0], F_SETFD, FD_CLOEXEC) < 0 ||
        fcntl(err_pipe[1], F_SETFD, FD_CLOEXEC) < 0) {
        int saved = errno;
        for (int i = 0; i < 2; i++) {
            if (out_pipe[i] >= 0)
                close(out_pipe[i]);
            if (err_pipe[i] >= 0)
                close(err_pipe[i]);
        }
        free(env);
        return telo_err_set(err, TELO_EIO, "%s: exec plugin %s: pipe: %s", a->prefix, e->command,
                            strerror(saved));
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Child: only async-signal-safe calls from here on. */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_pipe[1], 1) < 0 ||
            dup2(err_pipe[1], 2) < 0)
            _exit(126);
        close(out_pipe[0]);
        close(err_pipe[0]);
        close(out_pipe[1]);
        close(err_pipe[1]);
        if (devnull > 2)
            close(devnull);
        execve(e->path, e->argv, env);
        _exit(127);
    }
    int saved = errno;
    free(env);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (pid < 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        return telo_err_set(err, TELO_EIO, "%s: exec plugin %s: fork: %s", a->prefix, e->command,
                            strerror(saved));
    }
    struct pollfd fds[2] = {{.fd = out_pipe[0], .events = POLLIN},
                            {.fd = err_pipe[0], .events = POLLIN}};
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int rc = 0, open_fds = 2;
    char chunk[4096];
    while (open_fds > 0) {
        long left = e->timeout_ms - elapsed_ms(&start);
        if (left <= 0) {
            rc = telo_err_set(err, TELO_ETIMEDOUT, "%s: exec plugin %s timed out after %d ms",
                              a->prefix, e->command, e->timeout_ms);
            break;
        }
        int n = poll(fds, 2, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = telo_err_set(err, TELO_EIO, "%s: exec plugin %s: poll: %s", a->prefix, e->command,
                              strerror(errno));
            break;
        }
        for (int i = 0; i < 2 && rc == 0; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t got = read(fds[i].fd, chunk, sizeof(chunk));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0) {
                if (buf_append(out, chunk, (size_t)got) < 0)
                    rc = telo_err_set(err, TELO_ETOOBIG,
                                      "%s: exec plugin %s wrote more than %u bytes", a->prefix,
                                      e->command, MAX_EXEC_STDOUT);
            } else {
                /* Keep only the tail: the useful part of an error is usually at the end. */
                if (errb->len + (size_t)got > errb->max)
                    buf_consume(errb, errb->len + (size_t)got - errb->max);
                if (buf_append(errb, chunk, (size_t)got) < 0)
                    rc = oom(err);
            }
        }
        if (rc < 0)
            break;
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    /* The pipes are closed, but a plugin may have closed them itself and kept running: keep
     * enforcing the time limit while waiting for it. */
    int killed = rc < 0;
    if (killed)
        kill(pid, SIGKILL);
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, killed ? 0 : WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        if (w == 0 && e->timeout_ms - elapsed_ms(&start) <= 0) {
            rc = telo_err_set(err, TELO_ETIMEDOUT, "%s: exec plugin %s timed out after %d ms",
                              a->prefix, e->command, e->timeout_ms);
            kill(pid, SIGKILL);
            killed = 1;
        } else if (w == 0) {
            struct timespec pause = {0, 5L * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
    }
    if (rc < 0)
        return rc;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !out->len && !errb->len)
        return telo_err_set(err, TELO_ENOTFOUND, "%s: exec plugin: cannot execute %s", a->prefix,
                            e->command);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        const char *tail = stderr_tail(errb);
        return telo_err_set(err, TELO_EIO, "%s: exec plugin %s exited with status %d%s%s",
                            a->prefix, e->command, WEXITSTATUS(status), *tail ? ": " : "", tail);
    }
    if (WIFSIGNALED(status))
        return telo_err_set(err, TELO_EIO, "%s: exec plugin %s killed by signal %d", a->prefix,
                            e->command, WTERMSIG(status));
    return 0;
}

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

int kube_exec_credential_parse(const char *prefix, const char *command, const char *api_version,
                               const char *text, struct kube_exec_credential *out,
                               struct telo_err *err)
{
    memset(out, 0, sizeof(*out));
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return oom(err);
    json_object *root = json_tokener_parse_ex(tok, text, (int)strlen(text));
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    int rc = 0;
    if (!root || jerr != json_tokener_success || !json_object_is_type(root, json_type_object)) {
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: output is not an ExecCredential "
                          "JSON object",
                          prefix, command);
        goto out;
    }
    const char *api = json_str(root, "apiVersion");
    const char *kind = json_str(root, "kind");
    if (!api || strcmp(api, api_version) != 0) {
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: is configured to use API version %s, plugin "
                          "returned version %s",
                          prefix, command, api_version, api ? api : "(none)");
        goto out;
    }
    if (!kind || strcmp(kind, "ExecCredential") != 0) {
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: returned kind %s, not "
                          "ExecCredential",
                          prefix, command, kind ? kind : "(none)");
        goto out;
    }
    json_object *status = jget_object(root, "status");
    if (!status) {
        rc = telo_err_set(err, TELO_EPROTO, "%s: exec plugin %s: did not return a status field",
                          prefix, command);
        goto out;
    }
    const char *token = json_str(status, "token");
    const char *cert = json_str(status, "clientCertificateData");
    const char *key = json_str(status, "clientKeyData");
    const char *expiry = json_str(status, "expirationTimestamp");
    if (!!cert != !!key) {
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: returned only certificate or key, not both", prefix,
                          command);
        goto out;
    }
    if (!token && !cert) {
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: did not return a token or cert/key pair", prefix,
                          command);
        goto out;
    }
    time_t when = 0;
    if (expiry && parse_rfc3339(expiry, &when) < 0) {
        rc = telo_err_set(err, TELO_EPROTO,
                          "%s: exec plugin %s: expirationTimestamp \"%s\" is not RFC 3339", prefix,
                          command, expiry);
        goto out;
    }
    out->token = dup_str(token);
    out->cert_pem = dup_str(cert);
    out->key_pem = dup_str(key);
    if ((token && !out->token) || (cert && (!out->cert_pem || !out->key_pem))) {
        kube_exec_credential_release(out);
        rc = oom(err);
        goto out;
    }
    out->expiry = when;
out:
    json_object_put(root);
    return rc;
}

/* Parses an ExecCredential and caches its status, following client-go's checks. */
static int parse_credential(struct kube_config_auth *a, const char *text, struct telo_err *err)
{
    const struct exec_plugin *e = &a->exec;
    struct kube_exec_credential c;
    int rc = kube_exec_credential_parse(a->prefix, e->command, e->api_version, text, &c, err);
    if (rc < 0)
        return rc;
    drop_cached(a);
    a->token = c.token;
    a->cert_pem = c.cert_pem;
    a->key_pem = c.key_pem;
    a->expiry = c.expiry;
    a->cached = 1;
    return 0;
}

static int refresh_exec(struct kube_config_auth *a, struct telo_err *err)
{
    /* client-go treats a credential without expirationTimestamp as valid until a 401. */
    if (a->cached && (a->expiry == 0 || time(NULL) < a->expiry))
        return 0;
    struct buf out, errb;
    buf_init(&out, MAX_EXEC_STDOUT);
    buf_init(&errb, 4096);
    int rc = run_plugin(a, &out, &errb, err);
    if (rc == 0)
        rc = parse_credential(a, out.data ? out.data : "", err);
    buf_release(&out);
    buf_release(&errb);
    return rc;
}

static int refresh(struct kube_config *cfg, struct telo_err *err)
{
    struct kube_config_auth *a = cfg->auth;
    switch (a->kind) {
    case AUTH_FILE:
        return refresh_token_file(a, err);
    case AUTH_EXEC:
        return refresh_exec(a, err);
    default:
        return 0;
    }
}

int kube_config_token(struct kube_config *cfg, const char **token, struct telo_err *err)
{
    *token = NULL;
    int rc = refresh(cfg, err);
    if (rc < 0)
        return rc;
    struct kube_config_auth *a = cfg->auth;
    *token = a->kind == AUTH_STATIC ? a->static_token : a->token;
    return 0;
}

int kube_config_client_cert(struct kube_config *cfg, const char **cert_pem, const char **key_pem,
                            struct telo_err *err)
{
    *cert_pem = *key_pem = NULL;
    int rc = refresh(cfg, err);
    if (rc < 0)
        return rc;
    struct kube_config_auth *a = cfg->auth;
    if (a->kind == AUTH_EXEC && a->cert_pem) {
        *cert_pem = a->cert_pem;
        *key_pem = a->key_pem;
    } else {
        *cert_pem = cfg->client_cert_pem;
        *key_pem = cfg->client_key_pem;
    }
    return 0;
}

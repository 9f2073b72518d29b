/* "Does <repository>:<tag> exist?": an OCI distribution manifest HEAD with Basic credentials
 * from a dockerconfigjson and the Bearer token challenge, asynchronous on the libev loop, with a
 * bounded retry and an in-memory cache of positive answers. */
#include "imagebuild/registry.h"

#include "imagebuild/http.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/strmap.h"
#include "util/url.h"

#include <curl/curl.h>
#include <ev.h>
#include <json.h>
#include <openssl/crypto.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_ATTEMPTS   3
#define DEFAULT_DELAY_MS   500L
#define DEFAULT_TIMEOUT_MS 10000L
#define DEFAULT_CACHE_MAX  4096
#define TOKEN_BODY_MAX     ((size_t)64 << 10)
#define MESSAGE_MAX        512
/* The longest bearer token taken (registries' JWTs run to a few KiB at most); a longer one is
 * refused rather than cut short in the request header. */
#define TOKEN_MAX 4000
#define BEARER    "Authorization: Bearer "

/* ---- pure helpers ---- */

int build_repository_split(const char *repository, char *host, size_t hostlen, char *path,
                           size_t pathlen, struct telo_err *err)
{
    const char *r = repository != NULL ? repository : "";
    if (strncmp(r, "https://", 8) == 0)
        r += 8;
    else if (strncmp(r, "http://", 7) == 0)
        r += 7;
    const char *slash = strchr(r, '/');
    size_t hlen = slash != NULL ? (size_t)(slash - r) : 0;
    int hostlike = hlen > 0 && (memchr(r, '.', hlen) != NULL || memchr(r, ':', hlen) != NULL ||
                                (hlen == 9 && memcmp(r, "localhost", 9) == 0));
    if (!hostlike || slash[1] == '\0')
        return telo_err_set(err, TELO_EINVAL,
                            "image repository '%s' must name its registry and a path, e.g. "
                            "registry.example:5000/telo/apps",
                            repository != NULL ? repository : "");
    size_t plen = strlen(slash + 1);
    while (plen > 0 && slash[plen] == '/')
        plen--;
    if (hlen + 1 > hostlen || plen + 1 > pathlen)
        return telo_err_set(err, TELO_EINVAL, "image repository '%s' is too long", repository);
    memcpy(host, r, hlen);
    host[hlen] = '\0';
    memcpy(path, slash + 1, plen);
    path[plen] = '\0';
    for (size_t i = 0; i < plen; i++) {
        unsigned char c = (unsigned char)path[i];
        if (!(islower(c) || isdigit(c) || c == '.' || c == '_' || c == '-' || c == '/'))
            return telo_err_set(err, TELO_EINVAL,
                                "image repository '%s': the path may hold lowercase letters, "
                                "digits and . _ - / only",
                                repository);
    }
    return 0;
}

/* The host of a dockerconfigjson key: "https://host/v1/" -> "host"; Docker Hub's names fold. */
static void key_host(const char *key, char *out, size_t len)
{
    const char *k = key;
    if (strncmp(k, "https://", 8) == 0)
        k += 8;
    else if (strncmp(k, "http://", 7) == 0)
        k += 7;
    size_t n = strcspn(k, "/");
    snprintf(out, len, "%.*s", (int)n, k);
    if (strcmp(out, "index.docker.io") == 0 || strcmp(out, "registry-1.docker.io") == 0)
        snprintf(out, len, "docker.io");
}

int build_dockerconfig_auth(const char *json, size_t len, const char *host, char **user,
                            char **password, struct telo_err *err)
{
    *user = *password = NULL;
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL)
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    struct json_object *root = json_tokener_parse_ex(tok, json, (int)len);
    int parsed = root != NULL && json_tokener_get_error(tok) == json_tokener_success;
    json_tokener_free(tok);
    if (!parsed || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return telo_err_set(err, TELO_EINVAL, ".dockerconfigjson is not a JSON object");
    }
    struct json_object *auths = jget_object(root, "auths");
    if (auths == NULL) {
        json_object_put(root);
        return telo_err_set(err, TELO_EINVAL, ".dockerconfigjson has no \"auths\" object");
    }
    char want[256], have[256];
    key_host(host, want, sizeof(want));
    struct json_object *entry = NULL;
    struct buf hosts;
    buf_init(&hosts, 300);
    json_object_object_foreach(auths, key, val)
    {
        key_host(key, have, sizeof(have));
        if (entry == NULL && strcmp(have, want) == 0)
            entry = val;
        buf_printf(&hosts, "%s%s", hosts.len ? ", " : "", key);
    }
    int rc = 0;
    if (entry == NULL) {
        rc = telo_err_set(err, TELO_ENOTFOUND, ".dockerconfigjson has no entry for %s (it has: %s)",
                          host, hosts.len ? hosts.data : "none");
        goto out;
    }
    const char *u = jget_string(entry, "username"), *p = jget_string(entry, "password");
    if (u != NULL && p != NULL && u[0] != '\0' && p[0] != '\0') {
        *user = strdup(u);
        *password = strdup(p);
    } else {
        const char *a = jget_string(entry, "auth");
        if (a == NULL) {
            rc = telo_err_set(err, TELO_EINVAL,
                              ".dockerconfigjson entry for %s has neither username/password nor "
                              "auth",
                              host);
            goto out;
        }
        char *decoded = (char *)util_base64_decode(a, strlen(a), NULL);
        char *colon = decoded != NULL ? strchr(decoded, ':') : NULL;
        if (colon == NULL) {
            free(decoded);
            rc = telo_err_set(err, TELO_EINVAL,
                              ".dockerconfigjson entry for %s: auth is not base64 of "
                              "\"user:password\"",
                              host);
            goto out;
        }
        *colon = '\0';
        *user = strdup(decoded);
        *password = strdup(colon + 1);
        OPENSSL_cleanse(decoded, strlen(decoded) + strlen(colon + 1) + 1);
        free(decoded);
    }
    if (*user == NULL || *password == NULL) {
        free(*user);
        free(*password);
        *user = *password = NULL;
        rc = telo_err_set(err, TELO_ENOMEM, "out of memory");
    }
out:
    buf_release(&hosts);
    json_object_put(root);
    return rc;
}

int build_auth_challenge_parse(const char *header, struct build_auth_challenge *out)
{
    memset(out, 0, sizeof(*out));
    const char *p = header != NULL ? header : "";
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strcspn(p, " \t");
    if (n == 0 || n >= sizeof(out->scheme))
        return -TELO_EPROTO;
    memcpy(out->scheme, p, n);
    p += n;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        const char *name = p;
        while (*p != '\0' && *p != '=' && *p != ' ' && *p != ',')
            p++;
        size_t nlen = (size_t)(p - name);
        if (*p != '=')
            break; /* a token68 or the next challenge: the params we need come first */
        p++;
        char value[1024];
        size_t vlen = 0;
        if (*p == '"') {
            p++;
            while (*p != '\0' && *p != '"') {
                if (*p == '\\' && p[1] != '\0')
                    p++;
                if (vlen + 1 < sizeof(value))
                    value[vlen++] = *p;
                p++;
            }
            if (*p != '"')
                return -TELO_EPROTO;
            p++;
        } else {
            while (*p != '\0' && *p != ',' && *p != ' ') {
                if (vlen + 1 < sizeof(value))
                    value[vlen++] = *p;
                p++;
            }
        }
        value[vlen] = '\0';
        char *slot = NULL;
        size_t slen = 0;
        if (nlen == 5 && strncasecmp(name, "realm", 5) == 0)
            slot = out->realm, slen = sizeof(out->realm);
        else if (nlen == 7 && strncasecmp(name, "service", 7) == 0)
            slot = out->service, slen = sizeof(out->service);
        else if (nlen == 5 && strncasecmp(name, "scope", 5) == 0)
            slot = out->scope, slen = sizeof(out->scope);
        if (slot != NULL)
            snprintf(slot, slen, "%s", value);
    }
    return 0;
}

/* The scheme and host of url as curl would connect (userinfo, port and brackets aside), into
 * scheme and host. Returns 0, or -1 when url does not parse or has no host. */
static int url_scheme_host(const char *url, char *scheme, size_t slen, char *host, size_t hlen)
{
    CURLU *u = curl_url();
    char *sch = NULL, *h = NULL;
    int rc = -1;
    if (u != NULL && url != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &sch, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK && h[0] != '\0' && strlen(sch) < slen &&
        strlen(h) < hlen) {
        snprintf(scheme, slen, "%s", sch);
        snprintf(host, hlen, "%s", h);
        rc = 0;
    }
    curl_free(sch);
    curl_free(h);
    curl_url_cleanup(u);
    return rc;
}

/* The host of "host[:port]" or "[v6]:port", without the port. */
static void host_only(const char *hostport, char *out, size_t len)
{
    char url[600];
    char scheme[16];
    snprintf(url, sizeof(url), "https://%s/", hostport);
    if (url_scheme_host(url, scheme, sizeof(scheme), out, len) != 0)
        snprintf(out, len, "%s", hostport);
}

static int is_docker_hub(const char *host)
{
    return strcasecmp(host, "docker.io") == 0 || strcasecmp(host, "index.docker.io") == 0 ||
           strcasecmp(host, "registry-1.docker.io") == 0;
}

int build_registry_realm_trusted(const char *realm, const char *registry_host, const char *api_url,
                                 int insecure)
{
    char scheme[16], host[300], own[300], api_scheme[16], api_host[300];
    if (url_scheme_host(realm, scheme, sizeof(scheme), host, sizeof(host)) != 0)
        return 0;
    if (strcasecmp(scheme, "https") != 0 && !(insecure && strcasecmp(scheme, "http") == 0))
        return 0;
    /* curl also reads "https:/host" and "https:host"; a realm the registry wrote that way is
     * refused rather than trusted on curl's reading of it. */
    size_t slen = strlen(scheme);
    if (strncasecmp(realm, scheme, slen) != 0 || strncmp(realm + slen, "://", 3) != 0)
        return 0;
    if (registry_host != NULL) {
        host_only(registry_host, own, sizeof(own));
        if (strcasecmp(host, own) == 0)
            return 1;
        if (is_docker_hub(own) && strcasecmp(host, "auth.docker.io") == 0)
            return 1;
    }
    if (api_url != NULL &&
        url_scheme_host(api_url, api_scheme, sizeof(api_scheme), api_host, sizeof(api_host)) == 0 &&
        strcasecmp(host, api_host) == 0)
        return 1;
    return 0;
}

/* ---- the checker ---- */

struct cache_entry {
    char *ref;
    char *digest;
};

struct build_registry {
    struct ev_loop *loop;
    struct build_http *http;
    struct build_registry_opts opts;
    struct build_registry_check *checks;
    struct strmap *cache; /* ref -> struct cache_entry */
    char **order;         /* ring of cached refs, oldest at order_head */
    size_t order_head, order_len;
};

struct build_registry_check {
    struct build_registry *r;
    struct build_registry_check *prev, *next;
    char *ref, *host, *path, *tag, *head_url, *secret_name;
    char *basic;             /* base64 "user:password", or NULL */
    char *api_url;           /* build.registryApiUrl, or NULL */
    char *bearer;            /* token from the challenge, or NULL */
    char token_service[208]; /* the realm that gave it, for messages */
    int insecure;
    int attempts;
    int token_tried;
    struct build_http_call *call;
    ev_timer timer; /* retry delay, or the cached answer's zero delay */
    int cached;
    build_registry_done_fn *done;
    void *ud;
    char last_error[320]; /* what the last transient failure was */
};

static void check_free(struct build_registry_check *c)
{
    struct build_registry *r = c->r;
    ev_timer_stop(r->loop, &c->timer);
    build_http_cancel(c->call);
    if (r->checks == c)
        r->checks = c->next;
    else
        c->prev->next = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c->api_url);
    if (c->basic != NULL)
        OPENSSL_cleanse(c->basic, strlen(c->basic));
    if (c->bearer != NULL)
        OPENSSL_cleanse(c->bearer, strlen(c->bearer));
    free(c->ref);
    free(c->host);
    free(c->path);
    free(c->tag);
    free(c->head_url);
    free(c->secret_name);
    free(c->basic);
    free(c->bearer);
    free(c);
}

static void cache_put(struct build_registry *r, const char *ref, const char *digest)
{
    if (strmap_get(r->cache, ref) != NULL)
        return;
    if (r->order_len == r->opts.cache_max) {
        char *oldest = r->order[r->order_head];
        struct cache_entry *e = strmap_remove(r->cache, oldest);
        if (e != NULL) {
            free(e->ref);
            free(e->digest);
            free(e);
        }
        free(oldest);
        r->order_head = (r->order_head + 1) % r->opts.cache_max;
        r->order_len--;
    }
    struct cache_entry *e = calloc(1, sizeof(*e));
    char *copy = strdup(ref);
    if (e == NULL || copy == NULL || (e->ref = strdup(ref)) == NULL ||
        (digest != NULL && (e->digest = strdup(digest)) == NULL) ||
        strmap_put(r->cache, e->ref, e) != 0) {
        /* A cache that misses costs one request later; nothing to report. */
        if (e != NULL) {
            free(e->ref);
            free(e->digest);
        }
        free(e);
        free(copy);
        return;
    }
    r->order[(r->order_head + r->order_len) % r->opts.cache_max] = copy;
    r->order_len++;
}

int build_registry_cached(const struct build_registry *r, const char *ref)
{
    return strmap_get(r->cache, ref) != NULL;
}

void build_registry_forget(struct build_registry *r, const char *ref)
{
    struct cache_entry *e = strmap_remove(r->cache, ref);
    if (e != NULL) {
        free(e->ref);
        free(e->digest);
        free(e);
    }
}

static void finish(struct build_registry_check *c, enum build_image_presence presence,
                   const char *digest, const char *message)
{
    if (presence == BUILD_IMAGE_PRESENT && !c->cached && !c->r->opts.no_cache)
        cache_put(c->r, c->ref, digest);
    struct build_registry_result res = {
        .presence = presence,
        .ref = c->ref,
        .digest = digest,
        .from_cache = c->cached,
        .attempts = c->attempts,
        .message = message != NULL ? message : "",
        .last_error = presence == BUILD_IMAGE_UNKNOWN ? c->last_error : "",
    };
    c->call = NULL; /* freed by the HTTP client after its callback */
    c->done(c, &res, c->ud);
    check_free(c);
}

static void start_head(struct build_registry_check *c);

/* A transient failure: try again after a doubling delay, or give up and say "missing". */
static void transient(struct build_registry_check *c, const char *why)
{
    c->call = NULL;
    struct build_registry *r = c->r;
    snprintf(c->last_error, sizeof(c->last_error), "%.300s", why);
    if (c->attempts < r->opts.max_attempts) {
        long delay = r->opts.retry_delay_ms << (c->attempts - 1 < 6 ? c->attempts - 1 : 6);
        telo_log(TELO_LOG_DEBUG, "registry check failed; retrying",
                 "ref=%s attempt=%d delay_ms=%ld "
                 "error=\"%s\"",
                 c->ref, c->attempts, delay, why);
        ev_timer_set(&c->timer, (double)delay / 1000.0, 0.);
        ev_timer_start(r->loop, &c->timer);
        return;
    }
    char msg[MESSAGE_MAX];
    snprintf(msg, sizeof(msg),
             "registry check of %s failed %d times (last: %.300s); treating the image as missing "
             "and building it",
             c->ref, c->attempts, why);
    finish(c, BUILD_IMAGE_UNKNOWN, NULL, msg);
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct build_registry_check *c = w->data;
    if (c->cached) {
        struct cache_entry *e = strmap_get(c->r->cache, c->ref);
        finish(c, BUILD_IMAGE_PRESENT, e != NULL ? e->digest : NULL, NULL);
        return;
    }
    c->token_tried = 0;
    free(c->bearer);
    c->bearer = NULL;
    start_head(c);
}

/* The first "message" of an OCI error body ({"errors":[{"code","message"}]}), or "". */
static void error_detail(const struct buf *body, char *out, size_t len)
{
    out[0] = '\0';
    if (body == NULL || body->len == 0)
        return;
    struct json_object *root = json_tokener_parse(body->data);
    struct json_object *errs = jget_array(root, "errors");
    if (errs != NULL && json_object_array_length(errs) > 0) {
        struct json_object *e0 = json_object_array_get_idx(errs, 0);
        const char *code = jget_string(e0, "code"), *m = jget_string(e0, "message");
        snprintf(out, len, " (%s%s%.200s)", code ? code : "", code && m ? ": " : "", m ? m : "");
    }
    json_object_put(root);
}

static void on_token(struct build_http_call *call, const struct build_http_response *resp,
                     void *ud);

static void deny(struct build_registry_check *c, long code, const char *detail, int token)
{
    char msg[MESSAGE_MAX];
    if (c->basic == NULL && (code == 401 || code == 403))
        snprintf(msg, sizeof(msg),
                 "registry %s wants credentials for %s (HTTP %ld%s) and no push Secret is "
                 "configured: give the operator a dockerconfigjson Secret with an entry for %s",
                 c->host, c->path, code, detail, c->host);
    else if (code == 401)
        snprintf(msg, sizeof(msg),
                 "registry %s refused the credentials of Secret %s%s: HTTP 401%s; fix the "
                 "username and password of its entry for %s",
                 c->host, c->secret_name, token ? " at its token service" : "", detail, c->host);
    else
        snprintf(msg, sizeof(msg),
                 "registry %s denied access to %s with the credentials of Secret %s: HTTP %ld%s; "
                 "grant them pull and push on the repository",
                 c->host, c->path, c->secret_name, code, detail);
    finish(c, BUILD_IMAGE_DENIED, NULL, msg);
}

/* How every answer begins: the call is over, and no HTTP response at all is transient. Returns 0
 * with the body's error detail in detail, or -1 when c was finished here. */
static int answer_begin(struct build_registry_check *c, const struct build_http_response *resp,
                        char *detail, size_t len)
{
    c->call = NULL;
    if (resp->rc != 0) {
        transient(c, resp->err->msg);
        return -1;
    }
    error_detail(resp->body, detail, len);
    return 0;
}

static void start_token(struct build_registry_check *c, const struct build_auth_challenge *ch)
{
    snprintf(c->token_service, sizeof(c->token_service), "%.200s", ch->realm);
    struct buf url;
    buf_init(&url, 4096);
    int rc = buf_append_str(&url, ch->realm);
    char scope[600];
    if (ch->scope[0] != '\0')
        snprintf(scope, sizeof(scope), "%s", ch->scope);
    else
        snprintf(scope, sizeof(scope), "repository:%s:pull", c->path);
    /* url_query_add starts with '?' unless the realm already carries a query. */
    if (rc == 0 && ch->service[0] != '\0')
        rc = url_query_add(&url, "service", ch->service);
    if (rc == 0)
        rc = url_query_add(&url, "scope", scope);
    char auth[2048];
    const char *headers[3] = {"Accept: application/json", NULL, NULL};
    /* The realm is the registry's word: the Secret goes only to the registry's own token
     * service; another one gets an anonymous request (and a registry that needs credentials
     * there answers 401, which says what to fix). */
    int trusted = build_registry_realm_trusted(ch->realm, c->host, c->api_url, c->insecure);
    if (c->basic != NULL && !trusted)
        telo_log(TELO_LOG_WARN,
                 "registry token realm is not the registry's own host: asking without credentials",
                 "ref=%s realm=\"%.200s\"", c->ref, ch->realm);
    if (c->basic != NULL && trusted) {
        snprintf(auth, sizeof(auth), "Authorization: Basic %s", c->basic);
        headers[1] = auth;
    }
    struct build_http_request req = {.method = "GET",
                                     .url = url.data,
                                     .headers = headers,
                                     .timeout_ms = c->r->opts.timeout_ms,
                                     .max_body = TOKEN_BODY_MAX,
                                     .insecure_tls = c->insecure};
    struct telo_err err;
    telo_err_clear(&err);
    c->call = rc == 0 ? build_http_submit(c->r->http, &req, on_token, c, &err) : NULL;
    OPENSSL_cleanse(auth, sizeof(auth));
    buf_release(&url);
    if (c->call == NULL) {
        char msg[MESSAGE_MAX];
        snprintf(msg, sizeof(msg), "registry %s: cannot ask its token service '%.200s': %.200s",
                 c->host, ch->realm, rc != 0 ? "URL too long" : err.msg);
        snprintf(c->last_error, sizeof(c->last_error), "%.300s", msg);
        finish(c, BUILD_IMAGE_UNKNOWN, NULL, msg);
    }
}

static void on_head(struct build_http_call *call, const struct build_http_response *resp, void *ud)
{
    (void)call;
    struct build_registry_check *c = ud;
    char detail[300];
    if (answer_begin(c, resp, detail, sizeof(detail)) != 0)
        return;
    switch (resp->code) {
    case 200:
        finish(c, BUILD_IMAGE_PRESENT, resp->content_digest, NULL);
        return;
    case 404:
        finish(c, BUILD_IMAGE_ABSENT, NULL, NULL);
        return;
    case 401: {
        struct build_auth_challenge ch;
        if (!c->token_tried && resp->www_authenticate != NULL &&
            build_auth_challenge_parse(resp->www_authenticate, &ch) == 0 &&
            strcasecmp(ch.scheme, "Bearer") == 0 && ch.realm[0] != '\0') {
            c->token_tried = 1;
            start_token(c, &ch);
            return;
        }
        deny(c, 401, detail, c->bearer != NULL);
        return;
    }
    case 403:
        deny(c, 403, detail, 0);
        return;
    default: {
        char why[800];
        snprintf(why, sizeof(why), "HEAD %.300s answered HTTP %ld%s", c->head_url, resp->code,
                 detail);
        transient(c, why);
        return;
    }
    }
}

/* Whether token can go into the Authorization header as is: RFC 6750's b64token is printable
 * ASCII, and curl sends a CR or LF in a header through, so a token service could add headers of
 * its own to the registry request. Returns 0, or -1 with why (len bytes) saying what is wrong. */
static int token_check(const char *token, char *why, size_t len)
{
    size_t n = strlen(token);
    if (n > TOKEN_MAX) {
        snprintf(why, len, "a token of %zu bytes (at most %d are taken)", n, TOKEN_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)token[i];
        if (b < 0x21 || b > 0x7e) {
            snprintf(why, len,
                     "a token with byte 0x%02x at offset %zu (only printable ASCII, "
                     "0x21-0x7e, may go into an Authorization header)",
                     b, i);
            return -1;
        }
    }
    return 0;
}

static void on_token(struct build_http_call *call, const struct build_http_response *resp, void *ud)
{
    (void)call;
    struct build_registry_check *c = ud;
    char detail[300];
    if (answer_begin(c, resp, detail, sizeof(detail)) != 0)
        return;
    if (resp->code == 401 || resp->code == 403) {
        deny(c, resp->code, detail, 1);
        return;
    }
    if (resp->code != 200) {
        char why[400];
        snprintf(why, sizeof(why), "the token service answered HTTP %ld%s", resp->code, detail);
        transient(c, why);
        return;
    }
    struct json_object *root = resp->body->len ? json_tokener_parse(resp->body->data) : NULL;
    const char *token = jget_string(root, "token");
    if (token == NULL || token[0] == '\0')
        token = jget_string(root, "access_token");
    if (token == NULL || token[0] == '\0') {
        json_object_put(root);
        transient(c, "the token service answered without a token");
        return;
    }
    char why[160];
    if (token_check(token, why, sizeof(why)) < 0) {
        json_object_put(root);
        /* Asking again would get the same token: the answer is final, and names the service. */
        char msg[MESSAGE_MAX];
        snprintf(msg, sizeof(msg),
                 "registry %s: its token service '%s' answered %s; refusing it, treating the "
                 "image as missing and building it (fix the token service)",
                 c->host, c->token_service, why);
        snprintf(c->last_error, sizeof(c->last_error), "%.300s", msg);
        finish(c, BUILD_IMAGE_UNKNOWN, NULL, msg);
        return;
    }
    free(c->bearer);
    c->bearer = strdup(token);
    json_object_put(root);
    if (c->bearer == NULL) {
        transient(c, "out of memory");
        return;
    }
    start_head(c);
}

static void start_head(struct build_registry_check *c)
{
    char auth[sizeof(BEARER) + TOKEN_MAX];
    const char *headers[3] = {BUILD_MANIFEST_ACCEPT, NULL, NULL};
    if (c->bearer != NULL) {
        snprintf(auth, sizeof(auth), BEARER "%s", c->bearer);
        headers[1] = auth;
    } else if (c->basic != NULL) {
        /* Sent up front, as the reference does: a Basic-only registry never challenges twice. */
        snprintf(auth, sizeof(auth), "Authorization: Basic %s", c->basic);
        headers[1] = auth;
    } else {
        auth[0] = '\0';
    }
    if (c->bearer == NULL)
        c->attempts++;
    struct build_http_request req = {.method = "HEAD",
                                     .url = c->head_url,
                                     .headers = headers,
                                     .timeout_ms = c->r->opts.timeout_ms,
                                     .insecure_tls = c->insecure};
    struct telo_err err;
    telo_err_clear(&err);
    c->call = build_http_submit(c->r->http, &req, on_head, c, &err);
    OPENSSL_cleanse(auth, sizeof(auth));
    if (c->call == NULL) {
        snprintf(c->last_error, sizeof(c->last_error), "%.300s", err.msg);
        finish(c, BUILD_IMAGE_UNKNOWN, NULL, err.msg);
    }
}

struct build_registry_check *build_registry_check(struct build_registry *r,
                                                  const struct build_registry_query *q,
                                                  build_registry_done_fn *done, void *ud,
                                                  struct telo_err *err)
{
    char host[256], path[512];
    if (done == NULL || q == NULL || q->tag == NULL || q->tag[0] == '\0' ||
        strspn(q->tag, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            strlen(q->tag) ||
        strlen(q->tag) > 128) {
        telo_err_set(err, TELO_EINVAL, "registry check: a callback and a valid tag are required");
        return NULL;
    }
    if (build_repository_split(q->repository, host, sizeof(host), path, sizeof(path), err) != 0)
        return NULL;
    if (q->api_url != NULL && strncmp(q->api_url, "http://", 7) != 0 &&
        strncmp(q->api_url, "https://", 8) != 0) {
        telo_err_set(err, TELO_EINVAL, "registry API URL '%s' must start with http:// or https://",
                     q->api_url);
        return NULL;
    }
    if (q->dockerconfigjson != NULL && !q->insecure && q->api_url != NULL &&
        strncmp(q->api_url, "http://", 7) == 0) {
        telo_err_set(err, TELO_EINVAL,
                     "registry API URL '%s' is plain HTTP: the credentials of Secret %s are sent "
                     "only over TLS; use https:// or, for a registry that serves plain HTTP, set "
                     "build.insecureRegistry=true",
                     q->api_url, q->secret_name != NULL ? q->secret_name : "(push secret)");
        return NULL;
    }
    char *user = NULL, *password = NULL, *basic = NULL;
    if (q->dockerconfigjson != NULL) {
        struct telo_err aerr;
        telo_err_clear(&aerr);
        int rc = build_dockerconfig_auth(q->dockerconfigjson, q->dockerconfigjson_len, host, &user,
                                         &password, &aerr);
        if (rc != 0) {
            telo_err_set(err, rc == -TELO_ENOMEM ? TELO_ENOMEM : TELO_EINVAL, "Secret %s: %s",
                         q->secret_name != NULL ? q->secret_name : "(push secret)", aerr.msg);
            return NULL;
        }
        struct buf pair;
        buf_init(&pair, 8192);
        if (buf_printf(&pair, "%s:%s", user, password) == 0)
            basic = util_base64_encode(pair.data, pair.len, NULL);
        if (pair.data != NULL)
            OPENSSL_cleanse(pair.data, pair.len);
        buf_release(&pair);
        if (password != NULL)
            OPENSSL_cleanse(password, strlen(password));
        free(user);
        free(password);
        if (basic == NULL) {
            telo_err_set(err, TELO_ENOMEM, "out of memory");
            return NULL;
        }
    }
    struct build_registry_check *c = calloc(1, sizeof(*c));
    struct buf url, ref;
    buf_init(&url, 4096);
    buf_init(&ref, 1024);
    int rc = c != NULL ? 0 : -1;
    if (rc == 0 && q->api_url != NULL) {
        size_t n = strlen(q->api_url);
        while (n > 0 && q->api_url[n - 1] == '/')
            n--;
        rc = buf_printf(&url, "%.*s", (int)n, q->api_url);
    } else if (rc == 0) {
        rc = buf_printf(&url, "%s://%s", q->insecure ? "http" : "https", host);
    }
    if (rc == 0)
        rc = buf_printf(&url, "/v2/%s/manifests/%s", path, q->tag);
    if (rc == 0)
        rc = buf_printf(&ref, "%s/%s:%s", host, path, q->tag);
    if (rc == 0) {
        c->r = r;
        c->done = done;
        c->ud = ud;
        c->insecure = q->insecure;
        c->basic = basic;
        c->head_url = buf_steal(&url);
        c->ref = buf_steal(&ref);
        c->host = strdup(host);
        c->path = strdup(path);
        c->tag = strdup(q->tag);
        c->secret_name = strdup(q->secret_name != NULL ? q->secret_name : "(push secret)");
        c->api_url = q->api_url != NULL ? strdup(q->api_url) : NULL;
        if ((q->api_url != NULL && c->api_url == NULL) || c->head_url == NULL || c->ref == NULL ||
            c->host == NULL || c->path == NULL || c->tag == NULL || c->secret_name == NULL)
            rc = -1;
    }
    buf_release(&url);
    buf_release(&ref);
    if (rc != 0) {
        if (c != NULL) {
            free(c->head_url);
            free(c->ref);
            free(c->host);
            free(c->path);
            free(c->tag);
            free(c->secret_name);
            free(c->api_url);
            free(c);
        }
        free(basic);
        telo_err_set(err, TELO_ENOMEM, "out of memory starting a registry check");
        return NULL;
    }
    ev_timer_init(&c->timer, timer_cb, 0., 0.);
    c->timer.data = c;
    c->next = r->checks;
    if (r->checks != NULL)
        r->checks->prev = c;
    r->checks = c;
    if (!r->opts.no_cache && build_registry_cached(r, c->ref)) {
        c->cached = 1;
        ev_timer_start(r->loop, &c->timer);
        return c;
    }
    /* Through the timer too, so the callback never runs inside this function. */
    ev_timer_start(r->loop, &c->timer);
    return c;
}

void build_registry_check_cancel(struct build_registry_check *c)
{
    if (c != NULL)
        check_free(c);
}

struct build_registry *build_registry_new(struct ev_loop *loop,
                                          const struct build_registry_opts *opts,
                                          struct telo_err *err)
{
    struct build_registry *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory creating the registry checker");
        return NULL;
    }
    r->loop = loop;
    if (opts != NULL)
        r->opts = *opts;
    if (r->opts.max_attempts <= 0)
        r->opts.max_attempts = DEFAULT_ATTEMPTS;
    if (r->opts.retry_delay_ms <= 0)
        r->opts.retry_delay_ms = DEFAULT_DELAY_MS;
    if (r->opts.timeout_ms <= 0)
        r->opts.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (r->opts.cache_max == 0)
        r->opts.cache_max = DEFAULT_CACHE_MAX;
    r->cache = strmap_new();
    r->order = calloc(r->opts.cache_max, sizeof(*r->order));
    r->http = r->cache && r->order ? build_http_new(loop, err) : NULL;
    if (r->http == NULL) {
        strmap_free(r->cache);
        free(r->order);
        free(r);
        if (err != NULL && err->code == 0)
            telo_err_set(err, TELO_ENOMEM, "out of memory creating the registry checker");
        return NULL;
    }
    return r;
}

void build_registry_free(struct build_registry *r)
{
    if (r == NULL)
        return;
    /* check_free calls back no one, so the list changes only by c. */
    for (struct build_registry_check *c = r->checks, *next; c != NULL; c = next) {
        next = c->next;
        check_free(c);
    }
    build_http_free(r->http);
    struct strmap_iter it = {0};
    const char *key;
    void *val;
    while (strmap_next(r->cache, &it, &key, &val)) {
        struct cache_entry *e = val;
        free(e->ref);
        free(e->digest);
        free(e);
    }
    strmap_free(r->cache);
    for (size_t i = 0; i < r->order_len; i++)
        free(r->order[(r->order_head + i) % r->opts.cache_max]);
    free(r->order);
    free(r);
}

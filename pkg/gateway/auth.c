/* Admission of an attach request: finds the TeloSession and decides whether the presented token
 * may attach to it (the session's own attach token, or a Kubernetes bearer token that passes
 * TokenReview and a SubjectAccessReview for create on telosessions/attach). */
#include "gateway/auth.h"

#include "kube/rest.h"
#include "kube/transport.h"
#include "util/base64.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/strmap.h"
#include "util/timefmt.h"

#include <ev.h>
#include <json.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAX 4096

struct cached {
    char key[2 * SHA256_DIGEST_LENGTH + 2 * 254 + 3]; /* hex(sha256(token))/ns/name */
    enum gw_verdict verdict;
    char subject[128];
    char reason[160];
    double expires;
};

struct gw_auth {
    struct kube_transport *t;
    double ttl;
    struct strmap *cache;
    char *audience; /* TokenReview spec.audiences[0]; NULL: the API server's own */
};

enum step { GET_SESSION, GET_SECRET, TOKEN_REVIEW, ACCESS_REVIEW };

struct gw_admission {
    struct gw_auth *a;
    gw_admit_fn *cb;
    void *ud;
    struct kube_call *call;
    enum step step;
    char namespace[254];
    char name[254];
    char *token;
    char cache_key[sizeof(((struct cached *)0)->key)];
    int session_found;
    char phase[32];
    char pod[254];
    char pod_ip[64];
    int inspect;
    int fresh; /* a re-authorization: no cached decision is used */
    char uid[64];
    double ready_since;
    int exit_code;
    char subject[128];
    struct json_object *user; /* TokenReview status.user, for the SubjectAccessReview */
};

int gw_token_equal(const char *a, const char *b)
{
    unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)a, strlen(a), da);
    SHA256((const unsigned char *)b, strlen(b), db);
    return CRYPTO_memcmp(da, db, sizeof(da)) == 0;
}

struct gw_auth *gw_auth_new(struct kube_transport *t, double cache_ttl_s)
{
    struct gw_auth *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->t = t;
    a->ttl = cache_ttl_s;
    a->cache = strmap_new();
    if (a->cache == NULL) {
        free(a);
        return NULL;
    }
    return a;
}

static void cache_clear(struct gw_auth *a)
{
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(a->cache, &it, &key, &v)) {
        strmap_remove(a->cache, key);
        free(v);
    }
}

void gw_auth_free(struct gw_auth *a)
{
    if (a == NULL)
        return;
    cache_clear(a);
    strmap_free(a->cache);
    free(a->audience);
    free(a);
}

static double now(const struct gw_auth *a)
{
    return ev_now(kube_transport_loop(a->t));
}

static void admission_free(struct gw_admission *adm)
{
    if (adm->token != NULL) {
        OPENSSL_cleanse(adm->token, strlen(adm->token));
        free(adm->token);
    }
    json_object_put(adm->user);
    free(adm);
}

static void decide(struct gw_admission *adm, enum gw_verdict v, const char *reason)
{
    struct gw_admitted res = {.verdict = v,
                              .reason = reason,
                              .subject = adm->subject,
                              .phase = adm->phase,
                              .pod = adm->pod,
                              .pod_ip = adm->pod_ip,
                              .inspect = adm->inspect,
                              .uid = adm->uid,
                              .ready_since = adm->ready_since,
                              .exit_code = adm->exit_code};
    adm->call = NULL;
    adm->cb(&res, adm->ud);
    admission_free(adm);
}

/* Records a bearer-token decision (not API failures, which are retried next time). */
static void remember(struct gw_admission *adm, enum gw_verdict v, const char *reason)
{
    struct gw_auth *a = adm->a;
    if (a->ttl <= 0 || v == GW_UNAVAILABLE)
        return;
    if (strmap_len(a->cache) >= CACHE_MAX)
        cache_clear(a);
    struct cached *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    snprintf(c->key, sizeof(c->key), "%s", adm->cache_key);
    snprintf(c->subject, sizeof(c->subject), "%s", adm->subject);
    snprintf(c->reason, sizeof(c->reason), "%s", reason);
    c->verdict = v;
    c->expires = now(a) + a->ttl;
    free(strmap_remove(a->cache, c->key));
    if (strmap_put(a->cache, c->key, c) != 0)
        free(c);
}

/* The verdict for a bearer token once the session question is settled. */
static void bearer_verdict(struct gw_admission *adm, enum gw_verdict v, const char *reason)
{
    remember(adm, v, reason);
    if (v == GW_ALLOW && !adm->session_found)
        return decide(adm, GW_NOT_FOUND, "no such TeloSession");
    decide(adm, v, reason);
}

static void start(struct gw_admission *adm, enum step step);

static void unavailable(struct gw_admission *adm, const struct kube_result *res, const char *what)
{
    char why[TELO_ERR_MSG_MAX + 64];
    snprintf(why, sizeof(why), "%s failed: %s", what, res->err ? res->err->msg : "no answer");
    decide(adm, GW_UNAVAILABLE, why);
}

static void on_access_review(const struct kube_result *res, void *ud)
{
    struct gw_admission *adm = ud;
    if (res->rc != 0)
        return unavailable(adm, res, "SubjectAccessReview");
    int allowed = 0;
    if (jget_bool(jget(res->object, "status"), "allowed", &allowed) == 0 && allowed)
        return bearer_verdict(adm, GW_ALLOW, "RBAC allows create telosessions/attach");
    bearer_verdict(adm, GW_FORBIDDEN, "RBAC does not allow create telosessions/attach");
}

/* Whether a TokenReview's status.audiences holds want (the token is valid for it). */
static int audience_granted(struct json_object *status, const char *want)
{
    struct json_object *auds = jget_array(status, "audiences");
    for (size_t i = 0; auds != NULL && i < json_object_array_length(auds); i++) {
        const char *aud = jget_string_of(json_object_array_get_idx(auds, i));
        if (aud != NULL && strcmp(aud, want) == 0)
            return 1;
    }
    return 0;
}

static void on_token_review(const struct kube_result *res, void *ud)
{
    struct gw_admission *adm = ud;
    if (res->rc != 0)
        return unavailable(adm, res, "TokenReview");
    struct json_object *status = jget_object(res->object, "status");
    struct json_object *user = jget_object(status, "user");
    int authenticated = 0;
    if (jget_bool(status, "authenticated", &authenticated) != 0 || !authenticated || user == NULL)
        return bearer_verdict(adm, GW_UNAUTHENTICATED,
                              "neither the session's token nor a valid Kubernetes token");
    if (adm->a->audience != NULL && !audience_granted(status, adm->a->audience))
        return bearer_verdict(adm, GW_UNAUTHENTICATED,
                              "the Kubernetes token is not for this gateway's audience");
    const char *username = jget_string(jget(status, "user"), "username");
    snprintf(adm->subject, sizeof(adm->subject), "%s", username ? username : "");
    adm->user = json_object_get(user);
    start(adm, ACCESS_REVIEW);
}

static void on_secret(const struct kube_result *res, void *ud)
{
    struct gw_admission *adm = ud;
    if (res->rc != 0 && res->code != 404)
        return unavailable(adm, res, "reading the attach Secret");
    const char *b64 = res->rc == 0 ? jget_string(jget(res->object, "data"), "token") : NULL;
    if (b64 != NULL) {
        size_t len = 0;
        unsigned char *plain = util_base64_decode(b64, strlen(b64), &len);
        int equal = 0;
        if (plain != NULL) {
            equal = gw_token_equal((const char *)plain, adm->token);
            OPENSSL_cleanse(plain, len);
        }
        free(plain);
        if (equal) {
            snprintf(adm->subject, sizeof(adm->subject), "session-token");
            return decide(adm, GW_ALLOW, "the session's attach token");
        }
    }
    start(adm, TOKEN_REVIEW);
}

/* A cached bearer decision, if fresh. */
static const struct cached *cache_get(struct gw_admission *adm)
{
    struct cached *c = strmap_get(adm->a->cache, adm->cache_key);
    if (c == NULL)
        return NULL;
    if (c->expires < now(adm->a)) {
        free(strmap_remove(adm->a->cache, adm->cache_key));
        return NULL;
    }
    return c;
}

/* When status.conditions' Ready last turned True, 0 when it is not True. */
static double ready_since(struct json_object *status)
{
    struct json_object *conds = jget_array(status, "conditions");
    for (size_t i = 0; conds != NULL && i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *type = jget_string(c, "type"), *st = jget_string(c, "status");
        if (type != NULL && strcmp(type, "Ready") == 0 && st != NULL && strcmp(st, "True") == 0) {
            double t = timefmt_parse(jget_string(c, "lastTransitionTime"));
            return t > 0 ? t : 0;
        }
    }
    return 0;
}

static void on_session(const struct kube_result *res, void *ud)
{
    struct gw_admission *adm = ud;
    if (res->rc != 0 && res->code != 404)
        return unavailable(adm, res, "reading the TeloSession");
    adm->session_found = res->rc == 0;
    const char *uid = adm->session_found ? jget_string(jget(res->object, "metadata"), "uid") : NULL;
    snprintf(adm->uid, sizeof(adm->uid), "%s", uid ? uid : "");
    const char *secret = NULL;
    struct json_object *status = adm->session_found ? jget_object(res->object, "status") : NULL;
    if (status != NULL) {
        const char *phase = jget_string(status, "phase");
        const char *pod = jget_string(status, "podName");
        snprintf(adm->phase, sizeof(adm->phase), "%s", phase ? phase : "");
        const char *ip = jget_string(status, "podIP");
        snprintf(adm->pod, sizeof(adm->pod), "%s", pod ? pod : "");
        snprintf(adm->pod_ip, sizeof(adm->pod_ip), "%s", ip ? ip : "");
        adm->inspect = jget_string(status, "inspectUrl") != NULL;
        adm->ready_since = ready_since(status);
        int64_t code = 0;
        if (jget_int(status, "exitCode", &code) == 0 && code >= INT32_MIN && code <= INT32_MAX)
            adm->exit_code = (int)code;
        secret = jget_string(jget(status, "attach"), "secretName");
    }
    /* A bearer token decided moments ago is not reviewed again (the cache never holds the
     * session-token path, which is one cheap Secret read). */
    const struct cached *c = adm->fresh ? NULL : cache_get(adm);
    if (c != NULL) {
        snprintf(adm->subject, sizeof(adm->subject), "%s", c->subject);
        char reason[200];
        snprintf(reason, sizeof(reason), "%s (cached)", c->reason);
        if (c->verdict == GW_ALLOW && !adm->session_found)
            return decide(adm, GW_NOT_FOUND, "no such TeloSession");
        return decide(adm, c->verdict, reason);
    }
    if (secret == NULL)
        return start(adm, TOKEN_REVIEW);
    struct kube_ref ref = {
        .version = "v1", .resource = "secrets", .namespace = adm->namespace, .name = secret};
    struct telo_err err = {0};
    adm->step = GET_SECRET;
    adm->call = kube_rest_get(adm->a->t, &ref, on_secret, adm, &err);
    if (adm->call == NULL)
        decide(adm, GW_UNAVAILABLE, err.msg);
}

static struct json_object *review(const char *group, const char *kind, struct json_object *spec)
{
    struct json_object *o = json_object_new_object();
    char api_version[64];
    snprintf(api_version, sizeof(api_version), "%s/v1", group);
    json_object_object_add(o, "apiVersion", json_object_new_string(api_version));
    json_object_object_add(o, "kind", json_object_new_string(kind));
    json_object_object_add(o, "spec", spec);
    return o;
}

static void start(struct gw_admission *adm, enum step step)
{
    struct json_object *spec = json_object_new_object(), *body;
    struct kube_ref ref = {.version = "v1"};
    kube_result_fn *cb;
    if (step == TOKEN_REVIEW) {
        json_object_object_add(spec, "token", json_object_new_string(adm->token));
        if (adm->a->audience != NULL) {
            struct json_object *auds = json_object_new_array();
            json_object_array_add(auds, json_object_new_string(adm->a->audience));
            json_object_object_add(spec, "audiences", auds);
        }
        body = review("authentication.k8s.io", "TokenReview", spec);
        ref.group = "authentication.k8s.io";
        ref.resource = "tokenreviews";
        cb = on_token_review;
    } else {
        static const char *const copied[] = {"uid", "groups", "extra"};
        struct json_object *attrs = json_object_new_object();
        json_object_object_add(spec, "user",
                               json_object_new_string(jget_string(adm->user, "username")
                                                          ? jget_string(adm->user, "username")
                                                          : ""));
        for (size_t i = 0; i < sizeof(copied) / sizeof(copied[0]); i++) {
            /* The user as the TokenReview described it, passed on as it came (a missing or null
             * member stays out). */
            struct json_object *v = jget(adm->user, copied[i]);
            if (v != NULL)
                json_object_object_add(spec, copied[i], json_object_get(v));
        }
        json_object_object_add(attrs, "namespace", json_object_new_string(adm->namespace));
        json_object_object_add(attrs, "verb", json_object_new_string("create"));
        json_object_object_add(attrs, "group", json_object_new_string("telo.run"));
        json_object_object_add(attrs, "resource", json_object_new_string("telosessions"));
        json_object_object_add(attrs, "subresource", json_object_new_string("attach"));
        json_object_object_add(attrs, "name", json_object_new_string(adm->name));
        json_object_object_add(spec, "resourceAttributes", attrs);
        body = review("authorization.k8s.io", "SubjectAccessReview", spec);
        ref.group = "authorization.k8s.io";
        ref.resource = "subjectaccessreviews";
        cb = on_access_review;
    }
    const char *text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    struct telo_err err = {0};
    adm->step = step;
    adm->call = kube_rest_create(adm->a->t, &ref, text, strlen(text), NULL, cb, adm, &err);
    json_object_put(body);
    if (adm->call == NULL)
        decide(adm, GW_UNAVAILABLE, err.msg);
}

static struct gw_admission *admit(struct gw_auth *a, const char *namespace, const char *name,
                                  const char *token, int fresh, gw_admit_fn *cb, void *ud,
                                  struct telo_err *err)
{
    struct gw_admission *adm = calloc(1, sizeof(*adm));
    if (adm == NULL || (adm->token = strdup(token)) == NULL) {
        free(adm);
        telo_err_set(err, TELO_ENOMEM, "admission: out of memory");
        return NULL;
    }
    adm->a = a;
    adm->cb = cb;
    adm->ud = ud;
    adm->exit_code = -1;
    adm->fresh = fresh;
    snprintf(adm->namespace, sizeof(adm->namespace), "%s", namespace);
    snprintf(adm->name, sizeof(adm->name), "%s", name);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, strlen(token), digest);
    size_t pos = 0;
    for (size_t i = 0; i < sizeof(digest); i++)
        pos +=
            (size_t)snprintf(adm->cache_key + pos, sizeof(adm->cache_key) - pos, "%02x", digest[i]);
    snprintf(adm->cache_key + pos, sizeof(adm->cache_key) - pos, "/%s/%s", namespace, name);
    struct kube_ref ref = {.group = "telo.run",
                           .version = "v1alpha1",
                           .resource = "telosessions",
                           .namespace = namespace,
                           .name = name};
    adm->step = GET_SESSION;
    adm->call = kube_rest_get(a->t, &ref, on_session, adm, err);
    if (adm->call == NULL) {
        admission_free(adm);
        return NULL;
    }
    return adm;
}

struct gw_admission *gw_admit(struct gw_auth *a, const char *namespace, const char *name,
                              const char *token, gw_admit_fn *cb, void *ud, struct telo_err *err)
{
    return admit(a, namespace, name, token, 0, cb, ud, err);
}

struct gw_admission *gw_reauthorize(struct gw_auth *a, const char *namespace, const char *name,
                                    const char *token, gw_admit_fn *cb, void *ud,
                                    struct telo_err *err)
{
    return admit(a, namespace, name, token, 1, cb, ud, err);
}

int gw_auth_set_audience(struct gw_auth *a, const char *audience)
{
    free(a->audience);
    a->audience = NULL;
    if (audience == NULL || audience[0] == '\0')
        return 0;
    a->audience = strdup(audience);
    return a->audience != NULL ? 0 : -TELO_ENOMEM;
}

void gw_admission_cancel(struct gw_admission *adm)
{
    if (adm == NULL)
        return;
    kube_call_cancel(adm->call);
    admission_free(adm);
}

void gw_replaced_refusal(int *code, const char **reason, const char **message)
{
    *code = 410;
    *reason = "Gone";
    *message = "the session was replaced by another of its name: connect to it again";
}

int gw_reauth_refusal(const struct gw_admitted *a, const char *uid, int *code, const char **reason,
                      const char **message)
{
    switch (a->verdict) {
    case GW_ALLOW:
        if (uid == NULL || uid[0] == '\0' || strcmp(a->uid, uid) == 0)
            return 0;
        gw_replaced_refusal(code, reason, message);
        return 1;
    case GW_TOO_MANY: /* only the admission gate says so, and re-authorization skips it */
    case GW_UNAVAILABLE:
        return 0;
    case GW_UNAUTHENTICATED:
        *code = 401;
        *reason = "Unauthorized";
        *message = "the credential is no longer valid";
        return 1;
    case GW_FORBIDDEN:
        *code = 403;
        *reason = "Forbidden";
        *message = "no longer allowed to attach to this session";
        return 1;
    case GW_NOT_FOUND:
        break;
    }
    *code = 404;
    *reason = "NotFound";
    *message = "the session no longer exists";
    return 1;
}

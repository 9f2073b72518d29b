/* Kubernetes REST verbs over the transport: paths, queries, bodies and error Status decoding. */
#include "kube/rest.h"

#include "util/jget.h"
#include "util/url.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_MAX_BYTES 8192

/* What a REST call remembers until its answer. */
struct rest_ctx {
    kube_result_fn *cb;
    void *ud;
    int raw; /* hand a 2xx body over unparsed */
    char what[256];
};

static int empty(const char *s)
{
    return s == NULL || s[0] == '\0';
}

int kube_ref_path(const struct kube_ref *ref, struct buf *out, struct telo_err *err)
{
    if (empty(ref->version) || empty(ref->resource))
        return telo_err_set(
            err, TELO_EINVAL, "resource reference needs a version and a resource (got '%s' '%s')",
            ref->version != NULL ? ref->version : "", ref->resource != NULL ? ref->resource : "");
    if (!empty(ref->subresource) && empty(ref->name))
        return telo_err_set(err, TELO_EINVAL, "subresource '%s' of %s needs an object name",
                            ref->subresource, ref->resource);
    size_t before = out->len;
    int rc;
    if (empty(ref->group)) {
        rc = buf_append_str(out, "/api/");
    } else {
        rc = buf_append_str(out, "/apis/");
        if (rc == 0)
            rc = url_escape(out, ref->group);
        if (rc == 0)
            rc = buf_append_str(out, "/");
    }
    if (rc == 0)
        rc = url_escape(out, ref->version);
    if (rc == 0 && !empty(ref->namespace)) {
        rc = buf_append_str(out, "/namespaces/");
        if (rc == 0)
            rc = url_escape(out, ref->namespace);
    }
    if (rc == 0)
        rc = buf_append_str(out, "/");
    if (rc == 0)
        rc = url_escape(out, ref->resource);
    if (rc == 0 && !empty(ref->name)) {
        rc = buf_append_str(out, "/");
        if (rc == 0)
            rc = url_escape(out, ref->name);
    }
    if (rc == 0 && !empty(ref->subresource)) {
        rc = buf_append_str(out, "/");
        if (rc == 0)
            rc = url_escape(out, ref->subresource);
    }
    if (rc != 0) {
        out->len = before;
        if (out->data != NULL)
            out->data[before] = '\0';
        return telo_err_set(err, -rc, "path of %s/%s is too long", ref->resource,
                            ref->name != NULL ? ref->name : "");
    }
    return 0;
}

int kube_list_query(const struct kube_list_opts *o, struct buf *out)
{
    if (o == NULL)
        return 0;
    int rc = 0;
    if (rc == 0 && !empty(o->label_selector))
        rc = url_query_add(out, "labelSelector", o->label_selector);
    if (rc == 0 && !empty(o->field_selector))
        rc = url_query_add(out, "fieldSelector", o->field_selector);
    if (rc == 0 && o->resource_version != NULL)
        rc = url_query_add(out, "resourceVersion", o->resource_version);
    if (rc == 0 && !empty(o->resource_version_match))
        rc = url_query_add(out, "resourceVersionMatch", o->resource_version_match);
    if (rc == 0 && o->limit > 0)
        rc = url_query_add_long(out, "limit", o->limit);
    if (rc == 0 && !empty(o->continue_token))
        rc = url_query_add(out, "continue", o->continue_token);
    if (rc == 0 && o->timeout_seconds > 0)
        rc = url_query_add_long(out, "timeoutSeconds", o->timeout_seconds);
    return rc;
}

void kube_ref_describe(const char *verb, const struct kube_ref *ref, char *dst, size_t dstlen)
{
    char res[160];
    if (empty(ref->group))
        snprintf(res, sizeof(res), "%s", ref->resource != NULL ? ref->resource : "?");
    else
        snprintf(res, sizeof(res), "%s.%s", ref->resource != NULL ? ref->resource : "?",
                 ref->group);
    int n = snprintf(dst, dstlen, "%s %s", verb, res);
    if (n < 0 || (size_t)n >= dstlen)
        return;
    if (!empty(ref->name))
        n += snprintf(dst + n, dstlen - (size_t)n, " \"%s\"", ref->name);
    if (n < 0 || (size_t)n >= dstlen)
        return;
    if (!empty(ref->subresource))
        n += snprintf(dst + n, dstlen - (size_t)n, " (%s)", ref->subresource);
    if (n < 0 || (size_t)n >= dstlen)
        return;
    if (!empty(ref->namespace))
        snprintf(dst + n, dstlen - (size_t)n, " in namespace \"%s\"", ref->namespace);
}

int kube_delete_body(const struct kube_delete_opts *o, struct buf *out)
{
    struct json_object *obj = json_object_new_object();
    if (obj == NULL)
        return -TELO_ENOMEM;
    json_object_object_add(obj, "kind", json_object_new_string("DeleteOptions"));
    json_object_object_add(obj, "apiVersion", json_object_new_string("v1"));
    if (o != NULL) {
        if (!empty(o->propagation_policy))
            json_object_object_add(obj, "propagationPolicy",
                                   json_object_new_string(o->propagation_policy));
        if (o->grace_period_seconds >= 0)
            json_object_object_add(obj, "gracePeriodSeconds",
                                   json_object_new_int64(o->grace_period_seconds));
        if (!empty(o->precondition_uid) || !empty(o->precondition_rv)) {
            struct json_object *pre = json_object_new_object();
            if (!empty(o->precondition_uid))
                json_object_object_add(pre, "uid", json_object_new_string(o->precondition_uid));
            if (!empty(o->precondition_rv))
                json_object_object_add(pre, "resourceVersion",
                                       json_object_new_string(o->precondition_rv));
            json_object_object_add(obj, "preconditions", pre);
        }
        if (o->dry_run) {
            struct json_object *arr = json_object_new_array();
            json_object_array_add(arr, json_object_new_string("All"));
            json_object_object_add(obj, "dryRun", arr);
        }
    }
    int rc = buf_append_str(out, json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN));
    json_object_put(obj);
    return rc;
}

static void deliver(struct rest_ctx *ctx, const struct kube_response *resp)
{
    struct kube_result res = {.rc = resp->rc, .code = resp->code, .body = resp->body};
    struct telo_err err;
    telo_err_clear(&err);
    struct kube_status st;
    memset(&st, 0, sizeof(st));
    struct json_object *obj = NULL;
    if (resp->rc != 0) {
        err = *resp->err;
        telo_err_wrap(&err, "%s", ctx->what);
        res.err = &err;
    } else if (resp->code < 200 || resp->code >= 300) {
        int rc = kube_status_parse((int)resp->code, resp->body->data, resp->body->len, &st, &err);
        if (rc == 0) {
            if (st.retry_after_seconds == 0 && resp->retry_after_s > 0)
                st.retry_after_seconds = (int)resp->retry_after_s;
            res.rc = kube_status_to_err(&st, ctx->what, &err);
            res.status = &st;
        } else {
            res.rc = rc;
        }
        res.err = &err;
    } else if (resp->body->len > 0 && !ctx->raw) {
        struct json_tokener *tok = json_tokener_new_ex(JGET_OBJECT_MAX_DEPTH);
        if (tok != NULL)
            obj = json_tokener_parse_ex(tok, resp->body->data, (int)resp->body->len);
        if (tok == NULL || obj == NULL || json_tokener_get_error(tok) != json_tokener_success) {
            json_object_put(obj);
            obj = NULL;
            res.rc = telo_err_set(&err, TELO_EPROTO, "%s: the API server's answer is not JSON",
                                  ctx->what);
            res.err = &err;
        }
        json_tokener_free(tok);
        res.object = obj;
    }
    ctx->cb(&res, ctx->ud);
    json_object_put(obj);
    kube_status_release(&st);
}

static void on_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    struct rest_ctx *ctx = ud;
    deliver(ctx, resp);
    free(ctx);
}

static struct kube_call *submit_path(struct kube_transport *t, const char *method, const char *verb,
                                     const char *path, const char *what, const char *content_type,
                                     const char *body, size_t len, int raw, kube_result_fn *cb,
                                     void *ud, struct telo_err *err)
{
    struct rest_ctx *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory");
        return NULL;
    }
    ctx->cb = cb;
    ctx->ud = ud;
    ctx->raw = raw;
    snprintf(ctx->what, sizeof(ctx->what), "%s", what);
    char label[12];
    size_t i;
    for (i = 0; i < sizeof(label) - 1 && verb[i] != '\0'; i++)
        label[i] = (char)(verb[i] >= 'a' && verb[i] <= 'z' ? verb[i] - 32 : verb[i]);
    label[i] = '\0';
    struct kube_request req = {
        .method = method,
        .path = path,
        .content_type = content_type,
        .body = body,
        .body_len = len,
        .verb = label,
    };
    struct kube_call *call = kube_transport_submit(t, &req, on_done, NULL, ctx, err);
    if (call == NULL)
        free(ctx);
    /* A cancelled call never reaches on_done: ctx goes with it (the gateway cancels admissions
     * whenever a client leaves mid-lookup, so this must not leak). */
    kube_call_set_release(call, free);
    return call;
}

static struct kube_call *request(struct kube_transport *t, const char *method, const char *verb,
                                 const struct kube_ref *ref, const char *query,
                                 const char *content_type, const char *body, size_t len, int raw,
                                 kube_result_fn *cb, void *ud, struct telo_err *err)
{
    struct buf path;
    buf_init(&path, PATH_MAX_BYTES);
    if (kube_ref_path(ref, &path, err) != 0)
        return NULL;
    if (query != NULL && query[0] != '\0' && buf_append_str(&path, query) != 0) {
        buf_release(&path);
        telo_err_set(err, TELO_ETOOBIG, "query of %s is too long", ref->resource);
        return NULL;
    }
    char what[256];
    kube_ref_describe(verb, ref, what, sizeof(what));
    struct kube_call *call =
        submit_path(t, method, verb, path.data, what, content_type, body, len, raw, cb, ud, err);
    buf_release(&path);
    return call;
}

struct kube_call *kube_rest_request(struct kube_transport *t, const char *method, const char *verb,
                                    const struct kube_ref *ref, const char *query,
                                    const char *content_type, const char *body, size_t len,
                                    kube_result_fn *cb, void *ud, struct telo_err *err)
{
    return request(t, method, verb, ref, query, content_type, body, len, 0, cb, ud, err);
}

struct kube_call *kube_rest_get_text(struct kube_transport *t, const struct kube_ref *ref,
                                     const char *query, kube_result_fn *cb, void *ud,
                                     struct telo_err *err)
{
    return request(t, "GET", "get", ref, query, NULL, NULL, 0, 1, cb, ud, err);
}

struct kube_call *kube_rest_get_path(struct kube_transport *t, const char *path, kube_result_fn *cb,
                                     void *ud, struct telo_err *err)
{
    char what[300];
    snprintf(what, sizeof(what), "get %s", path);
    return submit_path(t, "GET", "get", path, what, NULL, NULL, 0, 0, cb, ud, err);
}

struct kube_call *kube_rest_get(struct kube_transport *t, const struct kube_ref *ref,
                                kube_result_fn *cb, void *ud, struct telo_err *err)
{
    return kube_rest_request(t, "GET", "get", ref, NULL, NULL, NULL, 0, cb, ud, err);
}

struct kube_call *kube_rest_list(struct kube_transport *t, const struct kube_ref *ref,
                                 const struct kube_list_opts *o, kube_result_fn *cb, void *ud,
                                 struct telo_err *err)
{
    struct kube_ref coll = *ref;
    coll.name = NULL;
    coll.subresource = NULL;
    struct buf q;
    buf_init(&q, PATH_MAX_BYTES);
    if (kube_list_query(o, &q) != 0) {
        buf_release(&q);
        telo_err_set(err, TELO_ETOOBIG, "list query of %s is too long", ref->resource);
        return NULL;
    }
    struct kube_call *call = request(t, "GET", "list", &coll, q.data, NULL, NULL, 0,
                                     o != NULL && o->raw_body, cb, ud, err);
    buf_release(&q);
    return call;
}

static int write_query(const struct kube_write_opts *o, int apply, struct buf *q,
                       struct telo_err *err)
{
    if (apply && (o == NULL || empty(o->field_manager)))
        return telo_err_set(err, TELO_EINVAL,
                            "server-side apply needs a field manager (--field-manager)");
    if (o == NULL)
        return 0;
    int rc = 0;
    if (!empty(o->field_manager))
        rc = url_query_add(q, "fieldManager", o->field_manager);
    if (rc == 0 && o->force && apply)
        rc = url_query_add(q, "force", "true");
    if (rc == 0 && o->dry_run)
        rc = url_query_add(q, "dryRun", "All");
    if (rc != 0)
        return telo_err_set(err, TELO_ETOOBIG, "write query is too long");
    return 0;
}

static struct kube_call *write_request(struct kube_transport *t, const char *method,
                                       const char *verb, const struct kube_ref *ref,
                                       const char *content_type, int apply, const char *body,
                                       size_t len, const struct kube_write_opts *o,
                                       kube_result_fn *cb, void *ud, struct telo_err *err)
{
    struct buf q;
    buf_init(&q, PATH_MAX_BYTES);
    if (write_query(o, apply, &q, err) != 0) {
        buf_release(&q);
        return NULL;
    }
    struct kube_call *call =
        kube_rest_request(t, method, verb, ref, q.data, content_type, body, len, cb, ud, err);
    buf_release(&q);
    return call;
}

struct kube_call *kube_rest_create(struct kube_transport *t, const struct kube_ref *ref,
                                   const char *body, size_t len, const struct kube_write_opts *o,
                                   kube_result_fn *cb, void *ud, struct telo_err *err)
{
    struct kube_ref coll = *ref;
    coll.name = NULL;
    coll.subresource = NULL;
    return write_request(t, "POST", "create", &coll, "application/json", 0, body, len, o, cb, ud,
                         err);
}

struct kube_call *kube_rest_update(struct kube_transport *t, const struct kube_ref *ref,
                                   const char *body, size_t len, const struct kube_write_opts *o,
                                   kube_result_fn *cb, void *ud, struct telo_err *err)
{
    return write_request(t, "PUT", "update", ref, "application/json", 0, body, len, o, cb, ud, err);
}

struct kube_call *kube_rest_patch(struct kube_transport *t, const struct kube_ref *ref,
                                  enum kube_patch_type type, const char *body, size_t len,
                                  const struct kube_write_opts *o, kube_result_fn *cb, void *ud,
                                  struct telo_err *err)
{
    static const char *const types[] = {
        [KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [KUBE_PATCH_JSON] = "application/json-patch+json",
        [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [KUBE_PATCH_APPLY] = "application/apply-patch+yaml",
    };
    if ((int)type < 0 || type > KUBE_PATCH_APPLY) {
        telo_err_set(err, TELO_EINVAL, "unknown patch type %d", (int)type);
        return NULL;
    }
    return write_request(t, "PATCH", type == KUBE_PATCH_APPLY ? "apply" : "patch", ref, types[type],
                         type == KUBE_PATCH_APPLY, body, len, o, cb, ud, err);
}

struct kube_call *kube_rest_apply(struct kube_transport *t, const struct kube_ref *ref,
                                  const char *body, size_t len, const struct kube_write_opts *o,
                                  kube_result_fn *cb, void *ud, struct telo_err *err)
{
    return kube_rest_patch(t, ref, KUBE_PATCH_APPLY, body, len, o, cb, ud, err);
}

struct kube_call *kube_rest_delete(struct kube_transport *t, const struct kube_ref *ref,
                                   const struct kube_delete_opts *o, kube_result_fn *cb, void *ud,
                                   struct telo_err *err)
{
    struct buf body;
    buf_init(&body, 4096);
    if (kube_delete_body(o, &body) != 0) {
        buf_release(&body);
        telo_err_set(err, TELO_ENOMEM, "out of memory building DeleteOptions");
        return NULL;
    }
    struct kube_call *call = kube_rest_request(t, "DELETE", "delete", ref, NULL, "application/json",
                                               body.data, body.len, cb, ud, err);
    buf_release(&body);
    return call;
}

/* ---- list_all: follow continue tokens, merge items ---- */

struct list_all {
    struct kube_transport *t;
    char group[128], version[64], resource[128], namespace[256];
    struct kube_list_opts opts;
    char *label_selector, *field_selector, *resource_version, *resource_version_match;
    kube_result_fn *cb;
    void *ud;
    struct json_object *merged; /* first page, items appended */
    size_t bytes;               /* summed page sizes, against the body cap */
    size_t max_bytes;
};

static void list_all_free(struct list_all *la)
{
    json_object_put(la->merged);
    free(la->label_selector);
    free(la->field_selector);
    free(la->resource_version);
    free(la->resource_version_match);
    free(la);
}

static void list_all_page(const struct kube_result *res, void *ud);

static int list_all_next(struct list_all *la, const char *continue_token, struct telo_err *err)
{
    struct kube_ref ref = {.group = la->group,
                           .version = la->version,
                           .resource = la->resource,
                           .namespace = la->namespace};
    struct kube_list_opts o = la->opts;
    o.label_selector = la->label_selector;
    o.field_selector = la->field_selector;
    o.resource_version_match = la->resource_version_match;
    o.continue_token = continue_token;
    /* resourceVersion applies to the first page only; the continue token pins the snapshot. */
    o.resource_version = continue_token != NULL ? NULL : la->resource_version;
    if (continue_token != NULL)
        o.resource_version_match = NULL;
    struct kube_call *c = kube_rest_list(la->t, &ref, &o, list_all_page, la, err);
    return c != NULL ? 0 : -err->code;
}

static void list_all_page(const struct kube_result *res, void *ud)
{
    struct list_all *la = ud;
    struct telo_err err;
    telo_err_clear(&err);
    if (res->rc != 0) {
        la->cb(res, la->ud);
        list_all_free(la);
        return;
    }
    la->bytes += res->body->len;
    struct json_object *items = jget_array(res->object, "items");
    if (items == NULL) {
        struct kube_result bad = {.rc = telo_err_set(&err, TELO_EPROTO,
                                                     "list %s: the answer has no items array",
                                                     la->resource),
                                  .code = res->code,
                                  .err = &err,
                                  .body = res->body};
        la->cb(&bad, la->ud);
        list_all_free(la);
        return;
    }
    if (la->merged == NULL) {
        la->merged = json_object_get(res->object);
    } else {
        struct json_object *all = jget_array(la->merged, "items");
        size_t n = json_object_array_length(items);
        for (size_t i = 0; i < n; i++)
            json_object_array_add(all, json_object_get(json_object_array_get_idx(items, i)));
    }
    const char *cont = jget_string(jget_object(res->object, "metadata"), "continue");
    int rc = 0;
    if (!empty(cont) && la->bytes > la->max_bytes)
        rc = telo_err_set(&err, TELO_ETOOBIG, "list %s: more than %zu bytes in all pages",
                          la->resource, la->max_bytes);
    else if (!empty(cont))
        rc = list_all_next(la, cont, &err);
    if (rc == 0 && !empty(cont))
        return;
    if (rc != 0) {
        struct kube_result bad = {.rc = rc, .code = res->code, .err = &err, .body = res->body};
        la->cb(&bad, la->ud);
        list_all_free(la);
        return;
    }
    struct json_object *mmeta = jget_object(la->merged, "metadata");
    if (mmeta != NULL) {
        json_object_object_del(mmeta, "continue");
        json_object_object_del(mmeta, "remainingItemCount");
    }
    struct kube_result done = {.rc = 0, .code = res->code, .object = la->merged, .body = NULL};
    la->cb(&done, la->ud);
    list_all_free(la);
}

static int copy_str(char *dst, size_t cap, const char *src, const char *what, struct telo_err *err)
{
    if (src == NULL)
        src = "";
    if (strlen(src) >= cap)
        return telo_err_set(err, TELO_EINVAL, "%s '%s' is too long", what, src);
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

int kube_rest_list_all(struct kube_transport *t, const struct kube_ref *ref,
                       const struct kube_list_opts *o, kube_result_fn *cb, void *ud,
                       struct telo_err *err)
{
    struct list_all *la = calloc(1, sizeof(*la));
    if (la == NULL)
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    la->t = t;
    la->cb = cb;
    la->ud = ud;
    la->max_bytes = (size_t)64 << 20;
    if (o != NULL)
        la->opts = *o;
    if (la->opts.limit <= 0)
        la->opts.limit = 500;
    int rc = copy_str(la->group, sizeof(la->group), ref->group, "group", err);
    if (rc == 0)
        rc = copy_str(la->version, sizeof(la->version), ref->version, "version", err);
    if (rc == 0)
        rc = copy_str(la->resource, sizeof(la->resource), ref->resource, "resource", err);
    if (rc == 0)
        rc = copy_str(la->namespace, sizeof(la->namespace), ref->namespace, "namespace", err);
    if (rc == 0 && o != NULL) {
        la->label_selector = o->label_selector != NULL ? strdup(o->label_selector) : NULL;
        la->field_selector = o->field_selector != NULL ? strdup(o->field_selector) : NULL;
        la->resource_version = o->resource_version != NULL ? strdup(o->resource_version) : NULL;
        la->resource_version_match =
            o->resource_version_match != NULL ? strdup(o->resource_version_match) : NULL;
        if ((o->label_selector != NULL && la->label_selector == NULL) ||
            (o->field_selector != NULL && la->field_selector == NULL) ||
            (o->resource_version != NULL && la->resource_version == NULL) ||
            (o->resource_version_match != NULL && la->resource_version_match == NULL))
            rc = telo_err_set(err, TELO_ENOMEM, "out of memory");
    }
    if (rc == 0)
        rc = list_all_next(la, NULL, err);
    if (rc != 0)
        list_all_free(la);
    return rc;
}

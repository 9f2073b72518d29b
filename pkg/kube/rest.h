/* Kubernetes REST verbs over the transport: paths, queries, bodies and error Status decoding. */
#ifndef TELO_KUBE_REST_H
#define TELO_KUBE_REST_H

#include <stddef.h>

#include "kube/status.h"
#include "kube/transport.h"
#include "util/buf.h"
#include "util/err.h"

struct json_object;

/* Which object or collection a request is about. Strings are borrowed for the call. */
struct kube_ref {
    const char *group;       /* "" or NULL for the core group ("/api/v1") */
    const char *version;     /* "v1" */
    const char *resource;    /* lower-case plural, "configmaps" */
    const char *namespace;   /* NULL or "" for cluster-scoped resources or all namespaces */
    const char *name;        /* NULL for the collection */
    const char *subresource; /* "status", "scale", ... or NULL */
};

/* Query options of list and watch (metav1.ListOptions). NULL / 0 fields are left out. */
struct kube_list_opts {
    const char *label_selector;
    const char *field_selector;
    const char *resource_version;
    const char *resource_version_match; /* "Exact" or "NotOlderThan" */
    long limit;                         /* page size; 0 for no paging */
    const char *continue_token;
    long timeout_seconds;
    int raw_body; /* kube_rest_list only: leave a 2xx body unparsed (res->object is NULL; read
                   * res->body), for callers that decode a large page one item at a time */
};

/* Options of writes. */
struct kube_write_opts {
    const char *field_manager; /* required for server-side apply */
    int force;                 /* apply: take ownership of conflicting fields */
    int dry_run;               /* dryRun=All */
};

/* DeleteOptions (sent as the request body). */
struct kube_delete_opts {
    const char *propagation_policy; /* "Foreground", "Background", "Orphan" or NULL */
    const char *precondition_uid;   /* NULL for none */
    const char *precondition_rv;    /* NULL for none */
    long grace_period_seconds;      /* -1 for the object's default */
    int dry_run;
};

enum kube_patch_type {
    KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in types only) */
    KUBE_PATCH_APPLY,     /* application/apply-patch+yaml: server-side apply */
};

/* The outcome of a REST call, valid only during the callback. */
struct kube_result {
    int rc;    /* 0 for a 2xx answer; -TELO_EAPI for an error Status; else transport or decode */
    long code; /* HTTP status, 0 when none arrived */
    struct json_object *object;       /* the parsed 2xx body; borrowed (json_object_get to keep);
                                       * NULL when rc != 0 or the body was empty */
    const struct kube_status *status; /* the decoded error when rc == -TELO_EAPI, else NULL */
    const struct telo_err *err;       /* message when rc != 0 ("get configmaps \"x\" in
                                       * namespace \"ns\": 404 NotFound: ..."), else NULL */
    const struct buf *body;           /* the raw body (for printing as received) */
};

typedef void kube_result_fn(const struct kube_result *res, void *ud);

/* Appends ref's URL path to out ("/api/v1/namespaces/ns/configmaps/x/status",
 * "/apis/apps/v1/deployments"), each name percent-escaped. Returns 0, -TELO_EINVAL with err
 * filled when version or resource is missing or a subresource is given without a name, or
 * -TELO_ETOOBIG / -TELO_ENOMEM; out is unchanged on failure. */
int kube_ref_path(const struct kube_ref *ref, struct buf *out, struct telo_err *err);

/* Appends the list/watch query of o to out (a path), escaped. o may be NULL. Returns 0 or
 * -TELO_ETOOBIG / -TELO_ENOMEM. */
int kube_list_query(const struct kube_list_opts *o, struct buf *out);

/* Writes a short description of a request on ref for messages, e.g.
 * `get configmaps "x" in namespace "ns"`, into dst (always NUL-terminated, truncated). */
void kube_ref_describe(const char *verb, const struct kube_ref *ref, char *dst, size_t dstlen);

/* Builds the DeleteOptions JSON body of o into out. Returns 0 or -TELO_ENOMEM/-TELO_ETOOBIG. */
int kube_delete_body(const struct kube_delete_opts *o, struct buf *out);

/* The verbs. Each starts an asynchronous request on t and calls cb exactly once with the result,
 * unless the returned call is cancelled (kube_call_cancel) first. Bodies are copied. Return the
 * call, or NULL with err filled (bad ref, out of memory) and cb never called. */
struct kube_call *kube_rest_get(struct kube_transport *t, const struct kube_ref *ref,
                                kube_result_fn *cb, void *ud, struct telo_err *err);

/* One page of a list; follow .metadata.continue with o->continue_token for the next. */
struct kube_call *kube_rest_list(struct kube_transport *t, const struct kube_ref *ref,
                                 const struct kube_list_opts *o, kube_result_fn *cb, void *ud,
                                 struct telo_err *err);

/* POST body (JSON) to ref's collection (ref->name is ignored). */
struct kube_call *kube_rest_create(struct kube_transport *t, const struct kube_ref *ref,
                                   const char *body, size_t len, const struct kube_write_opts *o,
                                   kube_result_fn *cb, void *ud, struct telo_err *err);

/* PUT body to ref. Optimistic concurrency: the body's metadata.resourceVersion is the
 * precondition; a stale one yields 409 Conflict (rc -TELO_EAPI, reason KUBE_REASON_CONFLICT). */
struct kube_call *kube_rest_update(struct kube_transport *t, const struct kube_ref *ref,
                                   const char *body, size_t len, const struct kube_write_opts *o,
                                   kube_result_fn *cb, void *ud, struct telo_err *err);

/* PATCH ref with body of type. KUBE_PATCH_APPLY needs o->field_manager (else -TELO_EINVAL). */
struct kube_call *kube_rest_patch(struct kube_transport *t, const struct kube_ref *ref,
                                  enum kube_patch_type type, const char *body, size_t len,
                                  const struct kube_write_opts *o, kube_result_fn *cb, void *ud,
                                  struct telo_err *err);

/* Server-side apply: kube_rest_patch with KUBE_PATCH_APPLY. body is YAML or JSON. */
struct kube_call *kube_rest_apply(struct kube_transport *t, const struct kube_ref *ref,
                                  const char *body, size_t len, const struct kube_write_opts *o,
                                  kube_result_fn *cb, void *ud, struct telo_err *err);

/* DELETE ref with a DeleteOptions body built from o (NULL for defaults). */
struct kube_call *kube_rest_delete(struct kube_transport *t, const struct kube_ref *ref,
                                   const struct kube_delete_opts *o, kube_result_fn *cb, void *ud,
                                   struct telo_err *err);

/* Lists every page (following continue with o->limit per page, 500 when 0) and calls cb once
 * with one List object holding all items (metadata.resourceVersion from the first page, the
 * consistent snapshot the pages share). The pages together are capped by the transport's body
 * limit. Returns 0, or a negative code with err filled and cb never called. Not cancellable:
 * the operation ends with the transport at the latest. */
int kube_rest_list_all(struct kube_transport *t, const struct kube_ref *ref,
                       const struct kube_list_opts *o, kube_result_fn *cb, void *ud,
                       struct telo_err *err);

/* Lower-level: any request on ref with a query appended (query starts with '?' or is NULL).
 * verb is the metrics and message label ("get", "list", ...). */
struct kube_call *kube_rest_request(struct kube_transport *t, const char *method, const char *verb,
                                    const struct kube_ref *ref, const char *query,
                                    const char *content_type, const char *body, size_t len,
                                    kube_result_fn *cb, void *ud, struct telo_err *err);

/* GET ref (with query, starting with '?', or NULL) whose answer is not JSON, such as a pod's
 * "log" subresource: a 2xx body is handed over unparsed in res->body (res->object is NULL). */
struct kube_call *kube_rest_get_text(struct kube_transport *t, const struct kube_ref *ref,
                                     const char *query, kube_result_fn *cb, void *ud,
                                     struct telo_err *err);

/* GET an absolute path that is not a resource (discovery "/apis", "/version"), as JSON. Same
 * contract as the verbs. */
struct kube_call *kube_rest_get_path(struct kube_transport *t, const char *path, kube_result_fn *cb,
                                     void *ud, struct telo_err *err);

#endif

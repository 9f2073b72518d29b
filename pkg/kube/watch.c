/* One Kubernetes watch stream: request, incremental decoding, resourceVersion tracking, end reason.
 */
#include "kube/watch.h"

#include "util/jitter.h"
#include "util/url.h"

#include <json.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_EVENT ((size_t)16 << 20)
#define MIN_TIMEOUT_S     300
#define MAX_TIMEOUT_S     600
/* The server closes the stream at timeoutSeconds; allow it this long before giving up on it. */
#define TIMEOUT_SLACK_S 30

struct kube_watch {
    struct kube_transport *t;
    struct kube_call *call;
    struct kube_watchdec *dec;
    kube_watch_event_fn *on_event;
    kube_watch_end_fn *on_end;
    void *ud;
    char *start_rv;
    long timeout_s;
    int ended; /* an end was decided while streaming */
    enum kube_watch_end reason;
    struct kube_status status; /* for ERROR / EXPIRED decided from an ERROR event */
    int have_status;
    struct telo_err err;
};

long kube_watch_timeout_for(double u)
{
    if (!(u >= 0.0))
        u = 0.0;
    if (u >= 1.0)
        u = 0.999999;
    return MIN_TIMEOUT_S + (long)(u * (double)(MAX_TIMEOUT_S - MIN_TIMEOUT_S + 1));
}

int kube_watch_query(const struct kube_watch_opts *o, long timeout_seconds, struct buf *out)
{
    int rc = url_query_add(out, "watch", "1");
    if (rc == 0 && (o == NULL || !o->no_bookmarks))
        rc = url_query_add(out, "allowWatchBookmarks", "true");
    if (rc == 0 && o != NULL && o->resource_version != NULL && o->resource_version[0] != '\0')
        rc = url_query_add(out, "resourceVersion", o->resource_version);
    if (rc == 0 && o != NULL && o->label_selector != NULL && o->label_selector[0] != '\0')
        rc = url_query_add(out, "labelSelector", o->label_selector);
    if (rc == 0 && o != NULL && o->field_selector != NULL && o->field_selector[0] != '\0')
        rc = url_query_add(out, "fieldSelector", o->field_selector);
    if (rc == 0)
        rc = url_query_add_long(out, "timeoutSeconds", timeout_seconds);
    return rc;
}

const char *kube_watch_end_name(enum kube_watch_end reason)
{
    switch (reason) {
    case KUBE_WATCH_END_CLOSED:
        return "closed";
    case KUBE_WATCH_END_EXPIRED:
        return "expired";
    case KUBE_WATCH_END_ERROR:
        return "error";
    case KUBE_WATCH_END_CONNECTION:
        return "connection";
    case KUBE_WATCH_END_DECODE:
        return "decode";
    case KUBE_WATCH_END_RECEIVER:
        return "receiver";
    }
    return "unknown";
}

/* Marks the end decided while streaming; the first decision wins. */
static void decide(struct kube_watch *w, enum kube_watch_end reason)
{
    if (!w->ended) {
        w->ended = 1;
        w->reason = reason;
    }
}

static int dec_event(void *ud, enum kube_watch_type type, struct json_object *obj)
{
    struct kube_watch *w = ud;
    if (type == KUBE_WATCH_ERROR) {
        /* The API server reports a too-old resourceVersion inside a 200 stream as an ERROR event
         * carrying a 410 Status (watch cache "too old resource version"). */
        if (kube_status_from_json(0, obj, &w->status, &w->err) == 0) {
            w->have_status = 1;
            kube_status_to_err(&w->status, "watch", &w->err);
            decide(w, kube_status_is_expired(&w->status) ? KUBE_WATCH_END_EXPIRED
                                                         : KUBE_WATCH_END_ERROR);
        } else {
            decide(w, KUBE_WATCH_END_DECODE);
        }
        return -TELO_EAPI;
    }
    if (w->on_event(w, type, obj, w->ud) != 0) {
        telo_err_set(&w->err, TELO_EIO, "watch stopped by its receiver");
        decide(w, KUBE_WATCH_END_RECEIVER);
        return -TELO_EIO;
    }
    return 0;
}

static int on_data(struct kube_call *call, const char *data, size_t len, void *ud)
{
    (void)call;
    struct kube_watch *w = ud;
    if (w->ended)
        return -1;
    struct telo_err err;
    telo_err_clear(&err);
    int rc = kube_watchdec_feed(w->dec, data, len, &err);
    if (rc != 0) {
        if (!w->ended) {
            w->err = err;
            decide(w, KUBE_WATCH_END_DECODE);
        }
        return -1;
    }
    return 0;
}

static void on_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    struct kube_watch *w = ud;
    w->call = NULL;
    struct kube_status st;
    memset(&st, 0, sizeof(st));
    const struct kube_status *stp = NULL;
    if (w->ended) {
        stp = w->have_status ? &w->status : NULL;
    } else if (resp->rc != 0) {
        w->err = *resp->err;
        telo_err_wrap(&w->err, "watch");
        w->reason = KUBE_WATCH_END_CONNECTION;
    } else if (resp->code < 200 || resp->code >= 300) {
        if (kube_status_parse((int)resp->code, resp->body->data, resp->body->len, &st, &w->err) ==
            0) {
            kube_status_to_err(&st, "watch", &w->err);
            stp = &st;
            w->reason = kube_status_is_expired(&st) ? KUBE_WATCH_END_EXPIRED : KUBE_WATCH_END_ERROR;
        } else {
            w->reason = KUBE_WATCH_END_ERROR;
        }
    } else {
        struct telo_err err;
        telo_err_clear(&err);
        int rc = kube_watchdec_finish(w->dec, &err);
        if (w->ended) {
            stp = w->have_status ? &w->status : NULL;
        } else if (rc != 0) {
            w->err = err;
            w->reason = KUBE_WATCH_END_DECODE;
        } else {
            w->reason = KUBE_WATCH_END_CLOSED;
        }
    }
    w->ended = 1;
    const struct telo_err *errp = w->reason == KUBE_WATCH_END_CLOSED ? NULL : &w->err;
    /* The callback may free w: touch nothing of w after it. st is on our stack. */
    w->on_end(w, w->reason, stp, errp, w->ud);
    kube_status_release(&st);
}

struct kube_watch *kube_watch_start(struct kube_transport *t, const struct kube_ref *ref,
                                    const struct kube_watch_opts *o, kube_watch_event_fn *on_event,
                                    kube_watch_end_fn *on_end, void *ud, struct telo_err *err)
{
    if (on_event == NULL || on_end == NULL) {
        telo_err_set(err, TELO_EINVAL, "a watch needs on_event and on_end");
        return NULL;
    }
    struct kube_watch *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        telo_err_set(err, TELO_ENOMEM, "out of memory starting a watch");
        return NULL;
    }
    w->t = t;
    w->on_event = on_event;
    w->on_end = on_end;
    w->ud = ud;
    w->timeout_s = (o != NULL && o->timeout_seconds > 0)
                       ? o->timeout_seconds
                       : kube_watch_timeout_for(util_random_unit());
    w->start_rv = strdup(o != NULL && o->resource_version != NULL ? o->resource_version : "");
    w->dec = kube_watchdec_new(
        o != NULL && o->max_event_bytes > 0 ? o->max_event_bytes : DEFAULT_MAX_EVENT, dec_event, w);
    struct kube_ref coll = *ref;
    coll.name = NULL;
    coll.subresource = NULL;
    struct kube_watch_opts wo;
    memset(&wo, 0, sizeof(wo));
    if (o != NULL)
        wo = *o;
    struct buf sel, path;
    buf_init(&sel, 4096);
    buf_init(&path, 8192);
    int rc = 0;
    if (w->start_rv == NULL || w->dec == NULL)
        rc = telo_err_set(err, TELO_ENOMEM, "out of memory starting a watch");
    if (rc == 0 && ref->name != NULL && ref->name[0] != '\0') {
        /* A single object is watched as its collection narrowed by name, as kubectl does. */
        if (wo.field_selector != NULL && wo.field_selector[0] != '\0')
            buf_printf(&sel, "%s,", wo.field_selector);
        if (buf_printf(&sel, "metadata.name=%s", ref->name) != 0)
            rc = telo_err_set(err, TELO_ETOOBIG, "watch field selector is too long");
        wo.field_selector = sel.data;
    }
    if (rc == 0)
        rc = kube_ref_path(&coll, &path, err);
    if (rc == 0 && kube_watch_query(&wo, w->timeout_s, &path) != 0)
        rc = telo_err_set(err, TELO_ETOOBIG, "watch query is too long");
    if (rc == 0) {
        struct kube_request req = {
            .method = "GET",
            .path = path.data,
            .verb = "WATCH",
            .timeout_ms = (w->timeout_s + TIMEOUT_SLACK_S) * 1000,
            .streaming = 1,
            /* The caller owns the re-watch policy (from the last resourceVersion, backoff). */
            .no_retry = 1,
        };
        w->call = kube_transport_submit(t, &req, on_done, on_data, w, err);
        if (w->call == NULL)
            rc = -err->code;
    }
    buf_release(&sel);
    buf_release(&path);
    if (rc != 0) {
        kube_watch_free(w);
        return NULL;
    }
    return w;
}

const char *kube_watch_resource_version(const struct kube_watch *w)
{
    const char *rv = kube_watchdec_resource_version(w->dec);
    if (rv[0] != '\0')
        return rv;
    return w->start_rv != NULL ? w->start_rv : "";
}

long kube_watch_timeout_seconds(const struct kube_watch *w)
{
    return w->timeout_s;
}

void kube_watch_free(struct kube_watch *w)
{
    if (w == NULL)
        return;
    kube_call_cancel(w->call);
    kube_watchdec_free(w->dec);
    kube_status_release(&w->status);
    free(w->start_rv);
    free(w);
}

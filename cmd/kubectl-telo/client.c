/* kubectl-telo's connection to the cluster: the user's kubeconfig, one transport, and blocking
 * wrappers over the asynchronous REST verbs (a command line tool waits for each answer). */
#include "client.h"

#include "kube/status.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/text.h"
#include "util/utf8.h"

#include <errno.h>
#include <ev.h>
#include <json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int kt_open(struct kt *kt, struct ev_loop *loop, const char *kubeconfig, const char *context,
            const char *namespace, struct telo_err *err)
{
    memset(kt, 0, sizeof(*kt));
    kt->loop = loop;
    int rc = kube_config_load_env(kubeconfig, context, &kt->cfg, err);
    if (rc != 0)
        return rc;
    struct kube_transport_opts opts = {.user_agent = "kubectl-telo/" TELO_VERSION};
    kt->t = kube_transport_new(loop, kt->cfg, &opts, err);
    if (kt->t == NULL) {
        kube_config_free(kt->cfg);
        kt->cfg = NULL;
        return -err->code;
    }
    kt->namespace = namespace && namespace[0] ? namespace : kt->cfg->namespace;
    return 0;
}

void kt_close(struct kt *kt)
{
    kube_transport_free(kt->t);
    kube_config_free(kt->cfg);
    kt->t = NULL;
    kt->cfg = NULL;
}

void kt_result_release(struct kt_result *res)
{
    json_object_put(res->obj);
    res->obj = NULL;
}

struct pending {
    int done;
    struct kt_result *res;
};

static void on_result(const struct kube_result *r, void *ud)
{
    struct pending *p = ud;
    p->res->rc = r->rc;
    p->res->code = r->code;
    p->res->reason = r->status ? (int)r->status->reason : 0;
    if (r->rc == 0 && r->object != NULL)
        p->res->obj = json_object_get(r->object);
    if (r->rc != 0 && r->err != NULL)
        p->res->err = *r->err;
    p->done = 1;
}

static void wait_for(struct kt *kt, struct kube_call *call, struct pending *p)
{
    if (call == NULL) {
        p->res->rc = -p->res->err.code;
        return;
    }
    while (!p->done)
        ev_run(kt->loop, EVRUN_ONCE);
}

static void reset(struct kt_result *res)
{
    memset(res, 0, sizeof(*res));
}

void kt_get(struct kt *kt, const struct kube_ref *ref, struct kt_result *res)
{
    reset(res);
    struct pending p = {.res = res};
    wait_for(kt, kube_rest_get(kt->t, ref, on_result, &p, &res->err), &p);
}

void kt_create(struct kt *kt, const struct kube_ref *ref, struct json_object *body,
               struct kt_result *res)
{
    reset(res);
    struct pending p = {.res = res};
    const char *json = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    struct kube_write_opts o = {.field_manager = "kubectl-telo"};
    /* A subresource (serviceaccounts/NAME/token) is created by a POST to its own path. */
    if (ref->subresource != NULL)
        wait_for(kt,
                 kube_rest_request(kt->t, "POST", "create", ref, NULL, "application/json", json,
                                   strlen(json), on_result, &p, &res->err),
                 &p);
    else
        wait_for(kt, kube_rest_create(kt->t, ref, json, strlen(json), &o, on_result, &p, &res->err),
                 &p);
}

void kt_patch(struct kt *kt, const struct kube_ref *ref, const char *merge_patch,
              struct kt_result *res)
{
    reset(res);
    struct pending p = {.res = res};
    struct kube_write_opts o = {.field_manager = "kubectl-telo"};
    wait_for(kt,
             kube_rest_patch(kt->t, ref, KUBE_PATCH_MERGE, merge_patch, strlen(merge_patch), &o,
                             on_result, &p, &res->err),
             &p);
}

void kt_delete(struct kt *kt, const struct kube_ref *ref, struct kt_result *res)
{
    reset(res);
    struct pending p = {.res = res};
    wait_for(kt, kube_rest_delete(kt->t, ref, NULL, on_result, &p, &res->err), &p);
}

void kt_list(struct kt *kt, const struct kube_ref *ref, const char *selector, long limit,
             struct kt_result *res)
{
    reset(res);
    struct pending p = {.res = res};
    struct kube_list_opts o = {.label_selector = selector, .limit = limit};
    wait_for(kt, kube_rest_list(kt->t, ref, &o, on_result, &p, &res->err), &p);
}

struct stream {
    int done, fd, rc;
    struct telo_err *err;
};

static int on_stream_data(struct kube_call *call, const char *data, size_t len, void *ud)
{
    (void)call;
    struct stream *s = ud;
    while (len > 0) {
        ssize_t n = write(s->fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            s->rc = telo_err_set(s->err, TELO_EIO, "writing the logs: %s", strerror(errno));
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

static void on_stream_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    struct stream *s = ud;
    s->done = 1;
    if (s->rc != 0)
        return;
    if (resp->rc != 0) {
        s->rc = resp->rc;
        *s->err = *resp->err;
    } else if (resp->code < 200 || resp->code > 299) {
        struct kube_status st;
        struct telo_err perr;
        const char *body = resp->body ? resp->body->data : NULL;
        size_t len = resp->body ? resp->body->len : 0;
        if (kube_status_parse((int)resp->code, body, len, &st, &perr) == 0) {
            s->rc = telo_err_set(s->err, TELO_EAPI, "%ld %s: %s", resp->code, st.reason_text,
                                 st.message);
            kube_status_release(&st);
        } else {
            s->rc = telo_err_set(s->err, TELO_EAPI, "HTTP %ld", resp->code);
        }
    }
}

int kt_stream(struct kt *kt, const char *path, int fd, struct telo_err *err)
{
    struct stream s = {.fd = fd, .err = err};
    struct kube_request req = {
        .method = "GET", .path = path, .timeout_ms = -1, .streaming = 1, .no_retry = 1};
    struct kube_call *call =
        kube_transport_submit(kt->t, &req, on_stream_done, on_stream_data, &s, err);
    if (call == NULL)
        return -err->code;
    while (!s.done)
        ev_run(kt->loop, EVRUN_ONCE);
    return s.rc;
}

static void wake_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    *(int *)w->data = 1;
}

void kt_sleep(struct kt *kt, double seconds)
{
    int done = 0;
    ev_timer t;
    ev_timer_init(&t, wake_cb, seconds, 0.);
    t.data = &done;
    ev_timer_start(kt->loop, &t);
    while (!done)
        ev_run(kt->loop, EVRUN_ONCE);
}

struct kube_ref kt_session_ref(const struct kt *kt, const char *name)
{
    return (struct kube_ref){.group = "telo.run",
                             .version = "v1alpha1",
                             .resource = "telosessions",
                             .namespace = kt->namespace,
                             .name = name};
}

static struct json_object *walk(struct json_object *obj, const char *const *keys)
{
    for (; obj != NULL && *keys != NULL; keys++)
        obj = jget(obj, *keys);
    return obj;
}

const char *kt_str_path(struct json_object *obj, const char *const *keys)
{
    struct json_object *v = walk(obj, keys);
    return jget_string_of(v);
}

int kt_int_path(struct json_object *obj, long long *out, const char *const *keys)
{
    /* Every key but the last is walked; jget_int reads the last (an integer, 5.0 too). */
    size_t n = 0;
    while (keys[n] != NULL)
        n++;
    if (n == 0)
        return 0;
    struct json_object *parent = obj;
    for (size_t i = 0; parent != NULL && i + 1 < n; i++)
        parent = jget(parent, keys[i]);
    int64_t v = 0;
    if (jget_int(parent, keys[n - 1], &v) != 0)
        return 0;
    *out = v;
    return 1;
}

void kt_say(FILE *f, const char *fmt, ...)
{
    char text[8192], clean[sizeof(text)];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(text) ? (size_t)n : util_utf8_cut(text, sizeof(text) - 1);
    size_t shown = util_text_clean(text, len, clean);
    fwrite(clean, 1, shown, f);
}

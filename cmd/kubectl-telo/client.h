/* kubectl-telo's connection to the cluster: the user's kubeconfig, one transport, and blocking
 * wrappers over the asynchronous REST verbs (a command line tool waits for each answer). */
#ifndef KUBECTL_TELO_CLIENT_H
#define KUBECTL_TELO_CLIENT_H

#include "kube/config.h"
#include "kube/rest.h"
#include "kube/transport.h"
#include "util/err.h"

#include <stdio.h>

struct ev_loop;
struct json_object;

struct kt {
    struct ev_loop *loop;
    struct kube_config *cfg;
    struct kube_transport *t;
    const char *namespace; /* -n, else the kubeconfig context's namespace */
};

/* The outcome of one call. obj is owned (json_object_put); body is owned (free). */
struct kt_result {
    int rc;     /* 0 for a 2xx answer, else negative; err says what happened */
    long code;  /* HTTP status, 0 when none arrived */
    int reason; /* enum kube_reason of an error Status */
    struct json_object *obj;
    struct telo_err err;
};

/* Loads the kubeconfig (flags as kubectl's, NULL when not given) and starts a transport on loop.
 * Returns 0 or a negative code with err filled. */
int kt_open(struct kt *kt, struct ev_loop *loop, const char *kubeconfig, const char *context,
            const char *namespace, struct telo_err *err);

/* Frees what kt_open made. */
void kt_close(struct kt *kt);

/* Releases res->obj. */
void kt_result_release(struct kt_result *res);

/* The verbs, blocking: each runs the loop until the answer is in *res (release it). kt_create
 * with ref->subresource posts to that subresource (serviceaccounts/NAME/token). */
void kt_get(struct kt *kt, const struct kube_ref *ref, struct kt_result *res);
void kt_create(struct kt *kt, const struct kube_ref *ref, struct json_object *body,
               struct kt_result *res);
void kt_patch(struct kt *kt, const struct kube_ref *ref, const char *merge_patch,
              struct kt_result *res);
void kt_delete(struct kt *kt, const struct kube_ref *ref, struct kt_result *res);

/* Lists ref's collection with label selector (NULL: all), one page of at most limit items (0:
 * the server's default), blocking; res->obj is the List. */
void kt_list(struct kt *kt, const struct kube_ref *ref, const char *selector, long limit,
             struct kt_result *res);

/* Streams GET path's body to fd as it arrives (pod logs). Returns 0 when the body ended, or a
 * negative code with err filled (an HTTP error's Status message, a write error on fd). */
int kt_stream(struct kt *kt, const char *path, int fd, struct telo_err *err);

/* Sleeps seconds while the loop keeps running (the transport's connections stay serviced). */
void kt_sleep(struct kt *kt, double seconds);

/* Reference to the TeloSession name in kt's namespace. */
struct kube_ref kt_session_ref(const struct kt *kt, const char *name);

/* The string at a path of object keys (kt_str(obj, "status", "phase")), or NULL when a key is
 * missing or the value is not a string. */
#define kt_str(obj, ...) kt_str_path((obj), (const char *const[]){__VA_ARGS__, NULL})
const char *kt_str_path(struct json_object *obj, const char *const *keys);

/* The same for an integer: returns 1 and sets *out when present, else 0. */
#define kt_int(obj, out, ...) kt_int_path((obj), (out), (const char *const[]){__VA_ARGS__, NULL})
int kt_int_path(struct json_object *obj, long long *out, const char *const *keys);

/* fprintf for what the plugin tells its user: the text is cleaned for a terminal before it is
 * written (util/text.h), because what it carries (a session's status message, an API error, a
 * build's progress) may be another tenant's or an app's text, and escape sequences in it would
 * act on the user's terminal. At most 8 KiB a call; a longer text is cut. */
void kt_say(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

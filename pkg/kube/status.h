/* API server error responses decoded into a metav1.Status, as k8s.io/apimachinery/pkg/api/errors.
 */
#ifndef TELO_KUBE_STATUS_H
#define TELO_KUBE_STATUS_H

#include "util/err.h"

#include <stdbool.h>
#include <stddef.h>

struct json_object;

/* The metav1.StatusReason values a client acts on. KUBE_REASON_UNKNOWN is a reason we do not know,
 * or none at all, with a code that implies none either. */
enum kube_reason {
    KUBE_REASON_UNKNOWN = 0,
    KUBE_REASON_UNAUTHORIZED,
    KUBE_REASON_FORBIDDEN,
    KUBE_REASON_NOT_FOUND,
    KUBE_REASON_ALREADY_EXISTS,
    KUBE_REASON_CONFLICT,
    KUBE_REASON_GONE,
    KUBE_REASON_EXPIRED,
    KUBE_REASON_INVALID,
    KUBE_REASON_SERVER_TIMEOUT,
    KUBE_REASON_TIMEOUT,
    KUBE_REASON_TOO_MANY_REQUESTS,
    KUBE_REASON_BAD_REQUEST,
    KUBE_REASON_METHOD_NOT_ALLOWED,
    KUBE_REASON_NOT_ACCEPTABLE,
    KUBE_REASON_REQUEST_ENTITY_TOO_LARGE,
    KUBE_REASON_UNSUPPORTED_MEDIA_TYPE,
    KUBE_REASON_INTERNAL_ERROR,
    KUBE_REASON_SERVICE_UNAVAILABLE,
};

/* One of details.causes. All three strings are owned by the enclosing kube_status and never NULL
 * ("" when the server left the field out). */
struct kube_status_cause {
    char *type;    /* the cause's "reason", e.g. "FieldValueInvalid" */
    char *message; /* e.g. "Invalid value: \"a b\": a valid config key must consist of ..." */
    char *field;   /* e.g. "data[a b]" */
};

/* A decoded error. Every pointer is owned by the struct and freed by kube_status_release. */
struct kube_status {
    int code; /* the Status's code, or the HTTP status code when it has none */
    /* The reason as sent when we know it; otherwise (absent or unknown to us) the one the code
     * implies, as apierrors.IsNotFound and friends fall back to the code. */
    enum kube_reason reason;
    char *reason_text; /* never NULL: as sent ("AlreadyExists"), else derived from code, else "" */
    char *message;     /* never NULL; "" when the server sent none */
    char *group;       /* details.group, or NULL */
    char *kind;        /* details.kind, or NULL */
    char *name;        /* details.name, or NULL */
    char *uid;         /* details.uid, or NULL */
    struct kube_status_cause *causes;
    size_t ncauses;
    int retry_after_seconds; /* details.retryAfterSeconds, or 0 */
};

/* Decodes an error response of http_code with body (len bytes, NULL allowed when len is 0; need not
 * be NUL-terminated). A metav1.Status JSON body is decoded as sent. Any other body (HTML from a
 * proxy, plain text, empty, JSON that is not a Status) yields a Status built from the code as
 * client-go's NewGenericServerResponse does (401 Unauthorized, 403 Forbidden, 404 NotFound,
 * 409 Conflict, 410 Gone, 422 Invalid, 429 TooManyRequests, 503 ServiceUnavailable, 504 Timeout,
 * any other 5xx InternalError, ...; 409 is never AlreadyExists, as client-go only says for a POST
 * and we are not told the verb) whose message quotes the body, cleaned of control characters and
 * truncated, and which carries it as a cause of type "UnexpectedServerResponse".
 * retry_after_seconds only comes from the body: the caller may set it from the Retry-After header
 * (kube_retry_after_parse) when it is 0.
 * Returns 0 and fills *out (caller-owned storage, released with kube_status_release), or
 * -TELO_EINVAL (out NULL) or -TELO_ENOMEM with err filled and *out zeroed. */
int kube_status_parse(int http_code, const char *body, size_t len, struct kube_status *out,
                      struct telo_err *err);

/* Decodes obj, a parsed metav1.Status such as the "object" of a watch ERROR event; obj is only
 * borrowed. http_code_if_missing is the code used when obj has none (0 if there is none either).
 * Returns 0 and fills *out (release with kube_status_release), -TELO_EPROTO when obj is not a JSON
 * object or has a "kind" other than "Status", -TELO_EINVAL (out NULL) or -TELO_ENOMEM; on failure
 * err is filled and *out zeroed. */
int kube_status_from_json(int http_code_if_missing, struct json_object *obj,
                          struct kube_status *out, struct telo_err *err);

/* Frees everything st owns and zeroes it. Accepts NULL and a zeroed or released struct. */
void kube_status_release(struct kube_status *st);

/* The wire name of r ("NotFound", "TooManyRequests"); "Unknown" for KUBE_REASON_UNKNOWN or a value
 * out of range. Never NULL; the string is static. */
const char *kube_reason_name(enum kube_reason r);

/* Fills err with code TELO_EAPI and a message built from st, and returns -TELO_EAPI:
 *   `<what>: <code> <reason>: <message>`, e.g.
 *   `create configmaps "x" in namespace "ns": 409 AlreadyExists: configmaps "x" already exists`.
 * For Invalid, each cause is appended as `field: message` unless the message already says it (the
 * API server usually lists them there). what (the caller's description of the request) may be NULL
 * or "" to leave out the prefix. Truncated to fit err. Cannot fail otherwise. */
int kube_status_to_err(const struct kube_status *st, const char *what, struct telo_err *err);

/* True when st has reason r (which, as in apierrors, includes an unknown reason whose code implies
 * r). False for NULL. */
bool kube_status_is(const struct kube_status *st, enum kube_reason r);

/* True when the resourceVersion a list or watch asked for is too old and the caller must relist:
 * reason Expired or Gone, or code 410 (apierrors.IsResourceExpired || IsGone). False for NULL. */
bool kube_status_is_expired(const struct kube_status *st);

/* True when the same request may succeed later without change: TooManyRequests,
 * ServiceUnavailable, Timeout, ServerTimeout, or code 429, 503 or 504. False for NULL. */
bool kube_status_retryable(const struct kube_status *st);

/* Parses an HTTP Retry-After header value. Like client-go, only delay-seconds count (surrounding
 * spaces and tabs allowed); an HTTP-date, a negative, malformed or overflowing value is ignored.
 * Returns the seconds (>= 0), or -1 when value is NULL or does not count. */
int kube_retry_after_parse(const char *value);

#endif

/* API server error responses decoded into a metav1.Status, as k8s.io/apimachinery/pkg/api/errors.
 */
#include "kube/status.h"

#include "util/jget.h"

#include <json.h>

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How much of a non-Status body a message quotes: enough for an HTML title or a proxy's one-line
 * complaint, short enough to leave room in a telo_err for the request's description. */
#define BODY_QUOTE_MAX 200

/* Indexed by enum kube_reason. code is the HTTP code that implies the reason when a Status has no
 * reason we know (apierrors.IsNotFound and friends fall back to the code the same way); 0 when no
 * code does: 409 means Conflict, never AlreadyExists, and Expired and ServerTimeout are only ever
 * sent explicitly. */
static const struct reason_info {
    const char *name;
    int code;
    const char *generic_message; /* client-go's NewGenericServerResponse wording */
} reasons[] = {
    [KUBE_REASON_UNKNOWN] = {"Unknown", 0, NULL},
    [KUBE_REASON_UNAUTHORIZED] = {"Unauthorized", 401,
                                  "the server has asked for the client to provide credentials"},
    [KUBE_REASON_FORBIDDEN] = {"Forbidden", 403, "the server does not allow access"},
    [KUBE_REASON_NOT_FOUND] = {"NotFound", 404, "the server could not find the requested resource"},
    [KUBE_REASON_ALREADY_EXISTS] = {"AlreadyExists", 0, NULL},
    [KUBE_REASON_CONFLICT] = {"Conflict", 409, "the server reported a conflict"},
    [KUBE_REASON_GONE] = {"Gone", 410, "the requested resource is no longer available"},
    [KUBE_REASON_EXPIRED] = {"Expired", 0, NULL},
    [KUBE_REASON_INVALID] = {"Invalid", 422,
                             "the server rejected our request due to an error in our request"},
    [KUBE_REASON_SERVER_TIMEOUT] = {"ServerTimeout", 0, NULL},
    [KUBE_REASON_TIMEOUT] = {"Timeout", 504,
                             "the server was unable to return a response in the time allotted, "
                             "but may still be processing the request"},
    [KUBE_REASON_TOO_MANY_REQUESTS] = {"TooManyRequests", 429,
                                       "the server has received too many requests and has asked "
                                       "us to try again later"},
    [KUBE_REASON_BAD_REQUEST] = {"BadRequest", 400,
                                 "the server rejected our request for an unknown reason"},
    [KUBE_REASON_METHOD_NOT_ALLOWED] = {"MethodNotAllowed", 405,
                                        "the server does not allow this method on the requested "
                                        "resource"},
    [KUBE_REASON_NOT_ACCEPTABLE] = {"NotAcceptable", 406,
                                    "the server was unable to respond with a content type that "
                                    "the client supports"},
    [KUBE_REASON_REQUEST_ENTITY_TOO_LARGE] = {"RequestEntityTooLarge", 413,
                                              "the request entity is too large"},
    [KUBE_REASON_UNSUPPORTED_MEDIA_TYPE] = {"UnsupportedMediaType", 415,
                                            "the server does not support the content type of the "
                                            "request"},
    [KUBE_REASON_INTERNAL_ERROR] = {"InternalError", 500, NULL},
    [KUBE_REASON_SERVICE_UNAVAILABLE] = {"ServiceUnavailable", 503,
                                         "the server is currently unable to handle the request"},
};

#define NREASONS (sizeof(reasons) / sizeof(reasons[0]))

const char *kube_reason_name(enum kube_reason r)
{
    if ((unsigned)r >= NREASONS)
        return reasons[KUBE_REASON_UNKNOWN].name;
    return reasons[r].name;
}

static enum kube_reason reason_from_name(const char *name)
{
    if (!name)
        return KUBE_REASON_UNKNOWN;
    for (size_t i = 1; i < NREASONS; i++) {
        if (strcmp(reasons[i].name, name) == 0)
            return (enum kube_reason)i;
    }
    return KUBE_REASON_UNKNOWN;
}

/* unexpected: the response was not a Status at all, where client-go calls every other 5xx an
 * InternalError (a 502 from a load balancer is not something the API server said). */
static enum kube_reason reason_from_code(int code, bool unexpected)
{
    for (size_t i = 1; i < NREASONS; i++) {
        if (reasons[i].code != 0 && reasons[i].code == code)
            return (enum kube_reason)i;
    }
    if (unexpected && code >= 500)
        return KUBE_REASON_INTERNAL_ERROR;
    return KUBE_REASON_UNKNOWN;
}

/* strdup that records a failure in *failed instead of making each caller check; NULL stays NULL. */
static char *dup_or_fail(const char *s, bool *failed)
{
    if (!s)
        return NULL;
    char *copy = strdup(s);
    if (!copy)
        *failed = true;
    return copy;
}

/* The int member key of obj clamped to [0, INT_MAX], or 0 when absent or not an integer. */
static int int_member(struct json_object *obj, const char *key)
{
    int64_t n;
    if (jget_int(obj, key, &n) < 0 || n < 0)
        return 0;
    return n > INT_MAX ? INT_MAX : (int)n;
}

void kube_status_release(struct kube_status *st)
{
    if (!st)
        return;
    for (size_t i = 0; st->causes && i < st->ncauses; i++) {
        free(st->causes[i].type);
        free(st->causes[i].message);
        free(st->causes[i].field);
    }
    free(st->causes);
    free(st->reason_text);
    free(st->message);
    free(st->group);
    free(st->kind);
    free(st->name);
    free(st->uid);
    memset(st, 0, sizeof(*st));
}

/* Common end of both decoders: on an allocation failure, undo everything so *out is zeroed. */
static int finish_fill(struct kube_status *out, bool failed, struct telo_err *err)
{
    if (!failed && out->reason_text && out->message)
        return 0;
    kube_status_release(out);
    return telo_err_set(err, TELO_ENOMEM, "decoding an API server Status: out of memory");
}

static void fill_causes(struct json_object *details, struct kube_status *out, bool *failed)
{
    struct json_object *arr = jget_array(details, "causes");
    if (arr == NULL)
        return;
    size_t n = json_object_array_length(arr);
    if (n == 0)
        return;
    out->causes = calloc(n, sizeof(*out->causes));
    if (!out->causes) {
        *failed = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(arr, i);
        const char *type = jget_string(c, "reason");
        const char *message = jget_string(c, "message");
        const char *field = jget_string(c, "field");
        struct kube_status_cause *cause = &out->causes[out->ncauses++];
        cause->type = dup_or_fail(type ? type : "", failed);
        cause->message = dup_or_fail(message ? message : "", failed);
        cause->field = dup_or_fail(field ? field : "", failed);
    }
}

/* Fills out from a Status object; out is zeroed. */
static int fill_from_status(int code_if_missing, struct json_object *obj, struct kube_status *out,
                            struct telo_err *err)
{
    bool failed = false;
    int code = int_member(obj, "code");
    out->code = code > 0 ? code : code_if_missing;

    const char *reason = jget_string(obj, "reason");
    out->reason = reason_from_name(reason);
    if (out->reason == KUBE_REASON_UNKNOWN)
        out->reason = reason_from_code(out->code, false);
    if (reason && *reason)
        out->reason_text = dup_or_fail(reason, &failed);
    else if (out->reason != KUBE_REASON_UNKNOWN)
        out->reason_text = dup_or_fail(kube_reason_name(out->reason), &failed);
    else
        out->reason_text = dup_or_fail("", &failed);

    const char *message = jget_string(obj, "message");
    out->message = dup_or_fail(message ? message : "", &failed);

    struct json_object *details = jget_object(obj, "details");
    if (details != NULL) {
        out->group = dup_or_fail(jget_string(details, "group"), &failed);
        out->kind = dup_or_fail(jget_string(details, "kind"), &failed);
        out->name = dup_or_fail(jget_string(details, "name"), &failed);
        out->uid = dup_or_fail(jget_string(details, "uid"), &failed);
        out->retry_after_seconds = int_member(details, "retryAfterSeconds");
        fill_causes(details, out, &failed);
    }
    return finish_fill(out, failed, err);
}

int kube_status_from_json(int http_code_if_missing, struct json_object *obj,
                          struct kube_status *out, struct telo_err *err)
{
    if (!out)
        return telo_err_set(err, TELO_EINVAL, "kube_status_from_json: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!json_object_is_type(obj, json_type_object))
        return telo_err_set(err, TELO_EPROTO, "expected a Status object, got JSON %s",
                            json_type_to_name(json_object_get_type(obj)));
    /* A watch ERROR event carries a Status; anything else there is a server bug we should name. */
    const char *kind = jget_string(obj, "kind");
    if (kind && strcmp(kind, "Status") != 0)
        return telo_err_set(err, TELO_EPROTO, "expected a Status object, got kind \"%.64s\"", kind);
    return fill_from_status(http_code_if_missing, obj, out, err);
}

/* The length of the UTF-8 sequence that lead byte c starts (1 for ASCII or a stray byte). */
static size_t utf8_sequence_length(unsigned char c)
{
    if (c >= 0xf0 && c < 0xf8)
        return 4;
    if (c >= 0xe0)
        return c < 0xf0 ? 3 : 1;
    if (c >= 0xc0)
        return 2;
    return 1;
}

/* Copies body into dst (at least BODY_QUOTE_MAX + 4 bytes) for quoting in a message: runs of
 * whitespace and control characters become one space, the ends are trimmed, and a longer body is
 * cut at a UTF-8 character boundary and marked with "...". */
static void clean_body(const char *body, size_t len, char *dst)
{
    size_t n = 0;
    bool space = false;
    bool truncated = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)body[i];
        if (c <= 0x20 || c == 0x7f) {
            space = n > 0;
            continue;
        }
        if (n + (space ? 1 : 0) + 1 > BODY_QUOTE_MAX) {
            truncated = true;
            break;
        }
        if (space)
            dst[n++] = ' ';
        space = false;
        dst[n++] = (char)c;
    }
    if (truncated) {
        /* Drop the last character if the cut fell inside it. */
        size_t start = n;
        while (start > 0 && n - start < 4 && ((unsigned char)dst[start - 1] & 0xc0) == 0x80)
            start--;
        if (start > 0 && n - start < 4) {
            size_t lead = start - 1;
            if (n - lead < utf8_sequence_length((unsigned char)dst[lead]))
                n = lead;
        }
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = '\0';
}

/* The response was not a Status: build one from the code as NewGenericServerResponse does. */
static int fill_generic(int http_code, const char *body, size_t len, struct kube_status *out,
                        struct telo_err *err)
{
    char quoted[BODY_QUOTE_MAX + 4];
    clean_body(body, len, quoted);

    bool failed = false;
    out->code = http_code;
    out->reason = reason_from_code(http_code, true);
    out->reason_text = dup_or_fail(
        out->reason == KUBE_REASON_UNKNOWN ? "" : kube_reason_name(out->reason), &failed);

    const char *generic = reasons[out->reason].generic_message;
    char message[BODY_QUOTE_MAX + 256];
    if (out->reason == KUBE_REASON_INTERNAL_ERROR)
        (void)snprintf(message, sizeof(message),
                       "an error on the server (\"%s\") has prevented the request from succeeding",
                       quoted);
    else if (*quoted &&
             (out->reason == KUBE_REASON_FORBIDDEN || out->reason == KUBE_REASON_NOT_ACCEPTABLE ||
              out->reason == KUBE_REASON_UNSUPPORTED_MEDIA_TYPE))
        /* Like client-go: here the body itself says who may do what, or which types work. */
        (void)snprintf(message, sizeof(message), "%s", quoted);
    else if (!generic && *quoted)
        (void)snprintf(message, sizeof(message),
                       "the server responded with the status code %d (\"%s\")", http_code, quoted);
    else if (!generic)
        (void)snprintf(
            message, sizeof(message),
            "the server responded with the status code %d but did not return more information",
            http_code);
    else if (*quoted)
        (void)snprintf(message, sizeof(message), "%s (\"%s\")", generic, quoted);
    else
        (void)snprintf(message, sizeof(message), "%s", generic);
    out->message = dup_or_fail(message, &failed);

    if (*quoted) {
        /* apierrors.IsUnexpectedServerError looks for this cause. */
        out->causes = calloc(1, sizeof(*out->causes));
        if (out->causes) {
            out->ncauses = 1;
            out->causes[0].type = dup_or_fail("UnexpectedServerResponse", &failed);
            out->causes[0].message = dup_or_fail(quoted, &failed);
            out->causes[0].field = dup_or_fail("", &failed);
        } else {
            failed = true;
        }
    }
    return finish_fill(out, failed, err);
}

/* Parses body as one JSON value with nothing but whitespace after it; NULL when it is not. */
static struct json_object *parse_whole_json(const char *body, size_t len)
{
    if (!body || len == 0 || len > INT_MAX)
        return NULL;
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    struct json_object *obj = json_tokener_parse_ex(tok, body, (int)len);
    if (obj) {
        for (size_t i = json_tokener_get_parse_end(tok); i < len; i++) {
            if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n') {
                json_object_put(obj);
                obj = NULL;
                break;
            }
        }
    }
    json_tokener_free(tok);
    return obj;
}

int kube_status_parse(int http_code, const char *body, size_t len, struct kube_status *out,
                      struct telo_err *err)
{
    if (!out)
        return telo_err_set(err, TELO_EINVAL, "kube_status_parse: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!body)
        len = 0;
    /* client-go only believes a body that decodes as kind Status; a JSON error page from a proxy
     * is as unexpected as an HTML one. */
    struct json_object *obj = parse_whole_json(body, len);
    const char *kind = jget_string(obj, "kind");
    int rc;
    if (kind && strcmp(kind, "Status") == 0)
        rc = fill_from_status(http_code, obj, out, err);
    else
        rc = fill_generic(http_code, body, len, out, err);
    json_object_put(obj);
    return rc;
}

/* Appends formatted text to dst (cap bytes, *len used), silently truncating at the end. */
static void appendf(char *dst, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void appendf(char *dst, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    *len += (size_t)n < cap - *len ? (size_t)n : cap - *len - 1;
}

/* True when message already contains "field: text": the API server's Invalid message lists every
 * cause in that form (field.Error), so repeating them would only push the useful part out of a
 * bounded telo_err. */
static bool message_states_cause(const char *message, const struct kube_status_cause *c)
{
    if (!*c->message)
        return *c->field && strstr(message, c->field);
    size_t flen = strlen(c->field);
    for (const char *p = strstr(message, c->message); p; p = strstr(p + 1, c->message)) {
        if (flen == 0)
            return true;
        size_t before = (size_t)(p - message);
        if (before >= flen + 2 && memcmp(p - 2, ": ", 2) == 0 &&
            memcmp(p - 2 - flen, c->field, flen) == 0)
            return true;
    }
    return false;
}

int kube_status_to_err(const struct kube_status *st, const char *what, struct telo_err *err)
{
    char msg[TELO_ERR_MSG_MAX];
    size_t len = 0;
    msg[0] = '\0';
    if (what && *what)
        appendf(msg, sizeof(msg), &len, "%s: ", what);
    if (!st) {
        appendf(msg, sizeof(msg), &len, "unknown API error");
        return telo_err_set(err, TELO_EAPI, "%s", msg);
    }
    const char *reason = st->reason_text ? st->reason_text : "";
    const char *message = st->message ? st->message : "";
    if (st->code > 0)
        appendf(msg, sizeof(msg), &len, "%d%s%s", st->code, *reason ? " " : "", reason);
    else
        appendf(msg, sizeof(msg), &len, "%s", *reason ? reason : "error");
    if (*message)
        appendf(msg, sizeof(msg), &len, ": %s", message);
    if (st->reason == KUBE_REASON_INVALID) {
        const char *sep = ": ";
        for (size_t i = 0; i < st->ncauses; i++) {
            const struct kube_status_cause *c = &st->causes[i];
            if (message_states_cause(message, c))
                continue;
            if (*c->field && *c->message)
                appendf(msg, sizeof(msg), &len, "%s%s: %s", sep, c->field, c->message);
            else
                appendf(msg, sizeof(msg), &len, "%s%s", sep, *c->field ? c->field : c->message);
            sep = "; ";
        }
    }
    return telo_err_set(err, TELO_EAPI, "%s", msg);
}

bool kube_status_is(const struct kube_status *st, enum kube_reason r)
{
    return st && st->reason == r;
}

bool kube_status_is_expired(const struct kube_status *st)
{
    return st &&
           (st->reason == KUBE_REASON_EXPIRED || st->reason == KUBE_REASON_GONE || st->code == 410);
}

bool kube_status_retryable(const struct kube_status *st)
{
    if (!st)
        return false;
    switch (st->reason) {
    case KUBE_REASON_TOO_MANY_REQUESTS:
    case KUBE_REASON_SERVICE_UNAVAILABLE:
    case KUBE_REASON_TIMEOUT:
    case KUBE_REASON_SERVER_TIMEOUT:
        return true;
    default:
        return st->code == 429 || st->code == 503 || st->code == 504;
    }
}

int kube_retry_after_parse(const char *value)
{
    if (!value)
        return -1;
    const char *p = value;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    int seconds = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        int digit = *p - '0';
        if (seconds > (INT_MAX - digit) / 10)
            return -1;
        seconds = seconds * 10 + digit;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    return *p == '\0' ? seconds : -1;
}

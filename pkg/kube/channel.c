/* The Kubernetes remote-command channel protocol (attach/exec over WebSocket): pure framing. */
#include "kube/channel.h"

#include "util/jget.h"

#include <errno.h>
#include <json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int kube_channel_split(const void *msg, size_t len, struct kube_channel_msg *out,
                       struct telo_err *err)
{
    if (len == 0)
        return telo_err_set(err, TELO_EPROTO,
                            "channel protocol: empty message (every message starts with its "
                            "channel byte)");
    const unsigned char *p = msg;
    out->channel = p[0];
    out->data = p + 1;
    out->len = len - 1;
    return 0;
}

int kube_channel_frame(struct buf *out, int channel, const void *data, size_t len)
{
    if (channel < 0 || channel > 255)
        return -TELO_EINVAL;
    size_t before = out->len;
    unsigned char c = (unsigned char)channel;
    int rc = buf_append(out, &c, 1);
    if (rc == 0 && len > 0)
        rc = buf_append(out, data, len);
    if (rc != 0)
        buf_truncate(out, before);
    return rc;
}

static int is_json_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Reads one uint16-range dimension from value into *dim. Go leaves a field at null untouched, so
 * null keeps what was there. Returns 0, or -TELO_EPROTO with err filled. */
static int read_dimension(struct json_object *value, const char *key, unsigned *dim,
                          struct telo_err *err)
{
    if (value == NULL)
        return 0;
    if (!json_object_is_type(value, json_type_int))
        return telo_err_set(err, TELO_EPROTO,
                            "resize: \"%s\" must be an integer cell count in 0..%d, got %s", key,
                            KUBE_TERM_MAX, json_type_to_name(json_object_get_type(value)));
    errno = 0;
    int64_t v = json_object_get_int64(value);
    if (v < 0 || v > KUBE_TERM_MAX || errno != 0)
        return telo_err_set(err, TELO_EPROTO, "resize: \"%s\" is %lld, outside 0..%d", key,
                            (long long)v, KUBE_TERM_MAX);
    *dim = (unsigned)v;
    return 0;
}

/* One decoded resize object into *size (keys as Go matches them: an exact match beats a
 * case-insensitive one, and of several case-insensitive ones the last wins). */
static int read_resize_object(struct json_object *obj, struct kube_term_size *size,
                              struct telo_err *err)
{
    if (!json_object_is_type(obj, json_type_object))
        return telo_err_set(err, TELO_EPROTO,
                            "resize: expected a JSON object {\"Width\":W,\"Height\":H}, got %s",
                            json_type_to_name(json_object_get_type(obj)));
    struct json_object *width = NULL, *height = NULL;
    int width_exact = 0, height_exact = 0;
    json_object_object_foreach(obj, key, value)
    {
        if (strcmp(key, "Width") == 0) {
            width = value;
            width_exact = 1;
        } else if (!width_exact && strcasecmp(key, "Width") == 0) {
            width = value;
        } else if (strcmp(key, "Height") == 0) {
            height = value;
            height_exact = 1;
        } else if (!height_exact && strcasecmp(key, "Height") == 0) {
            height = value;
        }
    }
    struct kube_term_size s = {0, 0};
    if (read_dimension(width, "Width", &s.width, err) != 0 ||
        read_dimension(height, "Height", &s.height, err) != 0)
        return -TELO_EPROTO;
    *size = s;
    return 0;
}

int kube_resize_parse(const void *data, size_t len, struct kube_term_size *out,
                      struct telo_err *err)
{
    if (len > KUBE_CHANNEL_JSON_MAX)
        return telo_err_set(err, TELO_EPROTO, "resize: message of %zu bytes exceeds %d", len,
                            KUBE_CHANNEL_JSON_MAX);
    const unsigned char *p = data;
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL)
        return telo_err_set(err, TELO_ENOMEM, "resize: out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    struct kube_term_size last = {0, 0};
    int count = 0, rc = 0;
    size_t off = 0;
    for (;;) {
        while (off < len && is_json_space(p[off]))
            off++;
        if (off == len)
            break;
        json_tokener_reset(tok);
        struct json_object *obj =
            json_tokener_parse_ex(tok, (const char *)p + off, (int)(len - off));
        enum json_tokener_error jerr = json_tokener_get_error(tok);
        if (obj == NULL) {
            rc = telo_err_set(err, TELO_EPROTO, "resize: not JSON at byte %zu: %s", off,
                              jerr == json_tokener_continue ? "the object is incomplete"
                                                            : json_tokener_error_desc(jerr));
            break;
        }
        size_t used = json_tokener_get_parse_end(tok);
        rc = read_resize_object(obj, &last, err);
        json_object_put(obj);
        if (rc != 0)
            break;
        count++;
        off += used > 0 ? used : len - off; /* an object always consumes its bytes */
    }
    json_tokener_free(tok);
    if (rc != 0)
        return rc;
    if (count == 0)
        return telo_err_set(err, TELO_EPROTO,
                            "resize: empty message, expected "
                            "{\"Width\":W,\"Height\":H}");
    *out = last;
    return count;
}

int kube_resize_format(struct buf *out, unsigned width, unsigned height)
{
    return buf_printf(out, "{\"Width\":%u,\"Height\":%u}", width, height);
}

/* The exit code in a NonZeroExitCode Status's causes, as client-go reads it (uint8), or -1. */
static int exit_code_cause(struct json_object *status)
{
    struct json_object *causes = jget_array(jget(status, "details"), "causes");
    if (causes == NULL)
        return -1;
    for (size_t i = 0; i < json_object_array_length(causes); i++) {
        struct json_object *cause = json_object_array_get_idx(causes, i);
        const char *reason = jget_string(cause, "reason");
        const char *message = jget_string(cause, "message");
        if (reason == NULL || strcmp(reason, "ExitCode") != 0 || message == NULL)
            continue;
        char *end = NULL;
        if (message[0] < '0' || message[0] > '9')
            return -1;
        errno = 0;
        unsigned long code = strtoul(message, &end, 10);
        if (*end != '\0' || errno != 0 || code > 255)
            return -1;
        return (int)code;
    }
    return -1;
}

int kube_exit_status_parse(const void *data, size_t len, struct kube_exit_status *out,
                           struct telo_err *err)
{
    if (len > KUBE_CHANNEL_JSON_MAX)
        return telo_err_set(err, TELO_EPROTO, "exit status: message of %zu bytes exceeds %d", len,
                            KUBE_CHANNEL_JSON_MAX);
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL)
        return telo_err_set(err, TELO_ENOMEM, "exit status: out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    struct json_object *obj = json_tokener_parse_ex(tok, data, (int)len);
    size_t used = obj ? json_tokener_get_parse_end(tok) : 0;
    json_tokener_free(tok);
    const unsigned char *p = data;
    while (obj != NULL && used < len && is_json_space(p[used]))
        used++;
    if (obj == NULL || !json_object_is_type(obj, json_type_object) || used != len) {
        json_object_put(obj);
        return telo_err_set(err, TELO_EPROTO,
                            "exit status: channel 3 did not carry one JSON Status object");
    }
    struct kube_exit_status st = {.code = -1};
    const char *status = jget_string(obj, "status");
    const char *reason = jget_string(obj, "reason");
    const char *message = jget_string(obj, "message");
    snprintf(st.reason, sizeof(st.reason), "%s", reason ? reason : "");
    snprintf(st.message, sizeof(st.message), "%s", message ? message : "");
    if (status != NULL && strcmp(status, "Success") == 0)
        st.code = 0;
    else if (reason != NULL && strcmp(reason, "NonZeroExitCode") == 0)
        st.code = exit_code_cause(obj);
    json_object_put(obj);
    *out = st;
    return 0;
}

int kube_exit_status_format(struct buf *out, int code, const char *message)
{
    if (code > 255)
        return -TELO_EINVAL;
    if (code == 0)
        return buf_append_str(out, "{\"metadata\":{},\"status\":\"Success\"}");
    struct json_object *st = json_object_new_object();
    if (st == NULL)
        return -TELO_ENOMEM;
    char text[64];
    json_object_object_add(st, "metadata", json_object_new_object());
    json_object_object_add(st, "status", json_object_new_string("Failure"));
    if (code > 0) {
        snprintf(text, sizeof(text), "command terminated with non-zero exit code %d", code);
        json_object_object_add(st, "message", json_object_new_string(text));
        json_object_object_add(st, "reason", json_object_new_string("NonZeroExitCode"));
        struct json_object *cause = json_object_new_object(), *causes = json_object_new_array(),
                           *details = json_object_new_object();
        snprintf(text, sizeof(text), "%d", code);
        json_object_object_add(cause, "reason", json_object_new_string("ExitCode"));
        json_object_object_add(cause, "message", json_object_new_string(text));
        json_object_array_add(causes, cause);
        json_object_object_add(details, "causes", causes);
        json_object_object_add(st, "details", details);
    } else {
        json_object_object_add(
            st, "message",
            json_object_new_string(message ? message : "the process ended without an exit code"));
        json_object_object_add(st, "reason", json_object_new_string("InternalError"));
    }
    const char *json = json_object_to_json_string_ext(st, JSON_C_TO_STRING_PLAIN);
    int rc = json ? buf_append_str(out, json) : -TELO_ENOMEM;
    json_object_put(st);
    return rc;
}

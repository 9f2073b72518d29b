/* The gateway's wire formats beyond the channel protocol (kube/channel.h): the route, subprotocol
 * negotiation, telo.io.v1 control frames, refusal bodies and sequence numbers. Pure. */
#include "gateway/proto.h"

#include "util/base64.h"
#include "util/jget.h"
#include "ws/http.h"

#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *gw_proto_name(enum gw_proto p)
{
    switch (p) {
    case GW_PROTO_V5:
        return "v5.channel.k8s.io";
    case GW_PROTO_V4:
        return "v4.channel.k8s.io";
    case GW_PROTO_IO_V1:
        return "telo.io.v1";
    case GW_PROTO_NONE:
        break;
    }
    return "";
}

enum gw_proto gw_pick_protocol(const char *header, char *token, size_t token_len, int *bad_token)
{
    enum gw_proto chosen = GW_PROTO_NONE;
    size_t plen = strlen(GW_BEARER_PREFIX);
    /* Items are bounded by the request head (8 KiB), so one that long holds any token. */
    char item[8192];
    token[0] = '\0';
    *bad_token = 0;
    if (header == NULL)
        return GW_PROTO_NONE;
    const char *list = header;
    while (ws_http_list_next(&list, item, sizeof(item))) {
        if (strncmp(item, GW_BEARER_PREFIX, plen) == 0) {
            if (util_base64url_decode(item + plen, token, token_len) != 0) {
                token[0] = '\0';
                *bad_token = 1;
            }
            continue;
        }
        if (chosen != GW_PROTO_NONE)
            continue;
        if (strcmp(item, "v5.channel.k8s.io") == 0)
            chosen = GW_PROTO_V5;
        else if (strcmp(item, "v4.channel.k8s.io") == 0)
            chosen = GW_PROTO_V4;
        else if (strcmp(item, "telo.io.v1") == 0)
            chosen = GW_PROTO_IO_V1;
    }
    return chosen;
}

/* A DNS-1123 subdomain (namespaces are labels, names of custom resources subdomains). */
static int dns_name(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-' && c != '.')
            return 0;
        if ((i == 0 || i == n - 1) && !alnum)
            return 0;
    }
    return 1;
}

/* Copies the segment at *p up to the next '/' (or end) into out and advances. */
static int segment(const char **p, const char *end, char *out, size_t outlen)
{
    const char *s = *p;
    const char *slash = memchr(s, '/', (size_t)(end - s));
    const char *e = slash != NULL ? slash : end;
    size_t n = (size_t)(e - s);
    if (n == 0 || n >= outlen)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    *p = slash != NULL ? slash + 1 : end;
    return slash != NULL ? 1 : 0;
}

int gw_parse_target(const char *target, struct gw_target *out)
{
    static const char prefix[] = "/v1/namespaces/";
    memset(out, 0, sizeof(*out));
    const char *q = strchr(target, '?');
    const char *end = q != NULL ? q : target + strlen(target);
    out->query = q != NULL ? q + 1 : "";
    if (strncmp(target, prefix, sizeof(prefix) - 1) != 0)
        return -TELO_ENOTFOUND;
    const char *p = target + sizeof(prefix) - 1;
    char kind[32];
    if (segment(&p, end, out->namespace, sizeof(out->namespace)) != 1 ||
        segment(&p, end, kind, sizeof(kind)) != 1 || strcmp(kind, "telosessions") != 0 ||
        segment(&p, end, out->name, sizeof(out->name)) != 1 ||
        segment(&p, end, out->action, sizeof(out->action)) != 0)
        return -TELO_ENOTFOUND;
    if (strcmp(out->action, "attach") != 0 && strcmp(out->action, "debug") != 0)
        return -TELO_ENOTFOUND;
    if (!dns_name(out->namespace, strlen(out->namespace)) || strlen(out->namespace) > 63 ||
        strchr(out->namespace, '.') != NULL || !dns_name(out->name, strlen(out->name)))
        return -TELO_ENOTFOUND;
    return 0;
}

int gw_clamp_dim(long long v)
{
    if (v < 1)
        return 1;
    return v > GW_SIZE_MAX_DIM ? GW_SIZE_MAX_DIM : (int)v;
}

int gw_parse_io_control(const uint8_t *data, size_t len, struct gw_io_control *out)
{
    memset(out, 0, sizeof(*out));
    if (len > GW_CONTROL_MAX)
        return -TELO_EPROTO;
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL)
        return -TELO_ENOMEM;
    struct json_object *o = json_tokener_parse_ex(tok, (const char *)data, (int)len);
    int complete = o != NULL && (size_t)json_tokener_get_parse_end(tok) == len;
    json_tokener_free(tok);
    int rc = -TELO_EPROTO;
    if (complete && json_object_is_type(o, json_type_object)) {
        rc = 0;
        /* The client's JSON: a "type" or a size of any other type (null, a number, an array) is
         * never read as a string or a number. */
        if (jget_string_is(o, "type", "resize")) {
            int64_t cols = 0, rows = 0;
            if (jget_int(o, "cols", &cols) != 0 || jget_int(o, "rows", &rows) != 0) {
                rc = -TELO_EPROTO;
            } else {
                out->kind = GW_IO_RESIZE;
                out->cols = gw_clamp_dim(cols);
                out->rows = gw_clamp_dim(rows);
            }
        }
    }
    json_object_put(o);
    return rc;
}

static int append_json(struct buf *out, struct json_object *o)
{
    int rc = -TELO_ENOMEM;
    if (o != NULL) {
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        rc = s != NULL ? buf_append_str(out, s) : -TELO_ENOMEM;
    }
    json_object_put(o);
    return rc;
}

int gw_error_status_json(struct buf *out, int code, const char *reason, const char *message)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "kind", json_object_new_string("Status"));
    json_object_object_add(o, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(o, "metadata", json_object_new_object());
    json_object_object_add(o, "status", json_object_new_string("Failure"));
    json_object_object_add(o, "message", json_object_new_string(message));
    json_object_object_add(o, "reason", json_object_new_string(reason));
    json_object_object_add(o, "code", json_object_new_int(code));
    return append_json(out, o);
}

int gw_error_frame_json(struct buf *out, int code, const char *reason, const char *message)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string("error"));
    json_object_object_add(o, "code", json_object_new_int(code));
    json_object_object_add(o, "reason", json_object_new_string(reason));
    json_object_object_add(o, "message", json_object_new_string(message));
    return append_json(out, o);
}

uint64_t gw_seq_from_wire(uint32_t last_seq, uint64_t latest)
{
    uint64_t base = latest & ~(uint64_t)0xFFFFFFFFu;
    uint64_t v = base | last_seq;
    if (v > latest) {
        if (base == 0)
            return 0;
        v -= (uint64_t)1 << 32;
    }
    return v;
}

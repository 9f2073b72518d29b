/* Server-sent events (the HTML living standard's event stream): an incremental parser for the
 * session's inspector stream and the filter that keeps the reference's "event" debug frames. */
#include "gateway/sse.h"

#include "util/jget.h"

#include <json.h>
#include <stdio.h>
#include <string.h>

void gw_sse_init(struct gw_sse_parser *p, size_t max_event)
{
    memset(p, 0, sizeof(*p));
    buf_init(&p->line, max_event + 64);
    buf_init(&p->data, max_event);
}

void gw_sse_release(struct gw_sse_parser *p)
{
    buf_release(&p->line);
    buf_release(&p->data);
}

static void reset_event(struct gw_sse_parser *p)
{
    buf_reset(&p->data);
    p->event[0] = '\0';
    p->has_data = 0;
}

/* One complete line (without its end). Returns 0 or -TELO_ETOOBIG. */
static int take_line(struct gw_sse_parser *p, gw_sse_event_fn *cb, void *ud)
{
    const char *l = p->line.data != NULL ? p->line.data : "";
    size_t n = p->line.len;
    int rc = 0;
    if (n == 0) {
        if (p->has_data)
            cb(p->event[0] ? p->event : "message", p->data.data ? p->data.data : "", p->data.len,
               ud);
        reset_event(p);
    } else if (l[0] != ':') {
        const char *colon = memchr(l, ':', n);
        size_t flen = colon != NULL ? (size_t)(colon - l) : n;
        const char *v = colon != NULL ? colon + 1 : l + n;
        if (v < l + n && *v == ' ')
            v++;
        size_t vlen = (size_t)(l + n - v);
        if (flen == 4 && memcmp(l, "data", 4) == 0) {
            if (p->has_data)
                rc = buf_append(&p->data, "\n", 1);
            if (rc == 0)
                rc = buf_append(&p->data, v, vlen);
            p->has_data = 1;
        } else if (flen == 5 && memcmp(l, "event", 5) == 0) {
            snprintf(p->event, sizeof(p->event), "%.*s", (int)vlen, v);
        }
    }
    buf_reset(&p->line);
    if (rc != 0)
        reset_event(p);
    return rc;
}

int gw_sse_feed(struct gw_sse_parser *p, const char *data, size_t len, gw_sse_event_fn *cb,
                void *ud)
{
    int rc = 0;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (c == '\n' && p->after_cr) {
            p->after_cr = 0;
            continue;
        }
        p->after_cr = c == '\r';
        if (c == '\n' || c == '\r') {
            if (take_line(p, cb, ud) != 0)
                rc = -TELO_ETOOBIG;
            continue;
        }
        if (buf_append(&p->line, &c, 1) != 0) {
            /* An over-long line: drop it and what of its event was read. */
            buf_reset(&p->line);
            reset_event(p);
            rc = -TELO_ETOOBIG;
        }
    }
    return rc;
}

int gw_sse_debug_frame(struct buf *out, unsigned long long id, const char *frame_json, size_t len)
{
    struct json_tokener *tok = json_tokener_new();
    if (tok == NULL)
        return -TELO_ENOMEM;
    struct json_object *frame = json_tokener_parse_ex(tok, frame_json, (int)len);
    int whole = frame != NULL && (size_t)json_tokener_get_parse_end(tok) == len;
    json_tokener_free(tok);
    /* The app's JSON: a "kind" that is absent or null is an event frame (the reference's
     * `!frame.kind`), and one of any type but the string "event" is not. */
    int relayed = whole && json_object_is_type(frame, json_type_object) &&
                  (jget(frame, "kind") == NULL || jget_string_is(frame, "kind", "event"));
    if (!relayed) {
        json_object_put(frame);
        return 0;
    }
    struct json_object *ev = json_object_new_object();
    json_object_object_add(ev, "type", json_object_new_string("debug"));
    json_object_object_add(ev, "frame", frame);
    const char *text = json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN);
    int rc = buf_printf(out, "id: %llu\nevent: debug\ndata: %s\n\n", id, text);
    json_object_put(ev);
    return rc != 0 ? rc : 1;
}

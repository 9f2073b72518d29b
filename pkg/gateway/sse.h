/* Server-sent events (the HTML living standard's event stream): an incremental parser for the
 * session's inspector stream and the filter that keeps the reference's "event" debug frames. */
#ifndef TELO_GATEWAY_SSE_H
#define TELO_GATEWAY_SSE_H

#include "util/buf.h"
#include "util/err.h"

#include <stddef.h>

/* One dispatched event: its type ("message" when the stream named none) and its data lines
 * joined with '\n'. Valid during the callback. */
typedef void gw_sse_event_fn(const char *event, const char *data, size_t len, void *ud);

struct gw_sse_parser {
    struct buf line; /* the line being read */
    struct buf data; /* the data of the event being read */
    char event[64];  /* its event field ("" until one is seen) */
    int has_data;    /* a data field was seen */
    int after_cr;    /* the last byte was CR: a following LF ends nothing more */
};

/* Prepares p for a stream whose events are at most max_event bytes of data. Cannot fail. */
void gw_sse_init(struct gw_sse_parser *p, size_t max_event);

/* Frees p's buffers; p may be initialised again. */
void gw_sse_release(struct gw_sse_parser *p);

/* Feeds len bytes of the stream; calls cb for each event completed by them (a blank line after at
 * least one data field). Lines end with LF, CRLF or CR; comments (":...") and unknown fields are
 * skipped; one space after the colon is dropped. Returns 0, or -TELO_ETOOBIG when a line or an
 * event's data exceeds the bound (p is then reset, and the stream resumes with the next line). */
int gw_sse_feed(struct gw_sse_parser *p, const char *data, size_t len, gw_sse_event_fn *cb,
                void *ud);

/* Appends to out the relayed form of an inspector event whose data is frame_json, as the reference
 * relays it: only JSON objects that are event frames (no "kind", or kind "event") pass, written as
 * `id: <id>\nevent: debug\ndata: {"type":"debug","frame":<frame>}\n\n`. Returns 1 when appended,
 * 0 when the frame is not relayed (log and record frames, bad JSON), or -TELO_ENOMEM /
 * -TELO_ETOOBIG with out unchanged. */
int gw_sse_debug_frame(struct buf *out, unsigned long long id, const char *frame_json, size_t len);

#endif

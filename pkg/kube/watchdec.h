/* An incremental decoder for a Kubernetes watch stream of newline-delimited JSON events. */
#ifndef TELO_KUBE_WATCHDEC_H
#define TELO_KUBE_WATCHDEC_H

#include "util/err.h"

#include <stddef.h>

struct json_object;

/* The "type" of a watch event (metav1.WatchEvent). */
enum kube_watch_type {
    KUBE_WATCH_ADDED,
    KUBE_WATCH_MODIFIED,
    KUBE_WATCH_DELETED,
    KUBE_WATCH_BOOKMARK,
    KUBE_WATCH_ERROR,
};

struct kube_watchdec;

/* Creates a decoder that calls on_event(ud, type, object) once per complete event, in stream order.
 * object is the event's "object", always a JSON object, borrowed for the duration of the call
 * (json_object_get it to keep it); for KUBE_WATCH_ERROR it is a metav1.Status (decode it with
 * kube_status_from_json). on_event returns 0 to go on, or a negative code to stop: the feed (or
 * finish) that called it returns that code. on_event must not feed or free the decoder.
 * max_event_bytes bounds one event's line (values above INT_MAX are lowered to it); the decoder
 * never buffers more than that. Returns the decoder, which the caller frees with
 * kube_watchdec_free, or NULL when max_event_bytes is 0, on_event is NULL, or memory runs out. */
struct kube_watchdec *kube_watchdec_new(size_t max_event_bytes,
                                        int (*on_event)(void *ud, enum kube_watch_type type,
                                                        struct json_object *object),
                                        void *ud);

/* Decodes the next len bytes of the stream (any split: mid-event, mid-UTF-8 character, between an
 * event and its newline), delivering every event they complete. Blank lines are skipped.
 * Returns 0; or, with err filled: -TELO_ETOOBIG when an event's line exceeds max_event_bytes,
 * -TELO_EPROTO for malformed JSON or an event without a known "type" or an "object",
 * -TELO_ENOMEM, -TELO_EINVAL (d NULL, or d failed before), or the negative code on_event returned.
 * After a failure the stream cannot be resumed: the decoder refuses further data (the watch must be
 * restarted, from kube_watchdec_resource_version). */
int kube_watchdec_feed(struct kube_watchdec *d, const char *data, size_t len, struct telo_err *err);

/* Ends the stream. A last event without its newline is delivered if it is complete JSON. Returns 0,
 * -TELO_EPROTO (err filled) when the stream stopped inside an event, or as kube_watchdec_feed. */
int kube_watchdec_finish(struct kube_watchdec *d, struct telo_err *err);

/* The metadata.resourceVersion of the last event on_event accepted (returned 0 for), BOOKMARKs
 * included and ERRORs excluded: where a new watch resumes. "" before any. Owned by d, valid until
 * the next feed, finish or free. Never NULL (also "" for a NULL d). */
const char *kube_watchdec_resource_version(const struct kube_watchdec *d);

/* Frees d and everything it buffers. Accepts NULL. */
void kube_watchdec_free(struct kube_watchdec *d);

/* The wire name of t ("ADDED", ...), or "UNKNOWN" for a value out of range. Never NULL; static. */
const char *kube_watch_type_name(enum kube_watch_type t);

#endif

/* One Kubernetes watch stream: request, incremental decoding, resourceVersion tracking, end reason.
 */
#ifndef TELO_KUBE_WATCH_H
#define TELO_KUBE_WATCH_H

#include "kube/rest.h"
#include "kube/status.h"
#include "kube/transport.h"
#include "kube/watchdec.h"
#include "util/err.h"

struct json_object;
struct kube_watch;

/* Why a watch stream ended. Every end but KUBE_WATCH_END_EXPIRED is resumed by watching again
 * from kube_watch_resource_version; EXPIRED needs a relist first. */
enum kube_watch_end {
    KUBE_WATCH_END_CLOSED,     /* the server ended the stream (timeoutSeconds reached): re-watch */
    KUBE_WATCH_END_EXPIRED,    /* 410 Gone / Expired, as HTTP status or ERROR event: relist */
    KUBE_WATCH_END_ERROR,      /* another error Status (HTTP or ERROR event), e.g. Forbidden */
    KUBE_WATCH_END_CONNECTION, /* connection lost, refused or timed out: back off, re-watch */
    KUBE_WATCH_END_DECODE,     /* the stream was not valid watch JSON: back off, re-watch */
    KUBE_WATCH_END_RECEIVER,   /* on_event returned non-zero */
};

struct kube_watch_opts {
    const char *resource_version; /* start after this version; NULL or "" for "most recent" */
    const char *label_selector;
    const char *field_selector;
    long timeout_seconds;   /* server-side timeoutSeconds; 0: uniform random in 300..600 */
    int no_bookmarks;       /* 1: leave out allowWatchBookmarks=true */
    size_t max_event_bytes; /* one event's cap; 0: 16 MiB */
};

/* Called for each ADDED, MODIFIED, DELETED and BOOKMARK event; obj is borrowed for the call
 * (json_object_get to keep it). ERROR events are not passed here: they end the watch through
 * on_end. Return 0 to continue, non-zero to stop (on_end then reports KUBE_WATCH_END_RECEIVER).
 * Must not free w; may start other requests and watches. */
typedef int kube_watch_event_fn(struct kube_watch *w, enum kube_watch_type type,
                                struct json_object *obj, void *ud);

/* Called once when the stream ends. st is the error Status for EXPIRED and ERROR (NULL
 * otherwise), err a message for every reason but CLOSED. Both are valid during the call only.
 * The caller still owns w and frees it (from this callback too) with kube_watch_free. */
typedef void kube_watch_end_fn(struct kube_watch *w, enum kube_watch_end reason,
                               const struct kube_status *st, const struct telo_err *err, void *ud);

/* The server timeout a watch asks for when opts.timeout_seconds is 0: u in [0, 1) mapped
 * uniformly onto 300..600 s (as client-go's reflector spreads its watches over 5..10 minutes so
 * they do not all reconnect at once). Pure. */
long kube_watch_timeout_for(double u);

/* Appends the watch query for o to out (a path): watch=1, allowWatchBookmarks, resourceVersion,
 * selectors, timeoutSeconds (timeout_seconds must already be resolved, > 0). Returns 0 or
 * -TELO_ETOOBIG / -TELO_ENOMEM. */
int kube_watch_query(const struct kube_watch_opts *o, long timeout_seconds, struct buf *out);

/* Starts watching ref's collection (ref->name, if set, becomes a metadata.name field selector).
 * Returns the watch, owned by the caller and freed with kube_watch_free, or NULL with err filled
 * (bad ref, out of memory); on NULL no callback is ever called. on_end is called exactly once
 * unless the watch is freed first. */
struct kube_watch *kube_watch_start(struct kube_transport *t, const struct kube_ref *ref,
                                    const struct kube_watch_opts *o, kube_watch_event_fn *on_event,
                                    kube_watch_end_fn *on_end, void *ud, struct telo_err *err);

/* The resourceVersion of the last ADDED/MODIFIED/DELETED/BOOKMARK event seen, else the one the
 * watch started from, else "". Owned by w; valid until the next event or kube_watch_free. */
const char *kube_watch_resource_version(const struct kube_watch *w);

/* The timeoutSeconds this watch asked the server for. */
long kube_watch_timeout_seconds(const struct kube_watch *w);

/* A name for reason ("closed", "expired", ...); static, never NULL. */
const char *kube_watch_end_name(enum kube_watch_end reason);

/* Stops the stream if still running (no further callbacks) and frees w. NULL is a no-op. Must
 * not be called from w's own on_event (return non-zero there instead). */
void kube_watch_free(struct kube_watch *w);

#endif

/* An event recorder writing events.k8s.io/v1 Events, with client-go's correlator (aggregation,
 * de-duplication into a series, spam filter) and a bounded queue of asynchronous writes. */
#ifndef TELO_CONTROLLER_EVENTS_H
#define TELO_CONTROLLER_EVENTS_H

#include "util/err.h"

#include <stddef.h>

struct kube_transport;
struct events_correlator;
struct events_recorder;

/* Why events.k8s.io/v1 rather than core/v1: it is the API controller-runtime's current recorder
 * (GetEventRecorder) and client-go's tools/events write; it has reportingController/Instance and
 * action as first-class required fields; a repeated event is one object whose series.count and
 * series.lastObservedTime move (core/v1 only has count/lastTimestamp); and the API server serves
 * the same objects as core/v1 Events, so `kubectl get events` and `kubectl describe` show them
 * ("x20 over 3m"). The price: its note is immutable on update, so a series keeps the note of its
 * first event (for a combined event, of the one that started the aggregation).
 *
 * The correlator, as client-go's tools/record EventCorrelator, in this order:
 * 1. aggregation: events with the same source, object, type, reason and action but different
 *    notes are counted per group; when a group has seen max_similar distinct notes, each one
 *    within similar_window of the previous, further ones become one event whose note is
 *    "(combined from similar events): <note>";
 * 2. de-duplication: an event identical to one already written (same key, or the same combined
 *    group) bumps that Event's series instead of creating another object;
 * 3. spam filter: a token bucket per source and object (burst, refilled qps per second) drops
 *    writes past it; the counts of step 2 still include them.
 * And one step client-go does not have, off unless configured, checked before the others:
 * 4. a namespace budget for new Normal Events: a token bucket per namespace (namespace_burst,
 *    refilled namespace_qps per second) drops the creates past it, before anything is counted,
 *    so a dropped event leaves no cache entry. A burst of a thousand sessions starting in one
 *    namespace then tells the first ones' story and the rest at a rate, not a thousand
 *    identical lines (the status tells each); Warnings and the series of an Event already
 *    written are never held back by it. It is the API server's EventRateLimit admission (type
 *    Namespace) done by the writer, before the request costs anything.
 * Caches are LRUs of cache_size entries each, so memory stays bounded however many objects. */

#define EVENTS_NOTE_MAX 1024 /* bytes of note kept (the API server's limit) */
#define EVENTS_NAME_MAX 254  /* metadata.name, with the NUL */

/* The object an event is about (regarding). Strings are borrowed for the call. */
struct events_object {
    const char *api_version; /* "v1", "telo.run/v1alpha1" */
    const char *kind;        /* "ConfigMap" */
    const char *namespace;   /* NULL or "" for cluster-scoped objects (event goes to "default") */
    const char *name;        /* required */
    const char *uid;         /* may be NULL */
};

struct events_correlator_config {
    int burst;             /* spam filter bucket size; 25 */
    double qps;            /* spam filter refill per second; 1/300 (one per 5 minutes) */
    int max_similar;       /* distinct notes before aggregating; 10 */
    double similar_window; /* seconds; 600 */
    size_t cache_size;     /* entries per LRU cache; 4096 */
    int namespace_burst;   /* step 4's bucket size; 0: no namespace budget (the default) */
    double namespace_qps;  /* step 4's refill per second; 0 with a burst: 1 */
};

/* One event to correlate. Strings are borrowed for the call; note may be longer than
 * EVENTS_NOTE_MAX (it is truncated on a UTF-8 boundary). */
struct events_input {
    const struct events_object *regarding;
    const char *type;   /* "Normal" or "Warning" */
    const char *reason; /* CamelCase, required */
    const char *action; /* required by events.k8s.io; NULL takes reason */
    const char *note;
    const char *reporting_controller;
    const char *reporting_instance;
};

enum events_write {
    EVENTS_SKIP,   /* dropped by the spam filter or the namespace budget */
    EVENTS_CREATE, /* a new Event named name */
    EVENTS_PATCH,  /* bump the series of the existing Event named name */
};

/* What the correlator decided. */
struct events_outcome {
    enum events_write write;
    const char *key;            /* the correlation key (borrowed from the correlator until its
                                 * next call); equal keys name the same Event */
    char name[EVENTS_NAME_MAX]; /* metadata.name: "<object name>.<hex nanoseconds>" */
    char note[EVENTS_NOTE_MAX + 1];
    long count;        /* occurrences so far (series.count when >= 2) */
    double first_time; /* eventTime */
    double last_time;  /* series.lastObservedTime */
    int combined;      /* the note is the "(combined from similar events): " one */
    int over_budget;   /* EVENTS_SKIP by the namespace budget (step 4) */
};

/* Fills cfg with client-go's defaults above. */
void events_correlator_config_default(struct events_correlator_config *cfg);

/* Returns a correlator (cfg NULL or zero fields: defaults), or NULL when out of memory. Free it
 * with events_correlator_free. */
struct events_correlator *events_correlator_new(const struct events_correlator_config *cfg);

/* Frees c. NULL is a no-op. */
void events_correlator_free(struct events_correlator *c);

/* Correlates in at time now (seconds, Unix; also the time written into the event) and fills out.
 * Pure apart from c's caches: a fake clock drives it in tests. Returns 0, -TELO_EINVAL (missing
 * regarding name, reason, or a type that is not Normal/Warning; c unchanged) or -TELO_ENOMEM (the
 * event is lost; c may keep an empty cache entry for it). */
int events_correlate(struct events_correlator *c, const struct events_input *in, double now,
                     struct events_outcome *out);

/* Counters for metrics and tests. */
struct events_stats {
    unsigned long recorded;  /* events_record calls accepted */
    unsigned long filtered;  /* dropped by the spam filter */
    unsigned long budgeted;  /* new Normal Events dropped by the namespace budget */
    unsigned long combined;  /* turned into "(combined from similar events)" */
    unsigned long coalesced; /* folded into a write still queued for the same Event */
    unsigned long created;   /* Events created */
    unsigned long patched;   /* series bumped */
    unsigned long dropped;   /* the queue was full */
    unsigned long failed;    /* gave up: API error or max_tries */
    unsigned long retries;   /* writes tried again after a transport or server error */
    unsigned long queued;    /* writes waiting now (not counting the one in flight) */
    unsigned long in_flight; /* 0 or 1 */
};

struct events_recorder_config {
    const char *reporting_controller; /* NULL: "telo-operator" */
    const char *reporting_instance;   /* required, e.g. the pod name or leader identity */
    size_t queue_max;                 /* pending writes; 1000 (client-go's queue), a quarter of
                                       * them (all under 8) at most of one namespace */
    int max_tries;                    /* per write; 12 */
    double retry_interval;            /* seconds between tries (the first randomized); 10 */
    struct events_correlator_config correlator; /* zero fields: defaults */
};

/* Creates a recorder writing through t (borrowed, must outlive it) on t's loop. Returns NULL with
 * err filled: -TELO_EINVAL without reporting_instance, or -TELO_ENOMEM. */
struct events_recorder *events_recorder_new(struct kube_transport *t,
                                            const struct events_recorder_config *cfg,
                                            struct telo_err *err);

/* Records an event about obj: type "Normal" or "Warning", reason, action (NULL: reason) and a
 * printf note (truncated to EVENTS_NOTE_MAX). Never blocks: the write is queued and done later on
 * the loop. Returns 0 when recorded (written later, folded into a pending write, or dropped by the
 * spam filter, which is counted), -TELO_ETOOBIG when the queue is full (counted in dropped),
 * -TELO_EINVAL for a bad type or missing name/reason, or -TELO_ENOMEM. */
int events_record(struct events_recorder *r, const struct events_object *obj, const char *type,
                  const char *reason, const char *action, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Called once when a flush ends: rc 0 when every write finished, -TELO_ETIMEDOUT otherwise. */
typedef void events_done_fn(int rc, void *ud);

/* Calls done (on the loop, never from inside this call) when no write is queued or in flight, or
 * after timeout seconds. One flush at a time; a new one replaces the old, which is called with
 * -TELO_ETIMEDOUT. For graceful shutdown. */
void events_recorder_flush(struct events_recorder *r, double timeout, events_done_fn *done,
                           void *ud);

/* Live counters; valid for r's lifetime. */
const struct events_stats *events_recorder_stats(const struct events_recorder *r);

/* Cancels the write in flight, drops what is queued (without calling a pending flush's done) and
 * frees r. NULL is a no-op. */
void events_recorder_free(struct events_recorder *r);

#endif

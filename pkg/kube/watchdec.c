/* An incremental decoder for a Kubernetes watch stream of newline-delimited JSON events. */
#include "kube/watchdec.h"

#include "util/buf.h"
#include "util/jget.h"

#include <json.h>

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct kube_watchdec {
    /* The start of an event whose newline has not arrived yet. A chunk's complete lines are decoded
     * in place, so only the bytes that straddle a chunk boundary are copied, and each byte is
     * scanned for a newline once, when it arrives. */
    struct buf line;
    size_t max;
    int (*on_event)(void *ud, enum kube_watch_type type, struct json_object *object);
    void *ud;
    struct json_tokener *tok;
    struct buf resource_version;
    uint64_t events; /* non-blank lines seen, to say which event a problem is in */
    int failed;      /* the negative code that stopped the stream, or 0 */
};

static const char *const type_names[] = {
    [KUBE_WATCH_ADDED] = "ADDED",     [KUBE_WATCH_MODIFIED] = "MODIFIED",
    [KUBE_WATCH_DELETED] = "DELETED", [KUBE_WATCH_BOOKMARK] = "BOOKMARK",
    [KUBE_WATCH_ERROR] = "ERROR",
};

#define NTYPES (sizeof(type_names) / sizeof(type_names[0]))

const char *kube_watch_type_name(enum kube_watch_type t)
{
    if ((unsigned)t >= NTYPES)
        return "UNKNOWN";
    return type_names[t];
}

struct kube_watchdec *kube_watchdec_new(size_t max_event_bytes,
                                        int (*on_event)(void *ud, enum kube_watch_type type,
                                                        struct json_object *object),
                                        void *ud)
{
    if (max_event_bytes == 0 || !on_event)
        return NULL;
    struct kube_watchdec *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    /* json_tokener_parse_ex takes an int length. */
    d->max = max_event_bytes > INT_MAX ? INT_MAX : max_event_bytes;
    d->on_event = on_event;
    d->ud = ud;
    buf_init(&d->line, d->max);
    buf_init(&d->resource_version, d->max);
    d->tok = json_tokener_new_ex(JGET_OBJECT_MAX_DEPTH);
    if (!d->tok) {
        free(d);
        return NULL;
    }
    /* The API server sends strict JSON (Go's encoding/json) in UTF-8: anything laxer, like a
     * trailing comma or a broken UTF-8 sequence, means bytes were lost or mangled on the way. We
     * check what follows the value ourselves. */
    json_tokener_set_flags(d->tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                       JSON_TOKENER_VALIDATE_UTF8);
    return d;
}

void kube_watchdec_free(struct kube_watchdec *d)
{
    if (!d)
        return;
    buf_release(&d->line);
    buf_release(&d->resource_version);
    json_tokener_free(d->tok);
    free(d);
}

const char *kube_watchdec_resource_version(const struct kube_watchdec *d)
{
    if (!d || !d->resource_version.data)
        return "";
    return d->resource_version.data;
}

static bool is_blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n')
            return false;
    }
    return true;
}

/* Records that the stream is dead and frees what it buffered; returns rc. */
static int fail(struct kube_watchdec *d, int rc)
{
    d->failed = rc;
    buf_release(&d->line);
    return rc;
}

static int parse_type(const char *name, enum kube_watch_type *type)
{
    for (size_t i = 0; i < NTYPES; i++) {
        if (strcmp(type_names[i], name) == 0) {
            *type = (enum kube_watch_type)i;
            return 0;
        }
    }
    return -1;
}

/* Parses one line as one JSON value, with nothing but whitespace after it. */
static int parse_line(struct kube_watchdec *d, const char *p, size_t n, bool at_end,
                      struct json_object **out, struct telo_err *err)
{
    json_tokener_reset(d->tok);
    struct json_object *root = json_tokener_parse_ex(d->tok, p, (int)n);
    enum json_tokener_error jerr = json_tokener_get_error(d->tok);
    size_t end = json_tokener_get_parse_end(d->tok);
    if (!root && jerr == json_tokener_continue) {
        /* All n bytes were taken. A NUL tells json-c the input ends, which completes a bare
         * literal or number ("null"); inside an object or string it does not help. */
        end = n;
        root = json_tokener_parse_ex(d->tok, "", 1);
        jerr = json_tokener_get_error(d->tok);
        if (!root && jerr != json_tokener_success)
            return telo_err_set(err, TELO_EPROTO,
                                at_end ? "watch stream ended inside event #%llu (%zu bytes)"
                                       : "watch event #%llu is truncated JSON (%zu bytes)",
                                (unsigned long long)d->events, n);
    }
    if (!root && jerr != json_tokener_success)
        return telo_err_set(err, TELO_EPROTO, "watch event #%llu is not valid JSON: %s at byte %zu",
                            (unsigned long long)d->events, json_tokener_error_desc(jerr), end);
    if (!is_blank(p + end, n - end)) {
        json_object_put(root);
        return telo_err_set(err, TELO_EPROTO,
                            "watch event #%llu has data after its JSON object at byte %zu",
                            (unsigned long long)d->events, end);
    }
    *out = root;
    return 0;
}

/* Remembers object's metadata.resourceVersion, if it has one, as where to resume. */
static int note_resource_version(struct kube_watchdec *d, struct json_object *object,
                                 struct telo_err *err)
{
    const char *rv = jget_string(jget_object(object, "metadata"), "resourceVersion");
    if (!rv)
        return 0;
    /* Cannot exceed the buffer's max: the version came from a line no longer than it. */
    buf_reset(&d->resource_version);
    if (buf_append_str(&d->resource_version, rv) < 0)
        return telo_err_set(err, TELO_ENOMEM, "watch: out of memory keeping the resourceVersion");
    return 0;
}

/* Decodes one complete line (without its newline) and delivers its event. */
static int decode_line(struct kube_watchdec *d, const char *p, size_t n, bool at_end,
                       struct telo_err *err)
{
    if (is_blank(p, n))
        return 0;
    d->events++;
    struct json_object *root = NULL;
    int rc = parse_line(d, p, n, at_end, &root, err);
    if (rc < 0)
        return rc;

    unsigned long long nr = (unsigned long long)d->events;
    const char *type_name = jget_string(root, "type");
    struct json_object *object = jget_object(root, "object");
    enum kube_watch_type type = KUBE_WATCH_ADDED;
    if (!json_object_is_type(root, json_type_object))
        rc = telo_err_set(err, TELO_EPROTO, "watch event #%llu is a JSON %s, not an object", nr,
                          json_type_to_name(json_object_get_type(root)));
    else if (!type_name)
        rc = telo_err_set(err, TELO_EPROTO, "watch event #%llu has no \"type\" string", nr);
    else if (parse_type(type_name, &type) < 0)
        rc = telo_err_set(err, TELO_EPROTO,
                          "watch event #%llu has unknown type \"%.64s\" (want ADDED, MODIFIED, "
                          "DELETED, BOOKMARK or ERROR)",
                          nr, type_name);
    else if (!object)
        rc = telo_err_set(err, TELO_EPROTO, "watch event #%llu (%s) has no \"object\" object", nr,
                          type_names[type]);
    if (rc < 0) {
        json_object_put(root);
        return rc;
    }

    rc = d->on_event(d->ud, type, object);
    if (rc < 0)
        rc = telo_err_set(err, -rc, "watch event #%llu (%s): the event handler stopped decoding",
                          nr, type_names[type]);
    /* An ERROR's object is a Status, whose metadata carries no position in the stream; and an event
     * the handler refused must be seen again when the watch resumes. */
    else if (type != KUBE_WATCH_ERROR)
        rc = note_resource_version(d, object, err);
    json_object_put(root);
    return rc;
}

static int too_big(struct kube_watchdec *d, size_t have, struct telo_err *err)
{
    return fail(d, telo_err_set(err, TELO_ETOOBIG,
                                "watch event #%llu is larger than the %zu-byte limit (%zu bytes "
                                "without a newline); raise the watch's max event size",
                                (unsigned long long)d->events + 1, d->max, have));
}

int kube_watchdec_feed(struct kube_watchdec *d, const char *data, size_t len, struct telo_err *err)
{
    if (!d)
        return telo_err_set(err, TELO_EINVAL, "kube_watchdec_feed: decoder is NULL");
    if (d->failed)
        return telo_err_set(err, TELO_EINVAL,
                            "watch decoder already failed (%s); start a new watch",
                            telo_err_name(d->failed));
    if (len == 0)
        return 0;
    if (!data)
        return telo_err_set(err, TELO_EINVAL, "kube_watchdec_feed: data is NULL");

    size_t pos = 0;
    if (d->line.len > 0) {
        /* Complete the event that straddles the previous chunk. */
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        int rc = buf_append(&d->line, data, n);
        if (rc == -TELO_ETOOBIG)
            return too_big(d, d->line.len + n, err);
        if (rc < 0)
            return fail(d, telo_err_set(err, -rc, "watch: out of memory buffering an event"));
        if (!nl)
            return 0;
        rc = decode_line(d, d->line.data, d->line.len, false, err);
        if (rc < 0)
            return fail(d, rc);
        buf_reset(&d->line);
        pos = n + 1;
    }
    while (pos < len) {
        const char *p = data + pos;
        const char *nl = memchr(p, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - p) : len - pos;
        if (n > d->max)
            return too_big(d, n, err);
        if (!nl) {
            int rc = buf_append(&d->line, p, n);
            if (rc < 0)
                return fail(d, telo_err_set(err, -rc, "watch: out of memory buffering an event"));
            break;
        }
        int rc = decode_line(d, p, n, false, err);
        if (rc < 0)
            return fail(d, rc);
        pos += n + 1;
    }
    return 0;
}

int kube_watchdec_finish(struct kube_watchdec *d, struct telo_err *err)
{
    if (!d)
        return telo_err_set(err, TELO_EINVAL, "kube_watchdec_finish: decoder is NULL");
    if (d->failed)
        return telo_err_set(err, TELO_EINVAL,
                            "watch decoder already failed (%s); start a new watch",
                            telo_err_name(d->failed));
    if (d->line.len == 0)
        return 0;
    int rc = decode_line(d, d->line.data, d->line.len, true, err);
    if (rc < 0)
        return fail(d, rc);
    buf_reset(&d->line);
    return 0;
}

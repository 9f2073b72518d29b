/* Labels and annotations the operator's administrators add to session children (issue 19):
 * pod.labels, pod.annotations and ingress.annotations of the config. Checked once at start, so
 * a bad key fails the operator's start naming it rather than every session's apply. */
#ifndef TELO_SESSION_META_H
#define TELO_SESSION_META_H

#include "util/err.h"

#include <json.h>

/* Bounds: entries per map, and the bytes of an annotation map's keys and values together (the
 * API server refuses an object whose annotations exceed 256 KiB; ours leave room for others). */
#define SESSION_META_MAX_ENTRIES     64
#define SESSION_META_MAX_ANNOT_BYTES 65536

enum session_meta_kind {
    SESSION_META_LABELS,
    SESSION_META_ANNOTATIONS,
};

/* Checks map (a JSON object) as the labels or annotations of a session child, for the config
 * key path (named in every error, with source before it: "config f: pod.labels.x: ..."): a map
 * of strings; every key a qualified name (an optional DNS-subdomain prefix and '/', then a name
 * of up to 63 letters, digits, '-', '_' and '.', starting and ending alphanumeric); a label
 * value of up to 63 such characters or empty; no key the operator sets itself (telo.run/session,
 * telo.run/run, app.kubernetes.io/managed-by) nor any other key in the telo.run domain, which
 * the operator keeps for its own; at most SESSION_META_MAX_ENTRIES entries, and for annotations
 * SESSION_META_MAX_ANNOT_BYTES. Returns 0 or -TELO_EINVAL. */
int session_meta_check(enum session_meta_kind kind, struct json_object *map, const char *source,
                       const char *path, struct telo_err *err);

/* Whether key is one the operator keeps for itself on session children (see above). */
int session_meta_reserved(const char *key);

/* Adds every entry of extra (a checked map, or NULL) to metadata's "labels" or "annotations"
 * map (made when missing); an entry already there is kept, never overwritten. */
void session_meta_add(struct json_object *metadata, const char *field, struct json_object *extra);

#endif

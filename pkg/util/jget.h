/* Type-checked reads of json-c values that came from outside (the API server, a tenant, a client,
 * a registry): every accessor answers NULL or an error for a missing member, a JSON null and a
 * value of the wrong type alike, so no caller can pass a NULL string on or read a number as an
 * object. Use these, not json_object_get_string and friends, wherever the value is not ours. */
#ifndef TELO_UTIL_JGET_H
#define TELO_UTIL_JGET_H

#include <json-c/json.h>
#include <stdint.h>

/* How deep an API object's JSON may nest, for every decoder of objects: a watch event, a list
 * page, a GET's answer and the cache's packed texts. json-c's default, 32, is below what real
 * objects reach (a CRD's openAPIV3Schema nests two levels per property level), and decoders that
 * disagree leave an object the watch took unreadable in the cache, or a LIST that never succeeds.
 * Go's decoder allows 10000; this bounds json-c's parse stack, one frame per level. */
#define JGET_OBJECT_MAX_DEPTH 512

/* Returns o's member key (borrowed, not referenced), or NULL when o is NULL or not an object, the
 * member is missing, or it is JSON null. */
struct json_object *jget(const struct json_object *o, const char *key);

/* Returns v's string (borrowed from v) when v is a JSON string, else NULL (a number is not
 * turned into its text, as json_object_get_string would). */
const char *jget_string_of(const struct json_object *v);

/* Returns v's text (borrowed from v) when v is a JSON string or a JSON number, which json-c
 * keeps as written ("268435456", "0.5"), else NULL. For Kubernetes quantities: a CRD field marked
 * x-kubernetes-int-or-string and a YAML "cpu: 1" are numbers in JSON, and a quantity still. */
const char *jget_number_or_string_of(const struct json_object *v);

/* The member key when it has the named type, else NULL. The string is borrowed from o. */
const char *jget_string(const struct json_object *o, const char *key);
struct json_object *jget_object(const struct json_object *o, const char *key);
struct json_object *jget_array(const struct json_object *o, const char *key);

/* Stores the member key in *out when it is a JSON integer (a double with no fraction counts, as
 * Kubernetes' own decoders accept 5.0) within int64_t, and returns 0; returns -1 with *out
 * unchanged otherwise. */
int jget_int(const struct json_object *o, const char *key, int64_t *out);

/* Stores the member key (0 or 1) in *out when it is a JSON boolean and returns 0; returns -1 with
 * *out unchanged otherwise. */
int jget_bool(const struct json_object *o, const char *key, int *out);

/* Whether the member key is the JSON string want. */
int jget_string_is(const struct json_object *o, const char *key, const char *want);

#endif

/* YAML text to json-c values: manifests and config files read as JSON. */
#ifndef TELO_UTIL_YAMLJSON_H
#define TELO_UTIL_YAMLJSON_H

#include "util/err.h"

#include <json.h>
#include <stddef.h>

/* Calls fn(ud, doc, index) for each document of the YAML text (doc is borrowed for the call;
 * empty documents are skipped). Plain scalars become null, booleans, integers or doubles as in
 * YAML 1.2's core schema; quoted scalars stay strings; anchors and aliases are refused. source
 * names the text in messages ("config /etc/telo/config.yaml"). Returns 0, the first non-zero
 * value fn returned, or a negative code with err filled: "<source>: line L column C: <problem>". */
int yamljson_parse_docs(const char *text, size_t len, const char *source,
                        int (*fn)(void *ud, struct json_object *doc, int index), void *ud,
                        struct telo_err *err);

/* Parses text holding exactly one document into *out (the caller json_object_put()s it; an
 * empty text gives an empty object). Same errors as yamljson_parse_docs, plus one for a text of
 * several documents. */
int yamljson_parse(const char *text, size_t len, const char *source, struct json_object **out,
                   struct telo_err *err);

#endif

/* URL building: percent-escaping of path segments and query values. */
#ifndef TELO_UTIL_URL_H
#define TELO_UTIL_URL_H

#include "util/buf.h"

/* Appends s to out with every byte outside RFC 3986's unreserved set (ALPHA, DIGIT, "-", ".",
 * "_", "~") written as %XX (upper-case hex), so the result is safe as one path segment or one
 * query key or value. Returns 0, or buf_append's -TELO_ETOOBIG / -TELO_ENOMEM with out unchanged.
 */
int url_escape(struct buf *out, const char *s);

/* Appends "key=value" to out, escaped, preceded by '?' when out holds no '?' yet and by '&'
 * otherwise (out is a path being built). A NULL value appends nothing and returns 0. Returns 0,
 * or -TELO_ETOOBIG / -TELO_ENOMEM with out unchanged. */
int url_query_add(struct buf *out, const char *key, const char *value);

/* As url_query_add for a decimal integer value. */
int url_query_add_long(struct buf *out, const char *key, long value);

#endif

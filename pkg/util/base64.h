/* Base64 decoding (RFC 4648, padded), for Kubernetes binaryData and Secret data. */
#ifndef TELO_UTIL_BASE64_H
#define TELO_UTIL_BASE64_H

#include <stddef.h>

/* Decodes n bytes of base64 text (trailing whitespace ignored) into a new buffer, NUL-terminated
 * one byte past the decoded length, which goes into *len (may be NULL). The caller frees it.
 * Returns NULL when the text is not base64 (or is empty), or when out of memory. */
unsigned char *util_base64_decode(const char *in, size_t n, size_t *len);

#endif

/* Base64 (RFC 4648, padded): decoding Kubernetes binaryData, Secret and kubeconfig data, and
 * encoding. */
#ifndef TELO_UTIL_BASE64_H
#define TELO_UTIL_BASE64_H

#include <stddef.h>

/* Decodes n bytes of base64 text (trailing whitespace ignored) into a new buffer, NUL-terminated
 * one byte past the decoded length, which goes into *len (may be NULL). The caller frees it.
 * Returns NULL when the text is not base64 (or is empty), or when out of memory. */
unsigned char *util_base64_decode(const char *in, size_t n, size_t *len);

/* Decodes n bytes of base64 text exactly as Go's base64.StdEncoding.DecodeString does, which
 * kubeconfig -data fields and client-go use: padding is required, CR and LF are skipped wherever
 * they are, any other byte outside the alphabet (a blank, a NUL, '=' before the end) is refused,
 * and empty text decodes to nothing. Returns a new buffer, NUL-terminated one byte past the
 * decoded length, which goes into *len (may be NULL); the caller frees it. Returns NULL with *bad
 * set to 1 when the text is not such base64, or NULL with *bad 0 when out of memory. */
unsigned char *util_base64_decode_std(const char *in, size_t n, size_t *len, int *bad);

/* Encodes n bytes as padded standard base64 (no line breaks) into a new NUL-terminated string
 * the caller frees. Returns NULL when out of memory. */
char *util_base64_encode(const void *in, size_t n);

#endif

/* Base64 (RFC 4648): padded, for Kubernetes binaryData and Secret data, kubeconfig data,
 * registry credentials and the WebSocket accept key; unpadded base64url for bearer tokens in a
 * WebSocket subprotocol. */
#ifndef TELO_UTIL_BASE64_H
#define TELO_UTIL_BASE64_H

#include <stddef.h>

/* Bytes util_base64_encode_into writes for n input bytes, with the NUL. */
#define UTIL_BASE64_ENCODED_SIZE(n) (4 * (((n) + 2) / 3) + 1)

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

/* Encodes n bytes as padded base64 into out, which holds UTIL_BASE64_ENCODED_SIZE(n) bytes, and
 * NUL-terminates it. Returns the length of the text. n must be below INT_MAX / 4 * 3. */
size_t util_base64_encode_into(char *out, const void *in, size_t n);

/* Encodes n bytes as padded base64 into a new NUL-terminated string (the caller frees it), its
 * length into *len (may be NULL). Returns NULL when out of memory or n is too large. */
char *util_base64_encode(const void *in, size_t n, size_t *len);

/* Decodes unpadded base64url (section 5; trailing '=' tolerated) into out as a C string. Returns
 * 0, or -1 when it is malformed or empty, decodes to a NUL byte, or does not fit in outlen. */
int util_base64url_decode(const char *in, char *out, size_t outlen);

#endif

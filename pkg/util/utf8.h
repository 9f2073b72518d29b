/* UTF-8 checks for text that lands where UTF-8 is required (JSON logs, status messages). */
#ifndef TELO_UTIL_UTF8_H
#define TELO_UTIL_UTF8_H

#include <stddef.h>

/* The length of the well-formed UTF-8 sequence at p (1 to 4; n bytes are readable, n > 0), or 0
 * when the byte there does not start one (a stray continuation byte, an overlong form, a
 * surrogate, past U+10FFFF, cut by n). Cannot fail. */
size_t util_utf8_len(const unsigned char *p, size_t n);

/* The length of the longest prefix of s (n bytes) that does not end inside a UTF-8 sequence: n,
 * or less when the last sequence is incomplete or malformed (cut by snprintf filling its buffer,
 * say). Only the end is looked at: text that must be UTF-8 throughout is checked with
 * util_utf8_len. Cannot fail. */
size_t util_utf8_cut(const char *s, size_t n);

#endif

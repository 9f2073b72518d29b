/* Text from tenants (an app's termination message, a bundle's entry names, a registry's error
 * body, a build's log) made safe to show to other people: in a status, an Event, a terminal. */
#ifndef TELO_UTIL_TEXT_H
#define TELO_UTIL_TEXT_H

#include <stddef.h>

/* 1 when the well-formed UTF-8 sequence at p (len bytes, as util_utf8_len measured it) is a
 * character that acts on a terminal or moves text around without being seen: a C1 control
 * (U+0080..U+009F), a line or paragraph separator, a bidirectional override or isolate. */
int util_text_hidden(const unsigned char *p, size_t len);

/* Copies n bytes of in to out (room for n + 1 bytes, NUL-terminated) as UTF-8 that a terminal
 * shows as text: CSI sequences (ESC '[' ... final byte) and CRs go; any other ESC goes alone
 * (an OSC's text then shows as text); C0 controls other than newline and tab, DEL, the hidden
 * characters above, and each byte that starts no well-formed UTF-8 sequence become '?'. Idempotent.
 * Returns the length written. Cannot fail. */
size_t util_text_clean(const char *in, size_t n, char *out);

/* 1 when util_text_clean would copy s (n bytes) unchanged. */
int util_text_is_clean(const char *s, size_t n);

#endif

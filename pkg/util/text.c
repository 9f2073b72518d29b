#include "util/text.h"

#include "util/utf8.h"

#include <string.h>

int util_text_hidden(const unsigned char *p, size_t len)
{
    /* U+0080..U+009F: the C1 controls, the 8-bit CSI (U+009B) and OSC (U+009D) among them. */
    if (len == 2)
        return p[0] == 0xc2 && p[1] <= 0x9f;
    if (len != 3 || p[0] != 0xe2)
        return 0;
    /* U+2028 and U+2029 break lines; U+202A..U+202E and U+2066..U+2069 (bidirectional
     * embeddings, overrides and isolates) reorder the text around them. */
    if (p[1] == 0x80)
        return p[2] >= 0xa8 && p[2] <= 0xae;
    return p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9;
}

/* How much of in[i..n) one step of the clean consumes (*skip bytes), and what it writes: the
 * bytes themselves (*keep = 1), one '?' (*keep = 0, *mark = 1), or nothing. */
static void step(const unsigned char *in, size_t i, size_t n, size_t *skip, int *keep, int *mark)
{
    unsigned char c = in[i];
    *skip = 1;
    *keep = 0;
    *mark = 0;
    if (c == 0x1b) {
        /* CSI: ESC '[', parameter and intermediate bytes, one final byte. */
        if (i + 1 < n && in[i + 1] == '[') {
            size_t j = i + 2;
            while (j < n && in[j] >= 0x20 && in[j] <= 0x3f)
                j++;
            *skip = (j < n ? j + 1 : n) - i;
        }
        return;
    }
    if (c == '\r')
        return;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        *mark = 1;
        return;
    }
    if (c < 0x80) {
        *keep = 1;
        return;
    }
    size_t len = util_utf8_len(in + i, n - i);
    if (len == 0) {
        *mark = 1;
        return;
    }
    *skip = len;
    if (util_text_hidden(in + i, len))
        *mark = 1;
    else
        *keep = 1;
}

size_t util_text_clean(const char *in, size_t n, char *out)
{
    const unsigned char *u = (const unsigned char *)in;
    size_t o = 0, skip;
    int keep, mark;
    for (size_t i = 0; i < n; i += skip) {
        step(u, i, n, &skip, &keep, &mark);
        if (keep) {
            memcpy(out + o, in + i, skip);
            o += skip;
        } else if (mark) {
            out[o++] = '?';
        }
    }
    out[o] = '\0';
    return o;
}

int util_text_is_clean(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t skip;
    int keep, mark;
    for (size_t i = 0; i < n; i += skip) {
        step(u, i, n, &skip, &keep, &mark);
        if (!keep)
            return 0;
    }
    return 1;
}

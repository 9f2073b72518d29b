/* UTF-8 checks for text that lands where UTF-8 is required (JSON logs, status messages). */
#include "util/utf8.h"

size_t util_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return len;
}

size_t util_utf8_cut(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    /* A character is at most 4 bytes: its lead byte is among the last 4. */
    size_t lead = n;
    while (lead > 0 && n - lead < 4 && (p[lead - 1] & 0xC0) == 0x80)
        lead--;
    if (lead == 0 || n - lead >= 4 || p[lead - 1] < 0xC0)
        return n; /* ends on ASCII, or on continuation bytes no lead byte owns */
    lead--;
    return util_utf8_len(p + lead, n - lead) == n - lead ? n : lead;
}

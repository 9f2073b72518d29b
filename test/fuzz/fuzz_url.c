/* libFuzzer target: percent-escaping of path segments and query values (names, selectors and
 * continue tokens that came from outside go into request URLs this way): the output holds only
 * unreserved characters and %XX, decodes back to the input, and a call that fails appends
 * nothing. */
#include "util/buf.h"
#include "util/url.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void check_escaped(const char *out, size_t len, const char *want)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = out[i];
        if (c == '%') {
            if (i + 2 >= len)
                abort();
            int hi = hexval(out[i + 1]), lo = hexval(out[i + 2]);
            if (hi < 0 || lo < 0)
                abort();
            c = (char)(hi << 4 | lo);
            i += 2;
        } else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '.' || c == '_' || c == '~')) {
            abort();
        }
        if (want[o++] != c)
            abort();
    }
    if (want[o] != '\0')
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* byte 0: the buffer's bound, so the all-or-nothing failure path is reached too. */
    size_t max = data[0] < 200 ? (size_t)data[0] + 1 : 1 << 20;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';

    struct buf out;
    buf_init(&out, max);
    if (url_escape(&out, s) == 0)
        check_escaped(out.data ? out.data : "", out.len, s);
    else if (out.len != 0)
        abort();
    buf_release(&out);

    buf_init(&out, max);
    size_t before = 0;
    int rc = url_query_add(&out, "labelSelector", s);
    if (rc != 0 && out.len != before)
        abort();
    before = out.len;
    rc = url_query_add(&out, s, "x");
    if (rc != 0 && out.len != before)
        abort();
    before = out.len;
    long v = 0;
    memcpy(&v, data, size < sizeof(v) ? size : sizeof(v));
    rc = url_query_add_long(&out, "limit", v);
    if (rc != 0 && out.len != before)
        abort();
    if (out.len > 0 && out.data[0] != '?')
        abort();
    buf_release(&out);
    free(s);
    return 0;
}

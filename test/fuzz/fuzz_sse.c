/* libFuzzer target: the gateway's server-sent-event parser (the pod inspector's stream), fed in
 * two pieces split where the input's first byte says, must dispatch the same events as in one
 * piece; every event is then run through the debug-frame filter. */
#include "gateway/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct digest {
    unsigned long n;
    unsigned long long sum;
};

static void count(const char *event, const char *data, size_t len, void *ud)
{
    struct digest *d = ud;
    d->n++;
    for (const char *p = event; *p != '\0'; p++)
        d->sum = d->sum * 31 + (unsigned char)*p;
    for (size_t i = 0; i < len; i++)
        d->sum = d->sum * 31 + (unsigned char)data[i];
    struct buf out;
    buf_init(&out, 1 << 20);
    if (gw_sse_debug_frame(&out, d->n, data, len) == 1 &&
        (out.len < 30 || memcmp(out.data, "id: ", 4) != 0 || out.data[out.len - 1] != '\n'))
        abort();
    buf_release(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t cut = data[0] % size;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (cut > len)
        cut = len;
    struct gw_sse_parser one, two;
    struct digest a = {0}, b = {0};
    gw_sse_init(&one, 4096);
    gw_sse_init(&two, 4096);
    int ra = gw_sse_feed(&one, text, len, count, &a);
    int rb = gw_sse_feed(&two, text, cut, count, &b);
    int rb2 = gw_sse_feed(&two, text + cut, len - cut, count, &b);
    if ((ra == 0 && (rb != 0 || rb2 != 0)) || (ra == 0 && (a.n != b.n || a.sum != b.sum)))
        abort();
    gw_sse_release(&one);
    gw_sse_release(&two);
    return 0;
}

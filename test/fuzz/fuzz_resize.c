/* libFuzzer target: the resize channel's JSON ({"Width":W,"Height":H}, several objects per
 * message), as pkg/kube/channel parses it; a parsed size formats and parses back to itself. */
#include "kube/channel.h"
#include "util/buf.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_term_size s = {7, 7}, again = {0, 0};
    struct telo_err err;
    int n = kube_resize_parse(data, size, &s, &err);
    if (n < 0) {
        /* Refused: *out untouched. */
        if (s.width != 7 || s.height != 7)
            abort();
        return 0;
    }
    if (n == 0 || s.width > KUBE_TERM_MAX || s.height > KUBE_TERM_MAX)
        abort();
    struct buf b;
    buf_init(&b, 64);
    if (kube_resize_format(&b, s.width, s.height) != 0 ||
        kube_resize_parse(b.data, b.len, &again, &err) != 1 || again.width != s.width ||
        again.height != s.height)
        abort();
    buf_release(&b);
    return 0;
}

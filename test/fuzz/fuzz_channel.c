/* libFuzzer target: a stream of channel-protocol messages as a client sends them (each input
 * byte n starts a message of the next n bytes), split and handed to the parser of its channel:
 * resize JSON on 4, the close message on 255, a Status on 3. Splitting and framing again gives
 * the same bytes. */
#include "kube/channel.h"
#include "util/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one_message(const uint8_t *msg, size_t len)
{
    struct kube_channel_msg m;
    struct telo_err err;
    if (kube_channel_split(msg, len, &m, &err) != 0) {
        if (len != 0)
            abort();
        return;
    }
    if (m.channel != msg[0] || m.data != msg + 1 || m.len != len - 1)
        abort();
    struct buf b;
    buf_init(&b, len + 1);
    if (kube_channel_frame(&b, m.channel, m.data, m.len) != 0 || b.len != len ||
        memcmp(b.data, msg, len) != 0)
        abort();
    buf_release(&b);
    if (m.channel == KUBE_CHANNEL_RESIZE) {
        struct kube_term_size s;
        kube_resize_parse(m.data, m.len, &s, &err);
    } else if (m.channel == KUBE_CHANNEL_ERROR) {
        struct kube_exit_status st;
        kube_exit_status_parse(m.data, m.len, &st, &err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        size_t n = data[off++];
        if (n > size - off)
            n = size - off;
        /* A copy of exactly n bytes, so ASan sees any read past the message. */
        uint8_t *msg = malloc(n ? n : 1);
        if (msg == NULL)
            return 0;
        memcpy(msg, data + off, n);
        one_message(msg, n);
        free(msg);
        off += n;
    }
    return 0;
}

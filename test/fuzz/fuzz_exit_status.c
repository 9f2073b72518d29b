/* libFuzzer target: the channel-3 exit Status (a metav1.Status) as pkg/kube/channel reads it;
 * an exit code read formats into a Status that reads back as the same code. */
#include "kube/channel.h"
#include "util/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_exit_status st, again;
    struct telo_err err;
    if (kube_exit_status_parse(data, size, &st, &err) != 0)
        return 0;
    if (st.code < -1 || st.code > 255 || memchr(st.reason, '\0', sizeof(st.reason)) == NULL ||
        memchr(st.message, '\0', sizeof(st.message)) == NULL)
        abort();
    struct buf b;
    buf_init(&b, 4096);
    if (kube_exit_status_format(&b, st.code, st.message[0] ? st.message : NULL) != 0 ||
        kube_exit_status_parse(b.data, b.len, &again, &err) != 0 || again.code != st.code)
        abort();
    buf_release(&b);
    return 0;
}

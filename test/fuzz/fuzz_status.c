/* libFuzzer target: an API server error answer (HTTP code and body, a metav1.Status or anything
 * a proxy sends) decoded into a kube_status and turned into the error message callers log and
 * write into status; and a Retry-After header value. */
#include "kube/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    /* bytes 0-1: the HTTP code (100..599); the rest is the body. */
    int code = 100 + ((data[0] << 8 | data[1]) % 500);
    const char *body = (const char *)data + 2;
    size_t len = size - 2;
    struct kube_status st;
    struct telo_err err;
    if (kube_status_parse(code, body, len, &st, &err) == 0) {
        if (st.code <= 0 || !st.message || !st.reason_text)
            abort();
        struct telo_err e2;
        if (kube_status_to_err(&st, "fuzz", &e2) >= 0 || e2.msg[0] == '\0' ||
            strlen(e2.msg) >= sizeof(e2.msg))
            abort();
        (void)kube_status_retryable(&st);
        (void)kube_status_is_expired(&st);
        (void)kube_reason_name(st.reason);
    }
    kube_status_release(&st);
    char *value = malloc(len + 1);
    if (value) {
        memcpy(value, body, len);
        value[len] = '\0';
        int s = kube_retry_after_parse(value);
        if (s < -1)
            abort();
        free(value);
    }
    return 0;
}

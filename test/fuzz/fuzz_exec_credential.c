/* libFuzzer target: an exec credential plugin's output (an ExecCredential JSON object) as the
 * client reads it before sending its token or certificate to the API server. */
#include "kube/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* byte 0: the apiVersion the kubeconfig asks for; the rest is the plugin's stdout. */
    const char *api =
        data[0] & 1 ? "client.authentication.k8s.io/v1beta1" : "client.authentication.k8s.io/v1";
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    struct kube_exec_credential c;
    struct telo_err err;
    if (kube_exec_credential_parse("fuzz", "plugin", api, text, &c, &err) == 0) {
        if (!c.token && !c.cert_pem)
            abort();
        if (!c.cert_pem != !c.key_pem)
            abort();
        if ((c.token && !*c.token) || (c.cert_pem && !*c.cert_pem))
            abort();
        kube_exec_credential_release(&c);
    } else if (c.token || c.cert_pem || c.key_pem || err.msg[0] == '\0') {
        abort();
    }
    free(text);
    return 0;
}

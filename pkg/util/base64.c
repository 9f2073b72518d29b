/* Base64 decoding (RFC 4648, padded), for Kubernetes binaryData and Secret data. */
#include "util/base64.h"

#include <openssl/evp.h>

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>

unsigned char *util_base64_decode(const char *in, size_t n, size_t *len)
{
    while (n > 0 && isspace((unsigned char)in[n - 1]))
        n--;
    if (n == 0 || n % 4 != 0 || n > (size_t)INT_MAX)
        return NULL;
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (out == NULL)
        return NULL;
    int got = EVP_DecodeBlock(out, (const unsigned char *)in, (int)n);
    if (got < 0) {
        free(out);
        return NULL;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes. */
    if (in[n - 1] == '=')
        got--;
    if (in[n - 2] == '=')
        got--;
    out[got] = '\0';
    if (len)
        *len = (size_t)got;
    return out;
}

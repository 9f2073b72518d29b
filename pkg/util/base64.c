/* Base64 (RFC 4648, padded): decoding Kubernetes binaryData, Secret and kubeconfig data, and
 * encoding. */
#include "util/base64.h"

#include <openssl/evp.h>

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

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

unsigned char *util_base64_decode_std(const char *in, size_t n, size_t *len, int *bad)
{
    unsigned char *out = malloc(n / 4 * 3 + 4);
    *bad = 0;
    if (!out)
        return NULL;
    size_t o = 0, q = 0, pad = 0;
    unsigned acc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '\r' || c == '\n')
            continue;
        if (c == '=') {
            pad++;
            if (q < 2 || q + pad > 4)
                goto bad;
            continue;
        }
        const char *p = c ? strchr(alphabet, c) : NULL;
        if (!p || pad)
            goto bad;
        acc = (acc << 6) | (unsigned)(p - alphabet);
        if (++q == 4) {
            out[o++] = (unsigned char)(acc >> 16);
            out[o++] = (unsigned char)(acc >> 8);
            out[o++] = (unsigned char)acc;
            q = 0;
            acc = 0;
        }
    }
    if (pad) {
        if (q + pad != 4)
            goto bad;
        if (q == 2) {
            out[o++] = (unsigned char)(acc >> 4);
        } else {
            out[o++] = (unsigned char)(acc >> 10);
            out[o++] = (unsigned char)(acc >> 2);
        }
    } else if (q) {
        goto bad;
    }
    out[o] = '\0';
    if (len)
        *len = o;
    return out;
bad:
    free(out);
    *bad = 1;
    return NULL;
}

char *util_base64_encode(const void *data, size_t n)
{
    const unsigned char *in = data;
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
        /* A missing input byte turns its output character into padding (RFC 4648, section 4). */
        if (i + 1 >= n)
            out[o - 2] = '=';
        if (i + 2 >= n)
            out[o - 1] = '=';
    }
    out[o] = '\0';
    return out;
}

/* Base64 (RFC 4648): padded, for Kubernetes binaryData and Secret data, kubeconfig data,
 * registry credentials and the WebSocket accept key; unpadded base64url for bearer tokens in a
 * WebSocket subprotocol. */
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

size_t util_base64_encode_into(char *out, const void *in, size_t n)
{
    return (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

char *util_base64_encode(const void *in, size_t n, size_t *len)
{
    if (n > (size_t)INT_MAX / 4 * 3)
        return NULL;
    char *out = malloc(UTIL_BASE64_ENCODED_SIZE(n));
    if (out == NULL)
        return NULL;
    size_t got = util_base64_encode_into(out, in, n);
    if (len)
        *len = got;
    return out;
}

/* The value of one base64url character, or -1. */
static int url_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

int util_base64url_decode(const char *in, char *out, size_t outlen)
{
    unsigned int acc = 0;
    int bits = 0;
    size_t n = 0;
    if (outlen == 0)
        return -1;
    for (const char *p = in; *p != '\0' && *p != '='; p++) {
        int v = url_value(*p);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned int)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char c = (char)((acc >> bits) & 0xFF);
            if (c == '\0' || n + 1 >= outlen)
                return -1;
            out[n++] = c;
        }
    }
    out[n] = '\0';
    return n > 0 ? 0 : -1;
}

/* The HTTP/1.1 message head of a WebSocket handshake: request (server side) and response (client
 * side), parsed in place. Pure. */
#include "ws/http.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

long ws_http_head_end(const char *buf, size_t len, size_t searched, size_t max)
{
    size_t n = len < max ? len : max;
    /* i is where a blank line would end: the earlier calls tried every i below searched. */
    for (size_t i = searched > 3 ? searched : 3; i < n; i++) {
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return (long)(i + 1);
    }
    return len >= max ? -TELO_ETOOBIG : 0;
}

static char *trim(char *s, char *end)
{
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *end = '\0';
    return s;
}

/* Splits the lines after the start line into headers. p points at the first header line. */
static int parse_headers(char *p, char *end, struct ws_http_head *h, struct telo_err *err)
{
    h->nheaders = 0;
    while (p < end) {
        char *eol = memchr(p, '\r', (size_t)(end - p));
        if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
            return telo_err_set(err, TELO_EPROTO, "http: header line not ended by CRLF");
        if (eol == p)
            return 0; /* the blank line */
        if (*p == ' ' || *p == '\t')
            return telo_err_set(err, TELO_EPROTO, "http: obsolete header line folding");
        for (char *q = p; q < eol; q++) {
            if ((unsigned char)*q < 0x20 && *q != '\t')
                return telo_err_set(err, TELO_EPROTO, "http: control character in a header");
        }
        char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL || colon == p || colon[-1] == ' ' || colon[-1] == '\t')
            return telo_err_set(err, TELO_EPROTO, "http: malformed header line");
        if (h->nheaders == WS_HTTP_MAX_HEADERS)
            return telo_err_set(err, TELO_EPROTO, "http: more than %d headers",
                                WS_HTTP_MAX_HEADERS);
        *colon = '\0';
        h->headers[h->nheaders].name = p;
        h->headers[h->nheaders].value = trim(colon + 1, eol);
        h->nheaders++;
        p = eol + 2;
    }
    return telo_err_set(err, TELO_EPROTO, "http: head not ended by a blank line");
}

/* "HTTP/1.x" at p: returns the minor version, or -1. */
static int http_version(const char *p, size_t n)
{
    if (n != 8 || memcmp(p, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)p[7]))
        return -1;
    return p[7] - '0';
}

int ws_http_parse_request(char *buf, size_t head_len, struct ws_http_head *h, struct telo_err *err)
{
    memset(h, 0, sizeof(*h));
    char *end = buf + head_len;
    char *eol = memchr(buf, '\r', head_len);
    if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
        return telo_err_set(err, TELO_EPROTO, "http: request line not ended by CRLF");
    char *sp1 = memchr(buf, ' ', (size_t)(eol - buf));
    char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (sp1 == NULL || sp2 == NULL || sp1 == buf || sp2 == sp1 + 1)
        return telo_err_set(err, TELO_EPROTO, "http: malformed request line");
    for (char *q = buf; q < sp1; q++) {
        if (!isupper((unsigned char)*q))
            return telo_err_set(err, TELO_EPROTO, "http: malformed method");
    }
    for (char *q = sp1 + 1; q < sp2; q++) {
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7F)
            return telo_err_set(err, TELO_EPROTO, "http: malformed request target");
    }
    h->minor_version = http_version(sp2 + 1, (size_t)(eol - sp2 - 1));
    if (h->minor_version < 0)
        return telo_err_set(err, TELO_EPROTO, "http: not an HTTP/1.x request");
    *sp1 = '\0';
    *sp2 = '\0';
    h->method = buf;
    h->target = sp1 + 1;
    return parse_headers(eol + 2, end, h, err);
}

int ws_http_parse_response(char *buf, size_t head_len, struct ws_http_head *h, struct telo_err *err)
{
    memset(h, 0, sizeof(*h));
    char *end = buf + head_len;
    char *eol = memchr(buf, '\r', head_len);
    if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
        return telo_err_set(err, TELO_EPROTO, "http: status line not ended by CRLF");
    if (eol - buf < 12 || buf[8] != ' ' || !isdigit((unsigned char)buf[9]) ||
        !isdigit((unsigned char)buf[10]) || !isdigit((unsigned char)buf[11]) ||
        (eol - buf > 12 && buf[12] != ' '))
        return telo_err_set(err, TELO_EPROTO, "http: malformed status line");
    h->minor_version = http_version(buf, 8);
    if (h->minor_version < 0)
        return telo_err_set(err, TELO_EPROTO, "http: not an HTTP/1.x response");
    h->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    return parse_headers(eol + 2, end, h, err);
}

const char *ws_http_header(const struct ws_http_head *h, const char *name)
{
    for (size_t i = 0; i < h->nheaders; i++) {
        if (strcasecmp(h->headers[i].name, name) == 0)
            return h->headers[i].value;
    }
    return NULL;
}

size_t ws_http_header_count(const struct ws_http_head *h, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < h->nheaders; i++)
        n += strcasecmp(h->headers[i].name, name) == 0;
    return n;
}

int ws_http_list_next(const char **list, char *out, size_t outlen)
{
    const char *p = *list;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '\0') {
            *list = p;
            return 0;
        }
        const char *start = p;
        while (*p != '\0' && *p != ',')
            p++;
        const char *e = p;
        while (e > start && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        size_t n = (size_t)(e - start);
        if (outlen > 0) {
            if (n >= outlen)
                n = outlen - 1;
            memcpy(out, start, n);
            out[n] = '\0';
        }
        *list = p;
        return 1;
    }
}

int ws_http_list_has(const char *value, const char *token)
{
    char item[256];
    if (value == NULL)
        return 0;
    while (ws_http_list_next(&value, item, sizeof(item))) {
        if (strcasecmp(item, token) == 0)
            return 1;
    }
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int ws_http_query_param(const char *query, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);
    const char *p = query;
    while (p != NULL && *p != '\0') {
        const char *amp = strchr(p, '&');
        const char *item_end = amp != NULL ? amp : p + strlen(p);
        if ((size_t)(item_end - p) >= nlen && strncmp(p, name, nlen) == 0 &&
            (p + nlen == item_end || p[nlen] == '=')) {
            const char *v = p + nlen + (p + nlen < item_end ? 1 : 0);
            size_t n = 0;
            while (v < item_end && n + 1 < outlen) {
                int c = (unsigned char)*v;
                if (c == '%' && item_end - v >= 3 && hexval(v[1]) >= 0 && hexval(v[2]) >= 0) {
                    c = hexval(v[1]) * 16 + hexval(v[2]);
                    v += 2;
                } else if (c == '+') {
                    c = ' ';
                }
                out[n++] = (char)c;
                v++;
            }
            if (outlen > 0)
                out[n] = '\0';
            return 1;
        }
        p = amp != NULL ? amp + 1 : NULL;
    }
    return 0;
}

int ws_http_path_decode(char *path)
{
    char *o = path;
    for (const char *p = path; *p != '\0'; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int hi = p[1] != '\0' ? hexval((unsigned char)p[1]) : -1;
        int lo = hi >= 0 && p[2] != '\0' ? hexval((unsigned char)p[2]) : -1;
        if (lo < 0 || (hi == 0 && lo == 0))
            return -1;
        *o++ = (char)(hi * 16 + lo);
        p += 2;
    }
    *o = '\0';
    return 0;
}

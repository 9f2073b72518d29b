/* URL building: percent-escaping of path segments and query values. */
#include "util/url.h"

#include <stdio.h>
#include <string.h>

static int unreserved(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

int url_escape(struct buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t before = out->len;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        char enc[3];
        int rc;
        if (unreserved(*p)) {
            rc = buf_append(out, p, 1);
        } else {
            enc[0] = '%';
            enc[1] = hex[*p >> 4];
            enc[2] = hex[*p & 15];
            rc = buf_append(out, enc, 3);
        }
        if (rc != 0) {
            /* All or nothing: drop what this call appended. */
            out->len = before;
            if (out->data != NULL)
                out->data[before] = '\0';
            return rc;
        }
    }
    return 0;
}

int url_query_add(struct buf *out, const char *key, const char *value)
{
    if (value == NULL)
        return 0;
    size_t before = out->len;
    const char *sep = (out->data != NULL && memchr(out->data, '?', out->len) != NULL) ? "&" : "?";
    int rc = buf_append_str(out, sep);
    if (rc == 0)
        rc = url_escape(out, key);
    if (rc == 0)
        rc = buf_append_str(out, "=");
    if (rc == 0)
        rc = url_escape(out, value);
    if (rc != 0) {
        out->len = before;
        if (out->data != NULL)
            out->data[before] = '\0';
    }
    return rc;
}

int url_query_add_long(struct buf *out, const char *key, long value)
{
    char num[32];
    snprintf(num, sizeof(num), "%ld", value);
    return url_query_add(out, key, num);
}

/* Error values: a negative code plus a message a user can act on. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int telo_err_set(struct telo_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        (void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return -code;
}

int telo_err_oom(struct telo_err *err, const char *doing)
{
    return telo_err_set(err, TELO_ENOMEM, "out of memory %s", doing);
}

int telo_err_wrap(struct telo_err *err, const char *fmt, ...)
{
    if (!err)
        return -TELO_EINVAL;
    char joined[TELO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, sizeof(joined), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t used = (size_t)n < sizeof(joined) - 1 ? (size_t)n : sizeof(joined) - 1;
    /* Truncation keeps the context and cuts the tail of the inner message. */
    const char *parts[2] = {": ", err->msg};
    for (int i = 0; i < 2; i++) {
        size_t len = strlen(parts[i]);
        size_t room = sizeof(joined) - 1 - used;
        if (len > room)
            len = room;
        memcpy(joined + used, parts[i], len);
        used += len;
    }
    joined[used] = '\0';
    memcpy(err->msg, joined, used + 1);
    return -err->code;
}

void telo_err_clear(struct telo_err *err)
{
    if (err) {
        err->code = TELO_OK;
        err->msg[0] = '\0';
    }
}

const char *telo_err_name(int code)
{
    if (code < 0)
        code = -code;
    switch (code) {
    case TELO_OK:
        return "ok";
    case TELO_EINVAL:
        return "invalid input";
    case TELO_ENOMEM:
        return "out of memory";
    case TELO_EIO:
        return "I/O error";
    case TELO_ENOTFOUND:
        return "not found";
    case TELO_ETOOBIG:
        return "too big";
    case TELO_EPROTO:
        return "protocol error";
    case TELO_ETIMEDOUT:
        return "timed out";
    case TELO_EAPI:
        return "API error";
    default:
        return "unknown error";
    }
}

/* Error values: a negative code plus a message a user can act on. */
#ifndef TELO_UTIL_ERR_H
#define TELO_UTIL_ERR_H

#include <stddef.h>

/* Codes returned (negated) by library functions. */
enum telo_errcode {
    TELO_OK = 0,
    TELO_EINVAL = 1, /* bad input: the message names the field and the fix */
    TELO_ENOMEM = 2, /* allocation failed */
    TELO_EIO = 3,    /* reading or writing a file or socket failed */
    TELO_ENOTFOUND = 4,
    TELO_ETOOBIG = 5, /* a bounded buffer or input limit was reached */
    TELO_EPROTO = 6,  /* a peer sent something we cannot parse */
    TELO_ETIMEDOUT = 7,
    TELO_EAPI = 8, /* the API server answered with an error Status */
};

#define TELO_ERR_MSG_MAX 512

/* Filled by a failing function; the caller owns it (usually on its stack). */
struct telo_err {
    int code;                   /* a telo_errcode, positive */
    char msg[TELO_ERR_MSG_MAX]; /* NUL-terminated, truncated to fit */
};

/* Sets err (if not NULL) to code and the formatted message; returns -code so callers can write
 * `return telo_err_set(err, TELO_EINVAL, "...")`. Never fails. */
int telo_err_set(struct telo_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to err's message, keeping its code; returns -err->code. For adding the
 * context a lower layer cannot know (a file name, an object reference). */
int telo_err_wrap(struct telo_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets err (if not NULL) to -TELO_ENOMEM with "out of memory DOING"; returns -TELO_ENOMEM. */
int telo_err_oom(struct telo_err *err, const char *doing);

/* Resets err to success. */
void telo_err_clear(struct telo_err *err);

/* A short name for a code ("invalid input", "out of memory", ...); never NULL. */
const char *telo_err_name(int code);

#endif

/* A growable byte buffer with a hard maximum: the one buffer type of the tree. */
#ifndef TELO_UTIL_BUF_H
#define TELO_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

/* Always NUL-terminated when len > 0 or after any append, so text can be read as a C string. */
struct buf {
    char *data; /* owned; NULL until the first append */
    size_t len; /* bytes in use, excluding the terminating NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* len never exceeds this */
};

/* Initialises b (caller-owned storage) with a maximum length of max bytes. Cannot fail. */
void buf_init(struct buf *b, size_t max);

/* Frees b's storage and resets it to empty, keeping max. Accepts a zeroed buf. */
void buf_release(struct buf *b);

/* Appends n bytes. Returns 0, -TELO_ETOOBIG if the result would exceed max, or -TELO_ENOMEM;
 * on failure b is unchanged. */
int buf_append(struct buf *b, const void *data, size_t n);

/* Appends a C string; same results as buf_append. */
int buf_append_str(struct buf *b, const char *s);

/* Appends formatted text; same results as buf_append. */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Removes the first n bytes (all if n >= len), keeping the rest. Cannot fail. */
void buf_consume(struct buf *b, size_t n);

/* Shortens b to its first len bytes (nothing happens when len >= b->len): undoes appends made
 * since b->len was len. Cannot fail. */
void buf_truncate(struct buf *b, size_t len);

/* Empties b without freeing its storage. Cannot fail. */
void buf_reset(struct buf *b);

/* Hands b's storage to the caller, who free()s it, and leaves b empty. Returns NULL when nothing
 * was ever appended. Cannot fail. */
char *buf_steal(struct buf *b);

#endif

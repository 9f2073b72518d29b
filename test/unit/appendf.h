/* A bounded strcat for building test inputs in fixed buffers (header-only; include after cmocka.h).
 */
#ifndef TELO_TEST_APPENDF_H
#define TELO_TEST_APPENDF_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends printf-style text to the NUL-terminated string in dst, a buffer of size bytes. An input
 * that outgrows its buffer fails the test here: a silently truncated input would test something
 * other than what the test says. */
static inline void test_appendf(char *dst, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void test_appendf(char *dst, size_t size, const char *fmt, ...)
{
    size_t len = strnlen(dst, size);
    assert_true(len < size);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst + len, size - len, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < size - len);
}

#endif

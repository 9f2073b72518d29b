/* What the libFuzzer targets that read text share: the input as a C string. */
#ifndef TELO_FUZZ_TEXT_H
#define TELO_FUZZ_TEXT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The input as a NUL-terminated copy (the caller free()s it), or NULL when out of memory. An
 * input holding a NUL reads as the text before it, as the parser's caller would pass it. */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text != NULL) {
        memcpy(text, data, size);
        text[size] = '\0';
    }
    return text;
}

/* Cuts text at its first newline: returns what follows it, or NULL when there is none. */
static inline char *fuzz_second_line(char *text)
{
    char *rest = strchr(text, '\n');
    if (rest != NULL)
        *rest++ = '\0';
    return rest;
}

#endif

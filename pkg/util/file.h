/* Reading a small file whole (kubeconfigs, token files, certificates), with a size bound. */
#ifndef TELO_UTIL_FILE_H
#define TELO_UTIL_FILE_H

#include <stddef.h>

/* Reads the file at path into a new NUL-terminated buffer of at most max bytes (plus the NUL),
 * stored in *out (the caller frees it) with its length in *len. Returns 0; -TELO_ENOTFOUND when
 * the file does not exist; -TELO_EIO when it cannot be opened or read; -TELO_ETOOBIG when it holds
 * more than max bytes; -TELO_ENOMEM. On failure *why (never NULL then) says why in a few words
 * (strerror's text, "file too large", "out of memory") and *out is untouched. */
int util_file_read(const char *path, size_t max, char **out, size_t *len, const char **why);

/* 1 when path names an existing file (stat succeeds), else 0. Cannot fail. */
int util_file_exists(const char *path);

#endif

/* Packs a directory into a deterministic gzip tar bundle (the inverse of build_bundle_read). */
#ifndef TELO_IMAGEBUILD_PACK_H
#define TELO_IMAGEBUILD_PACK_H

#include "util/buf.h"
#include "util/err.h"

/* What a ConfigMap can carry under binaryData after the object's own fields (1 MiB in total). */
#define BUILD_PACK_CONFIGMAP_MAX 1000000

/* Appends to out the gzip tar of every regular file and directory under dir, each path prefixed
 * with prefix and "/" (prefix "app": dir/telo.yaml becomes app/telo.yaml; NULL or "" for none).
 * The bytes depend only on the names and contents: entries sorted by name, mtime 0, owner 0:0
 * without names, mode 0755 for directories and executables and 0644 otherwise, gzip without a
 * name or time stamp; so packing the same tree twice gives the same sha256. Directories named
 * .git are left out. out's own maximum bounds the result. Returns 0, or -TELO_ENOTFOUND (dir does
 * not exist), -TELO_EINVAL (dir is not a directory, or holds a symbolic link, socket or device:
 * a bundle holds only regular files and directories; the message names the path), -TELO_EIO (a
 * file could not be read), -TELO_ETOOBIG (the archive outgrew out's maximum; the message gives
 * the size reached), -TELO_ENOMEM; out is unchanged on failure. */
int build_pack_dir(const char *dir, const char *prefix, struct buf *out, struct telo_err *err);

#endif

/* An application bundle read from gzip tar bytes into memory, size-capped and path-checked. */
#ifndef TELO_IMAGEBUILD_BUNDLE_H
#define TELO_IMAGEBUILD_BUNDLE_H

#include "util/err.h"

#include <stddef.h>

/* One regular file of the bundle. */
struct build_bundle_file {
    char *path;          /* relative, normalised ("app/telo.yaml"): no "./", "..", "//" */
    unsigned char *data; /* contents, NUL-terminated one byte past len (for text parsers) */
    size_t len;
};

/* The bundle's regular files in archive order; directories are not listed. Owns everything. */
struct build_bundle {
    struct build_bundle_file *files;
    size_t nfiles;
    size_t total; /* sum of the files' lengths */
};

/* Caps on what a bundle may hold; a zero field takes the default named in its comment. A
 * ConfigMap bundle is at most about 1 MiB compressed; URL bundles can be larger. */
struct build_bundle_limits {
    size_t max_compressed; /* gzip bytes: 64 MiB */
    size_t max_total;      /* uncompressed bytes of all files: 32 MiB */
    size_t max_file;       /* uncompressed bytes of one file: 16 MiB */
    size_t max_entries;    /* archive entries, directories included: 10000 */
    size_t max_path;       /* bytes of one path: 1024 */
};

/* Reads tgz (len bytes of gzip-compressed tar, borrowed) into *out, which the caller frees with
 * build_bundle_free. lim may be NULL for the defaults. source names the bundle in messages
 * ("ConfigMap ns/app key bundle.tgz"). Returns 0, or a negative code with *out NULL and err
 * naming the source, the entry and the problem:
 *   -TELO_EINVAL  not gzip, not a tar, a truncated or corrupt archive, an absolute path, a ".."
 *                 or empty segment, a non-UTF-8 path, a path listed twice, an entry that is
 *                 not a regular file or directory (symlink, hard link, device, FIFO), a
 *                 directory with data, a regular file named ".", or what busybox tar
 *                 (the build's extractor) would read differently: anything but zeros after the
 *                 first all-zero block, or a pax size that is not the ustar header's;
 *   -TELO_ETOOBIG a cap of lim was reached (the compressed size, a file, the total, the entry
 *                 count, a path's length, or the uncompressed tar stream: max_total plus 2 KiB
 *                 of headers per entry; zero padding after the archive's end is capped at
 *                 max_total): reading stops at the cap, so a gzip bomb costs at most max_total
 *                 bytes of memory and the time to inflate the capped stream twice (once to
 *                 check), plus the special headers libarchive reads before one entry (in 3.6,
 *                 at most 32 of 1 MiB each);
 *   -TELO_ENOMEM  out of memory. */
int build_bundle_read(const void *tgz, size_t len, const struct build_bundle_limits *lim,
                      const char *source, struct build_bundle **out, struct telo_err *err);

/* Frees b and its files. NULL is a no-op. */
void build_bundle_free(struct build_bundle *b);

/* The file at path (compared after the same normalisation as the archive's paths, so "./a"
 * finds "a"), or NULL. */
const struct build_bundle_file *build_bundle_find(const struct build_bundle *b, const char *path);

/* Checks that entry (spec.entry) names a file of b holding well-formed YAML, so a session fails
 * with a message naming the file and the line ("bundle ConfigMap ns/app: app/telo.yaml: line 3
 * column 7: mapping values are not allowed in this context") instead of at run time. source
 * prefixes messages. Returns 0, or -TELO_ENOTFOUND / -TELO_EINVAL with err filled, or
 * -TELO_ETOOBIG when collections nest deeper than 100 levels. */
int build_bundle_check_entry(const struct build_bundle *b, const char *entry, const char *source,
                             struct telo_err *err);

/* Normalises a relative bundle path into out (len bytes): strips leading "./" segments and
 * refuses absolute paths, "..", "." or empty segments inside, backslashes and control bytes.
 * Returns 0 (out holds the path; a bare "." or "./" gives ""), or -TELO_EINVAL with err saying
 * which rule the path broke ("absolute path", "'..' segment", ...), or -TELO_ETOOBIG. */
int build_bundle_path_normalise(const char *path, char *out, size_t len, struct telo_err *err);

#endif

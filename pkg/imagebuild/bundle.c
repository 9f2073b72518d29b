/* An application bundle read from gzip tar bytes into memory, size-capped and path-checked. */
#include "imagebuild/bundle.h"

#include <archive.h>
#include <archive_entry.h>
#include <yaml.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_MAX_COMPRESSED ((size_t)64 << 20)
/* What a bundle holds is in memory while the operator reads it: 32 MiB keeps a bomb's cost well
 * under the operator's memory limit, and a bundle is manifests and controller sources, not
 * node_modules (`telo install` fetches those in the build). */
#define DEFAULT_MAX_TOTAL   ((size_t)32 << 20)
#define DEFAULT_MAX_FILE    ((size_t)16 << 20)
#define DEFAULT_MAX_ENTRIES ((size_t)10000)
#define DEFAULT_MAX_PATH    ((size_t)1024)
/* What one entry may add to the uncompressed tar stream besides its file's data: its ustar
 * header, a pax or GNU long-name header with a block of records, and the padding of its data to
 * a whole block. Four blocks; bigger pax headers (macOS tar's xattrs) use what the files leave of
 * max_total. */
#define ENTRY_HEADER_ALLOWANCE ((size_t)2048)
/* The entry check's nesting limit, depkey's default budget: libyaml's stacks grow with it. */
#define ENTRY_MAX_DEPTH 100

static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t more;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            more = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            more = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            more = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + more >= n)
            return 0;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
        if ((more == 1 && cp < 0x80) || (more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return 0;
        i += more + 1;
    }
    return 1;
}

int build_bundle_path_normalise(const char *path, char *out, size_t len, struct telo_err *err)
{
    const char *p = path;
    if (p[0] == '/')
        return telo_err_set(err, TELO_EINVAL, "absolute path (bundles hold relative paths)");
    /* "./a", "././a": what `tar -C dir .` writes. */
    while (p[0] == '.' && (p[1] == '/' || p[1] == '\0')) {
        p += p[1] == '/' ? 2 : 1;
        while (p[0] == '/')
            p++;
    }
    size_t n = strlen(p);
    /* A directory entry's trailing slash. */
    while (n > 0 && p[n - 1] == '/')
        n--;
    if (n + 1 > len)
        return telo_err_set(err, TELO_ETOOBIG, "path longer than %zu bytes", len - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f)
            return telo_err_set(err, TELO_EINVAL, "control character in path");
        if (c == '\\')
            return telo_err_set(err, TELO_EINVAL, "backslash in path (use '/')");
    }
    if (!utf8_valid((const unsigned char *)p, n))
        return telo_err_set(err, TELO_EINVAL, "path is not valid UTF-8");
    size_t start = 0;
    while (start < n) {
        size_t end = start;
        while (end < n && p[end] != '/')
            end++;
        size_t seg = end - start;
        if (seg == 0)
            return telo_err_set(err, TELO_EINVAL, "empty path segment ('//')");
        if (seg == 2 && p[start] == '.' && p[start + 1] == '.')
            return telo_err_set(err, TELO_EINVAL, "'..' segment (path leaves the bundle)");
        if (seg == 1 && p[start] == '.')
            return telo_err_set(err, TELO_EINVAL, "'.' segment inside the path");
        start = end + 1;
    }
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

void build_bundle_free(struct build_bundle *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->nfiles; i++) {
        free(b->files[i].path);
        free(b->files[i].data);
    }
    free(b->files);
    free(b);
}

const struct build_bundle_file *build_bundle_find(const struct build_bundle *b, const char *path)
{
    char norm[4096];
    if (b == NULL || path == NULL || build_bundle_path_normalise(path, norm, sizeof(norm), NULL))
        return NULL;
    for (size_t i = 0; i < b->nfiles; i++)
        if (strcmp(b->files[i].path, norm) == 0)
            return &b->files[i];
    return NULL;
}

static const char *entry_kind(mode_t type)
{
    switch (type) {
    case AE_IFLNK:
        return "a symbolic link";
    case AE_IFCHR:
        return "a character device";
    case AE_IFBLK:
        return "a block device";
    case AE_IFIFO:
        return "a FIFO";
    case AE_IFSOCK:
        return "a socket";
    default:
        return "not a regular file or directory";
    }
}

/* Reads the current entry's data (the header said size bytes, or -1 when it gave no size) into
 * f, refusing to go past the caps. f->data holds len+1 bytes when this returns 0: a bundle of
 * many small files then costs its bytes plus the allocator's overhead per file, not a read
 * buffer per file (10000 one-byte files once cost 1.3 GB of address space and 683 MB resident). */
static int read_data(struct archive *a, la_int64_t size, const struct build_bundle_limits *lim,
                     struct build_bundle *b, struct build_bundle_file *f, const char *source,
                     struct telo_err *err)
{
    /* The header's size is already checked against max_file; checking it against the total too
     * means a header that claims more than the bundle may hold costs no allocation. */
    size_t cap = size > 0 ? (size_t)size : 0;
    if (cap > lim->max_total - b->total)
        return telo_err_set(err, TELO_ETOOBIG,
                            "%s: %s: bundle larger than %zu bytes once uncompressed (limit for "
                            "all files)",
                            source, f->path, lim->max_total);
    f->data = malloc(cap + 1);
    if (f->data == NULL)
        return telo_err_set(err, TELO_ENOMEM, "%s: %s: out of memory", source, f->path);
    unsigned char chunk[16384];
    for (;;) {
        la_ssize_t got = archive_read_data(a, chunk, sizeof(chunk));
        if (got < 0)
            return telo_err_set(err, TELO_EINVAL, "%s: %s: corrupt or truncated archive: %s",
                                source, f->path, archive_error_string(a));
        if (got == 0)
            break;
        if (f->len + (size_t)got > lim->max_file)
            return telo_err_set(err, TELO_ETOOBIG,
                                "%s: %s: file larger than %zu bytes once uncompressed (limit per "
                                "file)",
                                source, f->path, lim->max_file);
        if (b->total + (size_t)got > lim->max_total)
            return telo_err_set(err, TELO_ETOOBIG,
                                "%s: %s: bundle larger than %zu bytes once uncompressed (limit "
                                "for all files)",
                                source, f->path, lim->max_total);
        /* Only an entry without a size (or one whose data outruns it) grows the buffer:
         * doubling, capped at max_file, and trimmed below. */
        if (f->len + (size_t)got > cap) {
            size_t want = cap * 2 > f->len + (size_t)got ? cap * 2 : f->len + (size_t)got;
            if (want > lim->max_file)
                want = lim->max_file;
            unsigned char *d = realloc(f->data, want + 1);
            if (d == NULL)
                return telo_err_set(err, TELO_ENOMEM, "%s: %s: out of memory", source, f->path);
            f->data = d;
            cap = want;
        }
        memcpy(f->data + f->len, chunk, (size_t)got);
        f->len += (size_t)got;
        b->total += (size_t)got;
    }
    if (cap > f->len) {
        unsigned char *d = realloc(f->data, f->len + 1);
        if (d != NULL)
            f->data = d;
    }
    f->data[f->len] = '\0';
    return 0;
}

/* The decompressed tar stream read a second time, forward only and in step with the tar reader,
 * through libarchive's raw format. The build extracts bundles with busybox tar, which reads
 * headers differently from libarchive: it takes a file's size from the ustar header, never from
 * a pax record, and it steps over a single all-zero block where libarchive ends the archive. The
 * tar reader does not show the bytes it read or skipped; this stream does, so the checks below
 * can refuse what the two would read differently. */
struct raw_stream {
    struct archive *a;
    la_int64_t pos; /* bytes of the decompressed stream read so far */
};

#define TAR_BLOCK 512

/* Opens tgz (borrowed) as one raw stream. Returns 0, -TELO_EINVAL or -TELO_ENOMEM; r->a is
 * set either way (NULL only when out of memory) and freed by the caller. */
static int raw_stream_open(struct raw_stream *r, const void *tgz, size_t len)
{
    r->pos = 0;
    r->a = archive_read_new();
    if (r->a == NULL)
        return -TELO_ENOMEM;
    archive_read_support_filter_gzip(r->a);
    archive_read_support_format_raw(r->a);
    struct archive_entry *e = NULL;
    if (archive_read_open_memory(r->a, tgz, len) != ARCHIVE_OK ||
        archive_read_next_header(r->a, &e) != ARCHIVE_OK)
        return -TELO_EINVAL;
    return 0;
}

/* Reads up to n bytes into out. Returns the bytes read, fewer than n only at the end of the
 * stream, or -1 on corrupt data. */
static la_int64_t raw_stream_read(struct raw_stream *r, unsigned char *out, size_t n)
{
    size_t done = 0;
    while (done < n) {
        la_ssize_t got = archive_read_data(r->a, out + done, n - done);
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        done += (size_t)got;
        r->pos += got;
    }
    return (la_int64_t)done;
}

/* Moves the stream to offset to, which must not be behind it. Returns 0, or -1 when to is behind
 * or past the end of the stream, or the data is corrupt. */
static int raw_stream_seek(struct raw_stream *r, la_int64_t to)
{
    unsigned char chunk[16384];
    if (to < r->pos)
        return -1;
    while (r->pos < to) {
        size_t step =
            to - r->pos < (la_int64_t)sizeof(chunk) ? (size_t)(to - r->pos) : sizeof(chunk);
        if (raw_stream_read(r, chunk, step) != (la_int64_t)step)
            return -1;
    }
    return 0;
}

/* A ustar numeric field: optional leading spaces, octal digits, then spaces or NULs to the end,
 * the form both libarchive and busybox read alike. Returns the value, or -1 for anything else
 * (base-256, stray bytes), which no bundle needs. */
static la_int64_t ustar_octal(const unsigned char *field, size_t n)
{
    size_t i = 0;
    while (i < n && field[i] == ' ')
        i++;
    la_int64_t v = 0;
    for (; i < n && field[i] >= '0' && field[i] <= '7'; i++)
        v = v * 8 + (field[i] - '0');
    for (; i < n; i++)
        if (field[i] != ' ' && field[i] != '\0')
            return -1;
    return v;
}

/* Checks that the size libarchive took for entry e (whose data starts at data_at in the
 * decompressed stream) is the size in the ustar header block just before the data, the one
 * busybox tar uses: a pax `size` record that says otherwise would make the build extract other
 * files than the ones checked here. */
static int check_header_size(struct raw_stream *r, la_int64_t data_at, struct archive_entry *e,
                             const char *name, const char *source, struct telo_err *err)
{
    unsigned char block[TAR_BLOCK];
    if (raw_stream_seek(r, data_at - TAR_BLOCK) != 0 ||
        raw_stream_read(r, block, TAR_BLOCK) != TAR_BLOCK)
        return telo_err_set(err, TELO_EINVAL,
                            "%s: %s: corrupt archive (the tar header is not where libarchive read "
                            "it)",
                            source, name);
    la_int64_t ustar = ustar_octal(block + 124, 12);
    la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (ustar < 0)
        return telo_err_set(err, TELO_EINVAL,
                            "%s: %s: the tar header's size field is not an octal number (make the "
                            "archive with tar czf)",
                            source, name);
    if (ustar != size)
        return telo_err_set(err, TELO_EINVAL,
                            "%s: %s: a pax header gives the size %lld but the tar header %lld; "
                            "busybox tar, which extracts the bundle in the build, would read "
                            "other files than the ones checked here (make the archive with tar "
                            "czf)",
                            source, name, (long long)size, (long long)ustar);
    return 0;
}

/* Checks that nothing but zeros (the tar end blocks and record padding) follows end, where
 * libarchive stopped: it ends the archive at the first all-zero block, busybox tar steps over a
 * single one and extracts whatever follows. At most max_total bytes of padding are read. */
static int check_end(struct raw_stream *r, la_int64_t end, const struct build_bundle_limits *lim,
                     const char *source, struct telo_err *err)
{
    if (raw_stream_seek(r, end) != 0)
        return telo_err_set(err, TELO_EINVAL,
                            "%s: corrupt archive (the end of the tar data is not where libarchive "
                            "found it)",
                            source);
    unsigned char chunk[16384];
    la_int64_t padding = 0;
    for (;;) {
        la_int64_t got = raw_stream_read(r, chunk, sizeof(chunk));
        if (got < 0)
            return telo_err_set(err, TELO_EINVAL,
                                "%s: corrupt or truncated gzip data after the end of the tar "
                                "archive: %s",
                                source, archive_error_string(r->a));
        for (la_int64_t i = 0; i < got; i++) {
            if (chunk[i] == 0)
                continue;
            la_int64_t at = r->pos - got + i;
            return telo_err_set(err, TELO_EINVAL,
                                "%s: data after the end of the tar archive (byte %lld of the "
                                "uncompressed tar, after an all-zero block): busybox tar, "
                                "which extracts the bundle in the build, would read on where "
                                "libarchive stopped (make the archive with tar czf)",
                                source, (long long)at);
        }
        padding += got;
        if (got < (la_int64_t)sizeof(chunk))
            return 0;
        if ((size_t)padding > lim->max_total)
            return telo_err_set(err, TELO_ETOOBIG,
                                "%s: more than %zu bytes of padding after the end of the tar "
                                "archive",
                                source, lim->max_total);
    }
}

/* The most the uncompressed tar stream may hold up to the header of entry number nentries. */
static size_t stream_cap(const struct build_bundle_limits *lim, size_t nentries)
{
    if (nentries > (SIZE_MAX - lim->max_total) / ENTRY_HEADER_ALLOWANCE)
        return SIZE_MAX;
    return lim->max_total + nentries * ENTRY_HEADER_ALLOWANCE;
}

static int read_entries(struct archive *a, struct raw_stream *rs,
                        const struct build_bundle_limits *lim, struct build_bundle *b,
                        const char *source, struct telo_err *err)
{
    size_t nentries = 0, cap = 0;
    char *path = malloc(lim->max_path + 1);
    if (path == NULL)
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
    int rc = 0;
    for (;;) {
        struct archive_entry *e = NULL;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF) {
            rc = check_end(rs, archive_filter_bytes(a, 0), lim, source, err);
            break;
        }
        if (r == ARCHIVE_RETRY || r == ARCHIVE_WARN) {
            /* Unknown pax keywords and similar; the entry itself is usable. */
            if (e == NULL)
                continue;
        } else if (r != ARCHIVE_OK) {
            const char *why = archive_error_string(a);
            if (nentries == 0)
                rc = telo_err_set(err, TELO_EINVAL, "%s: not a gzip-compressed tar archive: %s",
                                  source, why ? why : "unrecognised format");
            else
                rc = telo_err_set(err, TELO_EINVAL,
                                  "%s: corrupt or truncated archive after %zu entries: %s", source,
                                  nentries, why ? why : "read error");
            break;
        }
        if (nentries == 0 && archive_filter_code(a, 0) != ARCHIVE_FILTER_GZIP) {
            rc = telo_err_set(err, TELO_EINVAL,
                              "%s: the tar archive is not gzip-compressed (make it with tar czf)",
                              source);
            break;
        }
        if (++nentries > lim->max_entries) {
            rc = telo_err_set(err, TELO_ETOOBIG, "%s: more than %zu entries in the archive", source,
                              lim->max_entries);
            break;
        }
        const char *raw = archive_entry_pathname(e);
        if (raw == NULL || raw[0] == '\0') {
            rc = telo_err_set(err, TELO_EINVAL, "%s: entry %zu has no path", source, nentries);
            break;
        }
        /* The caps on files bound only the data read here; libarchive also inflates headers and
         * data it skips, and every inflated byte is inflated again by the raw stream. */
        size_t inflate_cap = stream_cap(lim, nentries);
        la_int64_t inflated = archive_filter_bytes(a, 0);
        if (inflated > 0 && (uint64_t)inflated > inflate_cap) {
            rc = telo_err_set(err, TELO_ETOOBIG,
                              "%s: %.300s: archive larger than %zu bytes once uncompressed (the "
                              "files' limit and %zu bytes of headers per entry)",
                              source, raw, inflate_cap, ENTRY_HEADER_ALLOWANCE);
            break;
        }
        rc = check_header_size(rs, inflated, e, raw, source, err);
        if (rc != 0)
            break;
        struct telo_err perr;
        telo_err_clear(&perr);
        if (strlen(raw) > lim->max_path) {
            rc = telo_err_set(err, TELO_ETOOBIG, "%s: %.200s...: path longer than %zu bytes",
                              source, raw, lim->max_path);
            break;
        }
        rc = build_bundle_path_normalise(raw, path, lim->max_path + 1, &perr);
        if (rc != 0) {
            rc = telo_err_set(err, perr.code, "%s: %.300s: %s", source, raw, perr.msg);
            break;
        }
        mode_t type = archive_entry_filetype(e);
        if (archive_entry_hardlink(e) != NULL) {
            rc = telo_err_set(err, TELO_EINVAL,
                              "%s: %s: a hard link (bundles hold regular files and directories "
                              "only)",
                              source, raw);
            break;
        }
        /* libarchive skips the data of an entry that is not read, inflating all of it before
         * the next header and past every cap: tar czf writes directories without data, and a
         * file needs a name the build can extract it to. */
        if (type == AE_IFDIR) {
            if (archive_entry_size(e) > 0) {
                rc = telo_err_set(err, TELO_EINVAL,
                                  "%s: %s: a directory with %lld bytes of data (make the archive "
                                  "with tar czf)",
                                  source, raw, (long long)archive_entry_size(e));
                break;
            }
            continue;
        }
        if (type != AE_IFREG) {
            rc = telo_err_set(err, TELO_EINVAL,
                              "%s: %s: %s (bundles hold regular files and directories only)",
                              source, raw, entry_kind(type));
            break;
        }
        if (path[0] == '\0') {
            rc = telo_err_set(err, TELO_EINVAL,
                              "%s: %s: a regular file in the place of the bundle's root directory "
                              "(give the file a name)",
                              source, raw);
            break;
        }
        if (archive_entry_size_is_set(e) && archive_entry_size(e) > (la_int64_t)lim->max_file) {
            rc = telo_err_set(err, TELO_ETOOBIG,
                              "%s: %s: file of %lld bytes is larger than the %zu bytes allowed "
                              "per file",
                              source, path, (long long)archive_entry_size(e), lim->max_file);
            break;
        }
        for (size_t i = 0; i < b->nfiles; i++) {
            if (strcmp(b->files[i].path, path) == 0) {
                rc = telo_err_set(err, TELO_EINVAL, "%s: %s: listed twice in the archive", source,
                                  path);
                break;
            }
        }
        if (rc != 0)
            break;
        if (b->nfiles == cap) {
            size_t ncap = cap == 0 ? 16 : cap * 2;
            struct build_bundle_file *nf = realloc(b->files, ncap * sizeof(*nf));
            if (nf == NULL) {
                rc = telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
                break;
            }
            b->files = nf;
            cap = ncap;
        }
        struct build_bundle_file *f = &b->files[b->nfiles];
        memset(f, 0, sizeof(*f));
        f->path = strdup(path);
        if (f->path == NULL) {
            rc = telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
            break;
        }
        b->nfiles++;
        rc = read_data(a, archive_entry_size_is_set(e) ? archive_entry_size(e) : -1, lim, b, f,
                       source, err);
        if (rc != 0)
            break;
    }
    free(path);
    return rc;
}

int build_bundle_read(const void *tgz, size_t len, const struct build_bundle_limits *lim,
                      const char *source, struct build_bundle **out, struct telo_err *err)
{
    *out = NULL;
    struct build_bundle_limits l = {0};
    if (lim != NULL)
        l = *lim;
    if (l.max_compressed == 0)
        l.max_compressed = DEFAULT_MAX_COMPRESSED;
    if (l.max_total == 0)
        l.max_total = DEFAULT_MAX_TOTAL;
    if (l.max_file == 0)
        l.max_file = DEFAULT_MAX_FILE;
    if (l.max_entries == 0)
        l.max_entries = DEFAULT_MAX_ENTRIES;
    if (l.max_path == 0)
        l.max_path = DEFAULT_MAX_PATH;
    if (source == NULL)
        source = "bundle";

    const unsigned char *bytes = tgz;
    if (len > l.max_compressed)
        return telo_err_set(err, TELO_ETOOBIG,
                            "%s: %zu bytes compressed, more than the %zu allowed", source, len,
                            l.max_compressed);
    /* Checked before libarchive so the message says what is wrong rather than "unrecognized". */
    if (len >= 262 && memcmp(bytes + 257, "ustar", 5) == 0)
        return telo_err_set(err, TELO_EINVAL,
                            "%s: the tar archive is not gzip-compressed (make it with tar czf)",
                            source);
    if (len < 2 || bytes[0] != 0x1f || bytes[1] != 0x8b)
        return telo_err_set(err, TELO_EINVAL,
                            "%s: not gzip data (a bundle is a tar archive compressed with gzip, "
                            "as made by tar czf)",
                            source);

    struct build_bundle *b = calloc(1, sizeof(*b));
    struct archive *a = archive_read_new();
    if (b == NULL || a == NULL) {
        free(b);
        archive_read_free(a);
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
    }
    /* Only gzip and tar: the fewer decoders, the smaller the attack surface. */
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    struct raw_stream rs = {0};
    int rc;
    if (archive_read_open_memory(a, tgz, len) != ARCHIVE_OK) {
        rc = telo_err_set(err, TELO_EINVAL, "%s: not a gzip-compressed tar archive: %s", source,
                          archive_error_string(a));
    } else {
        rc = raw_stream_open(&rs, tgz, len);
        if (rc == -TELO_ENOMEM)
            rc = telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
        else if (rc != 0)
            rc = telo_err_set(err, TELO_EINVAL, "%s: not a gzip-compressed tar archive: %s", source,
                              archive_error_string(rs.a));
        else
            rc = read_entries(a, &rs, &l, b, source, err);
    }
    archive_read_free(rs.a);
    archive_read_free(a);
    if (rc != 0) {
        build_bundle_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

int build_bundle_check_entry(const struct build_bundle *b, const char *entry, const char *source,
                             struct telo_err *err)
{
    if (source == NULL)
        source = "bundle";
    const struct build_bundle_file *f = build_bundle_find(b, entry);
    if (f == NULL)
        return telo_err_set(err, TELO_ENOTFOUND,
                            "%s: the entry file %s (spec.entry) is not in the bundle", source,
                            entry);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
    yaml_parser_set_input_string(&p, f->data, f->len);
    int rc = 0;
    size_t depth = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = telo_err_set(err, TELO_EINVAL, "%s: %s: line %zu column %zu: %s", source, f->path,
                              p.problem_mark.line + 1, p.problem_mark.column + 1,
                              p.problem ? p.problem : "malformed YAML");
            break;
        }
        int end = ev.type == YAML_STREAM_END_EVENT;
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT)
            depth++;
        else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT)
            depth--;
        if (depth > ENTRY_MAX_DEPTH)
            rc = telo_err_set(err, TELO_ETOOBIG,
                              "%s: %s: line %zu column %zu: collections nested deeper than %d "
                              "levels (the limit)",
                              source, f->path, ev.start_mark.line + 1, ev.start_mark.column + 1,
                              ENTRY_MAX_DEPTH);
        yaml_event_delete(&ev);
        if (end || rc != 0)
            break;
    }
    yaml_parser_delete(&p);
    return rc;
}

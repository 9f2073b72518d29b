/* Tests for pkg/imagebuild/bundle.c: reading gzip tar bundles, the caps, and every bad archive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "build_tgz.h"
#include "imagebuild/bundle.h"
#include "util/err.h"

#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Reads entries as a bundle; returns the code and leaves the message in err. */
static int read_entries(const struct tgz_entry *e, size_t n, const struct build_bundle_limits *lim,
                        struct build_bundle **out, struct telo_err *err)
{
    size_t len;
    unsigned char *tgz = tgz_make(e, n, &len);
    telo_err_clear(err);
    int rc = build_bundle_read(tgz, len, lim, "ConfigMap demo/app", out, err);
    free(tgz);
    return rc;
}

static void reads_files_and_normalises_paths(void **state)
{
    (void)state;
    struct tgz_entry e[] = {
        {.path = "./", .type = 'd'},
        {.path = "./app/", .type = 'd'},
        {.path = "./app/telo.yaml", .data = "kind: Telo.Application\n"},
        {.path = "lib/empty.yaml", .data = ""},
    };
    struct build_bundle *b = NULL;
    struct telo_err err;
    assert_int_equal(read_entries(e, N(e), NULL, &b, &err), 0);
    assert_non_null(b);
    assert_int_equal(b->nfiles, 2);
    assert_string_equal(b->files[0].path, "app/telo.yaml");
    assert_string_equal((const char *)b->files[0].data, "kind: Telo.Application\n");
    assert_int_equal(b->files[1].len, 0);
    assert_string_equal((const char *)b->files[1].data, "");
    assert_int_equal(b->total, strlen("kind: Telo.Application\n"));
    assert_ptr_equal(build_bundle_find(b, "./app/telo.yaml"), &b->files[0]);
    assert_null(build_bundle_find(b, "app/missing.yaml"));
    assert_null(build_bundle_find(b, "../app/telo.yaml"));
    build_bundle_free(b);
    build_bundle_free(NULL);
}

static void path_rules(void **state)
{
    (void)state;
    char out[64];
    struct telo_err err;
    assert_int_equal(build_bundle_path_normalise("././a/b.yaml", out, sizeof(out), &err), 0);
    assert_string_equal(out, "a/b.yaml");
    assert_int_equal(build_bundle_path_normalise("dir/", out, sizeof(out), &err), 0);
    assert_string_equal(out, "dir");
    assert_int_equal(build_bundle_path_normalise(".", out, sizeof(out), &err), 0);
    assert_string_equal(out, "");
    assert_int_equal(build_bundle_path_normalise("caf\xc3\xa9.yaml", out, sizeof(out), &err), 0);
    const struct {
        const char *path, *why;
    } bad[] = {
        {"/etc/passwd", "absolute path"}, {"../x", "'..' segment"},
        {"a/../../x", "'..' segment"},    {"a//b", "empty path segment"},
        {"a/./b", "'.' segment"},         {"a\\b", "backslash"},
        {"a\nb", "control character"},    {"\xff\xfe", "not valid UTF-8"},
        {"\xc0\xaf", "not valid UTF-8"}, /* overlong '/' */
    };
    for (size_t i = 0; i < N(bad); i++) {
        telo_err_clear(&err);
        assert_int_equal(build_bundle_path_normalise(bad[i].path, out, sizeof(out), &err),
                         -TELO_EINVAL);
        assert_non_null(strstr(err.msg, bad[i].why));
    }
    assert_int_equal(build_bundle_path_normalise("0123456789012345678901234567890123456789"
                                                 "0123456789012345678901234567890123456789",
                                                 out, sizeof(out), &err),
                     -TELO_ETOOBIG);
}

static void refuses_bad_entries(void **state)
{
    (void)state;
    const struct {
        struct tgz_entry entry;
        int code;
        const char *msg;
    } cases[] = {
        {{.path = "../x", .data = "x"},
         -TELO_EINVAL,
         "ConfigMap demo/app: ../x: '..' segment (path leaves the bundle)"},
        {{.path = "/etc/x", .data = "x"},
         -TELO_EINVAL,
         "ConfigMap demo/app: /etc/x: absolute path (bundles hold relative paths)"},
        {{.path = "app/link", .type = 'l', .link = "/etc/passwd"},
         -TELO_EINVAL,
         "ConfigMap demo/app: app/link: a symbolic link (bundles hold regular files and "
         "directories only)"},
        {{.path = "app/hard", .type = 'h', .link = "app/telo.yaml"},
         -TELO_EINVAL,
         "ConfigMap demo/app: app/hard: a hard link (bundles hold regular files and directories "
         "only)"},
        {{.path = "dev/tty", .type = 'c'},
         -TELO_EINVAL,
         "ConfigMap demo/app: dev/tty: a character device (bundles hold regular files and "
         "directories only)"},
        {{.path = "app/telo.yaml", .data = "again"},
         -TELO_EINVAL,
         "ConfigMap demo/app: app/telo.yaml: listed twice in the archive"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        struct tgz_entry e[] = {{.path = "app/telo.yaml", .data = "kind: x\n"}, cases[i].entry};
        struct build_bundle *b = (struct build_bundle *)1;
        struct telo_err err;
        assert_int_equal(read_entries(e, N(e), NULL, &b, &err), cases[i].code);
        assert_null(b);
        assert_string_equal(err.msg, cases[i].msg);
    }
}

static void refuses_what_is_not_a_gzip_tar(void **state)
{
    (void)state;
    struct build_bundle *b = NULL;
    struct telo_err err;
    const char text[] = "kind: Telo.Application\n";
    assert_int_equal(
        build_bundle_read(text, sizeof(text) - 1, NULL, "ConfigMap demo/app", &b, &err),
        -TELO_EINVAL);
    assert_string_equal(err.msg, "ConfigMap demo/app: not gzip data (a bundle is a tar archive "
                                 "compressed with gzip, as made by tar czf)");
    assert_int_equal(build_bundle_read(text, 0, NULL, NULL, &b, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "bundle: not gzip data"));

    /* A bare tar: the init container runs tar xzf, so it would fail there. */
    struct tgz_entry e[] = {{.path = "a.yaml", .data = "a: 1\n"}};
    size_t len;
    unsigned char *tar = tgz_make_opt(e, 1, 0, &len);
    assert_int_equal(build_bundle_read(tar, len, NULL, "u", &b, &err), -TELO_EINVAL);
    assert_string_equal(err.msg,
                        "u: the tar archive is not gzip-compressed (make it with tar czf)");
    free(tar);

    /* gzip of something that is not a tar. */
    static const unsigned char gz_text[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                            0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0xe7, 0x02, 0x00,
                                            0x20, 0x30, 0x3a, 0x36, 0x06, 0x00, 0x00, 0x00};
    assert_int_equal(build_bundle_read(gz_text, sizeof(gz_text), NULL, "u", &b, &err),
                     -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "u: not a gzip-compressed tar archive: "));

    /* A truncated archive: the first half of a good one. */
    struct tgz_entry big[] = {{.path = "a.bin", .data = NULL, .len = 1 << 20}};
    unsigned char *tgz = tgz_make(big, 1, &len);
    assert_int_equal(build_bundle_read(tgz, len / 2, NULL, "u", &b, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "u: a.bin: corrupt or truncated archive: "));
    free(tgz);
    assert_null(b);
}

static void caps_stop_bombs(void **state)
{
    (void)state;
    struct build_bundle *b = NULL;
    struct telo_err err;

    /* 50 MiB of zeros: about 50 KiB of gzip. The per-file cap stops it before it is read. */
    struct tgz_entry bomb[] = {{.path = "bomb.bin", .data = NULL, .len = 50u << 20}};
    size_t len;
    unsigned char *tgz = tgz_make(bomb, 1, &len);
    assert_true(len < 200u << 10);
    clock_t t0 = clock();
    assert_int_equal(build_bundle_read(tgz, len, NULL, "u", &b, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "u: bomb.bin: file of 52428800 bytes is larger than the 16777216 "
                                 "bytes allowed per file");
    /* A header that lies about the size (or a size-less pax entry) is caught while reading. */
    struct build_bundle_limits lim = {.max_total = 1u << 20};
    struct tgz_entry two[] = {{.path = "a.bin", .data = NULL, .len = 700u << 10},
                              {.path = "b.bin", .data = NULL, .len = 700u << 10}};
    free(tgz);
    tgz = tgz_make(two, 2, &len);
    assert_int_equal(build_bundle_read(tgz, len, &lim, "u", &b, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "u: b.bin: bundle larger than 1048576 bytes once uncompressed "
                                 "(limit for all files)");
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    assert_true(secs < 5.0);
    free(tgz);

    /* The compressed size, the entry count, a path's length. */
    struct tgz_entry small[] = {
        {.path = "a", .data = "1"}, {.path = "b", .data = "2"}, {.path = "c", .data = "3"}};
    tgz = tgz_make(small, 3, &len);
    struct build_bundle_limits lim2 = {.max_compressed = 10};
    assert_int_equal(build_bundle_read(tgz, len, &lim2, "u", &b, &err), -TELO_ETOOBIG);
    assert_non_null(strstr(err.msg, "compressed, more than the 10 allowed"));
    struct build_bundle_limits lim3 = {.max_entries = 2};
    assert_int_equal(build_bundle_read(tgz, len, &lim3, "u", &b, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "u: more than 2 entries in the archive");
    free(tgz);
    struct tgz_entry longpath[] = {
        {.path = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", .data = "1"}};
    tgz = tgz_make(longpath, 1, &len);
    struct build_bundle_limits lim4 = {.max_path = 16};
    assert_int_equal(build_bundle_read(tgz, len, &lim4, "u", &b, &err), -TELO_ETOOBIG);
    assert_non_null(strstr(err.msg, "path longer than 16 bytes"));
    struct build_bundle_limits lim5 = {.max_file = 1};
    struct tgz_entry two_bytes[] = {{.path = "a", .data = "12"}};
    free(tgz);
    tgz = tgz_make(two_bytes, 1, &len);
    assert_int_equal(build_bundle_read(tgz, len, &lim5, "u", &b, &err), -TELO_ETOOBIG);
    free(tgz);
    assert_null(b);
}

/* The review's input: 10000 one-byte files, 84 KB of gzip that fits a ConfigMap, once held 128 KiB
 * of read buffer per file (683 MB resident, past the chart's 256Mi limit). What the bundle holds
 * must be its bytes plus a small constant per file: the data, the path and the file's slot in
 * the array (which doubles, so up to two slots per file). */
static void many_small_files_cost_their_bytes(void **state)
{
    (void)state;
    enum { NFILES = 10000, PER_FILE = 128 };
    struct tgz_entry *e = calloc(NFILES, sizeof(*e));
    char(*names)[16] = calloc(NFILES, sizeof(*names));
    assert_non_null(e);
    assert_non_null(names);
    for (size_t i = 0; i < NFILES; i++) {
        snprintf(names[i], sizeof(names[i]), "f/%05zu", i);
        e[i] = (struct tgz_entry){.path = names[i], .data = "x"};
    }
    size_t len;
    unsigned char *tgz = tgz_make(e, NFILES, &len);
    assert_true(len < 1u << 20);
    struct build_bundle *b = NULL;
    struct telo_err err;
    telo_err_clear(&err);
    assert_int_equal(build_bundle_read(tgz, len, NULL, "u", &b, &err), 0);
    assert_int_equal(b->nfiles, NFILES);
    assert_int_equal(b->total, NFILES);
    size_t held = malloc_usable_size(b->files);
    for (size_t i = 0; i < b->nfiles; i++)
        held += malloc_usable_size(b->files[i].data) + malloc_usable_size(b->files[i].path);
    assert_true(held <= b->total + (size_t)NFILES * PER_FILE);
    build_bundle_free(b);
    free(tgz);
    free(names);
    free(e);
}

/* Archives written byte by byte, for what libarchive's writer will not make. */
struct tar_bytes {
    unsigned char *p;
    size_t len;
};

/* Appends a ustar header: typeflag type, size in its size field, link target link (or NULL). */
static void tar_header(struct tar_bytes *t, const char *name, char type, size_t size,
                       const char *link)
{
    t->p = realloc(t->p, t->len + 512);
    assert_non_null(t->p);
    char *h = (char *)t->p + t->len;
    memset(h, 0, 512);
    memcpy(h, name, strlen(name) + 1);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf(h + 124, 12, "%011zo", size);
    memcpy(h + 136, "00000000000", 12);
    memset(h + 148, ' ', 8);
    h[156] = type;
    if (link != NULL)
        memcpy(h + 157, link, strlen(link) + 1);
    memcpy(h + 257, "ustar", 6);
    h[263] = h[264] = '0';
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    t->len += 512;
}

/* Appends len bytes of data (zeros when data is NULL), padded to a whole block. */
static void tar_data(struct tar_bytes *t, const char *data, size_t len)
{
    size_t padded = (len + 511) / 512 * 512;
    t->p = realloc(t->p, t->len + padded);
    assert_non_null(t->p);
    memset(t->p + t->len, 0, padded);
    if (data != NULL)
        memcpy(t->p + t->len, data, len);
    t->len += padded;
}

static void tar_file(struct tar_bytes *t, const char *name, const char *data)
{
    tar_header(t, name, '0', strlen(data), NULL);
    tar_data(t, data, strlen(data));
}

/* gzip of t's bytes; the caller frees it. */
static unsigned char *tar_gzip(const struct tar_bytes *t, size_t *len)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, (uLong)t->len);
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    z.next_in = t->p;
    z.avail_in = (uInt)t->len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *len = z.total_out;
    deflateEnd(&z);
    return out;
}

static int read_tar_bytes(const struct tar_bytes *t, const struct build_bundle_limits *lim,
                          struct build_bundle **out, struct telo_err *err)
{
    size_t len;
    unsigned char *tgz = tar_gzip(t, &len);
    telo_err_clear(err);
    int rc = build_bundle_read(tgz, len, lim, "ConfigMap demo/app", out, err);
    free(tgz);
    return rc;
}

#define APP_YAML "kind: Telo.Application\nmetadata:\n  name: harmless\n"

/* libarchive ends an archive at its first all-zero block; busybox tar, which extracts bundles in
 * the build, steps over one and reads on. The review's input: this one read as a single
 * app.yaml, and busybox extracted the symbolic link, the hard link and the file behind it. */
static void refuses_data_after_the_end_block(void **state)
{
    (void)state;
    struct tar_bytes t = {0};
    tar_file(&t, "app.yaml", APP_YAML);
    tar_data(&t, NULL, 512);
    tar_header(&t, "link", '2', 0, "/kaniko/.docker/config.json");
    tar_header(&t, "hard", '1', 0, "app.yaml");
    tar_header(&t, "big.bin", '0', 1u << 20, NULL);
    tar_data(&t, NULL, 1u << 20);
    tar_data(&t, NULL, 1024);
    struct build_bundle *b = (struct build_bundle *)1;
    struct telo_err err;
    assert_int_equal(read_tar_bytes(&t, NULL, &b, &err), -TELO_EINVAL);
    assert_null(b);
    assert_string_equal(err.msg, "ConfigMap demo/app: data after the end of the tar archive (byte "
                                 "1536 of the uncompressed tar, after an all-zero block): busybox "
                                 "tar, which extracts the bundle in the build, would read on where "
                                 "libarchive stopped (make the archive with tar czf)");

    /* Zeros after the end, as tar pads its last record, are fine. */
    t.len = 1024;
    tar_data(&t, NULL, 10240);
    assert_int_equal(read_tar_bytes(&t, NULL, &b, &err), 0);
    assert_int_equal(b->nfiles, 1);
    build_bundle_free(b);
    free(t.p);
}

/* libarchive takes a file's size from a pax `size` record, busybox tar from the ustar header. The
 * review's input: "pad" is empty for libarchive, which then reads the harmless app.yaml and the
 * end blocks; for busybox they are pad's data, and it extracts the evil app.yaml and a link. */
static void refuses_a_pax_size_the_tar_header_does_not_give(void **state)
{
    (void)state;
    struct tar_bytes inner = {0};
    tar_file(&inner, "app.yaml", APP_YAML);
    tar_data(&inner, NULL, 1024);
    struct tar_bytes t = {0};
    tar_header(&t, "PaxHeader/pad", 'x', 9, NULL);
    tar_data(&t, "9 size=0\n", 9);
    tar_header(&t, "pad", '0', inner.len, NULL);
    tar_data(&t, (const char *)inner.p, inner.len);
    tar_file(&t, "app.yaml", "kind: Telo.Application\nimports: {Evil: evil/pkg@1}\n");
    tar_header(&t, "link", '2', 0, "/kaniko/.docker/config.json");
    tar_data(&t, NULL, 1024);
    struct build_bundle *b = (struct build_bundle *)1;
    struct telo_err err;
    assert_int_equal(read_tar_bytes(&t, NULL, &b, &err), -TELO_EINVAL);
    assert_null(b);
    assert_string_equal(err.msg, "ConfigMap demo/app: pad: a pax header gives the size 0 but the "
                                 "tar header 2048; busybox tar, which extracts the bundle in the "
                                 "build, would read other files than the ones checked here (make "
                                 "the archive with tar czf)");

    /* A pax size that agrees with the tar header is read as usual. */
    free(t.p);
    t = (struct tar_bytes){0};
    tar_header(&t, "PaxHeader/app.yaml", 'x', 10, NULL);
    tar_data(&t, "10 size=4\n", 10);
    tar_file(&t, "app.yaml", "a: 1");
    tar_data(&t, NULL, 1024);
    assert_int_equal(read_tar_bytes(&t, NULL, &b, &err), 0);
    assert_int_equal(b->nfiles, 1);
    assert_string_equal((const char *)b->files[0].data, "a: 1");
    build_bundle_free(b);
    free(t.p);
    free(inner.p);
}

/* A regular file named "." has no name to read it under, and libarchive skipped its data
 * unread: the audit's 1 GiB of zeros (1 MB of gzip) took 4.6 s of the event loop, past every
 * cap. */
static void refuses_a_file_without_a_name(void **state)
{
    (void)state;
    struct build_bundle_limits lim = {.max_total = 1u << 20, .max_file = 1u << 20};
    const struct {
        const char *path;
        const char *msg;
    } cases[] = {
        {".", "ConfigMap demo/app: .: a regular file in the place of the bundle's root directory "
              "(give the file a name)"},
        /* libarchive reads a regular file whose name ends in '/' as a directory. */
        {"././", "ConfigMap demo/app: ././: a directory with 2097152 bytes of data (make the "
                 "archive with tar czf)"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        struct tgz_entry e[] = {{.path = cases[i].path, .data = NULL, .len = 2u << 20},
                                {.path = "app/telo.yaml", .data = "kind: x\n"}};
        struct build_bundle *b = (struct build_bundle *)1;
        struct telo_err err;
        assert_int_equal(read_entries(e, N(e), &lim, &b, &err), -TELO_EINVAL);
        assert_null(b);
        assert_string_equal(err.msg, cases[i].msg);
    }
}

/* Appends a pax header holding one comment record of len bytes (at most 1 MiB, libarchive's
 * limit), which libarchive reads and ignores. */
static void tar_pax_comment(struct tar_bytes *t, size_t len)
{
    char *rec = malloc(len);
    assert_non_null(rec);
    int head = snprintf(rec, len, "%zu comment=", len);
    memset(rec + head, 'a', len - (size_t)head - 1);
    rec[len - 1] = '\n';
    tar_header(t, "PaxHeader/x", 'x', len, NULL);
    tar_data(t, rec, len);
    free(rec);
}

/* What libarchive inflates and never hands over counts too: the data of a directory (a GNU
 * dumpdir, 'D') it skips, and pax headers, which the two passes once inflated without bound. */
static void caps_what_is_inflated_besides_files(void **state)
{
    (void)state;
    struct build_bundle_limits lim = {.max_total = 1u << 20, .max_file = 1u << 20};
    struct tar_bytes t = {0};
    tar_header(&t, "d/", 'D', 2u << 20, NULL);
    tar_data(&t, NULL, 2u << 20);
    tar_file(&t, "app.yaml", APP_YAML);
    tar_data(&t, NULL, 1024);
    struct build_bundle *b = (struct build_bundle *)1;
    struct telo_err err;
    assert_int_equal(read_tar_bytes(&t, &lim, &b, &err), -TELO_EINVAL);
    assert_null(b);
    assert_string_equal(err.msg, "ConfigMap demo/app: d/: a directory with 2097152 bytes of data "
                                 "(make the archive with tar czf)");
    free(t.p);

    /* 1 MB of pax comment before each of 8 small files: 8 MB inflated twice for 8 bytes. */
    t = (struct tar_bytes){0};
    for (int i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof(name), "f%d", i);
        tar_pax_comment(&t, 1000000);
        tar_file(&t, name, "x");
    }
    tar_data(&t, NULL, 1024);
    assert_int_equal(read_tar_bytes(&t, &lim, &b, &err), -TELO_ETOOBIG);
    assert_null(b);
    assert_string_equal(err.msg, "ConfigMap demo/app: f1: archive larger than 1052672 bytes once "
                                 "uncompressed (the files' limit and 2048 bytes of headers per "
                                 "entry)");

    /* The same headers fit when the files leave room for them. */
    lim.max_total = 10u << 20;
    assert_int_equal(read_tar_bytes(&t, &lim, &b, &err), 0);
    assert_int_equal(b->nfiles, 8);
    build_bundle_free(b);
    free(t.p);
}

static void checks_the_entry_file(void **state)
{
    (void)state;
    struct tgz_entry e[] = {
        {.path = "app/telo.yaml", .data = "kind: Telo.Application\nmetadata:\n  name: a\n"},
        {.path = "app/broken.yaml", .data = "kind: Telo.Application\nmetadata: name: a\n"},
        {.path = "app/anchors.yaml", .data = "a: &x 1\nb: *x\n"},
    };
    struct build_bundle *b = NULL;
    struct telo_err err;
    assert_int_equal(read_entries(e, N(e), NULL, &b, &err), 0);
    assert_int_equal(build_bundle_check_entry(b, "app/telo.yaml", "bundle", &err), 0);
    assert_int_equal(build_bundle_check_entry(b, "./app/anchors.yaml", "bundle", &err), 0);
    assert_int_equal(build_bundle_check_entry(b, "app/broken.yaml", "ConfigMap demo/app", &err),
                     -TELO_EINVAL);
    assert_string_equal(err.msg, "ConfigMap demo/app: app/broken.yaml: line 2 column 15: mapping "
                                 "values are not allowed in this context");
    assert_int_equal(build_bundle_check_entry(b, "app/none.yaml", "ConfigMap demo/app", &err),
                     -TELO_ENOTFOUND);
    assert_string_equal(err.msg, "ConfigMap demo/app: the entry file app/none.yaml (spec.entry) is "
                                 "not in the bundle");
    build_bundle_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_files_and_normalises_paths),
        cmocka_unit_test(path_rules),
        cmocka_unit_test(refuses_bad_entries),
        cmocka_unit_test(refuses_what_is_not_a_gzip_tar),
        cmocka_unit_test(caps_stop_bombs),
        cmocka_unit_test(many_small_files_cost_their_bytes),
        cmocka_unit_test(refuses_data_after_the_end_block),
        cmocka_unit_test(refuses_a_pax_size_the_tar_header_does_not_give),
        cmocka_unit_test(refuses_a_file_without_a_name),
        cmocka_unit_test(caps_what_is_inflated_besides_files),
        cmocka_unit_test(checks_the_entry_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

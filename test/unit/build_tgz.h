/* Test helper: gzip tar archives made in memory with libarchive's writer, good and bad. */
#ifndef TELO_TEST_BUILD_TGZ_H
#define TELO_TEST_BUILD_TGZ_H

#include <archive.h>
#include <archive_entry.h>

#include <stdlib.h>
#include <string.h>

/* One archive entry. type: 'f' regular file (default), 'd' directory, 'l' symbolic link to link,
 * 'h' hard link to link, 'c' character device. data NULL with len > 0 writes len zero bytes. */
struct tgz_entry {
    const char *path;
    const char *data;
    size_t len; /* 0: strlen(data) */
    char type;
    const char *link;
};

/* Returns the archive (the caller frees it) and its length in *len; gzip 0 leaves it a bare
 * tar. Aborts the test binary on a libarchive failure. */
static unsigned char *tgz_make_opt(const struct tgz_entry *e, size_t n, int gzip, size_t *len)
{
    size_t cap = 64u << 20;
    unsigned char *out = malloc(cap);
    struct archive *a = archive_write_new();
    if (out == NULL || a == NULL)
        abort();
    archive_write_set_format_pax_restricted(a);
    if (gzip)
        archive_write_add_filter_gzip(a);
    archive_write_set_bytes_in_last_block(a, 1);
    size_t used = 0;
    if (archive_write_open_memory(a, out, cap, &used) != ARCHIVE_OK)
        abort();
    static char zeros[1 << 16];
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].path);
        archive_entry_set_mtime(ae, 0, 0);
        size_t dlen = e[i].len ? e[i].len : (e[i].data ? strlen(e[i].data) : 0);
        switch (e[i].type) {
        case 'd':
            archive_entry_set_filetype(ae, AE_IFDIR);
            archive_entry_set_perm(ae, 0755);
            dlen = 0;
            break;
        case 'l':
            archive_entry_set_filetype(ae, AE_IFLNK);
            archive_entry_set_symlink(ae, e[i].link);
            archive_entry_set_perm(ae, 0777);
            dlen = 0;
            break;
        case 'h':
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_hardlink(ae, e[i].link);
            archive_entry_set_perm(ae, 0644);
            dlen = 0;
            break;
        case 'c':
            archive_entry_set_filetype(ae, AE_IFCHR);
            archive_entry_set_rdev(ae, 0x0103);
            archive_entry_set_perm(ae, 0644);
            dlen = 0;
            break;
        default:
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_perm(ae, 0644);
        }
        archive_entry_set_size(ae, (la_int64_t)dlen);
        if (archive_write_header(a, ae) != ARCHIVE_OK)
            abort();
        if (e[i].data != NULL) {
            archive_write_data(a, e[i].data, dlen);
        } else {
            for (size_t done = 0; done < dlen;) {
                size_t step = dlen - done < sizeof(zeros) ? dlen - done : sizeof(zeros);
                archive_write_data(a, zeros, step);
                done += step;
            }
        }
        archive_entry_free(ae);
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        abort();
    archive_write_free(a);
    *len = used;
    return out;
}

static unsigned char *tgz_make(const struct tgz_entry *e, size_t n, size_t *len)
{
    return tgz_make_opt(e, n, 1, len);
}

#endif

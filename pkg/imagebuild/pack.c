/* Packs a directory into a deterministic gzip tar bundle (the inverse of build_bundle_read). */
#include "imagebuild/pack.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_MAX_BYTES 1024 /* build_bundle_read's default cap on one path */

struct packer {
    struct archive *a;
    struct buf *out;
    int overflow; /* the archive outgrew out's maximum */
    size_t attempted;
    const char *dir;
    struct telo_err *err;
};

static la_ssize_t write_cb(struct archive *a, void *ud, const void *data, size_t len)
{
    (void)a;
    struct packer *p = ud;
    p->attempted += len;
    if (p->overflow || buf_append(p->out, data, len) != 0) {
        p->overflow = 1;
        return -1;
    }
    return (la_ssize_t)len;
}

static int cmp_names(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The sorted names in path (without "." and ".."), or NULL with err filled. */
static char **sorted_names(struct packer *p, const char *path, size_t *n)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        telo_err_set(p->err, TELO_EIO, "%s: cannot list: %s", path, strerror(errno));
        return NULL;
    }
    char **names = NULL;
    size_t len = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (len == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = realloc(names, cap * sizeof(*names));
            if (grown == NULL)
                goto nomem;
            names = grown;
        }
        if ((names[len] = strdup(e->d_name)) == NULL)
            goto nomem;
        len++;
    }
    closedir(d);
    if (len > 1)
        qsort(names, len, sizeof(*names), cmp_names);
    *n = len;
    if (names == NULL)
        names = calloc(1, sizeof(*names)); /* an empty directory still needs a non-NULL list */
    if (names == NULL)
        telo_err_set(p->err, TELO_ENOMEM, "out of memory listing %s", path);
    return names;
nomem:
    closedir(d);
    for (size_t i = 0; i < len; i++)
        free(names[i]);
    free(names);
    telo_err_set(p->err, TELO_ENOMEM, "out of memory listing %s", path);
    return NULL;
}

static int write_header(struct packer *p, const char *name, const struct stat *st, int is_dir)
{
    struct archive_entry *e = archive_entry_new();
    if (e == NULL)
        return telo_err_set(p->err, TELO_ENOMEM, "out of memory");
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, is_dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, is_dir || (st->st_mode & S_IXUSR) ? 0755 : 0644);
    archive_entry_set_size(e, is_dir ? 0 : st->st_size);
    archive_entry_set_mtime(e, 0, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    int rc = archive_write_header(p->a, e);
    archive_entry_free(e);
    if (rc != ARCHIVE_OK)
        return p->overflow
                   ? -TELO_ETOOBIG
                   : telo_err_set(p->err, TELO_EIO, "%s: %s", name, archive_error_string(p->a));
    return 0;
}

static int write_file(struct packer *p, const char *path, const char *name, const struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return telo_err_set(p->err, TELO_EIO, "%s: cannot read: %s", path, strerror(errno));
    int rc = write_header(p, name, st, 0);
    char chunk[65536];
    off_t left = st->st_size;
    while (rc == 0 && left > 0) {
        ssize_t got = read(fd, chunk, sizeof(chunk));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rc = telo_err_set(p->err, TELO_EIO, "%s: %s while reading", path,
                              got < 0 ? strerror(errno) : "the file shrank");
            break;
        }
        if (got > left)
            got = (ssize_t)left; /* the file grew: the header already promised st_size */
        if (archive_write_data(p->a, chunk, (size_t)got) != got)
            rc = p->overflow
                     ? -TELO_ETOOBIG
                     : telo_err_set(p->err, TELO_EIO, "%s: %s", name, archive_error_string(p->a));
        left -= got;
    }
    close(fd);
    return rc;
}

/* Packs the tree at path (a directory) whose archive name is name ("" for the top without a
 * prefix). */
static int pack_tree(struct packer *p, const char *path, const char *name, int depth)
{
    if (depth > 64)
        return telo_err_set(p->err, TELO_EINVAL, "%s: directories nested more than 64 deep", path);
    size_t n = 0;
    char **names = sorted_names(p, path, &n);
    if (names == NULL)
        return -p->err->code;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char child[PATH_MAX_BYTES * 2], child_name[PATH_MAX_BYTES + 1];
        int a = snprintf(child, sizeof(child), "%s/%s", path, names[i]);
        int b =
            snprintf(child_name, sizeof(child_name), "%s%s%s", name, name[0] ? "/" : "", names[i]);
        if (a < 0 || (size_t)a >= sizeof(child) || b < 0 || (size_t)b >= sizeof(child_name)) {
            rc = telo_err_set(p->err, TELO_EINVAL, "%s/%s: path longer than %d bytes", path,
                              names[i], PATH_MAX_BYTES);
            break;
        }
        struct stat st;
        if (lstat(child, &st) != 0) {
            rc = telo_err_set(p->err, TELO_EIO, "%s: %s", child, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            if (strcmp(names[i], ".git") == 0)
                continue;
            rc = write_header(p, child_name, &st, 1);
            if (rc == 0)
                rc = pack_tree(p, child, child_name, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            rc = write_file(p, child, child_name, &st);
        } else {
            rc = telo_err_set(p->err, TELO_EINVAL,
                              "%s is a %s: a bundle holds only regular files and directories "
                              "(copy the target in, or remove it)",
                              child, S_ISLNK(st.st_mode) ? "symbolic link" : "special file");
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int build_pack_dir(const char *dir, const char *prefix, struct buf *out, struct telo_err *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return telo_err_set(err, errno == ENOENT ? TELO_ENOTFOUND : TELO_EIO, "%s: %s", dir,
                            strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return telo_err_set(err, TELO_EINVAL, "%s is not a directory", dir);
    if (prefix == NULL)
        prefix = "";

    size_t before = out->len;
    struct packer p = {.out = out, .dir = dir, .err = err};
    p.a = archive_write_new();
    if (p.a == NULL)
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    int rc = 0;
    /* GNU tar headers hold long names; gzip without the time stamp keeps the bytes stable. */
    if (archive_write_set_format_gnutar(p.a) != ARCHIVE_OK ||
        archive_write_add_filter_gzip(p.a) != ARCHIVE_OK ||
        archive_write_set_filter_option(p.a, "gzip", "timestamp", NULL) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(p.a, 1) != ARCHIVE_OK ||
        archive_write_open2(p.a, &p, NULL, write_cb, NULL, NULL) != ARCHIVE_OK) {
        rc = telo_err_set(err, TELO_EIO, "cannot start the archive: %s", archive_error_string(p.a));
    }
    if (rc == 0 && prefix[0] != '\0')
        rc = write_header(&p, prefix, &st, 1);
    if (rc == 0)
        rc = pack_tree(&p, dir, prefix, 0);
    if (archive_write_close(p.a) != ARCHIVE_OK && rc == 0)
        rc = p.overflow ? -TELO_ETOOBIG
                        : telo_err_set(err, TELO_EIO, "cannot finish the archive: %s",
                                       archive_error_string(p.a));
    archive_write_free(p.a);
    if (rc == -TELO_ETOOBIG || (rc != 0 && p.overflow))
        rc = telo_err_set(err, TELO_ETOOBIG,
                          "%s packs into more than %zu bytes (gzip tar), over the limit of %zu",
                          dir, p.attempted, out->max - before);
    if (rc != 0)
        buf_truncate(out, before);
    return rc;
}

/* Reading a small file whole (kubeconfigs, token files, certificates), with a size bound. */
#include "util/file.h"

#include "util/buf.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int util_file_read(const char *path, size_t max, char **out, size_t *len, const char **why)
{
    *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return errno == ENOENT ? -TELO_ENOTFOUND : -TELO_EIO;
    }
    struct buf b;
    buf_init(&b, max);
    char chunk[4096];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *why = strerror(errno);
            rc = -TELO_EIO;
            break;
        }
        if (n == 0)
            break;
        rc = buf_append(&b, chunk, (size_t)n);
        if (rc < 0) {
            *why = rc == -TELO_ETOOBIG ? "file too large" : "out of memory";
            break;
        }
    }
    close(fd);
    if (rc < 0) {
        buf_release(&b);
        return rc;
    }
    if (!b.data && buf_append(&b, "", 0) < 0) {
        *why = "out of memory";
        return -TELO_ENOMEM;
    }
    *len = b.len;
    *out = buf_steal(&b);
    return 0;
}

int util_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* libFuzzer target: a kubeconfig document (YAML) as kube_config_parse reads it, exec plugin
 * section included (parsed, never run). The files a kubeconfig can name (tokenFile, a CA for
 * provideClusterInfo) are read with open(2): this target's open answers ENOENT while a document
 * is parsed, so no input makes the run read (or block on) a file of this machine. */
#define _GNU_SOURCE
#include "kube/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int parsing;

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    if (parsing) {
        errno = ENOENT;
        return -1;
    }
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_config *cfg = NULL;
    struct telo_err err;
    parsing = 1;
    int rc =
        kube_config_parse("/telo-fuzz/kubeconfig", (const char *)data, size, NULL, 0, &cfg, &err);
    parsing = 0;
    if (rc == 0) {
        if (!cfg || !cfg->server || !cfg->namespace || !cfg->source)
            abort();
        if (strncmp(cfg->server, "https://", 8) != 0 && strncmp(cfg->server, "http://", 7) != 0)
            abort();
        kube_config_free(cfg);
    } else if (cfg || err.msg[0] == '\0') {
        abort();
    }
    return 0;
}

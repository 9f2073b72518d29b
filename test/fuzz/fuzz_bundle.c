/* libFuzzer target: the bundle reader of pkg/imagebuild/bundle.c (gzip, tar, caps, path checks) on
 * arbitrary bytes, then the entry check and the dependency key on what it read. A bundle that
 * reads has normalised, unique paths within the caps; a refusal leaves *out NULL with a
 * message. */
#include "imagebuild/bundle.h"
#include "imagebuild/depkey.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Small caps so the fuzzer meets each of them with small inputs. */
    struct build_bundle_limits lim = {.max_compressed = 256 << 10,
                                      .max_total = 1 << 20,
                                      .max_file = 256 << 10,
                                      .max_entries = 64,
                                      .max_path = 128};
    struct build_bundle *b = (struct build_bundle *)1;
    struct telo_err err;
    telo_err_clear(&err);
    int rc = build_bundle_read(data, size, &lim, "fuzz", &b, &err);
    if (rc != 0) {
        if (b != NULL || err.msg[0] == '\0')
            abort();
        return 0;
    }
    size_t total = 0;
    for (size_t i = 0; i < b->nfiles; i++) {
        const struct build_bundle_file *f = &b->files[i];
        char norm[256];
        if (f->len > lim.max_file || f->data[f->len] != '\0' ||
            build_bundle_path_normalise(f->path, norm, sizeof(norm), NULL) != 0 ||
            strcmp(norm, f->path) != 0 || build_bundle_find(b, f->path) != f)
            abort();
        total += f->len;
    }
    if (total != b->total || total > lim.max_total)
        abort();
    if (b->nfiles > 0)
        (void)build_bundle_check_entry(b, b->files[0].path, "fuzz", &err);
    struct build_tag_input in = {.base_image = "base", .telo_registry_url = "https://r"};
    char tag[BUILD_TAG_LEN + 1];
    struct build_depkey *k = NULL;
    if (build_tag_for_bundle(b, &in, tag, &k, &err) == 0 && strlen(tag) != BUILD_TAG_LEN)
        abort();
    build_depkey_free(k);
    build_bundle_free(b);
    return 0;
}

/* Tests for pkg/imagebuild/pack.c: packing a directory into a bundle build_bundle_read accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/bundle.h"
#include "imagebuild/pack.h"
#include "util/buf.h"
#include "util/err.h"

static char root[256];

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void sub(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    assert_int_equal(mkdir(path, 0755), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/test_build_pack.XXXXXX");
    assert_non_null(mkdtemp(root));
    put("telo.yaml", "kind: Telo.Application\n");
    sub("lib");
    put("lib/b.yaml", "b: 2\n");
    put("lib/a.yaml", "a: 1\n");
    sub(".git");
    put(".git/HEAD", "ref: refs/heads/main\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void packs_what_the_reader_reads(void **state)
{
    (void)state;
    struct telo_err err = {0};
    struct buf b;
    buf_init(&b, BUILD_PACK_CONFIGMAP_MAX);
    assert_int_equal(build_pack_dir(root, "app", &b, &err), 0);
    struct build_bundle *bundle = NULL;
    assert_int_equal(build_bundle_read(b.data, b.len, NULL, "packed", &bundle, &err), 0);
    assert_int_equal(bundle->nfiles, 3);
    /* Sorted by name; .git left out. */
    assert_string_equal(bundle->files[0].path, "app/lib/a.yaml");
    assert_string_equal(bundle->files[1].path, "app/lib/b.yaml");
    assert_string_equal(bundle->files[2].path, "app/telo.yaml");
    assert_string_equal((const char *)bundle->files[2].data, "kind: Telo.Application\n");
    assert_int_equal(build_bundle_check_entry(bundle, "app/telo.yaml", "packed", &err), 0);
    build_bundle_free(bundle);

    /* Deterministic: the same tree gives the same bytes, whatever the files' times. */
    struct buf again;
    buf_init(&again, BUILD_PACK_CONFIGMAP_MAX);
    sleep(1);
    put("lib/a.yaml", "a: 1\n");
    assert_int_equal(build_pack_dir(root, "app", &again, &err), 0);
    assert_int_equal(again.len, b.len);
    assert_memory_equal(again.data, b.data, b.len);
    buf_release(&again);

    /* Without a prefix the files sit at the top. */
    buf_reset(&b);
    assert_int_equal(build_pack_dir(root, NULL, &b, &err), 0);
    assert_int_equal(build_bundle_read(b.data, b.len, NULL, "packed", &bundle, &err), 0);
    assert_non_null(build_bundle_find(bundle, "telo.yaml"));
    build_bundle_free(bundle);
    buf_release(&b);
}

static void refusals_name_the_path(void **state)
{
    (void)state;
    struct telo_err err = {0};
    struct buf b;
    buf_init(&b, 64);
    buf_append_str(&b, "kept");
    /* Too big for the buffer's maximum: nothing appended, the size named. */
    assert_int_equal(build_pack_dir(root, "app", &b, &err), -TELO_ETOOBIG);
    assert_non_null(strstr(err.msg, "over the limit of 60"));
    assert_string_equal(b.data, "kept");
    buf_release(&b);

    buf_init(&b, BUILD_PACK_CONFIGMAP_MAX);
    assert_int_equal(build_pack_dir("/nonexistent/dir", "app", &b, &err), -TELO_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/dir"));
    char file[300];
    snprintf(file, sizeof(file), "%s/telo.yaml", root);
    assert_int_equal(build_pack_dir(file, "app", &b, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "is not a directory"));

    char link[300];
    snprintf(link, sizeof(link), "%s/lib/link.yaml", root);
    assert_int_equal(symlink("a.yaml", link), 0);
    assert_int_equal(build_pack_dir(root, "app", &b, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "lib/link.yaml is a symbolic link"));
    assert_int_equal(b.len, 0);
    unlink(link);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packs_what_the_reader_reads),
        cmocka_unit_test(refusals_name_the_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

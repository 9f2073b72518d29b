/* Tests for pkg/imagebuild/depkey.c: the dependency key and the image tag against reference
 * vectors.
 *
 * The expected tags come from test/unit/data/build/vectors.py, which implements the reference's
 * tag (telo-runner-behaviour.md section 6.1; runner-core extractDependencyKey) in a few lines of
 * Python with PyYAML and hashlib, independently of this C code. The bundles here are the same
 * texts as there; `python3 test/unit/data/build/vectors.py` printed:
 *   app                b22120d36cb167f3a56d4153967b95db
 *   app-reordered-body b22120d36cb167f3a56d4153967b95db
 *   app-new-import     be6d817794f7ecd60f7b402c6753bafe
 *   app-digest         2e193df9b1be6f4002df013a5d0471fe
 *   bare               14fb1ac18155b0790df678461ab2dd82
 *   local-path         777fff160d6733b7e39cec39942f2253
 *   broken             02ffafe8bbba0187dee2536c23ebe82f
 *   unicode            ff34266b5890eb95d620911d3e9cca36 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "appendf.h"
#include "build_tgz.h"
#include "imagebuild/bundle.h"
#include "imagebuild/depkey.h"
#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char APP[] = "kind: Telo.Application\n"
                          "metadata:\n"
                          "  name: hello\n"
                          "imports:\n"
                          "  Console: std/console@0.9.0\n"
                          "  Http:\n"
                          "    source: std/http-server@1.2.0\n"
                          "    variables: { level: info }\n"
                          "---\n"
                          "kind: Http.Server\n"
                          "metadata:\n"
                          "  name: server\n"
                          "port: 8080\n";

static const char APP_REORDERED_BODY[] = "kind: Telo.Application\n"
                                         "metadata:\n"
                                         "  name: hello\n"
                                         "imports:\n"
                                         "  Http:\n"
                                         "    source: std/http-server@1.2.0\n"
                                         "  Console: \"std/console@0.9.0\"\n"
                                         "---\n"
                                         "kind: Http.Server\n"
                                         "metadata:\n"
                                         "  name: server\n"
                                         "port: 9090\n";

static const char APP_NEW_IMPORT[] = "kind: Telo.Application\n"
                                     "metadata:\n"
                                     "  name: hello\n"
                                     "imports:\n"
                                     "  Console: std/console@0.9.1\n"
                                     "  Http:\n"
                                     "    source: std/http-server@1.2.0\n"
                                     "    variables: { level: info }\n"
                                     "---\n"
                                     "kind: Http.Server\n"
                                     "metadata:\n"
                                     "  name: server\n"
                                     "port: 8080\n";

static const char DEFINITION[] = "kind: Telo.Definition\n"
                                 "metadata:\n"
                                 "  name: Thing\n"
                                 "controllers:\n"
                                 "  - pkg:npm/@acme/thing@1.0.0\n"
                                 "  - pkg:npm/@acme/thing@1.0.0\n"
                                 "  - pkg:npm/@acme/aardvark@2.0.0\n"
                                 "  - 42\n";

static const char LIBRARY[] = "kind: Telo.Library\n"
                              "metadata:\n"
                              "  name: util\n"
                              "imports:\n"
                              "  - std/sql@2.0.0\n"
                              "  - source: std/console@0.9.0\n";

static const char LOCAL_DEFINITION[] = "kind: Telo.Definition\n"
                                       "metadata:\n"
                                       "  name: Local\n"
                                       "controllers:\n"
                                       "  - pkg:npm/@acme/local@0.1.0\n"
                                       "local_path: ./local\n";

static const char BROKEN[] = "a: b: c: :\n  - [\n";

/* U+FF21, U+1F600, U+00E9: JavaScript sorts the emoji (a surrogate pair, 0xD83D...) before
 * U+FF21, byte order would not. */
static const char UNICODE[] = "kind: Telo.Application\n"
                              "metadata:\n"
                              "  name: unicode\n"
                              "imports:\n"
                              "  Wide: \"std/\xef\xbc\xa1@1.0.0\"\n"
                              "  Emoji: \"std/\xf0\x9f\x98\x80@1.0.0\"\n"
                              "  Accent: \"std/\xc3\xa9@1.0.0\"\n";

static const struct build_tag_input INPUT = {
    .base_image = "telorun/node:latest-slim",
    .telo_registry_url = "https://registry.telo.run",
};

static struct build_bundle *bundle_of(const struct tgz_entry *e, size_t n)
{
    size_t len;
    unsigned char *tgz = tgz_make(e, n, &len);
    struct build_bundle *b = NULL;
    struct telo_err err;
    assert_int_equal(build_bundle_read(tgz, len, NULL, "test", &b, &err), 0);
    free(tgz);
    return b;
}

static void tag_of(const struct tgz_entry *e, size_t n, const struct build_tag_input *in, char *tag,
                   struct build_depkey **key)
{
    struct build_bundle *b = bundle_of(e, n);
    struct telo_err err;
    assert_int_equal(build_tag_for_bundle(b, in, tag, key, &err), 0);
    assert_int_equal(strlen(tag), BUILD_TAG_LEN);
    build_bundle_free(b);
}

static void app_vector_and_its_key(void **state)
{
    (void)state;
    struct tgz_entry e[] = {{.path = "app/telo.yaml", .data = APP},
                            {.path = "lib/thing.yaml", .data = DEFINITION},
                            {.path = "lib/util.yaml", .data = LIBRARY}};
    char tag[BUILD_TAG_LEN + 1];
    struct build_depkey *k = NULL;
    tag_of(e, N(e), &INPUT, tag, &k);
    assert_string_equal(tag, "b22120d36cb167f3a56d4153967b95db");
    assert_int_equal(k->nimports, 3);
    assert_string_equal(k->imports[0], "std/console@0.9.0");
    assert_string_equal(k->imports[1], "std/http-server@1.2.0");
    assert_string_equal(k->imports[2], "std/sql@2.0.0");
    assert_int_equal(k->ncontrollers, 2);
    assert_string_equal(k->controllers[0], "pkg:npm/@acme/aardvark@2.0.0");
    assert_string_equal(k->controllers[1], "pkg:npm/@acme/thing@1.0.0");
    assert_int_equal(k->full_content_fallback, 0);
    assert_string_equal(k->fallback_reason, "");
    build_depkey_free(k);
    build_depkey_free(NULL);
}

static void import_order_and_body_do_not_change_the_tag(void **state)
{
    (void)state;
    /* Other file order in the archive, too. */
    struct tgz_entry e[] = {{.path = "lib/util.yaml", .data = LIBRARY},
                            {.path = "lib/thing.yaml", .data = DEFINITION},
                            {.path = "app/telo.yaml", .data = APP_REORDERED_BODY}};
    char tag[BUILD_TAG_LEN + 1];
    tag_of(e, N(e), &INPUT, tag, NULL);
    assert_string_equal(tag, "b22120d36cb167f3a56d4153967b95db");
    /* The entry path is not an input either: the same app under another name. */
    struct tgz_entry moved[] = {{.path = "main.yaml", .data = APP},
                                {.path = "lib/thing.yaml", .data = DEFINITION},
                                {.path = "lib/util.yaml", .data = LIBRARY}};
    tag_of(moved, N(moved), &INPUT, tag, NULL);
    assert_string_equal(tag, "b22120d36cb167f3a56d4153967b95db");
}

static void a_changed_import_or_digest_changes_the_tag(void **state)
{
    (void)state;
    struct tgz_entry e[] = {{.path = "app/telo.yaml", .data = APP_NEW_IMPORT},
                            {.path = "lib/thing.yaml", .data = DEFINITION},
                            {.path = "lib/util.yaml", .data = LIBRARY}};
    char tag[BUILD_TAG_LEN + 1];
    tag_of(e, N(e), &INPUT, tag, NULL);
    assert_string_equal(tag, "be6d817794f7ecd60f7b402c6753bafe");

    struct tgz_entry app[] = {{.path = "app/telo.yaml", .data = APP},
                              {.path = "lib/thing.yaml", .data = DEFINITION},
                              {.path = "lib/util.yaml", .data = LIBRARY}};
    struct build_tag_input in = INPUT;
    in.base_digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    tag_of(app, N(app), &in, tag, NULL);
    assert_string_equal(tag, "2e193df9b1be6f4002df013a5d0471fe");
    /* An empty digest is no digest, as in the reference's `if (baseDigest)`. */
    in.base_digest = "";
    tag_of(app, N(app), &in, tag, NULL);
    assert_string_equal(tag, "b22120d36cb167f3a56d4153967b95db");
}

static void bare_and_unicode_vectors(void **state)
{
    (void)state;
    struct tgz_entry bare[] = {
        {.path = "app/telo.yaml", .data = "kind: Telo.Application\nmetadata:\n  name: bare\n"}};
    char tag[BUILD_TAG_LEN + 1];
    tag_of(bare, N(bare), &INPUT, tag, NULL);
    assert_string_equal(tag, "14fb1ac18155b0790df678461ab2dd82");

    struct tgz_entry uni[] = {{.path = "app/telo.yaml", .data = UNICODE}};
    struct build_depkey *k = NULL;
    tag_of(uni, N(uni), &INPUT, tag, &k);
    assert_string_equal(tag, "ff34266b5890eb95d620911d3e9cca36");
    assert_int_equal(k->nimports, 3);
    assert_string_equal(k->imports[0], "std/\xc3\xa9@1.0.0");
    assert_string_equal(k->imports[1], "std/\xf0\x9f\x98\x80@1.0.0");
    assert_string_equal(k->imports[2], "std/\xef\xbc\xa1@1.0.0");
    build_depkey_free(k);
}

static void fallbacks_fold_in_every_file(void **state)
{
    (void)state;
    struct tgz_entry local[] = {{.path = "app/telo.yaml", .data = APP},
                                {.path = "local/def.yaml", .data = LOCAL_DEFINITION},
                                {.path = "local/index.js", .data = "export default 1;\n"}};
    char tag[BUILD_TAG_LEN + 1];
    struct build_depkey *k = NULL;
    tag_of(local, N(local), &INPUT, tag, &k);
    assert_string_equal(tag, "777fff160d6733b7e39cec39942f2253");
    assert_int_equal(k->full_content_fallback, 1);
    assert_string_equal(k->fallback_reason, "local/def.yaml: line 6 column 13: a Telo.Definition "
                                            "with local_path (its controller's source is in the "
                                            "bundle)");
    build_depkey_free(k);

    /* Archive order differs from path order: the files are hashed sorted by path. */
    struct tgz_entry broken[] = {{.path = "z/broken.yaml", .data = BROKEN},
                                 {.path = "app/telo.yaml", .data = APP},
                                 {.path = "a/notes.txt", .data = "hello\n"}};
    tag_of(broken, N(broken), &INPUT, tag, &k);
    assert_string_equal(tag, "02ffafe8bbba0187dee2536c23ebe82f");
    assert_int_equal(k->full_content_fallback, 1);
    assert_string_equal(k->fallback_reason, "z/broken.yaml: line 1 column 5: mapping values are "
                                            "not allowed in this context");
    build_depkey_free(k);

    /* With the fallback a body edit does change the tag. */
    struct tgz_entry edited[] = {{.path = "z/broken.yaml", .data = BROKEN},
                                 {.path = "app/telo.yaml", .data = APP_REORDERED_BODY},
                                 {.path = "a/notes.txt", .data = "hello\n"}};
    tag_of(edited, N(edited), &INPUT, tag, NULL);
    assert_string_not_equal(tag, "02ffafe8bbba0187dee2536c23ebe82f");
}

/* A double-quoted "\0" puts a NUL inside a scalar: read as a C string, "pkg/x@1\0anything" was
 * "pkg/x@1", so this bundle and the one importing pkg/x@1 shared a tag (and an image). Such a
 * scalar is left out of the key and every file's bytes go into the tag. */
static void a_nul_in_a_scalar_folds_in_every_file(void **state)
{
    (void)state;
    struct tgz_entry plain[] = {
        {.path = "app.yaml", .data = "kind: Telo.Application\nimports: {X: pkg/x@1}\n"}};
    struct tgz_entry nul[] = {
        {.path = "app.yaml",
         .data = "kind: Telo.Application\nimports: {X: \"pkg/x@1\\0anything\"}\n"}};
    struct tgz_entry nul_key[] = {
        {.path = "app.yaml", .data = "kind: Telo.Application\n\"imports\\0x\": {X: pkg/x@1}\n"}};
    char tag_plain[BUILD_TAG_LEN + 1], tag[BUILD_TAG_LEN + 1];
    struct build_depkey *k = NULL;
    tag_of(plain, N(plain), &INPUT, tag_plain, &k);
    assert_int_equal(k->nimports, 1);
    assert_int_equal(k->full_content_fallback, 0);
    build_depkey_free(k);

    tag_of(nul, N(nul), &INPUT, tag, &k);
    assert_string_not_equal(tag, tag_plain);
    assert_int_equal(k->nimports, 0);
    assert_int_equal(k->full_content_fallback, 1);
    assert_string_equal(k->fallback_reason, "app.yaml: line 2 column 14: a scalar holding a NUL "
                                            "byte (the dependency key cannot hold it)");
    build_depkey_free(k);

    tag_of(nul_key, N(nul_key), &INPUT, tag, &k);
    assert_string_not_equal(tag, tag_plain);
    assert_int_equal(k->nimports, 0);
    assert_int_equal(k->full_content_fallback, 1);
    build_depkey_free(k);

    /* The first cause is the NUL, met before the syntax error later in the same document (the
     * fuzz oracle's loader sees only the error: test/fuzz/crashes/bundle_yaml-nul-before-a-*). */
    struct tgz_entry nul_then_broken[] = {
        {.path = "app.yaml",
         .data = "kind: Telo.Application\nimports: {X: \"pkg/x@1\\0\"}\nbroken: [\n"}};
    tag_of(nul_then_broken, N(nul_then_broken), &INPUT, tag, &k);
    assert_int_equal(k->full_content_fallback, 1);
    assert_string_equal(k->fallback_reason, "app.yaml: line 2 column 14: a scalar holding a NUL "
                                            "byte (the dependency key cannot hold it)");
    build_depkey_free(k);
}

static void yaml_shapes_the_reference_accepts_or_refuses(void **state)
{
    (void)state;
    /* Aliases resolve; quoted vs plain scalars; non-string values are skipped; a null
     * local_path is not a string; kinds other than the three are ignored. */
    static const char doc[] = "kind: Telo.Application\n"
                              "metadata: {name: a}\n"
                              "imports:\n"
                              "  A: &src std/a@1.0.0\n"
                              "  B: *src\n"
                              "  C: {source: 'std/c@1.0.0'}\n"
                              "  D: 12\n"
                              "  E: true\n"
                              "  F: {source: null}\n"
                              "  G: ~\n"
                              "  H: [std/not-a-source]\n"
                              "  I: 1.5e3\n"
                              "  J: 0x1F\n"
                              "  K: std/k@1.0.0 # comment\n"
                              "---\n"
                              "kind: Telo.Definition\n"
                              "metadata: {name: d}\n"
                              "controllers: [pkg:npm/a@1, {purl: x}, 7]\n"
                              "local_path: ~\n"
                              "---\n"
                              "kind: Other.Kind\n"
                              "imports: {X: std/ignored@1}\n"
                              "controllers: [pkg:npm/ignored@1]\n"
                              "---\n"
                              "- a list document\n"
                              "---\n"
                              "just a scalar\n";
    struct tgz_entry e[] = {{.path = "a.yaml", .data = doc}};
    char tag[BUILD_TAG_LEN + 1];
    struct build_depkey *k = NULL;
    tag_of(e, N(e), &INPUT, tag, &k);
    assert_int_equal(k->full_content_fallback, 0);
    assert_int_equal(k->nimports, 3);
    assert_string_equal(k->imports[0], "std/a@1.0.0");
    assert_string_equal(k->imports[1], "std/c@1.0.0");
    assert_string_equal(k->imports[2], "std/k@1.0.0");
    assert_int_equal(k->ncontrollers, 1);
    assert_string_equal(k->controllers[0], "pkg:npm/a@1");
    build_depkey_free(k);

    /* The reference's parser refuses duplicate keys: fallback. */
    struct tgz_entry dup[] = {
        {.path = "d.yaml", .data = "kind: Telo.Application\nimports: {A: x}\nkind: again\n"}};
    tag_of(dup, N(dup), &INPUT, tag, &k);
    assert_int_equal(k->full_content_fallback, 1);
    assert_string_equal(k->fallback_reason, "d.yaml: line 3 column 1: duplicate key 'kind'");
    build_depkey_free(k);

    /* A mapping of many keys (the hashed duplicate check). */
    char big[4096] = "kind: Telo.Library\nimports:\n";
    for (int i = 0; i < 40; i++)
        test_appendf(big, sizeof(big), "  M%d: std/m%d@1\n", i, i % 39);
    struct tgz_entry many[] = {{.path = "m.yaml", .data = big}};
    tag_of(many, N(many), &INPUT, tag, &k);
    assert_int_equal(k->full_content_fallback, 0);
    assert_int_equal(k->nimports, 39);
    build_depkey_free(k);
    test_appendf(big, sizeof(big), "  M3: again\n");
    tag_of(many, N(many), &INPUT, tag, &k);
    assert_int_equal(k->full_content_fallback, 1);
    assert_non_null(strstr(k->fallback_reason, "duplicate key 'M3'"));
    build_depkey_free(k);
}

/* The key of one file under budget (NULL: the defaults); the return code, err filled. */
static int extract_one(const char *path, const char *text, const struct build_yaml_budget *budget,
                       struct telo_err *err)
{
    struct tgz_entry e[] = {{.path = path, .data = text}};
    struct build_bundle *b = bundle_of(e, 1);
    struct build_depkey *k = NULL;
    telo_err_clear(err);
    int rc = build_depkey_extract_budget(b, budget, &k, err);
    if (rc != 0)
        assert_null(k);
    build_depkey_free(k);
    build_bundle_free(b);
    return rc;
}

static char *repeat(const char *head, const char *item, size_t n, const char *tail)
{
    size_t len = strlen(head) + strlen(item) * n + strlen(tail) + 1;
    char *s = malloc(len), *p = s;
    assert_non_null(s);
    p += sprintf(p, "%s", head);
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s", item);
    sprintf(p, "%s", tail);
    return s;
}

static void budgets_name_the_limit(void **state)
{
    (void)state;
    struct telo_err err;
    /* One flow sequence of 150000 items (the loader held every one as a node). */
    char *big = repeat("kind: Telo.Application\nx: [", "a,", 150000, "a]\n");
    assert_int_equal(extract_one("app/x.yaml", big, NULL, &err), -TELO_ETOOBIG);
    assert_string_equal(
        err.msg, "bundle file app/x.yaml: more than 100000 YAML nodes (the limit of a file)");
    free(big);

    /* Nesting. */
    char *deep = repeat("", "[", 150, "]\n");
    assert_int_equal(extract_one("deep.yaml", deep, NULL, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file deep.yaml: line 1 column 101: collections nested "
                                 "deeper than 100 levels (the limit)");
    free(deep);

    /* A scalar past 1 MiB. */
    char *wide = repeat("k: ", "x", (1u << 20) + 1, "\n");
    assert_int_equal(extract_one("wide.yaml", wide, NULL, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file wide.yaml: line 1 column 4: a scalar of more than "
                                 "1048576 bytes (the limit)");
    free(wide);

    /* Aliases. */
    char *aliases = repeat("a: &a x\nb: [", "*a, ", 1001, "x]\n");
    assert_int_equal(extract_one("al.yaml", aliases, NULL, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file al.yaml: more than 1000 YAML aliases (the limit of "
                                 "a file)");
    free(aliases);

    /* Bytes of a file and of the bundle, nodes of the bundle: small budgets. */
    struct build_yaml_budget small = {.max_file_bytes = 10};
    assert_int_equal(extract_one("b.yaml", "kind: Telo.Library\n", &small, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file b.yaml: 19 bytes, more than the 10 read as YAML per "
                                 "file (the limit)");
    struct tgz_entry two[] = {{.path = "a.yaml", .data = "[1, 2, 3]\n"},
                              {.path = "b.yaml", .data = "[4, 5, 6]\n"}};
    struct build_bundle *b = bundle_of(two, N(two));
    struct build_depkey *k = NULL;
    struct build_yaml_budget bundle_nodes = {.max_bundle_nodes = 6};
    assert_int_equal(build_depkey_extract_budget(b, &bundle_nodes, &k, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file b.yaml: more than 6 YAML nodes in the bundle's "
                                 "files together (the limit of a bundle)");
    struct build_yaml_budget bundle_bytes = {.max_bundle_bytes = 15};
    assert_int_equal(build_depkey_extract_budget(b, &bundle_bytes, &k, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file b.yaml: more than 15 bytes of YAML in the bundle's "
                                 "files together (the limit)");
    build_bundle_free(b);
}

static void alias_bombs_are_refused(void **state)
{
    (void)state;
    struct telo_err err;
    /* Billion laughs: 9 levels of 10 aliases, 10^9 nodes once expanded, in 800 bytes. */
    char lol[2048] = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
    for (int i = 1; i < 9; i++) {
        test_appendf(lol, sizeof(lol), "a%d: &a%d [", i, i);
        for (int j = 0; j < 10; j++)
            test_appendf(lol, sizeof(lol), "*a%d%s", i - 1, j < 9 ? ", " : "]\n");
    }
    assert_int_equal(extract_one("lol.yaml", lol, NULL, &err), -TELO_ETOOBIG);
    assert_string_equal(err.msg, "bundle file lol.yaml: line 5 column 5: more than 100000 YAML "
                                 "nodes once aliases are expanded (the limit of a document)");
    /* An alias inside the collection it names. */
    assert_int_equal(extract_one("rec.yaml", "a: &a [1, *a]\n", NULL, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "bundle file rec.yaml: line 1 column 11: an alias to a collection "
                                 "that contains it (recursive YAML is refused)");
    /* A few aliases of a list are fine, and resolve. */
    struct tgz_entry ok[] = {{.path = "ok.yaml",
                              .data = "x: &imps [std/a@1, {source: std/b@1}]\n"
                                      "kind: Telo.Library\n"
                                      "imports: *imps\n"}};
    char tag[BUILD_TAG_LEN + 1];
    struct build_depkey *k = NULL;
    tag_of(ok, N(ok), &INPUT, tag, &k);
    assert_int_equal(k->nimports, 2);
    assert_string_equal(k->imports[0], "std/a@1");
    assert_string_equal(k->imports[1], "std/b@1");
    build_depkey_free(k);
}

static void utf16_order(void **state)
{
    (void)state;
    assert_true(build_utf16_cmp("a", "b") < 0);
    assert_true(build_utf16_cmp("ab", "a") > 0);
    assert_int_equal(build_utf16_cmp("", ""), 0);
    assert_true(build_utf16_cmp("\xf0\x9f\x98\x80", "\xef\xbc\xa1") < 0); /* U+1F600 < U+FF21 */
    assert_true(build_utf16_cmp("\xed\x9f\xbf", "\xf0\x9f\x98\x80") < 0); /* U+D7FF < U+1F600 */
    assert_true(build_utf16_cmp("\xf0\x9f\x98\x80", "\xf0\x9f\x98\x81") < 0);
}

static void missing_inputs_are_errors(void **state)
{
    (void)state;
    struct build_depkey k = {0};
    char tag[BUILD_TAG_LEN + 1];
    struct telo_err err;
    struct build_tag_input in = {.base_image = "x"};
    assert_int_equal(build_tag_compute(NULL, &k, &in, tag, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "telo registry URL"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(app_vector_and_its_key),
        cmocka_unit_test(import_order_and_body_do_not_change_the_tag),
        cmocka_unit_test(a_changed_import_or_digest_changes_the_tag),
        cmocka_unit_test(bare_and_unicode_vectors),
        cmocka_unit_test(fallbacks_fold_in_every_file),
        cmocka_unit_test(a_nul_in_a_scalar_folds_in_every_file),
        cmocka_unit_test(yaml_shapes_the_reference_accepts_or_refuses),
        cmocka_unit_test(budgets_name_the_limit),
        cmocka_unit_test(alias_bombs_are_refused),
        cmocka_unit_test(utf16_order),
        cmocka_unit_test(missing_inputs_are_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

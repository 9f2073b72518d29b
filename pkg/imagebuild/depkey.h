/* The dependency key of a bundle and the image tag derived from it, as the reference runner
 * computes them (telorun/telo runner-core extractDependencyKey, k8s-runner computeImageTag). */
#ifndef TELO_IMAGEBUILD_DEPKEY_H
#define TELO_IMAGEBUILD_DEPKEY_H

#include "imagebuild/bundle.h"
#include "util/err.h"

#include <stddef.h>

/* 32 lowercase hex characters: the first half of a sha256. */
#define BUILD_TAG_LEN 32

/* What `telo install` bakes into an image: nothing about resource bodies or CEL, so a body-only
 * edit keeps the tag. */
struct build_depkey {
    char **imports; /* `imports:` sources of every Telo.Application / Telo.Library document,
                     * unique, sorted as JavaScript sorts strings (UTF-16 code units) */
    size_t nimports;
    char **controllers; /* string entries of `controllers:` of every Telo.Definition document,
                         * unique, sorted the same way */
    size_t ncontrollers;
    /* 1 when the key alone cannot capture what the image depends on, so the tag also covers
     * every file's bytes: a Telo.Definition with a string `local_path` (its controller's source
     * is in the bundle), a file that is not well-formed YAML (the runner cannot know what
     * it declares), or a scalar holding a NUL byte (these strings cannot). */
    int full_content_fallback;
    char fallback_reason[256]; /* the first cause, "lib/broken.yaml: line 2 column 5: ...", or
                                * "" */
};

/* What reading a bundle's YAML may cost; a zero field takes the default in its comment. The
 * files are read as libyaml events, never composed into documents, so memory follows these and
 * not the file's shape (a flow sequence of millions of items, deep nesting, an alias bomb). */
struct build_yaml_budget {
    size_t max_nodes;        /* scalars, collections and aliases of one file: 100000 */
    size_t max_expanded;     /* nodes of one document with every alias expanded: max_nodes */
    size_t max_bundle_nodes; /* nodes of all files together: 1000000 */
    size_t max_depth;        /* collections nested in one another: 100 */
    size_t max_aliases;      /* aliases of one file: 1000 */
    size_t max_scalar;       /* bytes of one scalar: 1 MiB */
    size_t max_file_bytes;   /* bytes of one file: 16 MiB */
    size_t max_bundle_bytes; /* bytes of all files together: 32 MiB */
};

/* Fills b's zero fields with the defaults. */
void build_yaml_budget_defaults(struct build_yaml_budget *b);

/* Reads every YAML document of every file of b as libyaml events and collects the key into *out
 * (the caller frees it with build_depkey_free). Parse problems are not errors: they set the
 * fallback, as in the reference. budget may be NULL for the defaults. Returns 0, or with *out
 * NULL and err filled:
 *   -TELO_ETOOBIG  a budget was exceeded; the message names the file, the budget and its limit
 *                  ("bundle file app/x.yaml: more than 100000 YAML nodes (the limit of a
 *                  file)"); reading stops there;
 *   -TELO_EINVAL   an alias inside the collection it names (a recursive structure);
 *   -TELO_ENOMEM   out of memory.
 */
int build_depkey_extract_budget(const struct build_bundle *b,
                                const struct build_yaml_budget *budget, struct build_depkey **out,
                                struct telo_err *err);

/* build_depkey_extract_budget with the default budget. Same results.
 *
 * Differences from the reference's `yaml` (eemeli/yaml 2.x) parser, all in inputs the editor does
 * not produce: libyaml stops at a file's first syntax error, so documents after it in that file
 * are not read (the fallback is set either way); scalars with an explicit !!str tag are resolved
 * by the YAML 1.2 core schema like untagged ones; keys are compared as written when checking for
 * duplicates ("1" and "01" differ). */
int build_depkey_extract(const struct build_bundle *b, struct build_depkey **out,
                         struct telo_err *err);

/* Frees k. NULL is a no-op. */
void build_depkey_free(struct build_depkey *k);

/* The inputs of a tag besides the bundle. Strings are borrowed. */
struct build_tag_input {
    const char *base_image;        /* FROM of the per-app image, e.g. "telorun/node:latest-slim" */
    const char *base_digest;       /* resolved digest of base_image, or NULL: the reference sets it
                                    * only under pullPolicy Always and only for Docker Hub images */
    const char *telo_registry_url; /* TELO_REGISTRY_URL baked into the build */
};

/* Writes the tag into out (BUILD_TAG_LEN + 1 bytes): the first 32 hex characters of sha256 over
 *   "base\0<base_image>\0", ["base-digest\0<base_digest>\0",] "telo-registry\0<url>\0",
 *   "import\0<source>\0" for each import, "controller\0<purl>\0" for each controller, and, only
 *   with the fallback, "file\0<path>\0<contents>\0" for each file sorted by path.
 * The entry path is not an input: it is given to `telo install` / `telo run`, not baked in.
 * Returns 0, or -TELO_EINVAL when base_image or telo_registry_url is NULL. */
int build_tag_compute(const struct build_bundle *b, const struct build_depkey *k,
                      const struct build_tag_input *in, char *out, struct telo_err *err);

/* build_depkey_extract then build_tag_compute; *key_out (optional) receives the key, which the
 * caller frees. Same errors. */
int build_tag_for_bundle(const struct build_bundle *b, const struct build_tag_input *in, char *out,
                         struct build_depkey **key_out, struct telo_err *err);

/* Compares UTF-8 strings a and b as JavaScript's default sort compares them (by UTF-16 code
 * unit), which differs from byte order only between characters above U+FFFF and U+E000..U+FFFF.
 * Returns <0, 0 or >0. */
int build_utf16_cmp(const char *a, const char *b);

#endif

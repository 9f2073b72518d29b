/* The dependency key of a bundle and the image tag derived from it, as the reference runner
 * computes them (telorun/telo runner-core extractDependencyKey, k8s-runner computeImageTag). */
#include "build/depkey.h"

#include "util/strmap.h"

#include <openssl/evp.h>
#include <yaml.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Past this many keys a mapping's duplicate check uses a hash map instead of pairs. */
#define SMALL_MAPPING 16

/* ---- UTF-16 ordering ---- */

static uint32_t next_cp(const unsigned char **p)
{
    const unsigned char *s = *p;
    uint32_t c = s[0];
    if (c < 0x80) {
        *p = s + 1;
        return c;
    }
    int more = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 0;
    uint32_t cp = more == 1 ? (c & 0x1f) : more == 2 ? (c & 0x0f) : (c & 0x07);
    int k = 1;
    for (; k <= more && (s[k] & 0xc0) == 0x80; k++)
        cp = (cp << 6) | (s[k] & 0x3f);
    if (more == 0 || k <= more) {
        /* Not UTF-8 (libyaml and the bundle reader refuse it): order by the byte. */
        *p = s + 1;
        return c;
    }
    *p = s + k;
    return cp;
}

/* The first UTF-16 code unit of cp: itself in the BMP, the high surrogate above it. */
static uint32_t first_unit(uint32_t cp)
{
    return cp < 0x10000 ? cp : 0xd800 + ((cp - 0x10000) >> 10);
}

int build_utf16_cmp(const char *a, const char *b)
{
    const unsigned char *pa = (const unsigned char *)a, *pb = (const unsigned char *)b;
    while (*pa != '\0' && *pb != '\0') {
        uint32_t ca = next_cp(&pa), cb = next_cp(&pb);
        if (ca == cb)
            continue;
        /* Both in the BMP or both above it: code point order is code unit order. Otherwise the
         * BMP character compares with the other's high surrogate (never equal to it). */
        if ((ca < 0x10000) == (cb < 0x10000))
            return ca < cb ? -1 : 1;
        return first_unit(ca) < first_unit(cb) ? -1 : 1;
    }
    return (*pa != '\0') - (*pb != '\0');
}

static int cmp_str(const void *a, const void *b)
{
    return build_utf16_cmp(*(char *const *)a, *(char *const *)b);
}

/* ---- YAML 1.2 core schema: is a scalar a JavaScript string after toJS()? ---- */

static int all_in(const char *s, size_t n, const char *set)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strchr(set, s[i]) == NULL)
            return 0;
    return 1;
}

static int digits(const char *s, size_t n)
{
    return all_in(s, n, "0123456789");
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, needing a '.' or an exponent. */
static int core_float(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    size_t int_start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    size_t int_digits = i - int_start, frac_digits = 0;
    int dot = 0;
    if (i < n && s[i] == '.') {
        dot = 1;
        i++;
        size_t f = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        frac_digits = i - f;
    }
    if (int_digits == 0 && frac_digits == 0)
        return 0;
    int exp = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == e)
            return 0;
        exp = 1;
    }
    return i == n && (dot || exp);
}

static int plain_is_string(const char *s, size_t n)
{
    static const char *const words[] = {"~",     "null",  "Null",  "NULL",  "true",  "True",
                                        "TRUE",  "false", "False", "FALSE", ".inf",  ".Inf",
                                        ".INF",  "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
                                        "-.INF", ".nan",  ".NaN",  ".NAN"};
    if (n == 0)
        return 0;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strlen(words[i]) == n && memcmp(words[i], s, n) == 0)
            return 0;
    size_t sign = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    if (digits(s + sign, n - sign))
        return 0;
    if (n > 2 && s[0] == '0' && s[1] == 'o' && all_in(s + 2, n - 2, "01234567"))
        return 0;
    if (n > 2 && s[0] == '0' && s[1] == 'x' && all_in(s + 2, n - 2, "0123456789abcdefABCDEF"))
        return 0;
    return !core_float(s, n);
}

/* The scalar's text when the node is a scalar that toJS() turns into a string, else NULL. */
static const char *string_value(yaml_node_t *node)
{
    if (node == NULL || node->type != YAML_SCALAR_NODE)
        return NULL;
    const char *tag = (const char *)node->tag;
    if (tag != NULL && strncmp(tag, "tag:yaml.org,2002:", 18) == 0 &&
        strcmp(tag, YAML_STR_TAG) != 0)
        return NULL; /* !!int, !!null, ... */
    const char *v = (const char *)node->data.scalar.value;
    if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        !plain_is_string(v, node->data.scalar.length))
        return NULL;
    return v;
}

/* The value of key in a mapping node (the last one wins, as in toJS), or NULL. */
static yaml_node_t *map_get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    yaml_node_t *found = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE &&
            strcmp((const char *)k->data.scalar.value, key) == 0)
            found = yaml_document_get_node(doc, p->value);
    }
    return found;
}

/* ---- collection ---- */

struct set {
    struct strmap *seen;
    char **items;
    size_t n, cap;
};

static int set_add(struct set *s, const char *v)
{
    if (strmap_get(s->seen, v) != NULL)
        return 0;
    if (s->n == s->cap) {
        size_t ncap = s->cap == 0 ? 8 : s->cap * 2;
        char **ni = realloc(s->items, ncap * sizeof(*ni));
        if (ni == NULL)
            return -TELO_ENOMEM;
        s->items = ni;
        s->cap = ncap;
    }
    char *copy = strdup(v);
    if (copy == NULL || strmap_put(s->seen, copy, copy) != 0) {
        free(copy);
        return -TELO_ENOMEM;
    }
    s->items[s->n++] = copy;
    return 0;
}

struct collect {
    struct set imports, controllers;
    struct build_depkey *key;
};

static void fallback(struct collect *c, const char *path, size_t line, size_t column,
                     const char *problem)
{
    struct build_depkey *k = c->key;
    if (!k->full_content_fallback)
        snprintf(k->fallback_reason, sizeof(k->fallback_reason), "%s: line %zu column %zu: %s",
                 path, line, column, problem);
    k->full_content_fallback = 1;
}

/* The reference's parser refuses duplicate keys in any mapping of a document (a parse error,
 * hence the fallback); libyaml accepts them, so look. Every node is visited once, aliases
 * included, so an alias bomb costs nothing here. */
static int duplicate_key(yaml_document_t *doc, yaml_mark_t *where, const char **name)
{
    for (yaml_node_t *n = doc->nodes.start; n < doc->nodes.top; n++) {
        if (n->type != YAML_MAPPING_NODE)
            continue;
        yaml_node_pair_t *start = n->data.mapping.pairs.start, *top = n->data.mapping.pairs.top;
        size_t count = (size_t)(top - start);
        struct strmap *seen = count > SMALL_MAPPING ? strmap_new() : NULL;
        if (count > SMALL_MAPPING && seen == NULL)
            return -TELO_ENOMEM;
        int dup = 0;
        for (yaml_node_pair_t *p = start; p < top && !dup; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (k == NULL || k->type != YAML_SCALAR_NODE)
                continue;
            const char *kv = (const char *)k->data.scalar.value;
            if (seen != NULL) {
                if (strmap_get(seen, kv) != NULL)
                    dup = 1;
                else if (strmap_put(seen, kv, k) != 0) {
                    strmap_free(seen);
                    return -TELO_ENOMEM;
                }
            } else {
                for (yaml_node_pair_t *q = start; q < p && !dup; q++) {
                    yaml_node_t *qk = yaml_document_get_node(doc, q->key);
                    if (qk != NULL && qk->type == YAML_SCALAR_NODE &&
                        strcmp((const char *)qk->data.scalar.value, kv) == 0)
                        dup = 1;
                }
            }
            if (dup) {
                *where = k->start_mark;
                *name = kv;
            }
        }
        strmap_free(seen);
        if (dup)
            return 1;
    }
    return 0;
}

static int collect_doc(struct collect *c, yaml_document_t *doc, const char *path)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    yaml_mark_t where;
    const char *dup_name = NULL;
    int dup = duplicate_key(doc, &where, &dup_name);
    if (dup < 0)
        return dup;
    if (dup) {
        char problem[160];
        snprintf(problem, sizeof(problem), "duplicate key '%.100s'", dup_name);
        fallback(c, path, where.line + 1, where.column + 1, problem);
        return 0;
    }
    if (root == NULL || root->type != YAML_MAPPING_NODE)
        return 0;
    const char *kind = string_value(map_get(doc, root, "kind"));
    if (kind == NULL)
        return 0;
    int rc = 0;
    if (strcmp(kind, "Telo.Application") == 0 || strcmp(kind, "Telo.Library") == 0) {
        /* Object.values(imports): a mapping's values, or a sequence's items. */
        yaml_node_t *imports = map_get(doc, root, "imports");
        if (imports != NULL && imports->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *p = imports->data.mapping.pairs.start;
                 p < imports->data.mapping.pairs.top && rc == 0; p++) {
                yaml_node_t *v = yaml_document_get_node(doc, p->value);
                const char *src = string_value(v);
                if (src == NULL)
                    src = string_value(map_get(doc, v, "source"));
                if (src != NULL)
                    rc = set_add(&c->imports, src);
            }
        } else if (imports != NULL && imports->type == YAML_SEQUENCE_NODE) {
            for (yaml_node_item_t *it = imports->data.sequence.items.start;
                 it < imports->data.sequence.items.top && rc == 0; it++) {
                yaml_node_t *v = yaml_document_get_node(doc, *it);
                const char *src = string_value(v);
                if (src == NULL)
                    src = string_value(map_get(doc, v, "source"));
                if (src != NULL)
                    rc = set_add(&c->imports, src);
            }
        }
    }
    if (strcmp(kind, "Telo.Definition") == 0) {
        yaml_node_t *ctrls = map_get(doc, root, "controllers");
        if (ctrls != NULL && ctrls->type == YAML_SEQUENCE_NODE) {
            for (yaml_node_item_t *it = ctrls->data.sequence.items.start;
                 it < ctrls->data.sequence.items.top && rc == 0; it++) {
                const char *purl = string_value(yaml_document_get_node(doc, *it));
                if (purl != NULL)
                    rc = set_add(&c->controllers, purl);
            }
        }
        yaml_node_t *lp = map_get(doc, root, "local_path");
        if (string_value(lp) != NULL)
            fallback(c, path, lp->start_mark.line + 1, lp->start_mark.column + 1,
                     "a Telo.Definition with local_path (its controller's source is in the "
                     "bundle)");
    }
    return rc;
}

static int collect_file(struct collect *c, const struct build_bundle_file *f)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return -TELO_ENOMEM;
    yaml_parser_set_input_string(&p, f->data, f->len);
    int rc = 0;
    for (;;) {
        yaml_document_t doc;
        if (!yaml_parser_load(&p, &doc)) {
            if (p.error == YAML_MEMORY_ERROR) {
                rc = -TELO_ENOMEM;
                break;
            }
            fallback(c, f->path, p.problem_mark.line + 1, p.problem_mark.column + 1,
                     p.problem ? p.problem : "malformed YAML");
            break;
        }
        if (yaml_document_get_root_node(&doc) == NULL) {
            yaml_document_delete(&doc);
            break; /* the end of the stream */
        }
        rc = collect_doc(c, &doc, f->path);
        yaml_document_delete(&doc);
        if (rc != 0)
            break;
    }
    yaml_parser_delete(&p);
    return rc;
}

static void set_release(struct set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->items[i]);
    free(s->items);
    strmap_free(s->seen);
}

void build_depkey_free(struct build_depkey *k)
{
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->nimports; i++)
        free(k->imports[i]);
    for (size_t i = 0; i < k->ncontrollers; i++)
        free(k->controllers[i]);
    free(k->imports);
    free(k->controllers);
    free(k);
}

int build_depkey_extract(const struct build_bundle *b, struct build_depkey **out,
                         struct telo_err *err)
{
    *out = NULL;
    struct collect c = {0};
    c.key = calloc(1, sizeof(*c.key));
    c.imports.seen = strmap_new();
    c.controllers.seen = strmap_new();
    int rc = (c.key && c.imports.seen && c.controllers.seen) ? 0 : -TELO_ENOMEM;
    for (size_t i = 0; rc == 0 && b != NULL && i < b->nfiles; i++)
        rc = collect_file(&c, &b->files[i]);
    if (rc != 0) {
        set_release(&c.imports);
        set_release(&c.controllers);
        free(c.key);
        return telo_err_set(err, TELO_ENOMEM, "out of memory reading the bundle's manifests");
    }
    /* qsort wants a non-NULL base even for no elements. */
    if (c.imports.n > 1)
        qsort(c.imports.items, c.imports.n, sizeof(char *), cmp_str);
    if (c.controllers.n > 1)
        qsort(c.controllers.items, c.controllers.n, sizeof(char *), cmp_str);
    struct build_depkey *k = c.key;
    k->imports = c.imports.items;
    k->nimports = c.imports.n;
    k->controllers = c.controllers.items;
    k->ncontrollers = c.controllers.n;
    /* The strings now belong to k; only the lookup maps go. */
    strmap_free(c.imports.seen);
    strmap_free(c.controllers.seen);
    *out = k;
    return 0;
}

/* ---- the tag ---- */

static void record(EVP_MD_CTX *h, const char *name, const void *value, size_t len)
{
    EVP_DigestUpdate(h, name, strlen(name) + 1);
    EVP_DigestUpdate(h, value, len);
    EVP_DigestUpdate(h, "", 1);
}

static int cmp_file(const void *a, const void *b)
{
    const struct build_bundle_file *fa = *(const struct build_bundle_file *const *)a;
    const struct build_bundle_file *fb = *(const struct build_bundle_file *const *)b;
    return build_utf16_cmp(fa->path, fb->path);
}

int build_tag_compute(const struct build_bundle *b, const struct build_depkey *k,
                      const struct build_tag_input *in, char *out, struct telo_err *err)
{
    if (in == NULL || in->base_image == NULL || in->telo_registry_url == NULL || k == NULL)
        return telo_err_set(err, TELO_EINVAL,
                            "image tag: the base image and the telo registry URL are required");
    const struct build_bundle_file **files = NULL;
    size_t nfiles = k->full_content_fallback && b != NULL ? b->nfiles : 0;
    if (nfiles > 0) {
        files = malloc(nfiles * sizeof(const struct build_bundle_file *));
        if (files == NULL)
            return telo_err_set(err, TELO_ENOMEM, "image tag: out of memory");
        for (size_t i = 0; i < nfiles; i++)
            files[i] = &b->files[i];
        qsort(files, nfiles, sizeof(const struct build_bundle_file *), cmp_file);
    }
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    if (h == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h);
        free(files);
        return telo_err_set(err, TELO_ENOMEM, "image tag: cannot start sha256");
    }
    /* A record is "<name>\0<value>\0"; the reference concatenates them the same way. */
    record(h, "base", in->base_image, strlen(in->base_image));
    if (in->base_digest != NULL && in->base_digest[0] != '\0')
        record(h, "base-digest", in->base_digest, strlen(in->base_digest));
    record(h, "telo-registry", in->telo_registry_url, strlen(in->telo_registry_url));
    for (size_t i = 0; i < k->nimports; i++)
        record(h, "import", k->imports[i], strlen(k->imports[i]));
    for (size_t i = 0; i < k->ncontrollers; i++)
        record(h, "controller", k->controllers[i], strlen(k->controllers[i]));
    for (size_t i = 0; i < nfiles; i++) {
        record(h, "file", files[i]->path, strlen(files[i]->path));
        EVP_DigestUpdate(h, files[i]->data, files[i]->len);
        EVP_DigestUpdate(h, "", 1);
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(h, md, &mdlen);
    EVP_MD_CTX_free(h);
    free(files);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < BUILD_TAG_LEN / 2; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[BUILD_TAG_LEN] = '\0';
    return 0;
}

int build_tag_for_bundle(const struct build_bundle *b, const struct build_tag_input *in, char *out,
                         struct build_depkey **key_out, struct telo_err *err)
{
    if (key_out != NULL)
        *key_out = NULL;
    struct build_depkey *k = NULL;
    int rc = build_depkey_extract(b, &k, err);
    if (rc != 0)
        return rc;
    rc = build_tag_compute(b, k, in, out, err);
    if (rc == 0 && key_out != NULL)
        *key_out = k;
    else
        build_depkey_free(k);
    return rc;
}

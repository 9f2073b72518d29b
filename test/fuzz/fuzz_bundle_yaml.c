/* libFuzzer target: the bundle YAML reader of pkg/imagebuild/depkey.c. Each input is split into
 * files at "\n#--8<--\n" lines. Whatever the input, the reader must not crash, leak or go past its
 * budget; and where the input fits the budget and has no recursive alias, the key (imports,
 * controllers, fallback and its reason) must be exactly what libyaml's document loader gave
 * before the reader moved to events: that loader-based extraction is kept below as the oracle
 * (verbatim but for the core schema's scalar resolution, imagebuild/yamlcore.h, which both
 * share: what it decides is checked by test_depkey's table, not by this oracle). */
#include "fuzz_text.h"
#include "imagebuild/bundle.h"
#include "imagebuild/depkey.h"
#include "imagebuild/yamlcore.h"
#include "util/strmap.h"

#include <yaml.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Past this many keys a mapping's duplicate check uses a hash map instead of pairs. */
#define SMALL_MAPPING 16

struct build_depkey;

/* ---- the oracle: the loader-based reader of pkg/imagebuild/depkey.c before the event reader ----
 */

/* A scalar holding a NUL byte: the reader takes it for neither a key nor a string (the key
 * holds C strings) and falls back to the files' bytes at its place. */
static int has_nul(const yaml_node_t *n)
{
    return n != NULL && n->type == YAML_SCALAR_NODE &&
           memchr(n->data.scalar.value, '\0', n->data.scalar.length) != NULL;
}

/* The scalar's text when the node is a scalar that toJS() turns into a string, else NULL. */
static const char *string_value(yaml_node_t *node)
{
    if (node == NULL || node->type != YAML_SCALAR_NODE || has_nul(node))
        return NULL;
    const char *tag = (const char *)node->tag;
    if (tag != NULL && strncmp(tag, "tag:yaml.org,2002:", 18) == 0 &&
        strcmp(tag, YAML_STR_TAG) != 0)
        return NULL; /* !!int, !!null, ... */
    const char *v = (const char *)node->data.scalar.value;
    if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        !build_yaml_plain_is_string(v, node->data.scalar.length))
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
        if (k != NULL && k->type == YAML_SCALAR_NODE && !has_nul(k) &&
            strcmp((const char *)k->data.scalar.value, key) == 0)
            found = yaml_document_get_node(doc, p->value);
    }
    return found;
}

/* ---- collection ---- */

/* Every value as it comes, duplicates too: sort_unique leaves each once at the end. Not the
 * reader's hash set, so a bug in that does not hide in both. */
struct set {
    char **items;
    size_t n, cap;
};

static int set_add(struct set *s, const char *v)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap == 0 ? 8 : s->cap * 2;
        char **ni = realloc(s->items, ncap * sizeof(*ni));
        if (ni == NULL)
            return -TELO_ENOMEM;
        s->items = ni;
        s->cap = ncap;
    }
    char *copy = strdup(v);
    if (copy == NULL)
        return -TELO_ENOMEM;
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
            if (k == NULL || k->type != YAML_SCALAR_NODE || has_nul(k))
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
                    if (qk != NULL && qk->type == YAML_SCALAR_NODE && !has_nul(qk) &&
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
    /* Nodes are in the order their events came, as the reader meets them; a scalar document
     * declares nothing, whatever it holds. */
    yaml_node_t *top = yaml_document_get_root_node(doc);
    for (yaml_node_t *n = doc->nodes.start; n < doc->nodes.top; n++) {
        if (n != top && has_nul(n)) {
            fallback(c, path, n->start_mark.line + 1, n->start_mark.column + 1,
                     "a scalar holding a NUL byte (the dependency key cannot hold it)");
            break;
        }
    }
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

static int old_collect_file(struct collect *c, const struct build_bundle_file *f)
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
}

/* ---- the target ---- */

static int cmp_plain(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The reader met a NUL scalar in a document the loader could not load (a syntax error after
 * it): the loader never saw the scalar, so its first cause is the error, in the same file. */
static int nul_before_a_load_error(const char *reader, const char *loader)
{
    static const char nul[] = "a scalar holding a NUL byte";
    const char *colon = strchr(reader, ':');
    return strstr(reader, nul) != NULL && strstr(loader, nul) == NULL && colon != NULL &&
           strncmp(reader, loader, (size_t)(colon - reader) + 1) == 0;
}

static void sort_unique(struct set *s)
{
    if (s->n < 2)
        return;
    qsort(s->items, s->n, sizeof(char *), cmp_plain);
    size_t kept = 1;
    for (size_t i = 1; i < s->n; i++) {
        if (strcmp(s->items[i], s->items[kept - 1]) == 0)
            free(s->items[i]);
        else
            s->items[kept++] = s->items[i];
    }
    s->n = kept;
}

#define SEP       "\n#--8<--\n"
#define MAX_FILES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64 * 1024)
        return 0;
    struct build_bundle_file files[MAX_FILES];
    struct build_bundle b = {.files = files};
    char *text = fuzz_text(data, size);
    if (text == NULL)
        return 0;
    size_t at = 0;
    while (b.nfiles < MAX_FILES) {
        const char *next = b.nfiles + 1 < MAX_FILES ? strstr(text + at, SEP) : NULL;
        size_t end = next != NULL ? (size_t)(next - text) : size;
        struct build_bundle_file *f = &files[b.nfiles];
        char path[32];
        snprintf(path, sizeof(path), "f%zu.yaml", b.nfiles);
        f->path = strdup(path);
        f->len = end - at;
        f->data = malloc(f->len + 1);
        memcpy(f->data, text + at, f->len);
        f->data[f->len] = '\0';
        b.nfiles++;
        if (next == NULL)
            break;
        at = end + strlen(SEP);
    }
    free(text);

    /* A small budget, so the fuzzer reaches every limit with small inputs. */
    struct build_yaml_budget budget = {.max_nodes = 2000,
                                       .max_bundle_nodes = 5000,
                                       .max_depth = 20,
                                       .max_aliases = 50,
                                       .max_scalar = 4096,
                                       .max_file_bytes = 32 * 1024,
                                       .max_bundle_bytes = 48 * 1024};
    struct build_depkey *k = NULL;
    struct telo_err err;
    telo_err_clear(&err);
    int rc = build_depkey_extract_budget(&b, &budget, &k, &err);
    if (rc != 0 && (k != NULL || err.msg[0] == '\0'))
        abort();
    if (rc == -TELO_ETOOBIG && strstr(err.msg, "(the limit") == NULL)
        abort();
    if (rc == 0) {
        /* The oracle composes whole documents: only inputs the budget admits reach it. */
        struct collect c = {0};
        c.key = calloc(1, sizeof(*c.key));
        int orc = 0;
        for (size_t i = 0; orc == 0 && i < b.nfiles; i++)
            orc = old_collect_file(&c, &b.files[i]);
        if (orc != 0)
            abort();
        sort_unique(&c.imports);
        sort_unique(&c.controllers);
        char **imports = k->nimports ? malloc(k->nimports * sizeof(char *)) : NULL;
        char **controllers = k->ncontrollers ? malloc(k->ncontrollers * sizeof(char *)) : NULL;
        for (size_t i = 0; i < k->nimports; i++)
            imports[i] = k->imports[i];
        for (size_t i = 0; i < k->ncontrollers; i++)
            controllers[i] = k->controllers[i];
        if (k->nimports > 1)
            qsort(imports, k->nimports, sizeof(char *), cmp_plain);
        if (k->ncontrollers > 1)
            qsort(controllers, k->ncontrollers, sizeof(char *), cmp_plain);
        int same = c.imports.n == k->nimports && c.controllers.n == k->ncontrollers &&
                   c.key->full_content_fallback == k->full_content_fallback &&
                   (strcmp(c.key->fallback_reason, k->fallback_reason) == 0 ||
                    nul_before_a_load_error(k->fallback_reason, c.key->fallback_reason));
        for (size_t i = 0; same && i < k->nimports; i++)
            same = strcmp(imports[i], c.imports.items[i]) == 0;
        for (size_t i = 0; same && i < k->ncontrollers; i++)
            same = strcmp(controllers[i], c.controllers.items[i]) == 0;
        if (!same) {
            fprintf(stderr, "event reader: %zu imports, %zu controllers, fallback %d '%s'\n",
                    k->nimports, k->ncontrollers, k->full_content_fallback, k->fallback_reason);
            fprintf(stderr, "loader:       %zu imports, %zu controllers, fallback %d '%s'\n",
                    c.imports.n, c.controllers.n, c.key->full_content_fallback,
                    c.key->fallback_reason);
            abort();
        }
        free(imports);
        free(controllers);
        set_release(&c.imports);
        set_release(&c.controllers);
        free(c.key);
        build_depkey_free(k);
    }
    for (size_t i = 0; i < b.nfiles; i++) {
        free(files[i].path);
        free(files[i].data);
    }
    return 0;
}

/* The dependency key of a bundle and the image tag derived from it, as the reference runner
 * computes them (telorun/telo runner-core extractDependencyKey, k8s-runner computeImageTag). */
#include "imagebuild/depkey.h"

#include "imagebuild/yamlcore.h"
#include "util/strmap.h"

#include <openssl/evp.h>
#include <yaml.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The default budgets of struct build_yaml_budget. */
#define DEFAULT_MAX_NODES        ((size_t)100000)
#define DEFAULT_MAX_BUNDLE_NODES ((size_t)1000000)
#define DEFAULT_MAX_DEPTH        ((size_t)100)
#define DEFAULT_MAX_ALIASES      ((size_t)1000)
#define DEFAULT_MAX_SCALAR       ((size_t)1 << 20)
#define DEFAULT_MAX_FILE_BYTES   ((size_t)16 << 20)
#define DEFAULT_MAX_BUNDLE_BYTES ((size_t)32 << 20)

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

/* The scalar's text when a scalar (tag as the event gives it, NULL or "!" when untagged; style;
 * value of len bytes) is one that toJS() turns into a string, else NULL. */
static const char *scalar_string(const char *tag, yaml_scalar_style_t style, const char *v,
                                 size_t len)
{
    /* libyaml's loader gives an untagged or "!" scalar the str tag: the same here. */
    if (tag != NULL && strcmp(tag, "!") != 0 && strncmp(tag, "tag:yaml.org,2002:", 18) == 0 &&
        strcmp(tag, YAML_STR_TAG) != 0)
        return NULL; /* !!int, !!null, ... */
    if (style == YAML_PLAIN_SCALAR_STYLE && !build_yaml_plain_is_string(v, len))
        return NULL;
    return v;
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
    struct build_yaml_budget budget;
    size_t bundle_nodes, bundle_bytes; /* over the files read so far */
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

/* ---- the YAML event reader ----
 *
 * Each file is read as a stream of libyaml events, never composed into a document: a file costs
 * the parser's bounded lookahead, one frame per open collection, and what a use of a node can
 * need later (its "summary"), only for nodes near the root and anchored nodes. An alias is a
 * pointer to its anchor's summary, never a copy, and its expansion is counted against the node
 * budget, so neither a huge flow sequence, deep nesting nor an alias bomb costs more than the
 * budget. What a document declares is taken only at its end, so a document cut by a syntax
 * error contributes nothing, as with libyaml's loader, whose answers this reproduces. */

enum sum_type { SUM_SCALAR, SUM_SEQUENCE, SUM_MAPPING };

/* For one child of a collection (a mapping's values): what the key needs of it. */
struct child_value {
    const char *str; /* its string value (a controller, or an import written as a string) */
    const char *src; /* str, else the string value of its `source` (an import as a mapping) */
};

/* What a later use of a node needs to know. Strings point into the document's kept scalars. */
struct sum {
    enum sum_type type;
    int open;                 /* a collection whose end has not come: an alias to it is recursive */
    const char *text;         /* scalar: the value as written (keys compare it) */
    const char *str;          /* scalar: the value when toJS() makes it a string, else NULL */
    yaml_mark_t mark;         /* where the node starts (anchor included) */
    const char *source;       /* mapping: the string value of its last `source` key, or NULL */
    size_t expanded;          /* nodes once aliases are expanded, saturating past the budget */
    struct child_value *vals; /* per child, kept for collections that may be used */
    size_t nvals, capvals;
    struct sum *next; /* the document's kept summaries */
};

#define SMALL_KEYS 16

/* An open collection. */
struct frame {
    struct sum *sum; /* kept (a root value, or anchored) or &own */
    struct sum own;
    int is_map;
    int want;        /* keep per-child values in sum->vals */
    int expect_key;  /* mapping: the next child is a key */
    const char *key; /* mapping: the current pair's key as written, or NULL (not a scalar) */
    const char *small[SMALL_KEYS];
    size_t nsmall;
    struct strmap *keys; /* past SMALL_KEYS keys */
    size_t ordinal;      /* the loader's node number: duplicates are reported in its order */
    int has_dup;
};

struct reader {
    struct collect *c;
    const struct build_yaml_budget *b;
    const char *path;
    struct telo_err *err;
    struct frame *stack; /* b->max_depth frames */
    size_t depth;
    /* per document */
    struct strmap *anchors;
    char **kept; /* scalar values and anchor names taken from events */
    size_t nkept, capkept;
    struct sum *sums;
    size_t node_index;
    struct sum *root_kind, *root_imports, *root_controllers, *root_local_path;
    int dup;
    size_t dup_ordinal;
    yaml_mark_t dup_mark;
    const char *dup_name;
    /* per file */
    size_t nodes, aliases;
};

/* The reader stops a file without an error: a composer error (the fallback is set). */
#define STOP_FILE 1

static size_t sat_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static int keep(struct reader *r, char *s)
{
    if (r->nkept == r->capkept) {
        size_t ncap = r->capkept ? r->capkept * 2 : 64;
        char **nk = realloc(r->kept, ncap * sizeof(*nk));
        if (nk == NULL)
            return -1;
        r->kept = nk;
        r->capkept = ncap;
    }
    r->kept[r->nkept++] = s;
    return 0;
}

static struct sum *sum_new(struct reader *r)
{
    struct sum *s = calloc(1, sizeof(*s));
    if (s != NULL) {
        s->next = r->sums;
        r->sums = s;
    }
    return s;
}

static void frame_release(struct frame *f)
{
    strmap_free(f->keys);
    f->keys = NULL;
    if (f->sum == &f->own)
        free(f->own.vals);
}

/* Forgets the document: its anchors, kept strings, summaries and open frames. */
static void doc_reset(struct reader *r)
{
    while (r->depth > 0)
        frame_release(&r->stack[--r->depth]);
    strmap_free(r->anchors);
    r->anchors = NULL;
    for (size_t i = 0; i < r->nkept; i++)
        free(r->kept[i]);
    r->nkept = 0;
    for (struct sum *s = r->sums, *next; s != NULL; s = next) {
        next = s->next;
        free(s->vals);
        free(s);
    }
    r->sums = NULL;
    r->node_index = 0;
    r->root_kind = r->root_imports = r->root_controllers = r->root_local_path = NULL;
    r->dup = 0;
    r->dup_name = NULL;
}

static int enomem(struct reader *r)
{
    return telo_err_set(r->err, TELO_ENOMEM, "out of memory reading the bundle's manifests");
}

/* One more node (a scalar, a collection or an alias) against the file's and the bundle's
 * budgets. */
static int count_node(struct reader *r)
{
    r->nodes++;
    r->c->bundle_nodes++;
    if (r->nodes > r->b->max_nodes)
        return telo_err_set(r->err, TELO_ETOOBIG,
                            "bundle file %s: more than %zu YAML nodes (the limit of a file)",
                            r->path, r->b->max_nodes);
    if (r->c->bundle_nodes > r->b->max_bundle_nodes)
        return telo_err_set(r->err, TELO_ETOOBIG,
                            "bundle file %s: more than %zu YAML nodes in the bundle's files "
                            "together (the limit of a bundle)",
                            r->path, r->b->max_bundle_nodes);
    return 0;
}

static int key_seen(struct frame *f, const char *key)
{
    if (f->keys != NULL)
        return strmap_get(f->keys, key) != NULL;
    for (size_t i = 0; i < f->nsmall; i++)
        if (strcmp(f->small[i], key) == 0)
            return 1;
    return 0;
}

static int key_add(struct frame *f, const char *key)
{
    if (f->keys == NULL && f->nsmall < SMALL_KEYS) {
        f->small[f->nsmall++] = key;
        return 0;
    }
    if (f->keys == NULL) {
        f->keys = strmap_new();
        if (f->keys == NULL)
            return -1;
        for (size_t i = 0; i < f->nsmall; i++)
            if (strmap_put(f->keys, f->small[i], (void *)f->small[i]) != 0)
                return -1;
    }
    return strmap_put(f->keys, key, (void *)key);
}

static int push_value(struct sum *s, const struct sum *child)
{
    if (s->nvals == s->capvals) {
        size_t ncap = s->capvals ? s->capvals * 2 : 8;
        struct child_value *nv = realloc(s->vals, ncap * sizeof(*nv));
        if (nv == NULL)
            return -1;
        s->vals = nv;
        s->capvals = ncap;
    }
    s->vals[s->nvals].str = child->str;
    s->vals[s->nvals].src = child->str != NULL ? child->str : child->source;
    s->nvals++;
    return 0;
}

/* child (a scalar, a closed collection or an alias's anchor) is the next child of the open
 * collection at the top of the stack. */
static int add_child(struct reader *r, const struct sum *child)
{
    size_t at = r->depth - 1;
    struct frame *f = &r->stack[at];
    f->sum->expanded = sat_add(f->sum->expanded, child->expanded);
    if (f->sum->expanded > r->b->max_expanded)
        return telo_err_set(r->err, TELO_ETOOBIG,
                            "bundle file %s: line %zu column %zu: more than %zu YAML nodes once "
                            "aliases are expanded (the limit of a document)",
                            r->path, f->sum->mark.line + 1, f->sum->mark.column + 1,
                            r->b->max_expanded);
    if (f->is_map && f->expect_key) {
        f->expect_key = 0;
        f->key = child->type == SUM_SCALAR ? child->text : NULL;
        if (f->key == NULL)
            return 0;
        if (key_seen(f, f->key)) {
            /* The loader's check reports the first mapping in node order, and in it the first
             * key that repeats one before it. */
            if (!f->has_dup && (!r->dup || f->ordinal < r->dup_ordinal)) {
                r->dup = 1;
                r->dup_ordinal = f->ordinal;
                r->dup_mark = child->mark;
                r->dup_name = f->key;
            }
            f->has_dup = 1;
            return 0;
        }
        return key_add(f, f->key) == 0 ? 0 : enomem(r);
    }
    if (f->want && push_value(f->sum, child) != 0)
        return enomem(r);
    if (!f->is_map)
        return 0;
    f->expect_key = 1;
    if (f->key == NULL)
        return 0;
    /* As toJS, the last of equal keys wins (a duplicate falls back anyway). */
    if (strcmp(f->key, "source") == 0)
        f->sum->source = child->str;
    if (at == 0) {
        /* The root mapping's values are kept summaries (see node_sum). */
        struct sum *kept = (struct sum *)child;
        if (strcmp(f->key, "kind") == 0)
            r->root_kind = kept;
        else if (strcmp(f->key, "imports") == 0)
            r->root_imports = kept;
        else if (strcmp(f->key, "controllers") == 0)
            r->root_controllers = kept;
        else if (strcmp(f->key, "local_path") == 0)
            r->root_local_path = kept;
    }
    return 0;
}

/* A node's summary: kept when an alias may use it later or when it is a value of the root
 * (the document's end reads those), else the caller's scratch. */
static struct sum *node_sum(struct reader *r, const char *anchor, struct sum *scratch)
{
    if (anchor == NULL && r->depth != 1) {
        memset(scratch, 0, sizeof(*scratch));
        return scratch;
    }
    return sum_new(r);
}

/* Registers anchor (taken from the event: the reader frees it) for s. Returns 0, STOP_FILE
 * after the loader's composer error for a repeated anchor, or a negative code. */
static int anchor_add(struct reader *r, char *anchor, struct sum *s)
{
    if (anchor == NULL)
        return 0;
    if (keep(r, anchor) != 0) {
        free(anchor);
        return enomem(r);
    }
    if (r->anchors == NULL && (r->anchors = strmap_new()) == NULL)
        return enomem(r);
    if (strmap_get(r->anchors, anchor) != NULL) {
        fallback(r->c, r->path, s->mark.line + 1, s->mark.column + 1, "second occurrence");
        return STOP_FILE;
    }
    return strmap_put(r->anchors, anchor, s) == 0 ? 0 : enomem(r);
}

static int depth_error(struct reader *r, const yaml_mark_t *m)
{
    return telo_err_set(r->err, TELO_ETOOBIG,
                        "bundle file %s: line %zu column %zu: collections nested deeper than %zu "
                        "levels (the limit)",
                        r->path, m->line + 1, m->column + 1, r->b->max_depth);
}

static int on_scalar(struct reader *r, yaml_event_t *ev)
{
    int rc = count_node(r);
    if (rc != 0)
        return rc;
    r->node_index++;
    size_t len = ev->data.scalar.length;
    if (len > r->b->max_scalar)
        return telo_err_set(r->err, TELO_ETOOBIG,
                            "bundle file %s: line %zu column %zu: a scalar of more than %zu bytes "
                            "(the limit)",
                            r->path, ev->start_mark.line + 1, ev->start_mark.column + 1,
                            r->b->max_scalar);
    if (r->depth == 0)
        return 0; /* a scalar document declares nothing */
    char *value = (char *)ev->data.scalar.value;
    ev->data.scalar.value = NULL;
    if (keep(r, value) != 0) {
        free(value);
        return enomem(r);
    }
    struct sum scratch;
    struct sum *s = node_sum(r, (const char *)ev->data.scalar.anchor, &scratch);
    if (s == NULL)
        return enomem(r);
    s->type = SUM_SCALAR;
    if (memchr(value, '\0', len) == NULL) {
        s->text = value;
        s->str =
            scalar_string((const char *)ev->data.scalar.tag, ev->data.scalar.style, value, len);
    } else {
        /* A NUL ("pkg/x@1\0anything" in double quotes) would cut the value short here, so two
         * bundles the reference keys apart would share a tag and an image. The key holds C
         * strings, so such a scalar is neither a key nor a value of it, and every file's bytes
         * go into the tag instead, as for any file the key cannot describe. */
        fallback(r->c, r->path, ev->start_mark.line + 1, ev->start_mark.column + 1,
                 "a scalar holding a NUL byte (the dependency key cannot hold it)");
    }
    s->mark = ev->start_mark;
    s->expanded = 1;
    char *anchor = (char *)ev->data.scalar.anchor;
    ev->data.scalar.anchor = NULL;
    rc = anchor_add(r, anchor, s);
    return rc != 0 ? rc : add_child(r, s);
}

static int on_alias(struct reader *r, const yaml_event_t *ev)
{
    int rc = count_node(r);
    if (rc != 0)
        return rc;
    if (++r->aliases > r->b->max_aliases)
        return telo_err_set(r->err, TELO_ETOOBIG,
                            "bundle file %s: more than %zu YAML aliases (the limit of a file)",
                            r->path, r->b->max_aliases);
    const char *name = (const char *)ev->data.alias.anchor;
    struct sum *s = r->anchors != NULL && name != NULL ? strmap_get(r->anchors, name) : NULL;
    if (s == NULL) {
        fallback(r->c, r->path, ev->start_mark.line + 1, ev->start_mark.column + 1,
                 "found undefined alias");
        return STOP_FILE;
    }
    if (s->open)
        return telo_err_set(r->err, TELO_EINVAL,
                            "bundle file %s: line %zu column %zu: an alias to a collection that "
                            "contains it (recursive YAML is refused)",
                            r->path, ev->start_mark.line + 1, ev->start_mark.column + 1);
    return r->depth == 0 ? 0 : add_child(r, s);
}

static int on_start(struct reader *r, yaml_event_t *ev, int is_map)
{
    int rc = count_node(r);
    if (rc != 0)
        return rc;
    if (r->depth >= r->b->max_depth)
        return depth_error(r, &ev->start_mark);
    r->node_index++;
    yaml_char_t **anchor_slot =
        is_map ? &ev->data.mapping_start.anchor : &ev->data.sequence_start.anchor;
    struct frame *f = &r->stack[r->depth];
    memset(f, 0, sizeof(*f));
    f->sum = node_sum(r, (const char *)*anchor_slot, &f->own);
    if (f->sum == NULL)
        return enomem(r);
    r->depth++;
    f->is_map = is_map;
    f->expect_key = is_map;
    /* The root's values (imports, controllers) and anything an alias may stand for keep their
     * children. */
    f->want = f->sum != &f->own;
    f->ordinal = r->node_index;
    f->sum->type = is_map ? SUM_MAPPING : SUM_SEQUENCE;
    f->sum->open = 1;
    f->sum->mark = ev->start_mark;
    f->sum->expanded = 1;
    char *anchor = (char *)*anchor_slot;
    *anchor_slot = NULL;
    return anchor_add(r, anchor, f->sum);
}

static int on_end(struct reader *r)
{
    if (r->depth == 0)
        return 0; /* libyaml balances them; never */
    struct frame *f = &r->stack[--r->depth];
    f->sum->open = 0;
    int rc = r->depth > 0 ? add_child(r, f->sum) : 0;
    frame_release(f);
    return rc;
}

/* The end of a document: what it declares goes into the key. */
static int doc_end(struct reader *r)
{
    if (r->dup) {
        char problem[160];
        snprintf(problem, sizeof(problem), "duplicate key '%.100s'", r->dup_name);
        fallback(r->c, r->path, r->dup_mark.line + 1, r->dup_mark.column + 1, problem);
        return 0;
    }
    const char *kind = r->root_kind != NULL ? r->root_kind->str : NULL;
    if (kind == NULL)
        return 0;
    int rc = 0;
    const struct sum *v = r->root_imports;
    if ((strcmp(kind, "Telo.Application") == 0 || strcmp(kind, "Telo.Library") == 0) && v != NULL &&
        v->type != SUM_SCALAR) {
        /* Object.values(imports): a mapping's values, or a sequence's items; each a string or
         * a mapping with a string `source`. */
        for (size_t i = 0; i < v->nvals && rc == 0; i++)
            if (v->vals[i].src != NULL)
                rc = set_add(&r->c->imports, v->vals[i].src);
    }
    if (strcmp(kind, "Telo.Definition") == 0) {
        v = r->root_controllers;
        if (v != NULL && v->type == SUM_SEQUENCE)
            for (size_t i = 0; i < v->nvals && rc == 0; i++)
                if (v->vals[i].str != NULL)
                    rc = set_add(&r->c->controllers, v->vals[i].str);
        v = r->root_local_path;
        if (v != NULL && v->str != NULL)
            fallback(r->c, r->path, v->mark.line + 1, v->mark.column + 1,
                     "a Telo.Definition with local_path (its controller's source is in the "
                     "bundle)");
    }
    return rc == 0 ? 0 : enomem(r);
}

static int on_event(struct reader *r, yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        doc_reset(r);
        return 0;
    case YAML_DOCUMENT_END_EVENT: {
        int rc = doc_end(r);
        doc_reset(r);
        return rc;
    }
    case YAML_SCALAR_EVENT:
        return on_scalar(r, ev);
    case YAML_ALIAS_EVENT:
        return on_alias(r, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(r, ev, 0);
    case YAML_MAPPING_START_EVENT:
        return on_start(r, ev, 1);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_end(r);
    default:
        return 0;
    }
}

static int collect_file(struct collect *c, const struct build_bundle_file *f, struct frame *stack,
                        struct telo_err *err)
{
    const struct build_yaml_budget *b = &c->budget;
    if (f->len > b->max_file_bytes)
        return telo_err_set(err, TELO_ETOOBIG,
                            "bundle file %s: %zu bytes, more than the %zu read as YAML per file "
                            "(the limit)",
                            f->path, f->len, b->max_file_bytes);
    c->bundle_bytes = sat_add(c->bundle_bytes, f->len);
    if (c->bundle_bytes > b->max_bundle_bytes)
        return telo_err_set(err, TELO_ETOOBIG,
                            "bundle file %s: more than %zu bytes of YAML in the bundle's files "
                            "together (the limit)",
                            f->path, b->max_bundle_bytes);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return telo_err_set(err, TELO_ENOMEM, "out of memory reading the bundle's manifests");
    yaml_parser_set_input_string(&p, f->data, f->len);
    struct reader r = {.c = c, .b = b, .path = f->path, .err = err, .stack = stack};
    int rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            if (p.error == YAML_MEMORY_ERROR) {
                rc = telo_err_set(err, TELO_ENOMEM, "out of memory reading the bundle's manifests");
                break;
            }
            fallback(c, f->path, p.problem_mark.line + 1, p.problem_mark.column + 1,
                     p.problem ? p.problem : "malformed YAML");
            break;
        }
        int end = ev.type == YAML_STREAM_END_EVENT;
        rc = on_event(&r, &ev);
        yaml_event_delete(&ev);
        if (rc == STOP_FILE)
            rc = 0;
        else if (rc == 0 && !end)
            continue;
        break;
    }
    doc_reset(&r);
    free(r.kept);
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

void build_yaml_budget_defaults(struct build_yaml_budget *b)
{
    if (b->max_nodes == 0)
        b->max_nodes = DEFAULT_MAX_NODES;
    if (b->max_expanded == 0)
        b->max_expanded = b->max_nodes;
    if (b->max_bundle_nodes == 0)
        b->max_bundle_nodes = DEFAULT_MAX_BUNDLE_NODES;
    if (b->max_depth == 0)
        b->max_depth = DEFAULT_MAX_DEPTH;
    if (b->max_aliases == 0)
        b->max_aliases = DEFAULT_MAX_ALIASES;
    if (b->max_scalar == 0)
        b->max_scalar = DEFAULT_MAX_SCALAR;
    if (b->max_file_bytes == 0)
        b->max_file_bytes = DEFAULT_MAX_FILE_BYTES;
    if (b->max_bundle_bytes == 0)
        b->max_bundle_bytes = DEFAULT_MAX_BUNDLE_BYTES;
}

int build_depkey_extract_budget(const struct build_bundle *b,
                                const struct build_yaml_budget *budget, struct build_depkey **out,
                                struct telo_err *err)
{
    *out = NULL;
    struct collect c = {0};
    if (budget != NULL)
        c.budget = *budget;
    build_yaml_budget_defaults(&c.budget);
    c.key = calloc(1, sizeof(*c.key));
    c.imports.seen = strmap_new();
    c.controllers.seen = strmap_new();
    struct frame *stack = calloc(c.budget.max_depth, sizeof(*stack));
    int rc = 0;
    if (c.key == NULL || c.imports.seen == NULL || c.controllers.seen == NULL || stack == NULL)
        rc = -TELO_ENOMEM;
    for (size_t i = 0; rc == 0 && b != NULL && i < b->nfiles; i++)
        rc = collect_file(&c, &b->files[i], stack, err);
    free(stack);
    if (rc == -TELO_ENOMEM)
        telo_err_set(err, TELO_ENOMEM, "out of memory reading the bundle's manifests");
    if (rc != 0 || c.key == NULL) {
        set_release(&c.imports);
        set_release(&c.controllers);
        free(c.key);
        return rc;
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

int build_depkey_extract(const struct build_bundle *b, struct build_depkey **out,
                         struct telo_err *err)
{
    return build_depkey_extract_budget(b, NULL, out, err);
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

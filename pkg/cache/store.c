/* The informer cache's store: trimmed objects by key, with secondary indexes. */
#include "cache/store.h"

#include "cache/pack.h"
#include "cache/slab.h"
#include "util/jget.h"
#include "util/strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The objects indexed under one value. Most values index one object or a few (an owner's
 * children), so members start as a small array; a bucket that grows past SMALL_BUCKET (a
 * namespace) switches to a map from object key to object so removal stays O(1). */
#define SMALL_BUCKET 16

struct bucket {
    struct cache_object **small; /* while map is NULL; a block of the store's slab */
    unsigned n, cap;
    unsigned char in_slab; /* the bucket itself is the slab's (malloc's for a huge value) */
    struct strmap *map;
    char value[];
};

struct index {
    struct cache_index_def def;
    struct strmap *buckets; /* value -> struct bucket */
};

struct cache_store {
    struct strmap *objects; /* key -> struct cache_object */
    struct index *indexes;
    size_t nindexes;
    size_t bytes;            /* object payload bytes */
    struct cache_pack *pack; /* every object's text is packed by it */
    struct cache_slab *slab; /* holds the objects up to CACHE_SLAB_MAX bytes */
    unsigned char (*tag)(struct json_object *obj);
    unsigned long long changes; /* puts and deletes */
};

void cache_store_set_tag(struct cache_store *s, unsigned char (*fn)(struct json_object *obj))
{
    s->tag = fn;
}

/* zlib's level 3: with a dictionary it finds longer matches than 1 and 2, so it emits fewer
 * symbols and costs no more (2-4 % fewer instructions a put, 7-10 % fewer bytes); 4 and up search
 * lazily, 20-50 % more instructions for 2-5 % fewer bytes (bench/cache-memory/pack_bench.c). */
#define PACK_LEVEL 3

void cache_index_namespace(struct json_object *obj, const void *arg,
                           void (*emit)(void *ctx, const char *value), void *ctx)
{
    (void)arg;
    const char *ns = jget_string(jget(obj, "metadata"), "namespace");
    emit(ctx, ns ? ns : "");
}

void cache_index_owner_uid(struct json_object *obj, const void *arg,
                           void (*emit)(void *ctx, const char *value), void *ctx)
{
    (void)arg;
    struct json_object *refs = jget_array(jget(obj, "metadata"), "ownerReferences");
    if (refs == NULL)
        return;
    for (size_t i = 0; i < json_object_array_length(refs); i++) {
        const char *uid = jget_string(json_object_array_get_idx(refs, i), "uid");
        if (uid)
            emit(ctx, uid);
    }
}

void cache_index_label(struct json_object *obj, const void *arg,
                       void (*emit)(void *ctx, const char *value), void *ctx)
{
    const char *v = jget_string(jget(jget(obj, "metadata"), "labels"), (const char *)arg);
    if (v != NULL)
        emit(ctx, v);
}

int cache_object_key(struct json_object *obj, char *out, size_t outlen, struct telo_err *err)
{
    const char *name = jget_string(jget(obj, "metadata"), "name");
    const char *ns = jget_string(jget(obj, "metadata"), "namespace");
    if (!name || !*name)
        return telo_err_set(err, TELO_EINVAL, "object has no metadata.name");
    int n =
        (ns && *ns) ? snprintf(out, outlen, "%s/%s", ns, name) : snprintf(out, outlen, "%s", name);
    if (n < 0 || (size_t)n >= outlen)
        return telo_err_set(err, TELO_EINVAL, "object key '%s/%s' is longer than %zu bytes",
                            ns ? ns : "", name, outlen - 1);
    return 0;
}

struct cache_store *cache_store_new(const struct cache_index_def *indexes, size_t nindexes)
{
    struct cache_store *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->objects = strmap_new();
    s->indexes = calloc(nindexes ? nindexes : 1, sizeof(*s->indexes));
    s->pack = cache_pack_new(PACK_LEVEL);
    s->slab = cache_slab_new();
    if (!s->objects || !s->indexes || !s->pack || !s->slab) {
        cache_store_free(s);
        return NULL;
    }
    for (size_t i = 0; i < nindexes; i++) {
        s->indexes[i].def = indexes[i];
        s->indexes[i].buckets = strmap_new();
        s->nindexes = i + 1;
        if (!s->indexes[i].buckets) {
            cache_store_free(s);
            return NULL;
        }
    }
    return s;
}

void cache_object_free(struct cache_object *o)
{
    if (o && o->in_slab)
        cache_slab_free(o);
    else
        free(o);
}

struct json_object *cache_object_parse(const struct cache_object *o)
{
    return cache_pack_parse(o->pack, (const unsigned char *)o->data, o->stored_len, o->json_len);
}

/* What malloc adds to every allocation on glibc x86-64, counted so the estimate tracks RSS. */
#define MALLOC_OVERHEAD ((size_t)16)

static size_t object_size(size_t stored_len, size_t key_len, size_t uid_len, size_t rv_len)
{
    return sizeof(struct cache_object) + stored_len + key_len + uid_len + rv_len + 3;
}

static size_t object_bytes(const struct cache_object *o)
{
    size_t size =
        object_size(o->stored_len, strlen(o->key), strlen(o->uid), strlen(o->resource_version));
    return o->in_slab ? cache_slab_block_bytes(size) : size + MALLOC_OVERHEAD;
}

static void bucket_free(struct bucket *b)
{
    cache_slab_free(b->small);
    strmap_free(b->map);
    if (b->in_slab)
        cache_slab_free(b);
    else
        free(b);
}

static size_t bucket_len(const struct bucket *b)
{
    return b->map ? strmap_len(b->map) : b->n;
}

static int bucket_add(struct bucket *b, struct cache_object *o, struct cache_slab *slab)
{
    if (b->map)
        return strmap_put(b->map, o->key, o);
    for (size_t i = 0; i < b->n; i++) {
        if (strcmp(b->small[i]->key, o->key) == 0) {
            b->small[i] = o;
            return 0;
        }
    }
    if (b->n == SMALL_BUCKET) {
        struct strmap *map = strmap_new();
        if (!map)
            return -TELO_ENOMEM;
        for (size_t i = 0; i < b->n; i++) {
            if (strmap_put(map, b->small[i]->key, b->small[i]) < 0) {
                strmap_free(map);
                return -TELO_ENOMEM;
            }
        }
        if (strmap_put(map, o->key, o) < 0) {
            strmap_free(map);
            return -TELO_ENOMEM;
        }
        cache_slab_free(b->small);
        b->small = NULL;
        b->n = b->cap = 0;
        b->map = map;
        return 0;
    }
    if (b->n == b->cap) {
        unsigned cap = b->cap ? b->cap * 2 : 1;
        struct cache_object **small = cache_slab_alloc(slab, cap * sizeof(struct cache_object *));
        if (!small)
            return -TELO_ENOMEM;
        if (b->n)
            memcpy(small, b->small, b->n * sizeof(struct cache_object *));
        cache_slab_free(b->small);
        b->small = small;
        b->cap = cap;
    }
    b->small[b->n++] = o;
    return 0;
}

/* Removes o itself (not another object under the same key, which a replacement may be). */
static void bucket_remove(struct bucket *b, const struct cache_object *o)
{
    if (b->map) {
        if (strmap_get(b->map, o->key) == o)
            strmap_remove(b->map, o->key);
        return;
    }
    for (unsigned i = 0; i < b->n; i++) {
        if (b->small[i] == o) {
            b->small[i] = b->small[--b->n];
            return;
        }
    }
}

static void bucket_each(const struct bucket *b,
                        void (*fn)(void *ctx, const struct cache_object *obj), void *ctx)
{
    if (!b->map) {
        for (size_t i = 0; i < b->n; i++)
            fn(ctx, b->small[i]);
        return;
    }
    struct strmap_iter it = {0};
    const char *key;
    void *obj;
    while (strmap_next(b->map, &it, &key, &obj))
        fn(ctx, obj);
}

static size_t bucket_bytes(const struct bucket *b)
{
    size_t size = sizeof(*b) + strlen(b->value) + 1;
    return (b->in_slab ? cache_slab_block_bytes(size) : size + MALLOC_OVERHEAD) +
           (b->map ? strmap_bytes(b->map) + 2 * MALLOC_OVERHEAD
                   : cache_slab_block_bytes(b->cap * sizeof(struct cache_object *)));
}

void cache_store_free(struct cache_store *s)
{
    if (!s)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    for (size_t i = 0; i < s->nindexes; i++) {
        struct strmap_iter bit = {0};
        while (strmap_next(s->indexes[i].buckets, &bit, &key, &value))
            bucket_free(value);
        strmap_free(s->indexes[i].buckets);
    }
    free(s->indexes);
    if (s->objects) {
        while (strmap_next(s->objects, &it, &key, &value))
            cache_object_free(value);
        strmap_free(s->objects);
    }
    cache_pack_free(s->pack);
    cache_slab_release(s->slab);
    free(s);
}

/* --- index maintenance ------------------------------------------------------------------- */

struct index_op {
    struct index *index;
    struct cache_object *obj;
    struct cache_slab *slab;
    int failed;
};

static void index_insert(void *ctx, const char *value)
{
    struct index_op *op = ctx;
    struct bucket *b = strmap_get(op->index->buckets, value);
    if (!b) {
        size_t len = strlen(value), size = sizeof(*b) + len + 1;
        b = cache_slab_alloc(op->slab, size);
        int in_slab = b != NULL;
        if (!b && size > CACHE_SLAB_MAX)
            b = malloc(size);
        if (!b) {
            op->failed = 1;
            return;
        }
        memset(b, 0, sizeof(*b));
        b->in_slab = (unsigned char)in_slab;
        memcpy(b->value, value, len + 1);
        if (strmap_put(op->index->buckets, b->value, b) < 0) {
            bucket_free(b);
            op->failed = 1;
            return;
        }
    }
    if (bucket_add(b, op->obj, op->slab) < 0)
        op->failed = 1;
}

static void index_remove(void *ctx, const char *value)
{
    struct index_op *op = ctx;
    struct bucket *b = strmap_get(op->index->buckets, value);
    if (!b)
        return;
    bucket_remove(b, op->obj);
    if (bucket_len(b) == 0) {
        strmap_remove(op->index->buckets, b->value);
        bucket_free(b);
    }
}

/* Applies fn for every index value of o, whose parsed form is parsed (or o parsed here). */
static int index_apply(struct cache_store *s, struct cache_object *o, struct json_object *parsed,
                       void (*fn)(void *ctx, const char *value))
{
    if (s->nindexes == 0)
        return 0;
    struct json_object *obj = parsed ? parsed : cache_object_parse(o);
    if (!obj)
        return -TELO_ENOMEM;
    int failed = 0;
    for (size_t i = 0; i < s->nindexes; i++) {
        struct index_op op = {.index = &s->indexes[i], .obj = o, .slab = s->slab};
        s->indexes[i].def.fn(obj, s->indexes[i].def.arg, fn, &op);
        failed |= op.failed;
    }
    if (!parsed)
        json_object_put(obj);
    return failed ? -TELO_ENOMEM : 0;
}

/* Takes o out of every bucket that holds it, which must not fail: the caller frees o next, and a
 * bucket left pointing at it would hand a freed object to the next lookup. Its values come from
 * its parsed text (parsed, or parsed here); when that parse fails (out of memory), every bucket
 * of every index is searched for o instead. */
static void index_unlink(struct cache_store *s, struct cache_object *o, struct json_object *parsed)
{
    if (index_apply(s, o, parsed, index_remove) == 0)
        return;
    for (size_t i = 0; i < s->nindexes; i++) {
        struct strmap_iter it = {0};
        const char *value;
        void *b;
        while (strmap_next(s->indexes[i].buckets, &it, &value, &b)) {
            bucket_remove(b, o);
            if (bucket_len(b) == 0) {
                /* Removing the entry just yielded is allowed during iteration. */
                strmap_remove(s->indexes[i].buckets, value);
                bucket_free(b);
            }
        }
    }
}

/* Copies s (NULL as "") to *cursor and advances it; returns the copy. */
static const char *copy_string(char **cursor, const char *s, size_t len)
{
    char *out = *cursor;
    if (len)
        memcpy(out, s, len);
    out[len] = '\0';
    *cursor += len + 1;
    return out;
}

int cache_store_put(struct cache_store *s, struct json_object *obj, struct cache_object **replaced,
                    const struct cache_object **stored, struct telo_err *err)
{
    char key[512];
    *replaced = NULL;
    int rc = cache_object_key(obj, key, sizeof(key), err);
    if (rc < 0)
        return rc;
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    if (!text)
        return telo_err_oom(err, "serializing an object to cache");
    const unsigned char *packed;
    size_t packed_len;
    rc = cache_pack_deflate(s->pack, text, len, &packed, &packed_len, err);
    if (rc < 0) {
        (void)telo_err_wrap(err, "caching %s", key);
        return rc;
    }
    const char *uid = jget_string(jget(obj, "metadata"), "uid");
    const char *rv = jget_string(jget(obj, "metadata"), "resourceVersion");
    size_t key_len = strlen(key), uid_len = uid ? strlen(uid) : 0, rv_len = rv ? strlen(rv) : 0;
    size_t size = object_size(packed_len, key_len, uid_len, rv_len);
    struct cache_object *o = cache_slab_alloc(s->slab, size);
    int in_slab = o != NULL;
    if (!o && size > CACHE_SLAB_MAX)
        o = malloc(size);
    if (!o)
        goto nomem;
    o->in_slab = (unsigned char)in_slab;
    memcpy(o->data, packed, packed_len);
    char *cursor = o->data + packed_len;
    o->key = copy_string(&cursor, key, key_len);
    o->uid = copy_string(&cursor, uid, uid_len);
    o->resource_version = copy_string(&cursor, rv, rv_len);
    o->pack = s->pack;
    o->json_len = (unsigned)len;
    o->stored_len = (unsigned)packed_len;
    o->stale = 0;
    o->tag = s->tag ? s->tag(obj) : 0;

    struct cache_object *old = strmap_get(s->objects, key);
    if (strmap_put(s->objects, o->key, o) < 0)
        goto nomem;
    if (old) {
        index_unlink(s, old, NULL);
        s->bytes -= object_bytes(old);
    }
    if (index_apply(s, o, obj, index_insert) < 0) {
        /* Roll back to the old object so the store stays as it was. */
        index_unlink(s, o, obj);
        if (old) {
            (void)strmap_put(s->objects, old->key, old);
            (void)index_apply(s, old, NULL, index_insert);
            s->bytes += object_bytes(old);
        } else {
            strmap_remove(s->objects, o->key);
        }
        cache_object_free(o);
        return telo_err_set(err, TELO_ENOMEM, "out of memory indexing %s", key);
    }
    s->bytes += object_bytes(o);
    s->changes++;
    *replaced = old;
    if (stored)
        *stored = o;
    return 0;
nomem:
    cache_object_free(o);
    return telo_err_set(err, TELO_ENOMEM, "out of memory caching %s", key);
}

struct cache_object *cache_store_delete(struct cache_store *s, const char *key)
{
    struct cache_object *o = strmap_remove(s->objects, key);
    if (!o)
        return NULL;
    index_unlink(s, o, NULL);
    s->bytes -= object_bytes(o);
    s->changes++;
    return o;
}

const struct cache_object *cache_store_get(const struct cache_store *s, const char *key)
{
    return strmap_get(s->objects, key);
}

size_t cache_store_len(const struct cache_store *s)
{
    return strmap_len(s->objects);
}

unsigned long long cache_store_changes(const struct cache_store *s)
{
    return s->changes;
}

int cache_store_by_index(const struct cache_store *s, const char *index, const char *value,
                         void (*fn)(void *ctx, const struct cache_object *obj), void *ctx,
                         struct telo_err *err)
{
    for (size_t i = 0; i < s->nindexes; i++) {
        if (strcmp(s->indexes[i].def.name, index) != 0)
            continue;
        struct bucket *b = strmap_get(s->indexes[i].buckets, value);
        if (!b)
            return 0;
        bucket_each(b, fn, ctx);
        return (int)bucket_len(b);
    }
    return telo_err_set(err, TELO_EINVAL, "the store has no index named '%s'", index);
}

void cache_store_each(const struct cache_store *s,
                      void (*fn)(void *ctx, const struct cache_object *obj), void *ctx)
{
    struct strmap_iter it = {0};
    const char *key;
    void *obj;
    while (strmap_next(s->objects, &it, &key, &obj))
        fn(ctx, obj);
}

void cache_store_mark_stale(struct cache_store *s)
{
    struct strmap_iter it = {0};
    const char *key;
    void *obj;
    while (strmap_next(s->objects, &it, &key, &obj))
        ((struct cache_object *)obj)->stale = 1;
}

size_t cache_store_sweep_stale(struct cache_store *s,
                               void (*fn)(void *ctx, struct cache_object *obj), void *ctx)
{
    size_t n = 0;
    struct strmap_iter it = {0};
    const char *key;
    void *obj;
    while (strmap_next(s->objects, &it, &key, &obj)) {
        if (!((struct cache_object *)obj)->stale)
            continue;
        /* Removing the entry just yielded is allowed during iteration. */
        struct cache_object *o = cache_store_delete(s, key);
        n++;
        fn(ctx, o);
    }
    return n;
}

size_t cache_store_bytes(const struct cache_store *s)
{
    size_t bytes =
        s->bytes + strmap_bytes(s->objects) + MALLOC_OVERHEAD + cache_pack_bytes(s->pack);
    for (size_t i = 0; i < s->nindexes; i++) {
        bytes += strmap_bytes(s->indexes[i].buckets);
        struct strmap_iter it = {0};
        const char *key;
        void *value;
        while (strmap_next(s->indexes[i].buckets, &it, &key, &value)) {
            bytes += bucket_bytes(value);
        }
    }
    return bytes;
}

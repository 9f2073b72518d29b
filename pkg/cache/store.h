/* The informer cache's store: trimmed objects by key, with secondary indexes. */
#ifndef TELO_CACHE_STORE_H
#define TELO_CACHE_STORE_H

#include "util/err.h"

#include <json.h>
#include <stddef.h>

/* One cached object. The store keeps a compact JSON text of the (already trimmed) object rather
 * than a parsed tree: a json-c tree costs several times its text in memory, and a reconciler
 * parses only the few objects it reads. The text itself is deflated against the store's
 * dictionary (cache/pack.h) to 10-30 % of its size; read it with cache_object_parse. */
struct cache_pack;

struct cache_object {
    const char *key;              /* "namespace/name", or "name" for cluster-scoped objects */
    const char *uid;              /* metadata.uid, or "" */
    const char *resource_version; /* metadata.resourceVersion, or "" */
    /* The store's pack, which inflates the text: a pointer in every object so that whoever holds
     * one (an event handler, an index visitor) can read it without the store. */
    struct cache_pack *pack;
    unsigned json_len;     /* bytes of the JSON text */
    unsigned stored_len;   /* bytes it takes in data: json_len when kept as it is, else fewer */
    unsigned char stale;   /* set while a relist runs, cleared when the list has the object again */
    unsigned char tag;     /* the store's tag function's value for the object (0 without one): a
                            * count over the store (sessions by phase) reads it without parsing */
    unsigned char in_slab; /* the block is the store's slab's, not malloc's */
    char data[]; /* one block (the store's slab's, or malloc's when large) holds the stored text,
                     then the strings above: block overhead counts per object */
};

/* The object o as a new tree the caller json_object_put()s, or NULL when out of memory. o's store
 * must not have been freed (handlers see replaced and deleted objects while it lives). */
struct json_object *cache_object_parse(const struct cache_object *o);

/* An index function calls emit(ctx, value) once for every value obj is indexed under. */
struct cache_index_def {
    const char *name;
    void (*fn)(struct json_object *obj, const void *arg, void (*emit)(void *ctx, const char *value),
               void *ctx);
    const void *arg;
};

/* Built-in index functions. */
/* metadata.namespace ("" for cluster-scoped objects). */
void cache_index_namespace(struct json_object *obj, const void *arg,
                           void (*emit)(void *ctx, const char *value), void *ctx);
/* Every metadata.ownerReferences[].uid. */
void cache_index_owner_uid(struct json_object *obj, const void *arg,
                           void (*emit)(void *ctx, const char *value), void *ctx);
/* The value of the label named by arg (a const char *); objects without it are not indexed. */
void cache_index_label(struct json_object *obj, const void *arg,
                       void (*emit)(void *ctx, const char *value), void *ctx);

/* Returns an empty store with the given indexes (copied; names must be unique), or NULL when out
 * of memory. Free it with cache_store_free. */
struct cache_store *cache_store_new(const struct cache_index_def *indexes, size_t nindexes);

/* Tags every object put from now on with fn(obj), the parsed object (cache_object.tag). */
void cache_store_set_tag(struct cache_store *s, unsigned char (*fn)(struct json_object *obj));

/* Frees the store and every object in it. Accepts NULL. Objects it handed out can still be freed
 * but no longer parsed. */
void cache_store_free(struct cache_store *s);

/* Frees an object handed out by cache_store_put or cache_store_delete. Accepts NULL. */
void cache_object_free(struct cache_object *o);

/* Stores obj (the caller keeps its reference; the store serializes it) under its key, replacing
 * any object there, and clears its stale mark. *replaced receives the object it replaced (the
 * caller frees it with cache_object_free) or NULL when the key is new; *stored (may be NULL)
 * points at the stored object, valid until the next change of that key. Returns 0, -TELO_EINVAL
 * when obj lacks metadata.name, -TELO_ETOOBIG when its text is over INT_MAX bytes, or
 * -TELO_ENOMEM; on failure the store is unchanged. */
int cache_store_put(struct cache_store *s, struct json_object *obj, struct cache_object **replaced,
                    const struct cache_object **stored, struct telo_err *err);

/* Removes the object under key and hands it to the caller (free with cache_object_free); returns
 * NULL when there was none. Cannot fail. */
struct cache_object *cache_store_delete(struct cache_store *s, const char *key);

/* The object under key, or NULL. Valid until the next change of that key. */
const struct cache_object *cache_store_get(const struct cache_store *s, const char *key);

/* Number of objects. */
size_t cache_store_len(const struct cache_store *s);

/* A count of the store's changes (each put and each delete): what was computed from the store
 * still holds while this has not moved. */
unsigned long long cache_store_changes(const struct cache_store *s);

/* Calls fn(ctx, obj) for every object indexed under value in the named index (in no particular
 * order). fn must not change the store. Returns the number of objects visited, or -TELO_EINVAL
 * naming an unknown index. */
int cache_store_by_index(const struct cache_store *s, const char *index, const char *value,
                         void (*fn)(void *ctx, const struct cache_object *obj), void *ctx,
                         struct telo_err *err);

/* Calls fn(ctx, obj) for every object. fn must not change the store. */
void cache_store_each(const struct cache_store *s,
                      void (*fn)(void *ctx, const struct cache_object *obj), void *ctx);

/* Relist support: marks every object stale. A following cache_store_put of an object clears its
 * mark; cache_store_sweep_stale then removes the objects still marked, those that vanished while
 * the watch was down, handing each to fn(ctx, obj) which takes ownership (frees it with
 * cache_object_free). Returns the number removed. */
void cache_store_mark_stale(struct cache_store *s);
size_t cache_store_sweep_stale(struct cache_store *s,
                               void (*fn)(void *ctx, struct cache_object *obj), void *ctx);

/* Bytes held for objects (their compressed texts), indexes and the compressor, for the memory
 * benchmark and metrics. An estimate: malloc's own overhead is counted per object and bucket, not
 * inside the maps and the compressor. */
size_t cache_store_bytes(const struct cache_store *s);

/* The store key of obj ("namespace/name" or "name") into out (size outlen). Returns 0, or
 * -TELO_EINVAL when obj has no metadata.name or the key does not fit. */
int cache_object_key(struct json_object *obj, char *out, size_t outlen, struct telo_err *err);

#endif

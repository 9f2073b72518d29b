/* A hash map from C strings to pointers, with open addressing. */
#ifndef TELO_UTIL_STRMAP_H
#define TELO_UTIL_STRMAP_H

#include <stddef.h>

struct strmap;

/* Position of an iteration; start it zeroed: `struct strmap_iter it = {0};`. */
struct strmap_iter {
    size_t slot;
};

/* Returns an empty map, or NULL when out of memory. Free it with strmap_free. */
struct strmap *strmap_new(void);

/* Frees the map. Keys and values belong to the caller: free them first, iterating, if they need
 * it. Accepts NULL. */
void strmap_free(struct strmap *m);

/* Returns the value stored under key, or NULL. */
void *strmap_get(const struct strmap *m, const char *key);

/* Stores value (not NULL) under key, replacing any value there. The map borrows key: it must stay
 * valid and unchanged while the entry exists (the usual choice is a string inside value). On a
 * replace the map keeps borrowing the NEW key. Returns 0, or -TELO_ENOMEM with the map unchanged.
 */
int strmap_put(struct strmap *m, const char *key, void *value);

/* The value stored under key, or a new one put there: size zeroed bytes followed by room for a
 * copy of key, which is written at byte key_at (a flexible array member at the value's end,
 * key_at <= size) and borrowed by the map as the entry's key. For a map whose values are structs
 * that end in their own key: the caller frees each one with free() once removed. Returns NULL
 * when out of memory, the map unchanged. */
void *strmap_get_or_add(struct strmap *m, const char *key, size_t size, size_t key_at);

/* Removes key's entry and returns its value, or NULL when there was none. Cannot fail. */
void *strmap_remove(struct strmap *m, const char *key);

/* Number of entries. */
size_t strmap_len(const struct strmap *m);

/* Yields the next entry: returns 1 and sets *key and *value, or 0 at the end. Removing the entry
 * just yielded is allowed during an iteration; inserting is not. */
int strmap_next(const struct strmap *m, struct strmap_iter *it, const char **key, void **value);

/* Bytes the map itself holds (its table), excluding keys and values. */
size_t strmap_bytes(const struct strmap *m);

/* The map's hash of a string (FNV-1a, 64 bit), for callers that shard by key. */
unsigned long long strmap_hash(const char *key);

#endif

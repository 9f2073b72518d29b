/* The informer cache's compression of object texts: raw deflate with a preset dictionary.
 *
 * The objects of one store share their shape (the same keys, labels, condition types, image
 * names), so the store's first text, kept as a dictionary for the store's lifetime, lets deflate
 * replace most of every later text by back-references into it: a 1.8 KB TeloSession packs to a
 * few hundred bytes. One deflate and one inflate stream per store are reset, not re-created, per
 * object: creating one costs more than compressing a small object. Single-threaded: a pack and
 * the bytes it hands out belong to one loop. */
#ifndef TELO_CACHE_PACK_H
#define TELO_CACHE_PACK_H

#include "util/err.h"

#include <json.h>
#include <stddef.h>

/* The dictionary is the head of the first text, up to this many bytes, without the values that
 * may be a tenant's secret (environment variables' values, URLs' user parts and queries), which
 * would otherwise make a text that repeats them pack smaller: deflate's window (8 KiB here) must
 * hold the dictionary and the text that refers to it. */
#define CACHE_PACK_DICT_MAX 4096

struct cache_pack;

/* Returns a pack compressing at zlib's level (1 fastest .. 9 smallest), or NULL when out of
 * memory. Free it with cache_pack_free. */
struct cache_pack *cache_pack_new(int level);

/* Frees p. Accepts NULL. Bytes it handed out become unreadable. */
void cache_pack_free(struct cache_pack *p);

/* Packs text (len bytes, no NUL needed). The first call on p takes its dictionary from text
 * (CACHE_PACK_DICT_MAX).
 * *out receives the packed bytes and *out_len their length: p's own buffer, valid until the next
 * cache_pack_deflate on p, when they are shorter than len; text itself (*out_len == len) when
 * deflate would not shrink it. Equal texts pack to equal bytes on the same p. Returns 0,
 * -TELO_ETOOBIG for a text over INT_MAX bytes, or -TELO_ENOMEM. */
int cache_pack_deflate(struct cache_pack *p, const char *text, size_t len,
                       const unsigned char **out, size_t *out_len, struct telo_err *err);

/* Parses the text that cache_pack_deflate on p packed into in (in_len bytes) from a text of
 * text_len bytes: in_len == text_len means the text itself. Returns a new object the caller
 * json_object_put()s, or NULL when out of memory or the bytes are not such a text. */
struct json_object *cache_pack_parse(struct cache_pack *p, const unsigned char *in, size_t in_len,
                                     size_t text_len);

/* Bytes p holds: its dictionary, zlib's stream states and its buffers. */
size_t cache_pack_bytes(const struct cache_pack *p);

#endif

/* The informer cache's compression of object texts: raw deflate with a preset dictionary. */
#include "cache/pack.h"

#include "util/jget.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* An 8 KiB window holds a 4 KiB dictionary and the texts that refer to it (TeloSessions, the
 * largest cached kind but build Jobs, are under 2 KB). Negative: raw deflate, no zlib header or
 * checksum (6 bytes an object; the JSON parser rejects a corrupt text anyway). */
#define WINDOW_BITS (-13)
/* zlib's memory level: 2^(MEM_LEVEL+7) hash heads (zeroed by every deflateReset) and a symbol
 * buffer of 2^(MEM_LEVEL+6). 8, zlib's default, allocates 166 KB a store and zeroes 64 KB a put;
 * texts of a few KB pack as small at 4, in 56 KB with the inflate stream, and with 35 % fewer
 * instructions (pack_bench.c, callgrind). */
#define MEM_LEVEL 4
/* Deflate's fixed Huffman codes: a reader then inflates with zlib's built-in tables instead of
 * building a block's own for every object (a third of the instructions of inflating a
 * TeloSession), and the writer emits no tables; the stored texts grow by 10-20 %. */
#define STRATEGY Z_FIXED

struct cache_pack {
    z_stream def, inf;
    int def_ready, inf_ready; /* whether deflateInit2 / inflateInit2 succeeded (for the frees) */
    unsigned char *dict;      /* NULL until the first text */
    size_t dict_len;
    unsigned char *out; /* cache_pack_deflate's output */
    size_t out_cap;
    char *text; /* cache_pack_parse's inflated text */
    size_t text_cap;
    size_t zbytes; /* what zlib allocated through zalloc (it frees only at End) */
};

static voidpf zalloc(voidpf opaque, uInt items, uInt size)
{
    struct cache_pack *p = opaque;
    size_t n = (size_t)items * size;
    void *mem = malloc(n);
    if (mem)
        p->zbytes += n;
    return mem;
}

static void zfree(voidpf opaque, voidpf mem)
{
    (void)opaque;
    free(mem);
}

struct cache_pack *cache_pack_new(int level)
{
    struct cache_pack *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->def.zalloc = p->inf.zalloc = zalloc;
    p->def.zfree = p->inf.zfree = zfree;
    p->def.opaque = p->inf.opaque = p;
    p->def_ready =
        deflateInit2(&p->def, level, Z_DEFLATED, WINDOW_BITS, MEM_LEVEL, STRATEGY) == Z_OK;
    p->inf_ready = p->def_ready && inflateInit2(&p->inf, WINDOW_BITS) == Z_OK;
    if (!p->inf_ready) {
        cache_pack_free(p);
        return NULL;
    }
    return p;
}

void cache_pack_free(struct cache_pack *p)
{
    if (!p)
        return;
    if (p->def_ready)
        (void)deflateEnd(&p->def);
    if (p->inf_ready)
        (void)inflateEnd(&p->inf);
    free(p->dict);
    free(p->out);
    free(p->text);
    free(p);
}

/* What of a string value may enter the dictionary, by its key: */
enum keep { KEEP_ALL, KEEP_NONE, KEEP_URL_BASE };

/* An environment variable's value may be anything, a credential included; a URL may carry one
 * in its user part or its query (a bundle URL's token, a registry URL's password). */
static enum keep keep_under(const char *key, size_t n)
{
    if (n == 5 && memcmp(key, "value", 5) == 0)
        return KEEP_NONE;
    if ((n == 3 && memcmp(key, "url", 3) == 0) || (n == 11 && memcmp(key, "registryUrl", 11) == 0))
        return KEEP_URL_BASE;
    return KEEP_ALL;
}

/* How many bytes of the URL s (n bytes) hold neither its user part nor its query or fragment:
 * up to the first '?' or '#', and only up to "scheme://" when an '@' comes before that. */
static size_t url_base(const char *s, size_t n)
{
    size_t cut = 0;
    while (cut < n && s[cut] != '?' && s[cut] != '#')
        cut++;
    if (!memchr(s, '@', cut))
        return cut;
    for (size_t i = 0; i + 3 <= cut; i++)
        if (memcmp(s + i, "://", 3) == 0)
            return i + 3;
    return 0;
}

/* Writes the dictionary for the JSON text (len bytes) into dict, at most max bytes, and returns
 * its length: the text without what may be a tenant's secret (keep_under). The dictionary is
 * shared by every object of the store and is usually a tenant's object: with a secret in it,
 * how well another object packs (telo_cache_bytes) would tell whether that object repeats it,
 * a guessing oracle. Keys, numbers and other values stay: without them objects pack 3x larger. */
static size_t dict_of(const char *text, size_t len, unsigned char *dict, size_t max)
{
    size_t i = 0, n = 0;
    enum keep keep = KEEP_ALL; /* for the next value: set by the key before it */
    while (i < len && n < max) {
        char c = text[i];
        if (c != '"') {
            if (c != ':' && c != ' ' && c != '\n' && c != '\t' && c != '\r')
                keep = KEEP_ALL;
            dict[n++] = (unsigned char)text[i++];
            continue;
        }
        size_t end = i + 1; /* the closing quote */
        while (end < len && text[end] != '"')
            end += text[end] == '\\' ? 2 : 1;
        if (end >= len)
            break;
        size_t next = end + 1;
        while (next < len && (text[next] == ' ' || text[next] == '\n' || text[next] == '\t' ||
                              text[next] == '\r'))
            next++;
        int key = next < len && text[next] == ':';
        const char *body = text + i + 1;
        size_t body_len = end - i - 1;
        if (!key && keep != KEEP_ALL)
            body_len = keep == KEEP_NONE ? 0 : url_base(body, body_len);
        if (body_len + 2 > max - n)
            break;
        dict[n++] = '"';
        memcpy(dict + n, body, body_len);
        n += body_len;
        dict[n++] = '"';
        keep = key ? keep_under(body, end - i - 1) : KEEP_ALL;
        i = end + 1;
    }
    return n;
}

/* buf grown to at least need bytes (*cap updated), or NULL when out of memory (buf kept). */
static void *reserve(void *buf, size_t *cap, size_t need)
{
    if (*cap >= need)
        return buf;
    void *grown = realloc(buf, need);
    if (grown)
        *cap = need;
    return grown;
}

int cache_pack_deflate(struct cache_pack *p, const char *text, size_t len,
                       const unsigned char **out, size_t *out_len, struct telo_err *err)
{
    if (len > INT_MAX) /* json-c parses at most INT_MAX bytes */
        return telo_err_set(err, TELO_ETOOBIG, "object of %zu bytes is too big to cache", len);
    if (!p->dict) {
        if (!(p->dict = malloc(CACHE_PACK_DICT_MAX)))
            return telo_err_oom(err, "keeping the cache's dictionary");
        p->dict_len = dict_of(text, len, p->dict, CACHE_PACK_DICT_MAX);
    }
    *out = (const unsigned char *)text;
    *out_len = len;
    /* Room for one byte less than the text: a text that does not fit is kept as it is. */
    if (len < 2)
        return 0;
    unsigned char *buf = reserve(p->out, &p->out_cap, len - 1);
    if (!buf)
        return telo_err_oom(err, "compressing a cached object");
    p->out = buf;
    /* Reset, then the same dictionary every time: equal texts give equal bytes, and each
     * object inflates alone. */
    if (deflateReset(&p->def) != Z_OK ||
        deflateSetDictionary(&p->def, p->dict, (uInt)p->dict_len) != Z_OK)
        return telo_err_set(err, TELO_ENOMEM, "zlib refused to reset its deflate stream");
    p->def.next_in = (z_const Bytef *)text;
    p->def.avail_in = (uInt)len;
    p->def.next_out = p->out;
    p->def.avail_out = (uInt)(len - 1);
    if (deflate(&p->def, Z_FINISH) == Z_STREAM_END) {
        *out = p->out;
        *out_len = p->def.total_out;
    }
    return 0;
}

struct json_object *cache_pack_parse(struct cache_pack *p, const unsigned char *in, size_t in_len,
                                     size_t text_len)
{
    const char *text = (const char *)in;
    if (in_len < text_len) {
        char *buf = reserve(p->text, &p->text_cap, text_len);
        if (!buf)
            return NULL;
        p->text = buf;
        if (inflateReset(&p->inf) != Z_OK ||
            inflateSetDictionary(&p->inf, p->dict, (uInt)p->dict_len) != Z_OK)
            return NULL;
        p->inf.next_in = (z_const Bytef *)in;
        p->inf.avail_in = (uInt)in_len;
        p->inf.next_out = (Bytef *)p->text;
        p->inf.avail_out = (uInt)text_len;
        if (inflate(&p->inf, Z_FINISH) != Z_STREAM_END || p->inf.total_out != text_len)
            return NULL;
        text = p->text;
    }
    struct json_tokener *tok = json_tokener_new_ex(JGET_OBJECT_MAX_DEPTH);
    if (!tok)
        return NULL;
    struct json_object *obj = json_tokener_parse_ex(tok, text, (int)text_len);
    /* The whole text and nothing else: a truncated one would be json_tokener_continue. */
    if (json_tokener_get_error(tok) != json_tokener_success ||
        json_tokener_get_parse_end(tok) != text_len) {
        json_object_put(obj);
        obj = NULL;
    }
    json_tokener_free(tok);
    return obj;
}

size_t cache_pack_bytes(const struct cache_pack *p)
{
    return sizeof(*p) + p->zbytes + p->dict_len + p->out_cap + p->text_cap;
}

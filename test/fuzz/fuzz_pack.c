/* libFuzzer target: the informer cache's packed texts (cache/pack.c). Objects decoded as the
 * watch decoder decodes them are serialized as the store serializes them, deflated against the
 * first one's dictionary, and parsed back: what comes back must serialize as a plain parse of
 * the same text does, and the same text must pack to the same bytes. Input: a zlib level byte, then
 * the texts one per line (JSON texts hold no raw newline outside strings, and a string's is
 * escaped). */
#include "cache/pack.h"
#include "fuzz_text.h"

#include <json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* As kube/watchdec.c: the depth the objects arrive with. */
#define WATCH_DEPTH 512
#define MAX_TEXTS   4

static struct json_object *decode(const char *line)
{
    struct json_tokener *tok = json_tokener_new_ex(WATCH_DEPTH);
    if (!tok)
        return NULL;
    size_t len = strlen(line);
    struct json_object *obj = json_tokener_parse_ex(tok, line, (int)len);
    /* The cache keeps objects only (a bare number would not even end: json-c waits for more
     * digits). */
    if (json_tokener_get_error(tok) != json_tokener_success ||
        !json_object_is_type(obj, json_type_object)) {
        json_object_put(obj);
        obj = NULL;
    }
    json_tokener_free(tok);
    return obj;
}

static void round_trip(struct cache_pack *p, struct json_object *obj)
{
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    if (!text)
        return;
    const unsigned char *out;
    size_t out_len;
    struct telo_err err;
    if (cache_pack_deflate(p, text, len, &out, &out_len, &err) < 0)
        return;
    if (out_len > len)
        abort();
    /* The packed bytes live in p until its next deflate: keep a copy, as the store does. */
    unsigned char *kept = malloc(out_len ? out_len : 1);
    if (!kept)
        return;
    memcpy(kept, out, out_len);
    if (cache_pack_deflate(p, text, len, &out, &out_len, &err) < 0 ||
        memcmp(kept, out, out_len) != 0)
        abort(); /* equal texts pack to equal bytes */
    struct json_object *back = cache_pack_parse(p, kept, out_len, len);
    if (!back)
        abort(); /* an object the cache took must read back */
    /* What a plain parse of the same text gives: json-c prints some texts it accepts beyond
     * JSON otherwise than it read them ("01e" reads back as 1), which no API server sends and
     * which is not the pack's to keep. */
    struct json_object *plain = decode(text);
    size_t back_len = 0, plain_len = 0;
    const char *again = json_object_to_json_string_length(
        back, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &back_len);
    const char *want =
        plain ? json_object_to_json_string_length(
                    plain, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &plain_len)
              : NULL;
    if (!again || !want || back_len != plain_len || memcmp(again, want, back_len) != 0)
        abort();
    json_object_put(plain);
    json_object_put(back);
    free(kept);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct cache_pack *p = cache_pack_new(1 + data[0] % 9);
    char *text = fuzz_text(data + 1, size - 1);
    if (!p || !text)
        abort();
    char *line = text;
    for (int i = 0; line && i < MAX_TEXTS; i++) {
        char *next = fuzz_second_line(line);
        struct json_object *obj = decode(line);
        if (obj)
            round_trip(p, obj);
        json_object_put(obj);
        line = next;
    }
    free(text);
    cache_pack_free(p);
    return 0;
}

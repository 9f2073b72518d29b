/* Tests for pkg/cache/pack.c: round trips, determinism, texts kept as they are, corrupt input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "cache/pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pod-shaped text that differs from the others by i. */
static void pod_text(int i, char *out, size_t len)
{
    snprintf(out, len,
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"sess-%d\","
             "\"namespace\":\"team-a\",\"uid\":\"%08x-0000-4000-a000-%012d\",\"labels\":{"
             "\"telo.run/session\":\"sess-%d\"}},\"status\":{\"phase\":\"Running\",\"podIP\":"
             "\"10.244.%d.%d\"}}",
             i, (unsigned)i * 2654435761U, i, i, i / 250, i % 250);
}

/* Packs text on p and parses it back; returns the packed length. */
static size_t round_trip(struct cache_pack *p, const char *text)
{
    const unsigned char *out;
    size_t out_len, len = strlen(text);
    assert_int_equal(cache_pack_deflate(p, text, len, &out, &out_len, NULL), 0);
    assert_true(out_len <= len);
    struct json_object *obj = cache_pack_parse(p, out, out_len, len);
    assert_non_null(obj);
    assert_string_equal(json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE),
                        text);
    json_object_put(obj);
    return out_len;
}

static void texts_of_one_shape_shrink_and_read_back(void **state)
{
    (void)state;
    struct cache_pack *p = cache_pack_new(3);
    assert_non_null(p);
    char text[512];
    size_t in = 0, out = 0;
    for (int i = 0; i < 100; i++) {
        pod_text(i, text, sizeof(text));
        in += strlen(text);
        out += round_trip(p, text);
    }
    /* The first text is the dictionary: the others are mostly references into it. */
    print_message("100 pod texts: %zu bytes packed to %zu\n", in, out);
    assert_true(out * 3 < in);
    assert_true(cache_pack_bytes(p) > CACHE_PACK_DICT_MAX / 16);
    cache_pack_free(p);
}

static void equal_texts_pack_to_equal_bytes(void **state)
{
    (void)state;
    struct cache_pack *p = cache_pack_new(3);
    char a[512], b[512];
    pod_text(1, a, sizeof(a));
    pod_text(2, b, sizeof(b));
    const unsigned char *out;
    size_t first_len, len;
    assert_int_equal(cache_pack_deflate(p, a, strlen(a), &out, &first_len, NULL), 0);
    unsigned char first[512];
    memcpy(first, out, first_len);
    /* Another text in between leaves no trace in the stream. */
    assert_int_equal(cache_pack_deflate(p, b, strlen(b), &out, &len, NULL), 0);
    assert_int_equal(cache_pack_deflate(p, a, strlen(a), &out, &len, NULL), 0);
    assert_int_equal(len, first_len);
    assert_memory_equal(out, first, len);
    cache_pack_free(p);
}

static void incompressible_texts_are_kept_as_they_are(void **state)
{
    (void)state;
    struct cache_pack *p = cache_pack_new(3);
    (void)round_trip(p, "{\"metadata\":{\"name\":\"dictionary\"}}");
    /* Random Cyrillic letters: deflate's fixed codes spend 9 bits on each of their bytes. */
    char text[1100] = "{\"data\":\"";
    uint32_t x = 2463534242U;
    size_t n = strlen(text);
    for (int i = 0; i < 500; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        text[n++] = (char)(0xd0 + x % 4);
        text[n++] = (char)(0x80 + (x >> 8) % 64);
    }
    memcpy(text + n, "\"}", 3);
    const unsigned char *out;
    size_t out_len;
    assert_int_equal(cache_pack_deflate(p, text, strlen(text), &out, &out_len, NULL), 0);
    assert_int_equal(out_len, strlen(text));
    assert_ptr_equal(out, (const unsigned char *)text);
    assert_int_equal(round_trip(p, text), strlen(text));
    /* So are texts too short to shrink. */
    assert_int_equal(round_trip(p, "{}"), 2);
    assert_int_equal(round_trip(p, "[1]"), 3);
    cache_pack_free(p);
}

static void corrupt_bytes_parse_to_null(void **state)
{
    (void)state;
    struct cache_pack *p = cache_pack_new(3);
    char text[512];
    pod_text(7, text, sizeof(text));
    (void)round_trip(p, text);
    pod_text(8, text, sizeof(text));
    const unsigned char *out;
    size_t out_len, len = strlen(text);
    assert_int_equal(cache_pack_deflate(p, text, len, &out, &out_len, NULL), 0);
    assert_true(out_len < len);
    unsigned char bad[512];
    memcpy(bad, out, out_len);
    /* Cut short, or claiming a longer or shorter text than it holds. */
    assert_null(cache_pack_parse(p, bad, out_len / 2, len));
    assert_null(cache_pack_parse(p, bad, out_len, len + 1));
    assert_null(cache_pack_parse(p, bad, out_len, len - 1));
    /* A text kept as it is must be JSON, all of it. */
    assert_null(cache_pack_parse(p, (const unsigned char *)"{\"a\":1}x", 8, 8));
    assert_null(cache_pack_parse(p, (const unsigned char *)"{\"a\":", 5, 5));
    /* The stream recovers for the next reader. */
    struct json_object *obj = cache_pack_parse(p, bad, out_len, len);
    assert_non_null(obj);
    json_object_put(obj);
    cache_pack_free(p);
}

/* An object nested past json-c's default depth of 32 reads back: the watch decoder takes up to
 * JGET_OBJECT_MAX_DEPTH, and the cache must not keep an object it cannot read. */
/* A session-shaped text holding an environment variable's value and two URLs, one with a
 * password, one with a token in its query. */
static void secret_text(const char *value, const char *password, const char *token, char *out,
                        size_t len)
{
    snprintf(
        out, len,
        "{\"kind\":\"TeloSession\",\"spec\":{\"env\":[{\"name\":\"API_KEY\",\"value\":"
        "\"%s\"}],\"bundle\":{\"url\":{\"url\":\"https://bundles.example.com/app.tgz?token=%s\","
        "\"sha256\":\"\"}},\"registryUrl\":\"https://ci:%s@registry.example.com/\"}}",
        value, token, password);
}

/* The first text is the dictionary of every later one. If its secrets were in it, a tenant who
 * reads telo_cache_bytes could guess them: a text repeating a secret would pack smaller than one
 * with a wrong guess of the same length. */
static void the_first_texts_secrets_do_not_make_a_right_guess_pack_smaller(void **state)
{
    (void)state;
    static const char value[] = "sk-9fQ2xLr7Tz4WmB8cKd1VhN6pYs3JgE5u",
                      password[] = "Pw7kQz2XnR8vLm4T", token[] = "tk-3HsW9qLp2ZxC7vBn5MdR";
    static const char wrong_value[] = "sk-4GhT8mNq1XzL6rWb3Pk9VcJ5dYs2FuE7",
                      wrong_password[] = "Xb3nLq8WzR2kMv7T",
                      wrong_token[] = "tk-8PdQ2zWx5LcN9vHm3BsK";
    struct cache_pack *p = cache_pack_new(3);
    assert_non_null(p);
    char text[1024];
    secret_text(value, password, token, text, sizeof(text));
    round_trip(p, text);
    const char *right[] = {value, password, token},
               *wrong[] = {wrong_value, wrong_password, wrong_token};
    for (int which = 0; which < 3; which++) {
        const char *args_right[3] = {wrong_value, wrong_password, wrong_token};
        args_right[which] = right[which];
        secret_text(args_right[0], args_right[1], args_right[2], text, sizeof(text));
        size_t guessed = round_trip(p, text);
        secret_text(wrong[0], wrong[1], wrong[2], text, sizeof(text));
        size_t missed = round_trip(p, text);
        print_message("secret %d: right guess %zu bytes, wrong %zu\n", which, guessed, missed);
        assert_true(guessed + 2 >= missed);
    }
    /* What is not secret still packs: the URLs' hosts and paths, the keys. */
    secret_text(wrong_value, wrong_password, wrong_token, text, sizeof(text));
    assert_true(round_trip(p, text) * 2 < strlen(text));
    cache_pack_free(p);
}

static void deep_objects_read_back(void **state)
{
    (void)state;
    struct cache_pack *p = cache_pack_new(3);
    assert_non_null(p);
    char text[1024], *at = text;
    at += sprintf(at, "{\"metadata\":{\"name\":\"deep\"}");
    for (int i = 0; i < 60; i++)
        at += sprintf(at, ",\"a\":{\"b\":1");
    for (int i = 0; i < 61; i++)
        *at++ = '}';
    *at = '\0';
    (void)round_trip(p, text);
    cache_pack_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(texts_of_one_shape_shrink_and_read_back),
        cmocka_unit_test(equal_texts_pack_to_equal_bytes),
        cmocka_unit_test(incompressible_texts_are_kept_as_they_are),
        cmocka_unit_test(corrupt_bytes_parse_to_null),
        cmocka_unit_test(deep_objects_read_back),
        cmocka_unit_test(the_first_texts_secrets_do_not_make_a_right_guess_pack_smaller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/util/base64.c: padded base64 both ways, unpadded base64url decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/base64.h"

#include <stdlib.h>
#include <string.h>

static void encodes_and_decodes_round_trip(void **state)
{
    (void)state;
    const char *plain[] = {"f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *text[] = {"Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 6; i++) {
        size_t n = 0;
        char *enc = util_base64_encode(plain[i], strlen(plain[i]), &n);
        assert_non_null(enc);
        assert_string_equal(enc, text[i]);
        assert_int_equal(n, strlen(text[i]));
        free(enc);
        unsigned char *dec = util_base64_decode(text[i], strlen(text[i]), &n);
        assert_non_null(dec);
        assert_int_equal(n, strlen(plain[i]));
        assert_string_equal((char *)dec, plain[i]);
        free(dec);
    }
    char small[UTIL_BASE64_ENCODED_SIZE(2)];
    assert_int_equal(util_base64_encode_into(small, "fo", 2), 4);
    assert_string_equal(small, "Zm8=");
}

static void refuses_what_is_not_base64(void **state)
{
    (void)state;
    const char *bad[] = {"", "Zg", "Zm9", "Z!==", "   "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_null(util_base64_decode(bad[i], strlen(bad[i]), NULL));
    /* Trailing whitespace (a Secret written with a newline) is ignored. */
    unsigned char *dec = util_base64_decode("Zm9v\n", 5, NULL);
    assert_string_equal((char *)dec, "foo");
    free(dec);
}

static void decodes_unpadded_base64url(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(util_base64url_decode("bXktdG9rZW4", out, sizeof(out)), 0);
    assert_string_equal(out, "my-token");
    assert_int_equal(util_base64url_decode("bXktdG9rZW4=", out, sizeof(out)), 0); /* padded */
    assert_string_equal(out, "my-token");
    assert_int_equal(util_base64url_decode("_-8", out, sizeof(out)), 0); /* 62 and 63 */
    assert_string_equal(out, "\xff\xef");
    assert_int_equal(util_base64url_decode("", out, sizeof(out)), -1);
    assert_int_equal(util_base64url_decode("bXk+", out, sizeof(out)), -1); /* '+' is not url */
    assert_int_equal(util_base64url_decode("AAAA", out, sizeof(out)), -1); /* a NUL byte */
    assert_int_equal(util_base64url_decode("bXktdG9rZW4", out, 8), -1);    /* does not fit */
}

static void decodes_as_go_std_encoding(void **state)
{
    (void)state;
    const struct {
        const char *in, *out;
    } good[] = {
        {"", ""},
        {"YQ==", "a"},
        {"YWI=", "ab"},
        {"YWJj", "abc"},
        {"LS0tLS1DRVJULS0tLS0K", "-----CERT-----\n"},
        /* Go skips CR and LF anywhere. */
        {"YW\r\nJj\n", "abc"},
        {"\nYQ=\r\n=", "a"},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        size_t len = 99;
        int bad = 1;
        unsigned char *out = util_base64_decode_std(good[i].in, strlen(good[i].in), &len, &bad);
        assert_non_null(out);
        assert_int_equal(bad, 0);
        assert_int_equal(len, strlen(good[i].out));
        assert_memory_equal(out, good[i].out, len);
        assert_int_equal(out[len], '\0');
        free(out);
    }
}

static void refuses_what_go_refuses(void **state)
{
    (void)state;
    const char *bad_inputs[] = {
        "YQ",       /* padding is required */
        "YWI",      /* likewise */
        "Y===",     /* too much padding */
        "YQ=",      /* too little */
        "YQ==YQ==", /* padding in the middle */
        "YW=j",     /* likewise */
        "YW Jj",    /* blanks are not skipped */
        "YWJj\t",   /* nor tabs */
        "YW*j",     /* outside the alphabet */
        "YWJj====", /* a padding-only quantum */
    };
    for (size_t i = 0; i < sizeof(bad_inputs) / sizeof(bad_inputs[0]); i++) {
        int bad = 0;
        unsigned char *out =
            util_base64_decode_std(bad_inputs[i], strlen(bad_inputs[i]), NULL, &bad);
        if (out || !bad)
            fail_msg("\"%s\" accepted", bad_inputs[i]);
    }
    /* A NUL inside the given length is not base64 either. */
    int bad = 0;
    assert_null(util_base64_decode_std("YQ\0=", 4, NULL, &bad));
    assert_int_equal(bad, 1);
}

static void encodes_padded_without_line_breaks(void **state)
{
    (void)state;
    const char *plain[] = {"", "a", "ab", "abc", "abcd"};
    const char *coded[] = {"", "YQ==", "YWI=", "YWJj", "YWJjZA=="};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        char *out = util_base64_encode(plain[i], strlen(plain[i]), NULL);
        assert_non_null(out);
        assert_string_equal(out, coded[i]);
        /* And back. */
        size_t len;
        int bad;
        unsigned char *back = util_base64_decode_std(out, strlen(out), &len, &bad);
        assert_non_null(back);
        assert_memory_equal(back, plain[i], len);
        free(back);
        free(out);
    }
    unsigned char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (unsigned char)i;
    char *out = util_base64_encode(bytes, sizeof(bytes), NULL);
    assert_non_null(out);
    assert_int_equal(strlen(out), 344);
    assert_null(strchr(out, '\n'));
    size_t len;
    int bad;
    unsigned char *back = util_base64_decode_std(out, strlen(out), &len, &bad);
    assert_non_null(back);
    assert_int_equal(len, 256);
    assert_memory_equal(back, bytes, 256);
    free(back);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encodes_and_decodes_round_trip),
        cmocka_unit_test(refuses_what_is_not_base64),
        cmocka_unit_test(decodes_unpadded_base64url),
        cmocka_unit_test(decodes_as_go_std_encoding),
        cmocka_unit_test(refuses_what_go_refuses),
        cmocka_unit_test(encodes_padded_without_line_breaks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encodes_and_decodes_round_trip),
        cmocka_unit_test(refuses_what_is_not_base64),
        cmocka_unit_test(decodes_unpadded_base64url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

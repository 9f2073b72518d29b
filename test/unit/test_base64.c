/* Tests for pkg/util/base64.c: Go's StdEncoding decoding (kubeconfig -data fields) and encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/base64.h"

#include <stdlib.h>
#include <string.h>

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
        char *out = util_base64_encode(plain[i], strlen(plain[i]));
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
    char *out = util_base64_encode(bytes, sizeof(bytes));
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
        cmocka_unit_test(decodes_as_go_std_encoding),
        cmocka_unit_test(refuses_what_go_refuses),
        cmocka_unit_test(encodes_padded_without_line_breaks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for pkg/util/utf8.c: sequence lengths and cuts on a character boundary. */
#include "util/utf8.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static size_t len_of(const char *s)
{
    return util_utf8_len((const unsigned char *)s, strlen(s));
}

static void sequence_lengths(void **state)
{
    (void)state;
    assert_int_equal(len_of("a"), 1);
    assert_int_equal(len_of("\xc3\xa9"), 2);
    assert_int_equal(len_of("\xe2\x82\xac"), 3);
    assert_int_equal(len_of("\xf0\x9f\x98\x80"), 4);
    assert_int_equal(len_of("\x9b"), 0);             /* a lone continuation (8-bit CSI) */
    assert_int_equal(len_of("\xc0\xaf"), 0);         /* overlong */
    assert_int_equal(len_of("\xed\xa0\x80"), 0);     /* a surrogate */
    assert_int_equal(len_of("\xf4\x90\x80\x80"), 0); /* past U+10FFFF */
    assert_int_equal(len_of("\xe2\x82"), 0);         /* cut */
    assert_int_equal(len_of("\xff"), 0);
}

static void cuts_drop_only_an_incomplete_last_character(void **state)
{
    (void)state;
    assert_int_equal(util_utf8_cut("", 0), 0);
    assert_int_equal(util_utf8_cut("ab", 2), 2);
    assert_int_equal(util_utf8_cut("a\xc3\xa9", 3), 3);
    assert_int_equal(util_utf8_cut("a\xc3\xa9", 2), 1);
    assert_int_equal(util_utf8_cut("a\xf0\x9f\x98\x80", 5), 5);
    assert_int_equal(util_utf8_cut("a\xf0\x9f\x98\x80", 4), 1);
    assert_int_equal(util_utf8_cut("a\xf0\x9f\x98\x80", 3), 1);
    assert_int_equal(util_utf8_cut("a\xf0\x9f\x98\x80", 2), 1);
    assert_int_equal(util_utf8_cut("\xe2\x82\xac", 3), 3);
    assert_int_equal(util_utf8_cut("\xe2\x82\xac", 2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sequence_lengths),
        cmocka_unit_test(cuts_drop_only_an_incomplete_last_character),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for pkg/util/text.c: a tenant's text made safe to show on another person's
 * terminal (status messages, Events, the kubectl plugin's output). */
#include "util/text.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* The clean of s, in a static buffer; checks that the clean of it is itself (idempotent) and
 * that util_text_is_clean agrees. */
static const char *clean(const char *s)
{
    static char out[512], again[512];
    size_t n = util_text_clean(s, strlen(s), out);
    assert_int_equal(n, strlen(out));
    assert_true(util_text_is_clean(out, n));
    assert_int_equal(util_text_clean(out, n, again), n);
    assert_string_equal(again, out);
    assert_int_equal(util_text_is_clean(s, strlen(s)), strcmp(s, out) == 0);
    return out;
}

static void text_and_layout_stay(void **state)
{
    (void)state;
    assert_string_equal(clean(""), "");
    assert_string_equal(clean("listen EADDRINUSE :::8080"), "listen EADDRINUSE :::8080");
    assert_string_equal(clean("two\nlines\tand a tab"), "two\nlines\tand a tab");
    assert_string_equal(clean("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    assert_string_equal(clean("\xc2\xa0nbsp \xe2\x80\xa7 \xe2\x81\xa5"),
                        "\xc2\xa0nbsp \xe2\x80\xa7 \xe2\x81\xa5"); /* neighbours of the marked */
}

static void escape_sequences_go(void **state)
{
    (void)state;
    assert_string_equal(clean("\x1b[31mred\x1b[0m plain"), "red plain");
    assert_string_equal(clean("\x1b[2J\x1b[H"), "");   /* clear the screen, home */
    assert_string_equal(clean("cut \x1b[12"), "cut "); /* a CSI cut by the end */
    assert_string_equal(clean("progress\r100%"), "progress100%");
    /* OSC 8 (a hyperlink): the ESCs go, BEL is marked, the rest shows as the text it is. */
    assert_string_equal(clean("\x1b]8;;https://evil.example/\x07"
                              "click\x1b]8;;\x07"),
                        "]8;;https://evil.example/?click]8;;?");
}

static void controls_and_hidden_characters_are_marked(void **state)
{
    (void)state;
    assert_string_equal(clean("a\x01"
                              "b\x7f"
                              "c\x08"),
                        "a?b?c?");
    assert_string_equal(clean("nul\x00"), "nul"); /* strlen stops there, as C strings do */
    /* C1 as UTF-8: the 8-bit CSI (U+009B) and OSC (U+009D). */
    assert_string_equal(clean("\xc2\x9b"
                              "31m\xc2\x9d"
                              "0;t\xc2\x80\xc2\x9f"),
                        "?31m?0;t??");
    /* Line and paragraph separators, bidirectional overrides and isolates. */
    assert_string_equal(clean("a\xe2\x80\xa8"
                              "b\xe2\x80\xa9"
                              "c"),
                        "a?b?c");
    assert_string_equal(clean("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad\xe2\x80\xae"),
                        "?????");
    assert_string_equal(clean("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9"), "????");
    /* Bytes that start no well-formed sequence: each one '?'. */
    assert_string_equal(clean("\x9b"
                              "31m"),
                        "?31m");
    assert_string_equal(clean("a\xff\xfe"
                              "b"),
                        "a??b");
    assert_string_equal(clean("\xc0\xaf"), "??");       /* overlong */
    assert_string_equal(clean("\xed\xa0\x80"), "???");  /* a surrogate */
    assert_string_equal(clean("end\xe2\x82"), "end??"); /* cut */
}

static void hidden_is_only_the_named_code_points(void **state)
{
    (void)state;
    assert_true(util_text_hidden((const unsigned char *)"\xc2\x80", 2));
    assert_true(util_text_hidden((const unsigned char *)"\xc2\x9f", 2));
    assert_false(util_text_hidden((const unsigned char *)"\xc2\xa0", 2));
    assert_false(util_text_hidden((const unsigned char *)"\xc3\xa9", 2));
    assert_false(util_text_hidden((const unsigned char *)"\xe2\x80\xa7", 3));
    assert_true(util_text_hidden((const unsigned char *)"\xe2\x80\xa8", 3));
    assert_true(util_text_hidden((const unsigned char *)"\xe2\x80\xae", 3));
    assert_false(util_text_hidden((const unsigned char *)"\xe2\x80\xaf", 3));
    assert_false(util_text_hidden((const unsigned char *)"\xe2\x81\xa5", 3));
    assert_true(util_text_hidden((const unsigned char *)"\xe2\x81\xa6", 3));
    assert_true(util_text_hidden((const unsigned char *)"\xe2\x81\xa9", 3));
    assert_false(util_text_hidden((const unsigned char *)"\xe2\x81\xaa", 3));
    assert_false(util_text_hidden((const unsigned char *)"a", 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_and_layout_stay),
        cmocka_unit_test(escape_sequences_go),
        cmocka_unit_test(controls_and_hidden_characters_are_marked),
        cmocka_unit_test(hidden_is_only_the_named_code_points),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

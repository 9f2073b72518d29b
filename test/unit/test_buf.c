/* Tests for pkg/util/buf.c: the bounded buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/buf.h"
#include "util/err.h"

#include <stdlib.h>
#include <string.h>

static void append_and_read_back(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    assert_int_equal(buf_append_str(&b, "hello"), 0);
    assert_int_equal(buf_printf(&b, ", %s %d", "world", 42), 0);
    assert_string_equal(b.data, "hello, world 42");
    assert_int_equal(b.len, 15);
    buf_release(&b);
}

static void refuses_to_grow_past_max_and_keeps_content(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 8);
    assert_int_equal(buf_append_str(&b, "12345678"), 0);
    assert_int_equal(buf_append(&b, "9", 1), -TELO_ETOOBIG);
    assert_int_equal(buf_printf(&b, "%d", 9), -TELO_ETOOBIG);
    assert_string_equal(b.data, "12345678");
    assert_int_equal(b.len, 8);
    buf_release(&b);
}

static void growth_across_many_appends(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(buf_append(&b, "ab", 2), 0);
    assert_int_equal(b.len, 20000);
    assert_int_equal(b.data[19999], 'b');
    assert_int_equal(b.data[20000], '\0');
    buf_release(&b);
}

static void consume_shifts_the_rest(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 64);
    assert_int_equal(buf_append_str(&b, "line1\nline2\n"), 0);
    buf_consume(&b, 6);
    assert_string_equal(b.data, "line2\n");
    buf_consume(&b, 100);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    buf_release(&b);
}

static void truncate_undoes_appends(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 64);
    buf_truncate(&b, 3); /* never appended: nothing to do */
    assert_int_equal(b.len, 0);
    buf_append_str(&b, "keep");
    size_t mark = b.len;
    buf_append_str(&b, "+undo");
    buf_truncate(&b, mark);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.data, "keep");
    buf_truncate(&b, 10); /* longer than the content: unchanged */
    assert_string_equal(b.data, "keep");
    buf_release(&b);
}

static void steal_transfers_ownership(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 64);
    assert_null(buf_steal(&b));
    assert_int_equal(buf_append_str(&b, "x"), 0);
    char *s = buf_steal(&b);
    assert_string_equal(s, "x");
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    free(s);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(append_and_read_back),
        cmocka_unit_test(refuses_to_grow_past_max_and_keeps_content),
        cmocka_unit_test(growth_across_many_appends),
        cmocka_unit_test(consume_shifts_the_rest),
        cmocka_unit_test(truncate_undoes_appends),
        cmocka_unit_test(steal_transfers_ownership),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/util/url.c: percent-escaping and query building. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/url.h"

static void escapes_everything_but_unreserved(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    assert_int_equal(url_escape(&b, "aZ09-._~"), 0);
    assert_string_equal(b.data, "aZ09-._~");
    buf_reset(&b);
    assert_int_equal(url_escape(&b, "a b/c?d&e=f%g+h#\xc3\xa9"), 0);
    assert_string_equal(b.data, "a%20b%2Fc%3Fd%26e%3Df%25g%2Bh%23%C3%A9");
    buf_release(&b);
}

static void query_separators_and_null_values(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    buf_append_str(&b, "/api/v1/pods");
    assert_int_equal(url_query_add(&b, "labelSelector", "app=web,tier in (a,b)"), 0);
    assert_int_equal(url_query_add(&b, "skipped", NULL), 0);
    assert_int_equal(url_query_add_long(&b, "limit", 500), 0);
    assert_string_equal(b.data,
                        "/api/v1/pods?labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&limit=500");
    buf_release(&b);
}

static void all_or_nothing_when_full(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 12);
    buf_append_str(&b, "/x");
    assert_int_equal(url_query_add(&b, "key", "a long value"), -TELO_ETOOBIG);
    assert_string_equal(b.data, "/x");
    assert_int_equal(url_escape(&b, "          "), -TELO_ETOOBIG);
    assert_string_equal(b.data, "/x");
    assert_int_equal(b.len, 2);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escapes_everything_but_unreserved),
        cmocka_unit_test(query_separators_and_null_values),
        cmocka_unit_test(all_or_nothing_when_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/util/err.c: error values and their messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/err.h"
#include "util/str.h"

#include <string.h>

static void set_returns_negated_code_and_formats(void **state)
{
    (void)state;
    struct telo_err err;
    telo_err_clear(&err);
    assert_int_equal(telo_err_set(&err, TELO_EINVAL, "field %s: %d is out of range", "port", 0),
                     -TELO_EINVAL);
    assert_int_equal(err.code, TELO_EINVAL);
    assert_string_equal(err.msg, "field port: 0 is out of range");
}

static void set_accepts_null(void **state)
{
    (void)state;
    assert_int_equal(telo_err_set(NULL, TELO_EIO, "ignored"), -TELO_EIO);
}

static void wrap_prefixes_context(void **state)
{
    (void)state;
    struct telo_err err;
    telo_err_set(&err, TELO_EINVAL, "client-key-data is not valid base64");
    assert_int_equal(telo_err_wrap(&err, "kubeconfig %s: user '%s'", "/k", "admin"), -TELO_EINVAL);
    assert_string_equal(err.msg,
                        "kubeconfig /k: user 'admin': client-key-data is not valid base64");
}

static void long_messages_are_truncated_not_overflowed(void **state)
{
    (void)state;
    struct telo_err err;
    char big[TELO_ERR_MSG_MAX * 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    telo_err_set(&err, TELO_ETOOBIG, "%s", big);
    assert_int_equal(strlen(err.msg), TELO_ERR_MSG_MAX - 1);
    telo_err_wrap(&err, "prefix");
    assert_int_equal(strlen(err.msg), TELO_ERR_MSG_MAX - 1);
    assert_memory_equal(err.msg, "prefix: xxx", 11);
}

static void oom_names_what_was_going_on(void **state)
{
    (void)state;
    struct telo_err err;
    assert_int_equal(telo_err_oom(&err, "loading the Kubernetes configuration"), -TELO_ENOMEM);
    assert_int_equal(err.code, TELO_ENOMEM);
    assert_string_equal(err.msg, "out of memory loading the Kubernetes configuration");
    assert_int_equal(telo_err_oom(NULL, "x"), -TELO_ENOMEM);
    assert_string_equal(util_str_or_empty(NULL), "");
    const char *s = "kept";
    assert_ptr_equal(util_str_or_empty(s), s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(set_returns_negated_code_and_formats),
        cmocka_unit_test(set_accepts_null),
        cmocka_unit_test(wrap_prefixes_context),
        cmocka_unit_test(long_messages_are_truncated_not_overflowed),
        cmocka_unit_test(oom_names_what_was_going_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

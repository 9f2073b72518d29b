/* Tests for pkg/util/lograte.c: a burst at once, then the rate; held-back lines counted and told
 * in one summary line (read back from stderr), by the next allowed line or by a flush. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/lograte.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* stderr goes to a temporary file while a test runs, so the summaries can be read back. */
struct captured {
    int saved;
    FILE *file;
};

static void capture(struct captured *c)
{
    fflush(stderr);
    c->file = tmpfile();
    assert_non_null(c->file);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_int_not_equal(dup2(fileno(c->file), STDERR_FILENO), -1);
}

/* Restores stderr; returns what was written (the caller frees). */
static char *release(struct captured *c)
{
    assert_int_not_equal(dup2(c->saved, STDERR_FILENO), -1);
    close(c->saved);
    long n = ftell(c->file);
    assert_true(n >= 0);
    char *text = calloc(1, (size_t)n + 1);
    assert_non_null(text);
    rewind(c->file);
    assert_int_equal(fread(text, 1, (size_t)n, c->file), (size_t)n);
    fclose(c->file);
    return text;
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void a_burst_goes_at_once_then_the_rate(void **state)
{
    (void)state;
    struct telo_log_rate r;
    telo_log_rate_init(&r, "attach refused", 2, 5);
    struct captured c;
    capture(&c);
    int allowed = 0;
    for (int i = 0; i < 100; i++)
        allowed += telo_log_rate_allow(&r, 1000.0);
    assert_int_equal(allowed, 5);
    assert_int_equal(r.held_total, 95);
    /* Half a second later one more (2 a second), and it first tells the 95 held back. */
    assert_true(telo_log_rate_allow(&r, 1000.5));
    assert_false(telo_log_rate_allow(&r, 1000.5));
    /* Ten seconds of quiet fill the bucket to its burst, not past it. */
    allowed = 0;
    for (int i = 0; i < 100; i++)
        allowed += telo_log_rate_allow(&r, 1010.5);
    assert_int_equal(allowed, 5);
    char *text = release(&c);
    assert_int_equal(count_of(text, "msg=\"log lines suppressed\""), 2);
    assert_non_null(strstr(text, "of=\"attach refused\" suppressed=95 seconds=0.5"));
    assert_non_null(strstr(text, "of=\"attach refused\" suppressed=1 seconds=10.0"));
    assert_int_equal(r.held_total, 95 + 1 + 95);
    assert_int_equal(r.held, 95);
    free(text);
}

static void a_flush_tells_what_was_held_once(void **state)
{
    (void)state;
    struct telo_log_rate r;
    telo_log_rate_init(&r, "input dropped", 1, 1);
    struct captured c;
    capture(&c);
    telo_log_rate_flush(&r, 0); /* nothing held: nothing said */
    assert_true(telo_log_rate_allow(&r, 50.0));
    assert_false(telo_log_rate_allow(&r, 50.2));
    assert_false(telo_log_rate_allow(&r, 50.4));
    telo_log_rate_flush(&r, 53.0);
    telo_log_rate_flush(&r, 54.0);
    char *text = release(&c);
    assert_int_equal(count_of(text, "log lines suppressed"), 1);
    assert_non_null(strstr(text, "of=\"input dropped\" suppressed=2 seconds=2.8"));
    free(text);
}

static void a_clock_that_steps_back_adds_nothing(void **state)
{
    (void)state;
    struct telo_log_rate r;
    telo_log_rate_init(&r, "x", 1, 1);
    struct captured c;
    capture(&c);
    assert_true(telo_log_rate_allow(&r, 100.0));
    assert_false(telo_log_rate_allow(&r, 90.0));
    assert_false(telo_log_rate_allow(&r, 100.5));
    assert_true(telo_log_rate_allow(&r, 101.0));
    free(release(&c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_burst_goes_at_once_then_the_rate),
        cmocka_unit_test(a_flush_tells_what_was_held_once),
        cmocka_unit_test(a_clock_that_steps_back_adds_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

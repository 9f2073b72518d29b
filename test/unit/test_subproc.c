/* Tests for pkg/util/subproc.c on a loop: a run ends, with the child's output, or at its time
 * limit whatever the child leaves behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/subproc.h"

#include <ev.h>
#include <stdio.h>
#include <string.h>

struct outcome {
    int calls, rc;
    char out[64];
    ev_tstamp at;
};

static void done(int rc, const struct telo_err *err, struct subproc_result *res, void *ud)
{
    (void)err;
    struct outcome *o = ud;
    o->calls++;
    o->rc = rc;
    o->at = ev_time();
    snprintf(o->out, sizeof(o->out), "%s", res->out.len > 0 ? res->out.data : "");
    ev_break(ev_default_loop(0), EVBREAK_ALL);
}

static void give_up(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs argv on the default loop (where libev reaps children itself) for at most 10 s. */
static struct outcome run(char *const *argv, int timeout_ms)
{
    struct ev_loop *loop = ev_default_loop(0);
    char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    struct subproc_spec spec = {.path = argv[0],
                                .argv = argv,
                                .envp = envp,
                                .timeout_ms = timeout_ms,
                                .max_stdout = 4096,
                                .stderr_kept = 256};
    struct outcome o = {0};
    struct telo_err err;
    ev_tstamp start = ev_time();
    assert_non_null(subproc_start(loop, &spec, done, &o, &err));
    ev_timer limit;
    ev_timer_init(&limit, give_up, 10., 0.);
    ev_timer_start(loop, &limit);
    ev_run(loop, 0);
    ev_timer_stop(loop, &limit);
    o.at -= start;
    return o;
}

static void a_child_ends_with_its_output(void **state)
{
    (void)state;
    char *const argv[] = {"/bin/echo", "token", NULL};
    struct outcome o = run(argv, 5000);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.rc, 0);
    assert_string_equal(o.out, "token\n");
}

static void a_descendant_holding_the_pipes_cannot_hold_the_run(void **state)
{
    (void)state;
    /* The child answers and exits; what it left in the background keeps its stdout open for
     * 5 s. The run ends at its 1 s limit. Before, the limit was dropped once the child was
     * reaped, so the run lasted as long as the descendant held the pipes (here 5 s, ending
     * "well"; forever for a helper that never exits), and every waiter of an exec credential,
     * every API call of the process, waited with it. */
    char *const argv[] = {"/bin/sh", "-c", "echo token; sleep 5 & exit 0", NULL};
    struct outcome o = run(argv, 1000);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.rc, -TELO_ETIMEDOUT);
    assert_true(o.at >= 0.9 && o.at < 4.);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_child_ends_with_its_output),
        cmocka_unit_test(a_descendant_holding_the_pipes_cannot_hold_the_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

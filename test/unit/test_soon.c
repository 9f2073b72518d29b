/* Tests for pkg/util/soon.c: work scheduled soon runs once the loop is idle, and within its bound
 * on a loop that never is. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "util/soon.h"

#include <ev.h>
#include <sys/socket.h>
#include <unistd.h>

struct counter {
    int calls;
    ev_tstamp at;
    struct ev_loop *loop;
};

static void count(void *ud)
{
    struct counter *c = ud;
    c->calls++;
    c->at = ev_time();
}

static void ignore(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static void runs_once_when_the_loop_is_idle(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct counter c = {0};
    struct util_soon s;
    util_soon_init(&s, 10.0, count, &c);
    util_soon_schedule(loop, &s);
    util_soon_schedule(loop, &s); /* one call for both */
    ev_run(loop, EVRUN_NOWAIT);
    assert_int_equal(c.calls, 1);
    ev_run(loop, EVRUN_NOWAIT);
    assert_int_equal(c.calls, 1);
    /* Again, and withdrawn. */
    util_soon_schedule(loop, &s);
    util_soon_cancel(loop, &s);
    ev_run(loop, EVRUN_NOWAIT);
    assert_int_equal(c.calls, 1);
    ev_loop_destroy(loop);
}

/* A watcher whose fd stays readable (never read) is pending in every pass: an idle watcher
 * never runs there. The work still runs, at its bound. */
static void runs_within_its_bound_on_a_loop_that_is_never_idle(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    assert_int_equal(write(fds[1], "!", 1), 1);
    ev_io busy;
    ev_io_init(&busy, ignore, fds[0], EV_READ);
    ev_io_start(loop, &busy);
    struct counter c = {0};
    struct util_soon s;
    util_soon_init(&s, 0.05, count, &c);
    for (int round = 0; round < 2; round++) { /* the bound holds after a first call too */
        ev_tstamp start = ev_time();
        util_soon_schedule(loop, &s);
        while (c.calls == round && ev_time() - start < 2.0)
            ev_run(loop, EVRUN_ONCE);
        assert_int_equal(c.calls, round + 1);
        assert_true(c.at - start >= 0.04);
        assert_true(c.at - start < 1.0);
    }
    ev_io_stop(loop, &busy);
    close(fds[0]);
    close(fds[1]);
    ev_loop_destroy(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(runs_once_when_the_loop_is_idle),
        cmocka_unit_test(runs_within_its_bound_on_a_loop_that_is_never_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

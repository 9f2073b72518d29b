/* Tests for pkg/gateway/linger.c: refused sockets read to their end, bounded in number and time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/linger.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}

/* Whether the peer of sv[1] saw its end (EOF): our side was closed. */
static int closed(int peer)
{
    char c;
    return recv(peer, &c, 1, MSG_DONTWAIT) == 0;
}

static void run_for(struct ev_loop *loop, double s)
{
    double until = ev_time() + s;
    while (ev_time() < until)
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
}

static void reads_until_the_peer_closes_and_caps_the_count(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct gw_lingering *l = gw_lingering_new(loop, 2, 30);
    assert_non_null(l);
    int a[2], b[2], c[2];
    pair(a);
    pair(b);
    pair(c);
    gw_lingering_add(l, a[0]);
    gw_lingering_add(l, b[0]);
    gw_lingering_add(l, c[0]); /* over the cap: closed at once */
    assert_true(closed(c[1]));
    assert_int_equal(send(a[1], "late request", 12, 0), 12);
    run_for(loop, 0.05);
    assert_false(closed(a[1])); /* read and dropped, kept open */
    close(a[1]);                /* the peer's end: ours follows */
    run_for(loop, 0.05);
    assert_int_equal(fcntl(a[0], F_GETFD), -1);
    assert_int_equal(errno, EBADF);
    assert_false(closed(b[1]));
    gw_lingering_add(l, c[1]); /* a slot is free again */
    gw_lingering_free(l);      /* closes b[0] and c[1] */
    assert_true(closed(b[1]));
    assert_int_equal(fcntl(c[1], F_GETFD), -1);
    close(b[1]);
    ev_loop_destroy(loop);
}

static void gives_up_after_its_time(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct gw_lingering *l = gw_lingering_new(loop, 4, 0.05);
    int a[2];
    pair(a);
    gw_lingering_add(l, a[0]);
    run_for(loop, 0.2);
    assert_true(closed(a[1]));
    close(a[1]);
    gw_lingering_free(l);
    gw_lingering_free(NULL);
    ev_loop_destroy(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_until_the_peer_closes_and_caps_the_count),
        cmocka_unit_test(gives_up_after_its_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

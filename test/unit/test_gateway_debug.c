/* Tests for pkg/gateway/debug.c: the relay against an inspector (a child process) that streams
 * events without pause, as a hostile or busy session app may, or that never answers; a client
 * that stops reading; and the session's pod, read from a mock_http API server before a connect. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/debug.h"
#include "mock_client.h"
#include "util/buf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EVENT_TEXT_BYTES 65536

struct inspector {
    pid_t pid;
    int port;
    int report; /* read end: the bytes the child wrote in its last second */
};

/* The child: answers the relay's request with an event stream and writes events for seconds,
 * then reports how many bytes went out in the last second and exits. */
static void inspector_run(int listener, double seconds, size_t text_bytes, int report)
{
    int c = accept(listener, NULL, NULL);
    char req[1024];
    if (c < 0 || read(c, req, sizeof(req)) <= 0)
        _exit(1);
    static const char head[] = "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
    if (write(c, head, sizeof(head) - 1) != (ssize_t)(sizeof(head) - 1))
        _exit(1);
    static char event[EVENT_TEXT_BYTES + 64];
    int n = snprintf(event, sizeof(event), "data: {\"kind\":\"event\",\"s\":\"");
    memset(event + n, 'x', text_bytes);
    n += (int)text_bytes;
    n += snprintf(event + n, sizeof(event) - (size_t)n, "\"}\n\n");
    fcntl(c, F_SETFL, O_NONBLOCK);
    double start = ev_time(), last_second = start + seconds - 1;
    unsigned long long late = 0;
    size_t off = 0;
    while (ev_time() - start < seconds) {
        ssize_t w = write(c, event + off, (size_t)n - off);
        if (w > 0) {
            off = (off + (size_t)w) % (size_t)n;
            if (ev_time() >= last_second)
                late += (unsigned long long)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN)
            break;
        struct pollfd p = {.fd = c, .events = POLLOUT};
        poll(&p, 1, 50);
    }
    if (write(report, &late, sizeof(late)) != sizeof(late))
        _exit(1);
    _exit(0);
}

/* An inspector whose events carry text_bytes of text each (at most EVENT_TEXT_BYTES). */
static struct inspector inspector_start_sized(double seconds, size_t text_bytes)
{
    struct inspector in = {0};
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    in.pid = fork();
    assert_true(in.pid >= 0);
    if (in.pid == 0) {
        close(pipefd[0]);
        inspector_run(l, seconds, text_bytes, pipefd[1]);
    }
    close(l);
    close(pipefd[1]);
    in.port = ntohs(a.sin_port);
    in.report = pipefd[0];
    return in;
}

static struct inspector inspector_start(double seconds)
{
    return inspector_start_sized(seconds, EVENT_TEXT_BYTES);
}

/* Waits for the child; returns what it wrote in its last second. */
static unsigned long long inspector_finish(struct inspector *in)
{
    unsigned long long late = 0;
    assert_int_equal(read(in->report, &late, sizeof(late)), (ssize_t)sizeof(late));
    close(in->report);
    waitpid(in->pid, NULL, 0);
    return late;
}

struct ticks {
    int n, want;
};

static void tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct ticks *t = w->data;
    if (++t->n >= t->want)
        ev_break(loop, EVBREAK_ALL);
}

static void drain(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    char sink[65536];
    while (read(w->fd, sink, sizeof(sink)) > 0) {
    }
}

static struct gw_relays *relay_to(struct ev_loop *loop, const struct inspector *in, int sv[2])
{
    struct gw_relays *r = gw_relays_new(loop, NULL, 20);
    assert_non_null(r);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct telo_err err = {0};
    assert_int_equal(gw_relays_add(r, sv[0], NULL, "127.0.0.1", in->port, "ns/s", NULL, &err), 0);
    return r;
}

/* The relay takes a few reads per event, so the other tenants' timers keep their time: ten ticks
 * of 0.1 s take about a second. The old relay read until the socket was empty, which an app
 * writing faster than we parse never lets happen: the first tick came when the app stopped. */
static void a_fast_inspector_does_not_hold_the_loop(void **state)
{
    (void)state;
    struct inspector in = inspector_start(4);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int sv[2];
    struct gw_relays *r = relay_to(loop, &in, sv);
    ev_io reader;
    ev_io_init(&reader, drain, sv[1], EV_READ);
    ev_io_start(loop, &reader);
    struct ticks t = {.want = 10};
    ev_timer timer;
    ev_timer_init(&timer, tick, 0.1, 0.1);
    timer.data = &t;
    ev_timer_start(loop, &timer);
    double start = ev_time();
    ev_run(loop, 0);
    double took = ev_time() - start;
    assert_int_equal(t.n, 10);
    assert_true(took < 2.5);
    assert_true(gw_relays_frames(r) > 0);
    gw_relays_free(r);
    inspector_finish(&in);
    close(sv[1]);
    ev_loop_destroy(loop);
}

/* Tiny events (data:{"kind":"event","s":""}, 31 bytes): a turn ends after UP_TURN_EVENTS (256)
 * of them and the read it was in, about 800 at most, where its 16 reads were about 8,000, each
 * parsed and framed while the loop waited. The inspector has had time to fill the socket before
 * each pass. */
static void a_turn_relays_a_bounded_number_of_tiny_events(void **state)
{
    (void)state;
    struct inspector in = inspector_start_sized(3, 0);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int sv[2];
    struct gw_relays *r = relay_to(loop, &in, sv);
    ev_io reader;
    ev_io_init(&reader, drain, sv[1], EV_READ);
    ev_io_start(loop, &reader);
    unsigned long most = 0;
    for (int pass = 0; pass < 40; pass++) {
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
        unsigned long before = gw_relays_frames(r);
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
        unsigned long relayed = gw_relays_frames(r) - before;
        if (relayed > most)
            most = relayed;
    }
    assert_true(gw_relays_frames(r) > 0);
    assert_in_range(most, 256, 1024);
    gw_relays_free(r);
    inspector_finish(&in);
    close(sv[1]);
    ev_loop_destroy(loop);
}

/* A client that does not read holds the inspector back: once its queue is full the relay stops
 * reading, so TCP stops the app's writes. The old relay kept reading and parsing only to drop
 * the frames, megabytes a second of one core for nobody. */
static void a_client_that_does_not_read_holds_the_inspector_back(void **state)
{
    (void)state;
    struct inspector in = inspector_start(3);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int sv[2];
    struct gw_relays *r = relay_to(loop, &in, sv);
    struct ticks t = {.want = 1};
    ev_timer timer;
    ev_timer_init(&timer, tick, 3.5, 0.);
    timer.data = &t;
    ev_timer_start(loop, &timer);
    ev_run(loop, 0);
    unsigned long long late = inspector_finish(&in);
    assert_true(gw_relays_frames(r) > 0);
    assert_true(late < ((unsigned long long)1 << 20));
    gw_relays_free(r);
    close(sv[1]);
    ev_loop_destroy(loop);
}

/* A session's debug streams are counted apart from other sessions' (the gateway caps them with
 * its attach clients), and one whose client left is counted no more. */
static void relays_are_counted_per_session(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct gw_relays *r = gw_relays_new(loop, NULL, 20);
    assert_non_null(r);
    static const char *const sessions[] = {"ns/a", "ns/a", "ns/b"};
    int clients[3];
    for (int i = 0; i < 3; i++) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
        struct telo_err err = {0};
        /* Port 1 on loopback: no inspector, the relay keeps retrying. */
        assert_int_equal(gw_relays_add(r, sv[0], NULL, "127.0.0.1", 1, sessions[i], NULL, &err), 0);
        clients[i] = sv[1];
    }
    assert_int_equal(gw_relays_session_count(r, "ns/a"), 2);
    assert_int_equal(gw_relays_session_count(r, "ns/b"), 1);
    assert_int_equal(gw_relays_session_count(r, "ns/c"), 0);
    close(clients[0]);
    for (int i = 0; i < 20 && gw_relays_session_count(r, "ns/a") == 2; i++)
        ev_run(loop, EVRUN_NOWAIT);
    assert_int_equal(gw_relays_session_count(r, "ns/a"), 1);
    assert_int_equal(gw_relays_count(r), 2);
    gw_relays_free(r);
    close(clients[1]);
    close(clients[2]);
    ev_loop_destroy(loop);
}

struct accepts {
    int n;
    int fds[8];
};

/* Accepts, and never reads or writes: an inspector that took the connection and hung. */
static void accept_and_hang(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct accepts *a = w->data;
    int fd = accept(w->fd, NULL, NULL);
    if (fd < 0)
        return;
    if (a->n < 8)
        a->fds[a->n] = fd;
    else
        close(fd);
    if (++a->n >= 2)
        ev_break(loop, EVBREAK_ALL);
}

/* An inspector that accepts and never answers is given up after the answer deadline and
 * connected to again after the backoff (0.5 s): before, the stream froze on its first
 * connection for good. */
static void an_inspector_that_never_answers_is_connected_to_again(void **state)
{
    (void)state;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(l, 4), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct gw_relays *r = gw_relays_new(loop, NULL, 20);
    assert_non_null(r);
    gw_relays_set_deadlines(r, 0.2, 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct telo_err err = {0};
    assert_int_equal(
        gw_relays_add(r, sv[0], NULL, "127.0.0.1", ntohs(a.sin_port), "ns/s", NULL, &err), 0);
    struct accepts acc = {0};
    ev_io listener;
    ev_io_init(&listener, accept_and_hang, l, EV_READ);
    listener.data = &acc;
    ev_io_start(loop, &listener);
    ev_io reader;
    ev_io_init(&reader, drain, sv[1], EV_READ);
    ev_io_start(loop, &reader);
    struct ticks t = {.want = 1};
    ev_timer timer;
    ev_timer_init(&timer, tick, 3, 0.);
    timer.data = &t;
    ev_timer_start(loop, &timer);
    ev_run(loop, 0);
    assert_int_equal(acc.n, 2);
    assert_int_equal(t.n, 0);
    gw_relays_free(r);
    for (int i = 0; i < acc.n && i < 8; i++)
        close(acc.fds[i]);
    close(l);
    close(sv[1]);
    ev_loop_destroy(loop);
}

/* A client that reads nothing while the inspector streams has its relay ended once the stall
 * deadline passed without a byte taken, and counted: before, it held its debug slot (one of 8 a
 * namespace) as long as it stayed connected. */
static void a_client_that_stops_reading_loses_its_relay(void **state)
{
    (void)state;
    struct inspector in = inspector_start(2);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct gw_relays *r = gw_relays_new(loop, NULL, 20);
    assert_non_null(r);
    gw_relays_set_deadlines(r, 0, 0.2);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct telo_err err = {0};
    assert_int_equal(gw_relays_add(r, sv[0], NULL, "127.0.0.1", in.port, "ns/s", NULL, &err), 0);
    struct ticks t = {.want = 1};
    ev_timer timer;
    ev_timer_init(&timer, tick, 0.05, 0.05);
    timer.data = &t;
    ev_timer_start(loop, &timer);
    for (int i = 0; i < 60 && gw_relays_count(r) > 0; i++)
        ev_run(loop, 0); /* a tick: 3 s in all */
    ev_timer_stop(loop, &timer);
    assert_int_equal(gw_relays_count(r), 0);
    assert_int_equal(gw_relays_stalled(r), 1);
    assert_true(gw_relays_frames(r) > 0);
    gw_relays_free(r);
    inspector_finish(&in);
    close(sv[1]);
    ev_loop_destroy(loop);
}

/* What the mock API server says of the session's pod (ns/s-pod), set before it forks: the uid
 * and name of its controller, and its podIP. */
static const char *pod_owner_uid = "uid-1";
static const char *pod_owner_name = "s";
static const char *pod_address = "127.0.0.1";

static void route(int fd, const struct mock_req *req)
{
    if (strcmp(req->path, "/api/v1/namespaces/ns/pods/s-pod") != 0)
        return mock_reply(fd, 404, NULL, "{\"kind\":\"Status\",\"code\":404}");
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"metadata\":{\"name\":\"s-pod\",\"ownerReferences\":[{\"apiVersion\":"
             "\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"name\":\"%s\",\"uid\":\"%s\","
             "\"controller\":true}]},\"status\":{\"phase\":\"Running\",\"podIP\":\"%s\"}}",
             pod_owner_name, pod_owner_uid, pod_address);
    mock_reply(fd, 200, NULL, body);
}

/* Accepts and closes at once, counting: a stranger's inspector, which must never be reached. */
static void count_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    int fd = accept(w->fd, NULL, NULL);
    if (fd < 0)
        return;
    (*(int *)w->data)++;
    close(fd);
}

/* Appends what the client is sent to the struct buf in w->data. */
static void collect(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    char chunk[4096];
    ssize_t n;
    while ((n = read(w->fd, chunk, sizeof(chunk))) > 0)
        buf_append(w->data, chunk, (size_t)n);
}

/* Runs loop for seconds. */
static void run_for(struct ev_loop *loop, double seconds)
{
    struct ticks t = {.want = 1};
    ev_timer timer;
    ev_timer_init(&timer, tick, seconds, 0.);
    timer.data = &t;
    ev_timer_start(loop, &timer);
    ev_run(loop, 0);
    ev_timer_stop(loop, &timer);
}

/* A relay of session ns/s (uid-1, status.podName s-pod, status.podIP 127.0.0.1) run for a second
 * against a listener on 127.0.0.1 that counts connections, with the pod the mock API server
 * describes. Returns the connections; what the client was sent is in sent. */
static int connections_to_the_pod_address(struct buf *sent)
{
    struct mock_client *api = mock_client_new("debug", route, "gw", NULL);
    assert_non_null(api);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(l, 8), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    int accepted = 0;
    ev_io listener;
    ev_io_init(&listener, count_accept, l, EV_READ);
    listener.data = &accepted;
    ev_io_start(api->loop, &listener);
    struct gw_relays *r = gw_relays_new(api->loop, api->t, 20);
    assert_non_null(r);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    ev_io reader;
    ev_io_init(&reader, collect, sv[1], EV_READ);
    reader.data = sent;
    ev_io_start(api->loop, &reader);
    struct gw_relay_client who = {.namespace = "ns", .name = "s", .uid = "uid-1", .pod = "s-pod"};
    struct telo_err err = {0};
    assert_int_equal(
        gw_relays_add(r, sv[0], NULL, "127.0.0.1", ntohs(a.sin_port), "ns/s", &who, &err), 0);
    run_for(api->loop, 1);
    ev_io_stop(api->loop, &listener);
    ev_io_stop(api->loop, &reader);
    gw_relays_free(r);
    close(l);
    close(sv[1]);
    mock_client_free(api);
    return accepted;
}

/* The session's status still names the address of its deleted pod, which another tenant's pod
 * with an inspector now has; the pod of the session's pod name is a stranger's. Before, the relay
 * connected to the address (1 connection, the stranger's events relayed). */
static void a_pod_another_session_controls_is_not_connected_to(void **state)
{
    (void)state;
    pod_owner_uid = "uid-b";
    pod_owner_name = "b";
    struct buf sent;
    buf_init(&sent, 1 << 16);
    assert_int_equal(connections_to_the_pod_address(&sent), 0);
    buf_release(&sent);
    pod_owner_uid = "uid-1";
    pod_owner_name = "s";
}

/* The session's own pod, at another address than the status names (the pod was made again and
 * the status not yet rewritten): the old address may be another tenant's now. Before, the relay
 * connected to it. */
static void a_pod_at_another_address_is_not_connected_to(void **state)
{
    (void)state;
    pod_address = "127.0.0.2";
    struct buf sent;
    buf_init(&sent, 1 << 16);
    assert_int_equal(connections_to_the_pod_address(&sent), 0);
    buf_release(&sent);
    pod_address = "127.0.0.1";
}

/* The pod of the session's pod name is controlled by another TeloSession of its name: the
 * session was replaced, and its stream ends with 410 as on re-authorization. Before, the relay
 * connected to the address. */
static void a_successor_s_pod_ends_the_stream_with_410(void **state)
{
    (void)state;
    pod_owner_uid = "uid-2";
    struct buf sent;
    buf_init(&sent, 1 << 16);
    assert_int_equal(connections_to_the_pod_address(&sent), 0);
    assert_non_null(strstr(sent.data, "event: error\ndata: "));
    assert_non_null(strstr(sent.data, "\"code\":410"));
    buf_release(&sent);
    pod_owner_uid = "uid-1";
}

/* The session's own pod at the status's address: the inspector's events are relayed. */
static void the_session_s_own_pod_is_relayed(void **state)
{
    (void)state;
    struct mock_client *api = mock_client_new("debug", route, "gw", NULL);
    assert_non_null(api);
    struct inspector in = inspector_start_sized(1.5, 0);
    struct gw_relays *r = gw_relays_new(api->loop, api->t, 20);
    assert_non_null(r);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    ev_io reader;
    ev_io_init(&reader, drain, sv[1], EV_READ);
    ev_io_start(api->loop, &reader);
    struct gw_relay_client who = {.namespace = "ns", .name = "s", .uid = "uid-1", .pod = "s-pod"};
    struct telo_err err = {0};
    assert_int_equal(gw_relays_add(r, sv[0], NULL, "127.0.0.1", in.port, "ns/s", &who, &err), 0);
    run_for(api->loop, 1);
    assert_true(gw_relays_frames(r) > 0);
    ev_io_stop(api->loop, &reader);
    gw_relays_free(r);
    inspector_finish(&in);
    close(sv[1]);
    mock_client_free(api);
}

int main(void)
{
    (void)mock_stream_start; /* the shared mock's streaming helper is not needed here */
    /* A relay writing to a client that left must not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_fast_inspector_does_not_hold_the_loop),
        cmocka_unit_test(a_turn_relays_a_bounded_number_of_tiny_events),
        cmocka_unit_test(a_client_that_does_not_read_holds_the_inspector_back),
        cmocka_unit_test(relays_are_counted_per_session),
        cmocka_unit_test(an_inspector_that_never_answers_is_connected_to_again),
        cmocka_unit_test(a_client_that_stops_reading_loses_its_relay),
        cmocka_unit_test(a_pod_another_session_controls_is_not_connected_to),
        cmocka_unit_test(a_pod_at_another_address_is_not_connected_to),
        cmocka_unit_test(a_successor_s_pod_ends_the_stream_with_410),
        cmocka_unit_test(the_session_s_own_pod_is_relayed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

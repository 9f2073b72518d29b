/* Tests for pkg/ws/conn.c: a client and a server connection over a socketpair on a libev loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "ws/conn.h"
#include "ws/frame.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct side {
    struct ws_conn *c;
    int messages;
    int last_opcode;
    uint8_t last[300000];
    size_t last_len;
    int drains;
    int closed;
    int close_code;
    char close_reason[128];
};

static void on_message(struct ws_conn *c, int opcode, const uint8_t *data, size_t len, void *ud)
{
    (void)c;
    struct side *s = ud;
    s->messages++;
    s->last_opcode = opcode;
    s->last_len = len < sizeof(s->last) ? len : sizeof(s->last);
    memcpy(s->last, data, s->last_len);
}

static void on_drain(struct ws_conn *c, void *ud)
{
    (void)c;
    ((struct side *)ud)->drains++;
}

static void on_closed(struct ws_conn *c, int code, const char *reason, void *ud)
{
    struct side *s = ud;
    s->closed++;
    s->close_code = code;
    snprintf(s->close_reason, sizeof(s->close_reason), "%s", reason);
    ws_conn_free(c);
    s->c = NULL;
}

static const struct ws_conn_callbacks cbs = {
    .on_message = on_message, .on_drain = on_drain, .on_closed = on_closed};

struct pair {
    struct ev_loop *loop;
    struct side server, client;
    int fds[2];
};

static struct pair *pair_new(size_t max_message, size_t max_queued)
{
    struct pair *p = calloc(1, sizeof(*p));
    p->loop = ev_loop_new(EVFLAG_AUTO);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
    fcntl(p->fds[0], F_SETFL, O_NONBLOCK);
    fcntl(p->fds[1], F_SETFL, O_NONBLOCK);
    struct ws_conn_opts so = {.max_message = max_message, .max_queued = max_queued};
    struct ws_conn_opts co = so;
    co.client = 1;
    p->server.c = ws_conn_new(p->loop, p->fds[0], NULL, &so, &cbs, &p->server, NULL);
    p->client.c = ws_conn_new(p->loop, p->fds[1], NULL, &co, &cbs, &p->client, NULL);
    assert_non_null(p->server.c);
    assert_non_null(p->client.c);
    return p;
}

static void run_until(struct pair *p, const int *flag, int want)
{
    for (int i = 0; i < 2000 && *flag < want; i++)
        ev_run(p->loop, EVRUN_ONCE | EVRUN_NOWAIT);
}

static void pair_free(struct pair *p)
{
    ws_conn_free(p->server.c);
    ws_conn_free(p->client.c);
    ev_loop_destroy(p->loop);
    free(p);
}

static void messages_both_ways_with_prefix(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 0);
    const uint8_t ch = 1;
    assert_int_equal(ws_conn_send(p->server.c, WS_OP_BINARY, &ch, 1, "hello", 5, 0), 0);
    run_until(p, &p->client.messages, 1);
    assert_int_equal(p->client.last_opcode, WS_OP_BINARY);
    assert_int_equal(p->client.last_len, 6);
    assert_memory_equal(p->client.last, "\x01hello", 6);
    /* Client frames are masked on the wire; the server sees the clear text. */
    static uint8_t big[200000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 13);
    assert_int_equal(ws_conn_send(p->client.c, WS_OP_TEXT, NULL, 0, big, sizeof(big), 0), 0);
    run_until(p, &p->server.messages, 1);
    assert_int_equal(p->server.last_opcode, WS_OP_TEXT);
    assert_int_equal(p->server.last_len, sizeof(big));
    assert_memory_equal(p->server.last, big, sizeof(big));
    pair_free(p);
}

static void fragments_and_pings_from_a_raw_peer(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 0);
    /* Write raw frames from the client's socket: stop the client's conn first. */
    int raw = dup(p->fds[1]); /* stays open when the client's conn closes its fd */
    ws_conn_free(p->client.c);
    p->client.c = NULL;
    const uint8_t mask[4] = {9, 8, 7, 6};
    uint8_t buf[64];
    size_t n = 0;
    /* Frame payloads are bytes, not C strings: no terminator. */
    const uint8_t part1[] = {'a', 'b'}, part2[] = {'c', 'd'};
    n += ws_frame_header(buf + n, WS_OP_TEXT, 0, 2, mask);
    memcpy(buf + n, part1, 2);
    ws_mask(buf + n, 2, mask, 0);
    n += 2;
    n += ws_frame_header(buf + n, WS_OP_PING, 1, 0, mask); /* a ping between fragments */
    n += ws_frame_header(buf + n, WS_OP_CONT, 1, 2, mask);
    memcpy(buf + n, part2, 2);
    ws_mask(buf + n, 2, mask, 0);
    n += 2;
    assert_int_equal(write(raw, buf, n), (ssize_t)n);
    run_until(p, &p->server.messages, 1);
    assert_int_equal(p->server.messages, 1);
    assert_memory_equal(p->server.last, "abcd", 4);
    /* The pong came back, unmasked. */
    uint8_t in[16];
    ssize_t got = read(raw, in, sizeof(in));
    assert_int_equal(got, 2);
    assert_int_equal(in[0], 0x80 | WS_OP_PONG);
    /* A client frame without a mask is a protocol error: close 1002, then the end. */
    uint8_t unmasked[] = {0x82, 0x00};
    assert_int_equal(write(raw, unmasked, 2), 2);
    run_until(p, &p->server.closed, 1);
    assert_int_equal(p->server.closed, 1);
    got = read(raw, in, sizeof(in));
    assert_true(got >= 4);
    assert_int_equal(in[0], 0x80 | WS_OP_CLOSE);
    assert_int_equal((in[2] << 8) | in[3], WS_CLOSE_PROTOCOL_ERROR);
    close(raw);
    pair_free(p);
}

/* A plain socket stops reading at a short read (no read that only says EAGAIN): a frame cut in
 * two is still delivered once its second half arrives, and two frames in one read both are. */
static void a_frame_in_pieces_and_frames_together_from_a_raw_peer(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 0);
    int raw = dup(p->fds[1]);
    ws_conn_free(p->client.c);
    p->client.c = NULL;
    const uint8_t mask[4] = {1, 2, 3, 4};
    uint8_t buf[64];
    const uint8_t typed[] = {'t', 'y', 'p', 'e', 'd'};
    size_t n = ws_frame_header(buf, WS_OP_BINARY, 1, 5, mask);
    memcpy(buf + n, typed, 5);
    ws_mask(buf + n, 5, mask, 0);
    n += 5;
    assert_int_equal(write(raw, buf, 3), 3);
    for (int i = 0; i < 20; i++)
        ev_run(p->loop, EVRUN_NOWAIT);
    assert_int_equal(p->server.messages, 0);
    assert_int_equal(write(raw, buf + 3, n - 3), (ssize_t)(n - 3));
    run_until(p, &p->server.messages, 1);
    assert_int_equal(p->server.messages, 1);
    assert_memory_equal(p->server.last, "typed", 5);
    uint8_t two[128];
    memcpy(two, buf, n);
    memcpy(two + n, buf, n);
    two[n + n - 1] ^= 'd' ^ 'D'; /* the second one says typeD */
    assert_int_equal(write(raw, two, 2 * n), (ssize_t)(2 * n));
    run_until(p, &p->server.messages, 3);
    assert_int_equal(p->server.messages, 3);
    assert_memory_equal(p->server.last, "typeD", 5);
    close(raw);
    pair_free(p);
}

static void an_invalid_close_code_is_a_protocol_error(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 0);
    int raw = dup(p->fds[1]);
    ws_conn_free(p->client.c);
    p->client.c = NULL;
    const uint8_t mask[4] = {1, 2, 3, 4};
    uint8_t buf[16], payload[3] = {0x03, 0xE7, '\n'}; /* 999, and a newline in the reason */
    size_t n = ws_frame_header(buf, WS_OP_CLOSE, 1, sizeof(payload), mask);
    memcpy(buf + n, payload, sizeof(payload));
    ws_mask(buf + n, sizeof(payload), mask, 0);
    n += sizeof(payload);
    assert_int_equal(write(raw, buf, n), (ssize_t)n);
    run_until(p, &p->server.closed, 1);
    assert_int_equal(p->server.closed, 1);
    assert_int_equal(p->server.close_code, WS_CLOSE_PROTOCOL_ERROR);
    uint8_t in[64];
    ssize_t got = read(raw, in, sizeof(in));
    assert_true(got >= 4);
    assert_int_equal((in[2] << 8) | in[3], WS_CLOSE_PROTOCOL_ERROR);
    close(raw);
    pair_free(p);
}

static void closing_handshake_reports_once_on_both_sides(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 0);
    ws_conn_close(p->server.c, WS_CLOSE_NORMAL, "exit 3");
    assert_int_equal(ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, "x", 1, 1), -TELO_EIO);
    run_until(p, &p->server.closed, 1);
    run_until(p, &p->client.closed, 1);
    assert_int_equal(p->client.closed, 1);
    assert_int_equal(p->client.close_code, WS_CLOSE_NORMAL);
    assert_string_equal(p->client.close_reason, "exit 3");
    assert_int_equal(p->server.closed, 1);
    assert_int_equal(p->server.close_code, WS_CLOSE_NORMAL);
    pair_free(p);
}

static void bounded_queue_refuses_then_drains(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 100000);
    static uint8_t chunk[30000];
    int sent = 0;
    /* Nobody runs the loop, so the socket fills and the queue grows to its bound. */
    while (ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, chunk, sizeof(chunk), 0) == 0)
        sent++;
    assert_true(ws_conn_queued(p->server.c) > 0);
    assert_int_equal(ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, chunk, sizeof(chunk), 0),
                     -TELO_ETOOBIG);
    /* force ignores the bound (a final status must not be lost). */
    assert_int_equal(ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, "end", 3, 1), 0);
    run_until(p, &p->client.messages, sent + 1);
    assert_int_equal(p->client.messages, sent + 1);
    assert_memory_equal(p->client.last, "end", 3);
    assert_true(p->server.drains >= 1);
    assert_int_equal(ws_conn_queued(p->server.c), 0);
    pair_free(p);
}

/* Writes masked pings numbered from *next to fd until the socket is full or limit bytes went;
 * returns the bytes written. */
static size_t write_pings(int fd, uint32_t *next, size_t limit)
{
    static const uint8_t mask[4] = {5, 6, 7, 8};
    size_t total = 0;
    while (total < limit) {
        uint8_t buf[WS_MAX_HEADER + WS_MAX_CONTROL];
        uint8_t payload[WS_MAX_CONTROL];
        memset(payload, 'p', sizeof(payload));
        memcpy(payload, next, sizeof(*next));
        size_t n = ws_frame_header(buf, WS_OP_PING, 1, sizeof(payload), mask);
        memcpy(buf + n, payload, sizeof(payload));
        ws_mask(buf + n, sizeof(payload), mask, 0);
        n += sizeof(payload);
        ssize_t w = write(fd, buf, n);
        if (w < 0)
            break;
        assert_int_equal(w, (ssize_t)n); /* a unix socket takes a small write whole or not */
        total += n;
        (*next)++;
    }
    return total;
}

static int unread(int fd)
{
    int n = 0;
    assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
    return n;
}

/* A peer that pings without pause and never reads: the pongs count against the queue's bound
 * (one waits at a time, answering the latest ping), so the queue stays within it, and the
 * connection stops reading while it is there: the peer's writes block instead of our memory
 * growing. Once the peer reads, reading resumes and the last pong answers the last ping. */
static void pings_from_a_non_reader_stay_within_the_bound(void **state)
{
    (void)state;
    const size_t bound = 65536;
    struct pair *p = pair_new(0, bound);
    int raw = dup(p->fds[1]);
    fcntl(raw, F_SETFL, O_NONBLOCK);
    ws_conn_free(p->client.c);
    p->client.c = NULL;
    uint32_t next = 0;
    size_t written = 0, max_queued = 0;
    for (int round = 0; round < 400 && written < ((size_t)32 << 20); round++) {
        written += write_pings(raw, &next, (size_t)1 << 20);
        for (int i = 0; i < 4; i++)
            ev_run(p->loop, EVRUN_NOWAIT);
        assert_non_null(p->server.c);
        size_t q = ws_conn_queued(p->server.c);
        if (q > max_queued)
            max_queued = q;
    }
    /* The old code queued a pong per ping: megabytes here. */
    assert_true(max_queued <= bound);
    /* Reading stopped: the peer's bytes wait in the socket and its writes stopped being taken. */
    assert_true(written < ((size_t)32 << 20));
    assert_true(unread(p->fds[0]) > 0);
    size_t before = written;
    written += write_pings(raw, &next, (size_t)1 << 20);
    assert_int_equal(written, before);
    /* The peer reads: the connection reads again and answers, the last pong with the last ping's
     * payload. */
    uint32_t last_pong = 0;
    size_t pongs = 0;
    static uint8_t in[1 << 16];
    size_t have = 0;
    for (int round = 0; round < 5000; round++) {
        ssize_t n = read(raw, in + have, sizeof(in) - have);
        if (n > 0)
            have += (size_t)n;
        size_t pos = 0;
        while (have - pos >= 2 + 4 && in[pos] == (0x80 | WS_OP_PONG)) {
            size_t len = in[pos + 1] & 0x7F;
            if (have - pos < 2 + len)
                break;
            memcpy(&last_pong, in + pos + 2, sizeof(last_pong));
            pongs++;
            pos += 2 + len;
        }
        memmove(in, in + pos, have - pos);
        have -= pos;
        ev_run(p->loop, EVRUN_NOWAIT);
        if (unread(p->fds[0]) == 0 && ws_conn_queued(p->server.c) == 0 && have == 0 &&
            last_pong == next - 1)
            break;
    }
    assert_int_equal(unread(p->fds[0]), 0);
    assert_int_equal(last_pong, next - 1);
    assert_true(pongs < next); /* coalesced */
    assert_int_equal(p->server.closed, 0);
    close(raw);
    pair_free(p);
}

static void oversized_message_closes_with_1009(void **state)
{
    (void)state;
    struct pair *p = pair_new(1000, 0);
    static uint8_t big[2000];
    assert_int_equal(ws_conn_send(p->client.c, WS_OP_BINARY, NULL, 0, big, sizeof(big), 0), 0);
    run_until(p, &p->client.closed, 1);
    assert_int_equal(p->server.messages, 0);
    assert_int_equal(p->client.close_code, WS_CLOSE_TOO_BIG);
    pair_free(p);
}

/* Bytes the process has allocated now: the sanitizer's allocator does not report to mallinfo2. */
#if defined(__SANITIZE_ADDRESS__)
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t allocated(void)
{
    return __sanitizer_get_current_allocated_bytes();
}
#else
static size_t allocated(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
#endif

/* Writes one masked frame of len zero bytes (payload NULL) or of payload to fd, running the loop
 * while the socket is full. */
static void write_frame(struct pair *p, int fd, int opcode, int fin, const uint8_t *payload,
                        size_t len)
{
    static const uint8_t mask[4] = {1, 2, 3, 4};
    uint8_t *buf = calloc(1, WS_MAX_HEADER + len);
    assert_non_null(buf);
    size_t n = ws_frame_header(buf, opcode, fin, len, mask);
    if (payload != NULL)
        memcpy(buf + n, payload, len);
    ws_mask(buf + n, len, mask, 0);
    n += len;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w > 0)
            off += (size_t)w;
        ev_run(p->loop, EVRUN_NOWAIT);
    }
    for (int i = 0; i < 50; i++)
        ev_run(p->loop, EVRUN_NOWAIT);
    free(buf);
}

/* A peer that sends one message of nearly the limit and then only pings keeps the connection's
 * small buffers, not its peak: the input buffer shrinks at once, the message buffer once the
 * message is done. The old code held both at ~1 MiB for good (2 MiB a connection). */
static void buffers_shrink_after_a_large_message(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 0);
    int raw = dup(p->fds[1]);
    ws_conn_free(p->client.c);
    p->client.c = NULL;
    for (int i = 0; i < 10; i++)
        ev_run(p->loop, EVRUN_NOWAIT);
    size_t base = allocated();
    const size_t big = ((size_t)1 << 20) - 200;
    /* Unfinished: the message buffer holds the fragment; the input buffer has nothing to keep. */
    write_frame(p, raw, WS_OP_TEXT, 0, NULL, big);
    write_frame(p, raw, WS_OP_PING, 1, NULL, 4);
    size_t held = allocated() - base;
    assert_true(held < ((size_t)1 << 20) + ((size_t)64 << 10));
    /* Finished: both are back to their first size. */
    write_frame(p, raw, WS_OP_CONT, 1, (const uint8_t *)"end", 3);
    write_frame(p, raw, WS_OP_PING, 1, NULL, 4);
    assert_int_equal(p->server.messages, 1);
    assert_int_equal(p->server.last_len, sizeof(p->server.last));
    held = allocated() - base;
    assert_true(held < ((size_t)16 << 10));
    assert_int_equal(p->server.closed, 0);
    close(raw);
    pair_free(p);
}

/* max_text bounds text messages apart from binary ones, fragmented or not. */
static void a_text_message_over_max_text_closes_with_1009(void **state)
{
    (void)state;
    static const uint8_t payload[200];
    for (int fragmented = 0; fragmented < 2; fragmented++) {
        struct pair *p = calloc(1, sizeof(*p));
        p->loop = ev_loop_new(EVFLAG_AUTO);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
        fcntl(p->fds[0], F_SETFL, O_NONBLOCK);
        fcntl(p->fds[1], F_SETFL, O_NONBLOCK);
        struct ws_conn_opts so = {.max_message = 1000, .max_text = 100};
        p->server.c = ws_conn_new(p->loop, p->fds[0], NULL, &so, &cbs, &p->server, NULL);
        assert_non_null(p->server.c);
        int raw = p->fds[1];
        write_frame(p, raw, WS_OP_BINARY, 1, payload, sizeof(payload));
        assert_int_equal(p->server.messages, 1);
        write_frame(p, raw, WS_OP_TEXT, 1, payload, 100);
        assert_int_equal(p->server.messages, 2);
        if (fragmented) {
            write_frame(p, raw, WS_OP_TEXT, 0, payload, 60);
            write_frame(p, raw, WS_OP_CONT, 1, payload, 60);
        } else {
            write_frame(p, raw, WS_OP_TEXT, 1, payload, 101);
        }
        run_until(p, &p->server.closed, 1);
        assert_int_equal(p->server.messages, 2);
        assert_int_equal(p->server.close_code, WS_CLOSE_TOO_BIG);
        close(raw);
        pair_free(p);
    }
}

/* A peer that never pauses, behind a layer that, as TLS may, holds more than the socket shows
 * (recv never says EAGAIN): it gets turns, not the loop. Another watcher that is ready is served
 * after one turn of reads, and the stream goes on being read in the iterations after it. */
struct endless {
    uint8_t frame[4096]; /* one frame, or a cycle of them, repeated */
    size_t frame_len, pos;
    int calls, limit;
};

static ssize_t endless_recv(void *io_ud, void *buf, size_t len)
{
    struct endless *e = io_ud;
    if (++e->calls > e->limit) { /* the test's own stop, were the loop never given back */
        errno = EAGAIN;
        return -1;
    }
    uint8_t *out = buf;
    for (size_t i = 0; i < len; i++) {
        out[i] = e->frame[e->pos];
        e->pos = (e->pos + 1) % e->frame_len;
    }
    return (ssize_t)len;
}

static ssize_t endless_send(void *io_ud, const void *buf, size_t len)
{
    (void)io_ud;
    (void)buf;
    return (ssize_t)len;
}

struct other {
    int served_after; /* the stream's recv calls when the other watcher was served; -1: not yet */
    struct endless *e;
};

static void other_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct other *o = w->data;
    if (o->served_after < 0)
        o->served_after = o->e->calls;
    ev_io_stop(loop, w);
}

static void a_peer_that_never_pauses_gets_turns_not_the_loop(void **state)
{
    (void)state;
    struct endless e = {.limit = 100000};
    uint8_t payload[1000];
    memset(payload, 'o', sizeof(payload));
    e.frame_len = ws_frame_header(e.frame, WS_OP_BINARY, 1, sizeof(payload), NULL);
    memcpy(e.frame + e.frame_len, payload, sizeof(payload));
    e.frame_len += sizeof(payload);

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int stream[2], ready[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, stream), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ready), 0);
    assert_int_equal(write(stream[1], "!", 1), 1); /* the socket shows readable, and stays so */
    assert_int_equal(write(ready[1], "!", 1), 1);
    struct ws_conn_io io = {.recv = endless_recv, .send = endless_send, .io_ud = &e};
    struct ws_conn_opts opts = {.client = 1, .max_message = 1 << 20};
    struct side side = {0};
    side.c = ws_conn_new(loop, stream[0], &io, &opts, &cbs, &side, NULL);
    assert_non_null(side.c);
    /* ev_run first invokes what is pending (the read ws_conn_new fed), then polls once: one
     * turn of 16 reads each. With the turn's end fed back to the loop the first went on until
     * the peer paused, here the test's stop after 100,000 reads. */
    ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
    assert_in_range(e.calls, 1, 2 * 16);
    int first = e.calls;
    struct other o = {.served_after = -1, .e = &e};
    ev_io other;
    ev_io_init(&other, other_cb, ready[0], EV_READ);
    other.data = &o;
    ev_io_start(loop, &other);
    ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
    assert_in_range(o.served_after, first, first + 2 * 16); /* after a turn at most */
    int messages = side.messages;
    for (int i = 0; i < 3; i++) {
        int calls = e.calls;
        ev_run(loop, EVRUN_ONCE);
        assert_true(e.calls > calls); /* read on in each later iteration */
    }
    assert_true(side.messages > messages);
    ws_conn_free(side.c);
    close(stream[1]);
    close(ready[0]);
    close(ready[1]);
    ev_loop_destroy(loop);
}

/* A peer whose reads are all one-byte messages: a turn is bounded by the frames it handles, not
 * only by the bytes it reads (16 reads into a 4 KiB buffer are 9,362 such frames). The rest wait
 * in the input for the next iterations, in order, none lost. */
struct ordered {
    int messages;
    int out_of_order;
};

static void count_in_order(struct ws_conn *c, int opcode, const uint8_t *data, size_t len, void *ud)
{
    (void)c;
    (void)opcode;
    struct ordered *o = ud;
    if (len != 1 || data[0] != (uint8_t)(o->messages % 251))
        o->out_of_order++;
    o->messages++;
}

static void a_turn_handles_a_bounded_number_of_frames(void **state)
{
    (void)state;
    static const uint8_t mask[4] = {1, 2, 3, 4};
    struct endless e = {.limit = 100000};
    for (int i = 0; i < 251; i++) { /* a cycle of 251 masked one-byte frames: 0, 1, ... 250 */
        uint8_t payload = (uint8_t)i;
        size_t n = ws_frame_header(e.frame + e.frame_len, WS_OP_BINARY, 1, 1, mask);
        ws_mask(&payload, 1, mask, 0);
        e.frame[e.frame_len + n] = payload;
        e.frame_len += n + 1;
    }
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    int stream[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, stream), 0);
    assert_int_equal(write(stream[1], "!", 1), 1);
    struct ws_conn_io io = {.recv = endless_recv, .send = endless_send, .io_ud = &e};
    struct ws_conn_opts opts = {.max_message = 1 << 20};
    static const struct ws_conn_callbacks ordered_cbs = {.on_message = count_in_order};
    struct ordered o = {0};
    struct ws_conn *c = ws_conn_new(loop, stream[0], &io, &opts, &ordered_cbs, &o, NULL);
    assert_non_null(c);
    /* ev_run's first pass over what is pending, then one iteration: a turn each. Before the
     * bound, each turn handled all its reads held: 18,720 frames in the two. */
    ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
    assert_in_range(o.messages, 1, 2 * 1024);
    for (int i = 0; i < 50; i++) {
        int before = o.messages;
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
        assert_in_range(o.messages - before, 1, 2 * 1024);
    }
    assert_int_equal(o.out_of_order, 0);
    ws_conn_free(c);
    close(stream[1]);
    ev_loop_destroy(loop);
}

/* Sends that count their writes, onto a real socket. */
struct counted_io {
    int fd;
    int writes;
};

static ssize_t counted_recv(void *io_ud, void *buf, size_t len)
{
    return read(((struct counted_io *)io_ud)->fd, buf, len);
}

static ssize_t counted_send(void *io_ud, const void *buf, size_t len)
{
    struct counted_io *io = io_ud;
    io->writes++;
    return write(io->fd, buf, len);
}

/* Corked, a hundred small messages are queued and go out in one write when uncorked, where each
 * was a write of its own; a close queued under the cork still ends the closing handshake. */
static void corked_messages_go_out_in_one_write(void **state)
{
    (void)state;
    struct pair *p = calloc(1, sizeof(*p));
    p->loop = ev_loop_new(EVFLAG_AUTO);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
    fcntl(p->fds[0], F_SETFL, O_NONBLOCK);
    fcntl(p->fds[1], F_SETFL, O_NONBLOCK);
    struct counted_io cio = {.fd = p->fds[0]};
    struct ws_conn_io io = {.recv = counted_recv, .send = counted_send, .io_ud = &cio};
    struct ws_conn_opts so = {.max_message = 1 << 20, .max_queued = 1 << 20};
    struct ws_conn_opts co = so;
    co.client = 1;
    p->server.c = ws_conn_new(p->loop, p->fds[0], &io, &so, &cbs, &p->server, NULL);
    p->client.c = ws_conn_new(p->loop, p->fds[1], NULL, &co, &cbs, &p->client, NULL);
    assert_non_null(p->server.c);
    assert_non_null(p->client.c);
    for (int i = 0; i < 100; i++)
        assert_int_equal(ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, "x", 1, 0), 0);
    assert_int_equal(cio.writes, 100);
    ws_conn_cork(p->server.c, 1);
    for (int i = 0; i < 100; i++)
        assert_int_equal(ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, "y", 1, 0), 0);
    assert_int_equal(cio.writes, 100);
    assert_int_equal(ws_conn_queued(p->server.c), 300);
    ws_conn_cork(p->server.c, 0);
    assert_int_equal(cio.writes, 101);
    assert_int_equal(ws_conn_queued(p->server.c), 0);
    run_until(p, &p->client.messages, 200);
    assert_int_equal(p->client.messages, 200);
    assert_int_equal(p->client.last[0], 'y');
    ws_conn_cork(p->server.c, 1);
    ws_conn_close(p->server.c, 1000, "done");
    ws_conn_cork(p->server.c, 0);
    run_until(p, &p->server.closed, 1);
    assert_int_equal(p->client.closed, 1);
    assert_int_equal(p->server.closed, 1);
    assert_int_equal(p->client.close_code, 1000);
    pair_free(p);
}

/* A writer that stops at a full queue under the cork waits for on_drain. When the uncorked
 * write takes the whole queue at once (the peer keeps up), the socket never makes it wait, yet
 * the drain is still reported, from the loop: the hub's pump of a reader that keeps up would
 * otherwise stop for good at its first full queue. */
static void a_full_queue_emptied_by_the_uncork_is_still_reported_drained(void **state)
{
    (void)state;
    struct pair *p = pair_new(0, 4096);
    static const uint8_t chunk[1000];
    ws_conn_cork(p->server.c, 1);
    int sent = 0;
    while (ws_conn_send(p->server.c, WS_OP_BINARY, NULL, 0, chunk, sizeof(chunk), 0) == 0)
        sent++;
    assert_true(ws_conn_queued(p->server.c) > 4096 - sizeof(chunk) - WS_MAX_HEADER);
    ws_conn_cork(p->server.c, 0);
    assert_int_equal(ws_conn_queued(p->server.c), 0); /* the socket took it all, in the call */
    assert_int_equal(p->server.drains, 0);            /* no callback inside the caller's call */
    run_until(p, &p->server.drains, 1);
    assert_int_equal(p->server.drains, 1);
    run_until(p, &p->client.messages, sent);
    assert_int_equal(p->client.messages, sent);
    pair_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(messages_both_ways_with_prefix),
        cmocka_unit_test(fragments_and_pings_from_a_raw_peer),
        cmocka_unit_test(a_frame_in_pieces_and_frames_together_from_a_raw_peer),
        cmocka_unit_test(an_invalid_close_code_is_a_protocol_error),
        cmocka_unit_test(closing_handshake_reports_once_on_both_sides),
        cmocka_unit_test(bounded_queue_refuses_then_drains),
        cmocka_unit_test(oversized_message_closes_with_1009),
        cmocka_unit_test(pings_from_a_non_reader_stay_within_the_bound),
        cmocka_unit_test(buffers_shrink_after_a_large_message),
        cmocka_unit_test(a_text_message_over_max_text_closes_with_1009),
        cmocka_unit_test(a_peer_that_never_pauses_gets_turns_not_the_loop),
        cmocka_unit_test(a_turn_handles_a_bounded_number_of_frames),
        cmocka_unit_test(corked_messages_go_out_in_one_write),
        cmocka_unit_test(a_full_queue_emptied_by_the_uncork_is_still_reported_drained),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

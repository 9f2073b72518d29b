/* Tests for pkg/kube/attach.c: the channel-protocol client against an in-process server on the
 * same libev loop (pkg/ws's head parser and connection), playing the API server's pods/attach,
 * and a TLS server in a child process. */
#define _GNU_SOURCE /* accept4 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include "kube/attach.h"
#include "kube/channel.h"
#include "kube/config.h"
#include "util/buf.h"
#include "ws/conn.h"
#include "ws/frame.h"
#include "ws/http.h"

/* An output message larger than any rx buffer: arrives in pieces. */
#define BIG        ((size_t)200 * 1024)
#define BURST_MSGS 32 /* "#" asks for this many output messages of BURST_LEN, written at once */
#define BURST_LEN  2000

/* ---- the server: the API server's side of pods/attach, on pkg/ws, on the same loop ---- */

struct server {
    struct ev_loop *loop;
    int lfd, fd;
    ev_io accept_w, head_w;
    int port;
    const char *const *protocols; /* what it supports */
    char head[65536];
    size_t head_len;
    struct ws_conn *conn;
    /* What it does wrong, when told. */
    int refuse;         /* answer the upgrade with 403 */
    int bad_accept;     /* a Sec-WebSocket-Accept for another key */
    int other_protocol; /* choose a subprotocol the client did not offer */
    int huge_head;      /* a response head over the client's bound */
    int oversized;      /* after the upgrade, a frame header announcing 2 MiB */
    /* What it saw. */
    char auth[256];    /* the Authorization header the client sent */
    char agent[128];   /* its User-Agent */
    char protocol[64]; /* the subprotocol it negotiated */
    char offer[256];   /* the client's Sec-WebSocket-Protocol */
    char host[128];    /* the client's Host */
    struct buf stdin_seen;
    char resize_seen[64];
    int closes_seen; /* [255, 0] messages */
    int resizes_seen;
    int burst; /* the "#" burst was queued */
    int conns;
};

static struct server srv;

static void send_msg(int channel, const void *data, size_t len)
{
    unsigned char c = (unsigned char)channel;
    assert_int_equal(ws_conn_send(srv.conn, WS_OP_BINARY, &c, 1, data, len, 1), 0);
}

static void srv_message(struct ws_conn *c, int opcode, const uint8_t *p, size_t len, void *ud)
{
    (void)c;
    (void)ud;
    if (opcode != WS_OP_BINARY || len == 0)
        return;
    if (p[0] == KUBE_CHANNEL_STDIN) {
        buf_append(&srv.stdin_seen, p + 1, len - 1);
        if (memchr(p + 1, '#', len - 1) != NULL) {
            char msg[BURST_LEN];
            memset(msg, '#', sizeof(msg));
            for (int i = 0; i < BURST_MSGS; i++)
                send_msg(KUBE_CHANNEL_STDOUT, msg, sizeof(msg));
            srv.burst = 1;
        } else if (memchr(p + 1, '!', len - 1) != NULL) {
            /* "!" asks for a big message, then the end with exit code 3. */
            char *big = malloc(BIG);
            assert_non_null(big);
            for (size_t i = 0; i < BIG; i++)
                big[i] = (char)('a' + i % 26);
            send_msg(KUBE_CHANNEL_STDOUT, big, BIG);
            free(big);
            struct buf st;
            buf_init(&st, 1024);
            kube_exit_status_format(&st, 3, NULL);
            send_msg(KUBE_CHANNEL_ERROR, st.data, st.len);
            buf_release(&st);
            ws_conn_close(srv.conn, WS_CLOSE_NORMAL, NULL);
        } else {
            send_msg(KUBE_CHANNEL_STDOUT, p + 1, len - 1); /* the TTY's echo */
        }
    } else if (p[0] == KUBE_CHANNEL_RESIZE) {
        snprintf(srv.resize_seen, sizeof(srv.resize_seen), "%.*s", (int)(len - 1),
                 (const char *)p + 1);
        srv.resizes_seen++;
    } else if (p[0] == KUBE_CHANNEL_CLOSE && len == 2 && p[1] == 0) {
        srv.closes_seen++;
    }
}

static void srv_closed(struct ws_conn *c, int code, const char *reason, void *ud)
{
    (void)code;
    (void)reason;
    (void)ud;
    ws_conn_free(c);
    srv.conn = NULL;
}

static void srv_write_all(const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(srv.fd, p, len);
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

static void srv_close_fd(void)
{
    ev_io_stop(srv.loop, &srv.head_w);
    if (srv.fd >= 0)
        close(srv.fd);
    srv.fd = -1;
}

/* Reads the upgrade request and answers it (as told), then serves the channels over ws_conn. */
static void head_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    (void)w;
    ssize_t n = read(srv.fd, srv.head + srv.head_len, sizeof(srv.head) - srv.head_len);
    if (n <= 0)
        return srv_close_fd();
    srv.head_len += (size_t)n;
    long hl = ws_http_head_end(srv.head, srv.head_len, 0, sizeof(srv.head));
    if (hl == 0)
        return;
    assert_true(hl > 0);
    struct ws_http_head h;
    struct telo_err err;
    assert_int_equal(ws_http_parse_request(srv.head, (size_t)hl, &h, &err), 0);
    assert_string_equal(h.method, "GET");
    const char *v;
    snprintf(srv.auth, sizeof(srv.auth), "%s", (v = ws_http_header(&h, "Authorization")) ? v : "");
    snprintf(srv.agent, sizeof(srv.agent), "%s", (v = ws_http_header(&h, "User-Agent")) ? v : "");
    snprintf(srv.offer, sizeof(srv.offer), "%s",
             (v = ws_http_header(&h, "Sec-WebSocket-Protocol")) ? v : "");
    snprintf(srv.host, sizeof(srv.host), "%s", (v = ws_http_header(&h, "Host")) ? v : "");
    assert_true(ws_http_list_has(ws_http_header(&h, "Upgrade"), "websocket"));
    assert_true(ws_http_list_has(ws_http_header(&h, "Connection"), "upgrade"));
    assert_string_equal(ws_http_header(&h, "Sec-WebSocket-Version"), "13");
    assert_null(ws_http_header(&h, "Origin"));
    char accept_key[WS_ACCEPT_KEY_SIZE];
    assert_int_equal(ws_accept_key(ws_http_header(&h, "Sec-WebSocket-Key"), accept_key), 0);
    srv.protocol[0] = '\0';
    char item[64];
    const char *list = srv.offer;
    while (srv.protocol[0] == '\0' && ws_http_list_next(&list, item, sizeof(item))) {
        for (int i = 0; srv.protocols[i] != NULL; i++) {
            if (strcmp(item, srv.protocols[i]) == 0)
                snprintf(srv.protocol, sizeof(srv.protocol), "%s", item);
        }
    }
    ev_io_stop(loop, &srv.head_w);
    if (srv.refuse) {
        static const char r[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
        srv_write_all(r, sizeof(r) - 1);
        return srv_close_fd();
    }
    struct buf resp;
    buf_init(&resp, 1u << 20);
    buf_printf(&resp,
               "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: %s\r\n",
               srv.bad_accept ? "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" : accept_key,
               srv.other_protocol ? "v3.channel.k8s.io" : srv.protocol);
    if (srv.huge_head) {
        buf_append_str(&resp, "X-Filler: ");
        for (int i = 0; i < 20000; i++)
            buf_append_str(&resp, "f");
        buf_append_str(&resp, "\r\n");
    }
    buf_append_str(&resp, "\r\n");
    if (srv.oversized) {
        /* The hello, then a binary frame announcing 2 MiB (over the client's 1 MiB), and a few
         * of its bytes: the client must close, not buffer 2 MiB. */
        static const unsigned char f[] = {0x82, 0x01, 0x01, 0x82, 0x7F, 0,   0,   0,  0,
                                          0,    0x20, 0,    0,    0x01, 'x', 'x', 'x'};
        buf_append(&resp, f, sizeof(f));
    }
    srv_write_all(resp.data, resp.len);
    buf_release(&resp);
    if (srv.bad_accept || srv.other_protocol || srv.huge_head || srv.oversized)
        return; /* the client hangs up; server_stop closes the socket */
    static const struct ws_conn_callbacks cbs = {srv_message, NULL, srv_closed};
    struct ws_conn_opts opts = {.max_queued = 4u << 20};
    srv.conn = ws_conn_new(loop, srv.fd, NULL, &opts, &cbs, NULL, &err);
    srv.fd = -1;
    assert_non_null(srv.conn);
    if (srv.head_len > (size_t)hl)
        ws_conn_feed(srv.conn, srv.head + hl, srv.head_len - (size_t)hl);
    send_msg(KUBE_CHANNEL_STDOUT, NULL, 0); /* the hello */
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    (void)w;
    int fd = accept4(srv.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    if (srv.fd >= 0 || srv.conn != NULL) {
        close(fd); /* one connection at a time */
        return;
    }
    srv.conns++;
    srv.fd = fd;
    srv.head_len = 0;
    ev_io_init(&srv.head_w, head_cb, fd, EV_READ);
    ev_io_start(loop, &srv.head_w);
}

/* A listening socket on 127.0.0.1 (any port). */
static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void server_start(struct ev_loop *loop, const char *const *protocols)
{
    memset(&srv, 0, sizeof(srv));
    srv.loop = loop;
    srv.fd = -1;
    srv.protocols = protocols;
    buf_init(&srv.stdin_seen, 1u << 20);
    srv.lfd = listen_loopback(&srv.port);
    ev_io_init(&srv.accept_w, accept_cb, srv.lfd, EV_READ);
    ev_io_start(loop, &srv.accept_w);
}

static void server_stop(void)
{
    ev_io_stop(srv.loop, &srv.accept_w);
    close(srv.lfd);
    srv_close_fd();
    ws_conn_free(srv.conn);
    srv.conn = NULL;
    buf_release(&srv.stdin_seen);
}

/* ---- the client under test ---- */

struct client {
    struct ev_loop *loop;
    int opened;
    char protocol[64];
    struct buf out;
    int ended;
    struct kube_attach_end end;
    struct telo_err end_err;
    int free_in;       /* 1: free the handle in on_output, 2: in on_end */
    int nudge_in_open; /* resize to 81x25 then 80x24 in on_open, as kubectl telo does */
    int freed;
};

static void on_open(struct kube_attach *a, const char *protocol, void *ud)
{
    struct client *c = ud;
    c->opened = 1;
    snprintf(c->protocol, sizeof(c->protocol), "%s", protocol);
    if (c->nudge_in_open) {
        assert_int_equal(kube_attach_resize(a, 81, 25), 0);
        assert_int_equal(kube_attach_resize(a, 80, 24), 0);
    }
}

static void on_output(struct kube_attach *a, int channel, const unsigned char *data, size_t len,
                      void *ud)
{
    (void)a;
    struct client *c = ud;
    assert_int_equal(channel, KUBE_CHANNEL_STDOUT);
    assert_false(c->freed);
    buf_append(&c->out, data, len);
    if (c->free_in == 1) {
        kube_attach_free(a);
        c->freed = 1;
    }
}

static void on_end(struct kube_attach *a, const struct kube_attach_end *end, void *ud)
{
    struct client *c = ud;
    assert_false(c->freed);
    c->ended = 1;
    if (c->free_in == 2) {
        kube_attach_free(a);
        c->freed = 1;
    }
    c->end = *end;
    if (end->err) {
        c->end_err = *end->err;
        c->end.err = &c->end_err;
    }
}

static const struct kube_attach_callbacks callbacks = {on_open, on_output, on_end};

/* Runs the loop until *flag or a 10 s budget is spent. */
static void run_until(struct ev_loop *loop, const int *flag)
{
    ev_tstamp deadline = ev_time() + 10;
    while (!*flag && ev_time() < deadline)
        ev_run(loop, EVRUN_ONCE);
    assert_true(*flag);
}

static struct kube_attach *connect_client(struct ev_loop *loop, struct client *c,
                                          const char *const *offer)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/namespaces/ns/pods/p/attach?tty=true",
             srv.port);
    memset(c, 0, sizeof(*c));
    c->loop = loop;
    buf_init(&c->out, 1u << 20);
    struct kube_attach_opts opts = {.url = url, .token = "s3cret", .protocols = offer};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    return a;
}

/* Frees what connect_client and server_start made, in the order the loop needs. */
static void client_done(struct ev_loop *loop, struct kube_attach *a, struct client *c)
{
    kube_attach_free(a);
    buf_release(&c->out);
    server_stop();
    ev_loop_destroy(loop);
}

/* A v5 attach, open, with the hello and any writable callbacks of the opening settled: what
 * follows is the test's own traffic only. */
static struct kube_attach *open_settled_v5(struct ev_loop *loop, struct client *c)
{
    static const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    struct kube_attach *a = connect_client(loop, c, NULL);
    run_until(loop, &c->opened);
    for (int i = 0; i < 20; i++)
        ev_run(loop, EVRUN_NOWAIT);
    return a;
}

static void typed_resized_and_ended_with_a_status(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, KUBE_CHANNEL_V4, NULL};
    server_start(loop, protocols);
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    assert_int_equal(kube_attach_write(a, "early", 5), -TELO_EINVAL); /* not open yet */
    run_until(loop, &c.opened);
    assert_string_equal(c.protocol, KUBE_CHANNEL_V5);
    assert_string_equal(kube_attach_protocol(a), KUBE_CHANNEL_V5);
    assert_string_equal(srv.auth, "Bearer s3cret");
    assert_string_equal(srv.agent, "telo/" TELO_VERSION); /* the audit log names the client */

    /* Two resizes before the loop turns: only the newest goes out. */
    assert_int_equal(kube_attach_resize(a, 81, 25), 0);
    assert_int_equal(kube_attach_resize(a, 80, 24), 0);
    assert_int_equal(kube_attach_resize(a, 0, 0), 0);
    assert_int_equal(kube_attach_resize(a, 70000, 2), -TELO_EINVAL);
    assert_int_equal(kube_attach_write(a, "ls\r", 3), 0);
    while (c.out.len < 3 && !c.ended)
        ev_run(loop, EVRUN_ONCE);
    assert_string_equal(c.out.data, "ls\r"); /* the hello is not output */
    assert_string_equal(srv.resize_seen, "{\"Width\":80,\"Height\":24}");

    /* A big output message arrives whole, in order, then the Status and the close. */
    buf_reset(&c.out);
    assert_int_equal(kube_attach_close_stdin(a), 0);
    assert_int_equal(kube_attach_write(a, "!", 1), 0);
    run_until(loop, &c.ended);
    assert_int_equal(srv.closes_seen, 1);
    assert_int_equal(c.out.len, BIG);
    for (size_t i = 0; i < BIG; i += 4099)
        assert_int_equal(c.out.data[i], 'a' + i % 26);
    assert_int_equal(c.end.rc, 0);
    assert_true(c.end.have_status);
    assert_int_equal(c.end.exit.code, 3);
    assert_int_equal(c.end.close_code, 1000);
    assert_int_equal(kube_attach_write(a, "late", 4), -TELO_EINVAL);
    client_done(loop, a, &c);
}

/* A keystroke is on the wire when kube_attach_write returns (no writable callback and loop turn
 * in between, which cost a keystroke's round trip two epoll_ctl calls and a wakeup): the next
 * turn of the loop is the server's read. Two resizes in a row both go out, in order: kubectl's
 * redraw nudge (size + 1, then size) needs the first to arrive. */
static void typed_bytes_leave_before_the_loop_turns(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct client c;
    struct kube_attach *a = open_settled_v5(loop, &c);
    for (int k = 0; k < 5; k++) {
        buf_reset(&srv.stdin_seen);
        assert_int_equal(kube_attach_write(a, "k", 1), 0);
        ev_run(loop, EVRUN_NOWAIT);
        assert_int_equal(srv.stdin_seen.len, 1);
        assert_int_equal(srv.stdin_seen.data[0], 'k');
    }
    assert_int_equal(kube_attach_resize(a, 81, 25), 0);
    ev_run(loop, EVRUN_NOWAIT);
    assert_string_equal(srv.resize_seen, "{\"Width\":81,\"Height\":25}");
    assert_int_equal(kube_attach_resize(a, 80, 24), 0);
    ev_run(loop, EVRUN_NOWAIT);
    assert_string_equal(srv.resize_seen, "{\"Width\":80,\"Height\":24}");
    client_done(loop, a, &c);
}

/* Output that is in the socket together is read together: a flood reaches the client (the
 * gateway's upstream, kubectl telo's terminal) in reads of up to 64 KiB, not 4 KiB at a time,
 * which cost a read and a loop turn per 4 KiB (about 16 turns for these 64 KB). */
static void output_sent_together_is_read_in_few_turns(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct client c;
    struct kube_attach *a = open_settled_v5(loop, &c);
    assert_int_equal(kube_attach_write(a, "#", 1), 0);
    /* The server reads "#", then queues every message in one callback. */
    while (!srv.burst)
        ev_run(loop, EVRUN_ONCE);
    while (srv.conn != NULL && ws_conn_queued(srv.conn) > 0)
        ev_run(loop, EVRUN_ONCE);
    unsigned turns = 0;
    ev_tstamp deadline = ev_time() + 10;
    while (c.out.len < (size_t)BURST_MSGS * BURST_LEN && ev_time() < deadline) {
        ev_run(loop, EVRUN_ONCE);
        turns++;
    }
    assert_int_equal(c.out.len, (size_t)BURST_MSGS * BURST_LEN);
    for (size_t i = 0; i < c.out.len; i++)
        assert_int_equal(c.out.data[i], '#');
    assert_in_range(turns, 1, 6);
    client_done(loop, a, &c);
}

/* Resizes asked for inside the client's callbacks (kubectl telo's nudge in on_open) go out when
 * the callback returns, the newest only: the server sees one resize, the size itself (the
 * gateway throttles resizes, so a nudge that arrived first would be the size the app saw). */
static void resizes_inside_a_callback_go_out_as_the_newest(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    c.nudge_in_open = 1;
    run_until(loop, &c.opened);
    assert_int_equal(kube_attach_write(a, "x", 1), 0);
    while (c.out.len < 1)
        ev_run(loop, EVRUN_ONCE);
    assert_int_equal(srv.resizes_seen, 1);
    assert_string_equal(srv.resize_seen, "{\"Width\":80,\"Height\":24}");
    client_done(loop, a, &c);
}

/* What the gateway does: free the handle from inside its own callbacks, mid-stream or at the
 * end; nothing is called afterwards, and the loop frees the rest (valgrind and ASan check). */
static void freed_from_its_own_callbacks(void **state)
{
    (void)state;
    for (int where = 1; where <= 2; where++) {
        struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
        const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
        server_start(loop, protocols);
        struct client c;
        struct kube_attach *a = connect_client(loop, &c, NULL);
        c.free_in = where;
        run_until(loop, &c.opened);
        assert_int_equal(kube_attach_write(a, where == 1 ? "x\r" : "!", where == 1 ? 2 : 1), 0);
        run_until(loop, &c.freed);
        ev_tstamp deadline = ev_time() + 0.5;
        while (ev_time() < deadline)
            ev_run(loop, EVRUN_NOWAIT);
        assert_int_equal(c.ended, where == 2);
        buf_release(&c.out);
        server_stop();
        ev_loop_destroy(loop);
    }
}

static void v4_when_the_server_has_no_v5(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V4, NULL};
    server_start(loop, protocols);
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.opened);
    assert_string_equal(c.protocol, KUBE_CHANNEL_V4);
    /* v4 has no close channel: closing stdin sends nothing. */
    assert_int_equal(kube_attach_close_stdin(a), 0);
    assert_int_equal(kube_attach_write(a, "x\r", 2), 0);
    while (c.out.len < 2)
        ev_run(loop, EVRUN_ONCE);
    assert_int_equal(srv.closes_seen, 0);
    /* Freeing an open stream ends it without on_end. */
    kube_attach_free(a);
    assert_false(c.ended);
    buf_release(&c.out);
    server_stop();
    ev_loop_destroy(loop);
}

static void a_refused_upgrade_reports_the_http_status(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    srv.refuse = 1;
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.ended);
    assert_false(c.opened);
    assert_int_equal(c.end.rc, -TELO_EAPI);
    assert_int_equal(c.end.http_status, 403);
    client_done(loop, a, &c);
}

static void nobody_listening_is_a_connection_error(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    int port = srv.port;
    server_stop(); /* the port is free again */
    memset(&srv, 0, sizeof(srv));
    srv.port = port;
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.ended);
    assert_int_equal(c.end.rc, -TELO_EIO);
    assert_int_equal(c.end.http_status, 0);
    assert_non_null(c.end.err);
    kube_attach_free(a);
    buf_release(&c.out);
    ev_loop_destroy(loop);
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct telo_err err;
    struct kube_attach_opts opts = {.url = "ftp://example/x"};
    assert_null(kube_attach_open(loop, &opts, &callbacks, NULL, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    assert_non_null(strstr(err.msg, "scheme must be"));
    opts.url = "http://127.0.0.1:1/x";
    opts.token = "line\r\nbreak";
    assert_null(kube_attach_open(loop, &opts, &callbacks, NULL, &err));
    assert_non_null(strstr(err.msg, "line break"));
    opts.token = NULL;
    /* No user info, blanks or control characters: they would reach the request head. */
    const char *bad_urls[] = {"http://user:pw@127.0.0.1:1/x", "http://127.0.0.1:1/a b",
                              "http://127.0.0.1:1/x\r\nX-Evil: 1", "http://:1/x",
                              "http://127.0.0.1:99999/x"};
    for (size_t i = 0; i < sizeof(bad_urls) / sizeof(bad_urls[0]); i++) {
        opts.url = bad_urls[i];
        assert_null(kube_attach_open(loop, &opts, &callbacks, NULL, &err));
        assert_int_equal(err.code, TELO_EINVAL);
    }
    struct kube_attach_callbacks none = {0};
    assert_null(kube_attach_open(loop, &opts, &none, NULL, &err));
    kube_attach_free(NULL);
    ev_loop_destroy(loop);
}

/* ---- a server that breaks the protocol ---- */

/* Connects to a server told to misbehave; returns once the client ended, which it must without
 * opening, with -TELO_EPROTO and a message holding expect. */
static void refused_by_the_client(int *what, const char *expect, int opens)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    *what = 1;
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.ended);
    assert_int_equal(c.opened, opens);
    assert_int_equal(c.end.rc, -TELO_EPROTO);
    assert_int_equal(c.end.http_status, 0);
    assert_non_null(c.end.err);
    if (strstr(c.end.err->msg, expect) == NULL)
        fail_msg("\"%s\" does not say \"%s\"", c.end.err->msg, expect);
    assert_int_equal(c.out.len, 0);
    client_done(loop, a, &c);
}

/* RFC 6455 4.1: a 101 whose Sec-WebSocket-Accept is not the one for our key is not ours. */
static void a_wrong_accept_key_is_refused(void **state)
{
    (void)state;
    refused_by_the_client(&srv.bad_accept, "Sec-WebSocket-Accept", 0);
}

static void a_subprotocol_not_offered_is_refused(void **state)
{
    (void)state;
    refused_by_the_client(&srv.other_protocol, "v3.channel.k8s.io, not one we offered", 0);
}

/* The response head is read into a buffer of 16 KiB at most. */
static void a_response_head_over_16_kib_is_refused(void **state)
{
    (void)state;
    refused_by_the_client(&srv.huge_head, "over the limit of 16384 bytes", 0);
}

/* A frame announcing 2 MiB (the client's bound is 1 MiB) ends the stream with an error as soon as
 * its header is in, instead of buffering it. */
static void an_oversized_frame_ends_the_stream(void **state)
{
    (void)state;
    refused_by_the_client(&srv.oversized, "over the limit", 1);
}

/* The request names the server as the URL does, offers the protocols in order and sends no
 * Origin (checked by the server). */
static void the_request_carries_host_and_offer(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V4, NULL};
    server_start(loop, protocols);
    struct client c;
    struct kube_attach *a = connect_client(loop, &c, NULL);
    run_until(loop, &c.opened);
    char host[64];
    snprintf(host, sizeof(host), "127.0.0.1:%d", srv.port);
    assert_string_equal(srv.host, host);
    assert_string_equal(srv.offer, KUBE_CHANNEL_V5 ", " KUBE_CHANNEL_V4);
    assert_string_equal(c.protocol, KUBE_CHANNEL_V4);
    client_done(loop, a, &c);
}

/* Behind the API server's service proxy: the token for the proxy goes in Authorization, the one
 * for the server behind it as the bearer subprotocol (unpadded base64url: "a>?b" is YT4/Yg== in
 * standard base64), after the protocols; the server chooses a real protocol. */
static void a_protocol_token_is_offered_as_the_bearer_subprotocol(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/proxy/v1/attach", srv.port);
    struct client c;
    memset(&c, 0, sizeof(c));
    buf_init(&c.out, 1024);
    struct kube_attach_opts opts = {.url = url, .token = "for-the-proxy", .protocol_token = "a>?b"};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, &c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    run_until(loop, &c.opened);
    assert_string_equal(srv.auth, "Bearer for-the-proxy");
    assert_string_equal(srv.offer, KUBE_CHANNEL_V5
                        ", " KUBE_CHANNEL_V4 ", base64url.bearer.authorization.k8s.io.YT4_Yg");
    assert_string_equal(c.protocol, KUBE_CHANNEL_V5);
    client_done(loop, a, &c);
}

/* A server that "chooses" the bearer subprotocol echoes the token: not a protocol we speak. */
static void a_server_choosing_the_bearer_subprotocol_is_refused(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {"base64url.bearer.authorization.k8s.io.dA", NULL};
    server_start(loop, protocols);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/proxy/v1/attach", srv.port);
    struct client c;
    memset(&c, 0, sizeof(c));
    buf_init(&c.out, 1024);
    const char *const offer[] = {KUBE_CHANNEL_V5, NULL};
    struct kube_attach_opts opts = {.url = url, .protocols = offer, .protocol_token = "t"};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, &c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    run_until(loop, &c.ended);
    assert_int_equal(c.opened, 0);
    assert_int_equal(c.end.rc, -TELO_EPROTO);
    assert_non_null(strstr(c.end.err->msg, "not one we offered"));
    client_done(loop, a, &c);
}

/* An empty protocol token, or one with a line break, is refused before connecting. */
static void a_bad_protocol_token_is_refused_at_open(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct client c;
    memset(&c, 0, sizeof(c));
    const char *bad[] = {"", "a\r\nX-Injected: 1"};
    for (int i = 0; i < 2; i++) {
        struct kube_attach_opts opts = {.url = "http://127.0.0.1:1/x", .protocol_token = bad[i]};
        struct telo_err err;
        assert_null(kube_attach_open(loop, &opts, &callbacks, &c, &err));
        assert_int_equal(err.code, TELO_EINVAL);
    }
    ev_loop_destroy(loop);
}

/* A name with more than one address (localhost: ::1 and 127.0.0.1 where both are configured):
 * the one nobody listens on is skipped for the next. */
static void a_name_is_resolved_and_its_addresses_tried_in_turn(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    server_start(loop, protocols);
    char url[128];
    snprintf(url, sizeof(url), "ws://localhost:%d/api/v1/namespaces/ns/pods/p/attach", srv.port);
    struct client c;
    memset(&c, 0, sizeof(c));
    buf_init(&c.out, 1024);
    struct kube_attach_opts opts = {.url = url};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, &c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    run_until(loop, &c.opened);
    assert_string_equal(srv.auth, ""); /* no token, no kubeconfig: no Authorization */
    client_done(loop, a, &c);
}

/* ---- TLS: trust, the server's name (an IP address) and the client certificate ---- */

/* TLS files for the server; a client certificate signed by ca is required when ca is set. */
struct tls_files {
    const char *cert, *key, *ca;
};

static char pki[64];

static const char *pki_path(const char *name)
{
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof(paths[0]), "%s/%s", pki, name);
    return p;
}

static int make_pki(void **state)
{
    (void)state;
    snprintf(pki, sizeof(pki), "/tmp/test_attach.XXXXXX");
    if (mkdtemp(pki) == NULL)
        return -1;
    char cmd[4096];
    /* A CA, a server certificate for 127.0.0.1 and one for 127.0.0.2 (a wrong name), a client
     * certificate, and a CA nobody trusts. */
    snprintf(cmd, sizeof(cmd),
             "cd %s && set -e; k() { f=$1; shift; openssl req -newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes -keyout $f.key -subj /CN=$f \"$@\" "
             "2>/dev/null; }; "
             "k ca -x509 -days 1 -out ca.crt >/dev/null; k other -x509 -days 1 -out other.crt "
             ">/dev/null; "
             "k self -x509 -days 1 -addext subjectAltName=IP:127.0.0.1 -out self.crt >/dev/null; "
             "for n in srv:IP:127.0.0.1 wrong:IP:127.0.0.2 client:DNS:client; do "
             "name=${n%%%%:*}; k $name -out $name.csr >/dev/null; printf 'subjectAltName=%%s\\n' "
             "${n#*:} > $name.ext; openssl x509 -req -in $name.csr -CA ca.crt -CAkey ca.key "
             "-CAcreateserial -days 1 -extfile $name.ext -out $name.crt 2>/dev/null; done",
             pki);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_pki(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", pki);
    return system(cmd) == 0 ? 0 : -1;
}

/* A kubeconfig for https://127.0.0.1:port trusting ca (a file in pki), with the client
 * certificate when with_cert. */
static struct kube_config *tls_config(int port, const char *ca, int with_cert)
{
    const char *path = pki_path("kubeconfig");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            "clusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:%d\n"
            "    certificate-authority: %s\n"
            "contexts:\n- name: t\n  context: {cluster: t, user: u}\n"
            "users:\n- name: u\n  user: {%s%s%s%s}\n",
            port, pki_path(ca), with_cert ? "client-certificate: " : "",
            with_cert ? pki_path("client.crt") : "", with_cert ? ", client-key: " : "",
            with_cert ? pki_path("client.key") : "");
    fclose(f);
    struct kube_config_options opts = {.kubeconfig = path};
    struct kube_config *cfg = NULL;
    struct telo_err err;
    if (kube_config_load(&opts, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    return cfg;
}

/* Connects to the TLS server with cfg; returns 1 when the stream opened, 0 when it failed. */
static int tls_attach(struct ev_loop *loop, struct kube_config *cfg, int insecure)
{
    char url[128];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/api/v1/namespaces/ns/pods/p/attach", srv.port);
    struct client c;
    memset(&c, 0, sizeof(c));
    buf_init(&c.out, 1024);
    struct kube_attach_opts opts = {.url = url, .cfg = cfg, .insecure_skip_tls_verify = insecure};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &callbacks, &c, &err);
    if (a == NULL)
        fail_msg("%s", err.msg);
    int opened = 0;
    ev_tstamp deadline = ev_time() + 10;
    while (!c.opened && !c.ended && ev_time() < deadline)
        ev_run(loop, EVRUN_ONCE);
    opened = c.opened;
    assert_true(c.opened || c.ended);
    if (!opened)
        assert_int_equal(c.end.rc, -TELO_EIO);
    kube_attach_free(a);
    buf_release(&c.out);
    return opened;
}

/* One TLS connection of the child server: the handshake (a client certificate signed by tls->ca
 * required when ca is set), the upgrade answered with v5 and the hello; then it waits for the
 * client to go. Blocking I/O: the child does nothing else. */
static void tls_serve_one(SSL_CTX *ctx, int fd)
{
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
        char head[16384];
        size_t len = 0;
        long hl = 0;
        while (hl == 0 && len < sizeof(head)) {
            int n = SSL_read(ssl, head + len, (int)(sizeof(head) - len));
            if (n <= 0)
                break;
            len += (size_t)n;
            hl = ws_http_head_end(head, len, 0, sizeof(head));
        }
        struct ws_http_head h;
        struct telo_err err;
        char accept_key[WS_ACCEPT_KEY_SIZE];
        const char *key;
        if (hl > 0 && ws_http_parse_request(head, (size_t)hl, &h, &err) == 0 &&
            (key = ws_http_header(&h, "Sec-WebSocket-Key")) != NULL &&
            ws_accept_key(key, accept_key) == 0) {
            char resp[512];
            int n = snprintf(resp, sizeof(resp),
                             "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                             "Sec-WebSocket-Protocol: %s\r\n\r\n\x82\x01\x01",
                             accept_key, KUBE_CHANNEL_V5);
            SSL_write(ssl, resp, n);
            while (SSL_read(ssl, head, sizeof(head)) > 0) {
            }
        }
    }
    ERR_clear_error();
    SSL_free(ssl);
    close(fd);
}

/* Runs a TLS server in a child process and returns its pid (*port set). */
static pid_t tls_server_process(const struct tls_files *tls, int *port)
{
    int lfd = listen_loopback(port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (SSL_CTX_use_certificate_chain_file(ctx, tls->cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, tls->key, SSL_FILETYPE_PEM) != 1)
            _exit(1);
        if (tls->ca != NULL) {
            if (SSL_CTX_load_verify_locations(ctx, tls->ca, NULL) != 1)
                _exit(1);
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        }
        int flags = fcntl(lfd, F_GETFL);
        fcntl(lfd, F_SETFL, flags & ~O_NONBLOCK);
        for (;;) {
            int fd = accept(lfd, NULL, NULL);
            if (fd >= 0)
                tls_serve_one(ctx, fd);
        }
    }
    close(lfd);
    return pid;
}

static void stop_process(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void tls_verifies_the_server_and_presents_the_client_certificate(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct tls_files good = {pki_path("srv.crt"), pki_path("srv.key"), pki_path("ca.crt")};
    pid_t server = tls_server_process(&good, &srv.port);

    struct kube_config *trusted = tls_config(srv.port, "ca.crt", 1);
    assert_true(tls_attach(loop, trusted, 0));
    kube_config_free(trusted);

    /* A CA that did not sign the server's certificate: refused, unless told not to verify. */
    struct kube_config *untrusted = tls_config(srv.port, "other.crt", 1);
    assert_false(tls_attach(loop, untrusted, 0));
    assert_true(tls_attach(loop, untrusted, 1));
    kube_config_free(untrusted);

    /* The server wants a client certificate. */
    struct kube_config *anonymous = tls_config(srv.port, "ca.crt", 0);
    assert_false(tls_attach(loop, anonymous, 0));
    kube_config_free(anonymous);
    stop_process(server);

    /* A certificate the right CA signed for another address: the name check refuses it. */
    struct tls_files wrong = {pki_path("wrong.crt"), pki_path("wrong.key"), pki_path("ca.crt")};
    server = tls_server_process(&wrong, &srv.port);
    struct kube_config *cfg = tls_config(srv.port, "ca.crt", 1);
    assert_false(tls_attach(loop, cfg, 0));
    kube_config_free(cfg);
    stop_process(server);
    ev_loop_destroy(loop);
}

static void pod_attach_url_is_escaped_and_asks_for_a_tty(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(
        kube_attach_pod_url("https://127.0.0.1:6443", "ns", "p/1", "session", &b, NULL), 0);
    assert_string_equal(b.data, "https://127.0.0.1:6443/api/v1/namespaces/ns/pods/p%2F1/attach"
                                "?container=session&stdin=true&stdout=true&stderr=false&tty=true");
    buf_release(&b);
    struct telo_err err = {0};
    buf_init(&b, 4096);
    assert_int_equal(kube_attach_pod_url("https://h", "ns", NULL, "session", &b, &err),
                     -TELO_EINVAL); /* no pod: kube_ref_path refuses a subresource without one */
    assert_true(err.msg[0] != '\0');
    buf_release(&b);
}

/* A server whose certificate is its own CA (a self-signed certificate for 127.0.0.1), trusted as
 * the kubeconfig's certificate-authority; no client certificate asked for. */
static void tls_trusts_a_self_signed_server_given_as_the_ca(void **state)
{
    (void)state;
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct tls_files self = {pki_path("self.crt"), pki_path("self.key"), NULL};
    pid_t server = tls_server_process(&self, &srv.port);
    struct kube_config *trusted = tls_config(srv.port, "self.crt", 0);
    assert_true(tls_attach(loop, trusted, 0));
    kube_config_free(trusted);
    struct kube_config *other = tls_config(srv.port, "ca.crt", 0);
    assert_false(tls_attach(loop, other, 0));
    kube_config_free(other);
    stop_process(server);
    ev_loop_destroy(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pod_attach_url_is_escaped_and_asks_for_a_tty),
        cmocka_unit_test(a_protocol_token_is_offered_as_the_bearer_subprotocol),
        cmocka_unit_test(a_server_choosing_the_bearer_subprotocol_is_refused),
        cmocka_unit_test(a_bad_protocol_token_is_refused_at_open),
        cmocka_unit_test(typed_resized_and_ended_with_a_status),
        cmocka_unit_test(typed_bytes_leave_before_the_loop_turns),
        cmocka_unit_test(output_sent_together_is_read_in_few_turns),
        cmocka_unit_test(resizes_inside_a_callback_go_out_as_the_newest),
        cmocka_unit_test(freed_from_its_own_callbacks),
        cmocka_unit_test(v4_when_the_server_has_no_v5),
        cmocka_unit_test(a_refused_upgrade_reports_the_http_status),
        cmocka_unit_test(nobody_listening_is_a_connection_error),
        cmocka_unit_test(bad_options_are_refused),
        cmocka_unit_test(a_wrong_accept_key_is_refused),
        cmocka_unit_test(a_subprotocol_not_offered_is_refused),
        cmocka_unit_test(a_response_head_over_16_kib_is_refused),
        cmocka_unit_test(an_oversized_frame_ends_the_stream),
        cmocka_unit_test(the_request_carries_host_and_offer),
        cmocka_unit_test(a_name_is_resolved_and_its_addresses_tried_in_turn),
        cmocka_unit_test_setup_teardown(tls_verifies_the_server_and_presents_the_client_certificate,
                                        make_pki, remove_pki),
        cmocka_unit_test_setup_teardown(tls_trusts_a_self_signed_server_given_as_the_ca, make_pki,
                                        remove_pki),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

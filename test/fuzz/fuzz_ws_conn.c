/* libFuzzer target: a WebSocket connection (pkg/ws/conn) fed a peer's bytes: frames parsed,
 * fragments joined into messages, pings answered, the closing handshake, as the gateway runs it
 * for each client (server side) and as a client would (the first input byte picks the side).
 * Every message is echoed back, so the send queue works too; what is sent goes nowhere. A
 * message never exceeds max_message, and on_closed comes at most once. */
#include "ws/conn.h"
#include "ws/frame.h"

#include <errno.h>
#include <ev.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_MESSAGE 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    int closed;
    int messages;
};

static ssize_t io_recv(void *ud, void *buf, size_t len)
{
    (void)ud;
    (void)buf;
    (void)len;
    errno = EAGAIN;
    return -1;
}

static ssize_t io_send(void *ud, const void *buf, size_t len)
{
    (void)ud;
    (void)buf;
    return (ssize_t)len;
}

static void on_message(struct ws_conn *c, int opcode, const uint8_t *msg, size_t len, void *ud)
{
    struct run *r = ud;
    if (r->closed || len > MAX_MESSAGE || (opcode != WS_OP_TEXT && opcode != WS_OP_BINARY))
        abort();
    r->messages++;
    ws_conn_send(c, opcode, NULL, 0, msg, len, 0);
}

static void on_closed(struct ws_conn *c, int code, const char *reason, void *ud)
{
    struct run *r = ud;
    if (r->closed++ || reason == NULL || code < 1000 || code > 4999)
        abort();
    ws_conn_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ev_loop *loop;
    if (loop == NULL)
        loop = ev_loop_new(EVFLAG_AUTO);
    if (size < 1 || loop == NULL)
        return 0;
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
        return 0;
    struct run r = {0};
    struct ws_conn_opts opts = {.client = data[0] & 1, .max_message = MAX_MESSAGE};
    struct ws_conn_io io = {.recv = io_recv, .send = io_send};
    struct ws_conn_callbacks cb = {.on_message = on_message, .on_closed = on_closed};
    struct telo_err err;
    struct ws_conn *c = ws_conn_new(loop, fds[0], &io, &opts, &cb, &r, &err);
    if (c != NULL && ws_conn_feed(c, data + 1, size - 1) == 0) {
        /* Frames past a turn's share wait for the loop's next turns: give it them. */
        for (int turn = 0; turn < 64 && !r.closed; turn++)
            ev_run(loop, EVRUN_NOWAIT);
        if (!r.closed)
            ws_conn_free(c);
    }
    close(fds[1]);
    return 0;
}

/* One WebSocket connection after the handshake, on a libev loop: message assembly, control
 * frames, a bounded send queue, keepalive pings and the closing handshake. Server or client. */
#include "ws/conn.h"

#include "util/jitter.h"
#include "ws/frame.h"

#include <errno.h>
#include <ev.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_CHUNK  65536
#define READ_FIRST  4096 /* the input buffer's first size: client input is keystrokes */
#define MSG_FIRST   4096 /* the message buffer's */
#define QUEUE_FIRST 4096 /* the send queue's */
#define READ_ROUNDS 16   /* reads per readiness event */
/* Frames handled per turn. The reads bound a turn's bytes, not its work: 16 reads into the 4 KiB
 * a stream of small frames keeps are 9,362 one-byte messages, each a callback (a keystroke sent
 * on upstream, say). */
#define TURN_FRAMES 1024

enum state { OPEN, CLOSE_SENT, CLOSE_RECEIVED, FINISHED };

struct ws_conn {
    struct ev_loop *loop;
    int fd;
    struct ws_conn_io io;
    struct ws_conn_opts opts;
    struct ws_conn_callbacks cb;
    void *ud;

    ev_io rio, wio;
    ev_timer ping_timer, close_timer;
    /* A turn given up while a TLS layer may hold bytes the socket will not signal: the read
     * goes on in the loop's next iteration, after the watchers that iteration finds ready. */
    ev_timer resume;
    ev_tstamp last_rx;

    uint8_t *in; /* bytes read and not yet parsed */
    size_t in_len, in_cap;

    uint8_t *msg; /* fragments of the message being assembled */
    size_t msg_len, msg_cap;
    int msg_opcode; /* 0: none in progress */

    uint8_t *out; /* the send queue: out[out_start..out_end) */
    size_t out_start, out_end, out_cap;
    int above_low;
    unsigned long long enqueued_total, sent_total; /* bytes ever queued, ever written */

    /* The answer to the latest ping not yet queued (RFC 6455 5.5.3: only the latest needs one),
     * and where the pong already queued ends: at most one pong waits in the queue, so a peer
     * that pings and never reads costs one pong, not one per ping. */
    uint8_t pong[WS_MAX_CONTROL];
    size_t pong_len;
    int pong_pending;
    unsigned long long pong_end;
    int read_paused; /* over the send bound: the peer must take what we sent first */
    int turn_frames; /* frames handled in this turn (TURN_FRAMES) */
    int held;        /* complete frames wait in the input for the next turn */
    int corked;      /* ws_conn_cork: sends only queue */

    enum state state;
    int peer_close_seen;
    int local_error; /* we ended it: the peer broke the protocol or a limit */
    int close_code;
    char close_reason[WS_MAX_CONTROL + 1];
    int depth; /* callbacks of ours running on the stack */
    int dead;  /* ws_conn_free called while depth > 0 */
};

static void destroy(struct ws_conn *c)
{
    ev_io_stop(c->loop, &c->rio);
    ev_io_stop(c->loop, &c->wio);
    ev_timer_stop(c->loop, &c->ping_timer);
    ev_timer_stop(c->loop, &c->close_timer);
    ev_timer_stop(c->loop, &c->resume);
    if (c->io.close != NULL)
        c->io.close(c->io.io_ud);
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->msg);
    free(c->out);
    free(c);
}

static ssize_t plain_recv(void *io_ud, void *buf, size_t len)
{
    return read(*(int *)io_ud, buf, len);
}

static ssize_t plain_send(void *io_ud, const void *buf, size_t len)
{
    return send(*(int *)io_ud, buf, len, MSG_NOSIGNAL);
}

/* Reports the end once and stops all I/O. */
static void finish(struct ws_conn *c, int code, const char *reason)
{
    if (c->state == FINISHED)
        return;
    /* Once a close frame was exchanged its code is the outcome, even when the peer then hangs up
     * before taking our answer. */
    if (c->peer_close_seen && c->close_code != 0) {
        code = c->close_code;
        reason = c->close_reason;
    }
    c->state = FINISHED;
    ev_io_stop(c->loop, &c->rio);
    ev_io_stop(c->loop, &c->wio);
    ev_timer_stop(c->loop, &c->ping_timer);
    ev_timer_stop(c->loop, &c->close_timer);
    ev_timer_stop(c->loop, &c->resume);
    if (c->cb.on_closed != NULL) {
        c->depth++;
        c->cb.on_closed(c, code, reason, c->ud);
        c->depth--;
    }
}

static size_t queued(const struct ws_conn *c)
{
    return c->out_end - c->out_start;
}

static int reserve_out(struct ws_conn *c, size_t n)
{
    if (c->out_start > 0 && (c->out_start >= c->out_cap / 2 || c->out_cap - c->out_end < n)) {
        memmove(c->out, c->out + c->out_start, queued(c));
        c->out_end -= c->out_start;
        c->out_start = 0;
    }
    if (c->out_cap - c->out_end >= n)
        return 0;
    size_t cap = c->out_cap ? c->out_cap : QUEUE_FIRST;
    while (cap - c->out_end < n)
        cap *= 2;
    uint8_t *p = realloc(c->out, cap);
    if (p == NULL)
        return -TELO_ENOMEM;
    c->out = p;
    c->out_cap = cap;
    return 0;
}

/* Writes what the socket takes. Returns 0, or -1 when the connection failed (not yet reported). */
static int flush_out(struct ws_conn *c)
{
    while (queued(c) > 0) {
        ssize_t n = c->io.send(c->io.io_ud, c->out + c->out_start, queued(c));
        if (n > 0) {
            c->out_start += (size_t)n;
            c->sent_total += (unsigned long long)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (errno == EINTR)
                continue;
            ev_io_start(c->loop, &c->wio);
            return 0;
        }
        return -1;
    }
    c->out_start = c->out_end = 0;
    ev_io_stop(c->loop, &c->wio);
    return 0;
}

static int enqueue(struct ws_conn *c, int opcode, const void *prefix, size_t plen, const void *data,
                   size_t len)
{
    uint8_t header[WS_MAX_HEADER];
    uint8_t mask[4];
    if (c->opts.client && RAND_bytes(mask, 4) != 1)
        return -TELO_EIO;
    size_t hlen = ws_frame_header(header, opcode, 1, plen + len, c->opts.client ? mask : NULL);
    if (reserve_out(c, hlen + plen + len) != 0)
        return -TELO_ENOMEM;
    uint8_t *p = c->out + c->out_end;
    memcpy(p, header, hlen);
    if (plen > 0)
        memcpy(p + hlen, prefix, plen);
    if (len > 0)
        memcpy(p + hlen + plen, data, len);
    if (c->opts.client)
        ws_mask(p + hlen, plen + len, mask, 0);
    int was_empty = queued(c) == 0;
    c->out_end += hlen + plen + len;
    c->enqueued_total += hlen + plen + len;
    if (queued(c) > c->opts.low_water)
        c->above_low = 1;
    /* Write at once when nothing is waiting (keystroke latency); a failure is noticed by the
     * write watcher, so no callback runs inside the caller's send. */
    if (was_empty && !c->corked && !ev_is_active(&c->wio) && flush_out(c) != 0)
        ev_io_start(c->loop, &c->wio);
    return 0;
}

static void send_close(struct ws_conn *c, int code, const char *reason)
{
    uint8_t payload[WS_MAX_CONTROL];
    size_t rlen = reason != NULL ? strlen(reason) : 0;
    if (rlen > WS_MAX_CONTROL - 2)
        rlen = WS_MAX_CONTROL - 2;
    payload[0] = (uint8_t)(code >> 8);
    payload[1] = (uint8_t)code;
    if (rlen > 0)
        memcpy(payload + 2, reason, rlen);
    if (enqueue(c, WS_OP_CLOSE, NULL, 0, payload, rlen + 2) != 0)
        finish(c, 1006, "out of memory sending close");
}

/* Called after every flush: the closing handshake ends once our close frame is out and the
 * peer's arrived (or we answered the peer's). */
static void after_flush(struct ws_conn *c)
{
    if (queued(c) != 0)
        return;
    if (c->state == CLOSE_RECEIVED || (c->state == CLOSE_SENT && c->peer_close_seen)) {
        shutdown(c->fd, SHUT_WR);
        finish(c, c->close_code, c->close_reason);
    }
}

static void protocol_error(struct ws_conn *c, int code, const char *why)
{
    if (c->state != OPEN)
        return finish(c, 1006, why);
    c->state = CLOSE_SENT;
    c->local_error = 1;
    c->close_code = code;
    snprintf(c->close_reason, sizeof(c->close_reason), "%s", why);
    c->peer_close_seen = 1; /* stop waiting for the peer: it broke the protocol */
    ev_io_stop(c->loop, &c->rio);
    send_close(c, code, why);
    ev_timer_set(&c->close_timer, c->opts.close_timeout_s, 0.);
    ev_timer_start(c->loop, &c->close_timer);
    after_flush(c);
}

/* Queues the pong for the latest ping when the previous pong is out and the queue has room for
 * it within max_queued; otherwise it stays pending (write_cb tries again as the queue drains). */
static void answer_ping(struct ws_conn *c)
{
    if (!c->pong_pending || c->state != OPEN || c->sent_total < c->pong_end ||
        queued(c) + WS_MAX_HEADER + c->pong_len > c->opts.max_queued)
        return;
    c->pong_pending = 0;
    if (enqueue(c, WS_OP_PONG, NULL, 0, c->pong, c->pong_len) != 0)
        return finish(c, 1006, "out of memory answering a ping");
    c->pong_end = c->enqueued_total;
}

/* Whether the peer must take what we sent before we read more: the queue is at its bound, or an
 * answer (a pong) waits for room. What a peer sends can only make us queue control frames, so
 * this keeps a peer that writes and never reads from growing our memory; TCP holds it back. */
static int over_bound(const struct ws_conn *c)
{
    return queued(c) >= c->opts.max_queued || (c->pong_pending && c->state == OPEN);
}

static void pause_reading(struct ws_conn *c)
{
    if (c->read_paused || c->state == FINISHED || !over_bound(c))
        return;
    c->read_paused = 1;
    ev_io_stop(c->loop, &c->rio);
}

static void resume_reading(struct ws_conn *c)
{
    if (!c->read_paused || over_bound(c))
        return;
    c->read_paused = 0;
    if (c->state == FINISHED || c->peer_close_seen)
        return;
    ev_io_start(c->loop, &c->rio);
    /* A TLS layer may hold decrypted bytes the socket will not signal again. */
    ev_feed_event(c->loop, &c->rio, EV_READ);
}

static void deliver(struct ws_conn *c, int opcode, const uint8_t *data, size_t len)
{
    if (c->cb.on_message == NULL || c->state != OPEN)
        return;
    c->depth++;
    c->cb.on_message(c, opcode, data, len, c->ud);
    c->depth--;
}

/* Codes a peer may send in a close frame (RFC 6455 section 7.4): the defined ones that are not
 * reserved for reporting (1005, 1006, 1015), and the registered and private ranges. */
static int valid_close_code(int code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

static void on_control(struct ws_conn *c, const struct ws_frame *f)
{
    if (f->opcode == WS_OP_PING) {
        if (c->state != OPEN)
            return;
        /* Answered once the whole read is parsed: a burst of pings costs one pong. */
        memcpy(c->pong, f->payload, f->payload_len);
        c->pong_len = f->payload_len;
        c->pong_pending = 1;
        return;
    }
    if (f->opcode == WS_OP_PONG)
        return;
    /* Close: remember the peer's code, answer with it unless we already sent ours. */
    int code = 1005;
    char reason[WS_MAX_CONTROL] = "";
    if (f->payload_len >= 2) {
        code = (f->payload[0] << 8) | f->payload[1];
        size_t rlen =
            f->payload_len - 2 < sizeof(reason) - 1 ? f->payload_len - 2 : sizeof(reason) - 1;
        /* The reason reaches logs: nothing that could end or fake a log field. */
        for (size_t i = 0; i < rlen; i++) {
            uint8_t b = f->payload[2 + i];
            if (b < 0x20 || b == 0x7F || b == '"' || b == '\\')
                b = '?';
            memcpy(&reason[i], &b, 1);
        }
        reason[rlen] = '\0';
    }
    if (f->payload_len == 1 || (f->payload_len >= 2 && !valid_close_code(code)))
        return protocol_error(c, WS_CLOSE_PROTOCOL_ERROR, "invalid close frame");
    c->peer_close_seen = 1;
    ev_io_stop(c->loop, &c->rio);
    if (c->state == OPEN) {
        c->state = CLOSE_RECEIVED;
        c->close_code = code;
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
        send_close(c, code == 1005 ? WS_CLOSE_NORMAL : code, reason);
    }
    after_flush(c);
}

/* Gives a buffer grown for one large message back down to first bytes once what it holds fits:
 * a peer that sent one big message and then idles (pinging) would otherwise keep its peak on
 * each of thousands of connections. A failed shrink keeps the larger buffer, which still works. */
static void shrink(uint8_t **buf, size_t *cap, size_t used, size_t first)
{
    if (*cap <= first || used > first)
        return;
    uint8_t *p = realloc(*buf, first);
    if (p == NULL)
        return;
    *buf = p;
    *cap = first;
}

/* The largest message of opcode (a data frame's, or the message's a continuation adds to). */
static size_t message_limit(const struct ws_conn *c, int opcode)
{
    return opcode == WS_OP_TEXT ? c->opts.max_text : c->opts.max_message;
}

/* Parses and dispatches the complete frames in the input buffer, up to the turn's share: the rest
 * wait there (held) for a turn in the loop's next iteration. */
static void parse_input(struct ws_conn *c)
{
    size_t pos = 0;
    c->held = 0;
    while (!c->dead && c->state != FINISHED && !c->peer_close_seen && pos < c->in_len) {
        if (c->turn_frames >= TURN_FRAMES) {
            c->held = 1;
            ev_timer_start(c->loop, &c->resume);
            break;
        }
        c->turn_frames++;
        struct ws_frame f;
        size_t used = 0;
        struct telo_err err = {0};
        int rc = ws_frame_parse(c->in + pos, c->in_len - pos, c->opts.max_message, !c->opts.client,
                                &f, &used, &err);
        if (rc != 0) {
            protocol_error(c, rc == -TELO_ETOOBIG ? WS_CLOSE_TOO_BIG : WS_CLOSE_PROTOCOL_ERROR,
                           err.msg);
            break;
        }
        if (used == 0)
            break;
        pos += used;
        if (f.opcode >= WS_OP_CLOSE) {
            on_control(c, &f);
            continue;
        }
        if (f.opcode != WS_OP_CONT) {
            if (c->msg_opcode != 0) {
                protocol_error(c, WS_CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one");
                break;
            }
            if (f.fin && f.payload_len > message_limit(c, f.opcode)) {
                protocol_error(c, WS_CLOSE_TOO_BIG, "message over the size limit");
                break;
            }
            if (f.fin) {
                deliver(c, f.opcode, f.payload, f.payload_len);
                continue;
            }
            c->msg_opcode = f.opcode;
            c->msg_len = 0;
        } else if (c->msg_opcode == 0) {
            protocol_error(c, WS_CLOSE_PROTOCOL_ERROR, "continuation without a message");
            break;
        }
        if (c->msg_len + f.payload_len > message_limit(c, c->msg_opcode)) {
            protocol_error(c, WS_CLOSE_TOO_BIG, "message over the size limit");
            break;
        }
        if (c->msg_len + f.payload_len > c->msg_cap) {
            size_t cap = c->msg_cap ? c->msg_cap : MSG_FIRST;
            while (cap < c->msg_len + f.payload_len)
                cap *= 2;
            uint8_t *p = realloc(c->msg, cap);
            if (p == NULL) {
                finish(c, 1006, "out of memory assembling a message");
                break;
            }
            c->msg = p;
            c->msg_cap = cap;
        }
        memcpy(c->msg + c->msg_len, f.payload, f.payload_len);
        c->msg_len += f.payload_len;
        if (f.fin) {
            int op = c->msg_opcode;
            c->msg_opcode = 0;
            deliver(c, op, c->msg, c->msg_len);
            if (c->dead || c->state == FINISHED)
                return;
            c->msg_len = 0;
            shrink(&c->msg, &c->msg_cap, 0, MSG_FIRST);
        }
    }
    if (c->dead || c->state == FINISHED)
        return;
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
    shrink(&c->in, &c->in_cap, c->in_len, READ_FIRST);
    answer_ping(c);
    if (c->dead || c->state == FINISHED)
        return;
    pause_reading(c);
}

static int append_input(struct ws_conn *c, const void *data, size_t len)
{
    if (c->in_len + len > c->in_cap) {
        size_t cap = c->in_cap;
        while (cap < c->in_len + len)
            cap *= 2;
        uint8_t *p = realloc(c->in, cap);
        if (p == NULL)
            return -1;
        c->in = p;
        c->in_cap = cap;
    }
    memcpy(c->in + c->in_len, data, len);
    c->in_len += len;
    return 0;
}

static void reap(struct ws_conn *c)
{
    if (c->dead && c->depth == 0)
        destroy(c);
}

static void read_cb(struct ev_loop *loop, ev_io *w, int revents);

static void resume_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct ws_conn *c = w->data;
    /* Pending: the socket showed more as well, and that read comes in this same pass. */
    if (ev_is_active(&c->rio) && !ev_is_pending(&c->rio))
        read_cb(loop, &c->rio, revents);
}

static void read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct ws_conn *c = w->data;
    ev_timer_stop(c->loop, &c->resume);
    c->depth++;
    c->turn_frames = 0;
    if (c->held)
        parse_input(c); /* what the last turn left, before reading more */
    int reading = !c->dead && c->state != FINISHED && !c->peer_close_seen;
    for (int round = 0; reading && !c->read_paused && !c->held; round++) {
        /* A peer that sends without pause gets one turn, not the loop: the rest waits for the
         * next iteration, after the other watchers it finds ready. A plain socket's watcher is
         * level-triggered and comes back by itself. TLS may hold what the socket does not show,
         * so that read is resumed by a timer: not fed, as an event fed here is invoked again
         * before libev polls, which would give the loop to this peer until it pauses. */
        if (round == READ_ROUNDS) {
            if (c->io.recv != plain_recv)
                ev_timer_start(c->loop, &c->resume);
            break;
        }
        /* The buffer grows (up to one maximal frame plus a chunk) only while a frame being
         * assembled fills most of it: a stream of small frames, as keystrokes or a ping flood
         * are, keeps a small buffer on each of thousands of connections. */
        if (c->in_cap - c->in_len < c->in_cap / 4) {
            size_t limit = c->opts.max_message + WS_MAX_HEADER + READ_CHUNK;
            size_t cap = c->in_cap * 2;
            if (cap > limit)
                cap = limit;
            if (cap > c->in_cap) {
                uint8_t *p = realloc(c->in, cap);
                if (p == NULL) {
                    finish(c, 1006, "out of memory reading");
                    break;
                }
                c->in = p;
                c->in_cap = cap;
            }
        }
        size_t room = c->in_cap - c->in_len;
        if (room == 0) {
            protocol_error(c, WS_CLOSE_TOO_BIG, "frame over the size limit");
            break;
        }
        ssize_t n = c->io.recv(c->io.io_ud, c->in + c->in_len, room);
        if (n > 0) {
            c->in_len += (size_t)n;
            c->last_rx = ev_now(c->loop);
            parse_input(c);
            if (c->dead || c->state == FINISHED || c->peer_close_seen || c->read_paused || c->held)
                break;
            /* A plain socket that filled less than the room has nothing more now (the watcher
             * is level-triggered): no read that only says EAGAIN, one syscall per keystroke. A
             * TLS layer may hold more than the socket shows, so it is read until it says so. */
            if (c->io.recv == plain_recv && (size_t)n < room)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        finish(c, 1006, n == 0 ? "connection closed by the peer" : "read failed");
        break;
    }
    c->depth--;
    reap(c);
}

static void write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct ws_conn *c = w->data;
    c->depth++;
    if (flush_out(c) != 0) {
        finish(c, 1006, "write failed");
    } else {
        answer_ping(c);
        if (c->above_low && queued(c) <= c->opts.low_water) {
            c->above_low = 0;
            if (c->cb.on_drain != NULL && c->state == OPEN)
                c->cb.on_drain(c, c->ud);
        }
        if (!c->dead)
            after_flush(c);
        if (!c->dead)
            resume_reading(c);
    }
    c->depth--;
    reap(c);
}

static void ping_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct ws_conn *c = w->data;
    c->depth++;
    /* Four intervals of silence: a peer that merely stops reading for a minute (a suspended
     * terminal) is not taken for a dead one at the default 20 s. A peer that has not taken the
     * queue gets no ping on top of it (it is behind anyway; while we do not read it, its silence
     * is what this counts). */
    if (ev_now(loop) - c->last_rx > 4 * c->opts.ping_interval_s) {
        finish(c, 1006, "no answer to pings");
    } else if (c->state == OPEN && queued(c) + WS_MAX_HEADER <= c->opts.max_queued &&
               enqueue(c, WS_OP_PING, NULL, 0, NULL, 0) != 0) {
        finish(c, 1006, "out of memory sending a ping");
    }
    c->depth--;
    reap(c);
}

static void close_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct ws_conn *c = w->data;
    c->depth++;
    finish(c, c->close_code ? c->close_code : 1006, "closing handshake timed out");
    c->depth--;
    reap(c);
}

struct ws_conn *ws_conn_new(struct ev_loop *loop, int fd, const struct ws_conn_io *io,
                            const struct ws_conn_opts *opts, const struct ws_conn_callbacks *cb,
                            void *ud, struct telo_err *err)
{
    struct ws_conn *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->in_cap = READ_FIRST;
        c->in = malloc(c->in_cap);
        /* Never NULL, so an empty first fragment copies nothing to a real buffer. */
        c->msg_cap = MSG_FIRST;
        c->msg = malloc(c->msg_cap);
    }
    if (c == NULL || c->in == NULL || c->msg == NULL) {
        if (c != NULL) {
            free(c->in);
            free(c->msg);
        }
        free(c);
        if (io != NULL && io->close != NULL)
            io->close(io->io_ud);
        close(fd);
        telo_err_set(err, TELO_ENOMEM, "websocket: out of memory");
        return NULL;
    }
    c->loop = loop;
    c->fd = fd;
    if (opts != NULL)
        c->opts = *opts;
    if (c->opts.max_message == 0)
        c->opts.max_message = (size_t)1 << 20;
    if (c->opts.max_text == 0 || c->opts.max_text > c->opts.max_message)
        c->opts.max_text = c->opts.max_message;
    if (c->opts.max_queued == 0)
        c->opts.max_queued = (size_t)1 << 20;
    if (c->opts.low_water == 0)
        c->opts.low_water = c->opts.max_queued / 4;
    if (c->opts.close_timeout_s <= 0)
        c->opts.close_timeout_s = 5;
    if (io != NULL) {
        c->io = *io;
    } else {
        c->io.recv = plain_recv;
        c->io.send = plain_send;
        c->io.io_ud = &c->fd;
    }
    c->cb = *cb;
    c->ud = ud;
    c->last_rx = ev_now(loop);
    ev_io_init(&c->rio, read_cb, fd, EV_READ);
    ev_io_init(&c->wio, write_cb, fd, EV_WRITE);
    c->rio.data = c->wio.data = c;
    /* Connections opened together (a crowd attaching, a reconnect after a restart) ping apart. */
    ev_timer_init(&c->ping_timer, ping_cb, util_spread_first(c->opts.ping_interval_s),
                  c->opts.ping_interval_s);
    ev_timer_init(&c->close_timer, close_timeout_cb, 0., 0.);
    ev_timer_init(&c->resume, resume_cb, 0., 0.);
    c->ping_timer.data = c->close_timer.data = c->resume.data = c;
    ev_io_start(loop, &c->rio);
    /* One read now: a TLS layer may already hold decrypted bytes the socket will not signal. */
    ev_feed_event(loop, &c->rio, EV_READ);
    if (c->opts.ping_interval_s > 0)
        ev_timer_start(loop, &c->ping_timer);
    return c;
}

int ws_conn_feed(struct ws_conn *c, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    c->depth++;
    if (append_input(c, data, len) != 0)
        finish(c, 1006, "out of memory");
    else
        parse_input(c);
    c->depth--;
    int gone = c->dead || c->state == FINISHED;
    reap(c);
    return gone ? -1 : 0;
}

int ws_conn_send(struct ws_conn *c, int opcode, const void *prefix, size_t prefix_len,
                 const void *data, size_t len, int force)
{
    if (c->state != OPEN)
        return -TELO_EIO;
    if (!force && queued(c) + prefix_len + len > c->opts.max_queued)
        return -TELO_ETOOBIG;
    return enqueue(c, opcode, prefix, prefix_len, data, len);
}

void ws_conn_cork(struct ws_conn *c, int on)
{
    c->corked = on;
    if (on || queued(c) == 0 || c->state == FINISHED || ev_is_active(&c->wio))
        return;
    /* Written now, as enqueue does; once closing, by the write watcher, which also ends the
     * handshake when the close frame was among what the cork held (no callback may run inside
     * the caller's call). A failed write is noticed by the watcher too. */
    if (c->state != OPEN || flush_out(c) != 0) {
        ev_io_start(c->loop, &c->wio);
        return;
    }
    /* The queue went down past low_water in this one write: a writer that stopped at a full
     * queue is owed on_drain, which cannot run inside its call; the watcher reports it (the
     * socket is writable, so at the loop's next turn). Without it that writer would wait for a
     * drain that never comes. */
    if (c->above_low && queued(c) <= c->opts.low_water)
        ev_io_start(c->loop, &c->wio);
}

size_t ws_conn_queued(const struct ws_conn *c)
{
    return queued(c);
}

void ws_conn_set_low_water(struct ws_conn *c, size_t low_water)
{
    c->opts.low_water = low_water;
    if (queued(c) > low_water)
        c->above_low = 1;
}

int ws_conn_local_error(const struct ws_conn *c)
{
    return c->local_error;
}

void ws_conn_close(struct ws_conn *c, int code, const char *reason)
{
    if (c->state != OPEN)
        return;
    c->state = CLOSE_SENT;
    c->close_code = code;
    snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason ? reason : "");
    send_close(c, code, reason);
    ev_timer_set(&c->close_timer, c->opts.close_timeout_s, 0.);
    ev_timer_start(c->loop, &c->close_timer);
}

void ws_conn_free(struct ws_conn *c)
{
    if (c == NULL)
        return;
    if (c->depth > 0) {
        c->dead = 1;
        c->state = FINISHED;
        ev_io_stop(c->loop, &c->rio);
        ev_io_stop(c->loop, &c->wio);
        ev_timer_stop(c->loop, &c->ping_timer);
        ev_timer_stop(c->loop, &c->close_timer);
        return;
    }
    destroy(c);
}

/* One WebSocket connection after the handshake, on a libev loop: message assembly, control
 * frames, a bounded send queue, keepalive pings and the closing handshake. Server or client. */
#ifndef TELO_WS_CONN_H
#define TELO_WS_CONN_H

#include "util/err.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ev_loop;
struct ws_conn;

/* How the connection reads and writes its socket: plain read/write by default, or e.g. a TLS
 * library's. Both return bytes moved, or -1 with errno EAGAIN when the socket would block, or -1
 * with another errno on failure; recv returns 0 at end of stream. recv is called again until it
 * returns -1 with EAGAIN, so a layer that buffers decrypted bytes is drained. */
struct ws_conn_io {
    ssize_t (*recv)(void *io_ud, void *buf, size_t len);
    ssize_t (*send)(void *io_ud, const void *buf, size_t len);
    void (*close)(void *io_ud); /* releases io_ud when the connection goes; may be NULL */
    void *io_ud;
};

struct ws_conn_callbacks {
    /* A whole text or binary message (fragments joined). data is valid during the call. */
    void (*on_message)(struct ws_conn *c, int opcode, const uint8_t *data, size_t len, void *ud);
    /* The send queue fell to or below low_water after having been above it, or emptied. */
    void (*on_drain)(struct ws_conn *c, void *ud);
    /* The connection is finished (closing handshake done, peer gone, protocol error or timeout):
     * code is the peer's close code (1005 when it sent none, 1006 when the connection dropped) and
     * reason a short text. Called once; the owner then frees c (also from inside this call). */
    void (*on_closed)(struct ws_conn *c, int code, const char *reason, void *ud);
};

struct ws_conn_opts {
    int client;             /* 1: mask what we send, expect unmasked frames (RFC 6455 5.1) */
    size_t max_message;     /* largest message accepted; 0: 1 MiB. A larger one closes the
                             * connection with 1009. The buffers that held one larger than 4 KiB
                             * shrink back once it is done */
    size_t max_text;        /* largest text message; 0 (or over max_message): max_message */
    size_t max_queued;      /* send queue bound: for ws_conn_send without force, for our pongs
                             * (one queued at a time, answering the latest ping) and pings; reading
                             * stops while the queue is at it or a pong waits; 0: 1 MiB */
    size_t low_water;       /* on_drain threshold; 0: max_queued / 4 */
    double ping_interval_s; /* a ping this often, 0: none; nothing received for four closes */
    double close_timeout_s; /* wait for the peer's close frame after ours; 0: 5 s */
};

/* Wraps the connected, non-blocking socket fd (ownership passes to the connection, which closes
 * it) on loop. io NULL means read/write on fd. cb and opts are copied; ud is
 * passed to the callbacks. Returns NULL with err filled on -TELO_ENOMEM (fd is then closed). */
struct ws_conn *ws_conn_new(struct ev_loop *loop, int fd, const struct ws_conn_io *io,
                            const struct ws_conn_opts *opts, const struct ws_conn_callbacks *cb,
                            void *ud, struct telo_err *err);

/* Processes bytes that arrived before the connection existed (read past the handshake's head).
 * Call right after ws_conn_new. Returns 0, or -1 when they closed the connection (on_closed has
 * been called). */
int ws_conn_feed(struct ws_conn *c, const void *data, size_t len);

/* Queues one message made of prefix (may be empty) followed by data, as a single frame. Without
 * force a message that would take the queue past max_queued is refused with -TELO_ETOOBIG (the
 * caller retries on on_drain); force queues it anyway (a final status must not be dropped).
 * Returns 0, -TELO_ETOOBIG, -TELO_EIO when the connection is closing, or -TELO_ENOMEM. */
int ws_conn_send(struct ws_conn *c, int opcode, const void *prefix, size_t prefix_len,
                 const void *data, size_t len, int force);

/* Corked (on 1), messages sent are only queued; uncorked (0), what they queued is written as a
 * send writes. For a writer about to send many small messages at once (a client catching up on
 * output in small chunks): one write for all of them, not a write each. A writer that stopped
 * at a full queue under the cork still gets on_drain when that write empties it, from the loop,
 * after this call. Cannot fail. */
void ws_conn_cork(struct ws_conn *c, int on);

/* Bytes queued and not yet written to the socket. */
size_t ws_conn_queued(const struct ws_conn *c);

/* Moves the level on_drain reports at (ws_conn_opts.low_water) to low_water: a writer that now
 * stops at a lower high-water mark is still called back once the queue drains below it. */
void ws_conn_set_low_water(struct ws_conn *c, size_t low_water);

/* 1 when the connection ended (or is ending) because the peer broke the protocol or a size limit:
 * then on_closed's code and reason are the ones we sent, not the peer's. */
int ws_conn_local_error(const struct ws_conn *c);

/* Starts the closing handshake: queues a close frame with code and reason after everything
 * already queued, then waits for the peer's close (at most close_timeout_s) and reports
 * on_closed. Further sends fail. A second call is a no-op. */
void ws_conn_close(struct ws_conn *c, int code, const char *reason);

/* Releases the connection and closes the socket without any handshake; no callback is called
 * afterwards. May be called from inside a callback of c. NULL is a no-op. */
void ws_conn_free(struct ws_conn *c);

#endif

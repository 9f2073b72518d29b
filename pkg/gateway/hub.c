/* The attach sessions of the gateway: one upstream pods/attach per TeloSession, its replay ring,
 * and the clients it fans out to (each with its own cursor, so a slow one never stalls the rest).
 */
#include "gateway/hub.h"

#include "gateway/auth.h"
#include "gateway/ring.h"
#include "kube/attach.h"
#include "kube/channel.h"
#include "kube/config.h"
#include "kube/execcred.h"
#include "kube/rest.h"
#include "kube/transport.h"
#include "session/owner.h"
#include "session/phase.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/jitter.h"
#include "util/log.h"
#include "util/strmap.h"
#include "ws/conn.h"
#include "ws/frame.h"

#include <ev.h>
#include <json.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SESSION_CONTAINER "session"
#define RETRY_MIN_S       0.5
#define RETRY_MAX_S       5.0
#define MAX_PENDING_STDIN (64 << 10)
/* Input lost ends being told as lost once this long has gone by without a loss. */
#define STDIN_LOSS_QUIET_S 10.0
/* What a client may send as one message (telo.io.v1 control text: GW_CONTROL_MAX): a stdin
 * chunk or a channel frame, which kubectl's stdin copy sends 32 KiB at a time. A connection's
 * input buffers grow to about twice this while a message arrives, and on each of 4096 clients at
 * 1 MiB that was gigabytes from tenants holding a fragment open. */
#define MAX_CLIENT_MSG  (64 << 10)
#define MAX_FRAME_BYTES (64 << 10) /* output bytes of one frame to a channel-protocol client */
#define FAN_BATCH_BYTES (64 << 10) /* output gathered before its clients are pumped */
/* The least a client's send queue may hold however many share client_queue_total: a window
 * that keeps a terminal's output flowing between two drains. Also the largest chunk the ring
 * keeps, so a queue never passes where it stops by more. */
#define MIN_CLIENT_QUEUE (16 << 10)
#define CLOSE_POLICY     1008 /* RFC 6455 policy violation: the credential was revoked */

enum state {
    S_CONNECTING, /* upstream opening */
    S_LIVE,       /* upstream open */
    S_CHECKING,   /* upstream gone; reading the pod to learn whether the container ended */
    S_WAITING,    /* the container still runs: reconnecting after a backoff */
    S_ENDED,      /* the container ended; output kept for late clients until expiry */
};

struct client;

struct session {
    struct gw_hub *hub;
    char key[512]; /* "ns/name" */
    char namespace[254];
    char name[254];
    char pod[254];
    char uid[64];       /* the TeloSession's, so a new session of the same name starts afresh */
    double ended_at;    /* S_ENDED: when (loop time, epoch seconds) */
    double alone_since; /* when its last client left (loop time); 0 while it has clients */
    struct gw_ring *ring;
    struct kube_attach *up;               /* pods/attach of the session container, NULL when none */
    struct kube_execcred_wait *cred_wait; /* S_CONNECTING: an exec plugin runs first */
    enum state state;
    struct client *clients;
    struct kube_call *pod_call;
    ev_timer retry, resize, expire;
    ev_timer fan;    /* output came: its clients are pumped in the loop's next pass */
    ev_timer typed;  /* input came: what a turn of client reads brought goes up in one message */
    size_t unfanned; /* bytes of output since they last were */
    double backoff;
    int width, height; /* latest size asked by a client; 0: none yet */
    double resize_sent_at;
    struct buf pending_stdin;         /* typed in this turn, or while the upstream was not open */
    unsigned long long stdin_dropped; /* input lost since losing began (stdin_lost); 0: none */
    double stdin_lost_at;             /* the last loss (loop time) */
    int exit_code;                    /* S_ENDED: the container's exit code, -1 when unknown */
    char end_message[200];
    int reopen;                  /* S_CHECKING: the pod is read before a reconnect */
    int replaced;                /* another TeloSession of its name took its place: out of the
                                  * map, its clients closing */
    struct session *prev, *next; /* replaced: in the hub's list of them */
};

struct client {
    struct session *s;
    struct ws_conn *ws;
    enum gw_proto proto;
    uint64_t cursor; /* the next chunk to send */
    int finished;    /* the exit status is queued and the close started */
    char subject[128];
    char *token;                /* the admitted credential, for re-authorization */
    ev_timer reauth;            /* when to check it again */
    struct gw_admission *check; /* a re-authorization in flight */
    struct client *prev, *next;
};

struct gw_hub {
    struct ev_loop *loop;
    struct kube_transport *t;
    struct gw_hub_opts opts;
    struct strmap *sessions;
    struct session *replaced; /* each until its last client has gone (at most ws_conn's close
                               * timeout); their clients count in m.clients only */
    struct gw_hub_metrics m;
};

static void pump(struct client *c);
static void session_free(struct session *s);

/* ---- clients ------------------------------------------------------------------------------ */

static void client_free(struct client *c)
{
    struct session *s = c->s;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->clients = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    ev_timer_stop(s->hub->loop, &c->reauth);
    gw_admission_cancel(c->check);
    if (c->token != NULL) {
        OPENSSL_cleanse(c->token, strlen(c->token));
        free(c->token);
    }
    ws_conn_free(c->ws);
    s->hub->m.clients--;
    free(c);
}

static int send_text(struct client *c, const char *text, int force)
{
    return ws_conn_send(c->ws, WS_OP_TEXT, NULL, 0, text, strlen(text), force);
}

/* The client has everything the ended session wrote: the exit reaches it as a Status (channel
 * 3 on the Kubernetes protocols, a status frame on telo.io.v1), then the close. */
static void finish_client(struct client *c)
{
    struct session *s = c->s;
    struct buf b;
    buf_init(&b, 4096);
    c->finished = 1;
    if (c->proto == GW_PROTO_IO_V1) {
        if (s->exit_code >= 0)
            buf_printf(&b, "{\"type\":\"status\",\"status\":{\"kind\":\"exited\",\"code\":%d}}",
                       s->exit_code);
        else
            buf_printf(&b, "{\"type\":\"status\",\"status\":{\"kind\":\"failed\",\"message\":"
                           "\"session ended\"}}");
        send_text(c, b.data, 1);
    } else {
        static const uint8_t ch = KUBE_CHANNEL_ERROR;
        kube_exit_status_format(&b, s->exit_code, s->end_message[0] ? s->end_message : NULL);
        ws_conn_send(c->ws, WS_OP_BINARY, &ch, 1, b.data, b.len, 1);
    }
    buf_release(&b);
    char reason[32];
    snprintf(reason, sizeof(reason), "exit %d", s->exit_code);
    ws_conn_close(c->ws, WS_CLOSE_NORMAL, reason);
}

/* Closes a client the session is no longer open to (its credential was revoked, or the session
 * replaced): a Status on channel 3 (v4/v5, as the API server ends a stream it refuses) or an
 * error frame (telo.io.v1), then a policy close. */
static void refuse_client(struct client *c, int code, const char *reason, const char *message)
{
    struct buf b;
    buf_init(&b, 4096);
    c->finished = 1;
    if (c->proto == GW_PROTO_IO_V1) {
        if (gw_error_frame_json(&b, code, reason, message) == 0)
            send_text(c, b.data, 1);
    } else {
        static const uint8_t ch = KUBE_CHANNEL_ERROR;
        if (gw_error_status_json(&b, code, reason, message) == 0)
            ws_conn_send(c->ws, WS_OP_BINARY, &ch, 1, b.data, b.len, 1);
    }
    buf_release(&b);
    ws_conn_close(c->ws, CLOSE_POLICY, reason);
}

static void reauth_start(struct client *c);

static void reauthorized(const struct gw_admitted *a, void *ud)
{
    struct client *c = ud;
    c->check = NULL;
    if (c->finished)
        return;
    int code;
    const char *reason, *message;
    if (gw_reauth_refusal(a, c->s->uid, &code, &reason, &message)) {
        c->s->hub->m.reauth_closes++;
        telo_log(TELO_LOG_INFO, "attach client refused on re-authorization",
                 "session=%s subject=\"%s\" code=%d why=\"%s\"", c->s->key, c->subject, code,
                 message);
        return refuse_client(c, code, reason, message);
    }
    if (a->verdict != GW_ALLOW)
        /* The API server could not be asked: the stream stays; the next period asks again. */
        telo_log(TELO_LOG_WARN, "attach re-authorization unavailable; the client stays",
                 "session=%s subject=\"%s\" why=\"%s\"", c->s->key, c->subject, a->reason);
}

static void reauth_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    reauth_start(w->data);
}

/* Asks again whether the client's credential admits it (one check at a time). */
static void reauth_start(struct client *c)
{
    struct session *s = c->s;
    if (c->check != NULL || c->finished || c->token == NULL || s->hub->opts.auth == NULL)
        return;
    struct telo_err err = {0};
    c->check =
        gw_reauthorize(s->hub->opts.auth, s->namespace, s->name, c->token, reauthorized, c, &err);
    if (c->check == NULL)
        telo_log(TELO_LOG_WARN, "attach re-authorization not started", "session=%s error=\"%s\"",
                 s->key, err.msg);
}

/* Output this client lost by falling behind the ring (or resuming from evicted history). */
static void send_gap(struct client *c, uint64_t first)
{
    struct gw_hub *h = c->s->hub;
    h->m.gaps++;
    if (c->proto == GW_PROTO_IO_V1) {
        send_text(c, "{\"type\":\"gap\",\"reason\":\"buffer_evicted\"}", 1);
    } else {
        static const uint8_t ch = KUBE_CHANNEL_STDOUT;
        static const char note[] = "\r\n[telo-gateway: output skipped: this terminal fell behind "
                                   "the replay buffer]\r\n";
        ws_conn_send(c->ws, WS_OP_BINARY, &ch, 1, note, sizeof(note) - 1, 1);
    }
    telo_log(TELO_LOG_INFO, "attach client behind the replay ring", "session=%s lost_chunks=%llu",
             c->s->key, (unsigned long long)(first - c->cursor));
    c->cursor = first;
}

/* Where a client's send queue stops taking output: client_queue_bytes, or its share of
 * client_queue_total once many clients are attached, so a crowd of clients that do not read
 * holds a bounded total while the rest waits in the rings. */
static size_t queue_high(const struct gw_hub *h)
{
    size_t share = h->opts.client_queue_total / (h->m.clients > 0 ? h->m.clients : 1);
    if (share > h->opts.client_queue_bytes)
        share = h->opts.client_queue_bytes;
    return share < MIN_CLIENT_QUEUE ? MIN_CLIENT_QUEUE : share;
}

/* Sends what the client has not seen yet while its queue has room: a stalled client only stops
 * its own pump; it catches up (or gets a gap marker) when its socket drains. */
static void pump_frames(struct client *c)
{
    struct session *s = c->s;
    size_t high = queue_high(s->hub);
    if (c->finished)
        return;
    /* Called back once the queue drains to half of where it stops now. */
    ws_conn_set_low_water(c->ws, high / 2);
    while (c->cursor < gw_ring_next(s->ring)) {
        size_t queued = ws_conn_queued(c->ws);
        if (queued >= high)
            return;
        uint64_t first = gw_ring_first(s->ring);
        if (c->cursor < first) {
            send_gap(c, first);
            continue;
        }
        struct gw_chunk chunk;
        size_t chunks;
        int rc;
        if (c->proto == GW_PROTO_IO_V1) {
            /* One frame per chunk: its sequence number is what a client resumes from. */
            if ((chunks = gw_ring_get_run(s->ring, c->cursor, 0, &chunk)) == 0)
                return;
            uint8_t seq[4] = {(uint8_t)(chunk.seq >> 24), (uint8_t)(chunk.seq >> 16),
                              (uint8_t)(chunk.seq >> 8), (uint8_t)chunk.seq};
            rc = ws_conn_send(c->ws, WS_OP_BINARY, seq, 4, chunk.data, chunk.len, 1);
        } else {
            /* The channel protocols carry a byte stream: a client catching up (the scrollback,
             * or after its socket drained) gets the chunks that lie together in one frame, not
             * a frame, a copy and a terminal write on its side per chunk of upstream output. */
            size_t room = high - queued < MAX_FRAME_BYTES ? high - queued : MAX_FRAME_BYTES;
            if ((chunks = gw_ring_get_run(s->ring, c->cursor, room, &chunk)) == 0)
                return;
            static const uint8_t ch = KUBE_CHANNEL_STDOUT;
            rc = ws_conn_send(c->ws, WS_OP_BINARY, &ch, 1, chunk.data, chunk.len, 1);
        }
        if (rc == -TELO_ENOMEM) {
            /* No drain would come for what was never queued: the client would wait for
             * output (or its session's end) that is not coming. */
            c->finished = 1;
            ws_conn_close(c->ws, WS_CLOSE_INTERNAL, "out of memory");
        }
        if (rc != 0)
            return; /* closing: on_closed will clean up */
        s->hub->m.bytes_out += chunk.len;
        c->cursor += chunks;
    }
    if (s->state == S_ENDED)
        finish_client(c);
}

/* The frames of one pump go out in one write: many small chunks (telo.io.v1 sends a frame
 * each) would otherwise be a write each, to each client. A pump that stopped at a full queue
 * is called again by on_drain, also when that one write took the whole queue (ws_conn_cork). */
static void pump(struct client *c)
{
    ws_conn_cork(c->ws, 1);
    pump_frames(c);
    ws_conn_cork(c->ws, 0);
}

static void session_resize(struct session *s, int width, int height);

/* Input the container cannot take now is lost: said when losing begins and when input goes
 * through again, with the bytes lost between, not once per message (a client may send thousands
 * of one-byte messages meanwhile, and each line would be many times their size). */
static void stdin_lost(struct session *s, size_t len, const char *why)
{
    s->hub->m.stdin_dropped_bytes += len;
    if (s->stdin_dropped == 0)
        telo_log(TELO_LOG_WARN, "attach input dropped", "session=%s why=\"%s\" bytes=%zu", s->key,
                 why, len);
    s->stdin_dropped += len;
    s->stdin_lost_at = ev_now(s->hub->loop);
}

/* Input went through. While losing, that may be only a slip under the upstream's 1 MiB while
 * the container still does not read (the kernel's buffers on the way take a little more now
 * and then): losing is over once STDIN_LOSS_QUIET_S have passed without a loss. So a client
 * holding the backlog at the edge costs two lines per session per that time, at most. */
static void stdin_taken(struct session *s, size_t len)
{
    s->hub->m.stdin_bytes += len;
    if (s->stdin_dropped == 0 || ev_now(s->hub->loop) - s->stdin_lost_at < STDIN_LOSS_QUIET_S)
        return;
    telo_log(TELO_LOG_INFO, "attach input taken again", "session=%s dropped_bytes=%llu", s->key,
             s->stdin_dropped);
    s->stdin_dropped = 0;
}

static void write_stdin(struct session *s, const void *data, size_t len)
{
    s->hub->m.stdin_writes++;
    if (kube_attach_write(s->up, data, len) == 0)
        stdin_taken(s, len);
    else /* more than 1 MiB of input the container has not taken: a paste too far */
        stdin_lost(s, len, "the container is not reading");
}

/* Sends the input waiting for the upstream, when it is open. */
static void send_stdin(struct session *s)
{
    ev_timer_stop(s->hub->loop, &s->typed);
    if (s->state != S_LIVE || s->pending_stdin.len == 0)
        return;
    write_stdin(s, s->pending_stdin.data, s->pending_stdin.len);
    buf_reset(&s->pending_stdin);
}

static void typed_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    send_stdin(w->data);
}

/* Input goes to the container in one upstream message for what a turn of client reads brought:
 * a message each was a masked frame each for the API server and the kubelet to carry too, so a
 * client typing one byte a message (or many clients at once) slowed every session's attach on
 * the node. Typed before the upstream opened (the first client types at once) or while it
 * reconnects, it waits in the same bounded buffer rather than being lost. */
static void session_stdin(struct session *s, const uint8_t *data, size_t len)
{
    if (s->state == S_ENDED || len == 0)
        return;
    if (s->state == S_LIVE) {
        if (s->pending_stdin.len + len > MAX_PENDING_STDIN)
            send_stdin(s);
        if (len > MAX_PENDING_STDIN) { /* a paste larger than the buffer goes up as it came */
            write_stdin(s, data, len);
            return;
        }
        if (!ev_is_active(&s->typed))
            ev_timer_start(s->hub->loop, &s->typed);
    }
    int rc = buf_append(&s->pending_stdin, data, len);
    if (rc == -TELO_ETOOBIG)
        stdin_lost(s, len, "the upstream is not open and 64 KiB of input waits");
    else if (rc != 0)
        stdin_lost(s, len, "out of memory");
}

static void client_message(struct ws_conn *ws, int opcode, const uint8_t *data, size_t len,
                           void *ud)
{
    (void)ws;
    struct client *c = ud;
    struct session *s = c->s;
    if (c->proto == GW_PROTO_IO_V1) {
        /* Binary frames are stdin and nothing else: what a user types or pastes (a resize's
         * JSON, {"type":null}) reaches the terminal as bytes. Control messages are text frames. */
        struct gw_io_control ctl;
        if (opcode == WS_OP_BINARY)
            session_stdin(s, data, len);
        else if (opcode == WS_OP_TEXT && gw_parse_io_control(data, len, &ctl) == 0 &&
                 ctl.kind == GW_IO_RESIZE)
            session_resize(s, ctl.cols, ctl.rows);
        return;
    }
    /* The channel protocols are binary only; client-go treats text as an error, we ignore it. */
    if (opcode != WS_OP_BINARY || len == 0)
        return;
    struct kube_term_size size;
    switch (data[0]) {
    case KUBE_CHANNEL_STDIN:
        session_stdin(s, data + 1, len - 1);
        break;
    case KUBE_CHANNEL_RESIZE:
        if (kube_resize_parse(data + 1, len - 1, &size, NULL) > 0)
            session_resize(s, gw_clamp_dim(size.width), gw_clamp_dim(size.height));
        break;
    default:
        /* 255 (close stdin): one viewer's EOF must not close the others' stdin. Unknown channels
         * are discarded as the Kubernetes server does. */
        break;
    }
}

static void client_drain(struct ws_conn *ws, void *ud)
{
    (void)ws;
    pump(ud);
}

static void client_closed(struct ws_conn *ws, int code, const char *reason, void *ud)
{
    (void)ws;
    struct client *c = ud;
    struct session *s = c->s;
    telo_log(TELO_LOG_INFO, "attach client left", "session=%s subject=\"%s\" code=%d reason=\"%s\"",
             s->key, c->subject, code, reason);
    client_free(c);
    if (s->replaced) {
        if (s->clients == NULL)
            session_free(s);
        return;
    }
    if (s->clients == NULL)
        s->alone_since = ev_now(s->hub->loop);
    /* An upstream nobody reads would hold its pods/attach and ring for the session's life. */
    if (s->clients == NULL && s->state != S_ENDED) {
        ev_timer_stop(s->hub->loop, &s->expire);
        ev_timer_set(&s->expire, s->hub->opts.idle_keep_s, 0.);
        ev_timer_start(s->hub->loop, &s->expire);
    }
}

/* ---- the upstream ------------------------------------------------------------------------- */

static void open_upstream(struct session *s);
static void check_pod(struct session *s, int reopen);
static void fan_out(struct session *s);

static void end_session(struct session *s, int exit_code, const char *message)
{
    struct gw_hub *h = s->hub;
    s->state = S_ENDED;
    s->ended_at = ev_now(h->loop);
    s->exit_code = exit_code;
    snprintf(s->end_message, sizeof(s->end_message), "%s", message ? message : "");
    kube_attach_free(s->up);
    s->up = NULL;
    kube_execcred_wait_cancel(s->cred_wait);
    s->cred_wait = NULL;
    ev_timer_stop(h->loop, &s->retry);
    ev_timer_stop(h->loop, &s->resize);
    telo_log(TELO_LOG_INFO, "attach session ended", "session=%s exit_code=%d message=\"%s\"",
             s->key, exit_code, s->end_message);
    ev_timer_stop(h->loop, &s->expire); /* the idle timer, when nobody is attached */
    ev_timer_set(&s->expire, h->opts.ended_keep_s, 0.);
    ev_timer_start(h->loop, &s->expire);
    fan_out(s);
}

static void schedule_retry(struct session *s)
{
    s->state = S_WAITING;
    s->backoff = s->backoff <= 0 ? RETRY_MIN_S : s->backoff * 2;
    if (s->backoff > RETRY_MAX_S)
        s->backoff = RETRY_MAX_S;
    ev_timer_set(&s->retry, s->backoff, 0.);
    ev_timer_start(s->hub->loop, &s->retry);
}

/* The session container's state in pod: 1 terminated (exit code in *code), 0 still there, -1 the
 * pod ended without telling. */
static int container_ended(struct json_object *pod, int *code)
{
    struct json_object *status = jget_object(pod, "status");
    struct json_object *statuses = jget_array(status, "containerStatuses");
    for (size_t i = 0; statuses != NULL && i < json_object_array_length(statuses); i++) {
        struct json_object *cs = json_object_array_get_idx(statuses, i);
        if (!jget_string_is(cs, "name", SESSION_CONTAINER))
            continue;
        int64_t exit_code = 0;
        if (jget_int(jget(jget(cs, "state"), "terminated"), "exitCode", &exit_code) == 0) {
            *code = exit_code >= INT32_MIN && exit_code <= INT32_MAX ? (int)exit_code : -1;
            return 1;
        }
    }
    enum session_pod_phase phase = session_pod_phase_of(pod);
    if (phase == SESSION_POD_SUCCEEDED || phase == SESSION_POD_FAILED)
        return -1;
    return 0;
}

static void on_pod(const struct kube_result *res, void *ud)
{
    struct session *s = ud;
    s->pod_call = NULL;
    int code = -1;
    if (res->code == 404)
        return end_session(s, -1, "the session's pod is gone");
    if (res->rc != 0) {
        telo_log(TELO_LOG_WARN, "attach: cannot read the session pod", "session=%s error=\"%s\"",
                 s->key, res->err ? res->err->msg : "");
        return schedule_retry(s);
    }
    /* The pod's name is the session's name's: once the session is deleted and created again
     * (another uid), the pod of that name is the new session's, and attaching to it would give
     * the old session's clients the new one's terminal. Only the controller reference says. */
    if (session_child_owner(res->object, s->name, s->uid) != SESSION_OWNER_OWN)
        return end_session(s, -1,
                           "the session's pod is gone; the pod of its name is another session's");
    int ended = container_ended(res->object, &code);
    if (ended > 0)
        return end_session(s, code, NULL);
    if (ended < 0)
        return end_session(s, -1, "the session's pod ended without an exit code");
    if (s->reopen)
        open_upstream(s);
    else
        schedule_retry(s);
}

/* Reads the session's pod: whether its container ended (after the upstream closed), or, with
 * reopen, whether it is still the session's before the upstream is opened again (the backoff
 * since the last read leaves time for the session to be created again). */
static void check_pod(struct session *s, int reopen)
{
    struct kube_ref ref = {
        .version = "v1", .resource = "pods", .namespace = s->namespace, .name = s->pod};
    struct telo_err err = {0};
    s->state = S_CHECKING;
    s->reopen = reopen;
    s->pod_call = kube_rest_get(s->hub->t, &ref, on_pod, s, &err);
    if (s->pod_call == NULL)
        schedule_retry(s);
}

static void up_open(struct kube_attach *a, const char *protocol, void *ud)
{
    (void)a;
    (void)protocol;
    struct session *s = ud;
    s->state = S_LIVE;
    s->backoff = 0;
    s->hub->m.upstream_connects++;
    telo_log(TELO_LOG_INFO, "attach upstream open", "session=%s pod=%s", s->key, s->pod);
    if (s->width > 0 && kube_attach_resize(s->up, (unsigned)s->width, (unsigned)s->height) == 0)
        s->hub->m.resizes++;
    send_stdin(s);
}

static void fan_out(struct session *s)
{
    ev_timer_stop(s->hub->loop, &s->fan);
    s->unfanned = 0;
    for (struct client *c = s->clients, *next; c != NULL; c = next) {
        next = c->next;
        pump(c);
    }
}

static void fan_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    fan_out(w->data);
}

static void up_output(struct kube_attach *a, int channel, const unsigned char *data, size_t len,
                      void *ud)
{
    (void)a;
    (void)channel; /* stdout and stderr are one stream under a TTY */
    struct session *s = ud;
    /* In pieces of at most MIN_CLIENT_QUEUE: a client's queue then passes where it stops by less
     * than that (a chunk is sent whole), whatever size the API server's messages have. */
    for (size_t off = 0; off < len; off += MIN_CLIENT_QUEUE)
        gw_ring_append(s->ring, data + off,
                       len - off < MIN_CLIENT_QUEUE ? len - off : MIN_CLIENT_QUEUE);
    s->hub->m.bytes_in += len;
    /* The clients are pumped once for what a turn of upstream reads brought (the app's output
     * in many small messages is then one frame to each, not one each per message), and at once
     * past FAN_BATCH_BYTES, so a reader that keeps up never falls a ring behind. */
    s->unfanned += len;
    if (s->unfanned >= FAN_BATCH_BYTES)
        fan_out(s);
    else if (!ev_is_active(&s->fan))
        ev_timer_start(s->hub->loop, &s->fan);
}

static void up_end(struct kube_attach *a, const struct kube_attach_end *end, void *ud)
{
    struct session *s = ud;
    if (s->state != S_LIVE)
        s->hub->m.upstream_failures++;
    telo_log(end->http_status ? TELO_LOG_WARN : TELO_LOG_INFO, "attach upstream closed",
             "session=%s http_status=%ld close_code=%d error=\"%s\"", s->key, end->http_status,
             end->close_code, end->rc != 0 && end->err != NULL ? end->err->msg : "");
    kube_attach_free(a);
    s->up = NULL;
    /* Whether the container ended or the stream merely dropped, the pod says (an attach stream
     * carries no exit code). */
    check_pod(s, 0);
}

static void upstream_failed(struct session *s, const char *why)
{
    s->hub->m.upstream_failures++;
    telo_log(TELO_LOG_WARN, "attach upstream failed", "session=%s error=\"%s\"", s->key, why);
    schedule_retry(s);
}

/* Opens the attach stream with the credentials open_upstream made ready. */
static void attach_upstream(struct session *s)
{
    static const struct kube_attach_callbacks cbs = {
        .on_open = up_open, .on_output = up_output, .on_end = up_end};
    static const char *const protocols[] = {KUBE_CHANNEL_V5, NULL};
    struct gw_hub *h = s->hub;
    struct kube_config *cfg = kube_transport_config(h->t);
    struct telo_err err = {0};
    struct buf url;
    buf_init(&url, 4096);
    int rc = kube_attach_pod_url(cfg->server, s->namespace, s->pod, SESSION_CONTAINER, &url, &err);
    struct kube_attach_opts opts = {.url = url.data,
                                    .cfg = cfg,
                                    .protocols = protocols,
                                    .ping_interval_s = (int)h->opts.ping_interval_s,
                                    .user_agent = GW_USER_AGENT};
    s->up = rc == 0 ? kube_attach_open(h->loop, &opts, &cbs, s, &err) : NULL;
    buf_release(&url);
    if (s->up == NULL)
        upstream_failed(s, rc == 0 || err.msg[0] != '\0' ? err.msg
                                                         : "out of memory building the attach URL");
}

static void credentials_ready(int rc, const struct telo_err *err, void *ud)
{
    struct session *s = ud;
    s->cred_wait = NULL;
    if (rc < 0)
        upstream_failed(s, err->msg);
    else
        attach_upstream(s);
}

static void open_upstream(struct session *s)
{
    struct gw_hub *h = s->hub;
    struct telo_err err = {0};
    s->state = S_CONNECTING;
    /* An exec plugin runs as a child watched by the loop, not inside kube_attach_open (which
     * would block every session for as long as it runs): the open waits for its credential. */
    int rc = kube_config_fetch_credentials(kube_transport_config(h->t), h->loop, credentials_ready,
                                           s, &s->cred_wait, &err);
    if (rc < 0)
        upstream_failed(s, err.msg);
    else if (rc == 0)
        attach_upstream(s);
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    check_pod(w->data, 1);
}

static void send_resize(struct session *s)
{
    s->resize_sent_at = ev_now(s->hub->loop);
    if (s->state == S_LIVE &&
        kube_attach_resize(s->up, (unsigned)s->width, (unsigned)s->height) == 0)
        s->hub->m.resizes++;
}

static void resize_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    send_resize(w->data);
}

/* The latest size wins; at most one resize per throttle interval reaches the container, and the
 * last one asked always does. */
static void session_resize(struct session *s, int width, int height)
{
    struct gw_hub *h = s->hub;
    s->width = width;
    s->height = height;
    if (ev_is_active(&s->resize))
        return;
    double wait = s->resize_sent_at + h->opts.resize_throttle_s - ev_now(h->loop);
    if (wait <= 0) {
        send_resize(s);
        return;
    }
    ev_timer_set(&s->resize, wait, 0.);
    ev_timer_start(h->loop, &s->resize);
}

static void expire_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct session *s = w->data;
    if (s->state != S_ENDED) {
        s->hub->m.idle_closes++;
        telo_log(TELO_LOG_INFO, "attach session idle: upstream closed, scrollback dropped",
                 "session=%s idle_s=%g", s->key, s->hub->opts.idle_keep_s);
    }
    session_free(s);
}

/* ---- sessions ----------------------------------------------------------------------------- */

/* Ends everything of s but its clients: the upstream, the pod read, the timers. */
static void session_stop(struct session *s)
{
    struct gw_hub *h = s->hub;
    kube_call_cancel(s->pod_call);
    s->pod_call = NULL;
    kube_attach_free(s->up);
    s->up = NULL;
    kube_execcred_wait_cancel(s->cred_wait);
    s->cred_wait = NULL;
    ev_timer_stop(h->loop, &s->retry);
    ev_timer_stop(h->loop, &s->resize);
    ev_timer_stop(h->loop, &s->expire);
    ev_timer_stop(h->loop, &s->fan);
    ev_timer_stop(h->loop, &s->typed);
}

static void session_free(struct session *s)
{
    struct gw_hub *h = s->hub;
    for (struct client *c = s->clients, *next; c != NULL; c = next) {
        next = c->next;
        client_free(c);
    }
    session_stop(s);
    if (!s->replaced) {
        strmap_remove(h->sessions, s->key);
    } else {
        if (s->prev != NULL)
            s->prev->next = s->next;
        else
            h->replaced = s->next;
        if (s->next != NULL)
            s->next->prev = s->prev;
    }
    gw_ring_free(s->ring);
    buf_release(&s->pending_stdin);
    h->m.sessions--;
    free(s);
}

/* Another TeloSession of s's name (another uid) takes its place: s leaves the map at once with its
 * upstream and scrollback, and each client it has not finished is told (410 Gone) and closed, so
 * nothing of one session reaches the clients of the next. s is freed once its last client has
 * gone; s may be gone on return. */
static void session_replace(struct session *s, const char *by_uid)
{
    struct gw_hub *h = s->hub;
    telo_log(TELO_LOG_INFO,
             "attach session replaced by another of its name: upstream closed, "
             "scrollback dropped",
             "session=%s uid=%s new_uid=%s", s->key, s->uid, by_uid);
    session_stop(s);
    strmap_remove(h->sessions, s->key);
    s->replaced = 1;
    s->state = S_ENDED; /* what its closing clients still send goes nowhere */
    s->next = h->replaced;
    if (h->replaced != NULL)
        h->replaced->prev = s;
    h->replaced = s;
    if (s->clients == NULL)
        return session_free(s);
    int code;
    const char *reason, *message;
    gw_replaced_refusal(&code, &reason, &message);
    /* A close that fails at once frees its client, and the last one s: s is not read after. */
    for (struct client *c = s->clients, *next; c != NULL; c = next) {
        next = c->next;
        if (!c->finished)
            refuse_client(c, code, reason, message);
    }
}

static struct session *session_new(struct gw_hub *h, const struct gw_attach *req)
{
    struct session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->ring = gw_ring_new(h->opts.ring_bytes, 0);
    snprintf(s->key, sizeof(s->key), "%s/%s", req->namespace, req->name);
    if (s->ring == NULL || strmap_put(h->sessions, s->key, s) != 0) {
        gw_ring_free(s->ring);
        free(s);
        return NULL;
    }
    s->hub = h;
    snprintf(s->namespace, sizeof(s->namespace), "%s", req->namespace);
    snprintf(s->name, sizeof(s->name), "%s", req->name);
    snprintf(s->pod, sizeof(s->pod), "%s", req->pod ? req->pod : "");
    snprintf(s->uid, sizeof(s->uid), "%s", req->uid ? req->uid : "");
    s->exit_code = -1;
    buf_init(&s->pending_stdin, MAX_PENDING_STDIN);
    ev_timer_init(&s->retry, retry_cb, 0., 0.);
    ev_timer_init(&s->resize, resize_cb, 0., 0.);
    ev_timer_init(&s->expire, expire_cb, 0., 0.);
    ev_timer_init(&s->fan, fan_cb, 0., 0.);
    ev_timer_init(&s->typed, typed_cb, 0., 0.);
    s->retry.data = s->resize.data = s->expire.data = s->fan.data = s->typed.data = s;
    h->m.sessions++;
    return s;
}

static int terminal_phase(const char *phase)
{
    return session_phase_is_terminal(session_phase_parse(phase));
}

static int running(const struct gw_attach *req)
{
    return session_phase_parse(req->phase) == SESSION_PHASE_RUNNING && req->pod != NULL &&
           req->pod[0] != '\0';
}

/* Whether req is about another TeloSession than s: one deleted and created again under its name
 * (a new uid) is another session, whose clients must get nothing of the old one's. */
static int other_session(const struct session *s, const struct gw_attach *req)
{
    return strcmp(s->uid, req->uid ? req->uid : "") != 0;
}

/* Whether req is about a newer run of s's TeloSession than the ended s holds: another pod, or
 * one that became Ready after s ended (a stopped session started again gets a pod of the same
 * name). A Running status older than the end is only the status catching up with it. Ready's
 * time stamp has whole seconds, and no pod starts within the second its predecessor ended,
 * hence the floor. */
static int new_run(const struct session *s, const struct gw_attach *req)
{
    if (s->state != S_ENDED || !running(req))
        return 0;
    return strcmp(s->pod, req->pod) != 0 || req->ready_since >= floor(s->ended_at);
}

/* The session a new one may take the place of when a cap is reached: of those without a client
 * (in namespace, or in any when it is NULL), the one alone the longest (its scrollback and
 * upstream would go at the idle or ended keep time anyway); NULL when every one has a client.
 * *held counts the sessions looked at. */
static struct session *make_room_from(const struct gw_hub *h, const char *namespace, size_t *held)
{
    struct session *oldest = NULL;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    *held = 0;
    while (strmap_next(h->sessions, &it, &key, &v)) {
        struct session *s = v;
        if (namespace != NULL && strcmp(s->namespace, namespace) != 0)
            continue;
        (*held)++;
        if (s->clients == NULL && (oldest == NULL || s->alone_since < oldest->alone_since))
            oldest = s;
    }
    return oldest;
}

/* Whether namespace holds its cap of sessions, each with a client: a new one would be refused. */
static int namespace_full(const struct gw_hub *h, const char *namespace)
{
    size_t held;
    struct session *idle = make_room_from(h, namespace, &held);
    return held >= h->opts.max_sessions_per_namespace && idle == NULL;
}

static const char full_why[] = "the gateway holds as many sessions as it may (--max-sessions), "
                               "each with a client attached; try again later";
static const char namespace_full_why[] =
    "the gateway holds as many sessions of this namespace as it may "
    "(--max-sessions-per-namespace), each with a client attached; detach from one, or try again "
    "later";

int gw_hub_check(const struct gw_hub *h, const struct gw_attach *req, const char **why)
{
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", req->namespace, req->name);
    const struct session *s = strmap_get(h->sessions, key);
    if (s != NULL && !other_session(s, req))
        return 0;
    /* Held for another session of the name: this one is judged as if nothing were held, but
     * takes that one's place rather than a new one (gw_hub_attach replaces it). */
    if (!running(req) && !terminal_phase(req->phase)) {
        *why = "the session is not running yet; attach once its phase is Running";
        return 409;
    }
    if (s != NULL)
        return 0;
    size_t held;
    if (strmap_len(h->sessions) >= h->opts.max_sessions && make_room_from(h, NULL, &held) == NULL) {
        *why = full_why;
        return 503;
    }
    if (namespace_full(h, req->namespace)) {
        *why = namespace_full_why;
        return 429;
    }
    return 0;
}

/* Drops victim, held by a session that wanted its place. */
static void evict(struct gw_hub *h, struct session *victim, const char *for_key, const char *cap,
                  size_t limit)
{
    h->m.evictions++;
    telo_log(TELO_LOG_INFO,
             "attach session dropped to make room: upstream closed, scrollback dropped",
             "session=%s for=%s %s=%zu alone_s=%.0f", victim->key, for_key, cap, limit,
             ev_now(h->loop) - victim->alone_since);
    session_free(victim);
}

/* Closes a socket that never became a client. */
static void drop_socket(int fd, const struct ws_conn_io *io)
{
    if (io != NULL && io->close != NULL)
        io->close(io->io_ud);
    close(fd);
}

int gw_hub_attach(struct gw_hub *h, int fd, const struct ws_conn_io *io, const void *extra,
                  size_t extra_len, const struct gw_attach *req, struct telo_err *err)
{
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", req->namespace, req->name);
    struct session *s = strmap_get(h->sessions, key);
    if (s != NULL && other_session(s, req)) {
        session_replace(s, req->uid ? req->uid : "");
        s = NULL;
    } else if (s != NULL && new_run(s, req)) {
        session_free(s);
        s = NULL;
    }
    int fresh = s == NULL;
    /* gw_hub_check found room, but another client may have taken it since. */
    size_t held;
    struct session *victim = fresh ? make_room_from(h, req->namespace, &held) : NULL;
    if (fresh && held >= h->opts.max_sessions_per_namespace) {
        if (victim == NULL) {
            drop_socket(fd, io);
            return telo_err_set(err, TELO_ETOOBIG, "attach: %s", namespace_full_why);
        }
        evict(h, victim, key, "max_sessions_per_namespace", h->opts.max_sessions_per_namespace);
    }
    if (fresh && strmap_len(h->sessions) >= h->opts.max_sessions) {
        if ((victim = make_room_from(h, NULL, &held)) == NULL) {
            drop_socket(fd, io);
            return telo_err_set(err, TELO_ETOOBIG, "attach: %s", full_why);
        }
        evict(h, victim, key, "max_sessions", h->opts.max_sessions);
    }
    if (fresh && (s = session_new(h, req)) == NULL) {
        drop_socket(fd, io);
        return telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    }
    struct client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        drop_socket(fd, io);
        if (fresh)
            session_free(s);
        return telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    }
    c->s = s;
    c->proto = req->proto;
    snprintf(c->subject, sizeof(c->subject), "%s", req->subject ? req->subject : "");
    if (req->token != NULL && h->opts.auth != NULL && (c->token = strdup(req->token)) == NULL) {
        free(c);
        drop_socket(fd, io);
        if (fresh)
            session_free(s);
        return telo_err_set(err, TELO_ENOMEM, "attach: out of memory");
    }
    /* Spread: clients that attached together are not all re-checked in the same moment. */
    ev_timer_init(&c->reauth, reauth_cb, util_spread_first(h->opts.reauth_s), h->opts.reauth_s);
    c->reauth.data = c;
    struct ws_conn_opts opts = {.max_message = MAX_CLIENT_MSG,
                                .max_text = GW_CONTROL_MAX,
                                .max_queued = h->opts.client_queue_bytes * 2,
                                .low_water = h->opts.client_queue_bytes / 2,
                                .ping_interval_s = h->opts.ping_interval_s};
    struct ws_conn_callbacks cbs = {
        .on_message = client_message, .on_drain = client_drain, .on_closed = client_closed};
    /* A plain socket's io points at the server's copy of fd; the connection reads its own. */
    c->ws =
        ws_conn_new(h->loop, fd, io != NULL && io->close != NULL ? io : NULL, &opts, &cbs, c, err);
    if (c->ws == NULL) {
        if (c->token != NULL) {
            OPENSSL_cleanse(c->token, strlen(c->token));
            free(c->token);
        }
        free(c);
        if (fresh)
            session_free(s);
        return -TELO_ENOMEM;
    }
    c->next = s->clients;
    if (s->clients != NULL)
        s->clients->prev = c;
    s->clients = c;
    /* Idle no more; stopped only now, so a client that could not be made leaves its session's
     * idle expiry in place (else the session and its upstream stayed for the gateway's life). */
    if (!fresh && s->state != S_ENDED)
        ev_timer_stop(h->loop, &s->expire);
    h->m.clients++;
    h->m.clients_total++;
    if (c->token != NULL)
        ev_timer_start(h->loop, &c->reauth);
    telo_log(TELO_LOG_INFO, "attach client joined", "session=%s subject=\"%s\" protocol=%s", s->key,
             c->subject, gw_proto_name(c->proto));

    uint64_t first = gw_ring_first(s->ring), next = gw_ring_next(s->ring);
    c->cursor = first;
    if (c->proto == GW_PROTO_IO_V1) {
        char text[64];
        snprintf(text, sizeof(text), "{\"type\":\"seq\",\"seq\":%u}", (unsigned)(next - 1));
        send_text(c, text, 1);
        if (req->has_last_seq) {
            uint64_t last = gw_seq_from_wire(req->last_seq, next - 1);
            c->cursor = last + 1 < next ? last + 1 : next;
            if (c->cursor < first)
                send_gap(c, first);
        }
    } else {
        /* The hello every Kubernetes streaming server sends: an empty message on stdout. */
        static const uint8_t hello = KUBE_CHANNEL_STDOUT;
        ws_conn_send(c->ws, WS_OP_BINARY, &hello, 1, NULL, 0, 1);
    }
    if (fresh) {
        if (terminal_phase(req->phase) || !running(req)) {
            end_session(s, req->exit_code, "the session has ended");
        } else {
            open_upstream(s);
        }
    }
    if (ws_conn_feed(c->ws, extra, extra_len) != 0)
        return 0; /* the client left at once; client_closed cleaned up */
    pump(c);
    return 0;
}

struct gw_hub *gw_hub_new(struct ev_loop *loop, struct kube_transport *t,
                          const struct gw_hub_opts *opts)
{
    struct gw_hub *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->loop = loop;
    h->t = t;
    if (opts != NULL)
        h->opts = *opts;
    if (h->opts.ring_bytes == 0)
        h->opts.ring_bytes = (size_t)1 << 20;
    if (h->opts.client_queue_bytes == 0)
        h->opts.client_queue_bytes = (size_t)256 << 10;
    if (h->opts.client_queue_total == 0)
        h->opts.client_queue_total = (size_t)32 << 20;
    if (h->opts.max_sessions == 0)
        h->opts.max_sessions = 128;
    if (h->opts.max_sessions_per_namespace == 0)
        h->opts.max_sessions_per_namespace = gw_hub_namespace_share(h->opts.max_sessions);
    if (h->opts.ping_interval_s <= 0)
        h->opts.ping_interval_s = 20;
    if (h->opts.resize_throttle_s <= 0)
        h->opts.resize_throttle_s = 0.05;
    if (h->opts.ended_keep_s <= 0)
        h->opts.ended_keep_s = 300;
    if (h->opts.idle_keep_s <= 0)
        h->opts.idle_keep_s = 3600;
    if (h->opts.reauth_s <= 0)
        h->opts.reauth_s = 60;
    h->sessions = strmap_new();
    if (h->sessions == NULL) {
        free(h);
        return NULL;
    }
    return h;
}

void gw_hub_free(struct gw_hub *h)
{
    if (h == NULL)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(h->sessions, &it, &key, &v))
        session_free(v);
    for (struct session *s = h->replaced, *next; s != NULL; s = next) {
        next = s->next;
        session_free(s);
    }
    strmap_free(h->sessions);
    free(h);
}

const struct gw_hub_metrics *gw_hub_metrics(const struct gw_hub *h)
{
    return &h->m;
}

size_t gw_hub_queued_bytes(const struct gw_hub *h)
{
    size_t n = 0;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(h->sessions, &it, &key, &v))
        for (const struct client *c = ((const struct session *)v)->clients; c != NULL; c = c->next)
            n += ws_conn_queued(c->ws);
    return n;
}

size_t gw_hub_namespace_share(size_t cap)
{
    return cap < 8 ? cap : cap / 4;
}

size_t gw_hub_namespace_clients(const struct gw_hub *h, const char *namespace)
{
    size_t n = 0;
    struct strmap_iter it = {0};
    const char *key;
    void *v;
    while (strmap_next(h->sessions, &it, &key, &v)) {
        const struct session *s = v;
        if (strcmp(s->namespace, namespace) != 0)
            continue;
        for (const struct client *c = s->clients; c != NULL; c = c->next)
            n++;
    }
    return n;
}

size_t gw_hub_session_clients(const struct gw_hub *h, const char *namespace, const char *name)
{
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", namespace, name);
    const struct session *s = strmap_get(h->sessions, key);
    size_t n = 0;
    for (const struct client *c = s != NULL ? s->clients : NULL; c != NULL; c = c->next)
        n++;
    return n;
}

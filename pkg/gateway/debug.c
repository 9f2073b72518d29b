/* The debug stream relay: a client's server-sent-event stream fed from the session pod's
 * inspector (GET http://<podIP>:9230/events), event frames only, reconnecting, with heartbeats. */
#include "gateway/debug.h"

#include "gateway/auth.h"
#include "gateway/proto.h"
#include "gateway/sse.h"
#include "kube/rest.h"
#include "session/owner.h"
#include "session/phase.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/jitter.h"
#include "util/log.h"
#include "ws/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <json.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define OUT_MAX ((size_t)1 << 20) /* a client's queue; past it, frames are lost */
/* The inspector is not read while the client has this much to take: TCP then holds the app back
 * instead of us parsing what we would drop. Half of OUT_MAX, so what one more read completes (at
 * most an EVENT_MAX event and the frames of UP_READ_CHUNK bytes) still fits. */
#define OUT_PAUSE        (OUT_MAX / 2)
#define EVENT_MAX        ((size_t)256 << 10)
#define HEAD_MAX         8192
#define RECONNECT_S      0.5  /* as the reference's relayDebugStream */
#define RECONNECT_MAX_S  10.0 /* doubling from RECONNECT_S while the inspector stays away */
#define REFUSED_LINGER_S 5.0  /* a refused client's last event, then the close in any case */
/* From connect to the answer's head: an inspector that accepts and never answers would freeze the
 * stream, with no reconnect ever tried. The app's inspector answers at once when it is alive. */
#define ANSWER_TIMEOUT_S 10.0
/* A client that took none of its queue for this long has stopped reading (a suspended laptop, a
 * hostile client): it would hold one of the few debug slots of its namespace for good. Long enough
 * for a slow link to take a full queue's bytes. */
#define STALL_TIMEOUT_S 60.0
#define UP_READ_CHUNK   16384
#define UP_READ_ROUNDS  16 /* reads per readiness event, as ws/conn.c */
/* A turn ends once this many events were relayed: the reads bound its bytes, and an app writing
 * tiny events (data:{}) gets about 1,800 to a read, each parsed and framed. */
#define UP_TURN_EVENTS 256

enum up_state { UP_IDLE, UP_CONNECTING, UP_HEAD, UP_BODY };

struct relay {
    struct gw_relays *set;
    struct relay *prev, *next;
    char session[300];
    char pod_ip[64];
    int port;

    int cfd;               /* the client */
    struct ws_conn_io cio; /* its TLS stream; send NULL: plain */
    ev_io cread, cwrite;
    struct buf out; /* what the client has not taken yet, from out_off */
    size_t out_off;
    unsigned long long next_id;
    unsigned long dropped;

    int ufd; /* the inspector, -1 when not connected */
    enum up_state ustate;
    ev_io uio;
    char head[HEAD_MAX + 1];
    size_t head_len;
    struct gw_sse_parser sse;
    unsigned turn_events; /* relayed in this turn of reads (UP_TURN_EVENTS) */
    ev_timer retry, heartbeat;
    ev_timer answer; /* the inspector's head is due (ANSWER_TIMEOUT_S) */
    ev_timer stall;  /* the client has taken nothing of its queue since (STALL_TIMEOUT_S) */
    int up_logged;   /* the inspector's absence was logged once */

    char namespace[254], name[254];
    char uid[64];               /* the TeloSession admitted: a successor is another stream */
    char pod[254];              /* status.podName: read before each connect */
    struct kube_call *pod_call; /* that read, in flight */
    double backoff;             /* until the next reconnect while the inspector stays away */
    int reconnect;              /* the inspector is away: connect once the session is read */
    char *token;                /* the admitted credential; NULL: never re-checked */
    ev_timer reauth;            /* when to check it again */
    struct gw_admission *check; /* a re-authorization in flight */
    int refused;                /* the client was refused: closing once its queue drains */
};

struct gw_relays {
    struct ev_loop *loop;
    struct kube_transport *t; /* NULL: relays without a client's session, never checked */
    double heartbeat_s;
    struct relay *list;
    size_t count;
    unsigned long frames;
    struct gw_auth *auth;
    double reauth_s;
    double answer_s, stall_s;
    unsigned long stalled;
};

static void relay_free(struct relay *rl)
{
    struct gw_relays *set = rl->set;
    ev_io_stop(set->loop, &rl->cread);
    ev_io_stop(set->loop, &rl->cwrite);
    ev_io_stop(set->loop, &rl->uio);
    ev_timer_stop(set->loop, &rl->retry);
    ev_timer_stop(set->loop, &rl->heartbeat);
    ev_timer_stop(set->loop, &rl->reauth);
    ev_timer_stop(set->loop, &rl->answer);
    ev_timer_stop(set->loop, &rl->stall);
    gw_admission_cancel(rl->check);
    kube_call_cancel(rl->pod_call);
    if (rl->token != NULL) {
        OPENSSL_cleanse(rl->token, strlen(rl->token));
        free(rl->token);
    }
    if (rl->ufd >= 0)
        close(rl->ufd);
    if (rl->cio.close != NULL)
        rl->cio.close(rl->cio.io_ud);
    close(rl->cfd);
    buf_release(&rl->out);
    gw_sse_release(&rl->sse);
    if (rl->prev != NULL)
        rl->prev->next = rl->next;
    else
        set->list = rl->next;
    if (rl->next != NULL)
        rl->next->prev = rl->prev;
    set->count--;
    free(rl);
}

/* Whether the client is far enough behind that the inspector must wait for it. */
static int client_behind(const struct relay *rl)
{
    return rl->out.len - rl->out_off >= OUT_PAUSE;
}

/* Reads the inspector again once the client caught up (up_cb stopped it while it was behind). */
static void resume_inspector(struct relay *rl)
{
    if (!rl->refused && rl->ufd >= 0 && (rl->ustate == UP_HEAD || rl->ustate == UP_BODY) &&
        !client_behind(rl))
        ev_io_start(rl->set->loop, &rl->uio);
}

/* Writes what the client takes. Returns 0, or -1 when the client is gone. The stall deadline
 * runs while bytes wait, from the last write that took any. */
static int flush_client(struct relay *rl)
{
    int progress = 0;
    while (rl->out_off < rl->out.len) {
        const char *p = rl->out.data + rl->out_off;
        size_t len = rl->out.len - rl->out_off;
        ssize_t n = rl->cio.send != NULL ? rl->cio.send(rl->cio.io_ud, p, len)
                                         : send(rl->cfd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            rl->out_off += (size_t)n;
            progress = 1;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ev_io_start(rl->set->loop, &rl->cwrite);
            if (progress || !ev_is_active(&rl->stall))
                ev_timer_again(rl->set->loop, &rl->stall);
            resume_inspector(rl);
            return 0;
        }
        return -1;
    }
    buf_reset(&rl->out);
    rl->out_off = 0;
    ev_io_stop(rl->set->loop, &rl->cwrite);
    ev_timer_stop(rl->set->loop, &rl->stall);
    resume_inspector(rl);
    return 0;
}

static void on_event(const char *event, const char *data, size_t len, void *ud)
{
    (void)event;
    struct relay *rl = ud;
    rl->turn_events++;
    if (rl->out_off > 0 && rl->out_off == rl->out.len) {
        buf_reset(&rl->out);
        rl->out_off = 0;
    }
    int rc = gw_sse_debug_frame(&rl->out, rl->next_id, data, len);
    if (rc == 1) {
        rl->next_id++;
        rl->set->frames++;
    } else if (rc < 0) {
        rl->dropped++; /* the client is more than OUT_MAX behind */
    }
}

static void up_close(struct relay *rl)
{
    ev_io_stop(rl->set->loop, &rl->uio);
    ev_timer_stop(rl->set->loop, &rl->answer);
    if (rl->ufd >= 0)
        close(rl->ufd);
    rl->ufd = -1;
    rl->ustate = UP_IDLE;
    rl->head_len = 0;
    gw_sse_release(&rl->sse);
    gw_sse_init(&rl->sse, EVENT_MAX);
    rl->backoff = rl->backoff < RECONNECT_S ? RECONNECT_S : rl->backoff * 2;
    if (rl->backoff > RECONNECT_MAX_S)
        rl->backoff = RECONNECT_MAX_S;
    ev_timer_set(&rl->retry, rl->backoff, 0.);
    ev_timer_start(rl->set->loop, &rl->retry);
}

static void up_fail(struct relay *rl, const char *why)
{
    if (!rl->up_logged)
        telo_log(TELO_LOG_INFO, "debug relay: inspector not answering, retrying",
                 "session=%s address=%s:%d why=\"%s\"", rl->session, rl->pod_ip, rl->port, why);
    rl->up_logged = 1;
    up_close(rl);
}

/* Bytes of the inspector's body: parsed, relayed, flushed. Returns -1 when the client is gone. */
static int up_body(struct relay *rl, const char *data, size_t len)
{
    gw_sse_feed(&rl->sse, data, len, on_event, rl);
    return flush_client(rl);
}

static void up_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *rl = w->data;
    if (rl->ustate == UP_CONNECTING) {
        int soerr = 0;
        socklen_t slen = sizeof(soerr);
        if (getsockopt(rl->ufd, SOL_SOCKET, SO_ERROR, &soerr, &slen) != 0 || soerr != 0)
            return up_fail(rl, strerror(soerr ? soerr : errno));
        char req[256];
        int n = snprintf(req, sizeof(req),
                         "GET /events HTTP/1.0\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n"
                         "User-Agent: telo-gateway/" TELO_VERSION "\r\n\r\n",
                         rl->pod_ip, rl->port);
        /* HTTP/1.0 so the inspector streams the body as is, without chunked encoding. A fresh
         * socket's buffer takes these bytes at once. */
        if (send(rl->ufd, req, (size_t)n, MSG_NOSIGNAL) != n)
            return up_fail(rl, "sending the request failed");
        rl->ustate = UP_HEAD;
        ev_io_stop(rl->set->loop, &rl->uio);
        ev_io_set(&rl->uio, rl->ufd, EV_READ);
        ev_io_start(rl->set->loop, &rl->uio);
        return;
    }
    char chunk[UP_READ_CHUNK];
    /* An app that streams faster than we parse gets a few reads, not the loop: the watcher is
     * level-triggered, so it comes back after the other tenants' watchers and timers. */
    rl->turn_events = 0;
    for (int round = 0; round < UP_READ_ROUNDS && rl->turn_events < UP_TURN_EVENTS; round++) {
        if (client_behind(rl)) {
            ev_io_stop(rl->set->loop, &rl->uio); /* flush_client starts it again */
            return;
        }
        /* What the client took leaves room at the front: reclaim it before appending more. */
        if (rl->out_off > 0 && rl->out.len > OUT_PAUSE) {
            buf_consume(&rl->out, rl->out_off);
            rl->out_off = 0;
        }
        ssize_t n = read(rl->ufd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0)
            return up_fail(rl, n == 0 ? "the inspector closed the stream" : strerror(errno));
        if (rl->ustate == UP_BODY) {
            if (up_body(rl, chunk, (size_t)n) != 0)
                return relay_free(rl);
            continue;
        }
        size_t take = (size_t)n < HEAD_MAX - rl->head_len ? (size_t)n : HEAD_MAX - rl->head_len;
        memcpy(rl->head + rl->head_len, chunk, take);
        size_t searched = rl->head_len;
        rl->head_len += take;
        long end = ws_http_head_end(rl->head, rl->head_len, searched, HEAD_MAX);
        if (end < 0)
            return up_fail(rl, "answer head too long");
        if (end == 0)
            continue;
        struct ws_http_head h;
        size_t body_len = rl->head_len - (size_t)end;
        char body[HEAD_MAX];
        memcpy(body, rl->head + end, body_len);
        if (ws_http_parse_response(rl->head, (size_t)end, &h, NULL) != 0 || h.status != 200)
            return up_fail(rl, "the inspector did not answer 200");
        if (rl->up_logged)
            telo_log(TELO_LOG_INFO, "debug relay: inspector back", "session=%s", rl->session);
        rl->up_logged = 0;
        rl->backoff = 0;
        rl->ustate = UP_BODY;
        ev_timer_stop(rl->set->loop, &rl->answer);
        if (up_body(rl, body, body_len) != 0 ||
            ((size_t)n > take && up_body(rl, chunk + take, (size_t)n - take) != 0))
            return relay_free(rl);
    }
}

static void connect_inspector(struct relay *rl)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    socklen_t slen;
    if (inet_pton(AF_INET, rl->pod_ip, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)rl->port);
        slen = sizeof(*in);
    } else if (inet_pton(AF_INET6, rl->pod_ip, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)rl->port);
        slen = sizeof(*in6);
    } else {
        return up_fail(rl, "the pod IP is not an address");
    }
    rl->ufd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (rl->ufd < 0)
        return up_fail(rl, strerror(errno));
    if (connect(rl->ufd, (struct sockaddr *)&ss, slen) != 0 && errno != EINPROGRESS)
        return up_fail(rl, strerror(errno));
    rl->ustate = UP_CONNECTING;
    ev_io_init(&rl->uio, up_cb, rl->ufd, EV_WRITE);
    rl->uio.data = rl;
    ev_io_start(rl->set->loop, &rl->uio);
    ev_timer_set(&rl->answer, rl->set->answer_s, 0.);
    ev_timer_start(rl->set->loop, &rl->answer);
}

static void answer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    up_fail(w->data, "no answer in time");
}

static void stall_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *rl = w->data;
    telo_log(TELO_LOG_INFO, "debug relay: client stopped reading; closing",
             "session=%s queued=%zu stalled_s=%g", rl->session, rl->out.len - rl->out_off,
             rl->set->stall_s);
    rl->set->stalled++;
    relay_free(rl);
}

static void start_check(struct relay *rl);
static void up_connect(struct relay *rl);

/* The inspector is away. Its address is not trusted again unread: the session's pod may have
 * been replaced and the address given to another tenant's pod. The session is read again first
 * (with the client's credential, as a re-authorization), and the stream follows its pod. */
static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *rl = w->data;
    if (rl->refused)
        return relay_free(rl); /* its last event had REFUSED_LINGER_S to go */
    if (rl->token == NULL || rl->set->auth == NULL)
        return up_connect(rl); /* never re-checked (no credential kept) */
    rl->reconnect = 1;
    start_check(rl);
}

static void heartbeat_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *rl = w->data;
    /* A comment line: ignored by EventSource, enough traffic for idle-timeout proxies. */
    if (buf_append_str(&rl->out, ": heartbeat\n\n") == 0 && flush_client(rl) != 0)
        relay_free(rl);
}

static void client_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *rl = w->data;
    char sink[512];
    ssize_t n = rl->cio.recv != NULL ? rl->cio.recv(rl->cio.io_ud, sink, sizeof(sink))
                                     : read(rl->cfd, sink, sizeof(sink));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        telo_log(TELO_LOG_INFO, "debug relay: client left", "session=%s frames=%llu dropped=%lu",
                 rl->session, rl->next_id - 1, rl->dropped);
        relay_free(rl);
    }
}

static void client_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *rl = w->data;
    if (flush_client(rl) != 0 || (rl->refused && rl->out_off == rl->out.len))
        relay_free(rl);
}

/* The client's credential no longer admits it: an error event, then the end of the stream. */
static void refuse_client(struct relay *rl, int code, const char *reason, const char *message)
{
    telo_log(TELO_LOG_INFO, "debug client refused on re-authorization",
             "session=%s code=%d why=\"%s\"", rl->session, code, message);
    /* Past a full queue the event is lost, never the close. */
    struct buf text;
    buf_init(&text, 1024);
    if (gw_error_frame_json(&text, code, reason, message) == 0)
        buf_printf(&rl->out, "event: error\ndata: %s\n\n", text.data);
    buf_release(&text);
    rl->refused = 1;
    kube_call_cancel(rl->pod_call);
    rl->pod_call = NULL;
    ev_io_stop(rl->set->loop, &rl->uio);
    ev_timer_stop(rl->set->loop, &rl->answer);
    if (rl->ufd >= 0)
        close(rl->ufd);
    rl->ufd = -1;
    ev_timer_stop(rl->set->loop, &rl->heartbeat);
    ev_timer_stop(rl->set->loop, &rl->reauth);
    /* A client that does not read keeps neither its slot nor its queue past the deadline. */
    ev_timer_stop(rl->set->loop, &rl->retry);
    ev_timer_set(&rl->retry, REFUSED_LINGER_S, 0.);
    ev_timer_start(rl->set->loop, &rl->retry);
    if (flush_client(rl) != 0 || rl->out_off == rl->out.len)
        relay_free(rl);
}

/* Why pod, read as the session's pod, must not be connected to at rl->pod_ip; NULL when it may.
 * The session's status is the operator's word, which lags (the operator is slow or down) and
 * outlives the pod it names: a pod deleted gives its address back to the node, which may give it
 * to another tenant's pod with an inspector before the status is rewritten. Only the pod itself,
 * read now, says whose the address is. */
static const char *pod_refusal(const struct relay *rl, const struct json_object *pod)
{
    if (session_child_owner(pod, rl->name, rl->uid) != SESSION_OWNER_OWN)
        return "the pod of the session's pod name is not the session's";
    if (jget(jget(pod, "metadata"), "deletionTimestamp") != NULL)
        return "the session's pod is being deleted";
    if (!jget_string_is(jget(pod, "status"), "podIP", rl->pod_ip))
        return "the session's pod has another address than its status names";
    return NULL;
}

static void on_pod(const struct kube_result *res, void *ud)
{
    struct relay *rl = ud;
    rl->pod_call = NULL;
    if (res->rc != 0)
        return up_fail(rl, res->code == 404   ? "the session's pod is gone"
                           : res->err != NULL ? res->err->msg
                                              : "the session's pod could not be read");
    /* The session's status named this pod while it ran, so a pod of its name controlled by
     * another TeloSession of its name is a successor's: the session was replaced. */
    if (session_child_owner(res->object, rl->name, rl->uid) == SESSION_OWNER_PREDECESSOR) {
        int code;
        const char *reason, *message;
        gw_replaced_refusal(&code, &reason, &message);
        return refuse_client(rl, code, reason, message);
    }
    const char *why = pod_refusal(rl, res->object);
    if (why != NULL)
        return up_fail(rl, why);
    connect_inspector(rl);
}

/* Connects to the inspector, the first time and after each absence, once the session's pod was
 * read and is at rl->pod_ip: a failed read or another pod is the inspector's absence (the
 * backoff, then the session and its pod are read again). */
static void up_connect(struct relay *rl)
{
    if (rl->set->t == NULL)
        return connect_inspector(rl);
    if (rl->pod[0] == '\0')
        return up_fail(rl, "the session names no pod");
    struct kube_ref ref = {
        .version = "v1", .resource = "pods", .namespace = rl->namespace, .name = rl->pod};
    struct telo_err err = {0};
    rl->pod_call = kube_rest_get(rl->set->t, &ref, on_pod, rl, &err);
    if (rl->pod_call == NULL)
        up_fail(rl, err.msg);
}

static void reauthorized(const struct gw_admitted *a, void *ud)
{
    struct relay *rl = ud;
    rl->check = NULL;
    int code;
    const char *reason, *message;
    if (gw_reauth_refusal(a, rl->uid, &code, &reason, &message))
        return refuse_client(rl, code, reason, message);
    if (a->verdict != GW_ALLOW) {
        telo_log(TELO_LOG_WARN, "debug re-authorization unavailable; the client stays",
                 "session=%s why=\"%s\"", rl->session, a->reason);
        if (rl->reconnect) /* the session could not be read: not the old address either */
            up_close(rl);
        return;
    }
    if (session_phase_parse(a->phase) != SESSION_PHASE_RUNNING || !a->pod_ip[0])
        return refuse_client(rl, 409, "Conflict",
                             "the session is not running; its debug stream ended: open it again "
                             "once it runs");
    snprintf(rl->pod, sizeof(rl->pod), "%s", a->pod);
    if (strcmp(a->pod_ip, rl->pod_ip) != 0) {
        telo_log(TELO_LOG_INFO, "debug relay follows the session's new pod",
                 "session=%s inspector=%s:%d", rl->session, a->pod_ip, rl->port);
        snprintf(rl->pod_ip, sizeof(rl->pod_ip), "%s", a->pod_ip);
        if (rl->ufd >= 0) { /* the old pod's stream: ended, and the new one read instead */
            rl->backoff = 0;
            up_close(rl);
            return;
        }
    }
    if (rl->reconnect) {
        rl->reconnect = 0;
        up_connect(rl);
    }
}

/* Reads the session again with the client's credential, unless a read is in flight already
 * (its answer serves both the periodic re-check and a reconnect). */
static void start_check(struct relay *rl)
{
    if (rl->check != NULL || rl->refused || rl->set->auth == NULL || rl->token == NULL)
        return;
    struct telo_err err = {0};
    rl->check =
        gw_reauthorize(rl->set->auth, rl->namespace, rl->name, rl->token, reauthorized, rl, &err);
    if (rl->check == NULL) {
        telo_log(TELO_LOG_WARN, "debug re-authorization not started", "session=%s error=\"%s\"",
                 rl->session, err.msg);
        if (rl->reconnect)
            up_close(rl); /* tried again after the backoff */
    }
}

static void reauth_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    start_check(w->data);
}

void gw_relays_set_auth(struct gw_relays *r, struct gw_auth *auth, double reauth_s)
{
    r->auth = auth;
    r->reauth_s = reauth_s > 0 ? reauth_s : 60;
}

struct gw_relays *gw_relays_new(struct ev_loop *loop, struct kube_transport *t, double heartbeat_s)
{
    struct gw_relays *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->loop = loop;
    r->t = t;
    r->heartbeat_s = heartbeat_s > 0 ? heartbeat_s : 20;
    r->answer_s = ANSWER_TIMEOUT_S;
    r->stall_s = STALL_TIMEOUT_S;
    return r;
}

void gw_relays_set_deadlines(struct gw_relays *r, double answer_s, double stall_s)
{
    r->answer_s = answer_s > 0 ? answer_s : ANSWER_TIMEOUT_S;
    r->stall_s = stall_s > 0 ? stall_s : STALL_TIMEOUT_S;
}

void gw_relays_free(struct gw_relays *r)
{
    if (r == NULL)
        return;
    for (struct relay *rl = r->list, *next; rl != NULL; rl = next) {
        next = rl->next;
        relay_free(rl);
    }
    free(r);
}

/* Closes a client that no relay took. */
static void close_client(int fd, const struct ws_conn_io *io)
{
    if (io != NULL && io->close != NULL)
        io->close(io->io_ud);
    close(fd);
}

int gw_relays_add(struct gw_relays *r, int fd, const struct ws_conn_io *io, const char *pod_ip,
                  int port, const char *session, const struct gw_relay_client *who,
                  struct telo_err *err)
{
    /* A session's pod is checked by its name and uid: a relay of a known client is never
     * connected unchecked, and one of nobody's cannot be checked. */
    if ((who != NULL) != (r->t != NULL)) {
        close_client(fd, io);
        return telo_err_set(err, TELO_EINVAL,
                            "debug relay: a client's session needs the API server, and only it");
    }
    struct relay *rl = calloc(1, sizeof(*rl));
    char *token = who != NULL && who->token != NULL && r->auth != NULL ? strdup(who->token) : NULL;
    if (rl == NULL || (who != NULL && who->token != NULL && r->auth != NULL && token == NULL)) {
        free(rl);
        free(token);
        close_client(fd, io);
        return telo_err_set(err, TELO_ENOMEM, "debug relay: out of memory");
    }
    rl->set = r;
    rl->cfd = fd;
    if (io != NULL && io->close != NULL)
        rl->cio = *io;
    rl->ufd = -1;
    rl->port = port;
    rl->next_id = 1;
    snprintf(rl->pod_ip, sizeof(rl->pod_ip), "%s", pod_ip);
    snprintf(rl->session, sizeof(rl->session), "%s", session);
    buf_init(&rl->out, OUT_MAX);
    gw_sse_init(&rl->sse, EVENT_MAX);
    ev_io_init(&rl->cread, client_read_cb, fd, EV_READ);
    ev_io_init(&rl->cwrite, client_write_cb, fd, EV_WRITE);
    ev_timer_init(&rl->retry, retry_cb, 0., 0.);
    ev_timer_init(&rl->heartbeat, heartbeat_cb, r->heartbeat_s, r->heartbeat_s);
    ev_timer_init(&rl->reauth, reauth_cb, util_spread_first(r->reauth_s), r->reauth_s);
    ev_timer_init(&rl->answer, answer_cb, r->answer_s, 0.);
    ev_timer_init(&rl->stall, stall_cb, 0., r->stall_s);
    rl->cread.data = rl->cwrite.data = rl->retry.data = rl->heartbeat.data = rl->reauth.data =
        rl->answer.data = rl->stall.data = rl;
    rl->token = token;
    if (who != NULL) {
        snprintf(rl->namespace, sizeof(rl->namespace), "%s", who->namespace);
        snprintf(rl->name, sizeof(rl->name), "%s", who->name);
        snprintf(rl->uid, sizeof(rl->uid), "%s", who->uid ? who->uid : "");
        snprintf(rl->pod, sizeof(rl->pod), "%s", who->pod ? who->pod : "");
    }
    rl->next = r->list;
    if (r->list != NULL)
        r->list->prev = rl;
    r->list = rl;
    r->count++;
    if (buf_append_str(&rl->out,
                       "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                       "Cache-Control: no-cache\r\nConnection: close\r\n"
                       "X-Accel-Buffering: no\r\n\r\n: relaying the inspector\n\n") != 0 ||
        flush_client(rl) != 0) {
        relay_free(rl);
        return telo_err_set(err, TELO_EIO, "debug relay: the client is gone");
    }
    ev_io_start(r->loop, &rl->cread);
    ev_timer_start(r->loop, &rl->heartbeat);
    if (rl->token != NULL)
        ev_timer_start(r->loop, &rl->reauth);
    telo_log(TELO_LOG_INFO, "debug relay started", "session=%s inspector=%s:%d", session, pod_ip,
             port);
    up_connect(rl);
    return 0;
}

size_t gw_relays_count(const struct gw_relays *r)
{
    return r->count;
}

size_t gw_relays_session_count(const struct gw_relays *r, const char *session)
{
    size_t n = 0;
    for (const struct relay *rl = r->list; rl != NULL; rl = rl->next)
        n += strcmp(rl->session, session) == 0;
    return n;
}

size_t gw_relays_namespace_count(const struct gw_relays *r, const char *namespace)
{
    size_t n = 0, len = strlen(namespace);
    for (const struct relay *rl = r->list; rl != NULL; rl = rl->next)
        n += strncmp(rl->session, namespace, len) == 0 && rl->session[len] == '/';
    return n;
}

unsigned long gw_relays_frames(const struct gw_relays *r)
{
    return r->frames;
}

unsigned long gw_relays_stalled(const struct gw_relays *r)
{
    return r->stalled;
}

/* libcurl's multi-socket interface driven from a libev loop: one ev_io per socket curl names, one
 * ev_timer for curl's timeout, finished transfers handed back outside curl's callbacks. */
#include "util/curlev.h"

#include "util/log.h"

#include <ev.h>

#include <stdlib.h>

/* One socket curl asked us to watch (after curl's multi-ev example). */
struct curlev_socket {
    struct curlev *cv;
    struct curlev_socket *prev, *next; /* cv->sockets */
    ev_io io;
};

struct curlev {
    struct ev_loop *loop;
    CURLM *multi;
    ev_timer timer;                /* curl's timeout */
    struct curlev_socket *sockets; /* every socket curl asked us to watch */
    int in_curl;                   /* > 0 while inside curl_multi_socket_action */
    curlev_done_fn *done;
    curlev_idle_fn *idle;
    void *ud;
};

static void deliver(struct curlev *cv)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(cv->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        /* msg is curl's and goes away when done removes the handle: copy what done needs. */
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        void *ud = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&ud);
        cv->done(easy, result, ud);
    }
}

static void socket_action(struct curlev *cv, curl_socket_t fd, int mask)
{
    int running = 0;
    cv->in_curl++;
    CURLMcode mc = curl_multi_socket_action(cv->multi, fd, mask, &running);
    cv->in_curl--;
    if (mc != CURLM_OK)
        telo_log(TELO_LOG_ERROR, "curl_multi_socket_action failed", "error=\"%s\"",
                 curl_multi_strerror(mc));
    if (cv->in_curl > 0)
        return;
    if (cv->idle != NULL)
        cv->idle(cv->ud);
    deliver(cv);
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct curlev_socket *s = w->data;
    int mask =
        ((revents & EV_READ) ? CURL_CSELECT_IN : 0) | ((revents & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    socket_action(s->cv, w->fd, mask);
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    socket_action(w->data, CURL_SOCKET_TIMEOUT, 0);
}

static void socket_unlink(struct curlev *cv, struct curlev_socket *s)
{
    if (cv->sockets == s)
        cv->sockets = s->next;
    else
        s->prev->next = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct curlev *cv = userp;
    struct curlev_socket *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            ev_io_stop(cv->loop, &s->io);
            curl_multi_assign(cv->multi, fd, NULL);
            socket_unlink(cv, s);
            free(s);
        }
        return 0;
    }
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL)
            return -1;
        s->cv = cv;
        s->next = cv->sockets;
        if (cv->sockets != NULL)
            cv->sockets->prev = s;
        cv->sockets = s;
        curl_multi_assign(cv->multi, fd, s);
    } else {
        ev_io_stop(cv->loop, &s->io);
    }
    int events = ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    ev_io_init(&s->io, io_cb, fd, events);
    s->io.data = s;
    ev_io_start(cv->loop, &s->io);
    return 0;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct curlev *cv = userp;
    ev_timer_stop(cv->loop, &cv->timer);
    if (timeout_ms >= 0) {
        /* Even a 0 timeout goes through the loop: calling socket_action from inside this
         * callback would be a recursive curl call. */
        ev_timer_set(&cv->timer, (double)timeout_ms / 1000.0, 0.);
        ev_timer_start(cv->loop, &cv->timer);
    }
    return 0;
}

struct curlev *curlev_new(struct ev_loop *loop, curlev_done_fn *done, curlev_idle_fn *idle,
                          void *ud, struct telo_err *err)
{
    /* Reference-counted by libcurl, so every driver can take its own. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        telo_err_set(err, TELO_ENOMEM, "libcurl initialisation failed");
        return NULL;
    }
    struct curlev *cv = calloc(1, sizeof(*cv));
    if (cv == NULL || (cv->multi = curl_multi_init()) == NULL) {
        free(cv);
        curl_global_cleanup();
        telo_err_set(err, TELO_ENOMEM, "out of memory creating a libcurl multi handle");
        return NULL;
    }
    cv->loop = loop;
    cv->done = done;
    cv->idle = idle;
    cv->ud = ud;
    curl_multi_setopt(cv->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(cv->multi, CURLMOPT_SOCKETDATA, cv);
    curl_multi_setopt(cv->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(cv->multi, CURLMOPT_TIMERDATA, cv);
    ev_timer_init(&cv->timer, timer_cb, 0., 0.);
    cv->timer.data = cv;
    return cv;
}

void curlev_free(struct curlev *cv)
{
    if (cv == NULL)
        return;
    curl_multi_cleanup(cv->multi);
    /* Whatever curl did not report as removed while closing its connections. */
    while (cv->sockets != NULL) {
        struct curlev_socket *s = cv->sockets;
        ev_io_stop(cv->loop, &s->io);
        socket_unlink(cv, s);
        free(s);
    }
    ev_timer_stop(cv->loop, &cv->timer);
    free(cv);
    curl_global_cleanup();
}

CURLM *curlev_multi(const struct curlev *cv)
{
    return cv->multi;
}

int curlev_add(struct curlev *cv, CURL *easy, void *ud)
{
    curl_easy_setopt(easy, CURLOPT_PRIVATE, ud);
    return curl_multi_add_handle(cv->multi, easy) == CURLM_OK ? 0 : -TELO_ENOMEM;
}

void curlev_remove(struct curlev *cv, CURL *easy)
{
    if (easy != NULL)
        curl_multi_remove_handle(cv->multi, easy);
}

int curlev_in_callback(const struct curlev *cv)
{
    return cv->in_curl > 0;
}

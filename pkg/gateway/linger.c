/* Refused connections whose answer is out, read to their end before the close. */
#include "gateway/linger.h"

#include <errno.h>
#include <ev.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn {
    struct gw_lingering *owner;
    int fd;
    ev_io io;
    ev_timer timer;
    struct conn *prev, *next;
};

struct gw_lingering {
    struct ev_loop *loop;
    size_t max, count;
    double seconds;
    struct conn *head;
};

struct gw_lingering *gw_lingering_new(struct ev_loop *loop, size_t max, double seconds)
{
    struct gw_lingering *l = calloc(1, sizeof(*l));
    if (l != NULL) {
        l->loop = loop;
        l->max = max;
        l->seconds = seconds;
    }
    return l;
}

static void conn_free(struct conn *c)
{
    struct gw_lingering *l = c->owner;
    ev_io_stop(l->loop, &c->io);
    ev_timer_stop(l->loop, &c->timer);
    close(c->fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    l->count--;
    free(c);
}

static void on_read(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct conn *c = w->data;
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0)
            return conn_free(c);
    }
}

static void on_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    conn_free(w->data);
}

void gw_lingering_add(struct gw_lingering *l, int fd)
{
    struct conn *c = l->count < l->max ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        close(fd);
        return;
    }
    c->owner = l;
    c->fd = fd;
    ev_io_init(&c->io, on_read, fd, EV_READ);
    ev_timer_init(&c->timer, on_timeout, l->seconds, 0.);
    c->io.data = c->timer.data = c;
    ev_io_start(l->loop, &c->io);
    ev_timer_start(l->loop, &c->timer);
    c->next = l->head;
    if (l->head != NULL)
        l->head->prev = c;
    l->head = c;
    l->count++;
}

void gw_lingering_free(struct gw_lingering *l)
{
    if (l == NULL)
        return;
    while (l->head != NULL)
        conn_free(l->head); // NOLINT(clang-analyzer-unix.Malloc): conn_free unlinks it
    free(l);
}

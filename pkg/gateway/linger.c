/* Refused connections whose answer is out, read to their end before the close. */
#include "gateway/linger.h"

#include <errno.h>
#include <ev.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct lingerer {
    struct gw_lingering *owner;
    size_t slot; /* its index in owner->slots */
    int fd;
    ev_io io;
    ev_timer timer;
};

struct gw_lingering {
    struct ev_loop *loop;
    double seconds;
    size_t max, count;
    struct lingerer **slots; /* count of max in use, packed */
};

struct gw_lingering *gw_lingering_new(struct ev_loop *loop, size_t max, double seconds)
{
    struct gw_lingering *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->slots = calloc(max + 1, sizeof(struct lingerer *))) == NULL) {
        free(l);
        return NULL;
    }
    l->loop = loop;
    l->max = max;
    l->seconds = seconds;
    return l;
}

/* Closes s and moves the last one into its slot. */
static void drop(struct lingerer *s)
{
    struct gw_lingering *l = s->owner;
    ev_io_stop(l->loop, &s->io);
    ev_timer_stop(l->loop, &s->timer);
    close(s->fd);
    struct lingerer *last = l->slots[--l->count];
    l->slots[s->slot] = last;
    last->slot = s->slot;
    l->slots[l->count] = NULL;
    free(s);
}

static void on_read(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct lingerer *s = w->data;
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(s->fd, sink, sizeof(sink), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0)
            return drop(s);
    }
}

static void on_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    drop(w->data);
}

void gw_lingering_add(struct gw_lingering *l, int fd)
{
    struct lingerer *s = l->count < l->max ? calloc(1, sizeof(*s)) : NULL;
    if (s == NULL) {
        close(fd);
        return;
    }
    s->owner = l;
    s->fd = fd;
    s->slot = l->count;
    l->slots[l->count++] = s;
    ev_io_init(&s->io, on_read, fd, EV_READ);
    ev_timer_init(&s->timer, on_timeout, l->seconds, 0.);
    s->io.data = s->timer.data = s;
    ev_io_start(l->loop, &s->io);
    ev_timer_start(l->loop, &s->timer);
}

void gw_lingering_free(struct gw_lingering *l)
{
    if (l == NULL)
        return;
    while (l->count > 0)
        drop(l->slots[l->count - 1]);
    free(l->slots);
    free(l);
}

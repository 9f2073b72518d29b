/* The reachability prober (issue 17): non-blocking TCP connects to session pods' ports on the
 * operator's libev loop, and what they found, for the session plan (session/reach.h). */
#include "session/prober.h"

#include "util/strmap.h"
#include "workqueue/turns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum target_state { IDLE, QUEUED, IN_FLIGHT };

struct group;

/* One endpoint: a port of one session's pod. */
struct target {
    struct session_prober *p;
    struct group *g;
    struct target *next_in_group;
    struct wq_turn_link link; /* in the queue while QUEUED; its tenant is the group's */
    char key[320];
    char uid[64];
    char ip[64];
    int port;
    struct session_reach_facts facts;
    enum target_state state;
    double probe_started; /* the loop's clock; 0: never probed */
    int fd;
    ev_io io;          /* the connect's answer */
    ev_timer deadline; /* SESSION_PROBER_CONNECT_TIMEOUT_S */
    ev_timer next;     /* the next probe of an endpoint not reachable yet */
};

/* One session's endpoints, so a reconcile looks at its own and not at every session's. */
struct group {
    struct target *targets;
    struct wq_tenant *tenant; /* the session's namespace: probes waiting take turns by it */
    char key[];               /* the map borrows this */
};

struct session_prober {
    struct ev_loop *loop;
    const struct session_config *cfg;
    session_prober_requeue_fn *requeue;
    void *ud;
    session_prober_connect_fn *connect;
    struct strmap *groups;      /* session key -> struct group */
    struct wq_tenants *tenants; /* namespaces of the groups */
    struct wq_turns queue;      /* waiting for a slot: namespaces in turn, each oldest first */
    int draining; /* drain_queue runs: a probe answered at once does not recurse into it */
    struct session_prober_stats stats;
};

static double now_of(const struct session_prober *p)
{
    return ev_now(p->loop);
}

/* --- one probe ------------------------------------------------------------------------------ */

static void start_probe(struct target *t);

static void close_probe(struct target *t)
{
    struct session_prober *p = t->p;
    ev_io_stop(p->loop, &t->io);
    ev_timer_stop(p->loop, &t->deadline);
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->state == IN_FLIGHT)
        p->stats.in_flight--;
    t->state = IDLE;
}

static struct target *target_of(struct wq_turn_link *l)
{
    return (struct target *)(void *)((char *)l - offsetof(struct target, link));
}

/* Starts probes waiting for a slot: namespaces take turns, so one tenant's thousands of
 * endpoints that never answer (each holding a slot for the connect timeout) delay another's
 * first probe by one probe per namespace waiting, not by the thousands. */
static void drain_queue(struct session_prober *p)
{
    if (p->draining)
        return;
    p->draining = 1;
    while (p->queue.len > 0 && p->stats.in_flight < SESSION_PROBER_MAX_IN_FLIGHT) {
        struct target *t = target_of(wq_turns_pop(&p->queue));
        t->state = IDLE;
        start_probe(t);
    }
    p->draining = 0;
}

/* A probe's answer: the facts move, and a change queues the session again. */
static void finish(struct target *t, int ok)
{
    struct session_prober *p = t->p;
    double now = now_of(p);
    struct session_reach_facts *f = &t->facts;
    int changed = f->results == 0 || f->last_ok != ok;
    if (ok) {
        if (changed)
            f->ok_since = t->probe_started;
        f->last_seen = t->probe_started;
    } else if (changed) {
        f->fail_since = t->probe_started;
    }
    f->last_ok = ok;
    f->results++;
    close_probe(t);
    if (!ok) {
        /* Every interval from the last probe's start, as the reference runner polls. */
        double after = t->probe_started + (double)p->cfg->reach_interval_seconds - now;
        ev_timer_set(&t->next, after > 0.05 ? after : 0.05, 0);
        ev_timer_start(p->loop, &t->next);
    }
    char key[sizeof(t->key)];
    snprintf(key, sizeof(key), "%s", t->key);
    drain_queue(p);
    if (changed && p->requeue)
        p->requeue(p->ud, key);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct target *t = w->data;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    finish(t, err == 0);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    finish(w->data, 0);
}

static void on_next(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    start_probe(w->data);
}

/* The address of t, or 0 when its IP is not a numeric address. */
static socklen_t target_addr(const struct target *t, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, t->ip, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((unsigned short)t->port);
        return sizeof(*in4);
    }
    if (inet_pton(AF_INET6, t->ip, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((unsigned short)t->port);
        return sizeof(*in6);
    }
    return 0;
}

/* Starts a connect to t, or queues it when SESSION_PROBER_MAX_IN_FLIGHT are in flight. Never
 * blocks: the socket is non-blocking and the answer comes through the loop. */
static void start_probe(struct target *t)
{
    struct session_prober *p = t->p;
    if (t->state != IDLE)
        return;
    ev_timer_stop(p->loop, &t->next);
    char why[160];
    struct sockaddr_storage ss;
    socklen_t len = target_addr(t, &ss);
    /* Checked here, before any socket exists, whatever the caller decided. */
    if (!len || !session_reach_probed(p->cfg, t->ip, "TCP", why, sizeof(why))) {
        p->stats.refused++;
        return;
    }
    if (p->stats.in_flight >= SESSION_PROBER_MAX_IN_FLIGHT) {
        t->state = QUEUED;
        wq_turns_push(&p->queue, &t->link);
        return;
    }
    t->probe_started = now_of(p);
    p->stats.probes++;
    t->state = IN_FLIGHT;
    p->stats.in_flight++;
    t->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (t->fd < 0) {
        finish(t, 0);
        return;
    }
    int rc = p->connect ? p->connect(t->fd, (struct sockaddr *)&ss, len)
                        : connect(t->fd, (struct sockaddr *)&ss, len);
    if (rc == 0) {
        finish(t, 1);
        return;
    }
    if (errno != EINPROGRESS) {
        finish(t, 0);
        return;
    }
    ev_io_set(&t->io, t->fd, EV_WRITE);
    ev_io_start(p->loop, &t->io);
    ev_timer_set(&t->deadline, SESSION_PROBER_CONNECT_TIMEOUT_S, 0);
    ev_timer_start(p->loop, &t->deadline);
}

/* --- the table ------------------------------------------------------------------------------ */

static void target_free(struct target *t)
{
    struct session_prober *p = t->p;
    if (t->state == QUEUED)
        wq_turns_remove(&p->queue, &t->link);
    close_probe(t);
    ev_timer_stop(p->loop, &t->next);
    free(t);
}

static void group_free(struct session_prober *p, struct group *g)
{
    while (g->targets) {
        struct target *t = g->targets;
        g->targets = t->next_in_group;
        target_free(t);
        p->stats.targets--;
    }
    wq_tenant_unref(p->tenants, g->tenant);
    free(g);
}

/* Removes t from its group, and the group when it was its last endpoint. */
static void remove_target(struct session_prober *p, struct target *t)
{
    struct group *g = t->g;
    struct target **at = &g->targets;
    while (*at != t)
        at = &(*at)->next_in_group;
    *at = t->next_in_group;
    target_free(t);
    p->stats.targets--;
    if (!g->targets) {
        strmap_remove(p->groups, g->key);
        group_free(p, g);
    }
}

static struct target *find(struct session_prober *p, const char *key, int port)
{
    struct group *g = strmap_get(p->groups, key);
    for (struct target *t = g ? g->targets : NULL; t; t = t->next_in_group)
        if (t->port == port)
            return t;
    return NULL;
}

static struct group *group_get_or_create(struct session_prober *p, const char *key)
{
    struct group *g = strmap_get(p->groups, key);
    if (g)
        return g;
    size_t len = strlen(key);
    if (!(g = calloc(1, sizeof(*g) + len + 1)))
        return NULL;
    memcpy(g->key, key, len + 1);
    char ns[256];
    wq_tenant_of_key(key, ns, sizeof(ns));
    if (!(g->tenant = wq_tenant_ref(p->tenants, ns))) {
        free(g);
        return NULL;
    }
    if (strmap_put(p->groups, g->key, g) < 0) {
        group_free(p, g);
        return NULL;
    }
    return g;
}

static struct target *add(struct session_prober *p, const char *key, const char *uid,
                          const char *ip, int port)
{
    struct group *g = group_get_or_create(p, key);
    if (!g)
        return NULL;
    struct target *t = calloc(1, sizeof(*t));
    if (!t) {
        if (!g->targets) {
            strmap_remove(p->groups, g->key);
            group_free(p, g);
        }
        return NULL;
    }
    t->p = p;
    t->g = g;
    t->link.tenant = g->tenant;
    t->fd = -1;
    t->port = port;
    snprintf(t->key, sizeof(t->key), "%s", key);
    snprintf(t->uid, sizeof(t->uid), "%s", uid ? uid : "");
    snprintf(t->ip, sizeof(t->ip), "%s", ip);
    ev_io_init(&t->io, on_io, -1, EV_WRITE);
    ev_init(&t->deadline, on_deadline);
    ev_init(&t->next, on_next);
    t->io.data = t->deadline.data = t->next.data = t;
    t->next_in_group = g->targets;
    g->targets = t;
    p->stats.targets++;
    return t;
}

struct session_prober *session_prober_new(struct ev_loop *loop, const struct session_config *cfg,
                                          session_prober_requeue_fn *requeue, void *ud,
                                          struct telo_err *err)
{
    struct session_prober *p = calloc(1, sizeof(*p));
    if (!p) {
        telo_err_set(err, TELO_ENOMEM, "reachability prober: out of memory");
        return NULL;
    }
    p->loop = loop;
    p->cfg = cfg;
    p->requeue = requeue;
    p->ud = ud;
    if (!(p->groups = strmap_new()) || !(p->tenants = wq_tenants_new(1))) {
        session_prober_free(p);
        telo_err_set(err, TELO_ENOMEM, "reachability prober: out of memory");
        return NULL;
    }
    wq_turns_init(&p->queue, 0);
    return p;
}

void session_prober_free(struct session_prober *p)
{
    if (!p)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *g;
    while (p->groups && strmap_next(p->groups, &it, &key, &g))
        group_free(p, g);
    strmap_free(p->groups);
    wq_tenants_free(p->tenants);
    free(p);
}

int session_prober_observe(struct session_prober *p, const char *key, const char *pod_uid,
                           const char *ip, int port, struct session_reach_facts *out)
{
    memset(out, 0, sizeof(*out));
    char why[160];
    if (!session_reach_probed(p->cfg, ip, "TCP", why, sizeof(why))) {
        p->stats.refused++;
        return -TELO_EINVAL;
    }
    struct target *t = find(p, key, port);
    if (t && (strcmp(t->uid, pod_uid ? pod_uid : "") != 0 || strcmp(t->ip, ip) != 0)) {
        /* Another pod under the session's name: what was learnt was of the old one. */
        remove_target(p, t);
        t = NULL;
    }
    if (!t) {
        if (!(t = add(p, key, pod_uid, ip, port)))
            return -TELO_ENOMEM;
        start_probe(t);
    } else if (t->state == IDLE && t->facts.last_ok &&
               now_of(p) - t->probe_started >= (double)p->cfg->reach_interval_seconds) {
        start_probe(t); /* reachable: looked at again when the session is (the resync) */
    }
    *out = t->facts;
    return 0;
}

void session_prober_retain(struct session_prober *p, const char *key, const char *pod_uid,
                           const int *ports, size_t nports)
{
    struct group *g = strmap_get(p->groups, key);
    struct target *t = g ? g->targets : NULL;
    while (t) {
        struct target *next = t->next_in_group;
        int keep = 0;
        if (pod_uid && strcmp(t->uid, pod_uid) == 0) {
            for (size_t j = 0; j < nports && !keep; j++)
                keep = ports[j] == t->port;
        }
        if (!keep)
            remove_target(p, t); /* frees g with the last one: next is read before */
        t = next;
    }
    drain_queue(p);
}

const struct session_prober_stats *session_prober_stats(const struct session_prober *p)
{
    return &p->stats;
}

void session_prober_set_connect(struct session_prober *p, session_prober_connect_fn *fn)
{
    p->connect = fn;
}

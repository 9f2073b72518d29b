/* Running a program as a child process without a shell: stdin on /dev/null, stdout read with a
 * byte bound, the end of stderr kept, killed at a time limit; either blocking the caller or
 * watched by a libev loop. */
#include "util/subproc.h"

#include "util/buf.h"
#include "util/err.h"

#include <ev.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How often a child on a loop other than the default one is looked for once its output closed:
 * libev can watch children only on the default loop, where it reaps them itself. */
#define REAP_POLL_S 0.005

struct subproc {
    struct ev_loop *loop;
    pid_t pid;
    int timeout_ms;
    ev_io out_w, err_w;
    ev_child child_w; /* default loop only */
    ev_timer timeout_w;
    ev_timer reap_w; /* other loops: polls waitpid */
    struct subproc_result res;
    int exited;
    int rc; /* 0, or the failure that ended the run early (timeout, stdout too big) */
    struct telo_err err;
    subproc_done_fn *done;
    void *ud;
};

void subproc_result_release(struct subproc_result *res)
{
    buf_release(&res->out);
    buf_release(&res->err);
}

static void result_init(struct subproc_result *res, const struct subproc_spec *spec)
{
    res->status = 0;
    buf_init(&res->out, spec->max_stdout);
    buf_init(&res->err, spec->stderr_kept);
}

static void close_pair(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
}

/* Forks spec with stdout and stderr on pipes whose read ends (close-on-exec, non-blocking when
 * nonblock) go into fds. Returns 0 with *pid set, or a negative code with err filled. */
static int spawn(const struct subproc_spec *spec, int nonblock, pid_t *pid, int fds[2],
                 struct telo_err *err)
{
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    /* CLOEXEC so that no other child forked meanwhile inherits them; dup2 in our child clears
     * the flag on the copies it keeps. */
    int ok = pipe(out_pipe) == 0 && pipe(err_pipe) == 0;
    for (int i = 0; i < 2 && ok; i++)
        ok = fcntl(out_pipe[i], F_SETFD, FD_CLOEXEC) == 0 &&
             fcntl(err_pipe[i], F_SETFD, FD_CLOEXEC) == 0;
    if (ok && nonblock)
        ok = fcntl(out_pipe[0], F_SETFL, O_NONBLOCK) == 0 &&
             fcntl(err_pipe[0], F_SETFL, O_NONBLOCK) == 0;
    if (!ok) {
        int saved = errno;
        close_pair(out_pipe);
        close_pair(err_pipe);
        return telo_err_set(err, TELO_EIO, "pipe: %s", strerror(saved));
    }
    pid_t child = fork();
    if (child == 0) {
        /* Child: only async-signal-safe calls from here on. */
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_pipe[1], 1) < 0 ||
            dup2(err_pipe[1], 2) < 0)
            _exit(126);
        close(out_pipe[0]);
        close(err_pipe[0]);
        close(out_pipe[1]);
        close(err_pipe[1]);
        if (devnull > 2)
            close(devnull);
        execve(spec->path, spec->argv, spec->envp);
        _exit(127);
    }
    int saved = errno;
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (child < 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        return telo_err_set(err, TELO_EIO, "fork: %s", strerror(saved));
    }
    *pid = child;
    fds[0] = out_pipe[0];
    fds[1] = err_pipe[0];
    return 0;
}

/* Appends got bytes of stderr, keeping only the end: the useful part of an error usually is. */
static int keep_tail(struct buf *errb, const char *chunk, size_t got)
{
    if (got > errb->max) {
        chunk += got - errb->max;
        got = errb->max;
    }
    if (errb->len + got > errb->max)
        buf_consume(errb, errb->len + got - errb->max);
    return buf_append(errb, chunk, got);
}

static int timed_out(int timeout_ms, struct telo_err *err)
{
    return telo_err_set(err, TELO_ETIMEDOUT, "timed out after %d ms", timeout_ms);
}

static int too_big(const struct buf *out, struct telo_err *err)
{
    return telo_err_set(err, TELO_ETOOBIG, "wrote more than %zu bytes", out->max);
}

/* Takes got bytes read from stream 0 (stdout) or 1 (stderr). Returns 0 or a negative code. */
static int take(struct subproc_result *res, int stream, const char *chunk, size_t got,
                struct telo_err *err)
{
    if (stream == 0 && buf_append(&res->out, chunk, got) < 0)
        return too_big(&res->out, err);
    if (stream == 1 && keep_tail(&res->err, chunk, got) < 0)
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    return 0;
}

/* ---- blocking ---- */

static long elapsed_ms(const struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000L + (now.tv_nsec - since->tv_nsec) / 1000000L;
}

/* Reads both pipes until they close or the time limit passes. */
static int sync_read(const struct subproc_spec *spec, int fds_in[2], const struct timespec *start,
                     struct subproc_result *res, struct telo_err *err)
{
    struct pollfd fds[2] = {{.fd = fds_in[0], .events = POLLIN},
                            {.fd = fds_in[1], .events = POLLIN}};
    int rc = 0, open_fds = 2;
    char chunk[4096];
    while (open_fds > 0 && rc == 0) {
        long left = spec->timeout_ms - elapsed_ms(start);
        if (left <= 0)
            return timed_out(spec->timeout_ms, err);
        int n = poll(fds, 2, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return telo_err_set(err, TELO_EIO, "poll: %s", strerror(errno));
        for (int i = 0; i < 2 && rc == 0; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t got = read(fds[i].fd, chunk, sizeof(chunk));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                fds[i].fd = -1;
                open_fds--;
            } else {
                rc = take(res, i, chunk, (size_t)got, err);
            }
        }
    }
    return rc;
}

int subproc_run(const struct subproc_spec *spec, struct subproc_result *res, struct telo_err *err)
{
    result_init(res, spec);
    pid_t pid = 0;
    int fds[2] = {-1, -1};
    int rc = spawn(spec, 0, &pid, fds, err);
    /* spawn fails with a negative code; the analyzer cannot see telo_err_set's sign. */
    if (rc < 0 || pid <= 0)
        return rc < 0 ? rc : -TELO_EIO;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = sync_read(spec, fds, &start, res, err);
    close(fds[0]);
    close(fds[1]);
    /* The pipes are closed, but a child may have closed them itself and kept running: keep
     * enforcing the time limit while waiting for it. */
    int killed = rc < 0;
    if (killed)
        kill(pid, SIGKILL);
    for (;;) {
        pid_t w = waitpid(pid, &res->status, killed ? 0 : WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        if (w == 0 && spec->timeout_ms - elapsed_ms(&start) <= 0) {
            rc = timed_out(spec->timeout_ms, err);
            kill(pid, SIGKILL);
            killed = 1;
        } else if (w == 0) {
            struct timespec pause = {0, 5L * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
    }
    return rc;
}

/* ---- on a loop ---- */

static void stop_pipes(struct subproc *p)
{
    ev_io *pipes[2] = {&p->out_w, &p->err_w};
    for (int i = 0; i < 2; i++) {
        if (pipes[i]->fd >= 0) {
            ev_io_stop(p->loop, pipes[i]);
            close(pipes[i]->fd);
            pipes[i]->fd = -1;
        }
    }
}

static void subproc_free(struct subproc *p)
{
    stop_pipes(p);
    ev_child_stop(p->loop, &p->child_w);
    ev_timer_stop(p->loop, &p->timeout_w);
    ev_timer_stop(p->loop, &p->reap_w);
    subproc_result_release(&p->res);
    free(p);
}

/* Done when both pipes closed and the child was reaped. May free p. */
static void check_done(struct subproc *p)
{
    if (p->out_w.fd >= 0 || p->err_w.fd >= 0 || !p->exited)
        return;
    p->done(p->rc, &p->err, &p->res, p->ud);
    subproc_free(p);
}

/* The time limit stays: a descendant that inherited the pipes (a plugin's helper left in the
 * background) may hold them open long after the child exited, and the run must still end. */
static void reaped(struct subproc *p, int status)
{
    p->exited = 1;
    p->res.status = status;
    ev_child_stop(p->loop, &p->child_w);
    ev_timer_stop(p->loop, &p->reap_w);
    check_done(p);
}

static void reap_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct subproc *p = w->data;
    int status = 0;
    pid_t got = waitpid(p->pid, &status, WNOHANG);
    /* ECHILD: someone reaped it for us (a default loop elsewhere); its status is lost. */
    if (got == p->pid || (got < 0 && errno != EINTR))
        reaped(p, got == p->pid ? status : 0);
}

static void child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    (void)loop;
    (void)revents;
    struct subproc *p = w->data;
    reaped(p, w->rstatus);
}

/* Ends the run early with rc: closes the pipes and kills the child (unless it was reaped: its pid
 * may be another process's now); the reap finishes the run. May free p. */
static void fail(struct subproc *p, int rc)
{
    p->rc = rc;
    stop_pipes(p);
    if (!p->exited) {
        kill(p->pid, SIGKILL);
        if (!ev_is_default_loop(p->loop) && !ev_is_active(&p->reap_w))
            ev_timer_start(p->loop, &p->reap_w);
    }
    check_done(p);
}

static void pipe_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct subproc *p = w->data;
    char chunk[4096];
    for (;;) {
        ssize_t got = read(w->fd, chunk, sizeof(chunk));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (got <= 0)
            break;
        int rc = take(&p->res, w == &p->out_w ? 0 : 1, chunk, (size_t)got, &p->err);
        if (rc < 0) {
            fail(p, rc);
            return;
        }
    }
    ev_io_stop(p->loop, w);
    close(w->fd);
    w->fd = -1;
    /* Another loop cannot watch the child: poll for it once its output is complete. */
    if (p->out_w.fd < 0 && p->err_w.fd < 0 && !p->exited && !ev_is_default_loop(p->loop))
        ev_timer_start(p->loop, &p->reap_w);
    check_done(p);
}

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct subproc *p = w->data;
    fail(p, timed_out(p->timeout_ms, &p->err));
}

struct subproc *subproc_start(struct ev_loop *loop, const struct subproc_spec *spec,
                              subproc_done_fn *done, void *ud, struct telo_err *err)
{
    struct subproc *p = calloc(1, sizeof(*p));
    if (!p) {
        telo_err_set(err, TELO_ENOMEM, "out of memory");
        return NULL;
    }
    int fds[2] = {-1, -1};
    if (spawn(spec, 1, &p->pid, fds, err) < 0 || p->pid <= 0) {
        free(p);
        return NULL;
    }
    p->loop = loop;
    p->timeout_ms = spec->timeout_ms;
    p->done = done;
    p->ud = ud;
    result_init(&p->res, spec);
    ev_io_init(&p->out_w, pipe_cb, fds[0], EV_READ);
    ev_io_init(&p->err_w, pipe_cb, fds[1], EV_READ);
    ev_timer_init(&p->timeout_w, timeout_cb, spec->timeout_ms / 1000.0, 0.);
    ev_timer_init(&p->reap_w, reap_cb, REAP_POLL_S, REAP_POLL_S);
    ev_child_init(&p->child_w, child_cb, p->pid, 0);
    p->out_w.data = p->err_w.data = p->timeout_w.data = p->reap_w.data = p->child_w.data = p;
    ev_io_start(loop, &p->out_w);
    ev_io_start(loop, &p->err_w);
    ev_timer_start(loop, &p->timeout_w);
    /* On the default loop libev reaps every child on SIGCHLD, so only a child watcher sees the
     * status; it starts before the loop runs again, so the exit cannot be missed. */
    if (ev_is_default_loop(loop))
        ev_child_start(loop, &p->child_w);
    return p;
}

void subproc_cancel(struct subproc *p)
{
    if (!p)
        return;
    stop_pipes(p);
    if (!p->exited) {
        /* SIGKILL ends it at once; ECHILD when the default loop's reaper got it first. */
        kill(p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    subproc_free(p);
}

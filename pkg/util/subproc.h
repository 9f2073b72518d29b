/* Running a program as a child process without a shell: stdin on /dev/null, stdout read with a
 * byte bound, the end of stderr kept, killed at a time limit; either blocking the caller or
 * watched by a libev loop. */
#ifndef TELO_UTIL_SUBPROC_H
#define TELO_UTIL_SUBPROC_H

#include <stddef.h>

#include "util/buf.h"
#include "util/err.h"

struct ev_loop;

/* What to run. Everything is borrowed and only read while subproc_run or subproc_start runs. */
struct subproc_spec {
    const char *path;   /* the executable, for execve (no PATH search, no shell) */
    char *const *argv;  /* NULL-terminated */
    char *const *envp;  /* NULL-terminated "NAME=value" list */
    int timeout_ms;     /* the child is killed (SIGKILL) after this long */
    size_t max_stdout;  /* more stdout than this is an error and kills the child */
    size_t stderr_kept; /* bytes of the end of stderr kept */
};

/* What came back. status is a waitpid status (WIFEXITED...); 0 when the child was reaped by
 * someone else (a default libev loop elsewhere) and its status is lost. */
struct subproc_result {
    int status;
    struct buf out; /* stdout, NUL-terminated once anything was read */
    struct buf err; /* the end of stderr */
};

/* Frees the buffers of res. Accepts a zeroed result. */
void subproc_result_release(struct subproc_result *res);

/* Runs spec to completion, blocking the caller up to the timeout. Returns 0 with res filled, or
 * a negative code with err filled (message without context: the caller adds it): -TELO_ETIMEDOUT,
 * -TELO_ETOOBIG (stdout over max_stdout), -TELO_EIO ("pipe: ...", "fork: ...", "poll: ..."),
 * -TELO_ENOMEM. The child is always reaped before returning. res is initialised in every case
 * and must be released with subproc_result_release. */
int subproc_run(const struct subproc_spec *spec, struct subproc_result *res, struct telo_err *err);

/* A child started by subproc_start. */
struct subproc;

/* Called once when the child's output is complete and it was reaped (or it failed as
 * subproc_run's codes say), with res valid during the call. The subproc is freed right after the
 * callback returns. */
typedef void subproc_done_fn(int rc, const struct telo_err *err, struct subproc_result *res,
                             void *ud);

/* Starts spec as a child watched by loop: io watchers read its stdout and stderr, a timer kills
 * it at the timeout, and its exit is seen by a child watcher on the default loop (where libev
 * reaps every child itself) or by polling waitpid every 5 ms on another loop once its output
 * closed. Returns the handle, owned by the loop until done runs (or subproc_cancel), or NULL with
 * err filled (-TELO_EIO for pipe or fork, -TELO_ENOMEM); done is then never called. */
struct subproc *subproc_start(struct ev_loop *loop, const struct subproc_spec *spec,
                              subproc_done_fn *done, void *ud, struct telo_err *err);

/* Kills the child, reaps it and frees p without calling done. NULL is a no-op. Not from p's own
 * callback. */
void subproc_cancel(struct subproc *p);

#endif

/* The I/O edge of a running image build's progress: the builder's log read now and then (one
 * read per Job however many sessions wait on it, bounded in bytes and lines), its step kept by
 * Job uid, and the sessions that asked queued again when what they show changes. */
#ifndef TELO_SESSION_BUILDPROGRESS_H
#define TELO_SESSION_BUILDPROGRESS_H

#include "imagebuild/buildstep.h"
#include "session/config.h"
#include "session/waiters.h"
#include "util/err.h"

#include <json.h>

struct kube_transport;
struct session_build_progress;

/* How often a running build's log is read at most, and what of it: the last lines, capped in
 * bytes by the API server (a RUN step's output is the tenant's and may be huge). */
#define SESSION_BUILD_PROGRESS_POLL_S 5.0
#define SESSION_BUILD_PROGRESS_LINES  300
#define SESSION_BUILD_PROGRESS_BYTES  (128 * 1024)

/* Creates the table on t's loop for cfg (both borrowed; they must outlive it). wake is called
 * with ud and the key of each session waiting on a Job whose step changed. Returns NULL with
 * err filled when out of memory. */
struct session_build_progress *session_build_progress_new(struct kube_transport *t,
                                                          const struct session_config *cfg,
                                                          session_waiters_wake_fn *wake, void *ud,
                                                          struct telo_err *err);

/* Cancels every read in flight (no wakes) and frees p. NULL is a no-op. */
void session_build_progress_free(struct session_build_progress *p);

/* What is known of the running build Job job (the object as observed: its uid keys the table,
 * its context container's DOCKERFILE counts the steps) into *out (zero: nothing yet). With ask,
 * the log is read every SESSION_BUILD_PROGRESS_POLL_S while sessions keep asking (reads stop a
 * minute after the last ask), and waiter (a session key) is queued again when what it shows
 * would change: another step, or once the builder is at work the next 10 s of the elapsed
 * time. Cannot fail: a read that fails leaves what was known. */
void session_build_progress_get(struct session_build_progress *p, const struct json_object *job,
                                const char *waiter, int ask, struct build_step *out);

/* The Dockerfile of the build Job job (its context container's DOCKERFILE), or NULL. Borrowed
 * from job. */
const char *session_build_progress_dockerfile(const struct json_object *job);

#endif

/* The I/O edge of a failed image build's log: the tail of the failed container of the build
 * Job's pod, fetched once per Job uid, kept a while, and the sessions that asked queued again
 * when it is in. */
#ifndef TELO_SESSION_BUILDLOG_H
#define TELO_SESSION_BUILDLOG_H

#include "session/config.h"
#include "session/image.h"
#include "session/waiters.h"
#include "util/err.h"

struct kube_transport;
struct session_build_logs;

/* Creates the table on t's loop for cfg (both borrowed; they must outlive it). wake is called
 * with ud and the key of each session whose log tail arrived. Returns NULL with err filled when
 * out of memory. */
struct session_build_logs *session_build_logs_new(struct kube_transport *t,
                                                  const struct session_config *cfg,
                                                  session_waiters_wake_fn *wake, void *ud,
                                                  struct telo_err *err);

/* Cancels every fetch in flight (no wakes) and frees logs. NULL is a no-op. */
void session_build_logs_free(struct session_build_logs *logs);

/* The log tail of the failed build Job job_name (uid job_uid, so a new Job of the same name is
 * read anew), or SESSION_LOG_NONE / SESSION_LOG_FETCHING. With ask, a missing one is fetched
 * (the Job's pod's failed container, its last 20 lines) and waiter woken when it is in. *tail
 * is valid until the loop runs again. */
enum session_build_log session_build_logs_get(struct session_build_logs *logs, const char *job_name,
                                              const char *job_uid, const char *waiter, int ask,
                                              const char **tail);

#endif

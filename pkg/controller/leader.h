/* Leader election on a coordination.k8s.io/v1 Lease, with client-go's leaderelection semantics. */
#ifndef TELO_CONTROLLER_LEADER_H
#define TELO_CONTROLLER_LEADER_H

#include "util/err.h"

#include <stddef.h>

struct json_object;
struct kube_transport;
struct leader_elector;

/* The rules (client-go tools/leaderelection with its LeaseLock):
 * - A candidate reads the Lease every retry period (jittered by up to jitter_factor x retry, so
 *   candidates do not move in step) and takes it when nobody holds it (holderIdentity "") or when
 *   the record it observed has not changed for the holder's leaseDurationSeconds, measured on the
 *   candidate's OWN clock from the moment it saw the record change. The remote renewTime is
 *   never compared with the local clock, so clock skew between replicas cannot cause two leaders.
 * - Every write is a PUT carrying the resourceVersion that was read (a POST when the Lease does
 *   not exist): of several candidates only one write succeeds; the others get 409 and wait.
 * - The leader renews every retry period. When no renew has succeeded for renew_deadline (counted
 *   from when the last successful write was SENT, so it ends before any follower's lease_duration
 *   can), it steps down at once: on_stopped_leading runs before a follower may take over.
 * - leaseTransitions grows by one whenever the holder changes; acquireTime is kept across renews.
 * - Release (client-go ReleaseOnCancel) writes holderIdentity "" with leaseDurationSeconds 1, so a
 *   follower takes over at its next retry instead of after a full lease duration. */

/* Timing; see leader_timing_default. All in seconds. */
struct leader_timing {
    double lease_duration; /* followers wait this long after the last change they saw; 15 */
    double renew_deadline; /* the leader gives up when renewing fails for this long; 10 */
    double retry_period;   /* between attempts; 2 */
    double jitter_factor;  /* candidates wait retry_period * (1 + jitter_factor * rand); 1.2 */
};

#define LEADER_IDENTITY_MAX 256 /* holderIdentity bytes kept, with the NUL */
#define LEADER_TIME_MAX     40  /* MicroTime text bytes kept, with the NUL */

/* The leader election record of a Lease's spec. Times are the MicroTime text as sent: they are
 * only compared for change and carried over, never read as a clock. */
struct leader_record {
    char holder[LEADER_IDENTITY_MAX]; /* "" when nobody holds the lease */
    long lease_duration_s;            /* leaseDurationSeconds */
    char acquire_time[LEADER_TIME_MAX];
    char renew_time[LEADER_TIME_MAX];
    long transitions; /* leaseTransitions */
};

/* What a candidate knows: pure data, updated by leader_observe and by the I/O layer. Times are on
 * the local clock. Start it zeroed. */
struct leader_state {
    int have_record;               /* the Lease was read and exists */
    struct leader_record observed; /* the last record read or written */
    double observed_time;          /* when observed last changed */
    int leading;                   /* this candidate leads */
    double last_renew;             /* when the last successful write (acquire or renew) was sent */
};

enum leader_action {
    LEADER_WAIT,      /* someone else holds a valid lease: try again at next_wakeup */
    LEADER_ACQUIRE,   /* write record (create when the Lease does not exist): take the lease */
    LEADER_RENEW,     /* write record: we hold the lease (acquireTime, transitions kept) */
    LEADER_STEP_DOWN, /* we led but lost the lease (deadline passed or someone else holds it) */
};

struct leader_decision {
    enum leader_action action;
    int create;                 /* ACQUIRE only: the Lease does not exist, POST it */
    struct leader_record write; /* ACQUIRE/RENEW: the record to write */
    double next_wakeup;         /* WAIT and STEP_DOWN: when to try again (local clock) */
};

/* Fills t with client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry, jitter 1.2. */
void leader_timing_default(struct leader_timing *t);

/* Checks t as client-go's NewLeaderElector does: every value positive, lease_duration >
 * renew_deadline, renew_deadline > jitter_factor * retry_period. Returns 0 or -TELO_EINVAL with
 * err naming the rule. */
int leader_timing_check(const struct leader_timing *t, struct telo_err *err);

/* The command-line flags of kube-controller-manager for t: --leader-elect-lease-duration,
 * --leader-elect-renew-deadline and --leader-elect-retry-period, each a Go duration ("15s").
 * Returns 1 when name is one of them and value was stored, 0 when name is none of them, or
 * -TELO_EINVAL with err naming the flag when value is not a duration. */
int leader_timing_flag(struct leader_timing *t, const char *name, const char *value,
                       struct telo_err *err);

/* Reads the record from lease (a parsed coordination.k8s.io/v1 Lease; borrowed). Missing fields
 * are "" / 0; strings longer than the record keeps are truncated. Returns 0, or -TELO_EPROTO when
 * lease is not a JSON object. */
int leader_record_from_lease(struct json_object *lease, struct leader_record *out);

/* Sets lease's spec fields (holderIdentity, leaseDurationSeconds, acquireTime, renewTime,
 * leaseTransitions) from rec, creating spec when absent; times that are "" are removed. lease is
 * modified in place. Returns 0, -TELO_EINVAL when lease is not a JSON object, or -TELO_ENOMEM. */
int leader_record_to_lease(const struct leader_record *rec, struct json_object *lease);

/* 1 when a and b are the same record (every field), else 0. */
int leader_record_equal(const struct leader_record *a, const struct leader_record *b);

/* Records that rec was read at local time now: when it differs from the observed record (or none
 * was observed), it becomes the observed record and observed_time becomes now. Cannot fail. */
void leader_observe(struct leader_state *st, const struct leader_record *rec, double now);

/* Marks the Lease as absent (read gave 404). Cannot fail. */
void leader_observe_absent(struct leader_state *st);

/* The decision of one attempt, from what st says after the latest read, at local time now (also
 * the wall time written into the record's MicroTimes), for identity. jitter01 in [0, 1) is the
 * random draw for the candidate's retry jitter. Pure: same inputs, same output. */
void leader_decide(const struct leader_timing *t, const struct leader_state *st,
                   const char *identity, double now, double jitter01, struct leader_decision *out);

/* When to run the next attempt after one ended at now (success or failure): a leader every
 * retry_period, but no later than its step-down deadline; a candidate after a jittered retry
 * period, or earlier when the lease it observed from someone else expires before that. */
double leader_next_wakeup(const struct leader_timing *t, const struct leader_state *st,
                          const char *identity, double now, double jitter01);

/* Called on the loop. The elector must not be freed from inside them; leader_release may be
 * called from them. */
struct leader_callbacks {
    void (*on_started_leading)(void *ud);
    /* Called at once when the lease is lost or released; only after on_started_leading. Stop
     * every write that needs leadership before returning. */
    void (*on_stopped_leading)(void *ud);
    /* The observed holder changed to identity (never ""), including to us. */
    void (*on_new_leader)(const char *identity, void *ud);
    void *ud;
};

struct leader_config {
    const char *namespace;       /* of the Lease; required */
    const char *name;            /* of the Lease; required */
    const char *identity;        /* holderIdentity of this candidate; required, unique per process
                                  * (leader_default_identity) */
    struct leader_timing timing; /* zero fields take the defaults */
    struct leader_callbacks callbacks;
};

/* Numbers for metrics; leader_election_master_status{name} is is_leader. */
struct leader_status {
    const char *name;             /* the Lease name (the metric's label) */
    int is_leader;                /* 1 while leading */
    const char *holder;           /* the last observed holder, "" when none or unknown */
    long transitions;             /* the last observed leaseTransitions */
    unsigned long acquisitions;   /* times this candidate started leading */
    unsigned long lost;           /* times it stopped leading without a release */
    unsigned long write_failures; /* acquire/renew writes that failed (409 included) */
    unsigned long read_failures;  /* reads that failed (404 excluded) */
};

/* Writes "<hostname>_<16 hex random digits>" into out (at least 64 bytes is plenty; truncated
 * otherwise). Returns 0, or -TELO_EIO when no random bytes could be had. */
int leader_default_identity(char *out, size_t outlen);

/* Creates an elector on t's loop. t and the callbacks' ud are borrowed and must outlive it; the
 * strings of cfg are copied. Nothing happens before leader_start. Returns NULL with err filled:
 * -TELO_EINVAL for a missing field or timing leader_timing_check rejects, or -TELO_ENOMEM. */
struct leader_elector *leader_new(struct kube_transport *t, const struct leader_config *cfg,
                                  struct telo_err *err);

/* Starts campaigning: the first attempt runs on the next loop iteration. Returns 0, or
 * -TELO_EINVAL when already started or released. */
int leader_start(struct leader_elector *el, struct telo_err *err);

/* Called once when a release ends: rc 0 when the lease was released or there was nothing to
 * release, else a negative code (followers then take over when the lease expires). */
typedef void leader_done_fn(int rc, void *ud);

/* Stops campaigning and, when this candidate leads, calls on_stopped_leading first and then
 * writes holderIdentity "" and leaseDurationSeconds 1 so a follower takes over at its next retry.
 * done (may be NULL) is called exactly once, on the loop, never from inside this call; the write
 * is abandoned after renew_deadline. Returns 0, or -TELO_EINVAL when already released. */
int leader_release(struct leader_elector *el, leader_done_fn *done, void *ud);

/* Cancels everything in flight without releasing or calling callbacks, and frees el. NULL is a
 * no-op. */
void leader_free(struct leader_elector *el);

/* 1 while this candidate leads, else 0. */
int leader_is_leader(const struct leader_elector *el);

/* Live status; the pointer stays valid for el's lifetime. */
const struct leader_status *leader_status(const struct leader_elector *el);

#endif

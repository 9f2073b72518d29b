/* What a failed or stuck pod's container statuses say went wrong, in the reference runner's
 * words: the failure message and reason of a pod, and the pieces status.c builds its own
 * messages from (a start timeout's, an Unschedulable's, an Event's). */
#ifndef TELO_SESSION_FAILURE_H
#define TELO_SESSION_FAILURE_H

#include <json.h>
#include <stddef.h>

/* Characters a container's or the pod's detail keeps in a failure message. */
#define SESSION_FAILURE_DETAIL_MAX 500

/* The failure message of a failed pod, by the reference runner's rules (init containers first,
 * then containers; state before lastState; non-zero exits; blocking waiting reasons; the pod's
 * message and reason; 500 characters at most) followed by the kubectl logs command to run.
 * Writes into out and the CamelCase reason into reason (at least 32 bytes). */
void session_failure_message(struct json_object *pod, const char *namespace, char *out, size_t len,
                             char *reason, size_t reason_len, long long *exit_code);

/* One container status' complaint (cs, an element of initContainerStatuses or
 * containerStatuses; label is "init container" or "container"): a non-zero exit or a blocking
 * wait, from state or lastState. Returns 1 and writes the complaint into out, the terminated or
 * waiting reason into *why (borrowed from cs), the exit code into *exit_code (exits only) and
 * whether it was an exit into *terminated; returns 0 when the container has no complaint. */
int session_failure_container_problem(struct json_object *cs, const char *label, char *out,
                                      size_t len, const char **why, long long *exit_code,
                                      int *terminated);

/* The pod's container statuses, the init containers' then the containers', each list in order:
 * the first for which pick(cs, init, ctx) returns non-zero (init: 1 for an init container's),
 * with its init in *init (may be NULL); NULL when none does. */
struct json_object *session_failure_find_container(struct json_object *pod,
                                                   int (*pick)(struct json_object *cs, int init,
                                                               void *ctx),
                                                   void *ctx, int *init);

/* The first container complaint of pod in that order (session_failure_container_problem, its
 * label "init container" or "container"): its container status, with out, *why, *exit_code and
 * *terminated as that function fills them and *init as above; NULL when no container has one. */
struct json_object *session_failure_first_problem(struct json_object *pod, char *out, size_t len,
                                                  const char **why, long long *exit_code,
                                                  int *terminated, int *init);

/* The session's CamelCase reason for a container complaint: init is 1 for an init container,
 * container its name, why the reason session_failure_container_problem gave. A static string. */
const char *session_failure_classify(int init, const char *container, const char *why);

/* Folds the lines and blanks of text (size bytes) into single spaces, trims it and caps it at
 * max characters (session_failure_cap). */
void session_failure_tidy(char *text, size_t size, size_t max);

/* Cuts text (size bytes) to at most max characters, then "…", never inside a UTF-8 character,
 * and drops a sequence left incomplete by an earlier snprintf. */
void session_failure_cap(char *text, size_t size, size_t max);

/* What follows a detail before the command to run: ". Run:", or " Run:" when the detail ends
 * with a full stop already. A static string. */
const char *session_failure_run_prefix(const char *detail);

#endif

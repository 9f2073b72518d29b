/* What a failed or stuck pod's container statuses say went wrong, in the reference runner's
 * words: the failure message and reason of a pod, and the pieces status.c builds its own
 * messages from. */
#include "session/failure.h"

#include "session/desired.h"
#include "util/jget.h"
#include "util/str.h"

#include <stdio.h>
#include <string.h>

/* Reasons a container waits on that are not just a stage of starting. */
static int blocking_waiting(const char *reason)
{
    return reason && strcmp(reason, "PodInitializing") != 0 &&
           strcmp(reason, "ContainerCreating") != 0;
}

/* Bytes of the UTF-8 sequence that starts with lead, or 0 when lead cannot start one. */
static size_t utf8_len(unsigned char lead)
{
    return lead < 0x80             ? 1
           : (lead & 0xe0) == 0xc0 ? 2
           : (lead & 0xf0) == 0xe0 ? 3
           : (lead & 0xf8) == 0xf0 ? 4
                                   : 0;
}

/* Cuts text (size bytes) to at most max characters, then "…", never inside a character, and
 * drops a sequence left incomplete by an earlier snprintf. */
void session_failure_cap(char *text, size_t size, size_t max)
{
    static const char ellipsis[] = "\xe2\x80\xa6";
    size_t at = 0, chars = 0, cut = 0, n;
    while (text[at]) {
        n = utf8_len((unsigned char)text[at]);
        size_t i = 1;
        while (n && i < n && ((unsigned char)text[at + i] & 0xc0) == 0x80)
            i++;
        if (n == 0 || i < n) {
            if (text[at + i] == '\0') { /* a truncated tail */
                text[at] = '\0';
                return;
            }
            n = i; /* a stray byte: count it as one character */
        }
        if (chars == max)
            cut = at;
        at += n;
        chars++;
    }
    if (chars <= max)
        return;
    /* Back off whole characters until the ellipsis fits. */
    while (cut + sizeof(ellipsis) > size && cut > 0) {
        cut--;
        while (cut > 0 && ((unsigned char)text[cut] & 0xc0) == 0x80)
            cut--;
    }
    memcpy(text + cut, ellipsis, sizeof(ellipsis));
}

/* A termination message is a file or a log tail: fold its lines into one, trim it, cap it. */
void session_failure_tidy(char *text, size_t size, size_t max)
{
    char *w = text;
    for (const char *r = text; *r;) {
        if (*r == '\n' || *r == '\r' || *r == '\t' || *r == ' ') {
            while (*r == '\n' || *r == '\r' || *r == '\t' || *r == ' ')
                r++;
            if (w != text && *r)
                *w++ = ' ';
            continue;
        }
        *w++ = *r++;
    }
    *w = '\0';
    session_failure_cap(text, size, max);
}

/* ". Run: ..." after a detail, without doubling a full stop the detail already has. */
const char *session_failure_run_prefix(const char *detail)
{
    size_t n = strlen(detail);
    return n && detail[n - 1] == '.' ? " Run:" : ". Run:";
}

/* One container status' complaint: a non-zero exit or a blocking wait, from state or lastState. */
int session_failure_container_problem(struct json_object *cs, const char *label, char *out,
                                      size_t len, const char **why, long long *exit_code,
                                      int *terminated)
{
    const char *name = util_str_or_empty(jget_string(cs, "name"));
    const char *states[] = {"state", "lastState"};
    for (int i = 0; i < 2; i++) {
        struct json_object *st = jget(cs, states[i]);
        struct json_object *term = jget(st, "terminated"), *wait = jget(st, "waiting");
        if (term) {
            int64_t code = 0;
            (void)jget_int(term, "exitCode", &code);
            if (code == 0)
                continue;
            const char *reason =
                jget_string(term, "reason") ? jget_string(term, "reason") : "Error";
            const char *msg = jget_string(term, "message");
            snprintf(out, len, "%s \"%s\" failed: %s (exit code %lld)%s%s", label, name, reason,
                     (long long)code, msg && *msg ? ": " : "", msg ? msg : "");
            *why = reason;
            *exit_code = code;
            *terminated = 1;
            return 1;
        }
        if (wait && blocking_waiting(jget_string(wait, "reason"))) {
            const char *msg = jget_string(wait, "message");
            snprintf(out, len, "%s \"%s\" waiting: %s%s%s", label, name,
                     jget_string(wait, "reason"), msg && *msg ? ": " : "", msg ? msg : "");
            *why = jget_string(wait, "reason");
            *terminated = 0;
            return 1;
        }
    }
    return 0;
}

struct json_object *session_failure_find_container(struct json_object *pod,
                                                   int (*pick)(struct json_object *cs, int init,
                                                               void *ctx),
                                                   void *ctx, int *init)
{
    static const char *const lists[] = {"initContainerStatuses", "containerStatuses"};
    struct json_object *status = jget(pod, "status");
    for (int l = 0; l < 2; l++) {
        struct json_object *arr = jget_array(status, lists[l]);
        size_t n = arr ? json_object_array_length(arr) : 0;
        for (size_t i = 0; i < n; i++) {
            struct json_object *cs = json_object_array_get_idx(arr, i);
            if (pick(cs, l == 0, ctx)) {
                if (init != NULL)
                    *init = l == 0;
                return cs;
            }
        }
    }
    return NULL;
}

struct problem {
    char *out;
    size_t len;
    const char **why;
    long long *exit_code;
    int *terminated;
};

static int pick_problem(struct json_object *cs, int init, void *ctx)
{
    struct problem *p = ctx;
    return session_failure_container_problem(cs, init ? "init container" : "container", p->out,
                                             p->len, p->why, p->exit_code, p->terminated);
}

/* out, exit_code and terminated are written through struct problem, which the check misses. */
// NOLINTBEGIN(readability-non-const-parameter)
struct json_object *session_failure_first_problem(struct json_object *pod, char *out, size_t len,
                                                  const char **why, long long *exit_code,
                                                  int *terminated, int *init)
// NOLINTEND(readability-non-const-parameter)
{
    struct problem p = {out, len, why, exit_code, terminated};
    return session_failure_find_container(pod, pick_problem, &p, init);
}

/* The session's CamelCase reason for a container complaint. */
const char *session_failure_classify(int init, const char *container, const char *why)
{
    if (why && (strcmp(why, "ErrImagePull") == 0 || strcmp(why, "ImagePullBackOff") == 0 ||
                strcmp(why, "InvalidImageName") == 0 || strcmp(why, "ErrImageNeverPull") == 0))
        return "ImagePullFailed";
    if (why && (strcmp(why, "CreateContainerConfigError") == 0 ||
                strcmp(why, "CreateContainerError") == 0))
        return "ConfigError";
    if (init)
        return strcmp(container, SESSION_INIT) == 0 ? "BundleFetchFailed" : "InitContainerFailed";
    if (why && strcmp(why, "OOMKilled") == 0)
        return "OOMKilled";
    return "AppExited";
}

void session_failure_message(struct json_object *pod, const char *namespace, char *out, size_t len,
                             char *reason, size_t reason_len, long long *exit_code)
{
    struct json_object *status = jget(pod, "status");
    const char *pod_name = util_str_or_empty(jget_string(jget(pod, "metadata"), "name"));
    const char *pod_reason = jget_string(status, "reason");
    char detail[1024] = "";
    const char *container = NULL, *why = NULL;
    int terminated = 0, init = 0;
    /* The kubelet sets the pod's reason when it ended the pod itself (DeadlineExceeded at
     * activeDeadlineSeconds, Evicted, NodeLost): its containers then show the kill (exit 137),
     * which is the consequence, not the cause. Otherwise the reference runner's order holds. */
    struct json_object *cs = pod_reason
                                 ? NULL
                                 : session_failure_first_problem(pod, detail, sizeof(detail), &why,
                                                                 exit_code, &terminated, &init);
    if (cs) {
        container = util_str_or_empty(jget_string(cs, "name"));
        snprintf(reason, reason_len, "%s", session_failure_classify(init, container, why));
    }
    if (!container) {
        snprintf(reason, reason_len, "%s", pod_reason ? pod_reason : "PodFailed");
        snprintf(detail, sizeof(detail), "%s",
                 jget_string(status, "message") ? jget_string(status, "message")
                 : pod_reason                   ? pod_reason
                                                : "pod failed");
    }
    session_failure_tidy(detail, sizeof(detail), SESSION_FAILURE_DETAIL_MAX);
    /* Logs exist only for a container that ran; a wait is explained by the pod's events. */
    if (container && terminated)
        snprintf(out, len, "%s%s kubectl logs -n %s %s -c %s", detail,
                 session_failure_run_prefix(detail), namespace, pod_name, container);
    else
        snprintf(out, len, "%s%s kubectl describe pod -n %s %s", detail,
                 session_failure_run_prefix(detail), namespace, pod_name);
}

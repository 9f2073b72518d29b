/* libFuzzer target: a TeloSession as its writer sent it (the CRD's schema may be older than
 * this operator, or the object may come from a server that never checked it), and its pod as
 * the kubelet reported it (the app chose its exit code and its termination message). The input
 * is the session's JSON, a newline, and the pod's JSON (none: no pod). The session is read by
 * the spec parser; every object the operator would apply for it is built from it, and the
 * status it would write is computed with that pod.
 *
 * Invariants: a refusal names the field ("spec..." or "metadata..."); every built object
 * serializes; names stay DNS labels of at most 63 bytes; the status has a known phase and a
 * message of at most STATUS_MESSAGE_MAX bytes, whatever the pod or the old status held. */
#include "fuzz_text.h"

#include "session/config.h"
#include "session/desired.h"
#include "session/phase.h"
#include "session/spec.h"
#include "session/status.h"
#include "util/jget.h"

#include <json.h>

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Status messages are ours, with a tenant's words (a termination message, a URL) cut to
 * SESSION_FAILURE_DETAIL_MAX characters inside them: well under this. */
#define STATUS_MESSAGE_MAX 2048

static struct json_object *parse(const char *text)
{
    struct json_tokener *tok = json_tokener_new_ex(JGET_OBJECT_MAX_DEPTH);
    if (!tok)
        return NULL;
    struct json_object *obj = json_tokener_parse_ex(tok, text, (int)strlen(text));
    if (json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(obj);
        obj = NULL;
    }
    json_tokener_free(tok);
    return obj;
}

static int is_dns_label(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 63 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n &&
           s[0] != '-' && s[n - 1] != '-';
}

static void serializes(struct json_object *obj)
{
    if (obj && !json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN))
        abort();
    json_object_put(obj);
}

static void build_children(const struct session *s, const struct session_config *cfg)
{
    const char *image = session_image(s, cfg);
    struct json_object *pod = session_desired_pod(s, cfg, image);
    if (!pod)
        abort(); /* NULL only when out of memory, which libFuzzer reports itself */
    serializes(pod);
    serializes(session_desired_service(s, cfg));
    serializes(session_desired_ingress(s, cfg));
    serializes(session_desired_secret(s, cfg,
                                      "0123456789abcdef0123456789abcdef"
                                      "0123456789abcdef0123456789abcdef"));
    struct session_limits lim;
    session_limits(s, cfg, &lim);

    char name[256];
    session_child_name(s, name, sizeof(name));
    if (!is_dns_label(name))
        abort();
    session_secret_name(s, name, sizeof(name));
    if (strlen(name) > 253)
        abort();
    char host[64];
    session_host_id(s, host, sizeof(host));
    if (!is_dns_label(host) || strlen(host) > SESSION_HOST_PREFIX_LEN + 1 + SESSION_HOST_HASH_LEN)
        abort();
}

static void compute_status(const struct session *s, const struct session_config *cfg,
                           struct json_object *pod)
{
    struct session_observation obs = {
        .s = s, .cfg = cfg, .pod = pod, .image = session_image(s, cfg), .now = 1.8e9};
    struct session_verdict v;
    if (session_status_compute(&obs, &v) != 0)
        return; /* out of memory */
    if (!v.status)
        abort();
    const char *phase = jget_string(v.status, "phase");
    if (!phase || strcmp(session_phase_name(session_phase_of(v.status)), phase) != 0)
        abort();
    const char *message = jget_string(v.status, "message");
    if (message && strlen(message) > STATUS_MESSAGE_MAX)
        abort();
    if (v.event_type && (strlen(v.event_reason) >= sizeof(v.event_reason) ||
                         strlen(v.event_message) >= sizeof(v.event_message)))
        abort();
    (void)session_status_settle(&obs, &v);
    session_verdict_release(&v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct session_config *cfg;
    if (!cfg) {
        /* Every child kind is built: an Ingress needs a base domain. */
        struct telo_err err;
        cfg = session_config_new();
        if (!cfg || session_config_set(cfg, "ingress.baseDomain=sessions.example.com", &err) < 0)
            abort();
    }
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    char *pod_text = fuzz_second_line(text);
    struct json_object *obj = parse(text);
    struct json_object *pod = pod_text ? parse(pod_text) : NULL;

    struct session s;
    struct telo_err err;
    err.msg[0] = '\0';
    if (obj && session_spec_parse(obj, &s, &err) == 0) {
        build_children(&s, cfg);
        compute_status(&s, cfg, pod);
        session_spec_release(&s);
    } else if (obj) {
        if (strncmp(err.msg, "spec", 4) != 0 && strncmp(err.msg, "metadata", 8) != 0)
            abort();
    }
    json_object_put(pod);
    json_object_put(obj);
    free(text);
    return 0;
}

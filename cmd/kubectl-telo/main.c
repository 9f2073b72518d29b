/* kubectl-telo: the kubectl plugin for Telo sessions (run a directory, attach, status, logs). */
#include "attach_cmd.h"
#include "client.h"

#include "imagebuild/bundle.h"
#include "imagebuild/pack.h"
#include "kube/objects.h"
#include "kube/status.h"
#include "session/phase.h"
#include "util/argv.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/str.h"
#include "util/url.h"

#include <errno.h>
#include <ev.h>
#include <json.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PORTS 32
#define MANAGER   "kubectl-telo"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kubectl telo COMMAND [flags]\n"
            "\n"
            "Run Telo applications as TeloSessions and use their terminal.\n"
            "\n"
            "  run DIR [--entry FILE] [--port PORT]... [--name NAME] [--no-attach]\n"
            "        pack DIR into a ConfigMap (bundle.tgz, DIR's files under app/), create the\n"
            "        TeloSession, wait until it is Running and attach to it. FILE is the\n"
            "        Application manifest, relative to DIR (default telo.yaml). PORT is 8080,\n"
            "        8080/tcp or 5353/udp; repeat --port for several. NAME defaults to DIR's\n"
            "        name.\n"
            "  attach NAME [--direct] [--via auto|direct|proxy]\n"
            "        the session's terminal in this one: detach with ctrl-p ctrl-q; exits with\n"
            "        the session's exit code when it ends. Goes through the terminal gateway\n"
            "        when the session publishes one (status.attach.url), else (or with\n"
            "        --direct) through the API server's pods/attach. --via says how to reach\n"
            "        the gateway: direct (its URL only), proxy (the API server's service proxy\n"
            "        to the gateway's Service: only the kubeconfig is needed, and RBAC get on\n"
            "        services/proxy there) or auto (default: direct when the URL answers a TCP\n"
            "        connect within 3 s, else proxy).\n"
            "  status NAME [-o json]\n"
            "        what the session reports: phase, reason, message, endpoints, exit code.\n"
            "  logs NAME [-f] [--build]\n"
            "        the session's output (its pod's log); -f follows it. With --build: the\n"
            "        log of the build of the session's image (the builder's, followed while it\n"
            "        runs; status.build names the Job), or why there is none.\n"
            "\n"
            "Flags for every command:\n"
            "  -n, --namespace NS          the namespace (default: the kubeconfig context's)\n"
            "  --kubeconfig FILE           as kubectl (default: $KUBECONFIG, ~/.kube/config)\n"
            "  --context NAME              as kubectl\n"
            "  --wait SECONDS              how long run and attach wait for Running (300);\n"
            "                              while the session's image builds they wait for the\n"
            "                              build too, up to its deadline (status.build)\n"
            "  --gateway-ca-file FILE      trust the gateway's certificate if a CA in this PEM\n"
            "                              file signed it (a private CA), not the system's CAs\n"
            "  --insecure-skip-tls-verify  do not verify the gateway's certificate\n"
            "  --token-audience AUD        when your own Kubernetes credential is used at the\n"
            "                              gateway (you may not read the session's token): the\n"
            "                              gateway's --token-audience. A ServiceAccount identity\n"
            "                              gets a token for AUD (TokenRequest, 10 min); others\n"
            "                              send their own token (default: $TELO_TOKEN_AUDIENCE)\n"
            "\n"
            "Exit status: the session's exit code for run and attach; 0 after a detach;\n"
            "1 on an error; 2 for bad usage.\n");
}

struct args {
    const char *command, *target;
    const char *kubeconfig, *context, *namespace;
    const char *entry, *name, *output, *gateway_ca_file, *token_audience;
    const char *ports[MAX_PORTS];
    int nports;
    int follow, no_attach, direct, insecure;
    int via; /* enum kt_via */
    double wait_s;
    int build; /* logs --build */
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kubectl-telo: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see kubectl telo --help)\n");
    va_end(ap);
    return -1;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof(*a));
    a->wait_s = 300;
    for (int i = 1; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        const char *s = arg.name, *v = arg.value;
        const char **value = NULL;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(s, "-f") == 0 || strcmp(s, "--follow") == 0) {
            a->follow = 1;
        } else if (strcmp(s, "--build") == 0) {
            a->build = 1;
        } else if (strcmp(s, "--no-attach") == 0) {
            a->no_attach = 1;
        } else if (strcmp(s, "--direct") == 0) {
            a->direct = 1;
        } else if (strcmp(s, "--insecure-skip-tls-verify") == 0) {
            a->insecure = 1;
        } else if (strcmp(s, "-n") == 0 || strcmp(s, "--namespace") == 0) {
            value = &a->namespace;
        } else if (strcmp(s, "--kubeconfig") == 0) {
            value = &a->kubeconfig;
        } else if (strcmp(s, "--context") == 0) {
            value = &a->context;
        } else if (strcmp(s, "--gateway-ca-file") == 0) {
            value = &a->gateway_ca_file;
        } else if (strcmp(s, "--token-audience") == 0) {
            value = &a->token_audience;
        } else if (strcmp(s, "--entry") == 0) {
            value = &a->entry;
        } else if (strcmp(s, "--name") == 0) {
            value = &a->name;
        } else if (strcmp(s, "-o") == 0 || strcmp(s, "--output") == 0) {
            value = &a->output;
        } else if (strcmp(s, "--port") == 0 || strcmp(s, "-p") == 0) {
            if (v == NULL)
                return usage_error("%s needs a value (8080, 8080/tcp or 5353/udp)", s);
            if (a->nports == MAX_PORTS)
                return usage_error("--port: at most %d ports", MAX_PORTS);
            a->ports[a->nports++] = util_arg_take(&arg, &i);
            continue;
        } else if (strcmp(s, "--via") == 0) {
            if (kt_via_parse(v, &a->via) != 0)
                return usage_error("--via needs auto, direct or proxy, got \"%s\"", v ? v : "");
            util_arg_take(&arg, &i);
            continue;
        } else if (strcmp(s, "--wait") == 0) {
            char *end = NULL;
            a->wait_s = v ? strtod(v, &end) : -1;
            if (v == NULL || end == v || *end != '\0' || a->wait_s <= 0)
                return usage_error("--wait needs a number of seconds above 0, got \"%s\"",
                                   v ? v : "");
            util_arg_take(&arg, &i);
            continue;
        } else if (s[0] == '-' && s[1] != '\0') {
            return usage_error("unknown flag %s", s);
        } else if (a->command == NULL) {
            a->command = s;
        } else if (a->target == NULL) {
            a->target = s;
        } else {
            return usage_error("unexpected argument \"%s\" after \"%s\"", s, a->target);
        }
        if (value != NULL) {
            if (v == NULL || v[0] == '\0')
                return usage_error("%s needs a value", s);
            *value = util_arg_take(&arg, &i);
        }
    }
    return 0;
}

/* ---- run ---- */

struct port {
    long port;
    const char *protocol;
};

static int parse_port(const char *s, struct port *p)
{
    char *end = NULL;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (end == s || errno != 0 || n < 1 || n > 65535)
        return -1;
    if (*end == '\0' || strcasecmp(end, "/tcp") == 0)
        p->protocol = "TCP";
    else if (strcasecmp(end, "/udp") == 0)
        p->protocol = "UDP";
    else
        return -1;
    p->port = n;
    return 0;
}

/* DIR's own name made a DNS label: "My_App" -> "my-app". */
static void name_from_dir(const char *dir, char *out, size_t len)
{
    char cwd[4096];
    char *copy = strdup(dir);
    const char *base = copy ? basename(copy) : "app";
    /* "." and ".." name the working directory and its parent: use what they stand for. */
    if ((strcmp(base, ".") == 0 || strcmp(base, "..") == 0) && getcwd(cwd, sizeof(cwd))) {
        if (strcmp(base, "..") == 0)
            *strrchr(cwd, '/') = '\0';
        base = strrchr(cwd, '/') ? strrchr(cwd, '/') + 1 : cwd;
    }
    size_t n = 0;
    for (const char *p = base; *p && n + 1 < len && n < 63; p++) {
        char c = *p;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            c = '-';
        if (c == '-' && (n == 0 || out[n - 1] == '-'))
            continue;
        out[n++] = c;
    }
    while (n > 0 && out[n - 1] == '-')
        n--;
    out[n] = '\0';
    if (n == 0)
        snprintf(out, len, "app");
    free(copy);
}

static int check_run_args(const struct args *a, struct port *ports, char *name, size_t name_len,
                          char *entry, size_t entry_len)
{
    if (a->target == NULL)
        return usage_error("run needs a directory: kubectl telo run DIR");
    struct stat st;
    if (stat(a->target, &st) != 0)
        return usage_error("run: directory %s: %s", a->target, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return usage_error("run: %s is not a directory (give the application's directory)",
                           a->target);
    for (int i = 0; i < a->nports; i++) {
        if (parse_port(a->ports[i], &ports[i]) != 0)
            return usage_error("--port \"%s\": not a port number in 1..65535 (forms: 8080, "
                               "8080/tcp, 5353/udp)",
                               a->ports[i]);
        for (int j = 0; j < i; j++)
            if (ports[j].port == ports[i].port && strcmp(ports[j].protocol, ports[i].protocol) == 0)
                return usage_error("--port \"%s\" is given twice", a->ports[i]);
    }
    if (a->name != NULL) {
        if (!util_str_dns_label(a->name, strlen(a->name)))
            return usage_error("--name \"%s\": a session name is lowercase letters, digits and "
                               "'-', starting and ending with a letter or digit, at most 63 "
                               "characters",
                               a->name);
        snprintf(name, name_len, "%s", a->name);
    } else {
        name_from_dir(a->target, name, name_len);
    }
    const char *file = a->entry ? a->entry : "telo.yaml";
    char norm[1024];
    struct telo_err err;
    if (build_bundle_path_normalise(file, norm, sizeof(norm), &err) != 0 || norm[0] == '\0')
        return usage_error("--entry \"%s\": must be a file inside the directory (%s)", file,
                           norm[0] == '\0' ? "empty path" : err.msg);
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", a->target, norm);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (a->entry)
            return usage_error("--entry: %s has no file %s", a->target, norm);
        return usage_error("run: %s has no telo.yaml; name the Application manifest with "
                           "--entry FILE",
                           a->target);
    }
    snprintf(entry, entry_len, "app/%s", norm);
    return 0;
}

static struct json_object *session_object(const char *ns, const char *name, const char *entry,
                                          const char *configmap, const struct port *ports,
                                          int nports)
{
    struct json_object *meta = json_object_new_object(), *labels = json_object_new_object();
    kube_obj_put_str(meta, "name", name);
    kube_obj_put_str(meta, "namespace", ns);
    kube_obj_put_str(labels, "app.kubernetes.io/managed-by", MANAGER);
    kube_obj_put(meta, "labels", labels);
    struct json_object *ts = kube_obj_new("telo.run/v1alpha1", "TeloSession", meta);
    struct json_object *spec = json_object_new_object(), *bundle = json_object_new_object(),
                       *cm = json_object_new_object();
    kube_obj_put_str(spec, "entry", entry);
    kube_obj_put_str(cm, "name", configmap);
    kube_obj_put(bundle, "configMap", cm);
    kube_obj_put(spec, "bundle", bundle);
    if (nports > 0) {
        struct json_object *arr = json_object_new_array();
        for (int i = 0; i < nports; i++) {
            struct json_object *p = json_object_new_object();
            kube_obj_put_int(p, "port", ports[i].port);
            kube_obj_put_str(p, "protocol", ports[i].protocol);
            kube_obj_push(arr, p);
        }
        kube_obj_put(spec, "ports", arr);
    }
    kube_obj_put(ts, "spec", spec);
    return ts;
}

static struct json_object *configmap_object(const char *ns, const char *name, const struct buf *tgz)
{
    struct json_object *meta = json_object_new_object(), *labels = json_object_new_object();
    kube_obj_put_str(meta, "name", name);
    kube_obj_put_str(meta, "namespace", ns);
    kube_obj_put_str(labels, "app.kubernetes.io/managed-by", MANAGER);
    kube_obj_put(meta, "labels", labels);
    struct json_object *cm = kube_obj_new("v1", "ConfigMap", meta);
    char *b64 = util_base64_encode(tgz->data, tgz->len, NULL);
    if (b64 == NULL) {
        json_object_put(cm);
        return NULL;
    }
    struct json_object *data = json_object_new_object();
    kube_obj_put_str(data, "bundle.tgz", b64);
    free(b64);
    kube_obj_put(cm, "binaryData", data);
    return cm;
}

static int cmd_run(struct kt *kt, const struct args *a)
{
    struct port ports[MAX_PORTS] = {{0}};
    char name[64], entry[1100], configmap[80];
    if (check_run_args(a, ports, name, sizeof(name), entry, sizeof(entry)) != 0)
        return 2;
    snprintf(configmap, sizeof(configmap), "%s-bundle", name);

    struct buf tgz;
    struct telo_err err;
    buf_init(&tgz, BUILD_PACK_CONFIGMAP_MAX);
    int rc = build_pack_dir(a->target, "app", &tgz, &err);
    if (rc != 0) {
        kt_say(stderr, "kubectl-telo: run: %s%s\n", err.msg,
               rc == -TELO_ETOOBIG ? "; a ConfigMap holds about 1 MiB: host the bundle and "
                                     "use spec.bundle.url instead"
                                   : "");
        return 1;
    }

    struct kube_ref ts_ref = kt_session_ref(kt, name);
    struct kube_ref cm_ref = {
        .version = "v1", .resource = "configmaps", .namespace = kt->namespace, .name = configmap};
    struct kt_result res;
    kt_get(kt, &ts_ref, &res);
    if (res.rc == 0) {
        kt_say(stderr,
               "kubectl-telo: run: telosession \"%s\" already exists in namespace \"%s\"; attach "
               "to it with kubectl telo attach %s, or delete it first (kubectl delete "
               "telosession %s) or pick another --name\n",
               name, kt->namespace, name, name);
        kt_result_release(&res);
        buf_release(&tgz);
        return 1;
    }
    if (res.code != 404) {
        kt_say(stderr, "kubectl-telo: run: %s\n", res.err.msg);
        buf_release(&tgz);
        return 1;
    }

    /* The bundle first, so the session finds it on its first reconcile. */
    struct json_object *cm = configmap_object(kt->namespace, configmap, &tgz);
    size_t bundle_bytes = tgz.len;
    buf_release(&tgz);
    kt_create(kt, &cm_ref, cm, &res);
    if (res.rc != 0 && res.code == 409) {
        /* A bundle left by an earlier run of ours is replaced; anyone else's is not touched. */
        kt_result_release(&res);
        kt_get(kt, &cm_ref, &res);
        const char *by = kt_str(res.obj, "metadata", "labels", "app.kubernetes.io/managed-by");
        int ours = res.rc == 0 && by && strcmp(by, MANAGER) == 0;
        kt_result_release(&res);
        if (!ours) {
            kt_say(stderr,
                   "kubectl-telo: run: ConfigMap \"%s\" already exists in namespace \"%s\" and "
                   "was not made by kubectl-telo; pick another --name\n",
                   configmap, kt->namespace);
            json_object_put(cm);
            return 1;
        }
        struct json_object *patch = json_object_new_object();
        kube_obj_put(patch, "binaryData", json_object_get(jget_object(cm, "binaryData")));
        kt_patch(kt, &cm_ref, json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN), &res);
        json_object_put(patch);
    }
    json_object_put(cm);
    if (res.rc != 0) {
        kt_say(stderr, "kubectl-telo: run: creating ConfigMap %s: %s\n", configmap, res.err.msg);
        return 1;
    }
    kt_result_release(&res);

    struct json_object *ts =
        session_object(kt->namespace, name, entry, configmap, ports, a->nports);
    kt_create(kt, &ts_ref, ts, &res);
    json_object_put(ts);
    if (res.rc != 0) {
        kt_say(stderr, "kubectl-telo: run: creating TeloSession %s: %s\n", name, res.err.msg);
        /* The bundle was made for this session only: do not leave it behind. */
        kt_delete(kt, &cm_ref, &res);
        kt_result_release(&res);
        return 1;
    }
    const char *uid = kt_str(res.obj, "metadata", "uid");
    kt_say(stderr, "kubectl-telo: telosession %s created in %s (bundle %zu bytes, entry %s)\n",
           name, kt->namespace, bundle_bytes, entry);
    /* The bundle goes when the session is deleted. */
    if (uid != NULL) {
        struct json_object *patch = json_object_new_object(), *meta = json_object_new_object(),
                           *owners = json_object_new_array();
        kube_obj_push(owners, kube_obj_owner_ref("telo.run/v1alpha1", "TeloSession", name, uid, 0));
        kube_obj_put(meta, "ownerReferences", owners);
        kube_obj_put(patch, "metadata", meta);
        struct kt_result pres;
        kt_patch(kt, &cm_ref, json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN), &pres);
        json_object_put(patch);
        if (pres.rc != 0)
            kt_say(stderr, "kubectl-telo: warning: ConfigMap %s will outlive the session: %s\n",
                   configmap, pres.err.msg);
        kt_result_release(&pres);
    }
    kt_result_release(&res);

    if (a->no_attach) {
        struct json_object *running = NULL;
        rc = kt_wait_running(kt, name, a->wait_s, &running);
        /* NULL with 0: it already ended with exit code 0, and that was said. */
        if (rc == 0 && running != NULL)
            kt_say(stderr, "kubectl-telo: session %s is Running; kubectl telo attach %s\n", name,
                   name);
        json_object_put(running);
        return rc;
    }
    struct kt_attach_flags flags = {.direct = a->direct,
                                    .insecure = a->insecure,
                                    .gateway_ca_file = a->gateway_ca_file,
                                    .token_audience = a->token_audience,
                                    .wait_s = a->wait_s,
                                    .via = a->via};
    return kt_attach(kt, name, &flags);
}

/* ---- status ---- */

static const char *or_else(const char *s, const char *fallback)
{
    return s ? s : fallback;
}

static void print_field(const char *label, const char *value)
{
    if (value != NULL && value[0] != '\0')
        kt_say(stdout, "%-12s %s\n", label, value);
}

/* GETs the TeloSession name into res; on failure says why on stderr (not found, or the
 * client's error), releases res and returns -1. */
static int kt_get_session(struct kt *kt, const char *name, struct kt_result *res)
{
    struct kube_ref ref = kt_session_ref(kt, name);
    kt_get(kt, &ref, res);
    if (res->rc == 0)
        return 0;
    if (res->code == 404)
        kt_say(stderr, "kubectl-telo: telosession \"%s\" not found in namespace \"%s\"\n", name,
               kt->namespace);
    else
        kt_say(stderr, "kubectl-telo: %s\n", res->err.msg);
    kt_result_release(res);
    return -1;
}

static int cmd_status(struct kt *kt, const struct args *a)
{
    if (a->target == NULL)
        return usage_error("status needs a session name"), 2;
    if (a->output && strcmp(a->output, "json") != 0)
        return usage_error("-o \"%s\": only json is supported", a->output), 2;
    struct kt_result res;
    if (kt_get_session(kt, a->target, &res) != 0)
        return 1;
    struct json_object *ts = res.obj;
    if (a->output) {
        struct json_object *st = jget_object(ts, "status");
        printf("%s\n", json_object_to_json_string_ext(st ? st : json_object_new_object(),
                                                      JSON_C_TO_STRING_PRETTY));
        kt_result_release(&res);
        return 0;
    }
    char line[512];
    print_field("Name:", a->target);
    print_field("Namespace:", kt->namespace);
    const char *phase = kt_str(ts, "status", "phase");
    print_field("Phase:", phase ? phase : "(none yet: is the operator running?)");
    print_field("Reason:", kt_str(ts, "status", "reason"));
    print_field("Message:", kt_str(ts, "status", "message"));
    const char *progress = kt_str(ts, "status", "progress", "message");
    if (progress) {
        snprintf(line, sizeof(line), "%s (%s)", progress,
                 or_else(kt_str(ts, "status", "progress", "phase"), "-"));
        print_field("Progress:", line);
    }
    print_field("Entry:", kt_str(ts, "spec", "entry"));
    print_field("Image:", kt_str(ts, "status", "image", "ref"));
    print_field("Pod:", kt_str(ts, "status", "podName"));
    print_field("Pod IP:", kt_str(ts, "status", "podIP"));
    struct json_object *eps = jget_array(jget(ts, "status"), "endpoints");
    if (eps != NULL) {
        for (size_t i = 0; i < json_object_array_length(eps); i++) {
            struct json_object *ep = json_object_array_get_idx(eps, i);
            long long port = 0;
            kt_int(ep, &port, "port");
            const char *url = kt_str(ep, "url");
            const char *state = kt_str(ep, "state"); /* issue 17: Reachable, Checking... */
            snprintf(line, sizeof(line), "%lld/%s%s%s%s%s%s", port,
                     or_else(kt_str(ep, "protocol"), "TCP"), url ? " " : "", url ? url : "",
                     state ? " (" : "", state ? state : "", state ? ")" : "");
            print_field(i == 0 ? "Endpoints:" : "", line);
        }
    }
    print_field("Attach:", kt_str(ts, "status", "attach", "url"));
    print_field("Started:", kt_str(ts, "status", "startTime"));
    print_field("Completed:", kt_str(ts, "status", "completionTime"));
    long long code;
    if (kt_int(ts, &code, "status", "exitCode")) {
        snprintf(line, sizeof(line), "%lld", code);
        print_field("Exit code:", line);
    }
    struct json_object *conds = jget_array(jget(ts, "status"), "conditions");
    if (conds != NULL) {
        for (size_t i = 0; i < json_object_array_length(conds); i++) {
            struct json_object *c = json_object_array_get_idx(conds, i);
            const char *reason = kt_str(c, "reason");
            snprintf(line, sizeof(line), "%s=%s%s%s", or_else(kt_str(c, "type"), "?"),
                     or_else(kt_str(c, "status"), "?"), reason ? " " : "", reason ? reason : "");
            print_field(i == 0 ? "Conditions:" : "", line);
        }
    }
    kt_result_release(&res);
    return 0;
}

/* ---- logs ---- */

/* Why session name (ts) has no build to show, on stderr. */
static void say_no_build(const char *name, struct json_object *ts)
{
    const char *reason = kt_str(ts, "status", "image", "reason");
    const char *ref = or_else(kt_str(ts, "status", "image", "ref"), "?");
    const char *phase = or_else(kt_str(ts, "status", "phase"), "none yet");
    if (reason && strcmp(reason, "CacheHit") == 0)
        kt_say(stderr,
               "kubectl-telo: session %s had no build: its image %s was in the registry "
               "already (CacheHit)\n",
               name, ref);
    else if (reason && strcmp(reason, "BaseImage") == 0)
        kt_say(stderr,
               "kubectl-telo: session %s has no build: its bundle imports nothing, so the base "
               "image %s runs as it is (BaseImage)\n",
               name, ref);
    else
        kt_say(stderr,
               "kubectl-telo: session %s has no build (phase %s): the operator builds an image "
               "only for a bundle with imports, when it is configured to (build.repository)\n",
               name, phase);
}

/* The container of a build pod whose log to show: the builder once it has started, the
 * context's delivery when that failed; NULL while neither has anything (*waiting says why). */
static const char *build_container(struct json_object *pod, const char **waiting)
{
    struct json_object *st = jget_object(pod, "status");
    struct json_object *inits = jget_array(st, "initContainerStatuses");
    for (size_t i = 0; inits && i < json_object_array_length(inits); i++) {
        struct json_object *c = json_object_array_get_idx(inits, i);
        long long code = 0;
        if (jget_string_is(c, "name", "context") &&
            kt_int(c, &code, "state", "terminated", "exitCode") && code != 0)
            return "context";
    }
    struct json_object *cs = jget_array(st, "containerStatuses");
    for (size_t i = 0; cs && i < json_object_array_length(cs); i++) {
        struct json_object *c = json_object_array_get_idx(cs, i);
        if (!jget_string_is(c, "name", "kaniko"))
            continue;
        if (jget(jget(c, "state"), "running") || jget(jget(c, "state"), "terminated"))
            return "kaniko";
        *waiting = kt_str(c, "state", "waiting", "reason");
    }
    if (!*waiting)
        *waiting = kt_str(pod, "status", "phase");
    return NULL;
}

/* The build pod of session name's build (status.build): waits for its builder to start while
 * the session builds, then follows its log. Returns the exit status. */
static int build_logs(struct kt *kt, const char *name, struct json_object *ts)
{
    char bns[256], job[256], selector[320];
    const char *ns_of = kt_str(ts, "status", "build", "namespace");
    const char *job_of = kt_str(ts, "status", "build", "job");
    if (!ns_of || !job_of || !ns_of[0] || !job_of[0]) {
        say_no_build(name, ts);
        return 1;
    }
    snprintf(bns, sizeof(bns), "%s", ns_of);
    snprintf(job, sizeof(job), "%s", job_of);
    snprintf(selector, sizeof(selector), "batch.kubernetes.io/job-name=%s", job);
    struct kube_ref pods = {.version = "v1", .resource = "pods", .namespace = bns};
    char pod[256] = "", said[1024] = "";
    const char *container = NULL;
    for (;;) {
        struct kt_result res;
        kt_list(kt, &pods, selector, 0, &res);
        if (res.rc != 0) {
            kt_say(stderr, "kubectl-telo: the pods of build Job %s/%s: %s%s\n", bns, job,
                   res.err.msg,
                   res.code == 403 ? " (reading a build's log takes list on pods and get on "
                                     "pods/log in the build namespace)"
                                   : "");
            return 1;
        }
        struct json_object *items = jget_array(res.obj, "items");
        size_t n = items ? json_object_array_length(items) : 0;
        struct json_object *item = n > 0 ? json_object_array_get_idx(items, n - 1) : NULL;
        const char *waiting = NULL, *pod_name = jget_string(jget(item, "metadata"), "name");
        if (pod_name) {
            snprintf(pod, sizeof(pod), "%s", pod_name);
            container = build_container(item, &waiting);
        }
        kt_result_release(&res);
        if (container)
            break;
        /* Nothing to read yet: wait while the session builds. */
        struct kt_result sres;
        struct kube_ref ref = kt_session_ref(kt, name);
        kt_get(kt, &ref, &sres);
        int building = sres.rc == 0 && session_phase_parse(kt_str(sres.obj, "status", "phase")) ==
                                           SESSION_PHASE_BUILDING;
        kt_result_release(&sres);
        if (!building) {
            if (pod[0])
                kt_say(stderr, "kubectl-telo: build pod %s/%s has no log (%s)\n", bns, pod,
                       waiting ? waiting : "not started");
            else
                kt_say(stderr,
                       "kubectl-telo: build Job %s/%s has no pod left (a finished Job goes "
                       "with its pod after the operator's build.ttlSecondsAfterFinished)\n",
                       bns, job);
            return 1;
        }
        char now[1024];
        snprintf(now, sizeof(now), "waiting for build pod %s/%s to start%s%s%s", bns,
                 pod[0] ? pod : job, waiting ? " (" : "", waiting ? waiting : "",
                 waiting ? ")" : "");
        if (strcmp(now, said) != 0) {
            kt_say(stderr, "kubectl-telo: %s\n", now);
            snprintf(said, sizeof(said), "%s", now);
        }
        kt_sleep(kt, 1.0);
    }
    struct buf path;
    buf_init(&path, 4096);
    buf_append_str(&path, "/api/v1/namespaces/");
    url_escape(&path, bns);
    buf_append_str(&path, "/pods/");
    url_escape(&path, pod);
    buf_append_str(&path, "/log");
    url_query_add(&path, "container", container);
    url_query_add(&path, "follow", "true");
    kt_say(stderr, "kubectl-telo: build of session %s: pod %s/%s, container %s\n", name, bns, pod,
           container);
    struct telo_err err;
    int rc = kt_stream(kt, path.data, STDOUT_FILENO, &err);
    buf_release(&path);
    if (rc != 0) {
        kt_say(stderr, "kubectl-telo: build log of %s: %s\n", name, err.msg);
        return 1;
    }
    return 0;
}

static int cmd_logs(struct kt *kt, const struct args *a)
{
    if (a->target == NULL)
        return usage_error("logs needs a session name"), 2;
    struct kt_result res;
    if (kt_get_session(kt, a->target, &res) != 0)
        return 1;
    if (a->build) {
        int rc = build_logs(kt, a->target, res.obj);
        kt_result_release(&res);
        return rc;
    }
    const char *pod = kt_str(res.obj, "status", "podName");
    if (pod == NULL) {
        const char *phase = kt_str(res.obj, "status", "phase");
        kt_say(stderr, "kubectl-telo: session %s has no pod yet (phase %s); nothing to show\n",
               a->target, phase ? phase : "unknown");
        kt_result_release(&res);
        return 1;
    }
    struct buf path;
    buf_init(&path, 4096);
    buf_append_str(&path, "/api/v1/namespaces/");
    url_escape(&path, kt->namespace);
    buf_append_str(&path, "/pods/");
    url_escape(&path, pod);
    buf_append_str(&path, "/log");
    url_query_add(&path, "container", "session");
    if (a->follow)
        url_query_add(&path, "follow", "true");
    kt_result_release(&res);
    struct telo_err err;
    int rc = kt_stream(kt, path.data, STDOUT_FILENO, &err);
    buf_release(&path);
    if (rc != 0) {
        kt_say(stderr, "kubectl-telo: logs of %s: %s\n", a->target, err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_args(argc, argv, &a) != 0)
        return 2;
    if (a.command == NULL) {
        usage(stderr);
        return 2;
    }
    int (*cmd)(struct kt *, const struct args *) = NULL;
    if (strcmp(a.command, "run") == 0)
        cmd = cmd_run;
    else if (strcmp(a.command, "attach") == 0)
        cmd = NULL;
    else if (strcmp(a.command, "status") == 0)
        cmd = cmd_status;
    else if (strcmp(a.command, "logs") == 0)
        cmd = cmd_logs;
    else if (strcmp(a.command, "help") == 0) {
        usage(stdout);
        return 0;
    } else {
        kt_say(stderr, "kubectl-telo: unknown command \"%s\" (run, attach, status, logs)\n",
               a.command);
        return 2;
    }
    if (strcmp(a.command, "attach") == 0 && a.target == NULL) {
        usage_error("attach needs a session name");
        return 2;
    }
    /* Library logs (warnings only) go to stderr; a terminal session must not be interleaved
     * with debug lines. */
    telo_log_set_level(TELO_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);

    struct ev_loop *loop = ev_default_loop(0);
    struct kt kt;
    struct telo_err err;
    if (kt_open(&kt, loop, a.kubeconfig, a.context, a.namespace, &err) != 0) {
        kt_say(stderr, "kubectl-telo: %s\n", err.msg);
        return 1;
    }
    int rc;
    if (cmd != NULL) {
        rc = cmd(&kt, &a);
    } else {
        struct kt_attach_flags flags = {.direct = a.direct,
                                        .insecure = a.insecure,
                                        .gateway_ca_file = a.gateway_ca_file,
                                        .token_audience = a.token_audience,
                                        .wait_s = a.wait_s,
                                        .via = a.via};
        rc = kt_attach(&kt, a.target, &flags);
    }
    kt_close(&kt);
    ev_loop_destroy(loop);
    return rc;
}

/* `kubectl telo attach`: the user's terminal on a session's TTY, through the gateway or the API
 * server's pods/attach. */
#include "attach_cmd.h"

#include "kube/attach.h"
#include "kube/config.h"
#include "kube/svcproxy.h"
#include "session/phase.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/jget.h"
#include "util/timefmt.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <json.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#define CONTAINER  "session" /* the session pod's container (pkg/session/desired.h) */
#define CTRL_P     0x10
#define CTRL_Q     0x11
#define INPUT_READ 4096 /* the user's input is read and forwarded this much at a time */
/* Held back while the stream is over its stdin bound (1 MiB, pkg/kube/attach.h), until under
 * half of it is queued again. */
#define RESUME_BELOW ((size_t)1 << 19)
#define PROBE_S      3.0 /* --via=auto: how long the gateway's URL has to answer a TCP connect */
/* The operator's default build.timeoutSeconds and the grace it gives a Job past it. */
#define DEFAULT_BUILD_DEADLINE_S (600.0 + 30.0)

static int is_terminal_phase(const char *phase)
{
    return session_phase_is_terminal(session_phase_parse(phase));
}

/* The exit status for a session that ended: its exit code, else 0 for Succeeded and 1. */
static int ended_status(struct json_object *ts)
{
    long long code = 0;
    if (kt_int(ts, &code, "status", "exitCode") && code >= 0 && code <= 255)
        return (int)code;
    const char *phase = kt_str(ts, "status", "phase");
    return session_phase_parse(phase) == SESSION_PHASE_SUCCEEDED ? 0 : 1;
}

static void print_ended(const char *name, struct json_object *ts)
{
    const char *reason = kt_str(ts, "status", "reason");
    const char *message = kt_str(ts, "status", "message");
    kt_say(stderr, "kubectl-telo: session %s has ended: %s%s%s%s\n", name,
           kt_str(ts, "status", "phase"), reason ? " (" : "", reason ? reason : "",
           reason ? ")" : "");
    if (message && message[0])
        kt_say(stderr, "  %s\n", message);
}

int kt_wait_running(struct kt *kt, const char *name, double timeout_s, struct json_object **session)
{
    struct kube_ref ref = kt_session_ref(kt, name);
    ev_tstamp deadline = ev_time() + timeout_s;
    int waited_for_build = 0;
    double build_seen = 0;
    char last[512] = "";
    for (;;) {
        struct kt_result res;
        kt_get(kt, &ref, &res);
        if (res.rc != 0) {
            if (res.code == 404)
                kt_say(stderr, "kubectl-telo: telosession \"%s\" not found in namespace \"%s\"\n",
                       name, kt->namespace);
            else
                kt_say(stderr, "kubectl-telo: %s\n", res.err.msg);
            return 1;
        }
        const char *phase = kt_str(res.obj, "status", "phase");
        if (session_phase_parse(phase) == SESSION_PHASE_RUNNING) {
            *session = res.obj;
            return 0;
        }
        if (is_terminal_phase(phase)) {
            print_ended(name, res.obj);
            int code = ended_status(res.obj);
            kt_result_release(&res);
            return code;
        }
        /* One line per change of what the session says it is doing. */
        const char *progress = kt_str(res.obj, "status", "progress", "message");
        const char *message = kt_str(res.obj, "status", "message");
        char now[512];
        snprintf(now, sizeof(now), "%s%s%s",
                 phase ? phase : session_phase_name(SESSION_PHASE_PENDING),
                 progress || message ? ": " : "",
                 progress  ? progress
                 : message ? message
                           : "");
        if (strcmp(now, last) != 0) {
            kt_say(stderr, "kubectl-telo: session %s: %s\n", name, now);
            snprintf(last, sizeof(last), "%s", now);
        }
        /* A build has its own deadline, which may be past ours (build.timeoutSeconds is 600 by
         * default): wait for it, then as long again as asked for the pod to start. An operator
         * that writes no status.build gets the default's (600 s and its 30 s grace) from when
         * the build was first seen. ev_time() is wall-clock time, as the deadline is. */
        double build_deadline = -1;
        if (session_phase_parse(phase) == SESSION_PHASE_BUILDING) {
            build_deadline = timefmt_parse(kt_str(res.obj, "status", "build", "deadline"));
            if (build_seen == 0)
                build_seen = ev_time();
            if (build_deadline <= 0)
                build_deadline = build_seen + DEFAULT_BUILD_DEADLINE_S;
        }
        if (build_deadline > 0 && build_deadline + timeout_s > deadline) {
            deadline = build_deadline + timeout_s;
            waited_for_build = 1;
        }
        kt_result_release(&res);
        if (ev_time() > deadline) {
            kt_say(stderr,
                   "kubectl-telo: session %s is not Running %s%.0f s%s (%s); see kubectl telo "
                   "status %s\n",
                   name, waited_for_build ? "" : "after ", timeout_s,
                   waited_for_build ? " after its build's deadline" : "", last, name);
            return 1;
        }
        kt_sleep(kt, 0.5);
    }
}

/* ---- credentials and URL ---- */

/* The session's attach token from its Secret, or NULL when it cannot be read (the user may lack
 * RBAC on Secrets: then their own bearer token is the credential). */
static char *session_token(struct kt *kt, const char *secret)
{
    struct kube_ref ref = {
        .version = "v1", .resource = "secrets", .namespace = kt->namespace, .name = secret};
    struct kt_result res;
    kt_get(kt, &ref, &res);
    const char *b64 = res.rc == 0 ? kt_str(res.obj, "data", "token") : NULL;
    char *token = NULL;
    if (b64 != NULL) {
        token = (char *)util_base64_decode(b64, strlen(b64), NULL);
    }
    kt_result_release(&res);
    return token;
}

/* ---- the way to the gateway ---- */

int kt_via_parse(const char *s, int *via)
{
    static const char *const names[] = {"auto", "direct", "proxy"};
    for (int i = 0; i < 3; i++) {
        if (s != NULL && strcmp(s, names[i]) == 0) {
            *via = i;
            return 0;
        }
    }
    return -1;
}

/* url's host (an IPv6 address without brackets) and port (the scheme's default when none) into
 * host and port. Returns 0, or -1 with why filled. */
static int host_port(const char *url, char *host, size_t hostlen, char *port, size_t portlen,
                     int *tls_out, char *why, size_t whylen)
{
    CURLU *u = curl_url();
    char *h = NULL, *p = NULL, *scheme = NULL;
    int rc = -1;
    if (u == NULL || curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK) {
        snprintf(why, whylen, "cannot parse the URL");
        goto out;
    }
    size_t n = strlen(h);
    const char *start = h;
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        start++;
        n -= 2;
    }
    snprintf(host, hostlen, "%.*s", (int)n, start);
    int tls = strcasecmp(scheme, "https") == 0 || strcasecmp(scheme, "wss") == 0;
    if (tls_out != NULL)
        *tls_out = tls;
    if (curl_url_get(u, CURLUPART_PORT, &p, 0) == CURLUE_OK)
        snprintf(port, portlen, "%s", p);
    else
        snprintf(port, portlen, "%s", tls ? "443" : "80");
    rc = 0;
out:
    curl_free(h);
    curl_free(p);
    curl_free(scheme);
    curl_url_cleanup(u);
    return rc;
}

/* Whether a TCP connection to url's host and port opens within timeout_s (every address of the
 * host together): 0, or -1 with why filled with the lookup's or the connect's error or the
 * timeout. It blocks (the command has nothing else to do yet) and sends nothing: the gateway sees
 * a connection that closes before its request. */
static int probe(const char *url, double timeout_s, char *why, size_t whylen)
{
    char host[256], port[16];
    if (host_port(url, host, sizeof(host), port, sizeof(port), NULL, why, whylen) != 0)
        return -1;
    struct addrinfo hints, *addrs = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
    int gai = getaddrinfo(host, port, &hints, &addrs);
    if (gai != 0 || addrs == NULL) {
        snprintf(why, whylen, "cannot resolve %s: %s", host,
                 gai != 0 ? gai_strerror(gai) : "no address");
        if (addrs != NULL)
            freeaddrinfo(addrs);
        return -1;
    }
    ev_tstamp deadline = ev_time() + timeout_s;
    int rc = -1;
    snprintf(why, whylen, "no TCP answer from %s port %s within %.0f s", host, port, timeout_s);
    for (struct addrinfo *ai = addrs; ai != NULL && rc != 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            continue;
        }
        int error = 0;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            error = errno;
            if (error == EINPROGRESS) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                double left = deadline - ev_time();
                int ready = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
                socklen_t elen = sizeof(error);
                if (ready <= 0)
                    error = ETIMEDOUT;
                else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &elen) != 0)
                    error = errno;
            }
        }
        close(fd);
        if (error == 0)
            rc = 0;
        else if (error == ETIMEDOUT)
            snprintf(why, whylen, "no TCP answer from %s port %s within %.0f s", host, port,
                     timeout_s);
        else
            snprintf(why, whylen, "cannot connect to %s port %s: %s", host, port, strerror(error));
        if (ev_time() >= deadline)
            break;
    }
    freeaddrinfo(addrs);
    return rc;
}

/* Whether the user's own kubeconfig credential may go to url itself: over TLS, or to this
 * machine (a port-forward). It opens whatever the user may open in the cluster, and the URL is
 * the session's status: a name that resolves to another host here (a search domain, a hijacking
 * resolver, another cluster's gateway under the chart's default name) would get it in clear. */
static int own_credential_may_go_to(const char *url)
{
    char host[256], port[16], why[64];
    int tls = 0;
    if (host_port(url, host, sizeof(host), port, sizeof(port), &tls, why, sizeof(why)) != 0)
        return 0;
    if (tls || strcasecmp(host, "localhost") == 0)
        return 1;
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1)
        return a[0] == 127;
    return inet_pton(AF_INET6, host, a) == 1 && IN6_IS_ADDR_LOOPBACK((struct in6_addr *)a);
}

/* Whether the user may get services/proxy with the resource name "SCHEME:NAME:PORT" of svc: 1
 * yes, 0 no, -1 unknown (the review failed). */
static int may_proxy(struct kt *kt, const struct kube_service_url *svc)
{
    char name[160];
    snprintf(name, sizeof(name), "%s:%s:%d", svc->scheme, svc->name, svc->port);
    struct kube_ref ref = {
        .group = "authorization.k8s.io", .version = "v1", .resource = "selfsubjectaccessreviews"};
    struct json_object *body = json_object_new_object(), *spec = json_object_new_object(),
                       *attrs = json_object_new_object();
    json_object_object_add(attrs, "namespace", json_object_new_string(svc->namespace));
    json_object_object_add(attrs, "verb", json_object_new_string("get"));
    json_object_object_add(attrs, "resource", json_object_new_string("services"));
    json_object_object_add(attrs, "subresource", json_object_new_string("proxy"));
    json_object_object_add(attrs, "name", json_object_new_string(name));
    json_object_object_add(spec, "resourceAttributes", attrs);
    json_object_object_add(body, "apiVersion", json_object_new_string("authorization.k8s.io/v1"));
    json_object_object_add(body, "kind", json_object_new_string("SelfSubjectAccessReview"));
    json_object_object_add(body, "spec", spec);
    struct kt_result res;
    kt_create(kt, &ref, body, &res);
    json_object_put(body);
    int allowed = 0;
    int known = res.rc == 0 && jget_bool(jget(res.obj, "status"), "allowed", &allowed) == 0;
    kt_result_release(&res);
    return known ? (allowed != 0) : -1;
}

/* Says that neither way to the gateway worked, what each attempt met, and what to check. direct
 * is what the direct attempt met (NULL: not tried); proxy_what what the proxy attempt met. */
static void print_no_way(struct kt *kt, const char *name, const char *gateway_url,
                         const char *direct, const char *proxy_what)
{
    struct kube_service_url svc;
    struct telo_err err;
    int is_svc = kube_service_url_parse(gateway_url, &svc, &err) == 0;
    kt_say(stderr, "kubectl-telo: cannot reach the gateway of session %s:\n", name);
    kt_say(stderr, "  directly at %s: %s\n", gateway_url,
           direct != NULL ? direct : "not tried (--via=proxy)");
    kt_say(stderr, "  through the API server's service proxy: %s\n", proxy_what);
    if (is_svc) {
        kt_say(stderr,
               "  check: that you may get services/proxy there (kubectl auth can-i get "
               "services/%s:%s:%d --subresource=proxy -n %s; the chart's gateway-proxy Role "
               "grants it), and that the gateway Service %s/%s exists with a Ready pod "
               "(kubectl get endpoints %s -n %s)\n",
               svc.scheme, svc.name, svc.port, svc.namespace, svc.namespace, svc.name, svc.name,
               svc.namespace);
    }
    kt_say(stderr,
           "  or attach without the gateway: kubectl telo attach %s%s%s --direct (the API "
           "server's pods/attach)\n",
           name, strcmp(kt->namespace, kt->cfg->namespace) ? " -n " : "",
           strcmp(kt->namespace, kt->cfg->namespace) ? kt->namespace : "");
}

/* What a failed attempt through the service proxy met, in words: the HTTP refusal and who sent
 * it (a SelfSubjectAccessReview tells the API server's 403 from the gateway's), else err. */
static void proxy_failure(struct kt *kt, const char *gateway_url, long http_status, const char *err,
                          char *out, size_t outlen)
{
    struct kube_service_url svc;
    struct telo_err perr;
    int is_svc = kube_service_url_parse(gateway_url, &svc, &perr) == 0;
    if (http_status == 403 && is_svc && may_proxy(kt, &svc) == 0)
        snprintf(out, outlen,
                 "HTTP 403 from the API server: you may not get services/proxy \"%s:%s:%d\" in "
                 "namespace %s",
                 svc.scheme, svc.name, svc.port, svc.namespace);
    else if (http_status == 401 || http_status == 403)
        snprintf(out, outlen, "HTTP %ld from the gateway (%s)", http_status,
                 http_status == 401 ? "the credential was not accepted"
                                    : "not allowed to attach to this session");
    else if ((http_status == 404 || http_status == 503) && is_svc)
        snprintf(out, outlen, "HTTP %ld: no Service %s/%s with port %d, or no Ready pod behind it",
                 http_status, svc.namespace, svc.name, svc.port);
    else if (http_status != 0)
        snprintf(out, outlen, "HTTP %ld", http_status);
    else
        snprintf(out, outlen, "%s", err);
}

/* ---- the terminal ---- */

struct session {
    struct kt *kt;
    const char *name;
    int via_gateway;
    int via_proxy; /* the gateway through the API server's service proxy */
    int opened;    /* the upgrade succeeded */
    struct kube_attach *attach;
    int tty;
    struct termios saved;
    int raw;
    int held_ctrl_p; /* a ctrl-p was read last: a ctrl-q next detaches */
    int detached;
    int ended;
    int end_rc;
    long http_status;
    int have_status;
    struct kube_exit_status exit;
    struct telo_err err;
    ev_io in;
    ev_signal winch;
    ev_timer resume;
    /* Input the stream refused, sent first once it drains: one forward()'s worth at most. */
    unsigned char refused[INPUT_READ + 1];
    size_t refused_len;
};

static void raw_mode(struct session *s)
{
    struct termios t;
    if (tcgetattr(STDIN_FILENO, &s->saved) != 0)
        return;
    t = s->saved;
    /* What cfmakeraw does (a BSD extension): bytes pass through unprocessed, no echo, no
     * signals from ctrl-c, so the session's own TTY does all of that. */
    t.c_iflag &= ~(tcflag_t)(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
    t.c_oflag &= ~(tcflag_t)OPOST;
    t.c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
    t.c_cflag &= ~(tcflag_t)(CSIZE | PARENB);
    t.c_cflag |= CS8;
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0)
        s->raw = 1;
}

static void restore_mode(struct session *s)
{
    if (s->raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &s->saved);
    s->raw = 0;
}

static void send_size(struct session *s, int nudge)
{
    struct winsize ws;
    if (!s->tty || ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 || ws.ws_row == 0)
        return;
    /* kubectl attach sends one more row and column first, so a full-screen app that already had
     * this size still sees a change and redraws. */
    if (nudge)
        kube_attach_resize(s->attach, ws.ws_col + 1u, ws.ws_row + 1u);
    kube_attach_resize(s->attach, ws.ws_col, ws.ws_row);
}

static void write_all(int fd, const unsigned char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the user's terminal is gone; the session goes on without us */
        p += n;
        len -= (size_t)n;
    }
}

static void on_open(struct kube_attach *a, const char *protocol, void *ud)
{
    (void)a;
    (void)protocol;
    struct session *s = ud;
    s->opened = 1;
    /* Raw mode is on: end lines with CR LF ourselves. */
    fprintf(stderr, "kubectl-telo: attached to %s (%s)%s\r\n", s->name,
            s->via_proxy     ? "gateway, through the API server's service proxy"
            : s->via_gateway ? "gateway"
                             : "API server pods/attach",
            s->tty ? "; detach with ctrl-p ctrl-q" : "");
    send_size(s, 1);
    ev_io_start(s->kt->loop, &s->in);
    if (s->tty)
        ev_signal_start(s->kt->loop, &s->winch);
}

static void on_output(struct kube_attach *a, int channel, const unsigned char *data, size_t len,
                      void *ud)
{
    (void)a;
    (void)ud;
    write_all(channel == KUBE_CHANNEL_STDERR ? STDERR_FILENO : STDOUT_FILENO, data, len);
}

static void stop_watchers(struct session *s)
{
    ev_io_stop(s->kt->loop, &s->in);
    ev_signal_stop(s->kt->loop, &s->winch);
    ev_timer_stop(s->kt->loop, &s->resume);
}

static void on_end(struct kube_attach *a, const struct kube_attach_end *end, void *ud)
{
    (void)a;
    struct session *s = ud;
    s->ended = 1;
    s->end_rc = end->rc;
    s->http_status = end->http_status;
    s->have_status = end->have_status;
    s->exit = end->exit;
    if (end->rc != 0 && end->err != NULL)
        s->err = *end->err;
    stop_watchers(s);
}

/* Sends bytes typed by the user, holding back the detach sequence ctrl-p ctrl-q. */
static void forward(struct session *s, const unsigned char *p, size_t n)
{
    /* n bytes, and a ctrl-p held back from the previous read. */
    unsigned char out[INPUT_READ + 1];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->held_ctrl_p) {
            s->held_ctrl_p = 0;
            if (p[i] == CTRL_Q && s->tty) {
                s->detached = 1;
                break;
            }
            out[m++] = CTRL_P;
        }
        if (p[i] == CTRL_P && s->tty) {
            s->held_ctrl_p = 1;
            continue;
        }
        out[m++] = p[i];
    }
    if (m > 0 && kube_attach_write(s->attach, out, m) == -TELO_ETOOBIG) {
        /* The server is not reading: stop reading the user's input until it drains, and keep
         * what it refused (input piped in, a paste) to send first then, not lose it. */
        memcpy(s->refused, out, m);
        s->refused_len = m;
        ev_io_stop(s->kt->loop, &s->in);
        ev_timer_start(s->kt->loop, &s->resume);
    }
    if (s->detached)
        stop_watchers(s);
}

static void stdin_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct session *s = w->data;
    unsigned char buf[INPUT_READ];
    ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        /* End of input (a pipe): the process sees EOF on v5; keep showing its output. */
        ev_io_stop(loop, w);
        kube_attach_close_stdin(s->attach);
        return;
    }
    forward(s, buf, (size_t)n);
}

static void winch_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    send_size(w->data, 0);
}

static void resume_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct session *s = w->data;
    if (kube_attach_queued(s->attach) >= RESUME_BELOW)
        return;
    /* Under half of the bound queued, so the few KiB refused fit; a refusal again (the bound
     * lowered one day) waits for the next tick rather than losing them. */
    if (s->refused_len > 0 &&
        kube_attach_write(s->attach, s->refused, s->refused_len) == -TELO_ETOOBIG)
        return;
    s->refused_len = 0;
    ev_timer_stop(loop, w);
    ev_io_start(loop, &s->in);
}

/* After a stream that ended without an exit Status (pods/attach reports none for attach): the
 * session's own record says how the app ended, once the operator has seen it. */
static int exit_from_session(struct kt *kt, const char *name)
{
    struct kube_ref ref = kt_session_ref(kt, name);
    for (int i = 0; i < 60; i++) {
        struct kt_result res;
        kt_get(kt, &ref, &res);
        const char *phase = res.rc == 0 ? kt_str(res.obj, "status", "phase") : NULL;
        if (res.rc == 0 && is_terminal_phase(phase)) {
            int code = ended_status(res.obj);
            kt_result_release(&res);
            return code;
        }
        kt_result_release(&res);
        if (res.code == 404)
            return 0; /* deleted: nothing more to learn */
        kt_sleep(kt, 0.5);
    }
    kt_say(stderr,
           "kubectl-telo: the attach stream of %s closed while the session is still "
           "running; reattach with kubectl telo attach %s\n",
           name, name);
    return 1;
}

/* A token of the user's own identity for audience: when the kubeconfig's user is a
 * ServiceAccount (SelfSubjectReview says so) and may create a token for itself, a TokenRequest
 * for audience (10 minutes; the gateway re-authorizes open streams, so a stream outliving it
 * is closed then). NULL when that is impossible: the caller sends the kubeconfig's token. */
static char *audience_token(struct kt *kt, const char *audience)
{
    struct kube_ref who = {
        .group = "authentication.k8s.io", .version = "v1", .resource = "selfsubjectreviews"};
    struct json_object *body = json_object_new_object();
    json_object_object_add(body, "apiVersion", json_object_new_string("authentication.k8s.io/v1"));
    json_object_object_add(body, "kind", json_object_new_string("SelfSubjectReview"));
    struct kt_result res;
    kt_create(kt, &who, body, &res);
    json_object_put(body);
    const char *user = res.rc == 0 ? kt_str(res.obj, "status", "userInfo", "username") : NULL;
    static const char prefix[] = "system:serviceaccount:";
    char ns[254] = "", sa[254] = "";
    if (user != NULL && strncmp(user, prefix, sizeof(prefix) - 1) == 0) {
        const char *rest = user + sizeof(prefix) - 1, *colon = strchr(rest, ':');
        if (colon != NULL && (size_t)(colon - rest) < sizeof(ns) &&
            strlen(colon + 1) < sizeof(sa)) {
            snprintf(ns, sizeof(ns), "%.*s", (int)(colon - rest), rest);
            snprintf(sa, sizeof(sa), "%s", colon + 1);
        }
    }
    kt_result_release(&res);
    if (ns[0] == '\0' || sa[0] == '\0')
        return NULL;
    struct kube_ref ref = {.version = "v1",
                           .resource = "serviceaccounts",
                           .subresource = "token",
                           .namespace = ns,
                           .name = sa};
    struct json_object *req = json_object_new_object(), *spec = json_object_new_object(),
                       *auds = json_object_new_array();
    json_object_array_add(auds, json_object_new_string(audience));
    json_object_object_add(spec, "audiences", auds);
    json_object_object_add(spec, "expirationSeconds", json_object_new_int(600));
    json_object_object_add(req, "apiVersion", json_object_new_string("authentication.k8s.io/v1"));
    json_object_object_add(req, "kind", json_object_new_string("TokenRequest"));
    json_object_object_add(req, "spec", spec);
    kt_create(kt, &ref, req, &res);
    json_object_put(req);
    const char *tok = res.rc == 0 ? kt_str(res.obj, "status", "token") : NULL;
    char *token = tok != NULL && tok[0] != '\0' ? strdup(tok) : NULL;
    if (res.rc != 0)
        kt_say(stderr,
               "kubectl-telo: cannot get a token for audience \"%s\" as %s/%s (%s); sending "
               "your own token\n",
               audience, ns, sa, res.err.msg);
    kt_result_release(&res);
    return token;
}

static char *pod_attach_url(struct kt *kt, const char *pod)
{
    struct buf b;
    buf_init(&b, 4096);
    if (kube_attach_pod_url(kt->cfg->server, kt->namespace, pod, CONTAINER, &b, NULL) != 0) {
        buf_release(&b);
        return NULL;
    }
    return buf_steal(&b);
}

struct cred_wait {
    int done, rc;
    struct telo_err err;
};

static void creds_done(int rc, const struct telo_err *err, void *ud)
{
    struct cred_wait *w = ud;
    w->done = 1;
    w->rc = rc;
    if (rc < 0)
        w->err = *err;
}

/* Makes the kubeconfig's credentials ready the way the gateway does: an exec plugin runs as a
 * child the loop watches (kube_config_fetch_credentials), so that kube_attach_open and
 * kube_config_token find the credential cached and run nothing themselves. Returns 0, or a
 * negative code with err filled when the plugin failed or could not start. */
static int credentials_ready(struct kt *kt, struct telo_err *err)
{
    struct cred_wait w = {0};
    struct kube_execcred_wait *wait = NULL;
    int rc = kube_config_fetch_credentials(kt->cfg, kt->loop, creds_done, &w, &wait, err);
    if (rc <= 0)
        return rc;
    while (!w.done)
        ev_run(kt->loop, EVRUN_ONCE);
    if (w.rc < 0)
        *err = w.err;
    return w.rc;
}

/* Where kt_attach connects and with what, as attach_target and choose_way decide it. */
struct attach_plan {
    char *url;         /* what kube_attach_open connects to */
    char *token;       /* the session token, or the user's own for a gateway; NULL: none */
    char *gateway_url; /* through the service proxy: the gateway's own URL (url is the proxy's) */
    int via_gateway;
    int via_proxy; /* the gateway through the API server's service proxy */
    /* What the direct attempt met, for print_no_way: NULL when --via=proxy did not try it. It
     * points into kt_attach's buffer: the probe writing into the plan itself would hide from
     * clang-analyzer what the plan owns. */
    const char *direct_seen;
};

static void plan_release(struct attach_plan *p)
{
    free(p->url);
    if (p->token != NULL)
        OPENSSL_cleanse(p->token, strlen(p->token));
    free(p->token);
    free(p->gateway_url);
}

/* How long attach waits for the operator to answer spec.attachToken with the Secret, in polls
 * TOKEN_POLL_S apart. */
#define TOKEN_WAIT_S 30
#define TOKEN_POLL_S 0.25

/* Whether the kubeconfig's own identity comes with a bearer token the gateway could check. A
 * client certificate (kind's and kubeadm's admin) does not: the gateway sees no certificate. */
static int has_bearer_token(struct kt *kt)
{
    struct telo_err err;
    const char *own = NULL;
    return credentials_ready(kt, &err) == 0 && kube_config_token(kt->cfg, &own, &err) == 0 &&
           own != NULL && own[0] != '\0';
}

/* Asks the operator for session name's attach token (spec.attachToken, issue 20: the Secret is
 * made only when asked) and waits for status.attach.secretName. Returns its name (the caller
 * frees it), or NULL having said why and what to do instead. */
static char *request_token_secret(struct kt *kt, const char *name)
{
    struct kube_ref ref = kt_session_ref(kt, name);
    struct kt_result res;
    kt_patch(kt, &ref, "{\"spec\":{\"attachToken\":true}}", &res);
    if (res.rc != 0) {
        kt_say(stderr,
               "kubectl-telo: the gateway needs a bearer token; your kubeconfig has none (a "
               "client certificate?) and setting spec.attachToken on session %s to get the "
               "session's was refused: %s. Attach through the API server with --direct, or ask "
               "for patch on telosessions in namespace %s\n",
               name, res.err.msg, kt->namespace);
        kt_result_release(&res);
        return NULL;
    }
    kt_result_release(&res);
    for (int poll = 0; poll < (int)(TOKEN_WAIT_S / TOKEN_POLL_S); poll++) {
        kt_get(kt, &ref, &res);
        const char *secret = res.rc == 0 ? kt_str(res.obj, "status", "attach", "secretName") : NULL;
        char *copy = secret ? strdup(secret) : NULL;
        kt_result_release(&res);
        if (copy)
            return copy;
        kt_sleep(kt, TOKEN_POLL_S);
    }
    kt_say(stderr,
           "kubectl-telo: session %s has spec.attachToken set but no status.attach.secretName "
           "after %ds: is the operator running? (kubectl describe telosession %s -n %s)\n",
           name, TOKEN_WAIT_S, name, kt->namespace);
    return NULL;
}

/* Waits for session name to be Running and takes from its status where to attach: the
 * gateway's URL with the session token, else (--direct, or no gateway) the API server's
 * pods/attach of its pod. Returns 0, with p->url NULL when the session ended with exit code 0
 * (said so), or the exit code having said why. */
static int attach_target(struct kt *kt, const char *name, const struct kt_attach_flags *flags,
                         struct attach_plan *p)
{
    struct json_object *ts = NULL;
    int rc = kt_wait_running(kt, name, flags->wait_s, &ts);
    if (rc != 0 || ts == NULL) /* ts NULL: it ended with exit code 0, nothing to attach to */
        return rc;
    const char *gateway = flags->direct ? NULL : kt_str(ts, "status", "attach", "url");
    p->via_gateway = gateway != NULL;
    const char *secret = kt_str(ts, "status", "attach", "secretName");
    const char *pod = kt_str(ts, "status", "podName");
    if (gateway != NULL) {
        char *asked = NULL;
        if (secret == NULL && !has_bearer_token(kt)) {
            if (!(asked = request_token_secret(kt, name))) {
                json_object_put(ts);
                return 1;
            }
            secret = asked;
        }
        p->url = strdup(gateway);
        p->token = secret ? session_token(kt, secret) : NULL;
        free(asked);
    } else if (pod != NULL) {
        p->url = pod_attach_url(kt, pod);
    } else {
        kt_say(stderr, "kubectl-telo: session %s is Running but names no pod in its status\n",
               name);
        json_object_put(ts);
        return 1;
    }
    json_object_put(ts);
    if (p->url == NULL) {
        kt_say(stderr, "kubectl-telo: out of memory\n");
        return 1;
    }
    return 0;
}

/* The user's own credential for a gateway when the session token could not be read, or NULL;
 * *bound says whether it is a token for the gateway's audience only. */
static char *own_token(struct kt *kt, const struct kt_attach_flags *flags, int *bound)
{
    /* A gateway run with --token-audience accepts only tokens issued for it. */
    const char *audience =
        flags->token_audience != NULL ? flags->token_audience : getenv("TELO_TOKEN_AUDIENCE");
    char *token = NULL;
    if (audience != NULL && audience[0] != '\0')
        token = audience_token(kt, audience);
    *bound = token != NULL;
    struct telo_err terr;
    const char *own = NULL;
    if (token == NULL && kube_config_token(kt->cfg, &own, &terr) == 0 && own != NULL)
        token = strdup(own);
    return token;
}

/* The way to the gateway: its URL is often an in-cluster Service name, which resolves only
 * inside the cluster; the API server's service proxy reaches the same Service with nothing
 * but the kubeconfig. Sets p->via_proxy and, then, p->url to the proxy's URL for the gateway's
 * (kept in p->gateway_url); why gets what a failed probe met. Returns 0, or 1 having said why. */
static int choose_way(struct kt *kt, const char *name, const struct kt_attach_flags *flags,
                      struct attach_plan *p, char *why, size_t whylen)
{
    p->direct_seen = flags->via == KT_VIA_PROXY ? NULL : why;
    /* Without the session's token the user's own goes; one bound to the gateway's audience
     * opens nothing else, the kubeconfig's opens everything the user may. */
    int own_in_clear = 0;
    if (p->via_gateway && p->token == NULL) {
        struct telo_err err;
        if (credentials_ready(kt, &err) != 0) {
            kt_say(stderr, "kubectl-telo: %s\n", err.msg);
            return 1;
        }
        int bound = 0;
        p->token = own_token(kt, flags, &bound);
        own_in_clear = p->token != NULL && !bound && !own_credential_may_go_to(p->url);
    }
    if (own_in_clear && flags->via == KT_VIA_DIRECT) {
        kt_say(stderr,
               "kubectl-telo: --via=direct would send your kubeconfig's credential to %s over "
               "plain HTTP; attach with --via=proxy (the API server's service proxy), give the "
               "gateway an https URL, or a token for the gateway's audience (--token-audience)\n",
               p->url);
        return 1;
    }
    if (own_in_clear && flags->via == KT_VIA_AUTO) {
        kt_say(stderr,
               "kubectl-telo: not sending your kubeconfig's credential to %s over plain HTTP; "
               "going through the API server's service proxy\n",
               p->url);
        p->direct_seen = NULL;
        p->via_proxy = 1;
    } else if (p->via_gateway && flags->via != KT_VIA_PROXY &&
               probe(p->url, PROBE_S, why, whylen) != 0) {
        if (flags->via == KT_VIA_DIRECT) {
            kt_say(stderr,
                   "kubectl-telo: cannot reach the gateway at %s: %s (--via=direct); from "
                   "outside the cluster network --via=proxy (or auto, the default) goes through "
                   "the API server's service proxy with your kubeconfig\n",
                   p->url, why);
            return 1;
        }
        kt_say(stderr,
               "kubectl-telo: the gateway at %s is not reachable from here (%s); going through "
               "the API server's service proxy\n",
               p->url, why);
        p->via_proxy = 1;
    } else if (p->via_gateway && flags->via == KT_VIA_PROXY) {
        p->via_proxy = 1;
    }
    if (!p->via_proxy)
        return 0;
    struct buf b;
    struct telo_err perr;
    buf_init(&b, 16384);
    if (kube_service_proxy_url(kt->cfg->server, p->url, &b, &perr) != 0) {
        buf_release(&b);
        print_no_way(kt, name, p->url, p->direct_seen, perr.msg);
        return 1;
    }
    p->gateway_url = p->url;
    p->url = buf_steal(&b);
    if (p->url == NULL) {
        kt_say(stderr, "kubectl-telo: out of memory\n");
        return 1;
    }
    return 0;
}

/* Opens s->attach the way p says. The token is cleansed and freed once the stream is open or
 * refused. Returns 0, or 1 having said why. */
static int open_attach(struct kt *kt, const char *name, const struct kt_attach_flags *flags,
                       struct attach_plan *p, struct session *s)
{
    /* Through the gateway the session token is the credential (or, when the user may not read
     * the Secret, their own token, which the gateway checks with TokenReview); its TLS is not
     * the API server's, so the kubeconfig's CA does not apply. Through the service proxy the
     * kubeconfig's credential and TLS are the API server's, which removes the Authorization
     * header it authenticated: the gateway's token goes as the bearer subprotocol, which the
     * gateway reads and the API server passes on (it reads that subprotocol only from a request
     * no client certificate or Authorization header authenticated). */
    int direct_gw = p->via_gateway && !p->via_proxy;
    struct kube_attach_opts opts = {.url = p->url,
                                    .cfg = direct_gw ? NULL : kt->cfg,
                                    .token = p->via_proxy ? NULL : p->token,
                                    .ca_file = direct_gw ? flags->gateway_ca_file : NULL,
                                    .insecure_skip_tls_verify = p->via_proxy ? 0 : flags->insecure,
                                    .user_agent = "kubectl-telo/" TELO_VERSION,
                                    .protocol_token = p->via_proxy ? p->token : NULL};
    struct telo_err err;
    if ((!direct_gw || p->token == NULL) && credentials_ready(kt, &err) != 0) {
        kt_say(stderr, "kubectl-telo: %s\n", err.msg);
        return 1;
    }
    struct kube_attach_callbacks cb = {
        .on_open = on_open, .on_output = on_output, .on_end = on_end};
    s->attach = kube_attach_open(kt->loop, &opts, &cb, s, &err);
    if (p->token != NULL) {
        OPENSSL_cleanse(p->token, strlen(p->token));
        free(p->token);
        p->token = NULL;
    }
    if (s->attach == NULL) {
        if (p->via_proxy)
            print_no_way(kt, name, p->gateway_url, p->direct_seen, err.msg);
        else
            kt_say(stderr, "kubectl-telo: %s\n", err.msg);
        return 1;
    }
    free(p->url);
    p->url = NULL;
    return 0;
}

/* Runs the loop until the stream ends or the user detaches, the terminal raw meanwhile. */
static void run_attach(struct kt *kt, struct session *s)
{
    if (s->tty)
        raw_mode(s);
    while (!s->ended && !s->detached)
        ev_run(kt->loop, EVRUN_ONCE);
    restore_mode(s);
    stop_watchers(s);
    kube_attach_free(s->attach);
}

/* Says why a stream that did not go through the service proxy failed. */
static void print_attach_error(const struct session *s)
{
    if (s->http_status == 401 || s->http_status == 403)
        kt_say(stderr, "kubectl-telo: %s refused the attach with HTTP %ld (%s)\n",
               s->via_gateway ? "the gateway" : "the API server", s->http_status,
               s->http_status == 401 ? "the credential was not accepted"
                                     : "not allowed to attach to this session");
    else
        kt_say(stderr, "kubectl-telo: %s\n", s->err.msg);
    /* A refused certificate is reported only as an SSL error: say what the user can do. */
    if (s->via_gateway && s->http_status == 0 && strstr(s->err.msg, "SSL") != NULL)
        kt_say(stderr, "kubectl-telo: the gateway's TLS certificate could not be verified: pass "
                       "--gateway-ca-file with the CA that signed it (or "
                       "--insecure-skip-tls-verify to skip the check)\n");
}

/* The exit code of an attach that has ended, having said what the user needs to know. */
static int attach_result(struct kt *kt, const char *name, const struct attach_plan *p,
                         const struct session *s)
{
    if (s->detached) {
        fprintf(stderr,
                "\r\nkubectl-telo: detached; session %s goes on (kubectl telo attach %s%s%s "
                "to come back)\n",
                name, name, strcmp(kt->namespace, kt->cfg->namespace) ? " -n " : "",
                strcmp(kt->namespace, kt->cfg->namespace) ? kt->namespace : "");
        return 0;
    }
    if (s->end_rc != 0 && p->via_proxy && !s->opened) {
        char what[512];
        proxy_failure(kt, p->gateway_url, s->http_status, s->err.msg, what, sizeof(what));
        print_no_way(kt, name, p->gateway_url, p->direct_seen, what);
        return 1;
    }
    if (s->end_rc != 0) {
        print_attach_error(s);
        return 1;
    }
    /* The gateway reports the app's exit in the Status. The API server's attach reports only how
     * the stream went (Success when the container ended, whatever its code), so there the
     * session's record has the exit code. */
    if (s->have_status && s->exit.code > 0)
        return s->exit.code;
    if (s->have_status && s->exit.code == 0 && s->via_gateway)
        return 0;
    if (s->have_status && s->exit.code < 0) {
        kt_say(stderr, "kubectl-telo: session %s: %s%s%s\n", name, s->exit.reason,
               s->exit.message[0] ? ": " : "", s->exit.message);
        return 1;
    }
    return exit_from_session(kt, name);
}

int kt_attach(struct kt *kt, const char *name, const struct kt_attach_flags *flags)
{
    struct attach_plan p = {0};
    char direct_why[320] = "";
    int rc = attach_target(kt, name, flags, &p);
    if (rc == 0 && p.url == NULL) /* it ended with exit code 0 before it could be attached to */
        return 0;
    if (rc == 0)
        rc = choose_way(kt, name, flags, &p, direct_why, sizeof(direct_why));
    if (rc != 0) {
        plan_release(&p);
        return rc;
    }
    struct session s = {.kt = kt,
                        .name = name,
                        .via_gateway = p.via_gateway,
                        .via_proxy = p.via_proxy,
                        .tty = isatty(STDIN_FILENO)};
    ev_io_init(&s.in, stdin_cb, STDIN_FILENO, EV_READ);
    s.in.data = &s;
    ev_signal_init(&s.winch, winch_cb, SIGWINCH);
    s.winch.data = &s;
    ev_timer_init(&s.resume, resume_cb, 0.05, 0.05);
    s.resume.data = &s;
    if (open_attach(kt, name, flags, &p, &s) != 0) {
        plan_release(&p);
        return 1;
    }
    run_attach(kt, &s);
    rc = attach_result(kt, name, &p, &s);
    plan_release(&p);
    return rc;
}

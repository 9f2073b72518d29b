/* Tests for pkg/gateway/hub.c: what is held for a TeloSession stays with its uid, so a session
 * deleted and created again under its name (another uid) gets nothing of its predecessor's. The
 * clients are socketpairs read here as raw WebSocket frames; the API server is a mock_http. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/auth.h"
#include "gateway/hub.h"
#include "mock_client.h"
#include "ws/frame.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NS   "t"
#define NAME "ci"
#define POD  "telo-run-ci"

/* What the mock API server says, set before it forks: whose the pod is from its second read on
 * (the first says uid-1), and the uid of the TeloSession the name holds (its attach token is
 * "T1" either way). It writes a byte to attach_seen[1], when open, for each pods/attach. */
static const char *pod_owner = "uid-1";
static const char *session_uid = "uid-1";
static int attach_seen[2] = {-1, -1};

static void route(int fd, const struct mock_req *req)
{
    char body[1024];
    if (strcmp(req->path, "/apis/telo.run/v1alpha1/namespaces/" NS "/telosessions/" NAME) == 0) {
        snprintf(body, sizeof(body),
                 "{\"metadata\":{\"name\":\"" NAME "\",\"uid\":\"%s\"},\"status\":{\"phase\":"
                 "\"Running\",\"podName\":\"" POD "\",\"attach\":{\"secretName\":\"ci-attach\"}}}",
                 session_uid);
        return mock_reply(fd, 200, NULL, body);
    }
    if (strcmp(req->path, "/api/v1/namespaces/" NS "/secrets/ci-attach") == 0)
        return mock_reply(fd, 200, NULL, "{\"data\":{\"token\":\"VDE=\"}}");
    if (strcmp(req->path, "/api/v1/namespaces/" NS "/pods/" POD) == 0) {
        /* The session container still runs: only its owner says whose it is. */
        snprintf(body, sizeof(body),
                 "{\"metadata\":{\"name\":\"" POD "\",\"ownerReferences\":[{\"apiVersion\":"
                 "\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"name\":\"" NAME "\","
                 "\"uid\":\"%s\",\"controller\":true}]},\"status\":{\"phase\":\"Running\","
                 "\"containerStatuses\":[{\"name\":\"session\",\"state\":{\"running\":{}}}]}}",
                 req->hit == 1 ? "uid-1" : pod_owner);
        return mock_reply(fd, 200, NULL, body);
    }
    /* pods/attach: refused, so a live session keeps retrying and its clients wait. */
    if (attach_seen[1] >= 0 && write(attach_seen[1], "a", 1) != 1)
        _exit(1); /* the test would count wrong: let it see no server instead */
    mock_reply(fd, 500, NULL, "{\"kind\":\"Status\",\"code\":500}");
}

struct peer {
    int fd; /* the client's end of the socketpair */
    uint8_t in[1 << 16];
    size_t len;
};

struct fixture {
    struct mock_client *api;
    struct gw_auth *auth;
    struct gw_hub *hub;
    struct peer peers[4];
    size_t npeers;
};

static int teardown(void **state);

/* The mock API server and a hub on it; with reauth, every client's credential is checked again
 * within 0.1 to 0.2 s of attaching. */
static int start(void **state, int reauth)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->api = mock_client_new("hub", route, "gw", NULL)) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    struct gw_hub_opts opts = {.ended_keep_s = 60};
    if (reauth && (opts.auth = f->auth = gw_auth_new(f->api->t, 0)) != NULL)
        opts.reauth_s = 0.2;
    if ((reauth && f->auth == NULL) ||
        (f->hub = gw_hub_new(f->api->loop, f->api->t, &opts)) == NULL) {
        teardown(state); /* cmocka runs none after a failed setup */
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    return start(state, 0);
}

/* The name holds uid-2 by the time the clients' credentials are checked again. */
static int setup_replaced(void **state)
{
    session_uid = "uid-2";
    return start(state, 1);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    gw_hub_free(f->hub);
    gw_auth_free(f->auth);
    for (size_t i = 0; i < 2; i++) {
        if (attach_seen[i] >= 0)
            close(attach_seen[i]);
        attach_seen[i] = -1;
    }
    for (size_t i = 0; i < f->npeers; i++)
        close(f->peers[i].fd);
    mock_client_free(f->api);
    free(f);
    return 0;
}

static void stop_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ONE);
}

/* Runs the loop for seconds, then reads what every client was sent. */
static void run(struct fixture *f, double seconds)
{
    ev_timer stop;
    ev_timer_init(&stop, stop_cb, seconds, 0.);
    ev_timer_start(f->api->loop, &stop);
    ev_run(f->api->loop, 0);
    ev_timer_stop(f->api->loop, &stop);
    for (size_t i = 0; i < f->npeers; i++) {
        struct peer *p = &f->peers[i];
        ssize_t n;
        while (p->len < sizeof(p->in) &&
               (n = read(p->fd, p->in + p->len, sizeof(p->in) - p->len)) > 0)
            p->len += (size_t)n;
    }
}

/* Attaches a telo.io.v1 client for the session with uid in phase (exit_code when it ended). */
static struct peer *attach(struct fixture *f, const char *uid, const char *phase, int exit_code)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    struct peer *p = &f->peers[f->npeers++];
    p->fd = sv[1];
    struct gw_attach req = {.namespace = NS,
                            .name = NAME,
                            .pod = POD,
                            .phase = phase,
                            .exit_code = exit_code,
                            .uid = uid,
                            .proto = GW_PROTO_IO_V1,
                            .subject = "session-token",
                            .token = "T1"};
    struct telo_err err = {0};
    assert_int_equal(gw_hub_attach(f->hub, sv[0], NULL, NULL, 0, &req, &err), 0);
    return p;
}

/* Whether a text frame the server sent p holds needle. */
static int text_has(const struct peer *p, const char *needle)
{
    size_t off = 0;
    while (off + 2 <= p->len) {
        int op = p->in[off] & 0x0f;
        size_t len = p->in[off + 1] & 0x7f, head = 2;
        if (len == 126) {
            len = (size_t)p->in[off + 2] << 8 | p->in[off + 3];
            head = 4;
        } else if (len == 127) {
            return 0; /* nothing here is that large */
        }
        if (off + head + len > p->len)
            return 0;
        char text[4096];
        snprintf(text, sizeof(text), "%.*s", (int)len, (const char *)p->in + off + head);
        if ((op == WS_OP_TEXT || op == WS_OP_CLOSE) && strstr(text, needle) != NULL)
            return 1;
        off += head + len;
    }
    return 0;
}

/* The bug: the hub tied a terminal to namespace/name. A session that printed and exited 7 was
 * deleted and created again; while the new one was Pending, a client of it was let in (the hub
 * held the name), joined the old entry and got its scrollback and exit status. */
static void test_a_new_uid_gets_nothing_of_the_old_session(void **state)
{
    struct fixture *f = *state;
    struct peer *old = attach(f, "uid-1", "Succeeded", 7);
    run(f, 0.1);
    assert_true(text_has(old, "{\"kind\":\"exited\",\"code\":7}"));

    /* Pending: as if nothing were held, not yet. */
    struct gw_attach pending = {.namespace = NS,
                                .name = NAME,
                                .pod = "",
                                .phase = "Pending",
                                .exit_code = -1,
                                .uid = "uid-2"};
    const char *why = NULL;
    assert_int_equal(gw_hub_check(f->hub, &pending, &why), 409);
    assert_non_null(why);

    /* Once it ran (and ended, exit 0), its client gets its own end, not the old one's. */
    struct peer *next = attach(f, "uid-2", "Succeeded", 0);
    run(f, 0.1);
    assert_false(text_has(next, "\"code\":7"));
    assert_true(text_has(next, "{\"kind\":\"exited\",\"code\":0}"));
    assert_int_equal(gw_hub_session_clients(f->hub, NS, NAME), 1);
}

/* A client of a live session whose name another session took is told so and closed. */
static void test_the_old_clients_are_closed_as_replaced(void **state)
{
    struct fixture *f = *state;
    struct peer *old = attach(f, "uid-1", "Running", -1);
    run(f, 0.2);
    assert_int_equal(gw_hub_session_clients(f->hub, NS, NAME), 1);
    struct peer *next = attach(f, "uid-2", "Succeeded", 0);
    run(f, 0.1);
    assert_true(text_has(old, "\"code\":410"));
    assert_true(text_has(old, "replaced by another of its name"));
    assert_false(text_has(next, "replaced"));
    assert_true(text_has(next, "{\"kind\":\"exited\",\"code\":0}"));
    assert_int_equal(gw_hub_session_clients(f->hub, NS, NAME), 1);
    /* The old session goes once its client has. */
    close(old->fd);
    old->fd = -1;
    run(f, 0.1);
    assert_int_equal(gw_hub_metrics(f->hub)->sessions, 1);
    assert_int_equal(gw_hub_metrics(f->hub)->clients, 1);
}

/* The bug: re-authorization asked only whether the token still admits to namespace/name, and
 * the token of a session created again under the name does: a client of the old session stayed
 * on, and a reconnect could give it the new one's terminal. */
static void test_reauthorization_finding_another_uid_closes_the_client(void **state)
{
    struct fixture *f = *state;
    struct peer *old = attach(f, "uid-1", "Running", -1);
    run(f, 0.5);
    assert_true(text_has(old, "\"code\":410"));
    assert_true(text_has(old, "replaced by another of its name"));
    assert_int_equal(gw_hub_metrics(f->hub)->reauth_closes, 1);
}

/* The pod of the session's name is uid-2's from its second read on. */
static int setup_pod_replaced(void **state)
{
    pod_owner = "uid-2";
    if (pipe(attach_seen) != 0)
        return -1;
    fcntl(attach_seen[0], F_SETFL, O_NONBLOCK);
    return start(state, 0);
}

/* The bug: an upstream that dropped was opened again to whatever pod had the session's name,
 * after a read that looked only at its container: a session created again under the name
 * (another uid) has a pod of that name, and the old session's clients got its terminal. */
static void test_a_reconnect_goes_only_to_the_sessions_own_pod(void **state)
{
    struct fixture *f = *state;
    /* The first attach fails and the pod is read: still uid-1's, so it is tried again after the
     * backoff (0.5 s), by when the pod of the name is uid-2's. */
    struct peer *old = attach(f, "uid-1", "Running", -1);
    run(f, 1.5);
    char seen[16];
    assert_int_equal(read(attach_seen[0], seen, sizeof(seen)), 1);
    assert_true(text_has(old, "{\"kind\":\"failed\""));
    assert_true(text_has(old, "exit -1"));
}

int main(void)
{
    (void)mock_stream_start; /* the shared mock's streaming helper is not needed here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_new_uid_gets_nothing_of_the_old_session, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_old_clients_are_closed_as_replaced, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reauthorization_finding_another_uid_closes_the_client,
                                        setup_replaced, teardown),
        cmocka_unit_test_setup_teardown(test_a_reconnect_goes_only_to_the_sessions_own_pod,
                                        setup_pod_replaced, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/kube/execcred.c: exec credential plugins run as children watched by the loop, with
 * the requests that need the credential queued behind them; a slow plugin never stalls a watch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/config.h"
#include "kube/execcred.h"
#include "kube/transport.h"
#include "kube/watch.h"
#include "util/err.h"
#include "util/log.h"

#include "mock_http.h"

#include <ev.h>
#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOKEN_OUTPUT                                                                               \
    "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","       \
    "\"status\":{\"token\":\"tok\"}}'\n"

/* The plugin counts its runs in runs and sleeps 10 s first while the file slow exists. */
static const char slow_when_asked[] = "#!/bin/sh\n"
                                      "d=${0%/*}\n"
                                      "echo run >> \"$d/runs\"\n"
                                      "if [ -f \"$d/slow\" ]; then sleep 10; fi\n" TOKEN_OUTPUT;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the scripted API server ---- */

static void route(int fd, const struct mock_req *r)
{
    if (strstr(r->headers, "Authorization: Bearer tok\r\n") == NULL) {
        mock_reply(fd, 401, NULL, "{\"kind\":\"Status\",\"code\":401}");
        return;
    }
    if (strstr(r->path, "/namespaces/w/configmaps?watch=1") != NULL) {
        /* Five events a second apart, then the stream ends (this server answers one connection
         * at a time, so it must end for the next request to be served). */
        mock_stream_start(fd, 200);
        for (int i = 0; i < 5; i++) {
            char ev[200];
            int n = snprintf(ev, sizeof(ev),
                             "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":"
                             "{\"name\":\"a%d\",\"resourceVersion\":\"%d\"}}}\n",
                             i, 10 + i);
            mock_write_all(fd, ev, (size_t)n);
            if (i < 4)
                sleep(1);
        }
        return;
    }
    mock_reply(fd, 200, NULL, "{\"kind\":\"ConfigMap\"}");
}

/* ---- fixture: a temporary directory with the plugin, a kubeconfig, a server, a transport ---- */

struct fixture {
    char dir[128];
    struct mock_server server;
    struct kube_config *cfg;
    struct ev_loop *loop;
    struct kube_transport *t;
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/telo-test-execcred-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static void remove_in(struct fixture *fx, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
    unlink(path);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    kube_transport_free(fx->t);
    kube_config_free(fx->cfg);
    mock_stop(&fx->server);
    const char *files[] = {"plugin", "kubeconfig", "runs", "slow"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        remove_in(fx, files[i]);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static void write_in(struct fixture *fx, const char *name, const char *text, mode_t mode)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static int runs(struct fixture *fx)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/runs", fx->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    char line[16];
    while (fgets(line, sizeof(line), f))
        n++;
    fclose(f);
    return n;
}

/* Writes plugin (a shell script), starts the server and loads a kubeconfig whose user runs the
 * plugin with timeout_ms; the transport runs on the default loop, as in every command. */
static void start(struct fixture *fx, const char *plugin, int timeout_ms)
{
    write_in(fx, "plugin", plugin, 0700);
    assert_int_equal(mock_start(&fx->server, route), 0);
    char kc[2048];
    snprintf(kc, sizeof(kc),
             "apiVersion: v1\nkind: Config\n"
             "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
             "users:\n- name: u\n  user:\n    exec:\n"
             "      apiVersion: client.authentication.k8s.io/v1\n"
             "      command: %s/plugin\n"
             "      interactiveMode: Never\n"
             "contexts:\n- name: x\n  context: {cluster: c, user: u, namespace: ns}\n"
             "current-context: x\n",
             fx->server.port, fx->dir);
    write_in(fx, "kubeconfig", kc, 0600);
    char path[256];
    snprintf(path, sizeof(path), "%s/kubeconfig", fx->dir);
    struct kube_config_options o = {.kubeconfig = path, .exec_timeout_ms = timeout_ms};
    struct telo_err err;
    if (kube_config_load(&o, &fx->cfg, &err) != 0)
        fail_msg("%s", err.msg);
    fx->loop = ev_default_loop(0);
    fx->t = kube_transport_new(fx->loop, fx->cfg, NULL, &err);
    assert_non_null(fx->t);
}

/* ---- a slow plugin and a running watch ---- */

struct scene {
    struct fixture *fx;
    double submitted, done;
    int nevents, events_while_waiting;
    int ticks, ticks_while_waiting;
    int rc;
    long code;
    int ended;
    char err[TELO_ERR_MSG_MAX];
};

static void on_get_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    struct scene *s = ud;
    s->done = now_s();
    s->rc = resp->rc;
    s->code = resp->code;
    snprintf(s->err, sizeof(s->err), "%s", resp->err ? resp->err->msg : "");
    ev_break(s->fx->loop, EVBREAK_ALL);
}

static int on_event(struct kube_watch *w, enum kube_watch_type type, struct json_object *obj,
                    void *ud)
{
    (void)w;
    (void)type;
    (void)obj;
    struct scene *s = ud;
    s->nevents++;
    if (s->nevents == 1) {
        /* The credential "expires": the next request runs the plugin, which now sleeps 10 s. */
        write_in(s->fx, "slow", "", 0600);
        kube_config_invalidate_credentials(s->fx->cfg);
        struct kube_request req = {.method = "GET", .path = "/api/v1/namespaces/x/configmaps/y"};
        struct telo_err err;
        s->submitted = now_s();
        assert_non_null(kube_transport_submit(s->fx->t, &req, on_get_done, NULL, s, &err));
    } else if (s->done == 0 && now_s() < s->submitted + 9) {
        s->events_while_waiting++;
    }
    return 0;
}

static void on_end(struct kube_watch *w, enum kube_watch_end reason, const struct kube_status *st,
                   const struct telo_err *err, void *ud)
{
    (void)reason;
    (void)st;
    (void)err;
    struct scene *s = ud;
    s->ended++;
    kube_watch_free(w);
}

static void tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct scene *s = w->data;
    s->ticks++;
    if (s->submitted > 0 && s->done == 0)
        s->ticks_while_waiting++;
}

static void slow_plugin_does_not_stall_a_watch(void **state)
{
    struct fixture *fx = *state;
    start(fx, slow_when_asked, 30000);
    struct scene s = {.fx = fx};
    ev_timer tick;
    ev_timer_init(&tick, tick_cb, 0.1, 0.1);
    tick.data = &s;
    ev_timer_start(fx->loop, &tick);
    struct kube_ref ref = {.version = "v1", .resource = "configmaps", .namespace = "w"};
    struct kube_watch_opts o = {.resource_version = "5"};
    struct telo_err err;
    /* The first run (fast) gives the watch its token; its first event asks for a slow run. */
    assert_non_null(kube_watch_start(fx->t, &ref, &o, on_event, on_end, &s, &err));
    ev_run(fx->loop, 0);
    ev_timer_stop(fx->loop, &tick);
    print_message("request waited %.2f s for the plugin; meanwhile %d watch events and %d timer "
                  "ticks (100 ms) were delivered\n",
                  s.done - s.submitted, s.events_while_waiting, s.ticks_while_waiting);
    if (s.rc != 0)
        fail_msg("%s", s.err);
    assert_int_equal(s.code, 200);
    assert_int_equal(runs(fx), 2);
    /* The request waited for the plugin's 10 s... */
    assert_true(s.done - s.submitted >= 9.5);
    /* ...while the watch went on delivering events (four, a second apart) and the loop's timer
     * kept ticking (every 100 ms). */
    assert_int_equal(s.nevents, 5);
    assert_true(s.events_while_waiting >= 3);
    assert_int_equal(s.ended, 1);
    assert_true(s.ticks_while_waiting >= 50);
}

/* ---- failures reach every waiting request as values ---- */

struct waiter {
    struct ev_loop *loop;
    int calls, rc;
    char err[TELO_ERR_MSG_MAX];
    int *pending;
};

static void on_done(struct kube_call *call, const struct kube_response *resp, void *ud)
{
    (void)call;
    struct waiter *w = ud;
    w->calls++;
    w->rc = resp->rc;
    snprintf(w->err, sizeof(w->err), "%s", resp->err ? resp->err->msg : "");
    if (--*w->pending == 0)
        ev_break(w->loop, EVBREAK_ALL);
}

/* Submits two GETs and runs the loop until both are answered; returns the seconds it took. */
static double two_requests(struct fixture *fx, struct waiter w[2])
{
    static int pending;
    pending = 2;
    struct kube_request req = {.method = "GET", .path = "/api/v1/namespaces/x/configmaps/y"};
    struct telo_err err;
    double t0 = now_s();
    for (int i = 0; i < 2; i++) {
        w[i] = (struct waiter){.loop = fx->loop, .pending = &pending};
        assert_non_null(kube_transport_submit(fx->t, &req, on_done, NULL, &w[i], &err));
    }
    ev_run(fx->loop, 0);
    return now_s() - t0;
}

static void timeout_kills_the_plugin(void **state)
{
    struct fixture *fx = *state;
    start(fx, "#!/bin/sh\necho run >> \"${0%/*}/runs\"\nexec sleep 10\n", 500);
    struct waiter w[2];
    double took = two_requests(fx, w);
    assert_true(took < 3);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(w[i].calls, 1);
        assert_int_equal(w[i].rc, -TELO_ETIMEDOUT);
        assert_non_null(strstr(w[i].err, "/plugin timed out after 500 ms"));
    }
    /* Both requests waited behind one run. */
    assert_int_equal(runs(fx), 1);
}

static void failing_plugin_names_status_and_stderr(void **state)
{
    struct fixture *fx = *state;
    start(fx,
          "#!/bin/sh\necho run >> \"${0%/*}/runs\"\n"
          "echo 'noise' >&2\necho 'token expired: run cloud-login' >&2\nexit 3\n",
          30000);
    struct waiter w[2];
    two_requests(fx, w);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(w[i].rc, -TELO_EIO);
        if (strstr(w[i].err, "/plugin exited with status 3: noise token expired: run "
                             "cloud-login") == NULL)
            fail_msg("%s", w[i].err);
        assert_non_null(strstr(w[i].err, "kubeconfig "));
    }
    assert_int_equal(runs(fx), 1);
    /* The failure is not cached: the next request runs the plugin again. */
    two_requests(fx, w);
    assert_int_equal(runs(fx), 2);
}

/* A call waiting for the plugin can be cancelled, and the transport and config freed while the
 * plugin still runs: no callback, no leak, the plugin killed and reaped at once. */
static void cancel_while_waiting(void **state)
{
    struct fixture *fx = *state;
    write_in(fx, "slow", "", 0600);
    start(fx, slow_when_asked, 30000);
    static int pending = 2;
    struct waiter w[2] = {{.loop = fx->loop, .pending = &pending},
                          {.loop = fx->loop, .pending = &pending}};
    struct kube_request req = {.method = "GET", .path = "/api/v1/namespaces/x/configmaps/y"};
    struct telo_err err;
    struct kube_call *calls[2];
    for (int i = 0; i < 2; i++)
        assert_non_null(calls[i] = kube_transport_submit(fx->t, &req, on_done, NULL, &w[i], &err));
    /* Let the kick start the plugin (it has, once it counted its run) and park both calls, then
     * cancel one. */
    for (int i = 0; i < 500 && runs(fx) == 0; i++) {
        ev_run(fx->loop, EVRUN_NOWAIT);
        nanosleep(&(struct timespec){0, 10L * 1000 * 1000}, NULL);
    }
    kube_call_cancel(calls[0]);
    double t0 = now_s();
    kube_transport_free(fx->t);
    fx->t = NULL;
    kube_config_free(fx->cfg);
    fx->cfg = NULL;
    assert_true(now_s() - t0 < 2);
    ev_run(fx->loop, EVRUN_NOWAIT);
    assert_int_equal(w[0].calls, 0);
    assert_int_equal(w[1].calls, 0);
    assert_int_equal(runs(fx), 1);
}

/* ---- the cache, and a loop other than the default one ---- */

struct fetched {
    int calls, rc;
};

static void on_fetched(int rc, const struct telo_err *err, void *ud)
{
    (void)err;
    struct fetched *f = ud;
    f->calls++;
    f->rc = rc;
}

static void cached_token_is_returned_at_once(void **state)
{
    struct fixture *fx = *state;
    write_in(fx, "plugin", slow_when_asked, 0700);
    char plugin[256];
    snprintf(plugin, sizeof(plugin), "%s/plugin", fx->dir);
    struct kube_execcred *ec =
        kube_execcred_new("test", KUBE_EXEC_API_V1, "plugin", plugin, NULL, 5000);
    assert_non_null(ec);
    assert_int_equal(kube_execcred_set_info(ec, &(struct kube_config){.server = "http://x"}, 0), 0);
    /* Another loop: libev cannot watch children there, so the run polls for its exit. */
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct fetched f = {0};
    struct kube_execcred_wait *wait = NULL;
    struct telo_err err;
    assert_int_equal(kube_execcred_fetch(ec, loop, on_fetched, &f, &wait, &err), 1);
    assert_non_null(wait);
    ev_run(loop, 0);
    assert_int_equal(f.calls, 1);
    assert_int_equal(f.rc, 0);
    const char *token, *cert, *key;
    kube_execcred_current(ec, &token, &cert, &key);
    assert_string_equal(token, "tok");
    assert_null(cert);
    /* Cached and without expiry: ready at once, nothing queued, nothing run. */
    assert_int_equal(kube_execcred_fetch(ec, loop, on_fetched, &f, &wait, &err), 0);
    assert_null(wait);
    assert_int_equal(f.calls, 1);
    assert_int_equal(runs(fx), 1);
    /* A cancelled wait is not called; freeing ec kills and reaps the run in flight. */
    kube_execcred_invalidate(ec);
    write_in(fx, "slow", "", 0600);
    assert_int_equal(kube_execcred_fetch(ec, loop, on_fetched, &f, &wait, &err), 1);
    kube_execcred_wait_cancel(wait);
    double t0 = now_s();
    kube_execcred_free(ec);
    assert_true(now_s() - t0 < 2);
    ev_run(loop, EVRUN_NOWAIT);
    assert_int_equal(f.calls, 1);
    ev_loop_destroy(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(slow_plugin_does_not_stall_a_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(timeout_kills_the_plugin, setup, teardown),
        cmocka_unit_test_setup_teardown(failing_plugin_names_status_and_stderr, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_while_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(cached_token_is_returned_at_once, setup, teardown),
    };
    (void)mock_kubeconfig; /* mock_http.h's token-file kubeconfig: ours runs a plugin */
    telo_log_set_level(TELO_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/controller/manager.c against a scripted API server: how the dispatch shares the
 * loop. A resync or a first list queues thousands of keys whose reconciles mostly finish before
 * they return; a pass must not start them all while the loop polls nothing, and a loop that is
 * never idle must still dispatch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "controller/manager.h"
#include "kube/config.h"
#include "kube/transport.h"
#include "mock_http.h"

#include <ev.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#define NOBJECTS 1000

static void route(int fd, const struct mock_req *req)
{
    if (strstr(req->path, "watch") != NULL) {
        /* A watch that stays open and quiet: the cache is the list's. */
        mock_stream_start(fd, 200);
        sleep(60);
        return;
    }
    size_t cap = 200 + (size_t)NOBJECTS * 120, len = 0;
    char *body = malloc(cap);
    if (body == NULL)
        return;
    len += (size_t)snprintf(body + len, cap - len,
                            "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\","
                            "\"metadata\":{\"resourceVersion\":\"7\"},\"items\":[");
    for (int i = 0; i < NOBJECTS; i++)
        len += (size_t)snprintf(body + len, cap - len,
                                "%s{\"metadata\":{\"name\":\"cm-%d\",\"namespace\":\"ns\","
                                "\"uid\":\"u-%d\",\"resourceVersion\":\"7\"}}",
                                i > 0 ? "," : "", i, i);
    snprintf(body + len, cap - len, "]}");
    mock_reply(fd, 200, NULL, body);
    free(body);
}

struct tally {
    struct ev_loop *loop;
    int reconciled;
    unsigned int last_iteration;
    int in_this_iteration, most_in_one_iteration, iterations;
};

struct fixture {
    struct mock_server server;
    char dir[64];
    struct kube_config *cfg;
    struct ev_loop *loop;
    struct kube_transport *t;
    struct ctrl_manager *m;
    struct tally tally;
};

static void reconcile(void *ud, struct ctrl_reconcile *rec, const char *key)
{
    (void)key;
    struct tally *t = ud;
    unsigned int it = ev_iteration(t->loop);
    if (t->iterations == 0 || it != t->last_iteration) {
        t->iterations++;
        t->last_iteration = it;
        t->in_this_iteration = 0;
    }
    if (++t->in_this_iteration > t->most_in_one_iteration)
        t->most_in_one_iteration = t->in_this_iteration;
    if (++t->reconciled == NOBJECTS)
        ev_break(t->loop, EVBREAK_ALL);
    /* Nothing to write: it finishes before it returns, as most of a resync's do. */
    struct ctrl_result res = {.outcome = CTRL_SUCCESS};
    ctrl_reconcile_finish(rec, &res);
}

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* A manager with one informer of NOBJECTS ConfigMaps and one controller, started. */
static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    *state = fx;
    struct tally *tally = &fx->tally;
    assert_int_equal(mock_start(&fx->server, route), 0);
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/telo-test-manager-XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    char token[128], kubeconfig[128];
    snprintf(token, sizeof(token), "%s/token", fx->dir);
    snprintf(kubeconfig, sizeof(kubeconfig), "%s/kubeconfig", fx->dir);
    FILE *f = fopen(token, "w");
    assert_non_null(f);
    fputs("t0ken\n", f);
    fclose(f);
    assert_int_equal(mock_kubeconfig(kubeconfig, fx->server.port, token), 0);
    struct kube_config_options o = {.kubeconfig = kubeconfig};
    struct telo_err err;
    if (kube_config_load(&o, &fx->cfg, &err) != 0)
        fail_msg("%s", err.msg);
    fx->loop = ev_loop_new(EVFLAG_AUTO);
    tally->loop = fx->loop;
    fx->t = kube_transport_new(fx->loop, fx->cfg, NULL, &err);
    assert_non_null(fx->t);
    struct ctrl_manager_opts mo = {.max_concurrent_reconciles = 4, .resync_period = -1};
    fx->m = ctrl_manager_new(fx->loop, fx->t, &mo);
    assert_non_null(fx->m);
    struct cache_reflector_config rc = {.ref = {.version = "v1", .resource = "configmaps"}};
    struct ctrl_informer *inf = ctrl_manager_add_informer(fx->m, "configmaps", &rc, &err);
    if (inf == NULL)
        fail_msg("%s", err.msg);
    if (ctrl_manager_add_controller(fx->m, "configmaps", inf, reconcile, tally, &err) == NULL)
        fail_msg("%s", err.msg);
    if (ctrl_manager_start(fx->m, &err) != 0)
        fail_msg("%s", err.msg);
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    ctrl_manager_free(fx->m);
    kube_transport_free(fx->t);
    kube_config_free(fx->cfg);
    ev_loop_destroy(fx->loop);
    mock_stop(&fx->server);
    char path[128];
    snprintf(path, sizeof(path), "%s/token", fx->dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/kubeconfig", fx->dir);
    unlink(path);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static void run_for_at_most(struct ev_loop *loop, double seconds)
{
    ev_timer timeout;
    ev_timer_init(&timeout, timeout_cb, seconds, 0.);
    ev_timer_start(loop, &timeout);
    ev_run(loop, 0);
    ev_timer_stop(loop, &timeout);
}

static void a_pass_starts_at_most_128_reconciles(void **state)
{
    struct fixture *fx = *state;
    const struct tally *tally = &fx->tally;
    run_for_at_most(fx->loop, 10);
    /* Every key of the list is reconciled, a bounded number per loop iteration: one pass took
     * all 1,000 before, with the loop polling nothing meanwhile. */
    assert_int_equal(tally->reconciled, NOBJECTS);
    assert_in_range(tally->most_in_one_iteration, 1, 128);
    assert_true(tally->iterations >= NOBJECTS / 128);
}

static void ignore(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static void a_loop_never_idle_still_dispatches(void **state)
{
    struct fixture *fx = *state;
    /* A socket with bytes nobody reads: its watcher is pending in every iteration, as a flood of
     * watch events keeps a busy operator's loop, so idle watchers never run. */
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(write(sv[1], "x", 1), 1);
    ev_io busy;
    ev_io_init(&busy, ignore, sv[0], EV_READ);
    ev_io_start(fx->loop, &busy);
    run_for_at_most(fx->loop, 10);
    ev_io_stop(fx->loop, &busy);
    close(sv[0]);
    close(sv[1]);
    assert_int_equal(fx->tally.reconciled, NOBJECTS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_pass_starts_at_most_128_reconciles, setup, teardown),
        cmocka_unit_test_setup_teardown(a_loop_never_idle_still_dispatches, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

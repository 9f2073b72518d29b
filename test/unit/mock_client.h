/* A kube_transport on its own loop talking to a mock_http server: the fixture of the unit tests
 * that drive pkg/kube against scripted answers (header-only, like mock_http.h). */
#ifndef TELO_TEST_MOCK_CLIENT_H
#define TELO_TEST_MOCK_CLIENT_H

#include "kube/config.h"
#include "kube/transport.h"
#include "mock_http.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mock_client {
    struct mock_server server;
    struct kube_config *cfg;
    struct ev_loop *loop;
    struct kube_transport *t;
    char dir[128];
    char kc[200];    /* the kubeconfig's path */
    char token[200]; /* the token file's path */
};

/* Frees what c holds however far its setup got (not c itself), removing its files. */
static inline void mock_client_stop(struct mock_client *c)
{
    kube_transport_free(c->t);
    if (c->loop)
        ev_loop_destroy(c->loop);
    kube_config_free(c->cfg);
    mock_stop(&c->server);
    if (c->token[0])
        unlink(c->token);
    if (c->kc[0])
        unlink(c->kc);
    if (c->dir[0])
        rmdir(c->dir);
}

static inline void mock_client_free(struct mock_client *c)
{
    if (c) {
        mock_client_stop(c);
        free(c);
    }
}

/* Makes c's temporary directory, named after test, with a token file holding token. Returns 0
 * or -1; c is zeroed by the caller and freed with mock_client_free either way. */
static inline int mock_client_prepare(struct mock_client *c, const char *test, const char *token)
{
    snprintf(c->dir, sizeof(c->dir), "/tmp/telo-test-%s-XXXXXX", test);
    if (mkdtemp(c->dir) == NULL) {
        c->dir[0] = '\0';
        return -1;
    }
    snprintf(c->token, sizeof(c->token), "%s/token", c->dir);
    FILE *tf = fopen(c->token, "w");
    if (tf == NULL)
        return -1;
    fputs(token, tf);
    fclose(tf);
    return 0;
}

/* After mock_client_prepare: starts the mock server with route (the fork copies the process as
 * it is now), writes a kubeconfig for it and makes a transport with opts (may be NULL). Returns
 * 0 or -1. */
static inline int mock_client_connect(struct mock_client *c, mock_route_fn *route,
                                      const struct kube_transport_opts *opts)
{
    if (mock_start(&c->server, route) != 0)
        return -1;
    snprintf(c->kc, sizeof(c->kc), "%s/kubeconfig", c->dir);
    if (mock_kubeconfig(c->kc, c->server.port, c->token) != 0)
        return -1;
    struct kube_config_options o = {.kubeconfig = c->kc};
    struct telo_err err;
    if (kube_config_load(&o, &c->cfg, &err) != 0) {
        fprintf(stderr, "mock_client: %s\n", err.msg);
        return -1;
    }
    c->loop = ev_loop_new(0);
    c->t = c->loop ? kube_transport_new(c->loop, c->cfg, opts, &err) : NULL;
    return c->t ? 0 : -1;
}

/* Both steps. Returns the client (free with mock_client_free), or NULL after freeing what was
 * made: cmocka runs no teardown after a failed setup. */
static inline struct mock_client *mock_client_new(const char *test, mock_route_fn *route,
                                                  const char *token,
                                                  const struct kube_transport_opts *opts)
{
    struct mock_client *c = calloc(1, sizeof(*c));
    if (c &&
        (mock_client_prepare(c, test, token) != 0 || mock_client_connect(c, route, opts) != 0)) {
        mock_client_free(c);
        c = NULL;
    }
    return c;
}

#endif

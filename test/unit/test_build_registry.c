/* Tests for pkg/imagebuild/registry.c (and the HTTP client under it, pkg/imagebuild/http.c):
 * repository names, dockerconfigjson credentials, WWW-Authenticate challenges, and the asynchronous
 * manifest check against a scripted registry: present, absent, Basic and Bearer credentials
 * (right and wrong), retries, the positive cache and cancellation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/registry.h"
#include "mock_http.h"
#include "util/err.h"

#include <ev.h>
#include <stdlib.h>
#include <string.h>

/* ---- pure helpers ---- */

static void repository_names(void **state)
{
    (void)state;
    char host[64], path[64];
    struct telo_err err;
    assert_int_equal(build_repository_split("127.0.0.1:5000/telo/apps", host, sizeof(host), path,
                                            sizeof(path), &err),
                     0);
    assert_string_equal(host, "127.0.0.1:5000");
    assert_string_equal(path, "telo/apps");
    assert_int_equal(build_repository_split("https://reg.example/a/", host, sizeof(host), path,
                                            sizeof(path), &err),
                     0);
    assert_string_equal(host, "reg.example");
    assert_string_equal(path, "a");
    assert_int_equal(
        build_repository_split("localhost/x", host, sizeof(host), path, sizeof(path), &err), 0);
    const char *bad[] = {"telo/apps", "apps", "reg.example/", "reg.example/Upper", NULL, ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        telo_err_clear(&err);
        assert_int_equal(
            build_repository_split(bad[i], host, sizeof(host), path, sizeof(path), &err),
            -TELO_EINVAL);
        assert_non_null(strstr(err.msg, "image repository"));
    }
}

static void dockerconfig_credentials(void **state)
{
    (void)state;
    char *u = NULL, *p = NULL;
    struct telo_err err;
    /* "auth" is base64("alice:s3cr:et"): the password may hold ':'. */
    const char cfg[] =
        "{\"auths\":{\"other.example\":{\"auth\":\"eDp5\"},"
        "\"https://127.0.0.1:5000/v1/\":{\"auth\":\"YWxpY2U6czNjcjpldA==\"},"
        "\"reg.example\":{\"username\":\"bob\",\"password\":\"pw\",\"auth\":\"eDp5\"},"
        "\"https://index.docker.io/v1/\":{\"auth\":\"aHViOnB3\"}}}";
    assert_int_equal(build_dockerconfig_auth(cfg, strlen(cfg), "127.0.0.1:5000", &u, &p, &err), 0);
    assert_string_equal(u, "alice");
    assert_string_equal(p, "s3cr:et");
    free(u);
    free(p);
    assert_int_equal(build_dockerconfig_auth(cfg, strlen(cfg), "reg.example", &u, &p, &err), 0);
    assert_string_equal(u, "bob");
    assert_string_equal(p, "pw");
    free(u);
    free(p);
    assert_int_equal(build_dockerconfig_auth(cfg, strlen(cfg), "docker.io", &u, &p, &err), 0);
    assert_string_equal(u, "hub");
    free(u);
    free(p);
    assert_int_equal(build_dockerconfig_auth(cfg, strlen(cfg), "nope.example", &u, &p, &err),
                     -TELO_ENOTFOUND);
    assert_null(u);
    assert_string_equal(err.msg, ".dockerconfigjson has no entry for nope.example (it has: "
                                 "other.example, https://127.0.0.1:5000/v1/, reg.example, "
                                 "https://index.docker.io/v1/)");
    const struct {
        const char *json, *msg;
    } bad[] = {
        {"not json", ".dockerconfigjson is not a JSON object"},
        {"{\"credsStore\":\"x\"}", ".dockerconfigjson has no \"auths\" object"},
        {"{\"auths\":{\"h.example\":{}}}",
         ".dockerconfigjson entry for h.example has neither username/password nor auth"},
        {"{\"auths\":{\"h.example\":{\"auth\":\"!!!\"}}}",
         ".dockerconfigjson entry for h.example: auth is not base64 of \"user:password\""},
        {"{\"auths\":{\"h.example\":{\"auth\":\"bm9jb2xvbg==\"}}}",
         ".dockerconfigjson entry for h.example: auth is not base64 of \"user:password\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(
            build_dockerconfig_auth(bad[i].json, strlen(bad[i].json), "h.example", &u, &p, &err),
            -TELO_EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
        assert_null(u);
        assert_null(p);
    }
}

static void challenges(void **state)
{
    (void)state;
    struct build_auth_challenge ch;
    assert_int_equal(
        build_auth_challenge_parse("Bearer realm=\"https://auth.example/token\",service="
                                   "\"registry.example\",scope=\"repository:a/b:pull,push\"",
                                   &ch),
        0);
    assert_string_equal(ch.scheme, "Bearer");
    assert_string_equal(ch.realm, "https://auth.example/token");
    assert_string_equal(ch.service, "registry.example");
    assert_string_equal(ch.scope, "repository:a/b:pull,push");
    assert_int_equal(build_auth_challenge_parse("Basic realm=\"Registry Realm\"", &ch), 0);
    assert_string_equal(ch.scheme, "Basic");
    assert_string_equal(ch.realm, "Registry Realm");
    assert_string_equal(ch.service, "");
    assert_int_equal(build_auth_challenge_parse("bearer  Realm=plain , SERVICE=\"a\\\"b\"", &ch),
                     0);
    assert_string_equal(ch.realm, "plain");
    assert_string_equal(ch.service, "a\"b");
    assert_int_equal(build_auth_challenge_parse("", &ch), -TELO_EPROTO);
    assert_int_equal(build_auth_challenge_parse("Bearer realm=\"unterminated", &ch), -TELO_EPROTO);
}

/* ---- against a scripted registry ---- */

static int has_header(const struct mock_req *r, const char *line)
{
    return strstr(r->headers, line) != NULL;
}

/* alice:secret -> YWxpY2U6c2VjcmV0 */
#define GOOD_BASIC "Authorization: Basic YWxpY2U6c2VjcmV0\r\n"

static void route(int fd, const struct mock_req *r)
{
    char extra[512];
    int accept_ok = has_header(r, "application/vnd.oci.image.manifest.v1+json, "
                                  "application/vnd.oci.image.index.v1+json, "
                                  "application/vnd.docker.distribution.manifest.v2+json, "
                                  "application/vnd.docker.distribution.manifest.list.v2+json");
    if (strcmp(r->method, "HEAD") == 0 && !accept_ok) {
        mock_reply(fd, 400, NULL, NULL);
    } else if (strcmp(r->path, "/v2/open/apps/manifests/present") == 0) {
        mock_reply(fd, 200, "Docker-Content-Digest: sha256:abc\r\n", NULL);
    } else if (strcmp(r->path, "/v2/open/apps/manifests/absent") == 0) {
        mock_reply(fd, 404, NULL, NULL);
    } else if (strncmp(r->path, "/v2/basic/apps/manifests/", 25) == 0) {
        if (!has_header(r, GOOD_BASIC))
            mock_reply(fd, 401, "WWW-Authenticate: Basic realm=\"Registry Realm\"\r\n", NULL);
        else if (strcmp(r->path + 25, "present") == 0)
            mock_reply(fd, 200, NULL, NULL);
        else
            mock_reply(fd, 404, NULL, NULL);
    } else if (strncmp(r->path, "/v2/bearer/apps/manifests/", 26) == 0) {
        if (has_header(r, "Authorization: Bearer T0K3N\r\n")) {
            mock_reply(fd, strcmp(r->path + 26, "present") == 0 ? 200 : 404, NULL, NULL);
        } else {
            /* The realm points back at this server: its port is the accepted socket's. */
            struct sockaddr_in self;
            socklen_t slen = sizeof(self);
            getsockname(fd, (struct sockaddr *)&self, &slen);
            snprintf(extra, sizeof(extra),
                     "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:%d/token\","
                     "service=\"reg\",scope=\"repository:bearer/apps:pull\"\r\n",
                     ntohs(self.sin_port));
            mock_reply(fd, 401, extra, NULL);
        }
    } else if (strncmp(r->path, "/v2/foreign/apps/manifests/", 27) == 0) {
        if (has_header(r, "Authorization: Bearer GIVEN-FOR-CREDENTIALS\r\n")) {
            mock_reply(fd, 200, NULL, NULL);
        } else {
            /* A realm on another host ("localhost" is not the registry's 127.0.0.1, though it
             * reaches this server): it must get no credentials. */
            struct sockaddr_in self;
            socklen_t slen = sizeof(self);
            getsockname(fd, (struct sockaddr *)&self, &slen);
            snprintf(extra, sizeof(extra),
                     "WWW-Authenticate: Bearer realm=\"http://localhost:%d/elsewhere\"\r\n",
                     ntohs(self.sin_port));
            mock_reply(fd, 401, extra, NULL);
        }
    } else if (strncmp(r->path, "/elsewhere?", 11) == 0) {
        if (has_header(r, "Authorization:"))
            mock_reply(fd, 200, NULL, "{\"token\":\"GIVEN-FOR-CREDENTIALS\"}");
        else
            mock_reply(fd, 401, NULL, "{\"errors\":[{\"code\":\"NOCREDS\"}]}");
    } else if (strncmp(r->path, "/v2/injected/apps/manifests/", 28) == 0) {
        if (has_header(r, "X-Injected: 1\r\n")) {
            mock_reply(fd, 200, NULL, NULL); /* the token service's header got through */
        } else {
            struct sockaddr_in self;
            socklen_t slen = sizeof(self);
            getsockname(fd, (struct sockaddr *)&self, &slen);
            snprintf(extra, sizeof(extra),
                     "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:%d/%s\"\r\n",
                     ntohs(self.sin_port), strcmp(r->path + 28, "crlf") == 0 ? "crlf" : "space");
            mock_reply(fd, 401, extra, NULL);
        }
    } else if (strncmp(r->path, "/crlf?", 6) == 0) {
        mock_reply(fd, 200, NULL, "{\"token\":\"a\\r\\nX-Injected: 1\"}");
    } else if (strncmp(r->path, "/space?", 7) == 0) {
        mock_reply(fd, 200, NULL, "{\"access_token\":\"a b\"}");
    } else if (strncmp(r->path, "/token?", 7) == 0) {
        if (strcmp(r->path, "/token?service=reg&scope=repository%3Abearer%2Fapps%3Apull") != 0)
            mock_reply(fd, 400, NULL, "{}");
        else if (has_header(r, GOOD_BASIC))
            mock_reply(fd, 200, NULL, "{\"token\":\"T0K3N\",\"expires_in\":300}");
        else
            mock_reply(fd, 401, NULL,
                       "{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"authentication "
                       "required\"}]}");
    } else if (strcmp(r->path, "/v2/flaky/apps/manifests/t") == 0) {
        mock_reply(fd, r->hit <= 2 ? 503 : 200, NULL, NULL);
    } else if (strcmp(r->path, "/v2/down/apps/manifests/t") == 0) {
        mock_reply(fd, 503, NULL, NULL);
    } else if (strcmp(r->path, "/v2/forbidden/apps/manifests/t") == 0) {
        mock_reply(fd, 403, NULL, NULL);
    } else if (strcmp(r->path, "/v2/slow/apps/manifests/t") == 0) {
        sleep(5);
    } else {
        mock_reply(fd, 500, NULL, NULL);
    }
}

struct fixture {
    struct mock_server server;
    struct ev_loop *loop;
    struct build_registry *reg;
    char api[64];
};

struct answer {
    int called;
    enum build_image_presence presence;
    char message[512];
    char digest[64];
    int from_cache, attempts;
    char last_error[400];
};

static void on_done(struct build_registry_check *check, const struct build_registry_result *res,
                    void *ud)
{
    (void)check;
    struct answer *a = ud;
    a->called++;
    a->presence = res->presence;
    snprintf(a->message, sizeof(a->message), "%s", res->message);
    snprintf(a->digest, sizeof(a->digest), "%s", res->digest ? res->digest : "");
    a->from_cache = res->from_cache;
    a->attempts = res->attempts;
    snprintf(a->last_error, sizeof(a->last_error), "%s", res->last_error ? res->last_error : "");
}

/* Frees a fixture however far setup got: cmocka runs no teardown after a failed setup. */
static void fixture_free(struct fixture *f)
{
    build_registry_free(f->reg);
    if (f->loop != NULL)
        ev_loop_destroy(f->loop);
    mock_stop(&f->server);
    free(f);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    if (mock_start(&f->server, route) != 0)
        goto fail;
    snprintf(f->api, sizeof(f->api), "http://127.0.0.1:%d", f->server.port);
    f->loop = ev_loop_new(EVFLAG_AUTO);
    struct build_registry_opts opts = {.retry_delay_ms = 20, .timeout_ms = 2000};
    struct telo_err err;
    f->reg = build_registry_new(f->loop, &opts, &err);
    if (f->reg == NULL)
        goto fail;
    *state = f;
    return 0;
fail:
    fixture_free(f);
    return -1;
}

static int teardown(void **state)
{
    fixture_free(*state);
    return 0;
}

static const char SECRET_GOOD[] = "{\"auths\":{\"127.0.0.1:5000\":{\"username\":\"alice\","
                                  "\"password\":\"secret\"}}}";
static const char SECRET_BAD[] = "{\"auths\":{\"127.0.0.1:5000\":{\"auth\":\"YWxpY2U6d3Jvbmc=\"}}}";

/* Runs one check to its answer. */
static void ask(struct fixture *f, const char *repo, const char *tag, const char *secret,
                struct answer *a)
{
    memset(a, 0, sizeof(*a));
    struct build_registry_query q = {.repository = repo,
                                     .tag = tag,
                                     .api_url = f->api,
                                     .dockerconfigjson = secret,
                                     .dockerconfigjson_len = secret ? strlen(secret) : 0,
                                     .secret_name = "telo-builds/push",
                                     /* the mock serves plain HTTP */
                                     .insecure = 1};
    struct telo_err err;
    struct build_registry_check *c = build_registry_check(f->reg, &q, on_done, a, &err);
    assert_non_null(c);
    assert_int_equal(a->called, 0); /* never from inside build_registry_check */
    for (int i = 0; i < 2000 && a->called == 0; i++)
        ev_run(f->loop, EVRUN_ONCE);
    assert_int_equal(a->called, 1);
}

static void present_absent_and_cached(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    ask(f, "127.0.0.1:5000/open/apps", "present", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_PRESENT);
    assert_string_equal(a.digest, "sha256:abc");
    assert_string_equal(a.message, "");
    assert_int_equal(a.attempts, 1);
    assert_int_equal(a.from_cache, 0);
    assert_true(build_registry_cached(f->reg, "127.0.0.1:5000/open/apps:present"));
    ask(f, "127.0.0.1:5000/open/apps", "present", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_PRESENT);
    assert_int_equal(a.from_cache, 1);
    assert_string_equal(a.digest, "sha256:abc");
    assert_int_equal(a.attempts, 0);
    build_registry_forget(f->reg, "127.0.0.1:5000/open/apps:present");
    assert_false(build_registry_cached(f->reg, "127.0.0.1:5000/open/apps:present"));

    ask(f, "127.0.0.1:5000/open/apps", "absent", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_ABSENT);
    assert_false(build_registry_cached(f->reg, "127.0.0.1:5000/open/apps:absent"));
}

static void basic_credentials(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    ask(f, "127.0.0.1:5000/basic/apps", "present", SECRET_GOOD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_PRESENT);
    ask(f, "127.0.0.1:5000/basic/apps", "absent", SECRET_GOOD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_ABSENT);
    /* A wrong password is not "absent". */
    ask(f, "127.0.0.1:5000/basic/apps", "absent", SECRET_BAD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_DENIED);
    assert_string_equal(a.message, "registry 127.0.0.1:5000 refused the credentials of Secret "
                                   "telo-builds/push: HTTP 401; fix the username and password "
                                   "of its entry for 127.0.0.1:5000");
    assert_int_equal(a.attempts, 1);
    ask(f, "127.0.0.1:5000/basic/apps", "absent", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_DENIED);
    assert_string_equal(a.message,
                        "registry 127.0.0.1:5000 wants credentials for basic/apps (HTTP 401) and "
                        "no push Secret is configured: give the operator a dockerconfigjson "
                        "Secret with an entry for 127.0.0.1:5000");
}

static void bearer_challenge(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    ask(f, "127.0.0.1:5000/bearer/apps", "present", SECRET_GOOD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_PRESENT);
    assert_int_equal(a.attempts, 1);
    ask(f, "127.0.0.1:5000/bearer/apps", "absent", SECRET_GOOD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_ABSENT);
    ask(f, "127.0.0.1:5000/bearer/apps", "absent", SECRET_BAD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_DENIED);
    assert_string_equal(a.message, "registry 127.0.0.1:5000 refused the credentials of Secret "
                                   "telo-builds/push at its token service: HTTP 401 "
                                   "(UNAUTHORIZED: authentication required); fix the username "
                                   "and password of its entry for 127.0.0.1:5000");
}

static void foreign_realm_gets_no_credentials(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    /* Before the fix the Secret went to the realm, which answered a token, and the image was
     * "present". */
    ask(f, "127.0.0.1:5000/foreign/apps", "t", SECRET_GOOD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_DENIED);
    assert_non_null(strstr(a.message, "at its token service: HTTP 401 (NOCREDS"));
}

static void realm_trust(void **state)
{
    (void)state;
    assert_true(build_registry_realm_trusted("https://reg.example/token", "reg.example", NULL, 0));
    assert_true(
        build_registry_realm_trusted("https://REG.example:8443/t", "reg.example:5000", NULL, 0));
    assert_true(build_registry_realm_trusted("http://reg.example/t", "reg.example:5000", NULL, 1));
    assert_true(build_registry_realm_trusted("https://auth.docker.io/token", "docker.io", NULL, 0));
    assert_true(build_registry_realm_trusted("https://registry.svc/token", "127.0.0.1:5000",
                                             "https://registry.svc:5000", 0));
    assert_true(build_registry_realm_trusted("https://[::1]:9/t", "[::1]:5000", NULL, 0));
    /* Another host, plain HTTP to a TLS registry, userinfo tricks, not a URL. */
    assert_false(
        build_registry_realm_trusted("https://evil.example/token", "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted("http://reg.example/token", "reg.example", NULL, 0));
    assert_false(
        build_registry_realm_trusted("https://reg.example@evil.example/", "reg.example", NULL, 0));
    assert_false(
        build_registry_realm_trusted("https://reg.example.evil.example/", "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted("ftp://reg.example/", "reg.example", NULL, 0));
    /* Forms curl tolerates but a registry does not write (fuzz_registry_challenge's finding). */
    assert_false(build_registry_realm_trusted("https:/reg.example/t", "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted("https:reg.example/t", "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted(" https://reg.example/t", "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted("Registry Realm", "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted(NULL, "reg.example", NULL, 0));
    assert_false(build_registry_realm_trusted("https://auth.docker.io/token", "ghcr.io", NULL, 0));
}

static void plain_http_api_with_credentials_needs_insecure(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    struct build_registry_query q = {.repository = "127.0.0.1:5000/basic/apps",
                                     .tag = "t",
                                     .api_url = f->api,
                                     .dockerconfigjson = SECRET_GOOD,
                                     .dockerconfigjson_len = strlen(SECRET_GOOD),
                                     .secret_name = "telo-builds/push"};
    struct telo_err err;
    assert_null(build_registry_check(f->reg, &q, on_done, &a, &err));
    assert_int_equal(err.code, TELO_EINVAL);
    assert_non_null(strstr(err.msg, "is plain HTTP: the credentials of Secret telo-builds/push "
                                    "are sent only over TLS"));
}

/* A token goes into the request header as is: one with CR/LF would add headers of the token
 * service's choosing (curl sends them through), so only printable ASCII is taken. */
static void tokens_outside_printable_ascii_are_refused(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    ask(f, "127.0.0.1:5000/injected/apps", "crlf", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_UNKNOWN);
    char want[512];
    snprintf(want, sizeof(want),
             "registry 127.0.0.1:5000: its token service 'http://127.0.0.1:%d/crlf' answered a "
             "token with byte 0x0d at offset 1 (only printable ASCII, 0x21-0x7e, may go into an "
             "Authorization header); refusing it, treating the image as missing and building it "
             "(fix the token service)",
             f->server.port);
    assert_string_equal(a.message, want);
    assert_string_equal(a.last_error, want);
    ask(f, "127.0.0.1:5000/injected/apps", "space", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_UNKNOWN);
    assert_non_null(strstr(a.message, "/space' answered a token with byte 0x20 at offset 1"));
}

static void retries_then_unknown(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    ask(f, "127.0.0.1:5000/flaky/apps", "t", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_PRESENT);
    assert_int_equal(a.attempts, 3);
    ask(f, "127.0.0.1:5000/down/apps", "t", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_UNKNOWN);
    assert_int_equal(a.attempts, 3);
    char want[512];
    snprintf(want, sizeof(want),
             "registry check of 127.0.0.1:5000/down/apps:t failed 3 times (last: HEAD "
             "http://127.0.0.1:%d/v2/down/apps/manifests/t answered HTTP 503); treating the image "
             "as missing and building it",
             f->server.port);
    assert_string_equal(a.message, want);
    ask(f, "127.0.0.1:5000/forbidden/apps", "t", SECRET_GOOD, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_DENIED);
    assert_string_equal(a.message, "registry 127.0.0.1:5000 denied access to forbidden/apps with "
                                   "the credentials of Secret telo-builds/push: HTTP 403; grant "
                                   "them pull and push on the repository");
}

/* A digest lookup (base-image freshness, issue 17): no positive cache, since a tag's digest
 * moves; a failure says what the last try met. */
static void no_cache_asks_every_time(void **state)
{
    struct fixture *f = *state;
    struct build_registry_opts opts = {
        .max_attempts = 2, .retry_delay_ms = 20, .timeout_ms = 2000, .no_cache = 1};
    struct telo_err err;
    struct build_registry *cached = f->reg;
    f->reg = build_registry_new(f->loop, &opts, &err);
    assert_non_null(f->reg);
    struct answer a;
    for (int i = 0; i < 2; i++) {
        ask(f, "127.0.0.1:5000/open/apps", "present", NULL, &a);
        assert_int_equal(a.presence, BUILD_IMAGE_PRESENT);
        assert_string_equal(a.digest, "sha256:abc");
        assert_int_equal(a.from_cache, 0);
        assert_int_equal(a.attempts, 1);
        assert_string_equal(a.last_error, "");
        assert_false(build_registry_cached(f->reg, "127.0.0.1:5000/open/apps:present"));
    }
    ask(f, "127.0.0.1:5000/down/apps", "t", NULL, &a);
    assert_int_equal(a.presence, BUILD_IMAGE_UNKNOWN);
    assert_int_equal(a.attempts, 2);
    char want[300];
    snprintf(want, sizeof(want),
             "HEAD http://127.0.0.1:%d/v2/down/apps/manifests/t answered HTTP 503", f->server.port);
    assert_string_equal(a.last_error, want);
    build_registry_free(f->reg);
    f->reg = cached;
}

static void refused_connection_and_bad_queries(void **state)
{
    struct fixture *f = *state;
    struct answer a;
    char saved[64];
    snprintf(saved, sizeof(saved), "%s", f->api);
    snprintf(f->api, sizeof(f->api), "http://127.0.0.1:1");
    ask(f, "127.0.0.1:5000/open/apps", "t", NULL, &a);
    snprintf(f->api, sizeof(f->api), "%s", saved);
    assert_int_equal(a.presence, BUILD_IMAGE_UNKNOWN);
    assert_int_equal(a.attempts, 3);
    assert_non_null(strstr(a.message, "failed 3 times (last: http://127.0.0.1:1/v2/open/apps/"
                                      "manifests/t: "));

    struct telo_err err;
    struct build_registry_query q = {.repository = "127.0.0.1:5000/open/apps",
                                     .tag = "t",
                                     .dockerconfigjson = "{\"auths\":{}}",
                                     .dockerconfigjson_len = 12,
                                     .secret_name = "telo-builds/push"};
    assert_null(build_registry_check(f->reg, &q, on_done, &a, &err));
    assert_string_equal(err.msg, "Secret telo-builds/push: .dockerconfigjson has no entry for "
                                 "127.0.0.1:5000 (it has: none)");
    q.dockerconfigjson = NULL;
    q.tag = "bad/tag";
    assert_null(build_registry_check(f->reg, &q, on_done, &a, &err));
    q.tag = "t";
    q.repository = "apps";
    assert_null(build_registry_check(f->reg, &q, on_done, &a, &err));
    q.repository = "127.0.0.1:5000/open/apps";
    q.api_url = "ftp://x";
    assert_null(build_registry_check(f->reg, &q, on_done, &a, &err));
}

static void cancel_and_free_in_flight(void **state)
{
    struct fixture *f = *state;
    struct answer a = {0}, b = {0};
    struct build_registry_query q = {
        .repository = "127.0.0.1:5000/slow/apps", .tag = "t", .api_url = f->api};
    struct telo_err err;
    struct build_registry_check *c1 = build_registry_check(f->reg, &q, on_done, &a, &err);
    struct build_registry_check *c2 = build_registry_check(f->reg, &q, on_done, &b, &err);
    assert_non_null(c1);
    assert_non_null(c2);
    for (int i = 0; i < 20; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    build_registry_check_cancel(c1);
    build_registry_check_cancel(NULL);
    /* c2 is still in flight: freeing the checker cancels it without a callback. */
    build_registry_free(f->reg);
    struct build_registry_opts opts = {.retry_delay_ms = 20};
    f->reg = build_registry_new(f->loop, &opts, &err);
    ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(a.called, 0);
    assert_int_equal(b.called, 0);
}

int main(void)
{
    /* Shared helpers of mock_http.h these tests do not need. */
    (void)mock_kubeconfig;
    (void)mock_stream_start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(repository_names),
        cmocka_unit_test(dockerconfig_credentials),
        cmocka_unit_test(challenges),
        cmocka_unit_test_setup_teardown(present_absent_and_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(basic_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(bearer_challenge, setup, teardown),
        cmocka_unit_test_setup_teardown(retries_then_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(tokens_outside_printable_ascii_are_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(foreign_realm_gets_no_credentials, setup, teardown),
        cmocka_unit_test(realm_trust),
        cmocka_unit_test_setup_teardown(plain_http_api_with_credentials_needs_insecure, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(refused_connection_and_bad_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_and_free_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(no_cache_asks_every_time, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

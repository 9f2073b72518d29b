/* Tests for pkg/kube/rest.c: resource paths, list queries, descriptions, DeleteOptions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "kube/rest.h"
#include "util/buf.h"
#include "util/err.h"

#include <json.h>

#include <string.h>

static const char *path_of(const struct kube_ref *ref, struct buf *b)
{
    struct telo_err err;
    buf_reset(b);
    assert_int_equal(kube_ref_path(ref, b, &err), 0);
    return b->data;
}

static void core_and_named_group_paths(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    struct kube_ref cm = {
        .version = "v1", .resource = "configmaps", .namespace = "ns", .name = "x"};
    assert_string_equal(path_of(&cm, &b), "/api/v1/namespaces/ns/configmaps/x");
    struct kube_ref all = {.group = "", .version = "v1", .resource = "configmaps"};
    assert_string_equal(path_of(&all, &b), "/api/v1/configmaps");
    struct kube_ref dep = {
        .group = "apps", .version = "v1", .resource = "deployments", .namespace = "ns"};
    assert_string_equal(path_of(&dep, &b), "/apis/apps/v1/namespaces/ns/deployments");
    struct kube_ref node = {.version = "v1", .resource = "nodes", .name = "n1"};
    assert_string_equal(path_of(&node, &b), "/api/v1/nodes/n1");
    struct kube_ref st = {.group = "telo.run",
                          .version = "v1alpha1",
                          .resource = "telosessions",
                          .namespace = "ns",
                          .name = "s",
                          .subresource = "status"};
    assert_string_equal(path_of(&st, &b),
                        "/apis/telo.run/v1alpha1/namespaces/ns/telosessions/s/status");
    buf_release(&b);
}

static void names_are_escaped(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    /* Names are validated by the server, but a path must never be re-interpreted. */
    struct kube_ref ref = {
        .version = "v1", .resource = "configmaps", .namespace = "a/b", .name = "../x?y"};
    assert_string_equal(path_of(&ref, &b), "/api/v1/namespaces/a%2Fb/configmaps/..%2Fx%3Fy");
    buf_release(&b);
}

static void bad_refs_are_rejected(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    struct telo_err err;
    struct kube_ref nov = {.resource = "configmaps"};
    assert_int_equal(kube_ref_path(&nov, &b, &err), -TELO_EINVAL);
    struct kube_ref sub = {.version = "v1", .resource = "pods", .subresource = "status"};
    assert_int_equal(kube_ref_path(&sub, &b, &err), -TELO_EINVAL);
    assert_string_equal(err.msg, "subresource 'status' of pods needs an object name");
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

static void list_query(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    buf_append_str(&b, "/api/v1/pods");
    struct kube_list_opts o = {.label_selector = "app=a",
                               .field_selector = "spec.nodeName=n1",
                               .resource_version = "0",
                               .resource_version_match = "NotOlderThan",
                               .limit = 500,
                               .continue_token = "eyJ2Ijo+/=",
                               .timeout_seconds = 10};
    assert_int_equal(kube_list_query(&o, &b), 0);
    assert_string_equal(b.data, "/api/v1/pods?labelSelector=app%3Da&fieldSelector=spec.nodeName%"
                                "3Dn1&resourceVersion=0&resourceVersionMatch=NotOlderThan&limit="
                                "500&continue=eyJ2Ijo%2B%2F%3D&timeoutSeconds=10");
    buf_reset(&b);
    assert_int_equal(kube_list_query(NULL, &b), 0);
    struct kube_list_opts empty = {0};
    assert_int_equal(kube_list_query(&empty, &b), 0);
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

static void describe(void **state)
{
    (void)state;
    char d[256];
    struct kube_ref cm = {
        .version = "v1", .resource = "configmaps", .namespace = "ns", .name = "x"};
    kube_ref_describe("get", &cm, d, sizeof(d));
    assert_string_equal(d, "get configmaps \"x\" in namespace \"ns\"");
    struct kube_ref st = {.group = "telo.run",
                          .version = "v1alpha1",
                          .resource = "telosessions",
                          .name = "s",
                          .subresource = "status"};
    kube_ref_describe("update", &st, d, sizeof(d));
    assert_string_equal(d, "update telosessions.telo.run \"s\" (status)");
    kube_ref_describe("list", &cm, d, 8);
    assert_string_equal(d, "list co");
}

static void delete_options_body(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(kube_delete_body(NULL, &b), 0);
    assert_string_equal(b.data, "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\"}");
    buf_reset(&b);
    struct kube_delete_opts o = {.propagation_policy = "Foreground",
                                 .precondition_uid = "u-1",
                                 .precondition_rv = "42",
                                 .grace_period_seconds = 0,
                                 .dry_run = 1};
    assert_int_equal(kube_delete_body(&o, &b), 0);
    assert_string_equal(b.data,
                        "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\",\"propagationPolicy\":"
                        "\"Foreground\",\"gracePeriodSeconds\":0,\"preconditions\":{\"uid\":\"u-"
                        "1\",\"resourceVersion\":\"42\"},\"dryRun\":[\"All\"]}");
    buf_reset(&b);
    struct kube_delete_opts d = {.grace_period_seconds = -1};
    assert_int_equal(kube_delete_body(&d, &b), 0);
    assert_string_equal(b.data, "{\"kind\":\"DeleteOptions\",\"apiVersion\":\"v1\"}");
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(core_and_named_group_paths),
        cmocka_unit_test(names_are_escaped),
        cmocka_unit_test(bad_refs_are_rejected),
        cmocka_unit_test(list_query),
        cmocka_unit_test(describe),
        cmocka_unit_test(delete_options_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/kube/svcproxy.c: a Service's in-cluster URL through the API server's proxy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kube/svcproxy.h"
#include "util/buf.h"

#include <string.h>

static void expect_proxy(const char *server, const char *url, const char *want)
{
    struct buf b;
    struct telo_err err;
    buf_init(&b, 16384);
    if (kube_service_proxy_url(server, url, &b, &err) != 0)
        fail_msg("%s: %s", url, err.msg);
    assert_string_equal(b.data, want);
    buf_release(&b);
}

static void a_service_url_goes_through_the_proxy_with_path_and_query(void **state)
{
    (void)state;
    /* The chart's gatewayUrl: http, the Service port, the gateway's attach path. */
    expect_proxy("https://127.0.0.1:16443",
                 "http://telo-operator-gateway.telo-system.svc:80/v1/namespaces/team-a/"
                 "telosessions/demo/attach",
                 "https://127.0.0.1:16443/api/v1/namespaces/telo-system/services/"
                 "http:telo-operator-gateway:80/proxy/v1/namespaces/team-a/telosessions/demo/"
                 "attach");
    /* No port: the scheme's; wss is https; the cluster domain and a query are kept apart. */
    expect_proxy("https://api.example.com:6443/",
                 "wss://gw.ops.svc.cluster.local/v1/namespaces/a/telosessions/b/attach?lastSeq=7",
                 "https://api.example.com:6443/api/v1/namespaces/ops/services/https:gw:443/proxy/"
                 "v1/namespaces/a/telosessions/b/attach?lastSeq=7");
    /* A server with a path prefix (a proxy in front of the API server) keeps it. */
    expect_proxy("https://rancher.example.com/k8s/clusters/c-1", "ws://gw.ops.svc:8081/v1/x",
                 "https://rancher.example.com/k8s/clusters/c-1/api/"
                 "v1/namespaces/ops/services/http:gw:8081/proxy/v1/x");
}

static void the_parts_of_a_service_url(void **state)
{
    (void)state;
    struct kube_service_url s;
    struct telo_err err;
    assert_int_equal(kube_service_url_parse("https://gw.ops.svc.cluster.local.:8443/x", &s, &err),
                     0);
    assert_string_equal(s.scheme, "https");
    assert_string_equal(s.name, "gw");
    assert_string_equal(s.namespace, "ops");
    assert_int_equal(s.port, 8443);
}

/* Anything that is not NAME.NAMESPACE.svc[...] names no Service: an Ingress host, an IP address,
 * a two-label name, labels a Service or namespace cannot have. */
static void other_hosts_name_no_service(void **state)
{
    (void)state;
    const char *not_services[] = {
        "https://gateway.example.com/v1/x",
        "http://127.0.0.1:8081/v1/x",
        "http://[::1]:8081/v1/x",
        "http://gw.ops/v1/x",
        "http://gw.ops.svcx/v1/x",
        "http://-gw.ops.svc/v1/x",
        "http://gw.o_ps.svc/v1/x",
        "http://gw..svc/v1/x",
        "http://svc/v1/x",
    };
    for (size_t i = 0; i < sizeof(not_services) / sizeof(not_services[0]); i++) {
        struct kube_service_url s;
        struct telo_err err;
        int rc = kube_service_url_parse(not_services[i], &s, &err);
        if (rc != -TELO_ENOTFOUND)
            fail_msg("%s: rc %d (%s)", not_services[i], rc, err.msg);
        assert_non_null(strstr(err.msg, "not a Service's cluster DNS name"));
    }
}

static void bad_urls_are_refused(void **state)
{
    (void)state;
    const char *bad[] = {"ftp://gw.ops.svc/x", "http://user:pw@gw.ops.svc/x", "not a url", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct kube_service_url s;
        struct telo_err err;
        int rc = kube_service_url_parse(bad[i], &s, &err);
        if (rc != -TELO_EINVAL)
            fail_msg("%s: rc %d (%s)", bad[i], rc, err.msg);
    }
    struct buf b;
    struct telo_err err;
    buf_init(&b, 16384);
    assert_int_equal(kube_service_proxy_url("", "http://gw.ops.svc/x", &b, &err), -TELO_EINVAL);
    assert_int_equal(kube_service_proxy_url(NULL, "http://gw.ops.svc/x", &b, &err), -TELO_EINVAL);
    /* A result over the buffer's bound is refused, not truncated. */
    buf_init(&b, 32);
    assert_int_equal(
        kube_service_proxy_url("https://127.0.0.1:16443", "http://gw.ops.svc/x", &b, &err),
        -TELO_ETOOBIG);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_service_url_goes_through_the_proxy_with_path_and_query),
        cmocka_unit_test(the_parts_of_a_service_url),
        cmocka_unit_test(other_hosts_name_no_service),
        cmocka_unit_test(bad_urls_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

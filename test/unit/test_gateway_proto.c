/* Tests for pkg/gateway/proto.c: route, subprotocols, resize JSON, Status bodies, seq wrap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/proto.h"

#include <string.h>

static void parses_the_attach_route(void **state)
{
    (void)state;
    struct gw_target t;
    assert_int_equal(gw_parse_target("/v1/namespaces/dev/telosessions/my.app/attach?lastSeq=3", &t),
                     0);
    assert_string_equal(t.namespace, "dev");
    assert_string_equal(t.name, "my.app");
    assert_string_equal(t.action, "attach");
    assert_string_equal(t.query, "lastSeq=3");
    assert_int_equal(gw_parse_target("/v1/namespaces/dev/telosessions/x/debug", &t), 0);
    assert_string_equal(t.query, "");
    static const char *const bad[] = {
        "/v1/namespaces/dev/telosessions/x/exec",
        "/v1/namespaces/dev/telosessions/x/attach/more",
        "/v1/namespaces/dev/pods/x/attach",
        "/v1/namespaces//telosessions/x/attach",
        "/v1/namespaces/Dev/telosessions/x/attach",
        "/v1/namespaces/a.b/telosessions/x/attach",
        "/v1/namespaces/dev/telosessions/%2e%2e/attach",
        "/v1/namespaces/dev/telosessions/-x/attach",
        "/v2/namespaces/dev/telosessions/x/attach",
        "/healthz",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gw_parse_target(bad[i], &t), -TELO_ENOTFOUND);
}

static void picks_the_first_supported_protocol_and_the_bearer_token(void **state)
{
    (void)state;
    char tok[64];
    int bad = 0;
    assert_int_equal(
        gw_pick_protocol("v4.channel.k8s.io, v5.channel.k8s.io", tok, sizeof(tok), &bad),
        GW_PROTO_V4);
    assert_string_equal(tok, "");
    /* "my-token" in unpadded base64url is bXktdG9rZW4. */
    assert_int_equal(gw_pick_protocol("base64url.bearer.authorization.k8s.io.bXktdG9rZW4, "
                                      "channel.k8s.io, v5.channel.k8s.io",
                                      tok, sizeof(tok), &bad),
                     GW_PROTO_V5);
    assert_string_equal(tok, "my-token");
    assert_false(bad);
    assert_int_equal(gw_pick_protocol("telo.io.v1", tok, sizeof(tok), &bad), GW_PROTO_IO_V1);
    assert_int_equal(gw_pick_protocol("base64.channel.k8s.io", tok, sizeof(tok), &bad),
                     GW_PROTO_NONE);
    assert_int_equal(gw_pick_protocol(NULL, tok, sizeof(tok), &bad), GW_PROTO_NONE);
    assert_int_equal(gw_pick_protocol("base64url.bearer.authorization.k8s.io.!!!,telo.io.v1", tok,
                                      sizeof(tok), &bad),
                     GW_PROTO_IO_V1);
    assert_true(bad);
    assert_string_equal(tok, "");
    assert_string_equal(gw_proto_name(GW_PROTO_V5), "v5.channel.k8s.io");
}

static void clamps_sizes_to_the_reference_bounds(void **state)
{
    (void)state;
    assert_int_equal(gw_clamp_dim(0), 1);
    assert_int_equal(gw_clamp_dim(-5), 1);
    assert_int_equal(gw_clamp_dim(80), 80);
    assert_int_equal(gw_clamp_dim(65535), GW_SIZE_MAX_DIM);
}

static void parses_io_control_frames(void **state)
{
    (void)state;
    struct gw_io_control c;
    const char *rs = "{\"type\":\"resize\",\"cols\":132,\"rows\":0}";
    assert_int_equal(gw_parse_io_control((const uint8_t *)rs, strlen(rs), &c), 0);
    assert_int_equal(c.kind, GW_IO_RESIZE);
    assert_int_equal(c.cols, 132);
    assert_int_equal(c.rows, 1);
    const char *other = "{\"type\":\"ping\"}";
    assert_int_equal(gw_parse_io_control((const uint8_t *)other, strlen(other), &c), 0);
    assert_int_equal(c.kind, GW_IO_UNKNOWN);
    const char *bad = "{\"type\":\"resize\",\"cols\":\"x\",\"rows\":3}";
    assert_int_equal(gw_parse_io_control((const uint8_t *)bad, strlen(bad), &c), -TELO_EPROTO);
    const char *trailing = "{\"type\":\"resize\",\"cols\":1,\"rows\":1} junk";
    assert_int_equal(gw_parse_io_control((const uint8_t *)trailing, strlen(trailing), &c),
                     -TELO_EPROTO);
}

/* A member of the wrong type (null, a number, an array, an object where a string or a number is
 * wanted) is never read as another type: {"type":null} crashed the gateway (issue 15, finding 2).
 */
static void io_control_members_of_the_wrong_type(void **state)
{
    (void)state;
    struct gw_io_control c;
    static const char *const unknown[] = {
        "{\"type\":null}",
        "{\"type\":null,\"cols\":3,\"rows\":4}",
        "{\"type\":5}",
        "{\"type\":true}",
        "{\"type\":[\"resize\"],\"cols\":3,\"rows\":4}",
        "{\"type\":{\"resize\":1},\"cols\":3,\"rows\":4}",
        "{}",
    };
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        c.kind = GW_IO_RESIZE;
        assert_int_equal(gw_parse_io_control((const uint8_t *)unknown[i], strlen(unknown[i]), &c),
                         0);
        assert_int_equal(c.kind, GW_IO_UNKNOWN);
    }
    static const char *const bad[] = {
        "{\"type\":\"resize\",\"cols\":null,\"rows\":4}",
        "{\"type\":\"resize\",\"cols\":3,\"rows\":null}",
        "{\"type\":\"resize\",\"cols\":[3],\"rows\":4}",
        "{\"type\":\"resize\",\"cols\":{\"n\":3},\"rows\":4}",
        "{\"type\":\"resize\",\"cols\":true,\"rows\":4}",
        "{\"type\":\"resize\",\"cols\":3.5,\"rows\":4}",
        "{\"type\":\"resize\",\"cols\":1e300,\"rows\":4}",
        "{\"type\":\"resize\"}",
        "null",
        "[\"resize\"]",
        "\"resize\"",
        "5",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gw_parse_io_control((const uint8_t *)bad[i], strlen(bad[i]), &c),
                         -TELO_EPROTO);
    /* A negative size is clamped as a zero one is. */
    const char *neg = "{\"type\":\"resize\",\"cols\":-5,\"rows\":20000}";
    assert_int_equal(gw_parse_io_control((const uint8_t *)neg, strlen(neg), &c), 0);
    assert_int_equal(c.kind, GW_IO_RESIZE);
    assert_int_equal(c.cols, 1);
    assert_int_equal(c.rows, GW_SIZE_MAX_DIM);
}

static void refusal_bodies_are_kubernetes_statuses(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(gw_error_status_json(&b, 403, "Forbidden", "no \"quotes\" lost"), 0);
    assert_non_null(strstr(b.data, "\"kind\":\"Status\""));
    assert_non_null(strstr(b.data, "\"code\":403"));
    assert_non_null(strstr(b.data, "\"reason\":\"Forbidden\""));
    assert_non_null(strstr(b.data, "no \\\"quotes\\\" lost"));
    buf_release(&b);
}

static void wire_seq_reconstruction(void **state)
{
    (void)state;
    assert_int_equal(gw_seq_from_wire(5, 10), 5);
    assert_int_equal(gw_seq_from_wire(0, 0), 0);
    assert_int_equal(gw_seq_from_wire(11, 10), 0); /* from the future: nothing before it */
    uint64_t latest = ((uint64_t)1 << 32) + 7;
    assert_int_equal(gw_seq_from_wire(5, latest), ((uint64_t)1 << 32) + 5);
    assert_int_equal(gw_seq_from_wire(0xFFFFFFF0u, latest), 0xFFFFFFF0u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_the_attach_route),
        cmocka_unit_test(picks_the_first_supported_protocol_and_the_bearer_token),
        cmocka_unit_test(clamps_sizes_to_the_reference_bounds),
        cmocka_unit_test(parses_io_control_frames),
        cmocka_unit_test(io_control_members_of_the_wrong_type),
        cmocka_unit_test(refusal_bodies_are_kubernetes_statuses),
        cmocka_unit_test(wire_seq_reconstruction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

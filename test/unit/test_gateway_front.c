/* Tests for pkg/gateway/front.c: answer heads, refusal and limit counters, the /metrics text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "gateway/front.h"

#include <string.h>

static void an_answer_has_its_head_and_body(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(gw_http_answer(&b, 429, "application/json", "{}", "Retry-After: 1\r\n"), 0);
    assert_string_equal(b.data,
                        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                        "Content-Length: 2\r\nCache-Control: no-store\r\n"
                        "Connection: close\r\nRetry-After: 1\r\n\r\n{}");
    buf_release(&b);
    buf_init(&b, 4096);
    assert_int_equal(gw_http_answer(&b, 599, "text/plain", NULL, NULL), 0);
    assert_string_equal(b.data, "HTTP/1.1 599 Service Unavailable\r\nContent-Type: text/plain\r\n"
                                "Content-Length: 0\r\nCache-Control: no-store\r\n"
                                "Connection: close\r\n\r\n");
    buf_release(&b);
    buf_init(&b, 64); /* too small: the error, not a cut answer */
    assert_true(gw_http_answer(&b, 200, "text/plain", "ok\n", NULL) < 0);
    buf_release(&b);
}

static void counters_show_in_the_metrics_text(void **state)
{
    (void)state;
    struct gw_front_stats s = {0};
    gw_front_refused(&s, 401);
    gw_front_refused(&s, 418); /* not one of the seven: not counted */
    gw_front_limited(&s, GW_L_PENDING_PER_SOURCE, 429);
    gw_front_limited(&s, GW_L_PENDING_PER_SOURCE, 429);
    struct gw_hub_metrics hub = {0};
    hub.clients = 3;
    struct gw_gate_metrics gate = {0};
    gate.hits = 7;
    struct gw_front_gauges g = {
        .hub = &hub, .gate = &gate, .pending = 5, .accept_backoff_s = 0.2, .debug_frames = 9};
    struct buf b;
    buf_init(&b, (size_t)1 << 20);
    assert_int_equal(gw_front_metrics(&b, &s, &g), 0);
    const char *want[] = {
        "\ntelo_gateway_clients 3\n",
        "\ntelo_gateway_refusals_total{code=\"401\"} 1\n",
        "\ntelo_gateway_refusals_total{code=\"429\"} 2\n",
        "\ntelo_gateway_refusals_total{code=\"503\"} 0\n",
        "\ntelo_gateway_limited_total{limit=\"pending_per_source\"} 2\n",
        "\ntelo_gateway_limited_total{limit=\"admission_rate\"} 0\n",
        "\ntelo_gateway_pending 5\n",
        "\ntelo_gateway_debug_frames_total 9\n",
        "\ntelo_gateway_admission_cache_hits_total 7\n",
        "(accepting pauses 0.2 s)",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (strstr(b.data, want[i]) == NULL)
            fail_msg("missing %s in:\n%s", want[i], b.data);
    }
    assert_null(strstr(b.data, "418"));
    assert_string_equal(gw_limit_name(GW_L_ADMISSION_RATE_PER_SOURCE), "admission_rate_per_source");
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_answer_has_its_head_and_body),
        cmocka_unit_test(counters_show_in_the_metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

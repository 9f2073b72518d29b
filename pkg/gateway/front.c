/* What the gateway's HTTP front writes besides the WebSocket handshake: response heads, the
 * counters of refused and limited requests, and the /metrics text. Pure. */
#include "gateway/front.h"

#include <string.h>

static const int refusal_codes[GW_REFUSAL_CODES] = {400, 401, 403, 404, 409, 429, 503};

static const char *const limit_names[GW_L_COUNT] = {"pending_per_source",
                                                    "pending",
                                                    "clients_per_session",
                                                    "clients",
                                                    "admission_rate_per_source",
                                                    "admission_rate",
                                                    "sessions",
                                                    "debug_streams",
                                                    "clients_per_namespace",
                                                    "sessions_per_namespace",
                                                    "debug_streams_per_namespace"};

const char *gw_limit_name(enum gw_limit which)
{
    return (unsigned)which < GW_L_COUNT ? limit_names[which] : "";
}

void gw_front_refused(struct gw_front_stats *s, int code)
{
    for (size_t i = 0; i < GW_REFUSAL_CODES; i++) {
        if (refusal_codes[i] == code)
            s->refusals[i]++;
    }
}

void gw_front_limited(struct gw_front_stats *s, enum gw_limit which, int code)
{
    if ((unsigned)which < GW_L_COUNT)
        s->limited[which]++;
    gw_front_refused(s, code);
}

const char *gw_http_status_text(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    default:
        return "Service Unavailable";
    }
}

int gw_http_answer(struct buf *out, int code, const char *content_type, const char *body,
                   const char *extra_headers)
{
    size_t blen = body != NULL ? strlen(body) : 0;
    int rc = buf_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                        code, gw_http_status_text(code), content_type, blen,
                        extra_headers != NULL ? extra_headers : "");
    return rc == 0 && blen > 0 ? buf_append(out, body, blen) : rc;
}

int gw_front_metrics(struct buf *b, const struct gw_front_stats *s, const struct gw_front_gauges *g)
{
    const struct gw_hub_metrics *m = g->hub;
    int rc = buf_printf(
        b,
        "# HELP telo_gateway_sessions Attach sessions in memory (live or ended).\n"
        "# TYPE telo_gateway_sessions gauge\ntelo_gateway_sessions %lu\n"
        "# HELP telo_gateway_clients Attached clients.\n"
        "# TYPE telo_gateway_clients gauge\ntelo_gateway_clients %lu\n"
        "# HELP telo_gateway_clients_total Clients ever attached.\n"
        "# TYPE telo_gateway_clients_total counter\ntelo_gateway_clients_total %lu\n"
        "# HELP telo_gateway_upstream_connects_total pods/attach upgrades accepted.\n"
        "# TYPE telo_gateway_upstream_connects_total counter\n"
        "telo_gateway_upstream_connects_total %lu\n"
        "# HELP telo_gateway_upstream_failures_total pods/attach connections that failed.\n"
        "# TYPE telo_gateway_upstream_failures_total counter\n"
        "telo_gateway_upstream_failures_total %lu\n"
        "# HELP telo_gateway_gaps_total Times a client fell behind the replay ring.\n"
        "# TYPE telo_gateway_gaps_total counter\ntelo_gateway_gaps_total %lu\n"
        "# HELP telo_gateway_idle_closes_total Running sessions dropped after the idle "
        "keep time without a client.\n"
        "# TYPE telo_gateway_idle_closes_total counter\n"
        "telo_gateway_idle_closes_total %lu\n"
        "# HELP telo_gateway_evictions_total Sessions without a client dropped before their "
        "keep time, to make room for another (--max-sessions).\n"
        "# TYPE telo_gateway_evictions_total counter\n"
        "telo_gateway_evictions_total %lu\n"
        "# HELP telo_gateway_resizes_total Resizes sent to containers.\n"
        "# TYPE telo_gateway_resizes_total counter\ntelo_gateway_resizes_total %lu\n"
        "# HELP telo_gateway_output_bytes_total Output read from containers.\n"
        "# TYPE telo_gateway_output_bytes_total counter\n"
        "telo_gateway_output_bytes_total %llu\n"
        "# HELP telo_gateway_sent_bytes_total Output queued to clients.\n"
        "# TYPE telo_gateway_sent_bytes_total counter\ntelo_gateway_sent_bytes_total %llu\n"
        "# HELP telo_gateway_stdin_bytes_total Input forwarded to containers.\n"
        "# TYPE telo_gateway_stdin_bytes_total counter\n"
        "telo_gateway_stdin_bytes_total %llu\n"
        "# HELP telo_gateway_stdin_writes_total Upstream messages that carried the input: "
        "what a turn of client reads brought goes up in one.\n"
        "# TYPE telo_gateway_stdin_writes_total counter\n"
        "telo_gateway_stdin_writes_total %llu\n"
        "# HELP telo_gateway_stdin_dropped_bytes_total Input lost: the container was not "
        "reading it, or an upstream being opened had 64 KiB waiting.\n"
        "# TYPE telo_gateway_stdin_dropped_bytes_total counter\n"
        "telo_gateway_stdin_dropped_bytes_total %llu\n"
        "# HELP telo_gateway_log_lines_suppressed_total Refusal log lines held back by their "
        "budget (100 at once, 10 a second); each refusal is still counted in "
        "telo_gateway_refusals_total.\n"
        "# TYPE telo_gateway_log_lines_suppressed_total counter\n"
        "telo_gateway_log_lines_suppressed_total %llu\n"
        "# HELP telo_gateway_refusals_total Attach requests refused, by HTTP status.\n"
        "# TYPE telo_gateway_refusals_total counter\n",
        m->sessions, m->clients, m->clients_total, m->upstream_connects, m->upstream_failures,
        m->gaps, m->idle_closes, m->evictions, m->resizes, m->bytes_in, m->bytes_out,
        m->stdin_bytes, m->stdin_writes, m->stdin_dropped_bytes, g->log_lines_suppressed);
    for (size_t i = 0; rc == 0 && i < GW_REFUSAL_CODES; i++)
        rc = buf_printf(b, "telo_gateway_refusals_total{code=\"%d\"} %lu\n", refusal_codes[i],
                        s->refusals[i]);
    rc = rc ? rc
            : buf_printf(b,
                         "# HELP telo_gateway_debug_streams Debug streams being relayed.\n"
                         "# TYPE telo_gateway_debug_streams gauge\ntelo_gateway_debug_streams %zu\n"
                         "# HELP telo_gateway_debug_frames_total Debug frames relayed to clients.\n"
                         "# TYPE telo_gateway_debug_frames_total counter\n"
                         "telo_gateway_debug_frames_total %lu\n"
                         "# HELP telo_gateway_debug_stalled_closes_total Debug streams ended "
                         "because their client took none of its queue for 60 s.\n"
                         "# TYPE telo_gateway_debug_stalled_closes_total counter\n"
                         "telo_gateway_debug_stalled_closes_total %lu\n"
                         "# HELP telo_gateway_reauth_closes_total Clients closed because their "
                         "credential no longer admitted them.\n"
                         "# TYPE telo_gateway_reauth_closes_total counter\n"
                         "telo_gateway_reauth_closes_total %lu\n",
                         g->debug_streams, g->debug_frames, g->debug_stalled, m->reauth_closes);
    rc = rc ? rc
            : buf_printf(b,
                         "# HELP telo_gateway_pending Connections before admission (head or "
                         "verdict awaited), this request not counted.\n"
                         "# TYPE telo_gateway_pending gauge\ntelo_gateway_pending %zu\n"
                         "# HELP telo_gateway_client_queued_bytes Output queued to attached "
                         "clients, not yet written to their sockets.\n"
                         "# TYPE telo_gateway_client_queued_bytes gauge\n"
                         "telo_gateway_client_queued_bytes %zu\n"
                         "# HELP telo_gateway_limited_total Requests turned away by a limit.\n"
                         "# TYPE telo_gateway_limited_total counter\n",
                         g->pending, g->client_queued);
    for (size_t i = 0; rc == 0 && i < GW_L_COUNT; i++)
        rc = buf_printf(b, "telo_gateway_limited_total{limit=\"%s\"} %lu\n", limit_names[i],
                        s->limited[i]);
    const struct gw_gate_metrics *gm = g->gate;
    return rc ? rc
              : buf_printf(
                    b,
                    "# HELP telo_gateway_accept_exhausted_total Accepts that failed for want of "
                    "file descriptors or memory (accepting pauses %g s).\n"
                    "# TYPE telo_gateway_accept_exhausted_total counter\n"
                    "telo_gateway_accept_exhausted_total %lu\n"
                    "# HELP telo_gateway_admission_lookups_total Admissions asked of the API "
                    "server (1-3 requests each).\n"
                    "# TYPE telo_gateway_admission_lookups_total counter\n"
                    "telo_gateway_admission_lookups_total %lu\n"
                    "# HELP telo_gateway_admission_cache_hits_total Admissions answered from the "
                    "cache.\n"
                    "# TYPE telo_gateway_admission_cache_hits_total counter\n"
                    "telo_gateway_admission_cache_hits_total %lu\n"
                    "# HELP telo_gateway_admission_coalesced_total Admissions that waited for an "
                    "identical one in flight.\n"
                    "# TYPE telo_gateway_admission_coalesced_total counter\n"
                    "telo_gateway_admission_coalesced_total %lu\n",
                    g->accept_backoff_s, s->accept_exhausted, gm->lookups, gm->hits, gm->coalesced);
}

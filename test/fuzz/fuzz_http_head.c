/* libFuzzer target: the HTTP/1.1 head of a WebSocket handshake as pkg/ws reads it (the request
 * on the gateway's side, the 101 response on a client's), then what the gateway reads out of a
 * request: the Upgrade and Connection lists, the subprotocol offer with its bearer token, the
 * route and the lastSeq query parameter; and the path as pkg/httpd decodes it. The first input
 * byte picks request or response. Every string the parser returns lies inside the buffer it was
 * given. */
#include "gateway/proto.h"
#include "ws/http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *buf_lo, *buf_hi;

static void inside(const char *s)
{
    if (s != NULL && (s < buf_lo || s >= buf_hi || memchr(s, '\0', (size_t)(buf_hi - s)) == NULL))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int response = data[0] & 1;
    size_t len = size - 1;
    char *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data + 1, len);
    long head = ws_http_head_end(buf, len, 0, 8192);
    if (head <= 0) {
        if (head < 0 && (head != -TELO_ETOOBIG || len < 8192))
            abort();
        free(buf);
        return 0;
    }
    if ((size_t)head > len)
        abort();
    struct ws_http_head h;
    struct telo_err err;
    buf_lo = buf;
    buf_hi = buf + head;
    int rc = response ? ws_http_parse_response(buf, (size_t)head, &h, &err)
                      : ws_http_parse_request(buf, (size_t)head, &h, &err);
    if (rc != 0) {
        free(buf);
        return 0;
    }
    if (h.nheaders > WS_HTTP_MAX_HEADERS)
        abort();
    inside(h.method);
    inside(h.target);
    for (size_t i = 0; i < h.nheaders; i++) {
        inside(h.headers[i].name);
        inside(h.headers[i].value);
    }
    const char *upgrade = ws_http_header(&h, "Upgrade");
    const char *connection = ws_http_header(&h, "Connection");
    if (upgrade)
        ws_http_list_has(upgrade, "websocket");
    if (connection)
        ws_http_list_has(connection, "upgrade");
    const char *offer = ws_http_header(&h, "Sec-WebSocket-Protocol");
    if (offer) {
        char item[64];
        const char *p = offer;
        int n = 0;
        while (ws_http_list_next(&p, item, sizeof(item)) && n++ < 64)
            if (strlen(item) >= sizeof(item))
                abort();
    }
    char token[512];
    int bad = 0;
    enum gw_proto proto = gw_pick_protocol(offer, token, sizeof(token), &bad);
    if (memchr(token, '\0', sizeof(token)) == NULL || gw_proto_name(proto) == NULL)
        abort();
    if (h.target != NULL) {
        /* pkg/httpd: the path before '?', percent-decoded in place, never longer; without a '%'
         * it is unchanged. */
        char *path = strdup(h.target);
        if (path != NULL) {
            path[strcspn(path, "?")] = '\0';
            size_t before = strlen(path);
            int plain = strchr(path, '%') == NULL;
            char *orig = strdup(path);
            int drc = ws_http_path_decode(path);
            if ((drc != 0 && drc != -1) || memchr(path, '\0', before + 1) == NULL ||
                (drc == 0 && strlen(path) > before) ||
                (plain && orig != NULL && (drc != 0 || strcmp(orig, path) != 0)))
                abort();
            free(orig);
            free(path);
        }
        struct gw_target t;
        if (gw_parse_target(h.target, &t) == 0) {
            char value[32];
            if (t.query == NULL)
                abort();
            ws_http_query_param(t.query, "lastSeq", value, sizeof(value));
        }
    }
    free(buf);
    return 0;
}

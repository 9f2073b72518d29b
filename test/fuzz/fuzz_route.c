/* libFuzzer target: what the gateway decides from a request's target and subprotocol offer:
 * gw_parse_target on the route (/v1/namespaces/{ns}/telosessions/{name}/{attach|debug}?query),
 * ws_http_query_param on its query, gw_pick_protocol on the offer (with the base64url bearer
 * token item). The input is "target\noffer". A parsed route names only DNS-1123 labels, so no
 * path trickery can reach an API URL built from them. */
#include "fuzz_text.h"
#include "gateway/proto.h"
#include "ws/http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void dns_label_or_abort(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= GW_NAME_MAX)
        abort();
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (text == NULL)
        return 0;
    char *offer = fuzz_second_line(text);

    struct gw_target t;
    if (gw_parse_target(text, &t) == 0) {
        dns_label_or_abort(t.namespace);
        dns_label_or_abort(t.name);
        if (strcmp(t.action, "attach") != 0 && strcmp(t.action, "debug") != 0)
            abort();
        /* The query points into the target, or is "" when there is none. */
        if (t.query == NULL || (t.query[0] != '\0' && (t.query < text || t.query > text + size)))
            abort();
        char value[64];
        if (ws_http_query_param(t.query, "lastSeq", value, sizeof(value)) &&
            memchr(value, '\0', sizeof(value)) == NULL)
            abort();
    }
    char token[256];
    int bad = 0;
    enum gw_proto p = gw_pick_protocol(offer, token, sizeof(token), &bad);
    /* (bad and a token together is fine: an offer may carry a bad bearer item and a good one.) */
    if (memchr(token, '\0', sizeof(token)) == NULL)
        abort();
    if (p != GW_PROTO_NONE && offer == NULL)
        abort();
    free(text);
    return 0;
}

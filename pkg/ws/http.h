/* The HTTP/1.1 message head of a WebSocket handshake: request (server side) and response (client
 * side), parsed in place. Pure. */
#ifndef TELO_WS_HTTP_H
#define TELO_WS_HTTP_H

#include "util/err.h"

#include <stddef.h>

#define WS_HTTP_MAX_HEADERS 48

struct ws_http_header {
    const char *name;  /* as sent; compare case-insensitively */
    const char *value; /* leading and trailing blanks removed */
};

/* A parsed head. Every string points into the buffer given to the parser, which it edits
 * (NUL-terminates), so they live as long as that buffer. */
struct ws_http_head {
    const char *method; /* request: "GET"; response: NULL */
    const char *target; /* request: "/path?query" as sent; response: NULL */
    int status;         /* response: the status code; request: 0 */
    int minor_version;  /* 1 for HTTP/1.1 */
    struct ws_http_header headers[WS_HTTP_MAX_HEADERS];
    size_t nheaders;
};

/* Looks for the blank line ending a head in buf[0..len). searched is the len of an earlier call
 * on the same buffer that found none (0 the first time): the search resumes there (less the 3
 * bytes a blank line may straddle), so a head that arrives a byte at a time is read once, not
 * once per byte. Returns the head's length including the blank line, 0 when it is not complete
 * yet, or -TELO_ETOOBIG when len has reached max without one. */
long ws_http_head_end(const char *buf, size_t len, size_t searched, size_t max);

/* Parses a complete request head (buf[0..head_len), head_len from ws_http_head_end) in place.
 * Returns 0, or -TELO_EPROTO with err filled: a malformed request line, a version other than
 * HTTP/1.x, a header line without a colon or with a space before it, a control character, obsolete
 * line folding, or more than WS_HTTP_MAX_HEADERS headers. */
int ws_http_parse_request(char *buf, size_t head_len, struct ws_http_head *h, struct telo_err *err);

/* As ws_http_parse_request for a response head ("HTTP/1.1 101 Switching Protocols"). */
int ws_http_parse_response(char *buf, size_t head_len, struct ws_http_head *h,
                           struct telo_err *err);

/* The value of the first header named name (case-insensitive), or NULL. */
const char *ws_http_header(const struct ws_http_head *h, const char *name);

/* How many headers are named name (case-insensitive). */
size_t ws_http_header_count(const struct ws_http_head *h, const char *name);

/* 1 when the comma-separated list value holds token (case-insensitive, blanks around items
 * ignored), else 0. For Connection, Upgrade and Sec-WebSocket-Protocol. */
int ws_http_list_has(const char *value, const char *token);

/* Copies the next comma-separated item of *list into out (blanks trimmed, truncated to fit,
 * NUL-terminated) and advances *list past it. Returns 1, or 0 when the list is exhausted. */
int ws_http_list_next(const char **list, char *out, size_t outlen);

/* Copies the value of query parameter name from the query string query (no '?'), percent-decoded,
 * into out. Returns 1 when found (value truncated to fit), 0 when absent. */
int ws_http_query_param(const char *query, const char *name, char *out, size_t outlen);

/* Percent-decodes the path (the target up to its '?', which the caller has cut off) in place:
 * the result is never longer. Returns 0, or -1 for a '%' not followed by two hex digits or an
 * escaped NUL (path is then partly decoded: do not use it). */
int ws_http_path_decode(char *path);

#endif

/* Structured logging: one line per event on stderr, logfmt or JSON. */
#ifndef TELO_UTIL_LOG_H
#define TELO_UTIL_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum telo_log_level { TELO_LOG_DEBUG = 0, TELO_LOG_INFO, TELO_LOG_WARN, TELO_LOG_ERROR };

enum telo_log_format { TELO_LOG_LOGFMT = 0, TELO_LOG_JSON };

/* The longest line written, newline included; a longer one drops its last pairs and says so
 * (log_truncated=true). */
#define TELO_LOG_LINE_MAX 4096

/* Sets the process-wide minimum level and format. Part of the process configuration, set once
 * by cmd/. */
void telo_log_set_level(enum telo_log_level level);
void telo_log_set_format(enum telo_log_format format);

/* Parses "debug", "info", "warn" or "error"; returns 0 and sets *level, or -1 for anything else. */
int telo_log_parse_level(const char *name, enum telo_log_level *level);

/* Parses "logfmt" or "json"; returns 0 and sets *format, or -1. */
int telo_log_parse_format(const char *name, enum telo_log_format *format);

/* Parses a kube component's verbosity (-v N, 0..10): 0 to 3 is info, 4 and up is debug, as klog's
 * V(4) is its debug level. Returns 0 and sets *level, or -1 for anything but a number 0..10. */
int telo_log_parse_verbosity(const char *v, enum telo_log_level *level);

/* When name is a logging flag (--log-level LEVEL, --log-format logfmt|json, -v N or --v N, the
 * last given winning), applies value to the process configuration and returns 1; returns 0 when
 * name is none of them, and -1 with a message naming the flag in err (errlen bytes) when value
 * is wrong or missing. */
int telo_log_flag(const char *name, const char *value, char *err, size_t errlen);

/* Writes one line: `ts=<RFC 3339> level=<level> msg="<msg>"` and the pairs of kv_fmt (may be
 * NULL), or the same as one JSON object. kv_fmt is `key=VALUE key=VALUE...`, where a VALUE is
 * printf conversions and literal text, optionally in double quotes ("%s: %s"); the logger
 * escapes every value itself (quotes, backslashes, control characters, bytes that are not
 * UTF-8), so a value may hold anything. A value the format quotes stays quoted in logfmt; an
 * unquoted one is quoted when it needs to be. In JSON a value that is one numeric conversion is
 * a number. Never logs partially: the line is built first, then written with one call. */
void telo_log(enum telo_log_level level, const char *msg, const char *kv_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Builds the line telo_log would write at time `now` (seconds since the epoch) into out (at
 * least TELO_LOG_LINE_MAX bytes), newline included; returns its length. For tests. */
size_t telo_log_vformat(char *out, enum telo_log_format format, double now,
                        enum telo_log_level level, const char *msg, const char *kv_fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));

#endif

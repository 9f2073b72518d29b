/* Structured logging: one logfmt line per event on stderr. */
#ifndef TELO_UTIL_LOG_H
#define TELO_UTIL_LOG_H

enum telo_log_level { TELO_LOG_DEBUG = 0, TELO_LOG_INFO, TELO_LOG_WARN, TELO_LOG_ERROR };

/* Sets the process-wide minimum level. Part of the process configuration, set once by cmd/. */
void telo_log_set_level(enum telo_log_level level);

/* Parses "debug", "info", "warn" or "error"; returns 0 and sets *level, or -1 for anything else. */
int telo_log_parse_level(const char *name, enum telo_log_level *level);

/* Writes `ts=<RFC 3339> level=<level> msg="<msg>"` followed by the formatted key=value pairs
 * (kv_fmt may be NULL). The message is quoted; the caller quotes values that may hold spaces.
 * Never logs partially: the line is built first, then written with one call. */
void telo_log(enum telo_log_level level, const char *msg, const char *kv_fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

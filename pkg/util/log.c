/* Structured logging: one logfmt line per event on stderr. */
#include "util/log.h"

#include "util/timefmt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum telo_log_level min_level = TELO_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void telo_log_set_level(enum telo_log_level level)
{
    min_level = level;
}

int telo_log_parse_level(const char *name, enum telo_log_level *level)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *level = (enum telo_log_level)i;
            return 0;
        }
    }
    return -1;
}

void telo_log(enum telo_log_level level, const char *msg, const char *kv_fmt, ...)
{
    if (level < min_level)
        return;
    char line[2048];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char ts[TIMEFMT_MICRO_MAX];
    timefmt_format_milli((double)now.tv_sec + (double)now.tv_nsec / 1e9, ts, sizeof(ts));
    int n = snprintf(line, sizeof(line), "ts=%s level=%s msg=\"", ts, level_names[level]);
    /* Quotes and newlines in the message would break logfmt parsers. */
    for (const char *p = msg; *p && n < (int)sizeof(line) - 2; p++) {
        if (*p == '"' || *p == '\\')
            line[n++] = '\\';
        if (*p == '\n')
            line[n++] = ' ';
        else
            line[n++] = *p;
    }
    if (n < (int)sizeof(line) - 1)
        line[n++] = '"';
    if (kv_fmt && *kv_fmt && n < (int)sizeof(line) - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, kv_fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, kv_fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m < (int)sizeof(line) - n - 1 ? m : (int)sizeof(line) - n - 2;
    }
    line[n++] = '\n';
    (void)write(STDERR_FILENO, line, (size_t)n);
}

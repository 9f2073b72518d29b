/* RFC 3339 time stamps as the Kubernetes API writes them (metav1.Time), to and from Unix time;
 * Go durations as Kubernetes components' flags take them. */
#ifndef TELO_UTIL_TIMEFMT_H
#define TELO_UTIL_TIMEFMT_H

#include <stddef.h>

/* Seconds since the Unix epoch of an RFC 3339 time stamp, "2026-11-29T16:00:00Z" (a fraction of
 * digits after the seconds, and a "Z" or "+hh:mm"/"-hh:mm" offset ending the text, are honoured;
 * "T" and "Z" may be lower case), or -1 when text is NULL or not such a time stamp. */
double timefmt_parse(const char *text);

/* Writes t as "2026-11-29T16:00:00Z" (whole seconds, UTC) into out (at least 21 bytes): a
 * metav1.Time. */
void timefmt_format(double t, char *out, size_t len);

/* Longest text timefmt_format_micro (and _milli) writes, with its NUL
 * ("2006-01-02T15:04:05.000000Z"). */
#define TIMEFMT_MICRO_MAX 32

/* Writes t as a metav1.MicroTime: RFC 3339 with exactly six fractional digits and "Z"
 * ("2024-05-01T10:00:00.123456Z", Go's "2006-01-02T15:04:05.000000Z07:00" in UTC) into out (at
 * least TIMEFMT_MICRO_MAX bytes). Never fails; out is always terminated. */
void timefmt_format_micro(double t, char *out, size_t len);

/* As timefmt_format_micro with three fractional digits ("2024-05-01T10:00:00.123Z"): log lines. */
void timefmt_format_milli(double t, char *out, size_t len);

/* Seconds of a Go duration ("15s", "1.5s", "500ms", "1m30s"; units h, m, s, ms) or of a bare
 * number of seconds ("15"), or -1 when text is NULL, negative, empty or not a duration. */
double timefmt_parse_duration(const char *text);

#endif

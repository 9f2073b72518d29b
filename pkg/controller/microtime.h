/* Kubernetes time stamps: metav1.MicroTime and metav1.Time text forms from a Unix time. */
#ifndef TELO_CONTROLLER_MICROTIME_H
#define TELO_CONTROLLER_MICROTIME_H

#include <stddef.h>

/* Longest text either function writes, with its NUL ("2006-01-02T15:04:05.000000Z"). */
#define MICROTIME_TEXT_MAX 32

/* Writes t (seconds since the Unix epoch, UTC) as a MicroTime, RFC 3339 with exactly six
 * fractional digits and "Z" ("2024-05-01T10:00:00.123456Z", Go's "2006-01-02T15:04:05.000000Z07:00"
 * in UTC), into out (at least MICROTIME_TEXT_MAX bytes). Never fails; out is always terminated. */
void microtime_format(double t, char *out, size_t outlen);

/* Writes t as a metav1.Time: RFC 3339 in whole seconds ("2024-05-01T10:00:00Z"). Never fails. */
void microtime_format_seconds(double t, char *out, size_t outlen);

#endif

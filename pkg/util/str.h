/* Small string helpers: formatted allocation, whitespace trimming, NULL as "". */
#ifndef TELO_UTIL_STR_H
#define TELO_UTIL_STR_H

#include <stddef.h>

/* A new string holding the formatted text (as asprintf, which POSIX lacks); the caller frees it.
 * Returns NULL when out of memory or when fmt is invalid. */
char *util_str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Removes leading and trailing blanks (space, tab, CR, LF) from s in place, as Go's
 * strings.TrimSpace does for the ASCII ones (client-go trims token and namespace files so).
 * Cannot fail. */
void util_str_trim(char *s);

/* s, or "" when s is NULL (an optional JSON string read with jget_string, for strcmp or %s). */
const char *util_str_or_empty(const char *s);

/* Whether the n bytes at s are a DNS-1123 label (a namespace's or a Service's name): 1 to 63 of
 * [a-z0-9-], alphanumeric at both ends. */
int util_str_dns_label(const char *s, size_t n);

/* Whether s is a DNS-1123 subdomain (an object's name): at most 253 bytes of DNS-1123 labels
 * joined by '.'. */
int util_str_dns_subdomain(const char *s);

#endif

/* Kubernetes resource quantities ("500m", "1.5Gi", "2e3"): parsing and clamping. */
#ifndef TELO_SESSION_QUANTITY_H
#define TELO_SESSION_QUANTITY_H

/* Parses a quantity into thousandths of its unit, rounding up as the API server does: "500m" is
 * 500, "1" is 1000, "1Ki" is 1024000. Returns 0, or -TELO_EINVAL for text that is not a quantity
 * (or one beyond 2^53 units). */
int session_quantity_milli(const char *text, long long *milli);

/* Returns requested when it parses and is at most ceiling, else ceiling; requested may be NULL.
 * Both strings are borrowed; the result is one of them. An unparseable ceiling is returned as is
 * (the operator's configuration is validated at start). */
const char *session_quantity_clamp(const char *requested, const char *ceiling);

#endif

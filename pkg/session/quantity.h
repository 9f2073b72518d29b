/* Kubernetes resource quantities ("500m", "1.5Gi", "2e3"): parsing and clamping. */
#ifndef TELO_SESSION_QUANTITY_H
#define TELO_SESSION_QUANTITY_H

/* Parses a quantity into thousandths of its unit, exactly (integer arithmetic) and rounding up
 * as the API server does: "500m" is 500, "1" is 1000, "1Ki" is 1024000, "0.1m" and "1n" are 1.
 * Returns 0, or -TELO_EINVAL for text that is not a quantity (apimachinery's grammar, with at
 * most 64 mantissa digits) or whose thousandths pass LLONG_MAX. */
int session_quantity_milli(const char *text, long long *milli);

/* Returns requested when it parses and is at most ceiling, else ceiling; requested may be NULL.
 * Both strings are borrowed; the result is one of them. Both are compared in thousandths rounded
 * up, because the API server rounds every quantity of a pod's resources up to that precision
 * (SetDefaults_ResourceList, kubernetes#18538): the pod gets exactly the value compared, so
 * "500.0000001m" is above a 500m ceiling (the pod would get 501m). An unparseable ceiling is
 * returned as is (the operator's configuration is validated at start). */
const char *session_quantity_clamp(const char *requested, const char *ceiling);

#endif

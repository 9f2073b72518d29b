/* Kubernetes resource quantities ("500m", "1.5Gi", "2e3"): parsing and clamping. */
#include "session/quantity.h"

#include "util/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The suffixes of apimachinery's resource.Quantity, with their multipliers. */
static const struct {
    const char *suffix;
    double multiplier;
} suffixes[] = {
    {"Ki", 1024.0},
    {"Mi", 1048576.0},
    {"Gi", 1073741824.0},
    {"Ti", 1099511627776.0},
    {"Pi", 1125899906842624.0},
    {"Ei", 1152921504606846976.0},
    {"n", 1e-9},
    {"u", 1e-6},
    {"m", 1e-3},
    {"k", 1e3},
    {"M", 1e6},
    {"G", 1e9},
    {"T", 1e12},
    {"P", 1e15},
    {"E", 1e18},
};

int session_quantity_milli(const char *text, long long *milli)
{
    if (!text || !*text)
        return -TELO_EINVAL;
    const char *p = text;
    if (*p == '+' || *p == '-')
        p++;
    size_t digits = strspn(p, "0123456789");
    const char *rest = p + digits;
    size_t frac = 0;
    if (*rest == '.') {
        frac = strspn(rest + 1, "0123456789");
        rest += 1 + frac;
    }
    if (digits + frac == 0)
        return -TELO_EINVAL;
    /* Only the mantissa: strtod would also take "e3" as an exponent, and the exponent below
     * would then apply twice ("5e8" read as 5e16). */
    char mantissa[64];
    if ((size_t)(rest - text) >= sizeof(mantissa))
        return -TELO_EINVAL;
    memcpy(mantissa, text, (size_t)(rest - text));
    mantissa[rest - text] = '\0';
    double value = strtod(mantissa, NULL);
    double multiplier = 1;
    if (*rest == 'e' || *rest == 'E') {
        /* A decimal exponent ("1e3"); "E" alone is the exa suffix. */
        char *end;
        long exp = strtol(rest + 1, &end, 10);
        if (end != rest + 1 && *end == '\0' && exp >= -18 && exp <= 18) {
            multiplier = pow(10, (double)exp);
            rest = end;
        }
    }
    if (*rest) {
        size_t i;
        for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
            if (strcmp(rest, suffixes[i].suffix) == 0)
                break;
        }
        if (i == sizeof(suffixes) / sizeof(suffixes[0]))
            return -TELO_EINVAL;
        multiplier = suffixes[i].multiplier;
    }
    double result = ceil(value * multiplier * 1000.0 - 1e-6);
    if (!(fabs(result) < 9007199254740992.0 * 1000.0))
        return -TELO_EINVAL;
    *milli = (long long)result;
    return 0;
}

const char *session_quantity_clamp(const char *requested, const char *ceiling)
{
    long long want, max;
    if (!requested || session_quantity_milli(requested, &want) < 0 || want <= 0)
        return ceiling;
    if (session_quantity_milli(ceiling, &max) < 0)
        return ceiling;
    return want <= max ? requested : ceiling;
}

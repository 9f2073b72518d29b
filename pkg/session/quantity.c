/* Kubernetes resource quantities ("500m", "1.5Gi", "2e3"): parsing and clamping. */
#include "session/quantity.h"

#include "util/err.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

/* Mantissa digits a quantity may have; a longer one is not a quantity here. */
#define MAX_MANTISSA 64
/* Where a decimal exponent's value stops growing: past every exponent a quantity that fits
 * can have, and small enough that adding the others cannot overflow an int. */
#define MAX_EXPONENT 100000

/* The suffixes of apimachinery's resource.Quantity, as the powers of ten and of two they
 * multiply by. */
static const struct {
    const char *suffix;
    int pow10, pow2;
} suffixes[] = {
    {"", 0, 0},    {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50},
    {"Ei", 0, 60}, {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},   {"M", 6, 0},
    {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},
};

/* *v times m, or -1 when that passes LLONG_MAX (*v is then unspecified). */
static int multiply(unsigned long long *v, unsigned long long m)
{
    if (m != 0 && *v > (unsigned long long)LLONG_MAX / m)
        return -1;
    *v *= m;
    return 0;
}

static int add(unsigned long long *v, unsigned long long a)
{
    if (*v > (unsigned long long)LLONG_MAX - a)
        return -1;
    *v += a;
    return 0;
}

/* The exponent after "e" or "E": a sign and digits up to the end of the text, as apimachinery
 * reads it with strconv.ParseInt (so no space: strtol's "1e 3" is not a quantity). Returns 0
 * with *out set, or -1. */
static int parse_exponent(const char *p, int *out)
{
    int negative = *p == '-';
    if (*p == '+' || *p == '-')
        p++;
    size_t n = strspn(p, "0123456789");
    if (n == 0 || p[n] != '\0')
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++)
        v = v < MAX_EXPONENT ? v * 10 + (p[i] - '0') : MAX_EXPONENT;
    *out = negative ? -v : v;
    return 0;
}

/* digits (n decimal digits, the first not 0) times 10^pow10 times 2^pow2, rounded up to a whole
 * number, into *out. Exact: the fraction's digits are multiplied by 2^pow2 one at a time, from
 * the last (a digit times 2^60 plus the carry stays below 2^64). Returns 0, or -1 when the
 * result passes LLONG_MAX. */
static int round_up(const char *digits, size_t n, int pow10, int pow2, unsigned long long *out)
{
    size_t places = pow10 < 0 ? (size_t)-pow10 : 0;
    *out = 0;
    if (n == 0)
        return 0;
    /* Below one whole: digits < 10^n and 2^pow2 < 10^19. */
    if (places > n + 19) {
        *out = 1;
        return 0;
    }
    unsigned long long v = 0;
    size_t whole = n > places ? n - places : 0;
    for (size_t i = 0; i < whole; i++) {
        if (multiply(&v, 10) < 0 || add(&v, (unsigned long long)(digits[i] - '0')) < 0)
            return -1;
    }
    for (int i = 0; i < pow10; i++) {
        if (multiply(&v, 10) < 0)
            return -1;
    }
    if (multiply(&v, 1ULL << pow2) < 0)
        return -1;
    unsigned long long carry = 0;
    int inexact = 0;
    for (size_t j = places; j-- > 0;) {
        /* Place j of the fraction is digit n - places + j, or a leading zero. */
        unsigned long long d =
            j + n >= places ? (unsigned long long)(digits[j + n - places] - '0') : 0;
        unsigned long long x = (d << pow2) + carry;
        inexact |= x % 10 != 0;
        carry = x / 10;
    }
    if (add(&v, carry) < 0 || add(&v, inexact ? 1 : 0) < 0)
        return -1;
    *out = v;
    return 0;
}

int session_quantity_milli(const char *text, long long *milli)
{
    if (!text)
        return -TELO_EINVAL;
    const char *p = text;
    int negative = *p == '-';
    if (*p == '+' || *p == '-')
        p++;
    size_t nint = strspn(p, "0123456789"), nfrac = 0;
    const char *frac = p + nint, *rest = frac;
    if (*frac == '.') {
        frac++;
        nfrac = strspn(frac, "0123456789");
        rest = frac + nfrac;
    }
    if (nint + nfrac == 0 || nint + nfrac > MAX_MANTISSA)
        return -TELO_EINVAL;
    int pow10 = 0, pow2 = 0;
    size_t k = 0;
    while (k < sizeof(suffixes) / sizeof(suffixes[0]) && strcmp(rest, suffixes[k].suffix) != 0)
        k++;
    if (k < sizeof(suffixes) / sizeof(suffixes[0])) {
        pow10 = suffixes[k].pow10;
        pow2 = suffixes[k].pow2;
    } else if ((rest[0] != 'e' && rest[0] != 'E') || parse_exponent(rest + 1, &pow10) < 0) {
        /* Not a suffix ("E" and "Ei" are), nor a decimal exponent ("1e3", "1E-3"). */
        return -TELO_EINVAL;
    }
    /* The mantissa as one integer without leading zeros, and the power of ten that makes it
     * thousandths. */
    char digits[MAX_MANTISSA];
    size_t n = 0;
    for (size_t i = 0; i < nint; i++) {
        if (n > 0 || p[i] != '0')
            digits[n++] = p[i];
    }
    for (size_t i = 0; i < nfrac; i++) {
        if (n > 0 || frac[i] != '0')
            digits[n++] = frac[i];
    }
    unsigned long long v;
    if (round_up(digits, n, pow10 - (int)nfrac + 3, pow2, &v) < 0)
        return -TELO_EINVAL;
    /* Away from zero for a negative value too, as the API server's inf.RoundUp. */
    *milli = negative ? -(long long)v : (long long)v;
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

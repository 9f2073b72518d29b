/* RFC 3339 time stamps as the Kubernetes API writes them (metav1.Time), to and from Unix time;
 * Go durations as Kubernetes components' flags take them. */
#include "util/timefmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Days since 1970-01-01 of a civil date (H. Hinnant's algorithm): timegm is not in POSIX. */
static double days_from_civil(int y, int m, int d)
{
    y -= m <= 2;
    int era = (y >= 0 ? y : y - 399) / 400;
    int yoe = y - era * 400;
    int doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return (double)era * 146097 + doe - 719468;
}

/* "YYYY-MM-DDTHH:MM:SS" with digits where digits belong (sscanf's %d alone takes signs and
 * blanks: "T-1:00:00"). */
static int shape_ok(const char *text)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    for (size_t i = 0; i < sizeof(shape) - 1; i++) {
        /* RFC 3339 (section 5.6) lets the "T" be lower case. */
        if (shape[i] == 'd' ? !(text[i] >= '0' && text[i] <= '9')
                            : text[i] != shape[i] && !(shape[i] == 'T' && text[i] == 't'))
            return 0;
    }
    return 1;
}

double timefmt_parse(const char *text)
{
    int y, mo, d, h, mi, s, n = 0;
    if (!text || !shape_ok(text) ||
        sscanf(text, "%4d-%2d-%2d%*1[Tt]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &n) != 6 ||
        n != 19 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
        return -1;
    double t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    const char *p = text + n;
    if (*p == '.') {
        /* Digits only: strtod alone would take an exponent (".5e3"). */
        size_t digits = strspn(p + 1, "0123456789");
        if (digits == 0)
            return -1;
        t += strtod(p, NULL);
        p += 1 + digits;
    }
    if (*p == 'Z' || *p == 'z')
        return p[1] == '\0' ? t : -1;
    /* A numeric offset is exactly "+hh:mm" or "-hh:mm", and ends the time stamp. */
    static const char offset_shape[] = "dd:dd";
    if (*p != '+' && *p != '-')
        return -1;
    for (size_t i = 0; i < sizeof(offset_shape) - 1; i++) {
        char c = p[1 + i];
        if (offset_shape[i] == 'd' ? !(c >= '0' && c <= '9') : c != offset_shape[i])
            return -1;
    }
    int oh = (p[1] - '0') * 10 + (p[2] - '0'), om = (p[4] - '0') * 10 + (p[5] - '0');
    if (p[6] != '\0' || oh > 23 || om > 59)
        return -1;
    return t - (*p == '+' ? 1 : -1) * (oh * 3600 + om * 60);
}

/* t in UTC with digits (0, 3 or 6) fractional digits, rounded to the last one. */
static void format_digits(double t, int digits, char *out, size_t len)
{
    const long scale = digits == 6 ? 1000000 : digits == 3 ? 1000 : 1;
    double whole = floor(t);
    long frac = digits > 0 ? (long)llround((t - whole) * (double)scale) : 0;
    if (frac >= scale) {
        whole += 1;
        frac -= scale;
    }
    time_t secs = (time_t)whole;
    struct tm tm;
    gmtime_r(&secs, &tm);
    char tail[32] = "Z";
    /* Fixed widths, not %0*ld: GCC cannot bound a '*' width and -Wformat-truncation fails the
     * sanitizer build. */
    if (digits == 6)
        snprintf(tail, sizeof(tail), ".%06ldZ", frac);
    else if (digits == 3)
        snprintf(tail, sizeof(tail), ".%03ldZ", frac);
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d%s", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, tail);
}

void timefmt_format(double t, char *out, size_t len)
{
    format_digits(t, 0, out, len);
}

void timefmt_format_micro(double t, char *out, size_t len)
{
    format_digits(t, 6, out, len);
}

void timefmt_format_milli(double t, char *out, size_t len)
{
    format_digits(t, 3, out, len);
}

double timefmt_parse_duration(const char *text)
{
    static const struct {
        const char *unit;
        double seconds;
    } units[] = {{"ms", 0.001}, {"h", 3600}, {"m", 60}, {"s", 1}}; /* "ms" before "m" */
    const size_t nunits = sizeof(units) / sizeof(units[0]);
    if (!text || !*text)
        return -1;
    double total = 0;
    const char *p = text;
    while (*p) {
        /* strtod alone would take signs, blanks, exponents, hex and "inf". */
        size_t digits = strspn(p, "0123456789.");
        if (digits == 0)
            return -1;
        char *end;
        double n = strtod(p, &end);
        if (end != p + digits)
            return -1;
        p = end;
        if (!*p && p - digits == text)
            return n; /* a bare number: seconds */
        size_t i = 0;
        while (i < nunits && strncmp(p, units[i].unit, strlen(units[i].unit)) != 0)
            i++;
        if (i == nunits)
            return -1;
        total += n * units[i].seconds;
        p += strlen(units[i].unit);
    }
    return total;
}

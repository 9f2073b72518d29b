/* YAML 1.2 core schema resolution of plain scalars: the one place the bundle reader and its
 * fuzz oracle decide which scalars stay strings. */
#include "imagebuild/yamlcore.h"

#include <string.h>

static int all_in(const char *s, size_t n, const char *set)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strchr(set, s[i]) == NULL)
            return 0;
    return 1;
}

static int digits(const char *s, size_t n)
{
    return all_in(s, n, "0123456789");
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, needing a '.' or an exponent. */
static int core_float(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    size_t int_start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    size_t int_digits = i - int_start, frac_digits = 0;
    int dot = 0;
    if (i < n && s[i] == '.') {
        dot = 1;
        i++;
        size_t f = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        frac_digits = i - f;
    }
    if (int_digits == 0 && frac_digits == 0)
        return 0;
    int exp = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == e)
            return 0;
        exp = 1;
    }
    return i == n && (dot || exp);
}

int build_yaml_plain_is_string(const char *s, size_t n)
{
    static const char *const words[] = {"~",     "null",  "Null",  "NULL",  "true",  "True",
                                        "TRUE",  "false", "False", "FALSE", ".inf",  ".Inf",
                                        ".INF",  "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
                                        "-.INF", ".nan",  ".NaN",  ".NAN"};
    if (n == 0)
        return 0;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strlen(words[i]) == n && memcmp(words[i], s, n) == 0)
            return 0;
    size_t sign = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    if (digits(s + sign, n - sign))
        return 0;
    if (n > 2 && s[0] == '0' && s[1] == 'o' && all_in(s + 2, n - 2, "01234567"))
        return 0;
    if (n > 2 && s[0] == '0' && s[1] == 'x' && all_in(s + 2, n - 2, "0123456789abcdefABCDEF"))
        return 0;
    return !core_float(s, n);
}

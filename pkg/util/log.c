/* Structured logging: one line per event on stderr, logfmt or JSON.
 *
 * Callers write their pairs as a printf format (`session=%s/%s error="%s"`), which keeps the
 * compiler's type checks; this file walks that format itself, formats each conversion on its
 * own, and escapes every value as the output format needs. Values come from anywhere (API
 * answers, tenants' names, a registry's error text), so quoting is never left to the caller. */
#include "util/log.h"

#include "util/text.h"
#include "util/timefmt.h"
#include "util/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum telo_log_level min_level = TELO_LOG_INFO;
static enum telo_log_format out_format = TELO_LOG_LOGFMT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* A value longer than this is cut and ends in "..."; a message too. */
#define VALUE_MAX 1024
/* Room kept at the end of a line for the truncation mark and the closing. */
#define LINE_RESERVE 40

void telo_log_set_level(enum telo_log_level level)
{
    min_level = level;
}

void telo_log_set_format(enum telo_log_format format)
{
    out_format = format;
}

int telo_log_parse_level(const char *name, enum telo_log_level *level)
{
    for (int i = 0; i < 4; i++) {
        if (name && strcmp(name, level_names[i]) == 0) {
            *level = (enum telo_log_level)i;
            return 0;
        }
    }
    return -1;
}

int telo_log_parse_format(const char *name, enum telo_log_format *format)
{
    if (name && strcmp(name, "logfmt") == 0)
        *format = TELO_LOG_LOGFMT;
    else if (name && strcmp(name, "json") == 0)
        *format = TELO_LOG_JSON;
    else
        return -1;
    return 0;
}

int telo_log_parse_verbosity(const char *v, enum telo_log_level *level)
{
    if (!v || !*v || strlen(v) > 2)
        return -1;
    int n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        n = n * 10 + (*p - '0');
    }
    if (n > 10)
        return -1;
    *level = n >= 4 ? TELO_LOG_DEBUG : TELO_LOG_INFO;
    return 0;
}

int telo_log_flag(const char *name, const char *value, char *err, size_t errlen)
{
    enum telo_log_level level;
    enum telo_log_format format;
    if (strcmp(name, "--log-level") == 0) {
        if (telo_log_parse_level(value, &level) < 0) {
            snprintf(err, errlen, "--log-level %s: want debug, info, warn or error",
                     value ? value : "(missing)");
            return -1;
        }
        telo_log_set_level(level);
    } else if (strcmp(name, "--log-format") == 0) {
        if (telo_log_parse_format(value, &format) < 0) {
            snprintf(err, errlen, "--log-format %s: want logfmt or json",
                     value ? value : "(missing)");
            return -1;
        }
        telo_log_set_format(format);
    } else if (strcmp(name, "-v") == 0 || strcmp(name, "--v") == 0) {
        if (telo_log_parse_verbosity(value, &level) < 0) {
            snprintf(err, errlen, "%s %s: want a verbosity 0..10 (4 and up: debug)", name,
                     value ? value : "(missing)");
            return -1;
        }
        telo_log_set_level(level);
    } else {
        return 0;
    }
    return 1;
}

/* --- a bounded line ----------------------------------------------------------------------- */

struct line {
    char *b;
    size_t n, cap;
};

static void put(struct line *l, const char *s, size_t n)
{
    if (n > l->cap - l->n)
        n = l->cap - l->n;
    memcpy(l->b + l->n, s, n);
    l->n += n;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* The code point of the well-formed 2- or 3-byte UTF-8 sequence at p. */
static unsigned code_point(const unsigned char *p, size_t len)
{
    if (len == 2)
        return (unsigned)(p[0] & 0x1f) << 6 | (p[1] & 0x3f);
    return (unsigned)(p[0] & 0x0f) << 12 | (unsigned)(p[1] & 0x3f) << 6 | (p[2] & 0x3f);
}

/* Appends v escaped for a quoted logfmt or JSON string (without the quotes). Control characters
 * are \n, \r, \t or \uXXXX, and so are the characters that act on a terminal or reorder a line
 * unseen (C1, bidirectional overrides: util_text_hidden), which `kubectl logs` would pass on; a
 * byte that is not UTF-8 is \xNN in logfmt (Go's strconv reads it back as that byte) and U+FFFD
 * in JSON, which must be UTF-8. */
static void put_escaped(struct line *l, const char *v, size_t n, enum telo_log_format f)
{
    const unsigned char *p = (const unsigned char *)v;
    char e[8];
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len = util_utf8_len(p + i, n - i);
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            put(l, e, 2);
        } else if (c == '\n') {
            puts_(l, "\\n");
        } else if (c == '\r') {
            puts_(l, "\\r");
        } else if (c == '\t') {
            puts_(l, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(e, sizeof(e), "\\u%04x", c);
            puts_(l, e);
        } else if (len > 1 && util_text_hidden(p + i, len)) {
            snprintf(e, sizeof(e), "\\u%04x", code_point(p + i, len));
            puts_(l, e);
        } else if (len == 0) {
            if (f == TELO_LOG_JSON) {
                puts_(l, "\\ufffd");
            } else {
                snprintf(e, sizeof(e), "\\x%02x", c);
                puts_(l, e);
            }
            len = 1;
        } else {
            put(l, v + i, len);
        }
        i += len ? len : 1;
    }
}

/* logfmt leaves a value bare only when a parser reads it back unchanged. */
static int needs_quotes(const char *v, size_t n)
{
    if (n == 0)
        return 1;
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n;) {
        size_t len = util_utf8_len(p + i, n - i);
        if (len == 0 || p[i] <= ' ' || p[i] == '=' || p[i] == '"' || p[i] == '\\' || p[i] == 0x7f ||
            util_text_hidden(p + i, len))
            return 1;
        i += len;
    }
    return 0;
}

/* --- walking the caller's format ---------------------------------------------------------- */

/* One value as formatted: its bytes, whether the format quoted it, and what it was made of (a
 * value of one numeric conversion and nothing else is a JSON number). */
struct value {
    char b[VALUE_MAX + 4];
    size_t n;
    int quoted, convs, literals, numeric;
};

static void value_add(struct value *v, const char *s, size_t n)
{
    if (v->n + n > VALUE_MAX) {
        n = VALUE_MAX > v->n ? VALUE_MAX - v->n : 0;
        memcpy(v->b + v->n, s, n);
        v->n = VALUE_MAX;
        memcpy(v->b + v->n, "...", 3);
        v->n += 3;
        return;
    }
    memcpy(v->b + v->n, s, n);
    v->n += n;
}

/* convert() hands snprintf one conversion cut from the caller's format: the compiler checked
 * that format against its arguments at the call (telo_log's format attribute), and the switch
 * below takes each argument as the type its conversion letter and length name. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
/* Formats the conversion at *pp ('%' ... conversion letter), taking its arguments from ap, into
 * v; advances *pp past it. Only what printf would accept for the compiler-checked format gets
 * here, so an unknown letter is copied as text. */
static void convert(const char **pp, va_list *ap, struct value *v)
{
    const char *p = *pp + 1;
    char spec[48], out[512];
    size_t s = 0;
    spec[s++] = '%';
    while (*p && strchr("-+ #0", *p) && s < 8)
        spec[s++] = *p++;
    for (int part = 0; part < 2; part++) {
        if (part == 1) {
            if (*p != '.')
                break;
            spec[s++] = *p++;
        }
        if (*p == '*') {
            s += (size_t)snprintf(spec + s, sizeof(spec) - s, "%d", va_arg(*ap, int));
            p++;
        } else {
            while (*p >= '0' && *p <= '9' && s < 32)
                spec[s++] = *p++;
        }
    }
    char len[3] = "";
    size_t ln = 0;
    while (*p && strchr("hlzjtL", *p) && ln < 2)
        len[ln++] = *p++;
    len[ln] = '\0';
    memcpy(spec + s, len, ln);
    s += ln;
    char conv = '\0';
    if (*p)
        conv = *p++;
    spec[s++] = conv;
    spec[s] = '\0';
    *pp = p;

    /* The argument's type, from the letter and the length (z, j and t are long-sized on the LP64
     * systems this is built for). */
    enum { A_INT, A_LONG, A_LLONG, A_UINT, A_ULONG, A_ULLONG, A_DOUBLE, A_LDOUBLE, A_PTR } type;
    int wide = len[0] == 'z' || len[0] == 'j' || len[0] == 't' || strcmp(len, "l") == 0;
    int llong = strcmp(len, "ll") == 0;
    int n = 0, numeric = 1;
    switch (conv) {
    case 'd':
    case 'i':
        type = llong ? A_LLONG : wide ? A_LONG : A_INT;
        break;
    case 'x':
    case 'X':
    case 'o':
        numeric = 0;
        /* fall through */
    case 'u':
        type = llong ? A_ULLONG : wide ? A_ULONG : A_UINT;
        break;
    case 'f':
    case 'F':
    case 'g':
    case 'G':
    case 'e':
    case 'E':
        type = len[0] == 'L' ? A_LDOUBLE : A_DOUBLE;
        break;
    case 'c':
        numeric = 0;
        type = A_INT;
        break;
    case 'p':
        numeric = 0;
        type = A_PTR;
        break;
    case 's': {
        const char *str = va_arg(*ap, const char *);
        /* A string is copied, not formatted: it may be longer than out, and NULL is printf's
         * undefined behaviour. A precision (%.200s) still bounds it. */
        const char *dot = strchr(spec, '.');
        size_t max = dot ? (size_t)strtoul(dot + 1, NULL, 10) : (size_t)-1;
        if (!str)
            str = "(null)";
        size_t sl = strnlen(str, max < VALUE_MAX + 1 ? max : VALUE_MAX + 1);
        value_add(v, str, sl);
        v->convs++;
        return;
    }
    default:
        value_add(v, spec, s);
        v->literals++;
        return;
    }
    switch (type) {
    case A_INT: {
        int x = va_arg(*ap, int);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_LONG: {
        long x = va_arg(*ap, long);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_LLONG: {
        long long x = va_arg(*ap, long long);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_UINT: {
        unsigned x = va_arg(*ap, unsigned);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_ULONG: {
        unsigned long x = va_arg(*ap, unsigned long);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_ULLONG: {
        unsigned long long x = va_arg(*ap, unsigned long long);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_DOUBLE: {
        double x = va_arg(*ap, double);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_LDOUBLE: {
        long double x = va_arg(*ap, long double);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    case A_PTR: {
        void *x = va_arg(*ap, void *);
        n = snprintf(out, sizeof(out), spec, x);
        break;
    }
    }
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(out))
        n = (int)sizeof(out) - 1;
    /* nan and inf are no JSON numbers */
    if (numeric && (strchr(out, 'n') || strchr(out, 'N')))
        numeric = 0;
    value_add(v, out, (size_t)n);
    v->convs++;
    v->numeric = numeric;
}

#pragma GCC diagnostic pop

/* Reads one `key=VALUE` of the format at *pp into key and v. Returns 0 at the format's end. */
static int next_pair(const char **pp, va_list *ap, char *key, size_t keycap, struct value *v)
{
    const char *p = *pp;
    while (*p == ' ')
        p++;
    if (!*p)
        return 0;
    size_t k = 0;
    const char *eq = strchr(p, '=');
    const char *sp = strchr(p, ' ');
    if (eq && (!sp || eq < sp)) {
        for (; p < eq; p++) {
            char c = *p;
            if (c == '"' || c == '\\' || (unsigned char)c <= ' ')
                c = '_';
            if (k < keycap - 1)
                key[k++] = c;
        }
        p++;
    }
    if (k == 0)
        key[k++] = '_';
    key[k] = '\0';
    v->n = 0;
    v->quoted = v->convs = v->literals = v->numeric = 0;
    int in_quotes = 0;
    while (*p && (in_quotes || *p != ' ')) {
        if (*p == '"') {
            in_quotes = !in_quotes;
            v->quoted = 1;
            p++;
        } else if (*p == '%' && p[1] != '%') {
            convert(&p, ap, v);
        } else {
            if (*p == '%')
                p++; /* %% */
            value_add(v, p, 1);
            v->literals++;
            p++;
        }
    }
    if (v->convs != 1 || v->literals || v->quoted)
        v->numeric = 0;
    *pp = p;
    return 1;
}

static void put_pair(struct line *l, enum telo_log_format f, const char *key, const struct value *v)
{
    if (f == TELO_LOG_JSON) {
        puts_(l, ",\"");
        put_escaped(l, key, strlen(key), f);
        puts_(l, "\":");
        if (v->numeric) {
            put(l, v->b, v->n);
            return;
        }
        puts_(l, "\"");
        put_escaped(l, v->b, v->n, f);
        puts_(l, "\"");
        return;
    }
    puts_(l, " ");
    puts_(l, key);
    puts_(l, "=");
    if (!v->quoted && !needs_quotes(v->b, v->n)) {
        put(l, v->b, v->n);
        return;
    }
    puts_(l, "\"");
    put_escaped(l, v->b, v->n, f);
    puts_(l, "\"");
}

size_t telo_log_vformat(char *out, enum telo_log_format format, double now,
                        enum telo_log_level level, const char *msg, const char *kv_fmt, va_list ap)
{
    struct line l;
    l.b = out;
    l.n = 0;
    l.cap = TELO_LOG_LINE_MAX - LINE_RESERVE;
    char ts[TIMEFMT_MICRO_MAX];
    timefmt_format_milli(now, ts, sizeof(ts));
    const char *lv = level_names[level >= TELO_LOG_DEBUG && level <= TELO_LOG_ERROR ? level : 1];
    size_t msg_n = strnlen(msg ? msg : "", VALUE_MAX);
    if (format == TELO_LOG_JSON) {
        puts_(&l, "{\"ts\":\"");
        puts_(&l, ts);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, lv);
        puts_(&l, "\",\"msg\":\"");
    } else {
        puts_(&l, "ts=");
        puts_(&l, ts);
        puts_(&l, " level=");
        puts_(&l, lv);
        puts_(&l, " msg=\"");
    }
    put_escaped(&l, msg ? msg : "", msg_n, format);
    puts_(&l, "\"");

    int truncated = 0;
    if (kv_fmt) {
        va_list aq;
        va_copy(aq, ap);
        const char *p = kv_fmt;
        char key[64];
        struct value v;
        char pair[TELO_LOG_LINE_MAX];
        while (next_pair(&p, &aq, key, sizeof(key), &v)) {
            /* A pair goes in whole or not at all, so a cut line stays parseable. */
            struct line pl = {pair, 0, sizeof(pair)};
            put_pair(&pl, format, key, &v);
            if (pl.n > l.cap - l.n) {
                truncated = 1;
                break;
            }
            put(&l, pair, pl.n);
        }
        va_end(aq);
    }
    l.cap = TELO_LOG_LINE_MAX;
    if (truncated)
        puts_(&l, format == TELO_LOG_JSON ? ",\"log_truncated\":true" : " log_truncated=true");
    if (format == TELO_LOG_JSON)
        puts_(&l, "}");
    puts_(&l, "\n");
    return l.n;
}

void telo_log(enum telo_log_level level, const char *msg, const char *kv_fmt, ...)
{
    if (level < min_level)
        return;
    char line[TELO_LOG_LINE_MAX];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    va_list ap;
    va_start(ap, kv_fmt);
    size_t n = telo_log_vformat(line, out_format, (double)now.tv_sec + (double)now.tv_nsec / 1e9,
                                level, msg, kv_fmt, ap);
    va_end(ap);
    (void)write(STDERR_FILENO, line, n);
}

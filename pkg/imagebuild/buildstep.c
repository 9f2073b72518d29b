/* Where a running build stands, read from the builder's log: which of the Dockerfile's
 * instructions kaniko is executing ("step 3/6"), or whether it is pushing. Pure; the log is the
 * tenant's (a RUN step's output lands in it), so it is read as hostile text. */
#include "imagebuild/buildstep.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* kaniko's words as it starts the push (pkg/executor/push.go, v1.23). */
#define PUSHING "Pushing image to "

struct instruction {
    const char *text;
    size_t len;
};

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* The Dockerfile's instructions but FROM (kaniko logs no FROM: it starts the stage instead),
 * trimmed, into out; returns how many. Comments and blank lines are no instruction; our
 * Dockerfile (build_dockerfile) has no continuation lines. */
static int read_instructions(const char *dockerfile, struct instruction *out)
{
    int n = 0;
    const char *p = dockerfile;
    while (p != NULL && *p != '\0' && n < BUILD_STEP_MAX_INSTRUCTIONS) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        const char *s = p;
        p = nl != NULL ? nl + 1 : NULL;
        while (len > 0 && is_blank(*s)) {
            s++;
            len--;
        }
        while (len > 0 && is_blank(s[len - 1]))
            len--;
        if (len == 0 || s[0] == '#' ||
            (len > 5 && strncasecmp(s, "FROM", 4) == 0 && (s[4] == ' ' || s[4] == '\t')))
            continue;
        out[n].text = s;
        out[n].len = len;
        n++;
    }
    return n;
}

/* A Go-quoted string's contents from in (n bytes, after the opening quote) into out (at least
 * n + 1 bytes): \" and \\ unescaped, any other escape kept as it is (then it matches no
 * instruction of ours, which is the right answer for them). Stops at the closing quote or at
 * the end (a cut line). Returns the length. */
static size_t unquote(const char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == '"')
            break;
        if (in[i] == '\\' && i + 1 < n && (in[i + 1] == '"' || in[i + 1] == '\\')) {
            out[o++] = in[++i];
            continue;
        }
        out[o++] = in[i];
    }
    out[o] = '\0';
    return o;
}

static const char *find(const char *s, size_t n, const char *what)
{
    size_t w = strlen(what);
    for (size_t i = 0; i + w <= n; i++)
        if (memcmp(s + i, what, w) == 0)
            return s + i;
    return NULL;
}

/* The message of one line of kaniko's logger (line, n bytes, no newline) into msg (n + 1
 * bytes); returns its length, or -1 when the line is none of the logger's (a RUN step's own
 * output, most often). */
static long message_of(const char *line, size_t n, char *msg)
{
    const char *end = line + n, *m;
    /* logrus text: key=value pairs, msg quoted when it holds a space or a quote. */
    for (m = find(line, n, "msg="); m != NULL; m = find(m + 1, (size_t)(end - m - 1), "msg=")) {
        if (m != line && m[-1] != ' ')
            continue;
        const char *v = m + 4;
        if (v < end && *v == '"')
            return (long)unquote(v + 1, (size_t)(end - v - 1), msg);
        size_t len = 0;
        while (v + len < end && v[len] != ' ')
            len++;
        memcpy(msg, v, len);
        msg[len] = '\0';
        return (long)len;
    }
    /* logrus json. */
    m = find(line, n, "\"msg\":\"");
    if (m != NULL)
        return (long)unquote(m + 7, (size_t)(end - m - 7), msg);
    /* logrus color (no terminal): "INFO[0002] RUN ...", the message padded with spaces. */
    size_t i = 0;
    while (i < n && i < 8 && line[i] >= 'A' && line[i] <= 'Z')
        i++;
    if (i < 4 || i >= n || line[i] != '[')
        return -1;
    m = find(line + i, n - i, "] ");
    if (m == NULL)
        return -1;
    m += 2;
    size_t len = (size_t)(end - m);
    while (len > 0 && is_blank(m[len - 1]))
        len--;
    /* The fields after the message are two spaces on. */
    const char *fields = find(m, len, "  ");
    if (fields != NULL)
        len = (size_t)(fields - m);
    memcpy(msg, m, len);
    msg[len] = '\0';
    return (long)len;
}

static void scan_line(const char *line, size_t n, const struct instruction *ins, int nins,
                      struct build_step *out)
{
    char msg[BUILD_STEP_MAX_LINE + 1];
    long len = message_of(line, n, msg);
    if (len < 0)
        return;
    out->started = 1;
    if ((size_t)len > strlen(PUSHING) && strncmp(msg, PUSHING, strlen(PUSHING)) == 0) {
        out->pushing = 1;
        return;
    }
    for (int i = nins - 1; i >= out->step; i--) {
        if (ins[i].text != NULL && ins[i].len == (size_t)len &&
            memcmp(ins[i].text, msg, (size_t)len) == 0) {
            out->step = i + 1;
            return;
        }
    }
}

void build_step_scan(const char *dockerfile, const char *log, size_t log_len,
                     struct build_step *out)
{
    memset(out, 0, sizeof(*out));
    struct instruction ins[BUILD_STEP_MAX_INSTRUCTIONS] = {{0}};
    int nins = read_instructions(dockerfile, ins);
    out->steps = nins;
    if (log == NULL)
        return;
    size_t start = 0;
    while (start < log_len) {
        const char *nl = memchr(log + start, '\n', log_len - start);
        size_t end = nl != NULL ? (size_t)(nl - log) : log_len;
        size_t n = end - start;
        if (n > 0 && log[end - 1] == '\r')
            n--;
        if (n <= BUILD_STEP_MAX_LINE)
            scan_line(log + start, n, ins, nins, out);
        start = end + 1;
    }
}

/* Elapsed seconds, rounded down to 10 s, as a person reads them; "" under 10 s. */
static void elapsed_text(double elapsed_s, char *out, size_t len)
{
    long s = elapsed_s > 0 && elapsed_s < 1e9 ? (long)elapsed_s / 10 * 10 : 0;
    if (s < 10)
        snprintf(out, len, "%s", "");
    else if (s < 60)
        snprintf(out, len, "%ld s", s);
    else if (s % 60 == 0)
        snprintf(out, len, "%ld min", s / 60);
    else
        snprintf(out, len, "%ld min %ld s", s / 60, s % 60);
}

const char *build_step_describe(const struct build_step *st, double elapsed_s, char *out,
                                size_t len)
{
    if (len == 0)
        return out;
    char what[64], when[48];
    if (st->pushing)
        snprintf(what, sizeof(what), "pushing");
    else if (st->step > 0 && st->steps > 0)
        snprintf(what, sizeof(what), "step %d/%d", st->step < st->steps ? st->step : st->steps,
                 st->steps);
    else if (st->started)
        snprintf(what, sizeof(what), "starting");
    else
        what[0] = '\0';
    elapsed_text(elapsed_s, when, sizeof(when));
    snprintf(out, len, "%s%s%s", what, what[0] && when[0] ? ", " : "", what[0] ? when : "");
    return out;
}

/* Labels and annotations the operator's administrators add to session children (issue 19). */
#include "session/meta.h"

#include "kube/objects.h"
#include "session/desired.h"
#include "session/runs.h"
#include "util/jget.h"

#include <ctype.h>
#include <string.h>

/* A name segment: 1 to 63 of [A-Za-z0-9-_.], alphanumeric at both ends. */
static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && ch != '-' && ch != '_' && ch != '.')
            return 0;
    }
    return 1;
}

/* A DNS subdomain: 1 to 253 of lower-case labels [a-z0-9-] joined by dots. */
static int subdomain_ok(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            unsigned char ch = (unsigned char)s[i];
            if (!(ch >= 'a' && ch <= 'z') && !isdigit(ch) && ch != '-')
                return 0;
            continue;
        }
        size_t len = i - start;
        if (len == 0 || len > 63 || s[start] == '-' || s[i - 1] == '-')
            return 0;
        start = i + 1;
    }
    return 1;
}

static int key_ok(const char *key)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return name_ok(key, strlen(key));
    return subdomain_ok(key, (size_t)(slash - key)) && name_ok(slash + 1, strlen(slash + 1));
}

int session_meta_reserved(const char *key)
{
    if (strcmp(key, SESSION_MANAGED_BY) == 0 || strcmp(key, SESSION_LABEL) == 0 ||
        strcmp(key, SESSION_RUN_LABEL) == 0)
        return 1;
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    size_t n = (size_t)(slash - key), d = strlen("telo.run");
    /* telo.run/... and <anything>.telo.run/... */
    return (n == d && strncmp(key, "telo.run", d) == 0) ||
           (n > d && key[n - d - 1] == '.' && strncmp(key + n - d, "telo.run", d) == 0);
}

int session_meta_check(enum session_meta_kind kind, struct json_object *map, const char *source,
                       const char *path, struct telo_err *err)
{
    if (!json_object_is_type(map, json_type_object))
        return telo_err_set(err, TELO_EINVAL, "%s: %s: want a map of strings", source, path);
    if (json_object_object_length(map) > SESSION_META_MAX_ENTRIES)
        return telo_err_set(err, TELO_EINVAL, "%s: %s: more than %d entries", source, path,
                            SESSION_META_MAX_ENTRIES);
    size_t bytes = 0;
    json_object_object_foreach(map, key, value)
    {
        const char *text = jget_string_of(value);
        if (!text)
            return telo_err_set(err, TELO_EINVAL, "%s: %s.%.300s: want a string", source, path,
                                key);
        if (!key_ok(key))
            return telo_err_set(err, TELO_EINVAL,
                                "%s: %s: \"%.300s\" is not a valid key (an optional DNS subdomain "
                                "prefix and '/', then up to 63 letters, digits, '-', '_' or '.', "
                                "starting and ending with a letter or digit)",
                                source, path, key);
        if (session_meta_reserved(key))
            return telo_err_set(err, TELO_EINVAL,
                                "%s: %s: \"%.300s\" is the operator's own key (the telo.run "
                                "domain and app.kubernetes.io/managed-by are set by the operator "
                                "on every session child): use another key",
                                source, path, key);
        if (kind == SESSION_META_LABELS && *text && !name_ok(text, strlen(text)))
            return telo_err_set(err, TELO_EINVAL,
                                "%s: %s.%.300s: \"%.100s\" is not a valid label value (up to 63 "
                                "letters, digits, '-', '_' or '.', starting and ending with a "
                                "letter or digit, or empty)",
                                source, path, key, text);
        bytes += strlen(key) + strlen(text);
    }
    if (kind == SESSION_META_ANNOTATIONS && bytes > SESSION_META_MAX_ANNOT_BYTES)
        return telo_err_set(err, TELO_EINVAL, "%s: %s: %zu bytes of keys and values, over %d",
                            source, path, bytes, SESSION_META_MAX_ANNOT_BYTES);
    return 0;
}

void session_meta_add(struct json_object *metadata, const char *field, struct json_object *extra)
{
    if (!metadata || !extra || json_object_object_length(extra) == 0)
        return;
    struct json_object *dst = jget_object(metadata, field);
    if (!dst) {
        dst = json_object_new_object();
        kube_obj_put(metadata, field, dst);
    }
    json_object_object_foreach(extra, key, value)
    {
        const char *text = jget_string_of(value);
        if (text && !jget(dst, key))
            kube_obj_put_str(dst, key, text);
    }
}

/* YAML text to json-c values: manifests and config files read as JSON. */
#include "util/yamljson.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 100

struct parse {
    yaml_parser_t parser;
    const char *source;
    struct telo_err *err;
};

static int fail_at(struct parse *p, const yaml_mark_t *mark, const char *problem)
{
    return telo_err_set(p->err, TELO_EINVAL, "%s: line %zu column %zu: %s", p->source,
                        mark->line + 1, mark->column + 1, problem);
}

static int next_event(struct parse *p, yaml_event_t *ev)
{
    if (yaml_parser_parse(&p->parser, ev))
        return 0;
    return telo_err_set(p->err, TELO_EINVAL, "%s: line %zu column %zu: %s", p->source,
                        p->parser.problem_mark.line + 1, p->parser.problem_mark.column + 1,
                        p->parser.problem ? p->parser.problem : "malformed YAML");
}

/* Whether text is a number as JSON writes it (RFC 8259), so it can be kept as the serialisation
 * of a double; YAML's ".5", "5." and "+1.5" are not. */
static int json_number(const char *t)
{
    if (*t == '-')
        t++;
    if (*t == '0')
        t++;
    else if (*t >= '1' && *t <= '9')
        t += strspn(t, "0123456789");
    else
        return 0;
    if (*t == '.') {
        size_t n = strspn(t + 1, "0123456789");
        if (n == 0)
            return 0;
        t += 1 + n;
    }
    if (*t == 'e' || *t == 'E') {
        t++;
        if (*t == '+' || *t == '-')
            t++;
        size_t n = strspn(t, "0123456789");
        if (n == 0)
            return 0;
        t += n;
    }
    return *t == '\0';
}

/* YAML 1.2 core schema for plain scalars; everything else is a string. */
static struct json_object *scalar(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && ev->data.scalar.tag == NULL) {
        if (len == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
            strcmp(v, "NULL") == 0)
            return NULL;
        if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0)
            return json_object_new_boolean(1);
        if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0)
            return json_object_new_boolean(0);
        char *end = NULL;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno == 0 && end != v && *end == '\0')
            return json_object_new_int64(n);
        if (strspn(v, "0123456789.eE+-") == len) {
            double d = strtod(v, &end);
            /* Keeping the text serialises "0.1" as written, not as 0.10000000000000001. */
            if (end != v && *end == '\0')
                return json_number(v) ? json_object_new_double_s(d, v) : json_object_new_double(d);
        }
    }
    return json_object_new_string_len(v, (int)len);
}

static int node(struct parse *p, yaml_event_t *first, struct json_object **out, int depth)
{
    *out = NULL;
    if (depth > MAX_DEPTH)
        return fail_at(p, &first->start_mark, "nested more than 100 levels deep");
    if (first->type == YAML_SCALAR_EVENT) {
        *out = scalar(first);
        return 0;
    }
    if (first->type == YAML_ALIAS_EVENT)
        return fail_at(p, &first->start_mark, "aliases (*name) are not supported");
    int mapping = first->type == YAML_MAPPING_START_EVENT;
    if (!mapping && first->type != YAML_SEQUENCE_START_EVENT)
        return fail_at(p, &first->start_mark, "unexpected YAML event");
    struct json_object *container = mapping ? json_object_new_object() : json_object_new_array();
    if (!container)
        return telo_err_set(p->err, TELO_ENOMEM, "%s: out of memory", p->source);
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(p, &ev);
        if (rc < 0)
            goto fail;
        if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        struct json_object *val = NULL;
        if (!mapping) {
            rc = node(p, &ev, &val, depth + 1);
            yaml_event_delete(&ev);
            if (rc < 0)
                goto fail;
            json_object_array_add(container, val);
            continue;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            rc = fail_at(p, &ev.start_mark, "mapping keys must be plain strings");
            yaml_event_delete(&ev);
            goto fail;
        }
        char *key = strndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
        yaml_mark_t key_mark = ev.start_mark;
        yaml_event_delete(&ev);
        if (!key) {
            rc = telo_err_set(p->err, TELO_ENOMEM, "%s: out of memory", p->source);
            goto fail;
        }
        if (json_object_object_get_ex(container, key, NULL)) {
            char msg[300];
            snprintf(msg, sizeof(msg), "duplicate key '%.200s'", key);
            rc = fail_at(p, &key_mark, msg);
            free(key);
            goto fail;
        }
        yaml_event_t vev;
        rc = next_event(p, &vev);
        if (rc == 0) {
            rc = node(p, &vev, &val, depth + 1);
            yaml_event_delete(&vev);
        }
        if (rc < 0) {
            free(key);
            goto fail;
        }
        json_object_object_add(container, key, val);
        free(key);
        continue;
    fail:
        json_object_put(container);
        return rc;
    }
    *out = container;
    return 0;
}

int yamljson_parse_docs(const char *text, size_t len, const char *source,
                        int (*fn)(void *ud, struct json_object *doc, int index), void *ud,
                        struct telo_err *err)
{
    struct parse p = {.source = source, .err = err};
    if (!yaml_parser_initialize(&p.parser))
        return telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
    yaml_parser_set_input_string(&p.parser, (const unsigned char *)text, len);
    int rc = 0, index = 0;
    for (;;) {
        yaml_event_t ev;
        rc = next_event(&p, &ev);
        if (rc < 0)
            break;
        yaml_event_type_t type = ev.type;
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT)
            break;
        if (type != YAML_DOCUMENT_START_EVENT)
            continue;
        yaml_event_t root;
        rc = next_event(&p, &root);
        if (rc < 0)
            break;
        struct json_object *doc = NULL;
        if (root.type == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&root);
            continue; /* an empty document */
        }
        rc = node(&p, &root, &doc, 0);
        yaml_event_delete(&root);
        if (rc < 0)
            break;
        yaml_event_t end;
        rc = next_event(&p, &end);
        if (rc == 0)
            yaml_event_delete(&end);
        if (rc == 0 && doc)
            rc = fn(ud, doc, index++);
        json_object_put(doc);
        if (rc != 0)
            break;
    }
    yaml_parser_delete(&p.parser);
    return rc;
}

struct single {
    struct json_object *doc;
    const char *source;
    struct telo_err *err;
};

static int keep_single(void *ud, struct json_object *doc, int index)
{
    struct single *s = ud;
    if (index > 0)
        return telo_err_set(s->err, TELO_EINVAL, "%s: holds several YAML documents; want one",
                            s->source);
    s->doc = json_object_get(doc);
    return 0;
}

int yamljson_parse(const char *text, size_t len, const char *source, struct json_object **out,
                   struct telo_err *err)
{
    struct single s = {.source = source, .err = err};
    int rc = yamljson_parse_docs(text, len, source, keep_single, &s, err);
    if (rc < 0) {
        json_object_put(s.doc);
        return rc;
    }
    *out = s.doc ? s.doc : json_object_new_object();
    return *out ? 0 : telo_err_set(err, TELO_ENOMEM, "%s: out of memory", source);
}

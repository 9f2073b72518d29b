/* Type-checked reads of json-c values from outside the process. */
#include "util/jget.h"

#include <math.h>
#include <string.h>

struct json_object *jget(const struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    /* json_object_object_get_ex answers 0 for a non-object; a JSON null is a NULL value. */
    if (!o || !key || !json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;
}

const char *jget_string_of(const struct json_object *v)
{
    return v && json_object_is_type(v, json_type_string)
               ? json_object_get_string((struct json_object *)v)
               : NULL;
}

const char *jget_number_or_string_of(const struct json_object *v)
{
    return v && (json_object_is_type(v, json_type_string) ||
                 json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))
               ? json_object_get_string((struct json_object *)v)
               : NULL;
}

const char *jget_string(const struct json_object *o, const char *key)
{
    return jget_string_of(jget(o, key));
}

static struct json_object *typed(const struct json_object *o, const char *key, json_type type)
{
    struct json_object *v = jget(o, key);
    return v && json_object_is_type(v, type) ? v : NULL;
}

struct json_object *jget_object(const struct json_object *o, const char *key)
{
    return typed(o, key, json_type_object);
}

struct json_object *jget_array(const struct json_object *o, const char *key)
{
    return typed(o, key, json_type_array);
}

int jget_int(const struct json_object *o, const char *key, int64_t *out)
{
    struct json_object *v = jget(o, key);
    if (v && json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return 0;
    }
    if (v && json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        /* 2^63 is the first double past INT64_MAX. */
        if (isfinite(d) && d == floor(d) && d >= -9223372036854775808.0 &&
            d < 9223372036854775808.0) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return -1;
}

int jget_bool(const struct json_object *o, const char *key, int *out)
{
    struct json_object *v = typed(o, key, json_type_boolean);
    if (!v)
        return -1;
    *out = json_object_get_boolean(v) ? 1 : 0;
    return 0;
}

int jget_string_is(const struct json_object *o, const char *key, const char *want)
{
    const char *s = jget_string(o, key);
    return s && want && strcmp(s, want) == 0;
}

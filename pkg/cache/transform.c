/* Transforms applied to objects before they enter the cache: strip and project. */
#include "cache/transform.h"

#include "util/jget.h"

#include <string.h>

void cache_transform_strip(struct json_object *obj)
{
    /* json-c asserts on a member deleted from a non-object: check every type (obj is outside
     * JSON, a watch event's or a list page's). */
    struct json_object *meta = jget_object(obj, "metadata");
    if (!meta)
        return;
    json_object_object_del(meta, "managedFields");
    struct json_object *annotations = jget_object(meta, "annotations");
    if (annotations) {
        json_object_object_del(annotations, "kubectl.kubernetes.io/last-applied-configuration");
        if (json_object_object_length(annotations) == 0)
            json_object_object_del(meta, "annotations");
    }
}

static struct json_object *child_of(struct json_object *dst, const char *name, enum json_type type)
{
    struct json_object *child;
    if (json_object_object_get_ex(dst, name, &child))
        return child;
    child = type == json_type_array ? json_object_new_array() : json_object_new_object();
    if (!child || json_object_object_add(dst, name, child) < 0) {
        json_object_put(child);
        return NULL;
    }
    return child;
}

/* Copies the value at path (dotted; a segment "name[]" walks every element of an array) from src
 * into dst, creating what is missing on the way. Returns 0 (also when src lacks the path) or -1
 * when out of memory. */
static int copy_path(struct json_object *src, struct json_object *dst, const char *path)
{
    char segment[128];
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    if (len == 0 || len >= sizeof(segment) || !json_object_is_type(src, json_type_object))
        return 0;
    memcpy(segment, path, len);
    segment[len] = '\0';
    int each = len > 2 && strcmp(segment + len - 2, "[]") == 0;
    if (each)
        segment[len - 2] = '\0';
    struct json_object *next;
    if (!json_object_object_get_ex(src, segment, &next))
        return 0;
    if (!dot || (each && !json_object_is_type(next, json_type_array))) {
        struct json_object *copy = NULL;
        if (json_object_deep_copy(next, &copy, NULL) < 0)
            return -1;
        return json_object_object_add(dst, segment, copy) < 0 ? -1 : 0;
    }
    if (!each) {
        struct json_object *child = child_of(dst, segment, json_type_object);
        return child ? copy_path(next, child, dot + 1) : -1;
    }
    struct json_object *out = child_of(dst, segment, json_type_array);
    if (!out)
        return -1;
    size_t n = json_object_array_length(next);
    for (size_t i = 0; i < n; i++) {
        struct json_object *elem = json_object_array_get_idx(out, i);
        if (!elem) {
            elem = json_object_new_object();
            if (!elem || json_object_array_put_idx(out, i, elem) < 0) {
                json_object_put(elem);
                return -1;
            }
        }
        if (copy_path(json_object_array_get_idx(next, i), elem, dot + 1) < 0)
            return -1;
    }
    return 0;
}

struct json_object *cache_transform_project(struct json_object *obj, const char *const *paths,
                                            size_t npaths)
{
    static const char *const identity[] = {
        "apiVersion",
        "kind",
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "metadata.resourceVersion",
        "metadata.generation",
        "metadata.deletionTimestamp",
        /* Enough to map a child to its owner; apiVersion and blockOwnerDeletion are not. */
        "metadata.ownerReferences[].uid",
        "metadata.ownerReferences[].kind",
        "metadata.ownerReferences[].name",
        "metadata.ownerReferences[].controller",
    };
    struct json_object *out = json_object_new_object();
    if (!out)
        return NULL;
    for (size_t i = 0; i < sizeof(identity) / sizeof(identity[0]); i++) {
        if (copy_path(obj, out, identity[i]) < 0)
            goto fail;
    }
    for (size_t i = 0; i < npaths; i++) {
        if (copy_path(obj, out, paths[i]) < 0)
            goto fail;
    }
    return out;
fail:
    json_object_put(out);
    return NULL;
}

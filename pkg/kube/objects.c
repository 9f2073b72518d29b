/* Builders for the pieces of Kubernetes objects (json-c) that every desired-object builder repeats:
 * fields, env entries, mounts, volumes, resources, hardened security contexts, owner references. */
#include "kube/objects.h"

#include <json.h>

void kube_obj_put(struct json_object *o, const char *key, struct json_object *v)
{
    if (o != NULL && v != NULL)
        json_object_object_add(o, key, v);
    else
        json_object_put(v);
}

void kube_obj_put_str(struct json_object *o, const char *key, const char *v)
{
    if (v != NULL)
        kube_obj_put(o, key, json_object_new_string(v));
}

void kube_obj_put_int(struct json_object *o, const char *key, long long v)
{
    kube_obj_put(o, key, json_object_new_int64(v));
}

void kube_obj_put_bool(struct json_object *o, const char *key, int v)
{
    kube_obj_put(o, key, json_object_new_boolean(v));
}

void kube_obj_push(struct json_object *a, struct json_object *v)
{
    if (a != NULL && v != NULL)
        json_object_array_add(a, v);
    else
        json_object_put(v);
}

void kube_obj_push_str(struct json_object *a, const char *v)
{
    if (v != NULL)
        kube_obj_push(a, json_object_new_string(v));
}

struct json_object *kube_obj_new(const char *api_version, const char *kind,
                                 struct json_object *metadata)
{
    struct json_object *o = json_object_new_object();
    kube_obj_put_str(o, "apiVersion", api_version);
    kube_obj_put_str(o, "kind", kind);
    kube_obj_put(o, "metadata", metadata);
    return o;
}

struct json_object *kube_obj_owner_ref(const char *api_version, const char *kind, const char *name,
                                       const char *uid, int controller)
{
    struct json_object *o = json_object_new_object();
    kube_obj_put_str(o, "apiVersion", api_version);
    kube_obj_put_str(o, "kind", kind);
    kube_obj_put_str(o, "name", name);
    kube_obj_put_str(o, "uid", uid);
    if (controller)
        kube_obj_put_bool(o, "controller", 1);
    kube_obj_put_bool(o, "blockOwnerDeletion", controller);
    return o;
}

struct json_object *kube_obj_container(const char *name, const char *image, const char *pull_policy)
{
    struct json_object *c = json_object_new_object();
    kube_obj_put_str(c, "name", name);
    kube_obj_put_str(c, "image", image);
    kube_obj_put_str(c, "imagePullPolicy", pull_policy);
    return c;
}

struct json_object *kube_obj_env(const char *name, const char *value)
{
    struct json_object *o = json_object_new_object();
    kube_obj_put_str(o, "name", name);
    kube_obj_put_str(o, "value", value);
    return o;
}

struct json_object *kube_obj_mount(const char *name, const char *path, int read_only)
{
    struct json_object *m = json_object_new_object();
    kube_obj_put_str(m, "name", name);
    kube_obj_put_str(m, "mountPath", path);
    if (read_only)
        kube_obj_put_bool(m, "readOnly", 1);
    return m;
}

struct json_object *kube_obj_empty_dir(const char *name)
{
    struct json_object *v = json_object_new_object();
    kube_obj_put_str(v, "name", name);
    kube_obj_put(v, "emptyDir", json_object_new_object());
    return v;
}

struct json_object *kube_obj_empty_dir_limited(const char *name, const char *size_limit)
{
    struct json_object *v = kube_obj_empty_dir(name), *dir = NULL;
    if (json_object_object_get_ex(v, "emptyDir", &dir))
        kube_obj_put_str(dir, "sizeLimit", size_limit);
    return v;
}

/* A volume of source kind source ("configMap", "secret") whose object is named by ref_field,
 * projecting one key to path. */
static struct json_object *one_key_volume(const char *name, const char *source,
                                          const char *ref_field, const char *ref, const char *key,
                                          const char *path)
{
    struct json_object *v = json_object_new_object(), *src = json_object_new_object(),
                       *items = json_object_new_array(), *item = json_object_new_object();
    kube_obj_put_str(v, "name", name);
    kube_obj_put_str(src, ref_field, ref);
    kube_obj_put_str(item, "key", key);
    kube_obj_put_str(item, "path", path);
    kube_obj_push(items, item);
    kube_obj_put(src, "items", items);
    kube_obj_put(v, source, src);
    return v;
}

struct json_object *kube_obj_configmap_volume(const char *name, const char *configmap,
                                              const char *key, const char *path)
{
    return one_key_volume(name, "configMap", "name", configmap, key, path);
}

struct json_object *kube_obj_secret_volume(const char *name, const char *secret, const char *key,
                                           const char *path)
{
    return one_key_volume(name, "secret", "secretName", secret, key, path);
}

static struct json_object *quantities(const char *cpu, const char *memory,
                                      const char *ephemeral_storage)
{
    struct json_object *q = json_object_new_object();
    kube_obj_put_str(q, "cpu", cpu);
    kube_obj_put_str(q, "memory", memory);
    kube_obj_put_str(q, "ephemeral-storage", ephemeral_storage);
    return q;
}

struct json_object *kube_obj_resources(const char *cpu, const char *memory,
                                       const char *ephemeral_storage)
{
    struct json_object *r = json_object_new_object();
    kube_obj_put(r, "limits", quantities(cpu, memory, ephemeral_storage));
    kube_obj_put(r, "requests", quantities(cpu, memory, ephemeral_storage));
    return r;
}

struct json_object *kube_obj_restricted_container_security(int read_only_root, long long run_as)
{
    struct json_object *sc = json_object_new_object(), *caps = json_object_new_object(),
                       *drop = json_object_new_array();
    kube_obj_put_bool(sc, "allowPrivilegeEscalation", 0);
    kube_obj_put_bool(sc, "readOnlyRootFilesystem", read_only_root);
    kube_obj_put_bool(sc, "runAsNonRoot", 1);
    if (run_as >= 0) {
        kube_obj_put_int(sc, "runAsUser", run_as);
        kube_obj_put_int(sc, "runAsGroup", run_as);
    }
    kube_obj_push_str(drop, "ALL");
    kube_obj_put(caps, "drop", drop);
    kube_obj_put(sc, "capabilities", caps);
    return sc;
}

struct json_object *kube_obj_pod_security(long long run_as)
{
    struct json_object *sc = json_object_new_object(), *seccomp = json_object_new_object();
    if (run_as >= 0) {
        kube_obj_put_bool(sc, "runAsNonRoot", 1);
        kube_obj_put_int(sc, "runAsUser", run_as);
        kube_obj_put_int(sc, "runAsGroup", run_as);
        kube_obj_put_int(sc, "fsGroup", run_as);
    }
    kube_obj_put_str(seccomp, "type", "RuntimeDefault");
    kube_obj_put(sc, "seccompProfile", seccomp);
    return sc;
}

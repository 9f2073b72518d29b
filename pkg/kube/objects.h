/* Builders for the pieces of Kubernetes objects (json-c) that every desired-object builder repeats:
 * fields, env entries, mounts, volumes, resources, hardened security contexts, owner references.
 *
 * Ownership: a function given a json_object takes it (json_object_put on failure). A NULL value
 * (an absent optional field, or a constructor that ran out of memory) is skipped, not added, so a
 * builder checks once, at the end, that what it needs is there. A function returning a
 * json_object returns a new one the caller owns, or NULL when out of memory. None of them fail
 * otherwise. */
#ifndef TELO_KUBE_OBJECTS_H
#define TELO_KUBE_OBJECTS_H

struct json_object;

/* Adds v under key (replacing a previous value). Skipped when o or v is NULL (v is freed). */
void kube_obj_put(struct json_object *o, const char *key, struct json_object *v);

/* Adds the string v under key; skipped when v is NULL. */
void kube_obj_put_str(struct json_object *o, const char *key, const char *v);

/* Adds the integer v under key. */
void kube_obj_put_int(struct json_object *o, const char *key, long long v);

/* Adds true (v != 0) or false under key. */
void kube_obj_put_bool(struct json_object *o, const char *key, int v);

/* Appends v to the array a. Skipped when a or v is NULL (v is freed). */
void kube_obj_push(struct json_object *a, struct json_object *v);

/* Appends the string v to the array a; skipped when v is NULL. */
void kube_obj_push_str(struct json_object *a, const char *v);

/* {"apiVersion", "kind", "metadata"}: the head of a top-level object; takes metadata. */
struct json_object *kube_obj_new(const char *api_version, const char *kind,
                                 struct json_object *metadata);

/* A metadata.ownerReferences entry. A controller reference (controller != 0) also blocks the
 * owner's foreground deletion until this object is gone; a plain one does not. */
struct json_object *kube_obj_owner_ref(const char *api_version, const char *kind, const char *name,
                                       const char *uid, int controller);

/* {"name", "image", "imagePullPolicy"}: the head of a container. */
struct json_object *kube_obj_container(const char *name, const char *image,
                                       const char *pull_policy);

/* A container env entry {"name", "value"}. */
struct json_object *kube_obj_env(const char *name, const char *value);

/* A container volumeMounts entry; "readOnly": true only when read_only. */
struct json_object *kube_obj_mount(const char *name, const char *path, int read_only);

/* A pod volume backed by an emptyDir. */
struct json_object *kube_obj_empty_dir(const char *name);

/* The same with emptyDir.sizeLimit size_limit (a quantity, "96Mi"): the kubelet evicts the pod
 * once the volume holds more, so what a pod writes there cannot fill the node's disk. */
struct json_object *kube_obj_empty_dir_limited(const char *name, const char *size_limit);

/* A pod volume with one key of ConfigMap configmap, at path inside the mount. */
struct json_object *kube_obj_configmap_volume(const char *name, const char *configmap,
                                              const char *key, const char *path);

/* A pod volume with one key of Secret secret, at path inside the mount. */
struct json_object *kube_obj_secret_volume(const char *name, const char *secret, const char *key,
                                           const char *path);

/* A container's resources with limits equal to requests (Guaranteed QoS when every container
 * does this); a NULL quantity is left out of both. */
struct json_object *kube_obj_resources(const char *cpu, const char *memory,
                                       const char *ephemeral_storage);

/* The container securityContext Pod Security "restricted" asks for: no privilege escalation,
 * non-root, every capability dropped; the root filesystem read-only when read_only_root; and
 * runAsUser and runAsGroup run_as when run_as >= 0 (else the pod's or the image's). */
struct json_object *kube_obj_restricted_container_security(int read_only_root, long long run_as);

/* The pod securityContext: the runtime's default seccomp profile, and when run_as >= 0 also
 * runAsNonRoot with runAsUser, runAsGroup and fsGroup run_as. */
struct json_object *kube_obj_pod_security(long long run_as);

#endif

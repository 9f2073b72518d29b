/* Transforms applied to objects before they enter the cache: strip and project. */
#ifndef TELO_CACHE_TRANSFORM_H
#define TELO_CACHE_TRANSFORM_H

#include <json.h>
#include <stddef.h>

/* Removes what no reconciler reads and every object carries: metadata.managedFields and the
 * kubectl.kubernetes.io/last-applied-configuration annotation (controller-runtime's
 * TransformStripManagedFields, plus the annotation, often the largest field). In place. */
void cache_transform_strip(struct json_object *obj);

/* Returns a new object (the caller json_object_put()s it) holding only the given dotted paths of
 * obj ("metadata.labels", "status.phase", "spec"; a segment "name[]" walks every element of an
 * array: "status.containerStatuses[].state"), each copied whole where present, plus the identity
 * every cache entry needs: apiVersion, kind, metadata.name, namespace, uid, resourceVersion,
 * generation, deletionTimestamp, and the uid, kind, name and controller of each owner reference.
 * Returns NULL when out of memory. npaths 0 keeps only the identity. */
struct json_object *cache_transform_project(struct json_object *obj, const char *const *paths,
                                            size_t npaths);

#endif

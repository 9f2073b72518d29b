/* Whose a child is: the ownership rule every object a session finds by name must pass. */
#include "session/owner.h"

#include "util/jget.h"

#include <stdio.h>
#include <string.h>

/* The controller owner reference of obj, or NULL. The API server allows at most one. */
static struct json_object *controller_ref(const struct json_object *obj)
{
    struct json_object *refs = jget_array(jget_object(obj, "metadata"), "ownerReferences");
    size_t n = refs ? json_object_array_length(refs) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *ref = json_object_array_get_idx(refs, i);
        int controller = 0;
        if (jget_bool(ref, "controller", &controller) == 0 && controller)
            return ref;
    }
    return NULL;
}

const char *session_controller_uid(const struct json_object *child)
{
    return jget_string(controller_ref(child), "uid");
}

enum session_owner session_child_owner(const struct json_object *child, const char *name,
                                       const char *uid)
{
    if (!child)
        return SESSION_OWNER_NONE;
    struct json_object *ref = controller_ref(child);
    const char *owner_uid = jget_string(ref, "uid");
    if (!owner_uid || !uid || !*uid)
        return SESSION_OWNER_FOREIGN;
    /* The operator never writes spec.hostNetwork (and a pod's is immutable): a pod on the host's
     * network was planted by someone with pods/create in the namespace, who may set a controller
     * reference to the session (without blockOwnerDeletion no permission on the session is
     * needed). Taken for ours, its address, the node's, would be probed and relayed to. */
    int host_network = 0;
    if (jget_bool(jget_object(child, "spec"), "hostNetwork", &host_network) == 0 && host_network)
        return SESSION_OWNER_FOREIGN;
    if (strcmp(owner_uid, uid) == 0)
        return SESSION_OWNER_OWN;
    /* Another TeloSession of this very name: the name now holds this session, so that one is
     * gone. A session of another name that happens to map to the same child name (a hashed
     * long name) may be alive: it is a clash, not a predecessor. */
    if (jget_string_is(ref, "kind", "TeloSession") && name && jget_string_is(ref, "name", name))
        return SESSION_OWNER_PREDECESSOR;
    return SESSION_OWNER_FOREIGN;
}

int session_owned_by(const struct json_object *obj, const char *kind, const char *uid)
{
    struct json_object *refs = jget_array(jget_object(obj, "metadata"), "ownerReferences");
    size_t n = refs ? json_object_array_length(refs) : 0;
    for (size_t i = 0; uid && i < n; i++) {
        struct json_object *ref = json_object_array_get_idx(refs, i);
        if (jget_string_is(ref, "kind", kind) && jget_string_is(ref, "uid", uid))
            return 1;
    }
    return 0;
}

void session_conflict_message(const char *kind, const char *ns, const char *name, char *out,
                              size_t len)
{
    snprintf(out, len,
             "%s %s/%s exists and is not owned by this session; delete or rename it (kubectl "
             "delete %s -n %s %s) and the session goes on",
             kind, ns, name, kind, ns, name);
}

/* Whose a child is: the ownership rule every object a session finds by name must pass. */
#ifndef TELO_SESSION_OWNER_H
#define TELO_SESSION_OWNER_H

#include <json.h>
#include <stddef.h>

/* What a child found by the session's child name is to the session (issue 21). Names are
 * derived from the session's name, so a deleted session's children (the garbage collector runs
 * in kube-controller-manager, seconds or minutes behind) and other people's objects can carry
 * the name a session wants; only the controller owner reference says whose a child is. */
enum session_owner {
    SESSION_OWNER_NONE,        /* no child */
    SESSION_OWNER_OWN,         /* its controller reference carries the session's uid, and it is
                                * not a pod on the host's network (never the operator's) */
    SESSION_OWNER_PREDECESSOR, /* controlled by a TeloSession of the same name and another uid:
                                * a deleted predecessor (a name holds one object at a time) */
    SESSION_OWNER_FOREIGN,     /* anything else: no controller, another kind, another name, or
                                * spec.hostNetwork */
};

/* Classifies child (NULL: none) for the session named name with uid. A predecessor is only
 * known to be gone as far as the caller's view of the session is current: a caller about to
 * delete a predecessor's child confirms the session's uid with a live read first, as the
 * garbage collector does before it deletes a dependent. Pure; cannot fail. */
enum session_owner session_child_owner(const struct json_object *child, const char *name,
                                       const char *uid);

/* Whether obj has an owner reference (controller or not) of kind with uid. */
int session_owned_by(const struct json_object *obj, const char *kind, const char *uid);

/* The uid of child's controller owner reference (borrowed from child), or NULL. */
const char *session_controller_uid(const struct json_object *child);

/* "pod ns/name exists and is not owned by this session; delete or rename it" into out, for the
 * NameConflict reason. kind is the user's word for the child ("pod", "Secret"). */
void session_conflict_message(const char *kind, const char *ns, const char *name, char *out,
                              size_t len);

#endif

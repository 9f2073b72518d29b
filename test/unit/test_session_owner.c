/* Tests for pkg/session/owner.c: the ownership rule of issue 21 for every kind of child a session
 * finds by name (pod, Secret, Service, Ingress) and for the build context ConfigMap of a Job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/owner.h"

#include <json.h>

#include <stdio.h>
#include <string.h>

#define SESSION_UID     "0b6f2d7a-6a44-4c84-8a55-2d9b3c0e1f00"
#define PREDECESSOR_UID "9a9a9a9a-0000-4000-8000-000000000001"

/* A child of kind named name whose ownerReferences are refs (JSON array text, or NULL: none). */
static struct json_object *child(const char *api_version, const char *kind, const char *name,
                                 const char *refs)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"%s\",\"kind\":\"%s\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"demo\",\"uid\":\"child-uid\"%s%s}}",
             api_version, kind, name, refs ? ",\"ownerReferences\":" : "", refs ? refs : "");
    struct json_object *o = json_tokener_parse(text);
    assert_non_null(o);
    return o;
}

static const char *session_ref(const char *name, const char *uid, int controller)
{
    static char text[512];
    snprintf(text, sizeof(text),
             "[{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"name\":\"%s\","
             "\"uid\":\"%s\",\"controller\":%s,\"blockOwnerDeletion\":true}]",
             name, uid, controller ? "true" : "false");
    return text;
}

static const struct {
    const char *api_version, *kind, *name;
} kinds[] = {
    {"v1", "Pod", "telo-run-hello"},
    {"v1", "Secret", "telo-run-hello-attach"},
    {"v1", "Service", "telo-run-hello"},
    {"networking.k8s.io/v1", "Ingress", "telo-run-hello"},
};

static enum session_owner classify(size_t k, const char *refs)
{
    struct json_object *o = child(kinds[k].api_version, kinds[k].kind, kinds[k].name, refs);
    enum session_owner owner = session_child_owner(o, "hello", SESSION_UID);
    json_object_put(o);
    return owner;
}

static void own_children_carry_the_sessions_uid(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        assert_int_equal(classify(k, session_ref("hello", SESSION_UID, 1)), SESSION_OWNER_OWN);
}

/* Controlled by a TeloSession of the same name and another uid: the session was deleted and
 * created again while the garbage collector was behind. */
static void a_predecessors_children_are_predecessors(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        assert_int_equal(classify(k, session_ref("hello", PREDECESSOR_UID, 1)),
                         SESSION_OWNER_PREDECESSOR);
}

static void anything_else_is_foreign(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        /* Made by a user: no owner at all. */
        assert_int_equal(classify(k, NULL), SESSION_OWNER_FOREIGN);
        assert_int_equal(classify(k, "[]"), SESSION_OWNER_FOREIGN);
        /* The session's uid, but not as controller: someone else controls it (or nobody). */
        assert_int_equal(classify(k, session_ref("hello", SESSION_UID, 0)), SESSION_OWNER_FOREIGN);
        /* Another session whose child name is the same (a hashed long name): alive as far as
         * anyone knows, so a clash, never a predecessor. */
        assert_int_equal(classify(k, session_ref("other", PREDECESSOR_UID, 1)),
                         SESSION_OWNER_FOREIGN);
        /* Another kind of controller of the same name. */
        assert_int_equal(
            classify(k, "[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"hello\","
                        "\"uid\":\"" PREDECESSOR_UID "\",\"controller\":true}]"),
            SESSION_OWNER_FOREIGN);
        /* Hostile shapes: a null, a number and a string where the API has objects. */
        assert_int_equal(classify(k, "null"), SESSION_OWNER_FOREIGN);
        assert_int_equal(classify(k, "[null,1,\"x\"]"), SESSION_OWNER_FOREIGN);
        assert_int_equal(classify(k, "[{\"kind\":\"TeloSession\",\"name\":\"hello\",\"uid\":null,"
                                     "\"controller\":true}]"),
                         SESSION_OWNER_FOREIGN);
        assert_int_equal(
            classify(k, "[{\"kind\":\"TeloSession\",\"name\":\"hello\",\"uid\":\"" SESSION_UID
                        "\",\"controller\":\"true\"}]"),
            SESSION_OWNER_FOREIGN);
    }
}

/* The operator never creates a pod on the host's network: one that claims the session as its
 * controller was made by someone with pods/create in the namespace (the API server lets anyone
 * set an ownerReference without blockOwnerDeletion), and its address is the node's. */
static void a_host_network_pod_is_never_own(void **state)
{
    (void)state;
    struct json_object *o =
        child("v1", "Pod", "telo-run-hello", session_ref("hello", SESSION_UID, 1));
    json_object_object_add(o, "spec", json_tokener_parse("{\"hostNetwork\":true}"));
    assert_int_equal(session_child_owner(o, "hello", SESSION_UID), SESSION_OWNER_FOREIGN);
    json_object_object_add(o, "spec", json_tokener_parse("{\"hostNetwork\":false}"));
    assert_int_equal(session_child_owner(o, "hello", SESSION_UID), SESSION_OWNER_OWN);
    json_object_put(o);
}

static void no_child_is_none(void **state)
{
    (void)state;
    assert_int_equal(session_child_owner(NULL, "hello", SESSION_UID), SESSION_OWNER_NONE);
    /* A session without a uid (never from the API server) owns nothing. */
    struct json_object *o = child("v1", "Pod", "telo-run-hello", session_ref("hello", "", 1));
    assert_int_equal(session_child_owner(o, "hello", ""), SESSION_OWNER_FOREIGN);
    assert_int_equal(session_child_owner(o, "hello", NULL), SESSION_OWNER_FOREIGN);
    json_object_put(o);
}

static void the_controller_uid_is_read_from_the_controller_reference(void **state)
{
    (void)state;
    struct json_object *o = child("v1", "Pod", "telo-run-hello",
                                  "[{\"kind\":\"Other\",\"uid\":\"u0\"},{\"kind\":\"TeloSession\","
                                  "\"name\":\"hello\",\"uid\":\"u1\",\"controller\":true}]");
    assert_string_equal(session_controller_uid(o), "u1");
    json_object_put(o);
    o = child("v1", "Pod", "telo-run-hello", NULL);
    assert_null(session_controller_uid(o));
    json_object_put(o);
}

/* The build context ConfigMap: owned (not controlled) by the Job that uses it. One of an
 * earlier Job of the same tag is not the new Job's. */
static void a_build_context_is_its_jobs_only_by_the_jobs_uid(void **state)
{
    (void)state;
    struct json_object *cm =
        child("v1", "ConfigMap", "telo-build-0123",
              "[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"telo-build-0123\","
              "\"uid\":\"job-1\",\"controller\":false}]");
    assert_true(session_owned_by(cm, "Job", "job-1"));
    assert_false(session_owned_by(cm, "Job", "job-2"));
    assert_false(session_owned_by(cm, "TeloSession", "job-1"));
    assert_false(session_owned_by(cm, "Job", NULL));
    json_object_put(cm);
    cm = child("v1", "ConfigMap", "telo-build-0123", NULL);
    assert_false(session_owned_by(cm, "Job", "job-1"));
    json_object_put(cm);
    /* A Job is never a session's: whatever its name, a TeloSession does not control it. */
    struct json_object *job = child("batch/v1", "Job", "telo-build-0123", NULL);
    assert_int_equal(session_child_owner(job, "hello", SESSION_UID), SESSION_OWNER_FOREIGN);
    json_object_put(job);
}

static void the_conflict_message_names_the_object(void **state)
{
    (void)state;
    char text[400];
    session_conflict_message("pod", "demo", "telo-run-hello", text, sizeof(text));
    assert_non_null(
        strstr(text, "pod demo/telo-run-hello exists and is not owned by this session; delete "
                     "or rename it"));
    assert_non_null(strstr(text, "kubectl delete pod -n demo telo-run-hello"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(own_children_carry_the_sessions_uid),
        cmocka_unit_test(a_predecessors_children_are_predecessors),
        cmocka_unit_test(anything_else_is_foreign),
        cmocka_unit_test(a_host_network_pod_is_never_own),
        cmocka_unit_test(no_child_is_none),
        cmocka_unit_test(the_controller_uid_is_read_from_the_controller_reference),
        cmocka_unit_test(a_build_context_is_its_jobs_only_by_the_jobs_uid),
        cmocka_unit_test(the_conflict_message_names_the_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

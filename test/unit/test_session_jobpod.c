/* Tests for pkg/session/jobpod.c: the pod a Job's pod list answered, whatever the list holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/jobpod.h"

#include <json.h>

static struct json_object *first_of(const char *body, int rc)
{
    struct json_object *obj = json_tokener_parse(body);
    struct kube_result res = {.rc = rc, .code = rc == 0 ? 200 : 500, .object = obj};
    struct json_object *pod = session_job_pod_first(&res);
    struct json_object *name = NULL;
    if (pod != NULL)
        json_object_object_get_ex(json_object_object_get(pod, "metadata"), "name", &name);
    struct json_object *kept = name ? json_object_get(name) : NULL;
    json_object_put(obj);
    return kept;
}

static void the_first_named_pod_is_the_jobs(void **state)
{
    (void)state;
    struct json_object *name = first_of(
        "{\"items\":[{\"metadata\":{\"name\":\"b-1\"}},{\"metadata\":{\"name\":\"b-2\"}}]}", 0);
    assert_non_null(name);
    assert_string_equal(json_object_get_string(name), "b-1");
    json_object_put(name);
}

static void no_pod_when_the_list_is_empty_failed_or_odd(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"items\":[]}",
        "{\"items\":null}",
        "{\"items\":{\"metadata\":{\"name\":\"x\"}}}",
        "{\"items\":[{\"metadata\":{\"name\":7}}]}",
        "{\"items\":[{\"metadata\":null}]}",
        "{\"items\":[null]}",
        "[]",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        assert_null(first_of(bodies[i], 0));
    assert_null(first_of("{\"items\":[{\"metadata\":{\"name\":\"b-1\"}}]}", -1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_first_named_pod_is_the_jobs),
        cmocka_unit_test(no_pod_when_the_list_is_empty_failed_or_odd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for pkg/session/meta.c (issue 19): the config's pod.labels, pod.annotations and
 * ingress.annotations, checked when read (pkg/session/config.c) and added to the session pod and
 * Ingress (pkg/session/desired.c) beside the operator's own labels, never over them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "session/config.h"
#include "session/desired.h"
#include "session/meta.h"
#include "session/spec.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char config_path[64];

/* Loads yaml (written to a fresh file) over a new config. */
static int load_text(const char *yaml, struct session_config **out, struct telo_err *err)
{
    snprintf(config_path, sizeof(config_path), "/tmp/telo-meta-XXXXXX");
    int fd = mkstemp(config_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
    *out = session_config_new();
    assert_non_null(*out);
    int rc = session_config_load_file(*out, config_path, err);
    unlink(config_path);
    return rc;
}

/* The file is refused with exactly "config <path>: <want>". */
static void expect_file_error(const char *yaml, const char *want)
{
    struct session_config *c;
    struct telo_err err;
    assert_int_equal(load_text(yaml, &c, &err), -TELO_EINVAL);
    char full[700];
    snprintf(full, sizeof(full), "config %s: %s", config_path, want);
    assert_string_equal(err.msg, full);
    session_config_free(c);
}

static const char *str(struct json_object *map, const char *key)
{
    struct json_object *v = NULL;
    return json_object_object_get_ex(map, key, &v) ? json_object_get_string(v) : NULL;
}

static void defaults_are_unset(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    assert_null(c->pod_labels);
    assert_null(c->pod_annotations);
    assert_null(c->ingress_annotations);
    session_config_free(c);
}

static void the_file_sets_all_three(void **state)
{
    (void)state;
    struct session_config *c;
    struct telo_err err;
    int rc = load_text("pod:\n"
                       "  labels:\n"
                       "    team: platform\n"
                       "    example.com/cost-center: \"cc-42\"\n"
                       "    empty: \"\"\n"
                       "  annotations:\n"
                       "    prometheus.io/scrape: \"false\"\n"
                       "    note: \"any text: quotes \\\" and = signs\"\n"
                       "ingress:\n"
                       "  baseDomain: sessions.example.com\n"
                       "  annotations:\n"
                       "    cert-manager.io/cluster-issuer: letsencrypt\n"
                       "    external-dns.alpha.kubernetes.io/hostname: sessions.example.com\n"
                       "    nginx.ingress.kubernetes.io/proxy-read-timeout: \"3600\"\n",
                       &c, &err);
    if (rc != 0)
        fail_msg("load: %s", err.msg);
    assert_string_equal(str(c->pod_labels, "team"), "platform");
    assert_string_equal(str(c->pod_labels, "example.com/cost-center"), "cc-42");
    assert_string_equal(str(c->pod_labels, "empty"), "");
    assert_string_equal(str(c->pod_annotations, "note"), "any text: quotes \" and = signs");
    assert_string_equal(str(c->ingress_annotations, "cert-manager.io/cluster-issuer"),
                        "letsencrypt");
    assert_int_equal(json_object_object_length(c->ingress_annotations), 3);
    assert_string_equal(c->ingress_base_domain, "sessions.example.com");
    session_config_free(c);
}

static void set_flag_takes_pairs(void **state)
{
    (void)state;
    struct session_config *c = session_config_new();
    struct telo_err err;
    assert_int_equal(session_config_set(c, "pod.labels=a=1,b=2", &err), 0);
    assert_string_equal(str(c->pod_labels, "b"), "2");
    assert_int_equal(session_config_set(c, "ingress.annotations=x.io/y=z", &err), 0);
    assert_string_equal(str(c->ingress_annotations, "x.io/y"), "z");
    assert_int_equal(session_config_set(c, "pod.labels=telo.run/session=x", &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "pod.labels: \"telo.run/session\" is the operator's own key"));
    /* The failed set left the earlier value. */
    assert_string_equal(str(c->pod_labels, "a"), "1");
    session_config_free(c);
}

static void the_operators_own_keys_are_refused_by_name(void **state)
{
    (void)state;
    const char *own = "is the operator's own key (the telo.run domain and "
                      "app.kubernetes.io/managed-by are set by the operator on every session "
                      "child): use another key";
    const char *cases[][2] = {
        {"pod:\n  labels:\n    telo.run/session: x\n", "pod.labels: \"telo.run/session\" "},
        {"pod:\n  labels:\n    telo.run/run: \"2\"\n", "pod.labels: \"telo.run/run\" "},
        {"pod:\n  labels:\n    app.kubernetes.io/managed-by: helm\n",
         "pod.labels: \"app.kubernetes.io/managed-by\" "},
        {"pod:\n  annotations:\n    x.telo.run/y: z\n", "pod.annotations: \"x.telo.run/y\" "},
        {"ingress:\n  annotations:\n    telo.run/anything: z\n",
         "ingress.annotations: \"telo.run/anything\" "},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char want[600];
        snprintf(want, sizeof(want), "%s%s", cases[i][1], own);
        expect_file_error(cases[i][0], want);
    }
    /* Other domains that merely end in telo.run are not ours. */
    assert_false(session_meta_reserved("notelo.run/x"));
    assert_false(session_meta_reserved("app.kubernetes.io/name"));
    assert_true(session_meta_reserved("a.b.telo.run/x"));
}

static void bad_keys_values_and_types_are_refused(void **state)
{
    (void)state;
    const char *key_rule = "is not a valid key (an optional DNS subdomain prefix and '/', then "
                           "up to 63 letters, digits, '-', '_' or '.', starting and ending with "
                           "a letter or digit)";
    char want[600];
    snprintf(want, sizeof(want), "pod.labels: \"-bad\" %s", key_rule);
    expect_file_error("pod:\n  labels:\n    -bad: x\n", want);
    snprintf(want, sizeof(want), "pod.annotations: \"Upper.Case/x\" %s", key_rule);
    expect_file_error("pod:\n  annotations:\n    Upper.Case/x: y\n", want);
    snprintf(want, sizeof(want), "ingress.annotations: \"a/b/c\" %s", key_rule);
    expect_file_error("ingress:\n  annotations:\n    a/b/c: y\n", want);
    expect_file_error("pod:\n  labels:\n    team: \"has space\"\n",
                      "pod.labels.team: \"has space\" is not a valid label value (up to 63 "
                      "letters, digits, '-', '_' or '.', starting and ending with a letter or "
                      "digit, or empty)");
    expect_file_error("pod:\n  labels:\n    n: 5\n", "pod.labels.n: want a string");
    expect_file_error("pod:\n  labels: [a]\n", "pod.labels: want a map of strings");
    expect_file_error("ingress:\n  annotations: text\n",
                      "ingress.annotations: want a map of strings");
    struct session_config *c;
    struct telo_err err;
    assert_int_equal(load_text("pod:\n  selector: {}\n", &c, &err), -TELO_EINVAL);
    assert_non_null(strstr(err.msg, "unknown key 'pod.selector' (known keys: "));
    session_config_free(c);
}

static void the_maps_are_bounded(void **state)
{
    (void)state;
    static char yaml[200000];
    size_t n = (size_t)snprintf(yaml, sizeof(yaml), "pod:\n  labels:\n");
    for (int i = 0; i <= SESSION_META_MAX_ENTRIES; i++)
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "    k%d: v\n", i);
    expect_file_error(yaml, "pod.labels: more than 64 entries");
    /* 2 annotations of 40000 bytes: over 64 KiB together. */
    n = (size_t)snprintf(yaml, sizeof(yaml), "pod:\n  annotations:\n");
    for (int i = 0; i < 2; i++) {
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "    a%d: \"", i);
        memset(yaml + n, 'x', 40000);
        n += 40000;
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "\"\n");
    }
    expect_file_error(yaml, "pod.annotations: 80004 bytes of keys and values, over 65536");
    /* A label value of 64 characters is refused, 63 is fine. */
    struct session_config *c;
    struct telo_err err;
    char line[200];
    snprintf(line, sizeof(line), "pod:\n  labels:\n    v: %.63s\n",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    assert_int_equal(load_text(line, &c, &err), 0);
    session_config_free(c);
    snprintf(line, sizeof(line), "pod:\n  labels:\n    v: %.64s\n",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    assert_int_equal(load_text(line, &c, &err), -TELO_EINVAL);
    session_config_free(c);
}

/* --- the builders ------------------------------------------------------------------------ */

static void session_of(struct json_object **obj, struct session *s)
{
    *obj = json_tokener_parse(
        "{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"metadata\":"
        "{\"name\":\"hello\",\"namespace\":\"demo\",\"uid\":\"u-1\",\"generation\":1},"
        "\"spec\":{\"entry\":\"app/telo.yaml\",\"bundle\":{\"configMap\":{\"name\":\"b\"}},"
        "\"ports\":[{\"port\":8080}]}}");
    assert_non_null(*obj);
    struct telo_err err;
    if (session_spec_parse(*obj, s, &err) != 0)
        fail_msg("session_spec_parse: %s", err.msg);
}

static struct json_object *meta_map(struct json_object *obj, const char *field)
{
    struct json_object *m = NULL, *v = NULL;
    if (!json_object_object_get_ex(obj, "metadata", &m) || !json_object_object_get_ex(m, field, &v))
        return NULL;
    return v;
}

static void the_pod_and_ingress_carry_them_beside_the_operators_own(void **state)
{
    (void)state;
    struct json_object *obj;
    struct session s;
    session_of(&obj, &s);
    struct session_config *c;
    struct telo_err err;
    int rc = load_text("pod:\n  labels: {team: platform}\n"
                       "  annotations: {example.com/owner: ops}\n"
                       "ingress:\n  baseDomain: s.example.com\n"
                       "  annotations: {cert-manager.io/cluster-issuer: le, a.example/t: '1'}\n",
                       &c, &err);
    if (rc != 0)
        fail_msg("load: %s", err.msg);
    struct json_object *pod = session_desired_pod(&s, c, "img:1");
    struct json_object *labels = meta_map(pod, "labels");
    assert_string_equal(str(labels, "team"), "platform");
    assert_string_equal(str(labels, SESSION_LABEL), "hello");
    assert_string_equal(str(labels, SESSION_MANAGED_BY), "telo-operator");
    assert_string_equal(str(meta_map(pod, "annotations"), "example.com/owner"), "ops");
    json_object_put(pod);

    struct json_object *ing = session_desired_ingress(&s, c);
    assert_non_null(ing);
    assert_string_equal(str(meta_map(ing, "annotations"), "cert-manager.io/cluster-issuer"), "le");
    /* The keys it applies, sorted: a configuration that drops one is told apart from others'. */
    assert_string_equal(str(meta_map(ing, "annotations"), SESSION_INGRESS_ANNOTATION_KEYS),
                        "a.example/t,cert-manager.io/cluster-issuer");
    /* The pod's labels are the pod's: the Ingress keeps the operator's alone. */
    assert_null(str(meta_map(ing, "labels"), "team"));
    assert_string_equal(str(meta_map(ing, "labels"), SESSION_LABEL), "hello");
    json_object_put(ing);

    /* The Service gets none of them. */
    struct json_object *svc = session_desired_service(&s, c);
    assert_null(meta_map(svc, "annotations"));
    assert_null(str(meta_map(svc, "labels"), "team"));
    json_object_put(svc);
    session_config_free(c);

    /* Without them the objects are as before: no annotations map at all. */
    c = session_config_new();
    free(c->ingress_base_domain);
    c->ingress_base_domain = strdup("s.example.com");
    pod = session_desired_pod(&s, c, "img:1");
    assert_null(meta_map(pod, "annotations"));
    assert_int_equal(json_object_object_length(meta_map(pod, "labels")), 2);
    json_object_put(pod);
    ing = session_desired_ingress(&s, c);
    assert_null(meta_map(ing, "annotations"));
    json_object_put(ing);
    session_config_free(c);
    session_spec_release(&s);
    json_object_put(obj);
}

static struct json_object *field(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static void add_never_overwrites(void **state)
{
    (void)state;
    struct json_object *meta = json_tokener_parse("{\"labels\":{\"a\":\"own\"}}");
    struct json_object *extra = json_tokener_parse("{\"a\":\"theirs\",\"b\":\"2\"}");
    session_meta_add(meta, "labels", extra);
    session_meta_add(meta, "annotations", extra);
    assert_string_equal(str(field(meta, "labels"), "a"), "own");
    assert_string_equal(str(field(meta, "labels"), "b"), "2");
    assert_string_equal(str(field(meta, "annotations"), "a"), "theirs");
    /* NULL or empty extra: no map is made. */
    struct json_object *bare = json_object_new_object(), *empty = json_object_new_object();
    session_meta_add(bare, "annotations", NULL);
    session_meta_add(bare, "annotations", empty);
    assert_null(field(bare, "annotations"));
    json_object_put(bare);
    json_object_put(empty);
    json_object_put(extra);
    json_object_put(meta);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_unset),
        cmocka_unit_test(the_file_sets_all_three),
        cmocka_unit_test(set_flag_takes_pairs),
        cmocka_unit_test(the_operators_own_keys_are_refused_by_name),
        cmocka_unit_test(bad_keys_values_and_types_are_refused),
        cmocka_unit_test(the_maps_are_bounded),
        cmocka_unit_test(the_pod_and_ingress_carry_them_beside_the_operators_own),
        cmocka_unit_test(add_never_overwrites),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

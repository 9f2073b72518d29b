/* Tests for pkg/imagebuild/buildstep.c: a running build's step read from kaniko's log against
 * the operator's own Dockerfile, hostile log content, and the progress detail's wording. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Its own block so include sorting keeps it after the headers it needs. */
#include <cmocka.h>

#include "imagebuild/buildstep.h"
#include "imagebuild/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dockerfile(void)
{
    struct telo_err err;
    char *d = build_dockerfile("registry.local/telo:1", NULL, "app/telo.yaml", &err);
    assert_non_null(d);
    return d;
}

static struct build_step scan(const char *log)
{
    char *d = dockerfile();
    struct build_step st;
    build_step_scan(d, log, strlen(log), &st);
    free(d);
    return st;
}

/* kaniko v1.23.2 with --log-format=text, as the real node's build pod logs it. */
#define T(msg) "time=\"2026-12-02T07:01:02Z\" level=info msg=" msg "\n"
static const char KANIKO_LOG[] = T("\"Retrieving image manifest registry.local/telo:1\"")
    T("\"Retrieving image registry.local/telo:1 from registry registry.local\"")
        T("\"Built cross stage deps: map[]\"") T("\"Executing 0 build triggers\"")
            T("\"Building stage 'registry.local/telo:1' [idx: '0', base-idx: '-1']\"")
                T("\"Unpacking rootfs as cmd COPY . /app requires it.\"") T("\"WORKDIR /app\"")
                    T("\"Cmd: workdir\"") T("\"Changed working directory to /app\"")
                        T("\"Creating directory /app with uid -1 and gid -1\"")
                            T("\"Taking snapshot of files...\"") T("\"COPY . /app\"")
                                T("\"Taking snapshot of files...\"") T("\"ARG TELO_REGISTRY_URL\"")
                                    T("\"ENV TELO_REGISTRY_URL=$TELO_REGISTRY_URL\"");

static void steps_of_the_operators_dockerfile(void **state)
{
    (void)state;
    /* WORKDIR, COPY, ARG, ENV, ENV, RUN: FROM is no step (kaniko starts a stage for it). */
    struct build_step st = scan("");
    assert_int_equal(st.steps, 6);
    assert_int_equal(st.step, 0);
    assert_false(st.started);
    st = scan(T("\"Retrieving image manifest registry.local/telo:1\""));
    assert_int_equal(st.step, 0);
    assert_true(st.started);
    /* "Unpacking rootfs as cmd COPY . /app requires it." names COPY but is not its start. */
    st = scan(T("\"Unpacking rootfs as cmd COPY . /app requires it.\""));
    assert_int_equal(st.step, 0);
    st = scan(KANIKO_LOG);
    assert_int_equal(st.step, 4);
    assert_false(st.pushing);
    char log[4096];
    snprintf(log, sizeof(log), "%s%s%s", KANIKO_LOG, T("\"ENV TELO_CACHE_DIR=/telo-cache\""),
             T("\"RUN [\\\"telo\\\",\\\"install\\\",\\\"/app/app/telo.yaml\\\"]\""));
    st = scan(log);
    assert_int_equal(st.step, 6);
    snprintf(log + strlen(log), sizeof(log) - strlen(log), "%s%s",
             "telo install: installed Http std/http-server@0.15.0\n",
             T("\"Pushing image to 10.0.0.1:5000/telo/apps:abc\""));
    st = scan(log);
    assert_int_equal(st.step, 6);
    assert_true(st.pushing);
}

static void other_logger_formats(void **state)
{
    (void)state;
    /* json and color (kaniko's default, no terminal): the same steps. */
    struct build_step st = scan("{\"level\":\"info\",\"msg\":\"COPY . /app\",\"time\":\"x\"}\n");
    assert_int_equal(st.step, 2);
    st = scan("INFO[0002] WORKDIR /app                                  \n"
              "INFO[0003] ARG TELO_REGISTRY_URL  key=value\n");
    assert_int_equal(st.step, 3);
    /* An unquoted msg (logrus quotes only values that need it). */
    st = scan("level=info msg=starting\n");
    assert_true(st.started);
    assert_int_equal(st.step, 0);
}

static void a_step_never_goes_back(void **state)
{
    (void)state;
    /* A RUN step that prints an earlier instruction's line (or a log read from a later point)
     * does not move the step back. */
    char log[2048];
    snprintf(log, sizeof(log), "%s%s", T("\"COPY . /app\""), T("\"WORKDIR /app\""));
    assert_int_equal(scan(log).step, 2);
}

static void hostile_and_cut_logs(void **state)
{
    (void)state;
    /* No newline at the end: the last line counts (a log cut by limitBytes ends so). */
    struct build_step st = scan("level=info msg=\"COPY . /app\"");
    assert_int_equal(st.step, 2);
    /* A line cut inside the quotes still matches only what it holds. */
    st = scan("level=info msg=\"COPY . /ap");
    assert_int_equal(st.step, 0);
    assert_true(st.started);
    /* Escapes other than \" and \\ match nothing; a CR before the newline is dropped. */
    st = scan("level=info msg=\"COPY\\t. /app\"\nlevel=info msg=\"WORKDIR /app\"\r\n");
    assert_int_equal(st.step, 1);
    /* Control characters and invalid UTF-8 are no instruction. */
    st = scan("level=info msg=\"\x1b[2JCOPY . /app\"\n\xff\xfe msg=\"\x01\"\n");
    assert_int_equal(st.step, 0);
    /* "msg=" inside another key's value is not the message. */
    st = scan("level=info note=xmsg=\"COPY . /app\"\n");
    assert_int_equal(st.step, 0);
    assert_false(st.started);
    /* A huge line is skipped whole, even one that would match at its end. */
    size_t big = (size_t)3 * BUILD_STEP_MAX_LINE;
    char *log = malloc(big + 64);
    assert_non_null(log);
    memset(log, 'a', big);
    snprintf(log + big, 64, " msg=\"COPY . /app\"\nlevel=info msg=\"WORKDIR /app\"");
    char *d = dockerfile();
    build_step_scan(d, log, strlen(log), &st);
    assert_int_equal(st.step, 1);
    /* NUL bytes in the log: lengths, not strings. */
    static const char with_nul[] = "msg=\"COPY . /app\"\0\nmsg=\"ARG TELO_REGISTRY_URL\"\n";
    build_step_scan(d, with_nul, sizeof(with_nul) - 1, &st);
    assert_int_equal(st.step, 3);
    /* Nothing to scan, no Dockerfile. */
    build_step_scan(d, NULL, 10, &st);
    assert_int_equal(st.steps, 6);
    assert_int_equal(st.step, 0);
    build_step_scan(NULL, "msg=\"COPY . /app\"", 17, &st);
    assert_int_equal(st.steps, 0);
    assert_int_equal(st.step, 0);
    assert_true(st.started);
    free(d);
    free(log);
}

static void dockerfiles_are_read_with_bounds(void **state)
{
    (void)state;
    struct build_step st;
    /* Comments, blank lines, lower-case from, a Dockerfile of many lines (counted up to the
     * cap). */
    build_step_scan("# c\n\n  from x  \nRUN a\r\n\tRUN b \n", "msg=\"RUN b\"", 11, &st);
    assert_int_equal(st.steps, 2);
    assert_int_equal(st.step, 2);
    char many[64 * 8];
    many[0] = '\0';
    for (int i = 0; i < 60; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "RUN %d\n", i);
    const char *log = "msg=\"RUN 59\"\nmsg=\"RUN 31\"";
    build_step_scan(many, log, strlen(log), &st);
    assert_int_equal(st.steps, BUILD_STEP_MAX_INSTRUCTIONS);
    assert_int_equal(st.step, 32);
}

static void described_for_a_person(void **state)
{
    (void)state;
    char out[96];
    struct build_step st = {.steps = 6};
    assert_string_equal(build_step_describe(&st, 45, out, sizeof(out)), "");
    st.started = 1;
    assert_string_equal(build_step_describe(&st, 9.9, out, sizeof(out)), "starting");
    assert_string_equal(build_step_describe(&st, 19.9, out, sizeof(out)), "starting, 10 s");
    st.step = 3;
    assert_string_equal(build_step_describe(&st, 45, out, sizeof(out)), "step 3/6, 40 s");
    assert_string_equal(build_step_describe(&st, 120.5, out, sizeof(out)), "step 3/6, 2 min");
    assert_string_equal(build_step_describe(&st, 135, out, sizeof(out)), "step 3/6, 2 min 10 s");
    st.pushing = 1;
    assert_string_equal(build_step_describe(&st, 75, out, sizeof(out)), "pushing, 1 min 10 s");
    /* Nonsense time reads as none; a short buffer is cut, terminated. */
    st.pushing = 0;
    assert_string_equal(build_step_describe(&st, -5, out, sizeof(out)), "step 3/6");
    assert_string_equal(build_step_describe(&st, 1e300, out, sizeof(out)), "step 3/6");
    assert_string_equal(build_step_describe(&st, 45, out, 5), "step");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(steps_of_the_operators_dockerfile),
        cmocka_unit_test(other_logger_formats),
        cmocka_unit_test(a_step_never_goes_back),
        cmocka_unit_test(hostile_and_cut_logs),
        cmocka_unit_test(dockerfiles_are_read_with_bounds),
        cmocka_unit_test(described_for_a_person),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

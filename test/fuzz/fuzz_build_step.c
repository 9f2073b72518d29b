/* libFuzzer target: a build pod's log (the tenant's RUN output lands in it) read for the build's
 * step against the operator's own Dockerfile; the step stays within the Dockerfile's steps and
 * the progress detail is always a terminated string of our own words. */
#include "fuzz_text.h"
#include "imagebuild/buildstep.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DOCKERFILE[] = "FROM registry.local/telo:1\n"
                                 "WORKDIR /app\n"
                                 "COPY . /app\n"
                                 "ARG TELO_REGISTRY_URL\n"
                                 "ENV TELO_REGISTRY_URL=$TELO_REGISTRY_URL\n"
                                 "ENV TELO_CACHE_DIR=/telo-cache\n"
                                 "RUN [\"telo\",\"install\",\"/app/app/telo.yaml\"]\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct build_step st;
    build_step_scan(DOCKERFILE, (const char *)data, size, &st);
    if (st.steps != 6 || st.step < 0 || st.step > st.steps || (st.step > 0 && !st.started) ||
        (st.pushing && !st.started))
        abort();
    char out[64];
    build_step_describe(&st, (double)size, out, sizeof(out));
    if (memchr(out, '\0', sizeof(out)) == NULL)
        abort();
    for (const char *p = out; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr(" /,", *p)))
            abort();
    /* The Dockerfile side too: the input as a Dockerfile, the same input as its log. */
    char *text = fuzz_text(data, size);
    if (text == NULL)
        return 0;
    build_step_scan(text, (const char *)data, size, &st);
    if (st.steps < 0 || st.steps > BUILD_STEP_MAX_INSTRUCTIONS || st.step > st.steps)
        abort();
    free(text);
    return 0;
}

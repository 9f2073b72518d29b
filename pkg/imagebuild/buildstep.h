/* Where a running build stands, read from the builder's log: which of the Dockerfile's
 * instructions kaniko is executing ("step 3/6"), or whether it is pushing. Pure; the log is the
 * tenant's (a RUN step's output lands in it), so it is read as hostile text. */
#ifndef TELO_IMAGEBUILD_BUILDSTEP_H
#define TELO_IMAGEBUILD_BUILDSTEP_H

#include <stddef.h>

/* The most instructions a Dockerfile is read for, and the longest log line looked at: a line
 * longer than this is no instruction of ours (ours are under 1.2 KiB) and is skipped whole. */
#define BUILD_STEP_MAX_INSTRUCTIONS 32
#define BUILD_STEP_MAX_LINE         4096

struct build_step {
    int steps;   /* the Dockerfile's instructions after its FROM; 0: no Dockerfile to count */
    int step;    /* the last of them the log shows started, 1-based; 0: none yet */
    int started; /* the log shows the builder at work (any line of kaniko's logger) */
    int pushing; /* the log shows the push of the image */
};

/* Reads log (log_len bytes, not NUL-terminated; a last line without a newline counts, as a cut
 * log ends) against dockerfile (the Dockerfile's text, NUL-terminated; NULL: unknown) into out.
 * kaniko logs each instruction as it starts executing it, as its text, through logrus:
 * `time="..." level=info msg="RUN [\"telo\",...]"` (--log-format=text), `{"msg":"RUN ..."}`
 * (json) or `INFO[0002] RUN ...` (color). A line counts as instruction i when its message is
 * instruction i's text exactly; the highest such i is out->step. Bounded: at most log_len
 * bytes are looked at once, lines over BUILD_STEP_MAX_LINE bytes are skipped, at most
 * BUILD_STEP_MAX_INSTRUCTIONS instructions are counted. Cannot fail. */
void build_step_scan(const char *dockerfile, const char *log, size_t log_len,
                     struct build_step *out);

/* The progress detail of st and elapsed seconds into out (len bytes): "step 3/6, 40 s",
 * "starting, 1 min 20 s", "pushing, 2 min"; the time is rounded down to 10 s so the text (a
 * status field) changes at most every 10 s, and left out under 10 s. "" when st shows nothing
 * (no line of the builder read yet). Returns out. */
const char *build_step_describe(const struct build_step *st, double elapsed_s, char *out,
                                size_t len);

#endif

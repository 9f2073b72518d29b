/* libFuzzer target: base-image freshness (pkg/session/basedigest.c). The first line of the input
 * is a Docker-Content-Digest as a registry sends it (session_base_digest_valid), the rest an
 * image reference (session_base_image_split). An accepted digest is bounded and made of the OCI
 * grammar's characters only, so it can neither break a log line nor the tag's record; the tag
 * made with it is always 32 lowercase hex characters; a split reference fits its buffers and
 * never holds a digest. */
#include "fuzz_text.h"
#include "imagebuild/depkey.h"
#include "session/basedigest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (text == NULL)
        return 0;
    const char *image = fuzz_second_line(text);
    if (image == NULL)
        image = "";
    if (session_base_digest_valid(text)) {
        size_t n = strlen(text);
        if (n == 0 || n > SESSION_DIGEST_MAX || strchr(text, ':') == NULL ||
            strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+._-=:") !=
                n)
            abort();
        struct session_base_digest d;
        memset(&d, 0, sizeof(d));
        d.state = SESSION_DIGEST_FRESH;
        memcpy(d.digest, text, n + 1);
        char tag[BUILD_TAG_LEN + 1];
        session_base_digest_tag("0123456789abcdef0123456789abcdef", &d, tag);
        if (strlen(tag) != BUILD_TAG_LEN || strspn(tag, "0123456789abcdef") != BUILD_TAG_LEN)
            abort();
    }
    char repository[600], tag[200];
    if (session_base_image_split(image, repository, sizeof(repository), tag, sizeof(tag)) == 0) {
        if (memchr(repository, '\0', sizeof(repository)) == NULL ||
            memchr(tag, '\0', sizeof(tag)) == NULL || repository[0] == '\0' || tag[0] == '\0' ||
            strchr(image, '@') != NULL || strchr(repository, '/') == NULL)
            abort();
    }
    free(text);
    return 0;
}

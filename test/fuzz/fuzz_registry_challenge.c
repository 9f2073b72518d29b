/* libFuzzer target: the registry's WWW-Authenticate challenge (pkg/imagebuild/registry.c
 * build_auth_challenge_parse) and the realm trust decision made on it. Fields are always
 * NUL-terminated within their arrays, and a realm the registry's own host does not serve is
 * never trusted. */
#include "fuzz_text.h"
#include "imagebuild/registry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *header = fuzz_text(data, size);
    if (header == NULL)
        return 0;
    struct build_auth_challenge ch;
    int rc = build_auth_challenge_parse(header, &ch);
    if (rc != 0 && rc != -TELO_EPROTO)
        abort();
    if (rc == 0) {
        if (memchr(ch.scheme, '\0', sizeof(ch.scheme)) == NULL ||
            memchr(ch.realm, '\0', sizeof(ch.realm)) == NULL ||
            memchr(ch.service, '\0', sizeof(ch.service)) == NULL ||
            memchr(ch.scope, '\0', sizeof(ch.scope)) == NULL || ch.scheme[0] == '\0')
            abort();
        /* The registry is reg.example: a trusted realm must name it (or be refused). */
        if (build_registry_realm_trusted(ch.realm, "reg.example:5000", NULL, 0)) {
            const char *host = strstr(ch.realm, "://");
            if (strncasecmp(ch.realm, "https://", 8) != 0 || host == NULL)
                abort();
        }
        (void)build_registry_realm_trusted(ch.realm, "reg.example", "http://api.example:1", 1);
    }
    free(header);
    return 0;
}

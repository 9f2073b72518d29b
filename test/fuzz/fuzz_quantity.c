/* libFuzzer target: a tenant's resource quantity (spec.resources) against the operator's ceiling,
 * as pkg/session/quantity parses and clamps them. Input: the request, a newline, the ceiling.
 * The clamp returns one of the two, and never a request above the ceiling or not above zero. */
#include "fuzz_text.h"
#include "session/quantity.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *requested = fuzz_text(data, size);
    if (requested == NULL)
        return 0;
    const char *ceiling = fuzz_second_line(requested);
    if (ceiling == NULL)
        ceiling = "4";
    long long want, max;
    const char *got = session_quantity_clamp(requested, ceiling);
    if (got != requested && got != ceiling)
        abort();
    if (got == requested && got != ceiling &&
        (session_quantity_milli(requested, &want) != 0 || want <= 0 ||
         session_quantity_milli(ceiling, &max) != 0 || want > max))
        abort();
    free(requested);
    return 0;
}

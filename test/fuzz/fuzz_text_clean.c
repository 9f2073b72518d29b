/* libFuzzer target: pkg/util/text's clean of a tenant's text for another person's terminal. What
 * comes out is UTF-8 that the clean keeps as it is, no longer than what went in, with no byte
 * a terminal acts on (ESC, BEL, CR, any C0 but newline and tab, DEL) and no hidden character. */
#include "util/text.h"
#include "util/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out = malloc(size + 1), *again = malloc(size + 1);
    if (out == NULL || again == NULL) {
        free(out);
        free(again);
        return 0;
    }
    size_t n = util_text_clean((const char *)data, size, out);
    if (n > size || out[n] != '\0' || !util_text_is_clean(out, n))
        abort();
    if (util_text_is_clean((const char *)data, size) != (n == size && memcmp(out, data, n) == 0))
        abort();
    const unsigned char *p = (const unsigned char *)out;
    for (size_t i = 0, len; i < n; i += len) {
        len = util_utf8_len(p + i, n - i);
        if (len == 0 || util_text_hidden(p + i, len) ||
            (p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f)
            abort();
    }
    if (util_text_clean(out, n, again) != n || memcmp(again, out, n) != 0)
        abort();
    free(out);
    free(again);
    return 0;
}

/* libFuzzer target: YAML text to JSON (yamljson_parse_docs, yamljson_parse), as manifests,
 * config files and tenants' YAML are read: each document must come out as a json-c value whose
 * serialisation json-c reads back. */
#include "util/yamljson.h"

#include <json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_doc(void *ud, struct json_object *doc, int index)
{
    int *n = ud;
    if (index != *n)
        abort();
    (*n)++;
    const char *text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
    if (!text)
        abort();
    struct json_tokener *tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH * 8);
    if (!tok)
        abort();
    /* With its NUL: a bare scalar document ("false") is only complete at the end of input. */
    struct json_object *back = json_tokener_parse_ex(tok, text, (int)strlen(text) + 1);
    if (!back && json_tokener_get_error(tok) != json_tokener_success)
        abort();
    json_object_put(back);
    json_tokener_free(tok);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct telo_err err;
    int n = 0;
    int rc = yamljson_parse_docs((const char *)data, size, "fuzz", on_doc, &n, &err);
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    struct json_object *one = NULL;
    rc = yamljson_parse((const char *)data, size, "fuzz", &one, &err);
    if (rc == 0) {
        if (!one)
            abort();
        json_object_put(one);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    return 0;
}

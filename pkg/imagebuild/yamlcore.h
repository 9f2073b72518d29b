/* Which plain YAML scalars the reference's parser (eemeli/yaml, YAML 1.2 core schema) turns into
 * JavaScript strings with toJS(): the rest become null, booleans or numbers, and the dependency
 * key ignores them where it expects a string. */
#ifndef TELO_IMAGEBUILD_YAMLCORE_H
#define TELO_IMAGEBUILD_YAMLCORE_H

#include <stddef.h>

/* 1 when the plain (unquoted, untagged) scalar s of n bytes resolves to a string, 0 when the core
 * schema makes it null (~, null, empty), a boolean, an integer (decimal, 0o, 0x), a float or
 * .inf/.nan. s need not be NUL-terminated. Cannot fail. */
int build_yaml_plain_is_string(const char *s, size_t n);

#endif

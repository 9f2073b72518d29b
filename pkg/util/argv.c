#include "util/argv.h"

#include <stdio.h>
#include <string.h>

void util_arg_read(int argc, char **argv, int i, struct util_arg *arg)
{
    const char *a = argv[i];
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    arg->joined = eq != NULL && (size_t)(eq - a) < sizeof(arg->buf);
    if (arg->joined) {
        snprintf(arg->buf, sizeof(arg->buf), "%.*s", (int)(eq - a), a);
        arg->name = arg->buf;
        arg->value = eq + 1;
    } else {
        arg->name = a;
        arg->value = i + 1 < argc ? argv[i + 1] : NULL;
    }
}

int util_arg_consumed(const struct util_arg *arg)
{
    return arg->joined ? 0 : 1;
}

const char *util_arg_take(const struct util_arg *arg, int *i)
{
    if (arg->value != NULL)
        *i += util_arg_consumed(arg);
    return arg->value;
}

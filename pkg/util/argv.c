#include "util/argv.h"

#include <stdio.h>
#include <string.h>

void util_arg_read(int argc, char **argv, int i, struct util_arg *arg)
{
    const char *a = argv[i];
    /* "-v=4" as well as "--v=4": Go's flag package and pflag's shorthands take both. */
    const char *eq = a[0] == '-' && a[1] != '\0' && a[1] != '=' ? strchr(a, '=') : NULL;
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

int util_arg_kube(const struct util_arg *arg, int *i, struct util_kube_args *k)
{
    const char **field = NULL;
    if (strcmp(arg->name, "--kubeconfig") == 0)
        field = &k->kubeconfig;
    else if (strcmp(arg->name, "--context") == 0)
        field = &k->context;
    else if (strcmp(arg->name, "-n") == 0 || strcmp(arg->name, "--namespace") == 0)
        field = &k->namespace;
    if (field == NULL)
        return 0;
    if (arg->value == NULL)
        return -1;
    *field = util_arg_take(arg, i);
    return 1;
}

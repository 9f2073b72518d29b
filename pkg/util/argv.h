#ifndef TELO_UTIL_ARGV_H
#define TELO_UTIL_ARGV_H

/* One command-line option of a program's argv, written either as "--name value" or as
 * "--name=value" (Go's flag package accepts both, and the Helm chart writes the second). */
struct util_arg {
    const char *name;  /* "--name": argv[i] itself, or buf when the value was joined */
    const char *value; /* the joined value, else argv[i + 1]; NULL when there is none */
    int joined;        /* 1 when the value came after '=' in the same word */
    char buf[64];      /* storage for a joined option's name */
};

/* Reads argv[i] into *arg; nothing is allocated and the strings point into argv or *arg.
 * A caller that takes arg->value advances i by util_arg_consumed(arg). */
void util_arg_read(int argc, char **argv, int i, struct util_arg *arg);

/* How many more argv entries the value used: 0 when joined, 1 when it was the next word. */
int util_arg_consumed(const struct util_arg *arg);

/* Takes arg's value: advances *i past it (util_arg_consumed) and returns it (NULL when there is
 * none, *i unchanged then). */
const char *util_arg_take(const struct util_arg *arg, int *i);

/* The connection flags the commands take as kubectl does. NULL: not given. */
struct util_kube_args {
    const char *kubeconfig; /* --kubeconfig FILE */
    const char *context;    /* --context NAME */
    const char *namespace;  /* -n NS, --namespace NS */
};

/* When arg is one of util_kube_args' flags, stores its value in *k, advances *i past it (as
 * util_arg_take) and returns 1; returns -1 when it is one of them without a value, 0 when it is
 * none of them. */
int util_arg_kube(const struct util_arg *arg, int *i, struct util_kube_args *k);

#endif

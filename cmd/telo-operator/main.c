/* telo-operator: the controller manager that runs TeloSessions (the kubectl-like development
 * client is its own executable, cmd/telo-kube). */
#include "operator_cmd.h"
#include "util/memtune.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: telo-operator [run] [OPTIONS]   run the TeloSession controller\n"
                 "       telo-operator --version | --help\n\n");
    operator_cmd_usage(out);
}

int main(int argc, char **argv)
{
    util_memtune();
    if (argc > 1 && strcmp(argv[1], "run") == 0)
        return operator_cmd_main(argc - 2, argv + 2);
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("telo-operator %s\n", TELO_VERSION);
        return 0;
    }
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc > 1 && argv[1][0] != '-') {
        fprintf(stderr, "telo-operator: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    /* No command: run, as a container's entrypoint would. */
    return operator_cmd_main(argc - 1, argv + 1);
}

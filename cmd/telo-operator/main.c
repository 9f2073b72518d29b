/* telo-operator: the controller manager that runs TeloSessions. */
#include "kube_cmd.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: telo-operator [--version] [--help]\n"
                 "       telo-operator kube [--kubeconfig FILE] [--context NAME] COMMAND ...\n"
                 "\n"
                 "Runs Telo applications as Kubernetes sessions. The controller is not built yet;\n"
                 "see README.md for what works today.\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "kube") == 0)
        return kube_cmd_main(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("telo-operator %s\n", TELO_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            fprintf(stdout, "\n");
            kube_cmd_usage(stdout);
            return 0;
        }
        fprintf(stderr, "telo-operator: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }
    usage(stdout);
    return 0;
}

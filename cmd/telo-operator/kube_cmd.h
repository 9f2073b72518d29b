/* `telo-operator kube ...`: a small kubectl-like tool over pkg/kube, for development and e2e. */
#ifndef TELO_CMD_KUBE_CMD_H
#define TELO_CMD_KUBE_CMD_H

#include <stdio.h>

/* Runs the kube subcommand with argv[0] == "kube". Returns the process exit code: 0 success,
 * 1 failure (message on stderr), 2 usage error, 3 watch ended with Expired. */
int kube_cmd_main(int argc, char **argv);

/* Writes the subcommand's help to out. */
void kube_cmd_usage(FILE *out);

#endif

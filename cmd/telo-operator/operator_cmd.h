/* `telo-operator run`: the controller manager that runs TeloSessions. */
#ifndef TELO_CMD_OPERATOR_CMD_H
#define TELO_CMD_OPERATOR_CMD_H

#include <stdio.h>

/* Runs the operator with the arguments after "run" (argv[0] is the first of them). Returns the
 * process exit code: 0 after a clean shutdown, 1 on a failure (message on stderr), 2 for bad
 * arguments. */
int operator_cmd_main(int argc, char **argv);

/* Writes the run command's help, with every configuration key, to out. */
void operator_cmd_usage(FILE *out);

#endif

/* The sandbox ("pause") process of the real node's pods: holds the pod's namespaces, reaps the
 * orphans it inherits as PID 1 and exits cleanly on SIGINT/SIGTERM. Built statically by
 * hack/images/build.sh; containerd's sandbox_image points at the image that carries it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
    (void)sig;
    _exit(0);
}

static void on_child(int sig)
{
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv)
{
    struct sigaction sa;

    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        (void)puts("telo-pause");
        return 0;
    }
    if (getpid() != 1) {
        (void)fputs("telo-pause: warning: not PID 1\n", stderr);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    (void)sigaction(SIGCHLD, &sa, NULL);
    for (;;) {
        pause();
    }
    return 1;
}

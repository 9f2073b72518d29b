/* `kubectl telo attach`: the user's terminal on a session's TTY, through the gateway or the API
 * server's pods/attach. */
#ifndef KUBECTL_TELO_ATTACH_CMD_H
#define KUBECTL_TELO_ATTACH_CMD_H

#include "client.h"

struct json_object;

struct kt_attach_flags {
    int direct;   /* 1: the API server's pods/attach even when the session has a gateway URL */
    int insecure; /* 1: do not verify the gateway's TLS certificate */
    const char *gateway_ca_file; /* PEM CAs to trust for the gateway; NULL: the system's */
    const char *token_audience;  /* the gateway's --token-audience; NULL: $TELO_TOKEN_AUDIENCE */
    double wait_s;               /* how long to wait for the session to be Running */
    int via;                     /* enum kt_via: how to reach the gateway */
};

/* How kubectl telo attach reaches the gateway at status.attach.url (--via). */
enum kt_via {
    KT_VIA_AUTO = 0, /* direct when the URL answers a TCP connect within a few seconds, else the
                      * API server's service proxy (when the URL names a Service) */
    KT_VIA_DIRECT,   /* the URL only */
    KT_VIA_PROXY,    /* the API server's service proxy only: needs only the kubeconfig */
};

/* Parses a --via value ("auto", "direct", "proxy"). Returns 0 with *via set, -1 otherwise. */
int kt_via_parse(const char *s, int *via);

/* Waits until session name is Running, printing its progress to stderr. Returns 0 with *session
 * set (the caller puts it), or the exit status for the command: the session's exit code when it
 * ended (1 when it has none), 1 when it does not exist or timeout_s passed. A session that ended
 * with exit code 0 returns 0 with *session NULL (its end was said). */
int kt_wait_running(struct kt *kt, const char *name, double timeout_s,
                    struct json_object **session);

/* Attaches the terminal to session name until it ends or the user detaches (ctrl-p ctrl-q).
 * Returns the exit status for the command: the session's exit code, 0 after a detach, 1 on an
 * error (printed). */
int kt_attach(struct kt *kt, const char *name, const struct kt_attach_flags *flags);

#endif

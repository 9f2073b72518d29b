/* Exec credential plugins (client.authentication.k8s.io): running a kubeconfig user's exec plugin,
 * synchronously or as a child process watched by a libev loop, and caching what it prints. */
#ifndef TELO_KUBE_EXECCRED_H
#define TELO_KUBE_EXECCRED_H

#include <time.h>

#include "util/err.h"

struct ev_loop;
struct kube_config;

#define KUBE_EXEC_API_V1      "client.authentication.k8s.io/v1"
#define KUBE_EXEC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"

/* The credential an exec plugin printed (an ExecCredential's status). Strings are owned. */
struct kube_exec_credential {
    char *token;    /* status.token, or NULL */
    char *cert_pem; /* status.clientCertificateData, or NULL (then key_pem is NULL too) */
    char *key_pem;  /* status.clientKeyData, or NULL */
    time_t expiry;  /* status.expirationTimestamp, 0 when none */
};

/* Parses an exec plugin's output text (NUL-terminated) as client-go does: an ExecCredential
 * JSON object of apiVersion api_version whose status holds a token or a certificate and key
 * pair, and an optional RFC 3339 expirationTimestamp. prefix and command start every message
 * ("<prefix>: exec plugin <command>: ..."). Returns 0 with *out filled (release it with
 * kube_exec_credential_release), or -TELO_EPROTO / -TELO_ENOMEM with err filled and *out empty.
 */
int kube_exec_credential_parse(const char *prefix, const char *command, const char *api_version,
                               const char *text, struct kube_exec_credential *out,
                               struct telo_err *err);

/* Frees what c owns and empties it. */
void kube_exec_credential_release(struct kube_exec_credential *c);

/* One user's exec plugin: how to run it, its cached credential, and the run in flight with the
 * requests waiting for it. */
struct kube_execcred;

/* A plugin for the user that prefix names ("kubeconfig /p: user \"u\"", starts every message).
 * command is the command as the kubeconfig writes it (for messages); argv0 the one to run (a
 * command holding a '/' already resolved against the kubeconfig's directory), looked up in PATH
 * now and again at the first run if not found; install_hint may be NULL; timeout_ms bounds each
 * run (the child is killed after it). Strings are copied. Returns NULL when out of memory; free
 * with kube_execcred_free. */
struct kube_execcred *kube_execcred_new(const char *prefix, const char *api_version,
                                        const char *command, const char *argv0,
                                        const char *install_hint, int timeout_ms);

/* Appends one argument. Returns 0 or -TELO_ENOMEM (ec unchanged). */
int kube_execcred_add_arg(struct kube_execcred *ec, const char *arg);

/* Adds NAME=value to the plugin's environment (over an inherited NAME). Returns 0 or
 * -TELO_ENOMEM (ec unchanged). */
int kube_execcred_add_env(struct kube_execcred *ec, const char *name, const char *value);

/* Builds KUBERNETES_EXEC_INFO for the plugin: interactive false and, when with_cluster, cfg's
 * server, TLS settings, CA (certificate-authority-data, read from ca_file if need be) and proxy,
 * as client-go's provideClusterInfo. Returns 0 or -TELO_ENOMEM. */
int kube_execcred_set_info(struct kube_execcred *ec, const struct kube_config *cfg,
                           int with_cluster);

/* Kills a run in flight (and reaps it), drops waiting requests without calling them, and frees
 * ec. NULL is a no-op. */
void kube_execcred_free(struct kube_execcred *ec);

/* 1 when a credential is cached and not expired (client-go treats one without
 * expirationTimestamp as valid until a 401), else 0. */
int kube_execcred_valid(const struct kube_execcred *ec);

/* The cached credential, never running anything: each pointer is set to the string (owned by ec,
 * valid until the cache changes: the next refresh, completed run, invalidate or free) or NULL. */
void kube_execcred_current(const struct kube_execcred *ec, const char **token,
                           const char **cert_pem, const char **key_pem);

/* Runs the plugin synchronously (blocking the caller up to the timeout) unless a valid credential
 * is cached. For commands without a loop; code on a loop uses kube_execcred_fetch. Returns 0, or
 * a negative code with err filled: -TELO_ENOTFOUND (no such executable, with the installHint),
 * -TELO_ETIMEDOUT, -TELO_EIO (non-zero exit, with the end of its stderr; killed by a signal),
 * -TELO_ETOOBIG (stdout over 1 MiB), -TELO_EPROTO (not an ExecCredential), -TELO_ENOMEM. */
int kube_execcred_refresh(struct kube_execcred *ec, struct telo_err *err);

/* Drops the cached credential (after a 401), so the next refresh or fetch runs the plugin. */
void kube_execcred_invalidate(struct kube_execcred *ec);

/* Called once from the loop when the run a request waited for ended: rc 0 (the credential is
 * cached: read it with kube_execcred_current, even if it is already expired) or a negative code
 * with err (the messages of kube_execcred_refresh), valid during the call. The callback may
 * fetch again, cancel other waits and submit requests, but not free ec. */
typedef void kube_execcred_fn(int rc, const struct telo_err *err, void *ud);

/* A request waiting for a run; owned by ec until its callback is called or it is cancelled. */
struct kube_execcred_wait;

/* Asks for a valid credential without blocking loop. Returns 0 when one is cached (fn is not
 * called, *wait is NULL); 1 when fn(ud) was queued behind the run in flight, or behind a run
 * started now as a child process watched by loop (stdout and stderr read by io watchers with a
 * byte bound, a timer killing it at the timeout, its exit seen by a child watcher on the default
 * loop, by polling waitpid on another loop), with *wait set for kube_execcred_wait_cancel; or a
 * negative code with err filled when the run cannot start (executable not found, pipe or fork
 * failed). All waits of one ec must use the same loop. */
int kube_execcred_fetch(struct kube_execcred *ec, struct ev_loop *loop, kube_execcred_fn *fn,
                        void *ud, struct kube_execcred_wait **wait, struct telo_err *err);

/* Forgets a wait: its callback is not called. The run goes on for the other waits (and the
 * cache). NULL is a no-op. */
void kube_execcred_wait_cancel(struct kube_execcred_wait *wait);

#endif

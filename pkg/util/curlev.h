/* libcurl's multi-socket interface driven from a libev loop: one ev_io per socket curl names, one
 * ev_timer for curl's timeout, finished transfers handed back outside curl's callbacks. */
#ifndef TELO_UTIL_CURLEV_H
#define TELO_UTIL_CURLEV_H

#include "util/err.h"

#include <curl/curl.h>

struct ev_loop;
struct curlev;

/* A transfer added with curlev_add finished; result is CURLE_OK or why it failed, ud the pointer
 * given to curlev_add. Called outside curl's callbacks, so it may remove and clean up any easy
 * handle, this one included (curl drops the queued completion of a handle removed before it is
 * delivered, so a handle removed here is never reported). It must not free the curlev. */
typedef void curlev_done_fn(CURL *easy, CURLcode result, void *ud);

/* Called each time curl hands control back after a socket or timer event, before the completions
 * that event produced are delivered; ud is the pointer given to curlev_new. The place for work curl
 * forbids inside its own callbacks: curl_multi_setopt, removing a handle whose callback asked for
 * that. It must not free the curlev. */
typedef void curlev_idle_fn(void *ud);

/* Creates a driver on loop (borrowed; must outlive it) with a new multi handle. done is required;
 * idle may be NULL. Returns NULL with err filled (-TELO_ENOMEM, also when libcurl cannot start).
 * Takes a reference on libcurl's global state (curl_global_init), which curlev_free gives back. */
struct curlev *curlev_new(struct ev_loop *loop, curlev_done_fn *done, curlev_idle_fn *idle,
                          void *ud, struct telo_err *err);

/* Closes curl's connections, stops watching their sockets and frees cv. Remove every easy handle
 * first. NULL is a no-op. */
void curlev_free(struct curlev *cv);

/* The multi handle, for the owner's connection limits (curl_multi_setopt). Its socket and timer
 * functions belong to cv and must not be changed. */
CURLM *curlev_multi(const struct curlev *cv);

/* Starts easy; its completion goes to done with ud. Sets easy's CURLOPT_PRIVATE (the owner must
 * not use it). Not from inside a curl callback. Returns 0, or -TELO_ENOMEM when curl refuses the
 * handle (then easy is not added and done is never called for it). */
int curlev_add(struct curlev *cv, CURL *easy, void *ud);

/* Stops easy (added or not) without a completion; the owner then cleans it up. Not from inside a
 * curl callback: see curlev_in_callback. NULL easy is a no-op. */
void curlev_remove(struct curlev *cv, CURL *easy);

/* 1 while curl is running one of its callbacks (header, write, ...) on cv's transfers: removing a
 * handle then must wait for idle. Else 0. */
int curlev_in_callback(const struct curlev *cv);

#endif

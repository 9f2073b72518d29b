/* The I/O edge of base-image freshness: looks base images' registry digests up (a manifest HEAD
 * for its Docker-Content-Digest) and keeps the answers in basedigest.h's pure table. The sessions
 * that asked are queued again when an answer arrives, and read it in their next reconcile. */
#ifndef TELO_SESSION_BASELOOKUP_H
#define TELO_SESSION_BASELOOKUP_H

#include "session/basedigest.h"
#include "session/config.h"
#include "util/err.h"

struct kube_transport;
struct session_base_lookups;

/* Creates the lookups on t's loop for cfg (both borrowed; they must outlive it). wake is called
 * with ud and the key of each session whose answer arrived. Returns NULL with err filled when
 * out of memory. */
struct session_base_lookups *session_base_lookups_new(struct kube_transport *t,
                                                      const struct session_config *cfg,
                                                      session_base_digests_wake_fn *wake, void *ud,
                                                      struct telo_err *err);

/* Cancels every lookup in flight (no wakes) and frees l. NULL is a no-op. */
void session_base_lookups_free(struct session_base_lookups *l);

/* What is held of base image image's registry digest within build.baseDigestTtlSeconds, into
 * *out. With ask and nothing held, it is looked up (with its own registry client, without a
 * positive cache since a tag's digest moves: one lookup per image however many sessions ask,
 * and no retry storm when the registry is down: a failure stands for the TTL too) and waiter (a
 * session key) is woken when the answer is in. A base image in build.repository's registry is
 * asked as the tag check asks (build.registryApiUrl, build.insecureRegistry, the push Secret);
 * any other over HTTPS, anonymously (Docker Hub's token service included). */
void session_base_lookups_get(struct session_base_lookups *l, const char *image, const char *waiter,
                              int ask, struct session_base_digest *out);

#endif

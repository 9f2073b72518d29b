/* The I/O edge of image builds for the session reconciler: a bundle's tag (memoised), the
 * registry's answer about an image, a failed build pod's log tail. Answers wait in tables on the
 * libev loop; the sessions that asked are queued again when one arrives, and read it as observed
 * state in their next reconcile. The log tails (buildlog.c) and the base images' digests
 * (baselookup.c) have their own files; this one is their single entry point. */
#include "session/builds.h"

#include "imagebuild/bundle.h"
#include "imagebuild/http.h"
#include "imagebuild/registry.h"
#include "kube/config.h"
#include "kube/rest.h"
#include "session/baselookup.h"
#include "session/buildlog.h"
#include "session/buildprogress.h"
#include "session/desired.h"
#include "session/waiters.h"
#include "util/base64.h"
#include "util/jget.h"
#include "util/log.h"
#include "util/strmap.h"

#include <ev.h>
#include <json.h>
#include <openssl/evp.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long an answer stands. "Absent" must be fresh: the image may be pushed any moment (a build
 * of the same tag ends), and deciding on an old "absent" would build it twice. Positive answers
 * are also cached by pkg/imagebuild's registry check, which answers from memory. */
#define ANSWER_TTL_S  5.0
#define PRESENT_TTL_S 60.0
#define MEMO_MAX      256
#define TABLE_MAX     4096
#define SECRET_KEY    ".dockerconfigjson"
/* URL bundles: how long a failed download's answer stands before the next session asks again.
 * The download's cap and timeout are BUILD_DOWNLOAD_MAX and BUILD_DOWNLOAD_TIMEOUT_S, the pods'
 * own. At most bundle.maxConcurrentDownloads run at once, so downloads hold at most that many
 * times BUILD_DOWNLOAD_MAX; the reader's cap on what a bundle holds once uncompressed (32 MiB)
 * makes a larger archive useless anyway. A free slot goes to the namespace with the fewest
 * downloads running, among equals the one that started one longest ago, and within it to the
 * oldest request: one tenant's queue of slow URLs, each allowed BUILD_DOWNLOAD_TIMEOUT_S, must not
 * stand before every other tenant's bundle. The fetches held (bundle.maxQueuedDownloads, failed
 * ones included) make room the same way (room_for). */
#define FETCH_ERROR_TTL_S 30.0
/* The longest legal parts of a memo key, from the CRD's maxLength (crds/telo.run_telosessions.yaml)
 * and the Kubernetes name rules; a key holding all of them fits MEMO_KEY_SIZE. The operator's own
 * defaults (images.default, registryUrl) are held to the same lengths. */
#define URL_MAX    2048 /* spec.bundle.url, spec.registryUrl */
#define IMAGE_MAX  512  /* spec.image */
#define CM_KEY_MAX 253  /* spec.bundle.configMap.key */
#define NS_MAX     63   /* a namespace: a DNS label */
#define MEMO_KEY_SIZE                                                                              \
    (SESSION_BUILDS_MEMO_MAX + IMAGE_MAX + URL_MAX + BUILD_ENTRY_MAX + CM_KEY_MAX + 8)

/* The registry's answer about one tag, or the question in flight. */
struct answer {
    struct session_builds *b;
    char tag[BUILD_TAG_LEN + 1];
    int in_flight;
    enum session_presence presence;
    char message[1024];
    double at;
    struct session_waiters w;
    struct build_registry_check *check;
    struct kube_call *secret_call;
};

struct memo_entry {
    char *key;
    struct session_bundle_key k;
    unsigned long long used; /* b->memo_clock at its last use */
};

/* A URL bundle being downloaded, or the failure of the last download. */
struct fetch {
    struct session_builds *b;
    char key[MEMO_KEY_SIZE]; /* the memo key: URL, digest and the tag's other inputs */
    char url[URL_MAX + 1], sha256[65], image[IMAGE_MAX + 1], registry[URL_MAX + 1];
    char entry[BUILD_ENTRY_MAX + 1];
    int in_flight;
    struct session_bundle_key failed; /* when !in_flight: why it could not be used */
    double at;
    struct session_waiters w;
    struct build_http_call *call;
    int queued;             /* in_flight, waiting for a download slot */
    struct fetch *next;     /* the queue */
    struct ns_share *share; /* while in the table; NULL when out of memory */
    char ns[NS_MAX + 1];    /* the namespace of the session that asked first */
};

/* One namespace's share of the download slots and of the fetch table; in the shares while it
 * has fetches in the table (running, waiting, or remembered as failed). */
struct ns_share {
    size_t running, waiting;
    size_t held;                   /* its fetches in the table, failed ones included */
    unsigned long long last_start; /* when it last started one, in b->starts; 0: never */
    char ns[];                     /* the map borrows this */
};

struct session_builds {
    struct kube_transport *t;
    const struct session_config *cfg;
    session_builds_requeue_fn *requeue;
    void *ud;
    struct build_registry *registry;
    struct build_http *http;
    struct strmap *answers, *memo, *fetches;
    unsigned long long memo_clock;           /* memo uses, for the least recently used */
    size_t downloading;                      /* downloads in flight */
    struct strmap *shares;                   /* namespace -> struct ns_share */
    unsigned long long starts;               /* downloads started: the shares' clock */
    struct fetch *queue, *queue_tail;        /* fetches waiting for a download slot, oldest first */
    double fetches_swept_at;                 /* the failed fetches past their time, dropped */
    struct session_build_logs *logs;         /* failed builds' log tails */
    struct session_base_lookups *base;       /* base-image freshness */
    struct session_build_progress *progress; /* running builds' steps */
    struct build_denied *deny;               /* owned; policy's */
    struct build_address_policy policy;      /* of spec.bundle.url */
};

static double now_of(const struct session_builds *b)
{
    return ev_now(kube_transport_loop(b->t));
}

/* --- setup ------------------------------------------------------------------------------- */

int session_builds_needed(const struct session_config *cfg, const struct session *s)
{
    return cfg->build_repository != NULL && !s->self_contained;
}

void session_builds_tag(const struct session_config *cfg, const struct session *s, const char *tag,
                        char *out)
{
    if (cfg->build_share_across_namespaces)
        snprintf(out, BUILD_TAG_LEN + 1, "%s", tag);
    else
        build_tag_for_namespace(tag, s->namespace, out);
}

void session_builds_job_config(const struct session_config *cfg, struct build_config *out)
{
    memset(out, 0, sizeof(*out));
    out->namespace = cfg->build_namespace;
    out->repository = cfg->build_repository;
    out->builder_image = cfg->build_builder_image;
    out->init_image = cfg->init_image;
    out->telo_registry_url = cfg->registry_url;
    out->push_secret = cfg->build_push_secret;
    out->insecure_registry = cfg->build_insecure;
    out->timeout_seconds = cfg->build_timeout_seconds;
    out->ttl_seconds_after_finished = cfg->build_ttl_seconds;
    out->managed_by = cfg->managed_by;
    out->node_selector = cfg->build_node_selector;
    out->tolerations = cfg->build_tolerations;
}

/* The URL policy: bundle.allowedUrlCidrs, and refused first bundle.deniedUrlCidrs and the API
 * server, which a tenant has no business fetching from and whose address may look public (GKE's
 * Services are in 34.118.224.0/20): the transport's server when it is an address, and the
 * in-cluster Service when the operator runs in a pod but talks through a kubeconfig. A server
 * known by name is not resolved: what it resolves to is judged like any address. Returns 0, or -1
 * when out of memory. */
static int url_policy(struct session_builds *b)
{
    static const char api_server[] = "the Kubernetes API server";
    const struct session_cidrs *denied = &b->cfg->bundle_denied_cidrs;
    if (!(b->deny = calloc(denied->n + 2, sizeof(*b->deny))))
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < denied->n; i++)
        b->deny[n++] =
            (struct build_denied){.net = denied->items[i], .what = "in bundle.deniedUrlCidrs"};
    const struct kube_config *kc = kube_transport_config(b->t);
    if (kc && build_url_denied(kc->server, api_server, &b->deny[n]))
        n++;
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    char url[128];
    int v6 = host && strchr(host, ':');
    if (host && port &&
        (size_t)snprintf(url, sizeof(url), "https://%s%s%s:%s/", v6 ? "[" : "", host, v6 ? "]" : "",
                         port) < sizeof(url) &&
        build_url_denied(url, api_server, &b->deny[n]))
        n++;
    b->policy = (struct build_address_policy){.deny = b->deny,
                                              .ndeny = n,
                                              .allow = b->cfg->bundle_allowed_cidrs.items,
                                              .nallow = b->cfg->bundle_allowed_cidrs.n};
    return 0;
}

struct session_builds *session_builds_new(struct kube_transport *t,
                                          const struct session_config *cfg,
                                          session_builds_requeue_fn *requeue, void *ud,
                                          struct telo_err *err)
{
    struct session_builds *b = calloc(1, sizeof(*b));
    if (!b) {
        telo_err_set(err, TELO_ENOMEM, "image builds: out of memory");
        return NULL;
    }
    b->t = t;
    b->cfg = cfg;
    b->requeue = requeue;
    b->ud = ud;
    if (!(b->answers = strmap_new()) ||
        !(b->logs = session_build_logs_new(t, cfg, requeue, ud, err)) ||
        !(b->memo = strmap_new()) || !(b->fetches = strmap_new()) || !(b->shares = strmap_new()) ||
        !(b->registry = build_registry_new(kube_transport_loop(t), NULL, err)) ||
        !(b->base = session_base_lookups_new(t, cfg, requeue, ud, err)) ||
        !(b->http = build_http_new(kube_transport_loop(t), err)) ||
        !(b->progress = session_build_progress_new(t, cfg, requeue, ud, err)) ||
        url_policy(b) < 0) {
        session_builds_free(b);
        telo_err_set(err, TELO_ENOMEM, "image builds: out of memory");
        return NULL;
    }
    return b;
}

static void answer_free(struct answer *a)
{
    if (!a)
        return;
    build_registry_check_cancel(a->check);
    kube_call_cancel(a->secret_call);
    session_waiters_free(&a->w);
    free(a);
}

/* f's namespace's share, counting f as waiting. Out of memory f has none: it is then chosen as
 * if its namespace had nothing running, which is less fair, never wrong about the slots. */
static void share_join(struct session_builds *b, struct fetch *f)
{
    struct ns_share *sh =
        strmap_get_or_add(b->shares, f->ns, sizeof(*sh), offsetof(struct ns_share, ns));
    if (!sh)
        return;
    sh->waiting++;
    sh->held++;
    f->share = sh;
}

/* f stopped waiting without starting, or stopped running; it stays in the table (failed). */
static void share_stop(struct fetch *f, int was_running)
{
    struct ns_share *sh = f->share;
    if (!sh)
        return;
    if (was_running)
        sh->running--;
    else
        sh->waiting--;
}

/* f leaves the table. */
static void share_leave(struct session_builds *b, struct fetch *f)
{
    struct ns_share *sh = f->share;
    if (!sh)
        return;
    if (f->call)
        sh->running--;
    else if (f->in_flight)
        sh->waiting--;
    f->share = NULL;
    if (--sh->held == 0) {
        strmap_remove(b->shares, sh->ns);
        free(sh);
    }
}

/* Whether a's namespace comes before b's for the next free slot. */
static int share_first(const struct ns_share *a, const struct ns_share *b)
{
    size_t ar = a ? a->running : 0, br = b ? b->running : 0;
    if (ar != br)
        return ar < br;
    return (a ? a->last_start : 0) < (b ? b->last_start : 0);
}

static void fetch_free(struct fetch *f)
{
    if (!f)
        return;
    struct session_builds *b = f->b;
    if (f->queued) {
        struct fetch **pp = &b->queue;
        while (*pp && *pp != f)
            pp = &(*pp)->next;
        if (*pp)
            *pp = f->next;
        if (b->queue_tail == f) {
            b->queue_tail = NULL;
            for (struct fetch *q = b->queue; q; q = q->next)
                b->queue_tail = q;
        }
    }
    share_leave(b, f);
    if (f->call)
        b->downloading--;
    build_http_cancel(f->call);
    session_waiters_free(&f->w);
    free(f);
}

static void memo_clear(struct strmap *memo)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(memo, &it, &key, &value)) {
        struct memo_entry *e = value;
        strmap_remove(memo, key);
        free(e->key);
        free(e);
    }
}

void session_builds_free(struct session_builds *b)
{
    if (!b)
        return;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (b->answers && strmap_next(b->answers, &it, &key, &value))
        answer_free(value);
    it = (struct strmap_iter){0};
    while (b->fetches && strmap_next(b->fetches, &it, &key, &value))
        fetch_free(value);
    if (b->memo)
        memo_clear(b->memo);
    session_base_lookups_free(b->base);
    session_build_progress_free(b->progress);
    strmap_free(b->fetches);
    strmap_free(b->shares); /* empty: every fetch was freed above */
    build_http_free(b->http);
    strmap_free(b->answers);
    session_build_logs_free(b->logs);
    strmap_free(b->memo);
    build_registry_free(b->registry);
    free(b->deny);
    free(b);
}

/* --- the bundle's key -------------------------------------------------------------------- */

static void read_key(const void *tgz, size_t len, const char *source, const struct session *s,
                     const struct session_config *cfg, struct session_bundle_key *out)
{
    struct build_bundle *bundle = NULL;
    struct build_depkey *key = NULL;
    struct telo_err err;
    telo_err_clear(&err);
    struct build_tag_input in = {
        .base_image = session_image(s, cfg),
        .telo_registry_url = s->registry_url ? s->registry_url : cfg->registry_url,
    };
    /* The key first: its reader is the one with a budget, so a bomb is refused there before
     * the entry check parses the entry file. */
    int rc = build_bundle_read(tgz, len, NULL, source, &bundle, &err);
    if (rc == 0 && (rc = build_tag_for_bundle(bundle, &in, out->tag, &key, &err)) < 0) {
        char msg[sizeof(err.msg)];
        snprintf(msg, sizeof(msg), "%s", err.msg);
        telo_err_set(&err, -rc, "%s: %s", source, msg);
    }
    if (rc == 0)
        rc = build_bundle_check_entry(bundle, s->entry, source, &err);
    if (rc < 0) {
        snprintf(out->error, sizeof(out->error), "%s", err.msg);
    } else if (key) {
        out->no_dependencies =
            key->nimports == 0 && key->ncontrollers == 0 && !key->full_content_fallback;
    }
    build_depkey_free(key);
    build_bundle_free(bundle);
}

/* The memo key: what says the bytes are the same (memo, and for a ConfigMap the key that picks
 * them out of it: cm_key, "" for a URL), and the tag's other inputs. Returns 0, or -1 with
 * k->error naming the part too long to key (a truncated key could match another session's bytes,
 * so the bundle is refused instead). */
static int memo_key(const struct session_builds *b, const char *memo, const char *cm_key,
                    const struct session *s, char *out, struct session_bundle_key *k)
{
    const char *registry = s->registry_url ? s->registry_url : b->cfg->registry_url;
    const struct {
        const char *field, *value;
        size_t max;
    } parts[] = {
        {"the bundle's identity", memo, SESSION_BUILDS_MEMO_MAX - 1},
        {"spec.bundle.configMap.key", cm_key, CM_KEY_MAX},
        {"spec.image (or the operator's images.default)", session_image(s, b->cfg), IMAGE_MAX},
        {"spec.registryUrl (or the operator's registryUrl)", registry, URL_MAX},
        {"spec.entry", s->entry, BUILD_ENTRY_MAX},
    };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        size_t n = strlen(parts[i].value);
        if (n > parts[i].max) {
            snprintf(k->error, sizeof(k->error),
                     "%s has %zu characters, at most %zu are allowed: shorten it", parts[i].field,
                     n, parts[i].max);
            return -1;
        }
    }
    snprintf(out, MEMO_KEY_SIZE, "%s\n%s\n%s\n%s\n%s", memo, cm_key, session_image(s, b->cfg),
             registry, s->entry);
    return 0;
}

static const struct session_bundle_key *memo_get(struct session_builds *b, const char *key)
{
    struct memo_entry *e = strmap_get(b->memo, key);
    if (!e)
        return NULL;
    e->used = ++b->memo_clock;
    return &e->k;
}

/* Full, the memo drops its least recently used key, not all of them: sessions with more distinct
 * bundles than it holds (one tenant's, changed on every pass) must not make every other
 * session's bundle be read (or downloaded) again. */
static void memo_drop_oldest(struct strmap *memo)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    struct memo_entry *oldest = NULL;
    while (strmap_next(memo, &it, &key, &value)) {
        struct memo_entry *e = value;
        if (!oldest || e->used < oldest->used)
            oldest = e;
    }
    if (!oldest)
        return;
    strmap_remove(memo, oldest->key);
    free(oldest->key);
    free(oldest);
}

static void memo_put(struct session_builds *b, const char *key, const struct session_bundle_key *k)
{
    if (strmap_len(b->memo) >= MEMO_MAX)
        memo_drop_oldest(b->memo);
    struct memo_entry *e = calloc(1, sizeof(*e));
    if (!e || !(e->key = strdup(key)) || strmap_put(b->memo, e->key, e) < 0) {
        if (e)
            free(e->key);
        free(e);
        return;
    }
    e->k = *k;
    e->used = ++b->memo_clock;
}

void session_builds_bundle_key(struct session_builds *b, const char *memo, const void *tgz,
                               size_t len, const char *source, const struct session *s,
                               struct session_bundle_key *out)
{
    memset(out, 0, sizeof(*out));
    char key[MEMO_KEY_SIZE];
    if (memo) {
        if (memo_key(b, memo, s->bundle_configmap_key, s, key, out) < 0)
            return;
        const struct session_bundle_key *k = memo_get(b, key);
        if (k) {
            *out = *k;
            return;
        }
    }
    read_key(tgz, len, source, s, b->cfg, out);
    if (memo)
        memo_put(b, key, out);
}

/* --- URL bundles ------------------------------------------------------------------------- */

static void fetch_failed(struct fetch *f, const char *detail)
{
    snprintf(f->failed.reason, sizeof(f->failed.reason), "BundleFetchFailed");
    snprintf(f->failed.error, sizeof(f->failed.error), "%s", detail);
}

/* Checks the download against its digest and reads it; *detail says why it cannot be used. */
static void downloaded(struct fetch *f, const struct build_http_response *resp, char *detail,
                       size_t len)
{
    /* Only our own words and the HTTP code: what the remote said stays in the log. */
    if (resp->refused) {
        snprintf(detail, len, "download of spec.bundle.url refused: %s%s",
                 resp->summary + strlen("refused: "),
                 resp->denied ? "" : "; allow it with bundle.allowedUrlCidrs");
        return;
    }
    if (resp->rc < 0) {
        snprintf(detail, len, "download of spec.bundle.url failed: %s",
                 resp->summary && resp->summary[0] ? resp->summary : "the transfer failed");
        return;
    }
    if (resp->code != 200) {
        snprintf(detail, len, "download of spec.bundle.url failed: HTTP %ld", resp->code);
        return;
    }
    if (resp->body->len >= BUILD_DOWNLOAD_MAX) {
        snprintf(detail, len, "download of spec.bundle.url failed: larger than %zu bytes",
                 BUILD_DOWNLOAD_MAX);
        return;
    }
    unsigned char digest[32];
    char hex[65];
    unsigned int n = 0;
    EVP_Digest(resp->body->data ? resp->body->data : "", resp->body->len, digest, &n, EVP_sha256(),
               NULL);
    for (size_t i = 0; i < sizeof(digest); i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    if (strcmp(hex, f->sha256) != 0) {
        snprintf(
            detail, len,
            "bundle sha256 mismatch for %.1000s: spec.bundle.url.sha256 is %s but the download "
            "is %s",
            f->url, f->sha256, hex);
        return;
    }
    struct session s = {.image = f->image, .registry_url = f->registry, .entry = f->entry};
    struct session_bundle_key k;
    char source[2100];
    snprintf(source, sizeof(source), "bundle %s", f->url);
    memset(&k, 0, sizeof(k));
    read_key(resp->body->data, resp->body->len, source, &s, f->b->cfg, &k);
    memo_put(f->b, f->key, &k);
}

static void pump_downloads(struct session_builds *b);

static void on_download(struct build_http_call *call, const struct build_http_response *resp,
                        void *ud)
{
    (void)call;
    struct fetch *f = ud;
    struct session_builds *b = f->b;
    char detail[1536] = "";
    f->call = NULL;
    b->downloading--;
    share_stop(f, 1);
    f->in_flight = 0;
    f->at = now_of(b);
    downloaded(f, resp, detail, sizeof(detail));
    if (!detail[0]) {
        /* In the memo now: the fetch is done with. */
        strmap_remove(b->fetches, f->key);
        session_waiters_wake(&f->w, b->requeue, b->ud);
        fetch_free(f);
    } else {
        fetch_failed(f, detail);
        telo_log(TELO_LOG_WARN, "bundle download failed", "url=%s error=\"%s\" detail=\"%s\"",
                 f->url, detail, resp->rc < 0 && resp->err ? resp->err->msg : "");
        session_waiters_wake(&f->w, b->requeue, b->ud);
    }
    pump_downloads(b);
}

/* Starts f's download. Returns 0, or -1 with f failed (not in flight) and its waiters woken. */
static int start_download(struct fetch *f)
{
    struct session_builds *b = f->b;
    struct build_http_request req = {.method = "GET",
                                     .url = f->url,
                                     .timeout_ms = BUILD_DOWNLOAD_TIMEOUT_S * 1000L,
                                     .max_body = BUILD_DOWNLOAD_MAX,
                                     .restrict_addresses = 1,
                                     .policy = &b->policy,
                                     .follow_redirects = 1};
    struct telo_err err;
    telo_err_clear(&err);
    f->call = build_http_submit(b->http, &req, on_download, f, &err);
    if (f->call) {
        b->downloading++;
        if (f->share) {
            f->share->waiting--;
            f->share->running++;
            f->share->last_start = ++b->starts;
        }
        return 0;
    }
    share_stop(f, 0);
    telo_log(TELO_LOG_WARN, "bundle download failed", "url=%s error=\"%s\"", f->url, err.msg);
    f->in_flight = 0;
    f->at = now_of(b);
    fetch_failed(f,
                 "download of spec.bundle.url failed: the URL must start with http:// or https://");
    session_waiters_wake(&f->w, b->requeue, b->ud);
    return -1;
}

void session_builds_downloads(const struct session_builds *b, size_t *running, size_t *waiting)
{
    *running = b->downloading;
    *waiting = 0;
    for (const struct fetch *f = b->queue; f; f = f->next)
        (*waiting)++;
}

/* Starts queued downloads while there are free slots, each the oldest of the namespace whose
 * share comes first. The queue holds at most bundle.maxQueuedDownloads fetches. */
static void pump_downloads(struct session_builds *b)
{
    while (b->queue && b->downloading < (size_t)b->cfg->bundle_max_downloads) {
        struct fetch **pick = &b->queue, *prev = NULL, *pick_prev = NULL;
        for (struct fetch **pp = &b->queue; *pp; prev = *pp, pp = &(*pp)->next) {
            if (share_first((*pp)->share, (*pick)->share)) {
                pick = pp;
                pick_prev = prev;
            }
        }
        struct fetch *f = *pick;
        *pick = f->next;
        if (b->queue_tail == f)
            b->queue_tail = pick_prev;
        f->next = NULL;
        f->queued = 0;
        /* Its sessions say they wait for a slot: now they download (a failed start has woken
         * them already). */
        if (start_download(f) == 0)
            session_waiters_wake(&f->w, b->requeue, b->ud);
    }
}

/* Drops the failed fetches whose answer has stood its time (at most once a second: a full table
 * is asked about by every session that wants a place). */
static void sweep_fetches(struct session_builds *b, double now)
{
    if (now - b->fetches_swept_at < 1.0)
        return;
    b->fetches_swept_at = now;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(b->fetches, &it, &key, &value)) {
        struct fetch *f = value;
        if (!f->in_flight && now - f->at > FETCH_ERROR_TTL_S) {
            strmap_remove(b->fetches, key);
            fetch_free(f);
        }
    }
}

/* The fetch namespace sh gives up to make room: its oldest failed one (a remembered answer,
 * asked for again later), else its newest waiting one (its sessions ask again and find their
 * place taken). NULL when it has neither (every one of its fetches runs). */
static struct fetch *victim_of(struct session_builds *b, const struct ns_share *sh)
{
    struct fetch *failed = NULL, *waiting = NULL;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(b->fetches, &it, &key, &value)) {
        struct fetch *f = value;
        if (f->share != sh)
            continue;
        if (!f->in_flight && (!failed || f->at < failed->at))
            failed = f;
    }
    if (failed)
        return failed;
    for (struct fetch *q = b->queue; q; q = q->next) {
        if (q->share == sh)
            waiting = q;
    }
    return waiting;
}

/* Whether a new fetch of namespace ns fits in the table (bundle.maxQueuedDownloads). A full one
 * is first rid of failed fetches past their time; then the namespace holding the most gives up
 * one, when it holds at least two more than ns: one tenant's thousands of slow or failing URLs
 * must not keep every other tenant's bundle out of the table. */
static int room_for(struct session_builds *b, const char *ns)
{
    size_t max = (size_t)b->cfg->bundle_max_queued;
    if (strmap_len(b->fetches) < max)
        return 1;
    sweep_fetches(b, now_of(b));
    if (strmap_len(b->fetches) < max)
        return 1;
    const struct ns_share *mine = strmap_get(b->shares, ns), *most = NULL;
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(b->shares, &it, &key, &value)) {
        const struct ns_share *sh = value;
        if (sh->held > sh->running && (!most || sh->held > most->held))
            most = sh;
    }
    if (!most || most->held < (mine ? mine->held : 0) + 2)
        return 0;
    struct fetch *victim = victim_of(b, most);
    if (!victim)
        return 0;
    telo_log(TELO_LOG_INFO, "bundle download dropped to make room", "url=%s namespace=%s held=%zu",
             victim->url, most->ns, most->held);
    strmap_remove(b->fetches, victim->key);
    session_waiters_wake(&victim->w, b->requeue, b->ud);
    fetch_free(victim);
    return strmap_len(b->fetches) < max;
}

int session_builds_url_key(struct session_builds *b, const struct session *s, const char *waiter,
                           struct session_bundle_key *out, const char **wait)
{
    memset(out, 0, sizeof(*out));
    *wait = SESSION_BUNDLE_DOWNLOADING;
    char memo[SESSION_BUILDS_MEMO_MAX], key[MEMO_KEY_SIZE];
    if (strlen(s->bundle_url) > URL_MAX) {
        snprintf(out->error, sizeof(out->error),
                 "spec.bundle.url has %zu characters, at most %d are allowed: shorten it",
                 strlen(s->bundle_url), URL_MAX);
        return 1;
    }
    /* A digest names the bytes: the same URL and digest are the same bundle. */
    snprintf(memo, sizeof(memo), "url %s sha256 %s", s->bundle_url, s->bundle_sha256);
    if (memo_key(b, memo, "", s, key, out) < 0)
        return 1;
    const struct session_bundle_key *k = memo_get(b, key);
    if (k) {
        *out = *k;
        return 1;
    }
    struct fetch *f = strmap_get(b->fetches, key);
    if (f && !f->in_flight) {
        if (now_of(b) - f->at <= FETCH_ERROR_TTL_S) {
            *out = f->failed;
            return 1;
        }
        strmap_remove(b->fetches, key);
        fetch_free(f);
        f = NULL;
    }
    if (f) {
        session_waiters_add(&f->w, waiter);
        if (f->queued)
            *wait = SESSION_BUNDLE_SLOT_WAIT;
        return 0;
    }
    if (!room_for(b, s->namespace)) {
        *wait = SESSION_BUNDLE_ROOM_WAIT;
        return 0; /* looked at again by the pass's requeue-after */
    }
    if (!(f = calloc(1, sizeof(*f))))
        return 0;
    f->b = b;
    snprintf(f->key, sizeof(f->key), "%s", key);
    snprintf(f->url, sizeof(f->url), "%s", s->bundle_url);
    snprintf(f->sha256, sizeof(f->sha256), "%s", s->bundle_sha256);
    snprintf(f->image, sizeof(f->image), "%s", session_image(s, b->cfg));
    snprintf(f->registry, sizeof(f->registry), "%s",
             s->registry_url ? s->registry_url : b->cfg->registry_url);
    snprintf(f->entry, sizeof(f->entry), "%s", s->entry);
    snprintf(f->ns, sizeof(f->ns), "%s", s->namespace);
    f->in_flight = 1;
    if (strmap_put(b->fetches, f->key, f) < 0) {
        free(f);
        return 0;
    }
    session_waiters_add(&f->w, waiter);
    share_join(b, f);
    if (b->downloading >= (size_t)b->cfg->bundle_max_downloads) {
        /* Waits its turn, in flight for the sessions that ask meanwhile. */
        f->queued = 1;
        *wait = SESSION_BUNDLE_SLOT_WAIT;
        if (b->queue_tail)
            b->queue_tail->next = f;
        else
            b->queue = f;
        b->queue_tail = f;
        return 0;
    }
    if (start_download(f) < 0) {
        *out = f->failed;
        return 1;
    }
    return 0;
}

/* --- the registry's answer --------------------------------------------------------------- */

static void answered(struct answer *a, enum session_presence presence, const char *message)
{
    a->in_flight = 0;
    a->check = NULL;
    a->secret_call = NULL;
    a->presence = presence;
    a->at = now_of(a->b);
    snprintf(a->message, sizeof(a->message), "%s", message ? message : "");
    telo_log(presence == SESSION_PRESENCE_DENIED || presence == SESSION_PRESENCE_UNKNOWN
                 ? TELO_LOG_WARN
                 : TELO_LOG_INFO,
             "registry answer", "tag=%s presence=%d%s%s", a->tag, (int)presence,
             *a->message ? " message=" : "", a->message);
    session_waiters_wake(&a->w, a->b->requeue, a->b->ud);
}

static void on_registry(struct build_registry_check *check, const struct build_registry_result *res,
                        void *ud)
{
    (void)check;
    struct answer *a = ud;
    enum session_presence p = SESSION_PRESENCE_UNKNOWN;
    switch (res->presence) {
    case BUILD_IMAGE_PRESENT:
        p = SESSION_PRESENCE_PRESENT;
        break;
    case BUILD_IMAGE_ABSENT:
        p = SESSION_PRESENCE_ABSENT;
        break;
    case BUILD_IMAGE_UNKNOWN:
        p = SESSION_PRESENCE_UNKNOWN;
        break;
    case BUILD_IMAGE_DENIED:
        p = SESSION_PRESENCE_DENIED;
        break;
    }
    answered(a, p, res->message);
}

static void start_check(struct answer *a, const char *config, size_t config_len)
{
    const struct session_config *cfg = a->b->cfg;
    char secret[320] = "";
    if (cfg->build_push_secret)
        snprintf(secret, sizeof(secret), "%s/%s", cfg->build_namespace, cfg->build_push_secret);
    struct build_registry_query q = {
        .repository = cfg->build_repository,
        .tag = a->tag,
        .api_url = cfg->build_registry_api_url,
        .dockerconfigjson = config,
        .dockerconfigjson_len = config_len,
        .secret_name = secret[0] ? secret : NULL,
        .insecure = cfg->build_insecure,
    };
    struct telo_err err;
    telo_err_clear(&err);
    a->check = build_registry_check(a->b->registry, &q, on_registry, a, &err);
    if (!a->check) {
        /* A repository or Secret that cannot work: say what to fix, build nothing. */
        answered(a, err.code == TELO_ENOMEM ? SESSION_PRESENCE_UNKNOWN : SESSION_PRESENCE_DENIED,
                 err.msg);
    }
}

static void on_secret(const struct kube_result *res, void *ud)
{
    struct answer *a = ud;
    a->secret_call = NULL;
    const struct session_config *cfg = a->b->cfg;
    char message[1024];
    if (res->rc < 0) {
        if (res->code == 404)
            snprintf(message, sizeof(message),
                     "the push Secret %s/%s (build.pushSecret) does not exist; create it with: "
                     "kubectl create secret docker-registry %s -n %s --docker-server=<registry> "
                     "--docker-username=<user> --docker-password=<password>",
                     cfg->build_namespace, cfg->build_push_secret, cfg->build_push_secret,
                     cfg->build_namespace);
        else if (res->code == 403)
            snprintf(message, sizeof(message),
                     "the operator may not read the push Secret %s/%s (build.pushSecret): grant "
                     "it get on secrets in namespace %s",
                     cfg->build_namespace, cfg->build_push_secret, cfg->build_namespace);
        else
            snprintf(message, sizeof(message), "cannot read the push Secret %s/%s: %s",
                     cfg->build_namespace, cfg->build_push_secret,
                     res->err ? res->err->msg : "failed");
        answered(a,
                 res->code == 404 || res->code == 403 ? SESSION_PRESENCE_DENIED
                                                      : SESSION_PRESENCE_UNKNOWN,
                 message);
        return;
    }
    const char *text = jget_string(jget(res->object, "data"), SECRET_KEY);
    size_t len = 0;
    unsigned char *config = text ? util_base64_decode(text, strlen(text), &len) : NULL;
    if (!config) {
        snprintf(message, sizeof(message),
                 "the push Secret %s/%s (build.pushSecret) has no %s; make it a "
                 "kubernetes.io/dockerconfigjson Secret (kubectl create secret docker-registry)",
                 cfg->build_namespace, cfg->build_push_secret, SECRET_KEY);
        answered(a, SESSION_PRESENCE_DENIED, message);
        return;
    }
    start_check(a, (const char *)config, len);
    free(config);
}

static void sweep_answers(struct session_builds *b, double now)
{
    struct strmap_iter it = {0};
    const char *key;
    void *value;
    while (strmap_next(b->answers, &it, &key, &value)) {
        struct answer *a = value;
        double ttl = a->presence == SESSION_PRESENCE_PRESENT ? PRESENT_TTL_S : ANSWER_TTL_S;
        if (!a->in_flight && now - a->at > ttl) {
            strmap_remove(b->answers, key);
            answer_free(a);
        }
    }
}

enum session_presence session_builds_presence(struct session_builds *b, const char *tag,
                                              const char *waiter, int ask, const char **message)
{
    double now = now_of(b);
    *message = "";
    struct answer *a = strmap_get(b->answers, tag);
    if (a && !a->in_flight) {
        double ttl = a->presence == SESSION_PRESENCE_PRESENT ? PRESENT_TTL_S : ANSWER_TTL_S;
        if (now - a->at <= ttl) {
            *message = a->message;
            return a->presence;
        }
        strmap_remove(b->answers, tag);
        answer_free(a);
        a = NULL;
    }
    if (!ask)
        return SESSION_PRESENCE_NONE;
    if (a) {
        session_waiters_add(&a->w, waiter);
        return SESSION_PRESENCE_NONE;
    }
    if (strmap_len(b->answers) >= TABLE_MAX)
        sweep_answers(b, now);
    if (!(a = calloc(1, sizeof(*a))))
        return SESSION_PRESENCE_NONE;
    a->b = b;
    snprintf(a->tag, sizeof(a->tag), "%s", tag);
    a->in_flight = 1;
    if (strmap_put(b->answers, a->tag, a) < 0) {
        free(a);
        return SESSION_PRESENCE_NONE;
    }
    session_waiters_add(&a->w, waiter);
    if (!b->cfg->build_push_secret) {
        start_check(a, NULL, 0);
        return SESSION_PRESENCE_NONE;
    }
    /* The Secret is read for every question, so a fixed password takes effect at once. */
    struct kube_ref ref = {.version = "v1",
                           .resource = "secrets",
                           .namespace = b->cfg->build_namespace,
                           .name = b->cfg->build_push_secret};
    struct telo_err err;
    a->secret_call = kube_rest_get(b->t, &ref, on_secret, a, &err);
    if (!a->secret_call)
        answered(a, SESSION_PRESENCE_UNKNOWN, err.msg);
    return SESSION_PRESENCE_NONE;
}

/* --- the failed build's log -------------------------------------------------------------- */

enum session_build_log session_builds_log(struct session_builds *b, const char *job_name,
                                          const char *job_uid, const char *waiter, int ask,
                                          const char **tail)
{
    return session_build_logs_get(b->logs, job_name, job_uid, waiter, ask, tail);
}

/* --- base-image freshness ---------------------------------------------------------------- */

void session_builds_base_digest(struct session_builds *b, const char *image, const char *waiter,
                                int ask, struct session_base_digest *out)
{
    session_base_lookups_get(b->base, image, waiter, ask, out);
}

/* --- running builds' progress ------------------------------------------------------------ */

void session_builds_progress(struct session_builds *b, const struct json_object *job,
                             const char *waiter, int ask, struct build_step *out)
{
    session_build_progress_get(b->progress, job, waiter, ask, out);
}

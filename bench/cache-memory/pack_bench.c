/* The informer cache's compressed objects (pkg/cache/pack.c) measured without a cluster: N objects
 * shaped like the session reconciler's cached TeloSessions, pods and Secrets (their projections in
 * pkg/session/informers.c), put into a store as the reflector does, then each read back.
 *
 *   build/bench/pack_bench [N]     N objects of each kind, default 10000
 *
 * For each kind, in a child process of its own (so that one kind's freed memory does not hide the
 * next one's growth): the JSON text and stored bytes per object, the store's own estimate, the
 * growth of VmRSS, microseconds per cache_store_put and per cache_object_parse next to a plain
 * json_tokener_parse of the same text. Then the three kinds in one process, as the operator holds
 * them, and the levels of zlib on the session texts. Times are per object, CLOCK_MONOTONIC around
 * each call; the objects are built outside the timed calls. */
#include "cache/pack.h"
#include "cache/store.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum kind { SESSION, POD, SECRET, NKINDS };
static const char *const kind_names[] = {"TeloSession", "pod", "Secret"};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* Per-object values that differ as the API server's do: random UIDs, IPs, times. */
struct vary {
    char uid[40], owner_uid[40], rv[16], created[32], started[32], ip[24], hash[12];
    char container_id[72]; /* random */
    char digest[72];       /* one of four images */
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void uuid(uint64_t *s, char *out)
{
    uint64_t a = rnd(s), b = rnd(s);
    snprintf(out, 40, "%08x-%04x-4%03x-a%03x-%012llx", (unsigned)a, (unsigned)(a >> 32) & 0xffff,
             (unsigned)(a >> 48) & 0xfff, (unsigned)b & 0xfff,
             (unsigned long long)(b >> 16) & 0xffffffffffffULL);
}

static void hex64(uint64_t *s, char *out)
{
    for (int j = 0; j < 4; j++)
        snprintf(out + 16 * j, 17, "%016llx", (unsigned long long)rnd(s));
}

static void vary(int i, struct vary *v)
{
    uint64_t image = 0x51ed270b27ULL * (uint64_t)(i % 4 + 1);
    hex64(&image, v->digest);
    uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
    hex64(&s, v->container_id);
    uuid(&s, v->uid);
    uuid(&s, v->owner_uid);
    snprintf(v->rv, sizeof(v->rv), "%d", 4000000 + i * 7 + (int)(rnd(&s) % 7));
    int sec = i * 3 + (int)(rnd(&s) % 60);
    snprintf(v->created, sizeof(v->created), "2026-12-0%dT%02d:%02d:%02dZ", 1 + (sec / 86400) % 9,
             (sec / 3600) % 24, (sec / 60) % 60, sec % 60);
    sec += 2 + (int)(rnd(&s) % 20);
    snprintf(v->started, sizeof(v->started), "2026-12-0%dT%02d:%02d:%02dZ", 1 + (sec / 86400) % 9,
             (sec / 3600) % 24, (sec / 60) % 60, sec % 60);
    snprintf(v->ip, sizeof(v->ip), "10.244.%d.%d", (i / 250) % 256, 2 + i % 250);
    snprintf(v->hash, sizeof(v->hash), "%08llx", (unsigned long long)rnd(&s) & 0xffffffffULL);
}

#define SESSION_LABELS                                                                             \
    "\"app.kubernetes.io/managed-by\":\"telo-operator\",\"telo.run/session\":\"sess-%d\""

/* A Running TeloSession: metadata.labels, creationTimestamp, spec, status. */
static int session_text(int i, char *out, size_t len)
{
    struct vary v;
    vary(i, &v);
    static const char *const conds[] = {"Admitted", "ImageReady", "PodReady", "Ready"};
    char status_conds[1200] = "";
    size_t used = 0;
    for (int c = 0; c < 4; c++)
        used += (size_t)snprintf(
            status_conds + used, sizeof(status_conds) - used,
            "%s{\"type\":\"%s\",\"status\":\"True\",\"reason\":\"%s\",\"message\":\"%s\","
            "\"lastTransitionTime\":\"%s\",\"observedGeneration\":1}",
            c ? "," : "", conds[c], c == 3 ? "SessionReady" : "Done",
            c == 0   ? "admitted by the session limits of namespace team-a"
            : c == 1 ? "image registry.example.com/telo/app@sha256 is built"
            : c == 2 ? "pod is running and its readiness probe passes"
                     : "the session answers on its ports",
            c < 2 ? v.created : v.started);
    return snprintf(
        out, len,
        "{\"apiVersion\":\"telo.run/v1alpha1\",\"kind\":\"TeloSession\",\"metadata\":{\"name\":"
        "\"sess-%d\",\"namespace\":\"team-a\",\"uid\":\"%s\",\"resourceVersion\":\"%s\","
        "\"generation\":1,\"labels\":{\"app.kubernetes.io/managed-by\":\"telo-operator\","
        "\"team\":\"a\"},\"creationTimestamp\":\"%s\"},\"spec\":{\"entry\":\"python3 main.py\","
        "\"bundle\":{\"configMap\":{\"name\":\"bundle-sess-%d\"}},\"ports\":[{\"name\":\"http\","
        "\"port\":8080,\"protocol\":\"TCP\"}],\"resources\":{\"requests\":{\"cpu\":\"100m\","
        "\"memory\":\"128Mi\"},\"limits\":{\"cpu\":\"1\",\"memory\":\"512Mi\"}}},\"status\":{"
        "\"phase\":\"Running\",\"conditions\":[%s],\"observedGeneration\":1,\"attach\":{\"url\":"
        "\"wss://gateway.telo.example.com/attach/team-a/sess-%d\",\"secretName\":"
        "\"sess-%d-attach-%s\"},\"endpoints\":[{\"name\":\"http\",\"url\":"
        "\"https://sess-%d.team-a.telo.example.com/\"}],\"image\":{\"ref\":"
        "\"registry.example.com/telo/python@sha256:%s\",\"tag\":\"py-%s\"},\"podName\":"
        "\"sess-%d\",\"progress\":{\"step\":5,\"steps\":5,\"message\":\"running\"}}}",
        i, v.uid, v.rv, v.created, i, status_conds, i, i, v.hash, i, v.digest, v.hash, i);
}

/* A session's Running pod: the pod projection's labels, creationTimestamp and status. */
static int pod_text(int i, char *out, size_t len)
{
    struct vary v;
    vary(i, &v);
    return snprintf(
        out, len,
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"sess-%d\",\"namespace\":"
        "\"team-a\",\"uid\":\"%s\",\"resourceVersion\":\"%s\",\"ownerReferences\":[{\"uid\":"
        "\"%s\",\"kind\":\"TeloSession\",\"name\":\"sess-%d\",\"controller\":true}],\"labels\":"
        "{" SESSION_LABELS ",\"telo.run/spec-hash\":\"%s\"},\"creationTimestamp\":\"%s\"},"
        "\"status\":{\"phase\":\"Running\",\"podIP\":\"%s\",\"startTime\":\"%s\",\"conditions\":"
        "[{\"type\":\"PodReadyToStartContainers\",\"status\":\"True\"},{\"type\":\"Initialized\","
        "\"status\":\"True\"},{\"type\":\"Ready\",\"status\":\"True\"},{\"type\":"
        "\"ContainersReady\",\"status\":\"True\"},{\"type\":\"PodScheduled\",\"status\":\"True\"}]"
        ",\"initContainerStatuses\":[{\"name\":\"fetch-bundle\",\"state\":{\"terminated\":{"
        "\"exitCode\":0,\"reason\":\"Completed\",\"startedAt\":\"%s\",\"finishedAt\":\"%s\","
        "\"containerID\":\"containerd://%s\"}},\"lastState\":{}}],"
        "\"containerStatuses\":[{\"name\":\"session\",\"state\":{\"running\":{\"startedAt\":\"%s\""
        "}},\"lastState\":{}}]}}",
        i, v.uid, v.rv, v.owner_uid, i, i, v.hash, v.created, v.ip, v.started, v.started, v.started,
        v.container_id, v.started);
}

/* A session's attach Secret: its projection keeps the labels only (the data is not cached). */
static int secret_text(int i, char *out, size_t len)
{
    struct vary v;
    vary(i, &v);
    return snprintf(
        out, len,
        "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
        "\"sess-%d-attach-%s\",\"namespace\":\"team-a\",\"uid\":\"%s\","
        "\"resourceVersion\":\"%s\",\"ownerReferences\":[{\"uid\":\"%s\",\"kind\":"
        "\"TeloSession\",\"name\":\"sess-%d\",\"controller\":true}],\"labels\":{" SESSION_LABELS
        ",\"telo.run/attach\":\"true\",\"telo.run/spec-hash\":\"%s\",\"app.kubernetes.io/"
        "name\":\"telo-session\",\"app.kubernetes.io/instance\":\"sess-%d\",\"app.kubernetes."
        "io/component\":\"attach\",\"telo.run/created-at\":\"%s\"}}}",
        i, v.hash, v.uid, v.rv, v.owner_uid, i, i, v.hash, i, v.created);
}

static struct json_object *make(enum kind k, int i)
{
    char text[8192];
    int n = k == SESSION ? session_text(i, text, sizeof(text))
            : k == POD   ? pod_text(i, text, sizeof(text))
                         : secret_text(i, text, sizeof(text));
    struct json_object *o = n > 0 && (size_t)n < sizeof(text) ? json_tokener_parse(text) : NULL;
    if (!o) {
        fprintf(stderr, "pack_bench: %s %d does not parse\n", kind_names[k], i);
        exit(1);
    }
    return o;
}

/* The indexes the operator gives each kind (pkg/session/informers.c): sessions by namespace,
 * children none. */
static struct cache_store *new_store(enum kind k)
{
    static const struct cache_index_def ns[] = {{"namespace", cache_index_namespace, NULL}};
    struct cache_store *s = cache_store_new(ns, k == SESSION ? 1 : 0);
    if (!s) {
        fprintf(stderr, "pack_bench: out of memory\n");
        exit(1);
    }
    return s;
}

static double put_all(struct cache_store *s, enum kind k, int n)
{
    double us = 0;
    for (int i = 0; i < n; i++) {
        struct json_object *o = make(k, i);
        struct cache_object *replaced = NULL;
        double t0 = now_us();
        int rc = cache_store_put(s, o, &replaced, NULL, NULL);
        us += now_us() - t0;
        if (rc < 0) {
            fprintf(stderr, "pack_bench: put failed: %d\n", rc);
            exit(1);
        }
        cache_object_free(replaced);
        json_object_put(o);
    }
    return us / n;
}

static void key_of(enum kind k, int i, char *key, size_t len)
{
    struct vary v;
    vary(i, &v);
    if (k == SECRET)
        snprintf(key, len, "team-a/sess-%d-attach-%s", i, v.hash);
    else
        snprintf(key, len, "team-a/sess-%d", i);
}

static void one_kind(enum kind k, int n)
{
    long rss0 = rss_kib();
    struct cache_store *s = new_store(k);
    double put_us = put_all(s, k, n);
    long rss1 = rss_kib();
    size_t text = 0, stored = 0;
    double parse_us = 0, plain_us = 0;
    for (int i = 0; i < n; i++) {
        char key[128];
        key_of(k, i, key, sizeof(key));
        const struct cache_object *co = cache_store_get(s, key);
        if (!co) {
            fprintf(stderr, "pack_bench: %s missing\n", key);
            exit(1);
        }
        text += co->json_len;
        stored += co->stored_len;
        double t0 = now_us();
        struct json_object *a = cache_object_parse(co);
        parse_us += now_us() - t0;
        /* The same text, as the store held it before it compressed. */
        char *raw = strdup(json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN |
                                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
        t0 = now_us();
        struct json_object *b = json_tokener_parse(raw);
        plain_us += now_us() - t0;
        if (!a || !b || strlen(raw) != co->json_len) {
            fprintf(stderr, "pack_bench: %s does not read back\n", key);
            exit(1);
        }
        free(raw);
        json_object_put(a);
        json_object_put(b);
    }
    printf("%-11s text %5.0f B  stored %4.0f B (%4.1f %%)  store estimate %5.0f B  RSS growth "
           "%5.0f B  put %5.2f us  parse %5.2f us (plain json_tokener_parse %5.2f us)\n",
           kind_names[k], (double)text / n, (double)stored / n, 100.0 * (double)stored / text,
           (double)cache_store_bytes(s) / n, (double)(rss1 - rss0) * 1024 / n, put_us, parse_us / n,
           plain_us / n);
    cache_store_free(s);
}

static void all_kinds(int n)
{
    long rss0 = rss_kib();
    struct cache_store *s[NKINDS];
    size_t bytes = 0;
    for (int k = 0; k < NKINDS; k++) {
        s[k] = new_store((enum kind)k);
        (void)put_all(s[k], (enum kind)k, n);
        bytes += cache_store_bytes(s[k]);
    }
    printf("all three   store estimates %.2f MiB  RSS growth %.2f MiB (%ld KiB before)\n",
           (double)bytes / 1048576, (double)(rss_kib() - rss0) / 1024, rss0);
    for (int k = 0; k < NKINDS; k++)
        cache_store_free(s[k]);
}

/* zlib's levels on the session texts, through the pack alone: the fastest of 3 passes. */
static void levels(int n)
{
    char **texts = calloc((size_t)n, sizeof(*texts));
    for (int i = 0; texts && i < n; i++) {
        struct json_object *o = make(SESSION, i);
        texts[i] = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
        if (!texts[i])
            exit(1);
    }
    static const int tried[] = {1, 3, 6};
    for (size_t l = 0; texts && l < sizeof(tried) / sizeof(tried[0]); l++) {
        struct cache_pack *p = cache_pack_new(tried[l]);
        size_t text = 0, stored = 0;
        double best = 0;
        for (int pass = 0; p && pass < 3; pass++) {
            double t0 = now_us();
            for (int i = 0; i < n; i++) {
                size_t len = strlen(texts[i]);
                const unsigned char *out;
                size_t out_len;
                if (cache_pack_deflate(p, texts[i], len, &out, &out_len, NULL) < 0)
                    exit(1);
                text += len;
                stored += out_len;
            }
            double us = (now_us() - t0) / n;
            best = pass == 0 || us < best ? us : best;
        }
        printf("level %d     TeloSession stored %4.0f B (%4.1f %%)  deflate %5.2f us\n", tried[l],
               (double)stored / (3.0 * n), 100.0 * (double)stored / text, best);
        cache_pack_free(p);
    }
    for (int i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
}

/* Runs fn(n) in a child process: each starts from the same fresh heap. */
static void isolated(void (*fn)(int), int n)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fn(n);
        fflush(stdout);
        _exit(0);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "pack_bench: a run failed\n");
        exit(1);
    }
}

static void session_kind(int n)
{
    one_kind(SESSION, n);
}
static void pod_kind(int n)
{
    one_kind(POD, n);
}
static void secret_kind(int n)
{
    one_kind(SECRET, n);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    if (n <= 0) {
        fprintf(stderr, "usage: pack_bench [N]\n");
        return 2;
    }
    isolated(session_kind, n);
    isolated(pod_kind, n);
    isolated(secret_kind, n);
    isolated(all_kinds, n);
    levels(n);
    return 0;
}

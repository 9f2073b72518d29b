/* Microbenchmark of the attach client (pkg/kube/attach.c) alone, without a cluster: CPU seconds
 * the client spends per 100 MB of output flood, what the gateway's upstream and kubectl telo do
 * when a session floods its terminal.
 *
 * A child process plays the API server on loopback: it answers the WebSocket upgrade with 101 (v5)
 * and writes MB megabytes of stdout as binary frames of FRAME payload bytes (channel byte
 * included), then a close frame. The parent runs kube_attach on a libev loop, counts the output
 * bytes and measures its own user+system CPU (getrusage) and wall time from the upgrade to the
 * end. With --tls CERT KEY the server speaks TLS (the client skips verification), as the API
 * server does.
 *
 * Build against a libtelo.a (any tree: the old libwebsockets client, commit 082b20f and before,
 * also needs libwebsockets on the line):
 *   cc -O2 -D_GNU_SOURCE -I pkg bench/gateway/attach_flood.c build/libtelo.a -o /tmp/attach_flood \
 *      $(pkg-config --libs openssl json-c yaml-0.1 libcurl libarchive) -lev -lm
 * Run:
 *   /tmp/attach_flood [--mb 200] [--frame 16384] [--tls cert.pem key.pem]
 * Prints: mb, frame, tls, client cpu s, cpu s per 100 MB, wall s, MB/s. With --echo N instead:
 * N keystrokes, one at a time, each written when the previous one's echo came back (the server
 * echoes every stdin message on stdout): round trip p50 and p99 in microseconds and the client's
 * CPU per keystroke (both processes on one machine: the loopback round trip, not a network's). */
#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kube/attach.h"
#include "kube/channel.h"
#include "ws/frame.h"

static long long total_mb = 200;
static int echo_n; /* --echo N: keystroke round trips instead of a flood */
static size_t frame_payload = 16384;
static const char *cert, *key;

/* ---- the server (child) ---- */

static SSL *ssl;

static int srv_write(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = ssl ? SSL_write(ssl, c, (int)n) : write(fd, c, n);
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static void serve(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        _exit(1);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (cert != NULL) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
            _exit(2);
        ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) != 1)
            _exit(3);
    }
    char head[16384];
    size_t len = 0;
    while (len < sizeof(head) - 1) {
        ssize_t n = ssl ? SSL_read(ssl, head + len, (int)(sizeof(head) - 1 - len))
                        : read(fd, head + len, sizeof(head) - 1 - len);
        if (n <= 0)
            _exit(4);
        len += (size_t)n;
        head[len] = '\0';
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    char *k = strcasestr(head, "Sec-WebSocket-Key:");
    if (k == NULL)
        _exit(5);
    k += strlen("Sec-WebSocket-Key:");
    while (*k == ' ')
        k++;
    char nonce[25];
    memcpy(nonce, k, 24);
    nonce[24] = '\0';
    char accept_key[WS_ACCEPT_KEY_SIZE];
    if (ws_accept_key(nonce, accept_key) != 0)
        _exit(6);
    char resp[512];
    int rn = snprintf(resp, sizeof(resp),
                      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
                      "Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: "
                      "v5.channel.k8s.io\r\n\r\n",
                      accept_key);
    if (srv_write(fd, resp, (size_t)rn) != 0)
        _exit(7);
    if (echo_n > 0) {
        /* Echo mode: every stdin message comes back as stdout, as a TTY's echo. */
        static uint8_t in[65536];
        size_t have = 0;
        for (;;) {
            ssize_t n = ssl ? SSL_read(ssl, in + have, (int)(sizeof(in) - have))
                            : read(fd, in + have, sizeof(in) - have);
            if (n <= 0)
                _exit(0);
            have += (size_t)n;
            size_t pos = 0;
            for (;;) {
                struct ws_frame f;
                size_t used = 0;
                struct telo_err ferr;
                if (ws_frame_parse(in + pos, have - pos, sizeof(in), 1, &f, &used, &ferr) != 0)
                    _exit(9);
                if (used == 0)
                    break;
                pos += used;
                if (f.opcode == WS_OP_BINARY && f.payload_len > 1 &&
                    f.payload[0] == KUBE_CHANNEL_STDIN) {
                    uint8_t out[WS_MAX_HEADER + 1024];
                    size_t hl = ws_frame_header(out, WS_OP_BINARY, 1, f.payload_len, NULL);
                    if (f.payload_len > 1000)
                        _exit(10);
                    out[hl] = KUBE_CHANNEL_STDOUT;
                    memcpy(out + hl + 1, f.payload + 1, f.payload_len - 1);
                    if (srv_write(fd, out, hl + f.payload_len) != 0)
                        _exit(0);
                }
            }
            memmove(in, in + pos, have - pos);
            have -= pos;
        }
    }
    /* Frames prebuilt in one buffer of about 1 MiB, written again and again. */
    uint8_t hdr[WS_MAX_HEADER];
    size_t hl = ws_frame_header(hdr, WS_OP_BINARY, 1, frame_payload, NULL);
    size_t flen = hl + frame_payload;
    size_t per = ((size_t)1 << 20) / flen + 1;
    uint8_t *block = malloc(per * flen);
    for (size_t i = 0; i < per; i++) {
        uint8_t *f = block + i * flen;
        memcpy(f, hdr, hl);
        f[hl] = KUBE_CHANNEL_STDOUT;
        memset(f + hl + 1, 'x', frame_payload - 1);
    }
    long long want = total_mb * 1000000LL, sent = 0;
    while (sent < want) {
        if (srv_write(fd, block, per * flen) != 0)
            _exit(8);
        sent += (long long)(per * (frame_payload - 1));
    }
    static const uint8_t close_frame[] = {0x88, 0x02, 0x03, 0xE8};
    srv_write(fd, close_frame, sizeof(close_frame));
    char sink[256];
    while ((ssl ? SSL_read(ssl, sink, sizeof(sink)) : read(fd, sink, sizeof(sink))) > 0) {
    }
    _exit(0);
}

/* ---- the client (parent) ---- */

static long long received;
static int ended, opened;
static struct rusage ru0;
static double t0;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu(const struct rusage *r)
{
    return r->ru_utime.tv_sec + r->ru_utime.tv_usec / 1e6 + r->ru_stime.tv_sec +
           r->ru_stime.tv_usec / 1e6;
}

static double *rtts;
static int nrtt;
static double sent_at;

static void on_open(struct kube_attach *a, const char *protocol, void *ud)
{
    (void)protocol;
    (void)ud;
    opened = 1;
    getrusage(RUSAGE_SELF, &ru0);
    t0 = now();
    if (echo_n > 0) {
        sent_at = now();
        kube_attach_write(a, "k", 1);
    }
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void on_output(struct kube_attach *a, int channel, const unsigned char *data, size_t len,
                      void *ud)
{
    (void)channel;
    (void)data;
    (void)ud;
    received += (long long)len;
    if (echo_n > 0) {
        rtts[nrtt++] = now() - sent_at;
        if (nrtt == echo_n) {
            ended = 1;
            return;
        }
        sent_at = now();
        kube_attach_write(a, "k", 1);
    }
}

static void on_end(struct kube_attach *a, const struct kube_attach_end *end, void *ud)
{
    (void)a;
    (void)ud;
    if (end->rc != 0)
        fprintf(stderr, "attach_flood: %s\n", end->err ? end->err->msg : "failed");
    ended = 1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            total_mb = atoll(argv[++i]);
        else if (strcmp(argv[i], "--echo") == 0 && i + 1 < argc)
            echo_n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--frame") == 0 && i + 1 < argc)
            frame_payload = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--tls") == 0 && i + 2 < argc) {
            cert = argv[++i];
            key = argv[++i];
        } else {
            fprintf(stderr,
                    "usage: attach_flood [--mb N] [--frame BYTES] [--echo N] [--tls CERT KEY]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (echo_n > 0 && (rtts = calloc((size_t)echo_n, sizeof(*rtts))) == NULL)
        return 1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0)
        serve(lfd);
    close(lfd);

    struct ev_loop *loop = ev_default_loop(0);
    char url[128];
    snprintf(url, sizeof(url), "%s://127.0.0.1:%d/api/v1/namespaces/n/pods/p/attach?stdout=true",
             cert ? "https" : "http", ntohs(sa.sin_port));
    struct kube_attach_opts opts = {.url = url, .token = "t", .insecure_skip_tls_verify = 1};
    struct kube_attach_callbacks cb = {on_open, on_output, on_end};
    struct telo_err err;
    struct kube_attach *a = kube_attach_open(loop, &opts, &cb, NULL, &err);
    if (a == NULL) {
        fprintf(stderr, "attach_flood: %s\n", err.msg);
        return 1;
    }
    while (!ended)
        ev_run(loop, EVRUN_ONCE);
    struct rusage ru1;
    getrusage(RUSAGE_SELF, &ru1);
    double wall = now() - t0;
    kube_attach_free(a);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    double c = cpu(&ru1) - cpu(&ru0);
    if (echo_n > 0) {
        qsort(rtts, (size_t)nrtt, sizeof(*rtts), cmp_double);
        printf("keystrokes=%d tls=%d p50_us=%.1f p99_us=%.1f cpu_us_per_keystroke=%.1f\n", nrtt,
               cert != NULL, nrtt ? rtts[nrtt / 2] * 1e6 : 0,
               nrtt ? rtts[(nrtt * 99) / 100] * 1e6 : 0, nrtt ? c * 1e6 / nrtt : 0);
        return nrtt == echo_n ? 0 : 1;
    }
    double mb = received / 1e6;
    printf("mb=%.1f frame=%zu tls=%d cpu_s=%.3f cpu_s_per_100MB=%.3f wall_s=%.3f MB_per_s=%.1f\n",
           mb, frame_payload, cert != NULL, c, mb > 0 ? c * 100 / mb : 0, wall,
           wall > 0 ? mb / wall : 0);
    return opened && mb >= total_mb * 0.99 ? 0 : 1;
}

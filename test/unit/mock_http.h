/* A scripted HTTP/1.1 server in a child process, for transport and watch tests (header-only). */
#ifndef TELO_TEST_MOCK_HTTP_H
#define TELO_TEST_MOCK_HTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct mock_req {
    char method[16];
    char path[1024];
    char headers[8192];
    char body[65536];
    size_t body_len;
    int hit; /* 1 for the first request to this method+path, 2 for the second, ... */
};

/* Answers one request on fd; the connection is closed afterwards. */
typedef void mock_route_fn(int fd, const struct mock_req *req);

struct mock_server {
    pid_t pid;
    int port;
};

static void mock_write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n <= 0)
            return;
        data += n;
        len -= (size_t)n;
    }
}

/* Sends a complete response with Content-Length and Connection: close. */
static void mock_reply(int fd, int code, const char *extra_headers, const char *body)
{
    char head[2048];
    size_t blen = body != NULL ? strlen(body) : 0;
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s\r\n",
                     code, blen, extra_headers != NULL ? extra_headers : "");
    mock_write_all(fd, head, (size_t)n);
    if (blen > 0)
        mock_write_all(fd, body, blen);
}

/* Starts a streamed (close-delimited) 200 response; write the body with mock_write_all. */
static void mock_stream_start(int fd, int code)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
                     code);
    mock_write_all(fd, head, (size_t)n);
}

static int mock_read_request(int fd, struct mock_req *r)
{
    char buf[80000];
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len >= sizeof(buf) - 1)
            return -1;
        ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    size_t head_len = (size_t)(end - buf) + 4;
    if (sscanf(buf, "%15s %1023s", r->method, r->path) != 2)
        return -1;
    snprintf(r->headers, sizeof(r->headers), "%.*s", (int)head_len, buf);
    size_t clen = 0;
    const char *cl = strstr(r->headers, "\r\nContent-Length:");
    if (cl != NULL)
        clen = (size_t)strtoul(cl + 17, NULL, 10);
    if (clen >= sizeof(r->body))
        return -1;
    size_t have = len - head_len;
    memcpy(r->body, buf + head_len, have < clen ? have : clen);
    while (have < clen) {
        ssize_t n = read(fd, r->body + have, clen - have);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    r->body[clen] = '\0';
    r->body_len = clen;
    return 0;
}

static void mock_serve(int lfd, mock_route_fn *route)
{
    static char seen[256][1040];
    static int counts[256];
    int nseen = 0;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        static struct mock_req r;
        memset(&r, 0, sizeof(r));
        if (mock_read_request(fd, &r) == 0) {
            char key[1040];
            snprintf(key, sizeof(key), "%s %s", r.method, r.path);
            int i;
            for (i = 0; i < nseen && strcmp(seen[i], key) != 0; i++)
                ;
            if (i == nseen && nseen < 256)
                snprintf(seen[nseen++], sizeof(seen[0]), "%s", key);
            r.hit = i < 256 ? ++counts[i] : 1;
            route(fd, &r);
        }
        close(fd);
    }
}

/* Forks a server on 127.0.0.1 (any free port). Returns 0 or -1. */
static int mock_start(struct mock_server *m, mock_route_fn *route)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (lfd < 0)
        return -1;
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
        goto fail;
    m->port = ntohs(a.sin_port);
    fflush(NULL);
    m->pid = fork();
    if (m->pid < 0)
        goto fail;
    if (m->pid == 0) {
        /* A test that fails skips its mock_stop: the server must not outlive it (it would hold
         * the test's output open, and a pipe reading it would never end). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_IGN);
        mock_serve(lfd, route);
        _exit(0);
    }
    close(lfd);
    return 0;
fail:
    close(lfd);
    return -1;
}

static void mock_stop(struct mock_server *m)
{
    if (m->pid > 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, NULL, 0);
        m->pid = 0;
    }
}

/* Writes a kubeconfig for http://127.0.0.1:port authenticating with token_file into path. */
static int mock_kubeconfig(const char *path, int port, const char *token_file)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
            "users:\n- name: u\n  user:\n    tokenFile: %s\n"
            "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n    namespace: ns\n"
            "current-context: x\n",
            port, token_file);
    fclose(f);
    return 0;
}

#endif

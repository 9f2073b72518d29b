/* API discovery: resolves kinds and resource names to group/version/resource, cached per client. */
#include "kube/discovery.h"

#include "kube/rest.h"
#include "util/jget.h"

#include <json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Discovery documents are small; a cluster with many CRDs has /apis of a few hundred KiB. */
#define DISCOVERY_MAX_BODY ((size_t)8 << 20)

enum fetch_state { FETCH_NONE, FETCH_RUNNING, FETCH_READY, FETCH_FAILED };

struct res_entry {
    struct kube_api_resource pub;
    char *singular;
    char **short_names;
    size_t nshort;
};

struct gv_entry {
    struct gv_entry *next;
    char *gv; /* "v1" or "apps/v1" */
    char *group, *version;
    enum fetch_state state;
    long fail_code; /* HTTP code of a failed fetch (404: the group-version does not exist) */
    struct res_entry *res;
    size_t nres;
    struct telo_err err; /* when FAILED */
};

enum lookup_mode { LOOKUP_KIND, LOOKUP_NAME };

struct lookup {
    struct lookup *next;
    enum lookup_mode mode;
    char *word;  /* kind, or the resource part of a name */
    char *group; /* NULL: any group (name mode only) */
    char *version;
    kube_resolve_fn *cb;
    void *ud;
};

struct kube_discovery {
    struct kube_transport *t;
    struct gv_entry *gvs;
    enum fetch_state groups_state;
    struct telo_err groups_err;
    char **preferred; /* "apps/v1", in /apis order */
    size_t npreferred;
    struct lookup *lookups;
    struct kube_call **calls; /* in flight, cancelled on free */
    size_t ncalls, calls_cap;
};

void kube_split_api_version(const char *api_version, char *group, size_t group_len, char *version,
                            size_t version_len)
{
    const char *slash = strchr(api_version, '/');
    if (slash == NULL) {
        snprintf(group, group_len, "%s", "");
        snprintf(version, version_len, "%s", api_version);
    } else {
        snprintf(group, group_len, "%.*s", (int)(slash - api_version), api_version);
        snprintf(version, version_len, "%s", slash + 1);
    }
}

static void gv_free(struct gv_entry *g)
{
    for (size_t i = 0; i < g->nres; i++) {
        struct res_entry *r = &g->res[i];
        free((char *)r->pub.resource);
        free((char *)r->pub.kind);
        free(r->singular);
        for (size_t j = 0; j < r->nshort; j++)
            free(r->short_names[j]);
        free(r->short_names);
    }
    free(g->res);
    free(g->gv);
    free(g->group);
    free(g->version);
    free(g);
}

static void lookup_free(struct lookup *l)
{
    free(l->word);
    free(l->group);
    free(l->version);
    free(l);
}

struct kube_discovery *kube_discovery_new(struct kube_transport *t)
{
    struct kube_discovery *d = calloc(1, sizeof(*d));
    if (d != NULL)
        d->t = t;
    return d;
}

void kube_discovery_free(struct kube_discovery *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->ncalls; i++)
        kube_call_cancel(d->calls[i]);
    free(d->calls);
    while (d->gvs != NULL) {
        struct gv_entry *g = d->gvs;
        d->gvs = g->next;
        gv_free(g);
    }
    while (d->lookups != NULL) {
        struct lookup *l = d->lookups;
        d->lookups = l->next;
        lookup_free(l);
    }
    for (size_t i = 0; i < d->npreferred; i++)
        free(d->preferred[i]);
    free(d->preferred);
    free(d);
}

static void track_call(struct kube_discovery *d, struct kube_call *c)
{
    if (d->ncalls == d->calls_cap) {
        size_t cap = d->calls_cap ? d->calls_cap * 2 : 8;
        struct kube_call **n = realloc(d->calls, cap * sizeof(struct kube_call *));
        if (n == NULL)
            return; /* only costs the cancel-on-free of this call */
        d->calls = n;
        d->calls_cap = cap;
    }
    d->calls[d->ncalls++] = c;
}

static void untrack_call(struct kube_discovery *d, struct kube_call *c)
{
    for (size_t i = 0; i < d->ncalls; i++) {
        if (d->calls[i] == c) {
            d->calls[i] = d->calls[--d->ncalls];
            return;
        }
    }
}

static void pump(struct kube_discovery *d);

struct fetch_ctx {
    struct kube_discovery *d;
    struct gv_entry *gv; /* NULL for /apis */
};

static int parse_resource_list(struct gv_entry *g, struct json_object *obj)
{
    struct json_object *arr = jget_array(obj, "resources");
    if (!arr)
        return -TELO_EPROTO;
    size_t n = json_object_array_length(arr);
    g->res = calloc(n > 0 ? n : 1, sizeof(*g->res));
    if (g->res == NULL)
        return -TELO_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        struct json_object *it = json_object_array_get_idx(arr, i);
        const char *name = jget_string(it, "name");
        const char *kind = jget_string(it, "kind");
        if (name == NULL || kind == NULL)
            continue;
        struct res_entry *r = &g->res[g->nres];
        r->pub.group = g->group;
        r->pub.version = g->version;
        r->pub.resource = strdup(name);
        r->pub.kind = strdup(kind);
        int namespaced = 0;
        r->pub.namespaced = jget_bool(it, "namespaced", &namespaced) == 0 && namespaced;
        const char *singular = jget_string(it, "singularName");
        r->singular = strdup(singular != NULL ? singular : "");
        struct json_object *shorts = jget_array(it, "shortNames");
        if (shorts) {
            size_t ns_n = json_object_array_length(shorts);
            r->short_names = calloc(ns_n > 0 ? ns_n : 1, sizeof(char *));
            for (size_t j = 0; r->short_names != NULL && j < ns_n; j++) {
                const char *s = jget_string_of(json_object_array_get_idx(shorts, j));
                r->short_names[r->nshort] = strdup(s != NULL ? s : "");
                if (r->short_names[r->nshort] != NULL)
                    r->nshort++;
            }
        }
        g->nres++;
        if (r->pub.resource == NULL || r->pub.kind == NULL || r->singular == NULL)
            return -TELO_ENOMEM;
    }
    return 0;
}

static int parse_group_list(struct kube_discovery *d, struct json_object *obj)
{
    struct json_object *arr = jget_array(obj, "groups");
    if (!arr)
        return -TELO_EPROTO;
    size_t n = json_object_array_length(arr);
    d->preferred = calloc(n > 0 ? n : 1, sizeof(char *));
    if (d->preferred == NULL)
        return -TELO_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *gv = jget_string(
            jget_object(json_object_array_get_idx(arr, i), "preferredVersion"), "groupVersion");
        if (gv == NULL)
            continue;
        d->preferred[d->npreferred] = strdup(gv);
        if (d->preferred[d->npreferred] == NULL)
            return -TELO_ENOMEM;
        d->npreferred++;
    }
    return 0;
}

static void on_fetched(const struct kube_result *res, void *ud)
{
    struct fetch_ctx *ctx = ud;
    struct kube_discovery *d = ctx->d;
    struct gv_entry *g = ctx->gv;
    free(ctx);
    int rc = res->rc;
    if (g != NULL) {
        if (rc == 0 && res->object != NULL)
            rc = parse_resource_list(g, res->object);
        else if (rc == 0)
            rc = -TELO_EPROTO;
        g->state = rc == 0 ? FETCH_READY : FETCH_FAILED;
        g->fail_code = res->code;
        if (rc != 0 && res->err != NULL)
            g->err = *res->err;
        else if (rc != 0)
            telo_err_set(&g->err, -rc, "discovery of %s: malformed APIResourceList", g->gv);
    } else {
        if (rc == 0 && res->object != NULL)
            rc = parse_group_list(d, res->object);
        else if (rc == 0)
            rc = -TELO_EPROTO;
        d->groups_state = rc == 0 ? FETCH_READY : FETCH_FAILED;
        if (rc != 0 && res->err != NULL)
            d->groups_err = *res->err;
        else if (rc != 0)
            telo_err_set(&d->groups_err, -rc, "discovery: malformed APIGroupList from /apis");
    }
}

/* Wraps on_fetched so the call handle is forgotten and waiting lookups are re-evaluated. */
struct fetch_call {
    struct kube_discovery *d;
    struct kube_call *call;
    struct fetch_ctx *ctx;
};

static void on_fetch_done(const struct kube_result *res, void *ud)
{
    struct fetch_call *fc = ud;
    struct kube_discovery *d = fc->d;
    untrack_call(d, fc->call);
    on_fetched(res, fc->ctx);
    free(fc);
    pump(d);
}

static int start_fetch(struct kube_discovery *d, struct gv_entry *g, struct telo_err *err)
{
    struct fetch_ctx *ctx = calloc(1, sizeof(*ctx));
    struct fetch_call *fc = calloc(1, sizeof(*fc));
    if (ctx == NULL || fc == NULL) {
        free(ctx);
        free(fc);
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    }
    ctx->d = d;
    ctx->gv = g;
    fc->d = d;
    fc->ctx = ctx;
    const char *path = "/apis";
    char buf[512];
    if (g != NULL) {
        if (g->group[0] == '\0')
            snprintf(buf, sizeof(buf), "/api/%s", g->version);
        else
            snprintf(buf, sizeof(buf), "/apis/%s/%s", g->group, g->version);
        path = buf;
    }
    /* Discovery paths are not resource paths; the group and version come from the server or
     * the user and are used verbatim after this character check. */
    for (const char *p = path; *p != '\0'; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '/' || *p == '.' || *p == '-')) {
            free(ctx);
            free(fc);
            return telo_err_set(err, TELO_EINVAL, "'%s' is not a valid API group/version", path);
        }
    }
    fc->call = kube_rest_get_path(d->t, path, on_fetch_done, fc, err);
    if (fc->call == NULL) {
        free(ctx);
        free(fc);
        return -err->code;
    }
    track_call(d, fc->call);
    if (g != NULL)
        g->state = FETCH_RUNNING;
    else
        d->groups_state = FETCH_RUNNING;
    return 0;
}

static struct gv_entry *gv_find_or_add(struct kube_discovery *d, const char *gv)
{
    for (struct gv_entry *g = d->gvs; g != NULL; g = g->next)
        if (strcmp(g->gv, gv) == 0)
            return g;
    struct gv_entry *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    char group[256], version[128];
    kube_split_api_version(gv, group, sizeof(group), version, sizeof(version));
    g->gv = strdup(gv);
    g->group = strdup(group);
    g->version = strdup(version);
    if (g->gv == NULL || g->group == NULL || g->version == NULL) {
        gv_free(g);
        return NULL;
    }
    g->next = d->gvs;
    d->gvs = g;
    return g;
}

static int matches(const struct lookup *l, const struct res_entry *r)
{
    if (strchr(r->pub.resource, '/') != NULL)
        return 0; /* a subresource such as pods/log */
    if (l->mode == LOOKUP_KIND)
        return strcmp(r->pub.kind, l->word) == 0;
    if (strcmp(r->pub.resource, l->word) == 0 || strcmp(r->singular, l->word) == 0 ||
        strcasecmp(r->pub.kind, l->word) == 0)
        return 1;
    for (size_t i = 0; i < r->nshort; i++)
        if (strcmp(r->short_names[i], l->word) == 0)
            return 1;
    return 0;
}

/* Evaluates l. Returns 1 when it finished (callback called), 0 when it still waits. */
/* Finds or adds the group-version gv and starts fetching it if nobody has. Returns it, or NULL
 * after answering l with the error. */
static struct gv_entry *gv_start(struct kube_discovery *d, struct lookup *l, const char *gv)
{
    struct telo_err err;
    telo_err_clear(&err);
    struct gv_entry *g = gv_find_or_add(d, gv);
    if (g == NULL) {
        telo_err_set(&err, TELO_ENOMEM, "out of memory");
        l->cb(NULL, -TELO_ENOMEM, &err, l->ud);
        return NULL;
    }
    if (g->state == FETCH_NONE && start_fetch(d, g, &err) != 0) {
        l->cb(NULL, -err.code, &err, l->ud);
        return NULL;
    }
    return g;
}

/* Answers l with the resource of g (NULL or not fetched yet: none) it matches; returns 1 when
 * there was one, else 0. */
static int answer_from(const struct gv_entry *g, struct lookup *l)
{
    for (size_t j = 0; g != NULL && g->state == FETCH_READY && j < g->nres; j++)
        if (matches(l, &g->res[j])) {
            l->cb(&g->res[j].pub, 0, NULL, l->ud);
            return 1;
        }
    return 0;
}

static int evaluate(struct kube_discovery *d, struct lookup *l)
{
    struct telo_err err;
    telo_err_clear(&err);
    /* The candidate group-versions, in priority order. */
    const char *cands[512];
    size_t ncand = 0;
    char gvbuf[512];
    int need_groups = 0;
    if (l->group != NULL && l->version != NULL) {
        if (l->group[0] == '\0')
            snprintf(gvbuf, sizeof(gvbuf), "%s", l->version);
        else
            snprintf(gvbuf, sizeof(gvbuf), "%s/%s", l->group, l->version);
        cands[ncand++] = gvbuf;
    } else {
        if (l->group == NULL || l->group[0] == '\0')
            cands[ncand++] = "v1";
        need_groups = l->group == NULL || l->group[0] != '\0';
    }
    /* The core group answers most names without fetching /apis. */
    int waiting = 0;
    for (size_t i = 0; i < ncand; i++) {
        struct gv_entry *g = gv_start(d, l, cands[i]);
        if (g == NULL)
            return 1;
        if (g->state == FETCH_RUNNING)
            waiting = 1;
        if (g->state == FETCH_FAILED && g->fail_code != 404) {
            /* Unauthorized, unreachable, ...: searching further would only hide the cause. */
            l->cb(NULL, -g->err.code, &g->err, l->ud);
            return 1;
        }
        if (answer_from(g, l))
            return 1;
    }
    if (waiting)
        return 0;
    if (need_groups) {
        if (d->groups_state == FETCH_NONE && start_fetch(d, NULL, &err) != 0) {
            l->cb(NULL, -err.code, &err, l->ud);
            return 1;
        }
        if (d->groups_state == FETCH_RUNNING)
            return 0;
        if (d->groups_state == FETCH_FAILED) {
            l->cb(NULL, -d->groups_err.code, &d->groups_err, l->ud);
            return 1;
        }
        size_t start = ncand;
        for (size_t i = 0; i < d->npreferred && ncand < sizeof(cands) / sizeof(cands[0]); i++) {
            if (l->group != NULL) {
                size_t gl = strlen(l->group);
                if (strncmp(d->preferred[i], l->group, gl) != 0 || d->preferred[i][gl] != '/')
                    continue;
            }
            cands[ncand++] = d->preferred[i];
        }
        for (size_t i = start; i < ncand; i++) {
            struct gv_entry *g = gv_start(d, l, cands[i]);
            if (g == NULL)
                return 1;
            if (g->state == FETCH_RUNNING)
                waiting = 1;
        }
        if (waiting)
            return 0;
        for (size_t i = start; i < ncand; i++)
            if (answer_from(gv_find_or_add(d, cands[i]), l))
                return 1;
    }
    /* Not found: a failed fetch of a candidate explains it better than "not found". */
    for (size_t i = 0; i < ncand; i++) {
        struct gv_entry *g = gv_find_or_add(d, cands[i]);
        if (g != NULL && g->state == FETCH_FAILED && g->fail_code != 404) {
            l->cb(NULL, -g->err.code, &g->err, l->ud);
            return 1;
        }
    }
    if (l->mode == LOOKUP_KIND) {
        /* kube_discovery_resolve_kind always sets group ("" for the core group) and version. */
        int named_group = l->group != NULL && l->group[0] != '\0';
        telo_err_set(&err, TELO_ENOTFOUND,
                     "the server has no kind \"%s\" in %s%s%s (is its CRD installed?)", l->word,
                     named_group ? l->group : "", named_group ? "/" : "", l->version);
    } else {
        telo_err_set(&err, TELO_ENOTFOUND, "the server does not have a resource type \"%s\"%s%s",
                     l->word, l->group != NULL ? " in group " : "",
                     l->group != NULL ? l->group : "");
    }
    l->cb(NULL, -TELO_ENOTFOUND, &err, l->ud);
    return 1;
}

static void pump(struct kube_discovery *d)
{
    struct lookup *list = d->lookups;
    d->lookups = NULL;
    struct lookup *keep = NULL, **tail = &keep;
    while (list != NULL) {
        struct lookup *l = list;
        list = l->next;
        l->next = NULL;
        if (evaluate(d, l)) {
            lookup_free(l);
        } else {
            *tail = l;
            tail = &l->next;
        }
    }
    /* Lookups added by callbacks meanwhile go after the ones still waiting. */
    *tail = d->lookups;
    d->lookups = keep;
}

static int add_lookup(struct kube_discovery *d, enum lookup_mode mode, const char *word,
                      const char *group, const char *version, kube_resolve_fn *cb, void *ud,
                      struct telo_err *err)
{
    struct lookup *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    l->mode = mode;
    l->word = strdup(word);
    l->group = group != NULL ? strdup(group) : NULL;
    l->version = version != NULL ? strdup(version) : NULL;
    l->cb = cb;
    l->ud = ud;
    if (l->word == NULL || (group != NULL && l->group == NULL) ||
        (version != NULL && l->version == NULL)) {
        lookup_free(l);
        return telo_err_set(err, TELO_ENOMEM, "out of memory");
    }
    l->next = d->lookups;
    d->lookups = l;
    pump(d);
    return 0;
}

int kube_discovery_resolve_kind(struct kube_discovery *d, const char *api_version, const char *kind,
                                kube_resolve_fn *cb, void *ud, struct telo_err *err)
{
    if (api_version == NULL || api_version[0] == '\0' || kind == NULL || kind[0] == '\0')
        return telo_err_set(err, TELO_EINVAL, "an object needs apiVersion and kind");
    char group[256], version[128];
    kube_split_api_version(api_version, group, sizeof(group), version, sizeof(version));
    return add_lookup(d, LOOKUP_KIND, kind, group, version, cb, ud, err);
}

int kube_discovery_resolve_name(struct kube_discovery *d, const char *name, kube_resolve_fn *cb,
                                void *ud, struct telo_err *err)
{
    if (name == NULL || name[0] == '\0')
        return telo_err_set(err, TELO_EINVAL, "a resource type is needed (e.g. configmaps)");
    char word[256];
    snprintf(word, sizeof(word), "%s", name);
    char *dot = strchr(word, '.');
    const char *group = NULL, *version = NULL;
    if (dot != NULL) {
        *dot = '\0';
        char *rest = dot + 1;
        /* "deployments.v1.apps": a version segment before the group, as kubectl accepts. */
        char *dot2 = strchr(rest, '.');
        if (rest[0] == 'v' && rest[1] >= '0' && rest[1] <= '9' && dot2 != NULL) {
            *dot2 = '\0';
            version = rest;
            group = dot2 + 1;
        } else {
            group = rest;
        }
    }
    return add_lookup(d, LOOKUP_NAME, word, group, version, cb, ud, err);
}

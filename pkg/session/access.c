/* How a session is reached (issue 16: split from status.c): status.endpoints (each port's
 * host, URL and, for a Running session, reachability), status.attach and status.inspectUrl. */
#include "session/access.h"

#include "session/desired.h"

#include <stdio.h>
#include <string.h>

static void put_str(struct json_object *o, const char *key, const char *v)
{
    if (v)
        json_object_object_add(o, key, json_object_new_string(v));
}

static struct json_object *endpoints(const struct session *s, const struct session_config *cfg,
                                     const struct session_reach_summary *reach)
{
    struct json_object *list = json_object_new_array();
    char id[64], svc[64];
    session_host_id(s, id, sizeof(id));
    session_child_name(s, svc, sizeof(svc));
    for (size_t i = 0; i < s->nports; i++) {
        const struct session_port *p = &s->ports[i];
        struct json_object *e = json_object_new_object();
        char name[16], host[320], url[340];
        snprintf(name, sizeof(name), "p%d%s", p->port,
                 strcmp(p->protocol, "UDP") == 0 ? "-udp" : "");
        put_str(e, "name", p->name ? p->name : name);
        json_object_object_add(e, "port", json_object_new_int(p->port));
        put_str(e, "protocol", p->protocol);
        if (cfg->ingress_base_domain && strcmp(p->protocol, "TCP") == 0) {
            snprintf(host, sizeof(host), "%d-%s.%s", p->port, id, cfg->ingress_base_domain);
            snprintf(url, sizeof(url), "%s://%s", cfg->ingress_tls_secret ? "https" : "http", host);
            put_str(e, "host", host);
            put_str(e, "url", url);
        } else {
            /* Reachable inside the cluster through the session's Service. */
            snprintf(host, sizeof(host), "%s.%s.svc", svc, s->namespace);
            put_str(e, "host", host);
        }
        session_reach_summary_put(e, reach, i);
        json_object_array_add(list, e);
    }
    return list;
}

void session_access_put(struct json_object *status, const struct session_observation *obs,
                        const struct session_reach_summary *reach)
{
    const struct session *s = obs->s;
    const struct session_config *cfg = obs->cfg;
    char url[700];
    if (s->nports)
        json_object_object_add(status, "endpoints", endpoints(s, cfg, reach));
    /* The URL does not wait for a token: most clients present their own credentials. */
    if (obs->attach_secret || cfg->gateway_url) {
        struct json_object *attach = json_object_new_object();
        if (obs->attach_secret) {
            char secret[80];
            session_secret_name(s, secret, sizeof(secret));
            put_str(attach, "secretName", secret);
        }
        if (cfg->gateway_url) {
            snprintf(url, sizeof(url), "%s/v1/namespaces/%s/telosessions/%s/attach",
                     cfg->gateway_url, s->namespace, s->name);
            put_str(attach, "url", url);
        }
        json_object_object_add(status, "attach", attach);
    }
    if (s->inspect && cfg->gateway_url) {
        snprintf(url, sizeof(url), "%s/v1/namespaces/%s/telosessions/%s/debug", cfg->gateway_url,
                 s->namespace, s->name);
        put_str(status, "inspectUrl", url);
    }
}

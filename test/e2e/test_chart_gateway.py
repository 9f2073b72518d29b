"""charts/telo-operator's gateway values (issue 19, "Attach from anywhere"): an Ingress with TLS
and cert-manager annotations, the gateway's own TLS from a Secret, session affinity, and the Role
that lets users reach the gateway through the API server's service proxy. `helm template`, then a
server-side dry run: the API server accepts what renders."""

import uuid

import yaml

from test_chart import CHART, helm, render  # noqa: F401  (helm is a fixture)

INGRESS = ("gateway.ingress.enabled=true", "gateway.ingress.className=nginx",
           "gateway.ingress.host=attach.example.com",
           "gateway.ingress.tls.secretName=attach-example-com-tls",
           'json:gateway.ingress.annotations={"cert-manager.io/cluster-issuer":"letsencrypt",'
           '"nginx.ingress.kubernetes.io/proxy-read-timeout":"3600"}',
           "gateway.tls.secretName=gateway-tls", "gateway.replicas=3")


def one(docs, kind, suffix=""):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, (kind, suffix, [d["metadata"]["name"] for d in found])
    return found[0]


def test_the_gateway_ingress_renders_with_tls_annotations_and_session_hashing(helm):
    docs = render(helm, *INGRESS)
    ing = one(docs, "Ingress")
    assert ing["metadata"]["name"] == "telo-operator-gateway"
    assert ing["metadata"]["annotations"] == {
        "cert-manager.io/cluster-issuer": "letsencrypt",
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
        # One session's clients on one pod: the path names the session (the query, lastSeq,
        # would not hash the same).
        "nginx.ingress.kubernetes.io/upstream-hash-by": "$uri",
        # The gateway serves TLS itself.
        "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"}, ing["metadata"]
    spec = ing["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"secretName": "attach-example-com-tls",
                            "hosts": ["attach.example.com"]}]
    rule = spec["rules"][0]
    assert rule["host"] == "attach.example.com"
    # Only the attach and debug routes: /metrics and the probes stay inside the cluster.
    assert rule["http"]["paths"] == [{"path": "/v1/", "pathType": "Prefix", "backend": {
        "service": {"name": "telo-operator-gateway", "port": {"name": "gateway"}}}}]
    # status.attach.url is the public host.
    config = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
    assert config["gatewayUrl"] == "https://attach.example.com"
    # The gateway serves the Secret's certificate (re-read on change: no checksum to roll it).
    gw = one(docs, "Deployment", "-gateway")["spec"]["template"]["spec"]
    c = gw["containers"][0]
    assert "--tls-cert-file=/etc/telo-gateway/tls/tls.crt" in c["args"], c["args"]
    assert "--tls-private-key-file=/etc/telo-gateway/tls/tls.key" in c["args"], c["args"]
    assert c["volumeMounts"] == [{"name": "tls", "mountPath": "/etc/telo-gateway/tls",
                                  "readOnly": True}]
    assert gw["volumes"] == [{"name": "tls", "secret": {"secretName": "gateway-tls"}}]
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    # The service proxy's resource name follows the gateway's scheme.
    role = one(docs, "Role", "-gateway-proxy")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["services/proxy"],
                              "resourceNames": ["https:telo-operator-gateway:80"],
                              "verbs": ["get"]}]


def test_the_defaults_render_no_ingress_and_a_plain_http_gateway(helm):
    docs = render(helm)
    assert not [d for d in docs if d["kind"] == "Ingress"]
    config = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
    assert config["gatewayUrl"] == "http://telo-operator-gateway.telo-system.svc:80"
    svc = one(docs, "Service", "-gateway")
    assert "sessionAffinity" not in svc["spec"]
    c = one(docs, "Deployment", "-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in c["args"] if a.startswith("--tls-")]
    binding = one(docs, "RoleBinding", "-gateway-proxy")
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "system:authenticated"}]
    # Narrower subjects, or none of it.
    docs = render(helm, 'json:gateway.apiServerProxy.subjects=[{"kind":"Group",'
                        '"name":"platform","apiGroup":"rbac.authorization.k8s.io"}]')
    assert one(docs, "RoleBinding", "-gateway-proxy")["subjects"][0]["name"] == "platform"
    docs = render(helm, "gateway.apiServerProxy.enabled=false")
    assert not [d for d in docs if d["metadata"]["name"].endswith("-gateway-proxy")]


def test_client_ip_affinity_and_no_hashing(helm):
    docs = render(helm, "gateway.sessionAffinity=clientIP", "gateway.ingress.enabled=true")
    assert one(docs, "Service", "-gateway")["spec"]["sessionAffinity"] == "ClientIP"
    ing = one(docs, "Ingress")
    assert "annotations" not in ing["metadata"], ing["metadata"]
    assert ing["spec"]["rules"][0].get("host") is None
    assert "tls" not in ing["spec"]
    # Without a host the status URL stays the in-cluster one.
    config = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
    assert config["gatewayUrl"] == "http://telo-operator-gateway.telo-system.svc:80"
    proc = helm("template", "x", CHART, "--set",
                "gateway.sessionAffinity=sticky", check=False)
    assert proc.returncode != 0 and "sessionAffinity" in proc.stderr, proc.stderr


def test_the_ingress_values_pass_a_server_side_dry_run(cluster, helm, crd):
    """What a release with the Ingress, TLS and affinity values would create is accepted by the
    API server (kubectl apply --dry-run=server)."""
    suffix = uuid.uuid4().hex[:6]
    release_ns, sessions_ns, builds_ns = ("e2e-chgw-%s" % suffix, "e2e-chgw-%s-s" % suffix,
                                          "e2e-chgw-%s-b" % suffix)
    for ns in (release_ns, sessions_ns, builds_ns):
        cluster.kubectl("create", "namespace", ns)
    try:
        docs = render(helm, "config.namespaces={%s}" % sessions_ns,
                      "namespaces.builds=" + builds_ns, "namespaces.createSessionNamespaces=false",
                      "namespaces.createBuildNamespace=false", "rbac.sessionAttachRole=false",
                      *INGRESS, release="e2e-" + suffix, namespace=release_ns)
        proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                               input="\n---\n".join(yaml.safe_dump(d) for d in docs))
        assert "ingress.networking.k8s.io/telo-operator-gateway" not in proc.stdout
        assert "ingress.networking.k8s.io/e2e-%s-telo-operator-gateway created (server dry run)" \
            % suffix in proc.stdout, proc.stdout
        assert "rolebinding.rbac.authorization.k8s.io/e2e-%s-telo-operator-gateway-proxy " \
            "created (server dry run)" % suffix in proc.stdout, proc.stdout
        assert proc.stdout.count("(server dry run)") == len(docs), proc.stdout
    finally:
        for ns in (release_ns, sessions_ns, builds_ns):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)

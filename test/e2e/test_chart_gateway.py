"""charts/telo-operator's gateway values (issue 19, "Attach from anywhere"): an Ingress with TLS
and cert-manager annotations, the gateway's own TLS from a Secret, session affinity, and the Role
that lets users reach the gateway through the API server's service proxy. `helm template`, a
server-side dry run (the API server accepts what renders), and a release installed with the
Ingress values, upgraded and uninstalled, its Ingress and the operator's config read back from
the API server."""

import subprocess
import uuid

import yaml

from conftest import IN_CLUSTER, wait_until
from test_chart import CHART, helm, render  # noqa: F401  (helm is a fixture)
from test_sessions import (apply, get, get_ts, hello_bundle, session,  # noqa: F401
                           session_node, start)

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


def set_args(sets):
    """helm's --set (or --set-json for "json:key=JSON") arguments of render()'s sets."""
    args = []
    for s in sets:
        args += ["--set-json", s[5:]] if s.startswith("json:") else ["--set", s]
    return args


def test_a_release_with_the_ingress_values_installs_upgrades_and_uninstalls_its_ingress(
        cluster, helm, crd, start, pod_namespace, tmp_path):
    """`helm install` of the chart with INGRESS's values (the TLS Secrets made first, as a user
    or cert-manager would): the API server holds the release's Ingress with the host, class,
    annotations and TLS Secret, its backend the gateway Service's port; the release's operator
    config publishes the https host, and a session served with that config (the test's
    operator, in the release's session namespace) gets it in status.attach.url. `helm upgrade`
    to another host changes the same Ingress; `helm uninstall` removes it and leaves the Secret.

    No ingress controller runs here and none is needed: what the chart delivers is the Ingress
    object (and the config); routing it is the controller's job. The release's own pods are
    played by kwok (test_chart.py), so the session is reconciled by the operator under test,
    given the config the release installed: its file (--config) as a process; in-cluster its
    pod cannot read this machine's file, so the installed gatewayUrl goes to it as --set."""
    suffix = uuid.uuid4().hex[:6]
    release, release_ns, sessions_ns = "e2e-gwi-" + suffix, "e2e-gwi-" + suffix, pod_namespace
    fullname = release + "-telo-operator"
    host, new_host = "attach.example.com", "attach-%s.example.org" % suffix
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=" + host,
                    "-addext", "subjectAltName=DNS:%s,DNS:%s" % (host, new_host),
                    "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt")],
                   check=True, capture_output=True)
    cluster.kubectl("create", "namespace", release_ns)
    installed = False
    try:
        # The Ingress's certificate and the gateway's own (INGRESS names both).
        for secret in ("attach-example-com-tls", "gateway-tls"):
            cluster.kubectl("create", "secret", "tls", secret, "-n", release_ns,
                            "--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "tls.key"))
        # The release serves the test's namespace (it exists: not the chart's to make) and keeps
        # its build RoleBinding in its own; the cluster's one telo-session-attach stays as is.
        sets = ["config.namespaces={%s}" % sessions_ns, "namespaces.createSessionNamespaces=false",
                "namespaces.builds=" + release_ns, "namespaces.createBuildNamespace=false",
                "rbac.sessionAttachRole=false", *INGRESS]
        helm("install", release, CHART, "-n", release_ns, *set_args(sets), "--timeout", "120s")
        installed = True

        ing = cluster.kubectl_json("get", "ingress", fullname + "-gateway", "-n", release_ns)
        meta = ing["metadata"]
        assert meta["labels"]["app.kubernetes.io/instance"] == release, meta
        assert meta["annotations"]["meta.helm.sh/release-name"] == release, meta
        assert {k: v for k, v in meta["annotations"].items()
                if not k.startswith("meta.helm.sh/")} == {
            "cert-manager.io/cluster-issuer": "letsencrypt",
            "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
            "nginx.ingress.kubernetes.io/upstream-hash-by": "$uri",
            "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"}, meta["annotations"]
        spec = ing["spec"]
        assert spec["ingressClassName"] == "nginx", spec
        assert spec["tls"] == [{"secretName": "attach-example-com-tls", "hosts": [host]}], spec
        tls = cluster.kubectl_json("get", "secret", "attach-example-com-tls", "-n", release_ns)
        assert tls["type"] == "kubernetes.io/tls"
        assert [r["host"] for r in spec["rules"]] == [host], spec
        paths = spec["rules"][0]["http"]["paths"]
        assert [(p["path"], p["pathType"]) for p in paths] == [("/v1/", "Prefix")], paths
        backend = paths[0]["backend"]["service"]
        # The backend is the release's gateway Service, by a port it has, which leads to the
        # gateway pods' port of that name.
        svc = cluster.kubectl_json("get", "service", backend["name"], "-n", release_ns)
        assert backend["name"] == fullname + "-gateway", backend
        port = [p for p in svc["spec"]["ports"] if p.get("name") == backend["port"].get("name")
                or p["port"] == backend["port"].get("number")]
        assert len(port) == 1, (backend, svc["spec"]["ports"])
        gw = cluster.kubectl_json("get", "deployment", fullname + "-gateway", "-n", release_ns)
        template = gw["spec"]["template"]
        assert svc["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        assert port[0]["targetPort"] in [c.get("name") for c in
                                         template["spec"]["containers"][0]["ports"]], port
        assert gw["spec"]["replicas"] == 3
        # What the dry run proved too: the proxy Role's binding is the release's.
        cluster.kubectl("get", "rolebinding", fullname + "-gateway-proxy", "-n", release_ns)

        # The operator's config: status.attach.url is the Ingress's https host.
        config_text = cluster.kubectl_json("get", "configmap", fullname + "-config", "-n",
                                           release_ns)["data"]["config.yaml"]
        config = yaml.safe_load(config_text)
        assert config["gatewayUrl"] == "https://" + host, config
        assert config["namespaces"] == [sessions_ns], config
        if IN_CLUSTER:
            start("gatewayUrl=" + config["gatewayUrl"])
        else:
            path = tmp_path / "config.yaml"
            path.write_text(config_text)
            start(args=("--config", str(path)))
        apply(cluster, sessions_ns, hello_bundle(), session("via-ingress"))
        url = wait_until(lambda: ((get_ts(cluster, sessions_ns, "via-ingress") or {}).get(
            "status", {}).get("attach") or {}).get("url"), timeout=60,
            what="status.attach.url of the session")
        assert url == "https://%s/v1/namespaces/%s/telosessions/via-ingress/attach" % (
            host, sessions_ns), url

        # Another host: the same Ingress, changed; the config follows.
        helm("upgrade", release, CHART, "-n", release_ns, "--reuse-values", "--set",
             "gateway.ingress.host=" + new_host, "--timeout", "120s")
        after = cluster.kubectl_json("get", "ingress", fullname + "-gateway", "-n", release_ns)
        assert after["metadata"]["uid"] == meta["uid"]
        assert [r["host"] for r in after["spec"]["rules"]] == [new_host], after["spec"]
        assert after["spec"]["tls"] == [{"secretName": "attach-example-com-tls",
                                         "hosts": [new_host]}], after["spec"]
        config = yaml.safe_load(cluster.kubectl_json("get", "configmap", fullname + "-config",
                                                     "-n", release_ns)["data"]["config.yaml"])
        assert config["gatewayUrl"] == "https://" + new_host, config

        helm("uninstall", release, "-n", release_ns, "--timeout", "120s")
        installed = False
        wait_until(lambda: get(cluster, release_ns, "ingress", fullname + "-gateway") is None,
                   timeout=30, what="the Ingress gone")
        assert get(cluster, release_ns, "service", fullname + "-gateway") is None
        # The Secret was the user's, not the release's.
        assert get(cluster, release_ns, "secret", "attach-example-com-tls") is not None
    finally:
        if installed:
            helm("uninstall", release, "-n", release_ns, "--timeout", "120s", check=False)
        cluster.kubectl("delete", "namespace", release_ns, "--wait=false", check=False)

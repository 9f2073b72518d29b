"""`kubectl telo attach` from outside the cluster network (issue 19, "Attach from anywhere"):
status.attach.url is the gateway Service's in-cluster name (as the chart sets it), which does not
resolve on this machine, so the plugin goes through the API server's service proxy
(/api/v1/namespaces/NS/services/http:NAME:PORT/proxy/...) with nothing but the kubeconfig, and the
gateway's token travels as the bearer subprotocol (the API server removes the Authorization
header it authenticated). A keystroke round-trips on a session of the real node.

The gateway: build/bin/telo-gateway on this machine, bound to the real node's address, behind a
Service whose Endpoints name a hostNetwork pod of the real node (the API server proxies only to
addresses that are a pod's IP); in-cluster (TELO_E2E_OPERATOR=in-cluster), the gateway pod
itself. Skipped without a Ready real node."""

import json
import os
import subprocess
import uuid

import pytest
import yaml

from conftest import IN_CLUSTER, ROOT, foreign_operators, new_operator, \
    wait_for_default_service_account, wait_until
from test_gateway import Gateway, InClusterGateway, _images, start_session
from test_kubectl_telo import Terminal, plugin_argv, plugin_env, telo  # noqa: F401
from test_real_node import _real_node

REAL = {"telo.run/node": "real"}
REAL_TOLERATION = [{"key": "telo.run/node", "operator": "Equal", "value": "real",
                    "effect": "NoSchedule"}]
SERVICE = "telo-gw"


def _apply(cluster, *objs):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def pause_image(cluster):
    with open(os.path.join(cluster.dir, "real-node", "images", "refs.json")) as f:
        return json.load(f)["pause"]


@pytest.fixture(scope="module")
def proxied(cluster, crd, tmp_path_factory):
    """A session namespace, a gateway namespace holding the gateway's Service, the gateway and an
    operator whose gatewayUrl is http://telo-gw.<gateway namespace>.svc:80."""
    node = _real_node(cluster)
    if node is None:
        pytest.skip("no Ready node labelled telo.run/node=real (TELO_REAL_NODE=1 "
                    "hack/cluster/up.sh)")
    images = _images(cluster)
    suffix = uuid.uuid4().hex[:6]
    ns, gw_ns = "e2e-proxy-" + suffix, "e2e-proxy-gw-" + suffix
    for n, level in ((ns, "restricted"),) + (() if IN_CLUSTER else ((gw_ns, "privileged"),)):
        cluster.kubectl("create", "namespace", n)
        cluster.kubectl("label", "namespace", n, "pod-security.kubernetes.io/enforce=" + level)
    wait_for_default_service_account(cluster, ns)
    others = foreign_operators({os.getpid()}, ns)
    if others:
        pytest.fail("another telo-operator watches every namespace:\n  " + "\n  ".join(others),
                    pytrace=False)
    logs = tmp_path_factory.mktemp("attach-proxy")
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    if IN_CLUSTER:
        gw = InClusterGateway(cluster, str(logs / "gateway.log"))
        pod = gw.pod.pod()
        target = {"ip": gw.pod.ip, "name": pod["metadata"]["name"],
                  "namespace": pod["metadata"]["namespace"]}
        gw_ns = target["namespace"]
    else:
        # The API server proxies only to an address that is a pod's IP: a hostNetwork pod of the
        # real node has the node's address, where this machine's gateway listens.
        gw = Gateway(cluster, str(logs / "gateway.log"), ["--bind-address", node_ip + ":0"])
        _apply(cluster, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gateway-address", "namespace": gw_ns},
            "spec": {"hostNetwork": True, "nodeSelector": REAL, "tolerations": REAL_TOLERATION,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "pause", "image": pause_image(cluster)}]}})
        wait_until(lambda: cluster.kubectl_json("get", "pod", "gateway-address", "-n", gw_ns)
                   .get("status", {}).get("podIP") == node_ip, timeout=60,
                   what="the hostNetwork pod's IP")
        target = {"ip": node_ip, "name": "gateway-address", "namespace": gw_ns}
    # Whatever fails from here on, the gateway and the operator started here are stopped: a
    # leaked operator would watch on and be found by the next test's foreign_operators check.
    op, started = None, []
    service = SERVICE + "-" + suffix if IN_CLUSTER else SERVICE
    try:
        _apply(cluster, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service, "namespace": gw_ns},
            "spec": {"ports": [{"name": "gateway", "port": 80, "targetPort": gw.port,
                                "protocol": "TCP"}]}}, {
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": service, "namespace": gw_ns},
            "subsets": [{"addresses": [{"ip": target["ip"], "targetRef": {
                "kind": "Pod", "name": target["name"], "namespace": target["namespace"]}}],
                "ports": [{"name": "gateway", "port": gw.port, "protocol": "TCP"}]}]})
        url = "http://%s.%s.svc:80" % (service, gw_ns)
        op = new_operator(cluster, ns, str(logs / "operator.log"), [
            'tolerations=[{"key":"telo.run/node","operator":"Equal","value":"real",'
            '"effect":"NoSchedule"}]',
            "nodeSelector=telo.run/node=real", "images.init=" + images["telo-init"],
            "images.default=" + images["telo-session-test"], "startDeadlineSeconds=90",
            "gatewayUrl=" + url]).start()
        env = {"cluster": cluster, "ns": ns, "gw_ns": gw_ns, "service": service, "gw": gw, "op": op}
        env["status"], env["token"] = start_session(env, "px", started)
        yield env
    finally:
        cluster.kubectl("delete", "telosession", "-n", ns, *started, "--wait=false", check=False)
        op_rc = op.stop() if op is not None else 0
        rc = gw.stop()
        print("--- telo-gateway log:\n" + gw.log()[-4000:])
        for n in (ns, gw_ns) if not IN_CLUSTER else (ns,):
            cluster.kubectl("delete", "namespace", n, "--wait=false", check=False)
        if IN_CLUSTER:
            cluster.kubectl("delete", "service,endpoints", service, "-n", gw_ns, "--wait=false",
                            check=False)
    assert rc == 0, "telo-gateway must exit 0 on SIGTERM (got %s)" % rc
    assert op_rc == 0, "telo-operator must exit 0 on SIGTERM (got %s)" % op_rc


def token_kubeconfig(cluster, path, token):
    """A kubeconfig with only a bearer token (and the cluster's CA): the API server authenticates
    it from the Authorization header, which it then removes before proxying."""
    with open(cluster.kubeconfig) as f:
        admin = yaml.safe_load(f)
    c = admin["clusters"][0]["cluster"]
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
           "clusters": [{"name": "t", "cluster": c}],
           "users": [{"name": "t", "user": {"token": token}}],
           "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def test_attach_falls_back_to_the_service_proxy_and_round_trips_a_keystroke(proxied, tmp_path):
    cluster, ns = proxied["cluster"], proxied["ns"]
    url = proxied["status"]["attach"]["url"]
    assert url.startswith("http://%s.%s.svc:80/" % (proxied["service"], proxied["gw_ns"])), url
    t = Terminal(plugin_argv(cluster, ns, "attach", "px"))
    try:
        t.expect(b"is not reachable from here (cannot resolve")
        t.expect(b"attached to px (gateway, through the API server's service proxy)")
        t.type(b"through-the-service-proxy\r")
        t.expect(b"echo: through-the-service-proxy")
        t.type(b"\x10\x11")
        assert t.wait() == 0, t.seen[-2000:]
    finally:
        t.close()
    # The session's token reached the gateway (it admitted the session token, not a user).
    wait_until(lambda: 'msg="attach client left" session=%s/px subject="session-token"' % ns
               in proxied["gw"].log(), timeout=10,
               what="the gateway's record of a session-token client")


def test_via_direct_with_an_unreachable_url_fails_and_names_the_proxy(proxied):
    r = telo(proxied["cluster"], proxied["ns"], "attach", "px", "--via=direct", timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot reach the gateway at http://%s.%s.svc:80/" % (
        proxied["service"], proxied["gw_ns"]) in r.stderr, r.stderr
    assert "cannot resolve" in r.stderr and "--via=proxy" in r.stderr, r.stderr
    assert "attached" not in r.stderr, r.stderr


def test_a_user_without_services_proxy_is_told_what_to_check_until_bound(proxied, tmp_path):
    """A ServiceAccount with a bearer-token kubeconfig that may read the session and its Secret
    but not services/proxy: both attempts and what to check are named. With the documented
    Role (config/rbac/gateway_proxy_role.yaml) bound, the same command attaches: the API server
    took its token from Authorization, the gateway the session's from the subprotocol."""
    cluster, ns, gw_ns, service = (proxied["cluster"], proxied["ns"], proxied["gw_ns"],
                                   proxied["service"])
    sa = "attacher"
    cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    _apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-sessions", "namespace": ns},
        "rules": [{"apiGroups": ["telo.run"], "resources": ["telosessions"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read-sessions", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "read-sessions"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
    token = cluster.kubectl("create", "token", sa, "-n", ns, "--duration=10m").stdout.strip()
    kc = token_kubeconfig(cluster, str(tmp_path / "kubeconfig"), token)
    argv = [cluster.kubectl_path, "telo", "--kubeconfig", kc, "-n", ns, "attach", "px"]

    r = subprocess.run(argv, env=plugin_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot reach the gateway of session px" in r.stderr, r.stderr
    assert "directly at http://%s.%s.svc:80/" % (service, gw_ns) in r.stderr, r.stderr
    assert ('HTTP 403 from the API server: you may not get services/proxy "http:%s:80" in '
            'namespace %s' % (service, gw_ns)) in r.stderr, r.stderr
    assert "kubectl auth can-i get services/http:%s:80 --subresource=proxy -n %s" % (
        service, gw_ns) in r.stderr, r.stderr
    assert "kubectl telo attach px -n %s --direct" % ns in r.stderr, r.stderr

    # The documented Role and binding, in the gateway's namespace for this gateway's Service.
    with open(os.path.join(ROOT, "config", "rbac", "gateway_proxy_role.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        d["metadata"]["namespace"] = gw_ns
        d["metadata"]["name"] += "-" + ns
        if d["kind"] == "Role":
            d["rules"][0]["resourceNames"] = ["http:%s:80" % service]
        else:
            d["roleRef"]["name"] += "-" + ns
            # Only this test's user, not every authenticated one, on a shared cluster.
            d["subjects"] = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    _apply(cluster, *docs)
    try:
        t = Terminal(argv)
        try:
            t.expect(b"attached to px (gateway, through the API server's service proxy)",
                     timeout=30)
            t.type(b"bound-and-through\r")
            t.expect(b"echo: bound-and-through")
            t.type(b"\x10\x11")
            assert t.wait() == 0, t.seen[-2000:]
        finally:
            t.close()
        # Without get on Secrets the user's own token goes in the subprotocol, and the gateway
        # checks it (TokenReview, SubjectAccessReview for telosessions/attach).
        _apply(cluster, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "read-sessions", "namespace": ns},
            "rules": [{"apiGroups": ["telo.run"], "resources": ["telosessions"],
                       "verbs": ["get"]},
                      {"apiGroups": ["telo.run"], "resources": ["telosessions/attach"],
                       "verbs": ["create"]}]})
        t = Terminal(argv)
        try:
            t.expect(b"attached to px (gateway, through the API server's service proxy)",
                     timeout=30)
            t.type(b"with-my-own-token\r")
            t.expect(b"echo: with-my-own-token")
            t.type(b"\x10\x11")
            assert t.wait() == 0, t.seen[-2000:]
        finally:
            t.close()
        wait_until(lambda: 'session=%s/px subject="system:serviceaccount:%s:%s"' % (ns, ns, sa)
                   in proxied["gw"].log(), timeout=10, what="the gateway's record of the user")
    finally:
        cluster.kubectl("delete", "role,rolebinding", *[d["metadata"]["name"] for d in docs
                                                         if d["kind"] == "Role"],
                        "-n", gw_ns, check=False)


def test_the_gateway_serves_a_renewed_certificate_without_a_restart(cluster, tmp_path):
    """telo-gateway with --tls-cert-file/--tls-private-key-file: the pair is replaced the way a
    Secret volume's update replaces it (a new file renamed over the old); the next connection,
    a second later, is served the new certificate by the same process."""
    import ssl
    import time

    def pair(name):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                        "/CN=" + name, "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(tmp_path / (name + ".key")),
                        "-out", str(tmp_path / (name + ".crt"))], check=True, capture_output=True)
        with open(tmp_path / (name + ".crt")) as f:
            return ssl.DER_cert_to_PEM_cert(ssl.PEM_cert_to_DER_cert(f.read()))

    first, second = pair("first"), pair("second")
    for ext in ("crt", "key"):
        os.link(tmp_path / ("first." + ext), tmp_path / ("tls." + ext))
    gw = Gateway(cluster, str(tmp_path / "gateway.log"),
                 ["--tls-cert-file", str(tmp_path / "tls.crt"),
                  "--tls-private-key-file", str(tmp_path / "tls.key")])
    try:
        assert ssl.get_server_certificate(("127.0.0.1", gw.port)) == first
        for ext in ("crt", "key"):
            os.link(tmp_path / ("second." + ext), tmp_path / ("new." + ext))
            os.rename(tmp_path / ("new." + ext), tmp_path / ("tls." + ext))
        time.sleep(1.1)  # the files are looked at, at most once a second
        assert wait_until(lambda: ssl.get_server_certificate(("127.0.0.1", gw.port)) == second,
                          timeout=5, what="the renewed certificate served")
        assert 'msg="tls certificate reloaded"' in gw.log(), gw.log()
    finally:
        assert gw.stop() == 0, gw.log()

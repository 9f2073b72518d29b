"""The operator in-cluster, as users run it: `make image`, then `helm install` of
charts/telo-operator with its pod on the real node (the image from the local registry, the
chart's RBAC, the in-cluster config: the kubernetes Service reached through the real node's
DNAT, hack/cluster/real-node.sh). A session runs for real and answers on its port, a terminal
attaches through the in-cluster gateway (when the gateway is built), `helm upgrade` rolls the
pod, the operator's RSS is read from /proc at idle and with 100 (kwok) sessions, the audit log
holds no 403 for its ServiceAccount, and `helm uninstall` leaves no cluster-scoped object.

Skipped without a Ready node labelled telo.run/node=real. Everything lives in namespaces of its
own; the operator watches only its session namespace."""

import base64
import io
import json
import os
import subprocess
import tarfile
import time
import urllib.request
import uuid

import pytest
import yaml

from conftest import OPERATOR_BIN_DIR, REAL_POD_CIDR, ROOT, wait_until
from test_chart import CHART, cluster_scoped_of, helm  # noqa: F401  (helm is a fixture)
from test_real_node import _real_node
from conftest import audit_events

REAL = {"telo.run/node": "real"}
REAL_TOLERATION = [{"key": "telo.run/node", "operator": "Equal", "value": "real",
                    "effect": "NoSchedule"}]
ENTRY = "print telo-session-test under the in-cluster operator\nhttp 8080 hello in-cluster\n"


@pytest.fixture(scope="module")
def real_node(cluster):
    node = _real_node(cluster)
    if node is None:
        pytest.skip("no Ready node labelled telo.run/node=real (TELO_REAL_NODE=1 hack/cluster/up.sh)")
    with open(os.path.join(cluster.dir, "real-node", "images", "refs.json")) as f:
        node["images"] = json.load(f)
    return node


@pytest.fixture(scope="module")
def image(real_node):
    proc = subprocess.run([os.path.join(ROOT, "hack", "image.sh"), os.path.dirname(OPERATOR_BIN_DIR)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "imported" in proc.stderr, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def bundle_configmap(name="bundle"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        data = ENTRY.encode()
        info = tarfile.TarInfo("app/main.telo")
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(data))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "binaryData": {"bundle.tgz": base64.b64encode(buf.getvalue()).decode()}}


def session(name, ports=True, token=False):
    spec = {"entry": "app/main.telo", "bundle": {"configMap": {"name": "bundle"}}}
    if token:
        spec["attachToken"] = True
    if ports:
        spec["ports"] = [{"port": 8080, "protocol": "TCP", "name": "http"}]
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": name}, "spec": spec}


def apply(cluster, ns, *objs):
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def phase(cluster, ns, name):
    return cluster.kubectl_json("get", "ts", name, "-n", ns).get("status", {}).get("phase")


def pod_rss_kib(pod_uid):
    """{program: VmRSS in KiB} of the processes of one pod on this machine (the real node), found
    by the pod's UID in their cgroup path (the kubelet's cgroupfs layout)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % pid) as f:
                cgroups = f.read()
            if pod_uid not in cgroups and pod_uid.replace("-", "_") not in cgroups:
                continue
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                program = os.path.basename(f.read().split(b"\0")[0].decode())
            with open("/proc/%s/status" % pid) as f:
                rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        out[program] = out.get(program, 0) + rss
    return out


def kubelet_working_set_kib(cluster, node, ns, pod):
    """The manager container's working set as the kubelet reports it (/metrics/resource)."""
    text = cluster.kubectl("get", "--raw",
                           "/api/v1/nodes/%s/proxy/metrics/resource" % node).stdout
    for line in text.splitlines():
        if line.startswith("container_memory_working_set_bytes{") and \
                'container="manager"' in line and 'namespace="%s"' % ns in line and \
                'pod="%s"' % pod in line:
            return int(float(line.split()[1]) / 1024)
    return None


def operator_pods(cluster, ns, release, app="telo-operator"):
    """The release's operator pods (app telo-gateway: its gateway's, a Deployment of their own)."""
    items = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                 "app.kubernetes.io/instance=%s,app.kubernetes.io/name=%s" %
                                 (release, app))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


def attach_through_gateway(gateway_ip, port, ns, name, token, line):
    """A channel-protocol client at the gateway's pod IP: sends line on stdin, returns what came
    back on stdout until the stand-in's echo of it (or 20 s)."""
    import websocket  # websocket-client, a dependency of the kubernetes client
    ws = websocket.create_connection(
        "ws://%s:%d/v1/namespaces/%s/telosessions/%s/attach" % (gateway_ip, port, ns, name),
        header=["Authorization: Bearer " + token], subprotocols=["v5.channel.k8s.io"],
        timeout=20, suppress_origin=True)  # no browser: the gateway refuses unlisted origins
    try:
        ws.send_binary(b"\x00" + line.encode() + b"\n")
        out = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ("echo: " + line).encode() not in out:
            frame = ws.recv()
            if isinstance(frame, bytes) and frame[:1] == b"\x01":
                out += frame[1:]
        return out.decode(errors="replace")
    finally:
        ws.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_helm_installed_operator_runs_sessions_on_the_real_node(cluster, helm, real_node,  # noqa: F811
                                                                  image):
    # No crd fixture: the CRD is the cluster's as it is (--skip-crds), which a shared cluster
    # may hold in another version; the test only needs it to exist.
    cluster.kubectl("get", "crd", "telosessions.telo.run")
    suffix = uuid.uuid4().hex[:6]
    release, ns, sessions = "e2e-ic-" + suffix, "e2e-ic-" + suffix, "e2e-ic-%s-s" % suffix
    lease = "e2e-ic-%s.telo.run" % suffix
    gateway = os.path.exists(os.path.join(OPERATOR_BIN_DIR, "telo-gateway"))
    repo, tag = image.rsplit(":", 1)
    values = {
        "image": {"repository": repo, "tag": tag},
        "nodeSelector": REAL, "tolerations": REAL_TOLERATION,
        "leaderElection": {"leaseName": lease},
        "gateway": {"enabled": gateway},
        # One attach ClusterRole per cluster, and this may be a shared one.
        "rbac": {"sessionAttachRole": False},
        "namespaces": {"builds": "e2e-ic-%s-b" % suffix},
        "config": {"namespaces": [sessions], "nodeSelector": REAL,
                   "tolerations": REAL_TOLERATION, "startDeadlineSeconds": 90,
                   # Only the real node's pods are on this machine: kwok's fake IPs are not.
                   "reachability": {"podCIDRs": [REAL_POD_CIDR]},
                   "images": {"default": real_node["images"]["telo-session-test"],
                              "init": real_node["images"]["telo-init"]}},
    }
    values_file = os.path.join(cluster.dir, "e2e-ic-%s-values.yaml" % suffix)
    with open(values_file, "w") as f:
        yaml.safe_dump(values, f)
    sa_user = "system:serviceaccount:%s:%s-telo-operator" % (ns, release)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1)) + ".000000Z"
    figures = {}
    try:
        t0 = time.monotonic()
        helm("install", release, CHART, "-n", ns, "--create-namespace", "--skip-crds",
             "-f", values_file, "--wait", "--timeout", "180s")
        pod = wait_until(lambda: [p for p in operator_pods(cluster, ns, release) if ready(p)],
                         timeout=120, what="the operator pod Ready")[0]
        figures["install_to_ready_s"] = round(time.monotonic() - t0, 1)
        assert pod["spec"]["nodeName"] == real_node["metadata"]["name"]

        # A session for real: the stand-in CLI on the real node, answering on its port.
        # The session's own token (spec.attachToken) for the attach through the gateway below.
        apply(cluster, sessions, bundle_configmap(), session("hello", token=gateway))
        wait_until(lambda: phase(cluster, sessions, "hello") == "Running", timeout=120,
                   what="the session Running")
        ts = wait_until(lambda: (lambda t: t if not gateway or t["status"].get("attach", {})
                                 .get("secretName") else None)(
            cluster.kubectl_json("get", "ts", "hello", "-n", sessions)),
            timeout=30, what="status.attach.secretName")

        def answer():
            try:
                with urllib.request.urlopen("http://%s:8080/" % ts["status"]["podIP"],
                                            timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None
        assert wait_until(answer, timeout=30, what="the session's answer").strip() == \
            "hello in-cluster"
        if gateway:
            secret = cluster.kubectl_json("get", "secret", ts["status"]["attach"]["secretName"],
                                          "-n", sessions)
            token = base64.b64decode(secret["data"]["token"]).decode()
            gw_pod = wait_until(lambda: [p for p in operator_pods(cluster, ns, release,
                                                                  "telo-gateway") if ready(p)],
                                timeout=60, what="the gateway pod Ready")[0]
            out = attach_through_gateway(gw_pod["status"]["podIP"], 8081, sessions, "hello",
                                         token, "typed through the gateway")
            assert "echo: typed through the gateway" in out, out
            figures["attach_through_the_gateway"] = out.strip().splitlines()[-1]
        rss = pod_rss_kib(pod["metadata"]["uid"])
        assert "telo-operator" in rss, "no telo-operator process of pod %s here: %s" % (
            pod["metadata"]["name"], rss)
        figures["rss_kib_one_session"] = rss

        # A changed value rolls the pod; sessions now go to kwok's nodes, for 100 of them.
        values["config"]["nodeSelector"] = {"type": "kwok"}
        values["config"]["tolerations"] = []
        with open(values_file, "w") as f:
            yaml.safe_dump(values, f)
        cluster.kubectl("delete", "ts", "hello", "-n", sessions, "--wait=true")
        t2 = time.monotonic()
        helm("upgrade", release, CHART, "-n", ns, "--skip-crds", "-f", values_file, "--wait",
             "--timeout", "180s")
        new = wait_until(lambda: [p for p in operator_pods(cluster, ns, release)
                                  if ready(p) and p["metadata"]["uid"] != pod["metadata"]["uid"]],
                         timeout=120, what="a new operator pod after the upgrade")[0]
        wait_until(lambda: len(operator_pods(cluster, ns, release)) == 1, timeout=90,
                   what="the old operator pod to go")
        figures["upgrade_rolled_in_s"] = round(time.monotonic() - t2, 1)
        assert new["metadata"]["annotations"]["checksum/config"] != \
            pod["metadata"]["annotations"]["checksum/config"]
        time.sleep(10)
        figures["rss_kib_idle"] = pod_rss_kib(new["metadata"]["uid"])
        node = real_node["metadata"]["name"]
        figures["kubelet_working_set_kib_idle"] = kubelet_working_set_kib(
            cluster, node, ns, new["metadata"]["name"])
        n = 100
        t1 = time.monotonic()
        apply(cluster, sessions, *[session("s%03d" % i, ports=False) for i in range(n)])

        def all_running():
            items = cluster.kubectl_json("get", "ts", "-n", sessions)["items"]
            return sum(1 for i in items if i.get("status", {}).get("phase") == "Running") == n
        wait_until(all_running, timeout=300, interval=2, what="%d sessions Running" % n)
        figures["100_sessions_applied_to_running_s"] = round(time.monotonic() - t1, 1)
        time.sleep(10)
        figures["rss_kib_100_sessions"] = pod_rss_kib(new["metadata"]["uid"])
        figures["kubelet_working_set_kib_100_sessions"] = kubelet_working_set_kib(
            cluster, node, ns, new["metadata"]["name"])
        print("in-cluster figures: %s" % json.dumps(figures))

        events = audit_events(cluster, sa_user, since)
        assert events, "no request of %s in the audit log" % sa_user
        forbidden = [(e["verb"], e.get("objectRef", {})) for e in events
                     if e.get("responseStatus", {}).get("code") == 403]
        assert not forbidden, "403 for %s: %s" % (sa_user, forbidden[:10])
        figures["requests_by_the_service_account"] = len(events)
        if gateway:  # the gateway's own ServiceAccount, used by the attach above
            gw_user = sa_user + "-gateway"
            gw_events = audit_events(cluster, gw_user, since)
            assert gw_events, "no request of %s in the audit log" % gw_user
            forbidden = [(e["verb"], e.get("objectRef", {})) for e in gw_events
                         if e.get("responseStatus", {}).get("code") == 403]
            assert not forbidden, "403 for %s: %s" % (gw_user, forbidden[:10])
    finally:
        cluster.kubectl("delete", "ts", "--all", "-n", sessions, "--wait=false", check=False)
        helm("uninstall", release, "-n", ns, "--wait", "--timeout", "180s", check=False)
        os.unlink(values_file)
        print("in-cluster figures: %s" % json.dumps(figures))
    left = []

    def gone():
        left[:] = cluster_scoped_of(cluster, release)
        return not left
    wait_until(gone, timeout=120, what="no cluster-scoped object of the release (left: %s)" % left)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)

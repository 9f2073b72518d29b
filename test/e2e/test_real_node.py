"""The real node (TELO_REAL_NODE=1 hack/cluster/up.sh): pods run for real under kubelet,
containerd and runc, in namespaces that enforce Pod Security `restricted`, with the stand-in CLI
image telo-session-test (hack/images/README.md). Skipped when the node `telo.run/node=real` is
absent or not Ready."""

import hashlib
import json
import os
import pty
import select
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import wait_for_default_service_account, wait_until


def _real_node(cluster):
    proc = cluster.kubectl("get", "nodes", "-l", "telo.run/node=real", "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    for node in json.loads(proc.stdout)["items"]:
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]):
            return node
    return None


@pytest.fixture(scope="module")
def real_node(cluster):
    node = _real_node(cluster)
    if node is None:
        pytest.skip("no Ready node labelled telo.run/node=real (start it: TELO_REAL_NODE=1 hack/cluster/up.sh)")
    refs_file = os.path.join(cluster.dir, "real-node", "images", "refs.json")
    with open(refs_file) as f:
        node["images"] = json.load(f)
    return node


@pytest.fixture
def restricted_ns(cluster, namespace, real_node):
    """A fresh namespace enforcing Pod Security `restricted`, ready for pods."""
    cluster.kubectl("label", "namespace", namespace,
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    wait_for_default_service_account(cluster, namespace)
    return namespace


HARDENED = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def session_pod(name, image, entry_name="main.telo", args=None, limits=None, tty=False,
                init_containers=None, app_volume=None):
    """A pod like the session pod: pinned to the real node, hardened for `restricted`, the
    entry in /app (a ConfigMap named like the pod unless app_volume is given)."""
    container = {
        "name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
        "args": args or ["run", "/app/" + entry_name, "--no-cache-write"],
        "securityContext": HARDENED,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "app", "mountPath": "/app", "readOnly": True}],
        "resources": {"limits": limits or {"memory": "64Mi", "cpu": "500m"}},
    }
    if tty:
        container.update({"stdin": True, "tty": True})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"telo.run/node": "real"},
            "tolerations": [{"key": "telo.run/node", "operator": "Equal", "value": "real",
                             "effect": "NoSchedule"}],
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": init_containers or [],
            "containers": [container],
            "volumes": [app_volume or {"name": "app", "configMap": {"name": name}}],
        },
    }


def apply(cluster, namespace, *objects):
    cluster.kubectl("apply", "-n", namespace, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def entry_configmap(name, entries):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": entries}


def get_pod(cluster, namespace, name):
    return cluster.kubectl_json("get", "pod", name, "-n", namespace)


def wait_running(cluster, namespace, name, timeout=90):
    def ready():
        pod = get_pod(cluster, namespace, name)
        if pod["status"].get("phase") in ("Failed", "Succeeded"):
            raise AssertionError("pod %s ended: %s" % (name, json.dumps(pod["status"])[:2000]))
        conds = pod["status"].get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
            return pod
        return None
    try:
        return wait_until(ready, timeout=timeout, interval=0.5, what="pod %s Ready" % name)
    except AssertionError:
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout
        raise AssertionError("pod %s not Ready; events:\n%s" % (name, events[-3000:]))


def wait_terminated(cluster, namespace, name, timeout=90, init=False):
    key = "initContainerStatuses" if init else "containerStatuses"

    def ended():
        pod = get_pod(cluster, namespace, name)
        for status in pod["status"].get(key, []):
            term = status.get("state", {}).get("terminated")
            if term:
                return pod, term
        return None
    return wait_until(ended, timeout=timeout, interval=0.5, what="a terminated container in %s" % name)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def test_restricted_pod_serves_http_on_pod_ip(cluster, restricted_ns, real_node):
    image = real_node["images"]["telo-session-test"]
    apply(cluster, restricted_ns,
          entry_configmap("web", {"main.telo": "print web entry\nhttp 8080 hello from the real node\n"}),
          session_pod("web", image, args=["run", "/app/main.telo", "--no-cache-write",
                                          "--inspect", "0.0.0.0:9230", "--no-open"]))
    pod = wait_running(cluster, restricted_ns, "web")
    assert pod["spec"]["nodeName"] == real_node["metadata"]["name"]
    ip = pod["status"]["podIP"]
    assert ip.startswith(os.environ.get("TELO_REAL_POD_CIDR", "10.85.0.0/24").rsplit(".", 1)[0] + ".")
    # The app's answer, fetched from the host over the pod network.
    status, body = wait_until(lambda: _try_get("http://%s:8080/hello" % ip), timeout=20,
                              what="HTTP answer from %s:8080" % ip)
    assert status == 200 and body == "hello from the real node\n"
    # The inspector streams server-sent events.
    with urllib.request.urlopen("http://%s:9230/events" % ip, timeout=5) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        first = resp.readline().decode()
        assert first == "event: hello\n"
    logs = cluster.kubectl("logs", "-n", restricted_ns, "web").stdout
    assert "print web entry" in logs and "GET /hello on port 8080" in logs
    # What the restricted profile asked for is what the process got.
    ident = cluster.kubectl("exec", "-n", restricted_ns, "web", "--", "id").stdout
    assert "uid=1000" in ident
    probe = cluster.kubectl("exec", "-n", restricted_ns, "web", "--", "sh", "-c",
                            "touch /x 2>&1; grep CapEff /proc/self/status", check=False).stdout
    assert "Read-only file system" in probe
    assert "0000000000000000" in probe


def _try_get(url):
    try:
        return http_get(url)
    except OSError:
        return None


def test_exec_and_attach_reach_the_tty(cluster, restricted_ns, real_node):
    image = real_node["images"]["telo-session-test"]
    apply(cluster, restricted_ns, entry_configmap("tty", {"main.telo": "print tty entry\n"}),
          session_pod("tty", image, tty=True))
    wait_running(cluster, restricted_ns, "tty")
    out = cluster.kubectl("exec", "-n", restricted_ns, "tty", "--", "echo", "exec-ok").stdout
    assert out.strip() == "exec-ok"
    # kubectl attach -it on a real terminal: a line typed comes back echoed by the app.
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(cluster.kubectl_path, [cluster.kubectl_path, "--kubeconfig", cluster.kubeconfig,
                                        "attach", "-it", "-n", restricted_ns, "tty", "-c", "app"])
    seen = b""
    try:
        deadline = time.monotonic() + 30
        sent = False
        while time.monotonic() < deadline and b"echo: hello-tty" not in seen:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    break
            if not sent and (b"If you don't see a command prompt" in seen or
                             time.monotonic() > deadline - 25):
                os.write(fd, b"hello-tty\r")
                sent = True
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    assert b"echo: hello-tty" in seen, seen[-2000:]


def test_exit_code_is_reported(cluster, restricted_ns, real_node):
    image = real_node["images"]["telo-session-test"]
    apply(cluster, restricted_ns, entry_configmap("exit3", {"main.telo": "print bye\nexit 3\n"}),
          session_pod("exit3", image))
    pod, term = wait_terminated(cluster, restricted_ns, "exit3")
    assert term["exitCode"] == 3, term
    assert "exiting with code 3" in term.get("message", "")
    wait_until(lambda: get_pod(cluster, restricted_ns, "exit3")["status"]["phase"] == "Failed",
               timeout=30, what="phase Failed")


def test_memory_limit_ends_in_oomkilled(cluster, restricted_ns, real_node):
    image = real_node["images"]["telo-session-test"]
    apply(cluster, restricted_ns, entry_configmap("hog", {"main.telo": "memory 64\n"}),
          session_pod("hog", image, limits={"memory": "24Mi", "cpu": "500m"}))
    pod, term = wait_terminated(cluster, restricted_ns, "hog", timeout=120)
    assert term["reason"] == "OOMKilled", term
    assert term["exitCode"] == 137, term


class _Bundles(BaseHTTPRequestHandler):
    payload = b""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def bundle_server(real_node, tmp_path):
    """Serves a tar bundle on the pods' gateway address (a local address of this machine, on the
    real node's bridge): pods reach it, nothing else does."""
    src = tmp_path / "bundle"
    src.mkdir()
    (src / "main.telo").write_text("print fetched entry\nhttp 8080 hello from a fetched bundle\n")
    tar = tmp_path / "bundle.tar.gz"
    subprocess.run(["tar", "-C", str(src), "-czf", str(tar), "main.telo"], check=True)
    _Bundles.payload = tar.read_bytes()
    cidr = os.environ.get("TELO_REAL_POD_CIDR", "10.85.0.0/24")
    gateway = cidr.rsplit(".", 1)[0] + ".1"
    server = ThreadingHTTPServer((gateway, 0), _Bundles)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://%s:%d/bundle.tar.gz" % (gateway, server.server_address[1]), \
        hashlib.sha256(_Bundles.payload).hexdigest()
    server.shutdown()


def _fetch_pod(name, images, url, sha):
    init = {
        "name": "fetch", "image": images["telo-init"], "imagePullPolicy": "IfNotPresent",
        "command": ["telo-fetch", url, sha, "/app"],
        "env": [{"name": "TMPDIR", "value": "/tmp"}],
        "securityContext": HARDENED,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "app", "mountPath": "/app"}, {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"limits": {"memory": "32Mi", "cpu": "500m"}},
    }
    pod = session_pod(name, images["telo-session-test"], init_containers=[init],
                      app_volume={"name": "app", "emptyDir": {}})
    pod["spec"]["volumes"].append({"name": "tmp", "emptyDir": {}})
    return pod


def test_init_container_delivers_a_url_bundle(cluster, restricted_ns, real_node, bundle_server):
    url, sha = bundle_server
    apply(cluster, restricted_ns, _fetch_pod("fetched", real_node["images"], url, sha))
    pod = wait_running(cluster, restricted_ns, "fetched")
    status, body = wait_until(lambda: _try_get("http://%s:8080/" % pod["status"]["podIP"]),
                              timeout=20, what="HTTP answer of the fetched bundle")
    assert body == "hello from a fetched bundle\n"


def test_init_container_rejects_a_wrong_sha256(cluster, restricted_ns, real_node, bundle_server):
    url, _ = bundle_server
    apply(cluster, restricted_ns, _fetch_pod("badsum", real_node["images"], url, "0" * 64))
    pod, term = wait_terminated(cluster, restricted_ns, "badsum", init=True)
    assert term["exitCode"] == 1, term
    assert "sha256 mismatch for %s" % url in term.get("message", ""), term
    wait_until(lambda: get_pod(cluster, restricted_ns, "badsum")["status"]["phase"] == "Failed",
               timeout=30, what="phase Failed")

"""TeloSessions run for real (issue 7): the operator under test (the conftest `operator` factory)
sends session pods to the real node `telo.run/node=real` (TELO_REAL_NODE=1 hack/cluster/up.sh),
where kubelet, containerd and runc start them in a namespace enforcing Pod Security
`restricted`. The session image is the stand-in CLI telo-session-test and the init image is
telo-init (busybox), both from hack/images; the stand-in's entry format (print, http, exit,
memory) is in hack/images/README.md.

Everything the kwok-based tests in test_sessions.py can only simulate happens here: the init
container unpacks the ConfigMap bundle or downloads the URL bundle and checks its digest, the
app serves its declared port on the pod IP, answers on its TTY, exits with its own code and gets
OOM-killed by its own memory limit; the session's status has to tell each story.

The operator is pointed at the real node with its own configuration (nodeSelector
telo.run/node=real, a toleration of the node's taint): the product's knobs, nothing test-only.
Skipped, with the reason, when no Ready node carries the label."""

import base64
import hashlib
import io
import json
import os
import pty
import select
import subprocess
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import wait_until
from test_sessions import apply, assert_failure, condition, get, get_ts, wait_phase

REAL = "telo.run/node"
POD_CIDR = os.environ.get("TELO_REAL_POD_CIDR", "10.85.0.0/24")
# The pods' gateway: a local address of this machine on the real node's bridge, the one address
# of the host that pods reach (there is no kube-proxy and no forwarding).
GATEWAY = POD_CIDR.rsplit(".", 1)[0] + ".1"


def _ready_real_node(cluster):
    proc = cluster.kubectl("get", "nodes", "-l", REAL + "=real", "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    for node in json.loads(proc.stdout)["items"]:
        if any(c["type"] == "Ready" and c["status"] == "True"
               for c in node["status"].get("conditions", [])):
            return node
    return None


@pytest.fixture(scope="module")
def real_node(cluster):
    node = _ready_real_node(cluster)
    if node is None:
        pytest.skip("no Ready node labelled telo.run/node=real: session pods cannot run for real "
                    "(start it as root: TELO_REAL_NODE=1 hack/cluster/up.sh)")
    with open(os.path.join(cluster.dir, "real-node", "images", "refs.json")) as f:
        node["images"] = json.load(f)
    return node


@pytest.fixture
def real(cluster, operator, pod_namespace, real_node):
    """real(*sets) starts the operator with session pods sent to the real node, the local init
    and stand-in images, in this test's namespace (Pod Security `restricted` enforced); returns
    (namespace, operator)."""
    ns = pod_namespace
    cluster.kubectl("label", "namespace", ns, "--overwrite",
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")

    def run(*sets):
        toleration = [{"key": REAL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}]
        return ns, operator("nodeSelector=%s=real" % REAL,
                            "tolerations=" + json.dumps(toleration),
                            "images.init=" + real_node["images"]["telo-init"],
                            "images.default=" + real_node["images"]["telo-session-test"],
                            # An image pull or a cold containerd takes a few seconds; the
                            # conftest default of 15 s is meant for kwok.
                            "startDeadlineSeconds=60", *sets)
    return run


def bundle_tgz(files):
    """A gzip tar holding files ({path: text}), as a user's bundle would."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bundle_configmap(name, files):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "binaryData": {"bundle.tgz": base64.b64encode(bundle_tgz(files)).decode()}}


def real_session(name, entry="app/main.telo", bundle=None, ports=(), **spec):
    body = {"entry": entry, "bundle": bundle or {"configMap": {"name": name + "-bundle"}}}
    if ports:
        body["ports"] = [{"port": p, "protocol": "TCP"} for p in ports]
    body.update(spec)
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": name}, "spec": body}


def curl(url, timeout=5):
    """(exit status, what it printed) of curl on url: what a user checking the app would run.
    A stream cut by --max-time (exit 28) still shows what arrived."""
    proc = subprocess.run(["curl", "-sS", "--max-time", str(timeout), url],
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr if proc.returncode else proc.stdout


def wait_running(cluster, ns, name, timeout=90):
    ts = wait_phase(cluster, ns, name, "Running", timeout=timeout)
    pod = get(cluster, ns, "pod", ts["status"]["podName"])
    return ts, pod


def test_configmap_bundle_is_delivered_and_the_app_serves_its_port(cluster, real, real_node):
    ns, _ = real()
    entry = "print a session on the real node\nhttp 8080 hello from a real session\n"
    apply(cluster, ns, bundle_configmap("web-bundle", {"app/main.telo": entry,
                                                        "app/data/readme.txt": "kept\n"}),
          real_session("web", ports=(8080,), inspect=True))
    wait = cluster.kubectl("wait", "-n", ns, "--for=condition=Ready", "ts/web", "--timeout=90s",
                           check=False)
    assert wait.returncode == 0, wait.stderr
    ts, pod = wait_running(cluster, ns, "web")
    st = ts["status"]
    assert pod["spec"]["nodeName"] == real_node["metadata"]["name"], pod["spec"].get("nodeName")
    assert st["podIP"] == pod["status"]["podIP"] and st["podIP"].startswith(GATEWAY[:-1]), st
    assert condition(ts, "Ready")["status"] == "True"

    # The init container ran and unpacked the ConfigMap's bundle into /app.
    init = pod["status"]["initContainerStatuses"][0]
    assert init["name"] == "fetch-bundle", init
    assert init["state"]["terminated"]["exitCode"] == 0, init
    shown = cluster.kubectl("exec", "-n", ns, st["podName"], "-c", "session", "--",
                            "cat", "/app/app/main.telo", "/app/app/data/readme.txt").stdout
    assert shown == entry + "kept\n", shown

    # The app's answer on the declared port, from this machine over the pod network.
    code, body = wait_until(lambda: (lambda r: r if r[0] == 0 else None)(
        curl("http://%s:8080/hello" % st["podIP"])), timeout=30,
        what="curl http://%s:8080/" % st["podIP"])
    assert body == "hello from a real session\n", body
    # spec.inspect: the debug stream on 9230.
    code, events = curl("http://%s:9230/events" % st["podIP"], timeout=2)
    assert code == 28 and events.startswith("event: hello\n"), (code, events)

    logs = cluster.kubectl("logs", "-n", ns, st["podName"], "-c", "session").stdout
    assert "telo: running /app/app/main.telo" in logs and "GET /hello on port 8080" in logs, logs

    # The hardening held on a real runtime: uid 1000, no capabilities, a read-only root.
    probe = cluster.kubectl("exec", "-n", ns, st["podName"], "-c", "session", "--", "sh", "-c",
                            "id -u; grep CapEff /proc/self/status; touch /x 2>&1",
                            check=False).stdout
    assert probe.startswith("1000\n") and "0000000000000000" in probe, probe
    assert "Read-only file system" in probe, probe

    # Stopping really stops it: the pod goes, the session says Stopped.
    cluster.kubectl("patch", "ts", "web", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":true}}')
    wait_phase(cluster, ns, "web", "Stopped", timeout=60)
    wait_until(lambda: get(cluster, ns, "pod", st["podName"]) is None, timeout=60,
               what="the stopped session's pod to go")


def _attach_and_type(cluster, argv, line, want, timeout=30):
    """Runs kubectl argv on a real pseudo-terminal, types line once the session is there, and
    returns everything read until want appears (or the timeout)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(cluster.kubectl_path, [cluster.kubectl_path, "--kubeconfig", cluster.kubeconfig]
                 + argv)
    seen = b""
    try:
        deadline = time.monotonic() + timeout
        sent = False
        while time.monotonic() < deadline and want not in seen:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    break
            # kubectl attach prints its hint once the stream is up; exec has no hint, so type
            # after a moment either way.
            if not sent and (b"If you don't see a command prompt" in seen or
                             time.monotonic() > deadline - timeout + 3):
                os.write(fd, line + b"\r")
                sent = True
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    return seen


def test_attach_and_exec_reach_the_tty(cluster, real):
    ns, _ = real()
    apply(cluster, ns, bundle_configmap("tty-bundle", {"app/main.telo": "print tty session\n"}),
          real_session("tty"))
    ts, _ = wait_running(cluster, ns, "tty")
    pod = ts["status"]["podName"]
    # kubectl attach -it: the session container's TTY (stdin: true, tty: true), where the
    # stand-in echoes what is typed.
    seen = _attach_and_type(cluster, ["attach", "-it", "-n", ns, pod, "-c", "session"],
                            b"hello-tty", b"echo: hello-tty")
    assert b"echo: hello-tty" in seen, seen[-2000:]
    # kubectl exec -it: a new process with a terminal of its own in the same container.
    seen = _attach_and_type(cluster, ["exec", "-it", "-n", ns, pod, "-c", "session", "--",
                                      "sh", "-c", "tty; read l; echo got:$l"],
                            b"typed", b"got:typed")
    assert b"/dev/pts/" in seen and b"got:typed" in seen, seen[-2000:]
    # The session kept running through both.
    assert get_ts(cluster, ns, "tty")["status"]["phase"] == "Running"


def test_exit_codes_end_the_session(cluster, real):
    ns, _ = real()
    apply(cluster, ns,
          bundle_configmap("three-bundle", {"app/main.telo": "print bye\nexit 3 1\n"}),
          bundle_configmap("zero-bundle", {"app/main.telo": "print done\nexit 0 1\n"}),
          real_session("three"), real_session("zero"))
    ts = wait_phase(cluster, ns, "three", "Failed", timeout=90)
    assert_failure(ts, "AppExited", 'container "session"', "exit code 3",
                   # FallbackToLogsOnError: the app's last words are in the message.
                   "exiting with code 3",
                   "kubectl logs -n %s %s" % (ns, ts["status"]["podName"]))
    assert ts["status"]["exitCode"] == 3, ts["status"]
    ts = wait_phase(cluster, ns, "zero", "Succeeded", timeout=90)
    assert ts["status"].get("exitCode") == 0, ts["status"]
    assert ts["status"]["message"].startswith("the app exited with code 0"), ts["status"]


def test_memory_limit_below_the_apps_use_ends_oomkilled(cluster, real):
    ns, _ = real()
    # The stand-in holds 64 MiB in PID 1 (about twice that while building it); limit 32 MiB.
    apply(cluster, ns, bundle_configmap("hog-bundle", {"app/main.telo": "memory 64\n"}),
          real_session("hog", resources={"memory": "32Mi"}))
    ts = wait_phase(cluster, ns, "hog", "Failed", timeout=120)
    assert_failure(ts, "OOMKilled", 'container "session"', "OOMKilled")
    pod = get(cluster, ns, "pod", ts["status"]["podName"])
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "32Mi"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "OOMKilled" and term["exitCode"] == 137, term


class _Bundle(BaseHTTPRequestHandler):
    """Serves the payload; /stall accepts the request and never answers."""
    payload = b""
    release = threading.Event()

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path.startswith("/stall"):
            self.release.wait(120)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def bundle_server(real_node):
    """An HTTP server on the pods' gateway address serving a bundle; yields (base URL, sha256)."""
    _Bundle.payload = bundle_tgz({"app/main.telo": "print url bundle\nhttp 8080 from a url\n"})
    _Bundle.release.clear()
    server = ThreadingHTTPServer((GATEWAY, 0), _Bundle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield ("http://%s:%d" % (GATEWAY, server.server_address[1]),
               hashlib.sha256(_Bundle.payload).hexdigest())
    finally:
        _Bundle.release.set()
        server.shutdown()
        server.server_close()


def test_url_bundle_is_downloaded_checked_and_run(cluster, real, bundle_server):
    ns, _ = real()
    base, sha = bundle_server
    apply(cluster, ns, real_session("fetched", ports=(8080,), bundle={
        "url": {"url": base + "/bundle.tar.gz", "sha256": sha}}))
    ts, _ = wait_running(cluster, ns, "fetched")
    code, body = wait_until(lambda: (lambda r: r if r[0] == 0 else None)(
        curl("http://%s:8080/" % ts["status"]["podIP"])), timeout=30, what="the fetched app")
    assert body == "from a url\n", body


@pytest.mark.parametrize("case", ["wrong-sha256", "unreachable-url", "stalled-download"])
def test_url_bundle_failures(cluster, real, bundle_server, case):
    """Bad input the schema cannot see ends in the init container, with the failing step, the
    URL and the exit code in the message, and the operator keeps serving other sessions."""
    base, sha = bundle_server
    sets = ()
    if case == "wrong-sha256":
        url, digest = base + "/bundle.tar.gz", "0" * 64
        words = ["bundle sha256 mismatch for " + url, "spec.bundle.url.sha256 is " + "0" * 64,
                 "but the download is " + sha, "exit code 67"]
    elif case == "unreachable-url":
        url, digest = "http://%s:1/bundle.tar.gz" % GATEWAY, sha
        words = ["cannot download the bundle from " + url, "Connection refused", "exit code 66"]
    else:
        # A server that never answers: the download's own timeout (the start deadline less
        # 15 s, here 25 s of 40) ends it with its message, before StartTimeout would.
        url, digest = base + "/stall", sha
        words = ["cannot download the bundle from " + url, "did not finish within 25 s",
                 "exit code 66"]
        sets = ("startDeadlineSeconds=40",)
    ns, _ = real(*sets)
    apply(cluster, ns, bundle_configmap("ok-bundle", {"app/main.telo": "print fine\n"}),
          real_session("fetch", bundle={"url": {"url": url, "sha256": digest}}),
          real_session("ok"))
    ts = wait_phase(cluster, ns, "fetch", "Failed", timeout=90)
    assert_failure(ts, "BundleFetchFailed", 'init container "fetch-bundle"', *words,
                   "kubectl logs -n %s %s -c fetch-bundle" % (ns, ts["status"]["podName"]))
    # The app never started.
    pod = get(cluster, ns, "pod", ts["status"]["podName"])
    assert "running" not in pod["status"]["containerStatuses"][0]["state"], pod["status"]
    wait_phase(cluster, ns, "ok", "Running", timeout=60)

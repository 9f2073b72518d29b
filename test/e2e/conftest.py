"""E2E harness: one real local control plane per test session (hack/cluster/up.sh), reused
when already running, and a fresh namespace per test. Tests talk to it with kubectl and the
official Python client, the tools users use."""

import json
import os
import queue
import re
import select
import socket
import subprocess
import threading
import time
import uuid

import pytest
from kubernetes import client as kclient
from kubernetes import config as kconfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _cluster_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("TELO_CLUSTER_DIR") or os.path.join(cache, "telo-operator", "cluster")


def _tool_dir(kind):
    return subprocess.run([os.path.join(ROOT, "hack", "build-tools.sh"), "--print-dir", kind],
                          check=True, capture_output=True, text=True).stdout.strip()


class Cluster:
    """What a test needs to reach the cluster: paths, and a kubectl that raises with its stderr."""

    def __init__(self):
        self.dir = _cluster_dir()
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.kubectl_path = os.path.join(_tool_dir("k8s"), "kubectl")
        self.etcdctl_path = os.path.join(_tool_dir("etcd"), "etcdctl")
        self.etcd_endpoint = "http://127.0.0.1:%s" % os.environ.get("TELO_ETCD_PORT", "23790")
        self.log_dir = os.path.join(self.dir, "logs")

    def kubectl(self, *args, input=None, check=True, timeout=120):
        proc = subprocess.run([self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("kubectl %s failed (exit %d): %s" %
                                 (" ".join(args), proc.returncode, proc.stderr.strip()))
        return proc

    def kubectl_json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def script(self, name, *args, check=True, timeout=600):
        proc = subprocess.run([os.path.join(ROOT, "hack", "cluster", name), *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("hack/cluster/%s %s failed (exit %d): %s" %
                                 (name, " ".join(args), proc.returncode, proc.stderr[-3000:]))
        return proc


def wait_until(predicate, timeout=60, interval=0.25, what="condition"):
    """Polls predicate until it returns a truthy value, which is returned; fails after timeout
    with the last value seen, so a failure says what the cluster looked like."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    # TELO_E2E_AS_IS=1 runs against the cluster exactly as it is, without starting what is
    # missing: that is how we check a test fails when its component is stopped.
    if not os.environ.get("TELO_E2E_AS_IS"):
        c.script("up.sh")
    return c


@pytest.fixture(scope="session")
def api(cluster):
    """The official Python client configured from the cluster's admin kubeconfig."""
    cfg = kclient.Configuration()
    kconfig.load_kube_config(config_file=cluster.kubeconfig, client_configuration=cfg)
    return kclient.ApiClient(cfg)


def wait_for_default_service_account(cluster, namespace):
    """Pods can only be created once the serviceaccount controller made the namespace's default
    ServiceAccount (the ServiceAccount admission plugin rejects them before that). Right after an
    API server restart the controller-manager's informers may still be backing off (a minute or
    more after several restarts): past 20 s the test creates the ServiceAccount itself, as the
    controller would, and the controller later finds it there."""
    def exists():
        return cluster.kubectl("get", "serviceaccount", "default", "-n", namespace,
                               check=False).returncode == 0
    try:
        wait_until(exists, timeout=20, what="the default ServiceAccount in %s" % namespace)
    except AssertionError:
        cluster.kubectl("create", "serviceaccount", "default", "-n", namespace, check=False)
        wait_until(exists, timeout=10, what="the default ServiceAccount in %s" % namespace)


@pytest.fixture
def namespace(cluster, request):
    """A fresh namespace for one test, deleted afterwards (without waiting for it to go)."""
    # Parametrized test names carry "[...]": keep only what a DNS label allows.
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:30].strip("-")
    name = "e2e-%s-%s" % (base, uuid.uuid4().hex[:6])
    cluster.kubectl("create", "namespace", name)
    # The controller-manager publishes kube-root-ca.crt into every new namespace a moment later;
    # tests that list or watch ConfigMaps count it, so wait for it rather than race it.
    # Best effort: right after an API server restart the controller-manager may still be backing
    # off; a test that needs the ConfigMap then fails on its own assertion, one that does not
    # goes on.
    try:
        wait_until(lambda: cluster.kubectl("get", "configmap", "kube-root-ca.crt", "-n", name,
                                           check=False).returncode == 0,
                   timeout=30, what="kube-root-ca.crt in %s" % name)
    except AssertionError:
        pass
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def pod_namespace(cluster, namespace):
    """A fresh namespace in which pods can be created right away."""
    wait_for_default_service_account(cluster, namespace)
    return namespace


class LineReader:
    """A command running in the background whose stdout lines are collected by a thread;
    expect() waits for a line matching a predicate and remembers every line seen."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, predicate, timeout=30, what="a line"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError("timed out after %ss waiting for %s; seen: %s; stderr: %s" %
                             (timeout, what, self.seen[-20:], self.stderr_tail()))

    def stderr_tail(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read()[-2000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def pytest_collection_modifyitems(config, items):
    """Tests that stop or restart cluster components run after all the others (stable order
    otherwise), so a restart cannot disturb a test that is not about it."""
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


CRD_FILE = os.path.join(ROOT, "crds", "telo.run_telosessions.yaml")
CRD_NAME = "telosessions.telo.run"


@pytest.fixture(scope="session")
def crd(cluster):
    """The TeloSession CRD from crds/, installed once per test session (server-side apply, so it
    also updates an older copy) and Established; returns the CRD's name."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD_FILE)
    # Not `kubectl wait`: on a CRD created a moment ago, status.conditions can still be null, and
    # kubectl wait then exits at once with ".status.conditions accessor error" instead of waiting.
    wait_until(lambda: cluster.kubectl(
        "get", "crd/" + CRD_NAME, "-o",
        'jsonpath={.status.conditions[?(@.type=="Established")].status}').stdout == "True",
        timeout=60, what="the CRD to be Established")
    # Established means the API serves the resource; discovery and the OpenAPI document that
    # kubectl explain reads follow shortly after.
    wait_until(lambda: cluster.kubectl("get", "telosessions", "-A", check=False).returncode == 0,
               timeout=30, what="telosessions in discovery")
    return CRD_NAME


# --- the operator under test ---------------------------------------------------------------------

import signal  # noqa: E402  (kept with the fixture that uses it)

# TELO_BIN_DIR may be relative to the repository (TELO_BIN_DIR=build-asan/bin).
OPERATOR_BIN_DIR = os.path.join(ROOT, os.environ.get("TELO_BIN_DIR") or os.path.join("build", "bin"))
OPERATOR_KUBECONFIG = os.environ.get("TELO_E2E_OPERATOR_KUBECONFIG")
OPERATOR_ARGS = os.environ.get("TELO_E2E_OPERATOR_ARGS", "").split()
# The real node's pod network (hack/cluster/lib.sh real_pod_cidr): the only pod addresses on this
# machine, so the only ones any operator of the suite may probe (reachability.podCIDRs).
REAL_POD_CIDR = os.environ.get("TELO_REAL_POD_CIDR", "10.85.0.0/24")


def _options(argv):
    """(name, value) of each --name value / --name=value option of a command line."""
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if eq:
            yield name, value
        elif i + 1 < len(argv):
            yield name, argv[i + 1]
            i += 1
        i += 1


def _watched_namespaces(pid, argv):
    """The namespaces a `telo-operator run` command line watches: from its last
    `--set namespaces=...`, else its --config file's `namespaces`; None means every namespace.
    The file is read through /proc/PID, so an operator in a container (a chart's pod on the real
    node) is judged by its own config, not taken for one that watches everything."""
    watched = None
    for name, value in _options(argv):
        if name == "--config":
            path = (os.path.join("/proc/%s/root" % pid, value.lstrip("/")) if value.startswith("/")
                    else os.path.join("/proc/%s/cwd" % pid, value))
            try:
                import yaml
                with open(path) as f:
                    ns = (yaml.safe_load(f) or {}).get("namespaces")
                watched = [ns] if isinstance(ns, str) else ns or None
            except (OSError, ValueError, AttributeError):
                watched = None
    for name, value in _options(argv):
        if name == "--set" and value.startswith("namespaces="):
            watched = [n for n in value[len("namespaces="):].split(",") if n] or None
    return watched


def foreign_operators(own_pids, namespace):
    """`telo-operator run` processes we did not start that watch namespace (every namespace when
    they name none), e.g. the one `make run` leaves running: they would reconcile the test's
    sessions too, and two operators with different settings fight over the children."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in own_pids:
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) != "telo-operator" or "run" not in argv[1:2]:
            continue
        watched = _watched_namespaces(pid, argv)
        if watched is None or namespace in watched:
            found.append("pid %s: %s" % (pid, " ".join(argv)))
    return found


class TcpProxy:
    """A TCP proxy to target on a free port of bind_host, whose connections a test can cut:
    to drop the gateway's upstream without touching the shared API server, or to put a loopback
    server where pods on the real node reach it (pod_reachable_host)."""

    def __init__(self, target_host, target_port, bind_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.create_server((bind_host, 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [])
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (b if s is a else a).sendall(data)
        except OSError:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def drop_all(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(conns)

    def close(self):
        self.listener.close()
        self.drop_all()


def run_tool(*argv, timeout=120):
    """Runs a command-line tool (umoci, skopeo) of a test; fails the test with the end of its
    stderr when it exits non-zero."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, "%s exited %d: %s" % (argv[0], proc.returncode,
                                                     proc.stderr[-2000:])


def http_get(url):
    """(status, body) of a GET; (0, error) when nothing answers."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


class Operator:
    """One `telo-operator run` against the cluster's admin kubeconfig, watching one namespace,
    its health/metrics server on a free loopback port, its log in a file."""

    def __init__(self, cluster, namespace, log_path, sets=(), args=()):
        self.cluster = cluster
        self.namespace = namespace
        self.log_path = log_path
        self.sets = list(sets)
        self.args = list(args)
        self.proc = None
        self.port = None
        self.returncodes = []

    def argv(self):
        # TELO_E2E_OPERATOR_KUBECONFIG runs the operator under another identity (test_rbac.py:
        # its ServiceAccount's token), TELO_E2E_OPERATOR_ARGS adds arguments (--leader-elect).
        return [os.path.join(OPERATOR_BIN_DIR, "telo-operator"), "run",
                "--kubeconfig", OPERATOR_KUBECONFIG or self.cluster.kubeconfig,
                "--http-bind-address", "127.0.0.1:0"] + self.settings()

    def settings(self):
        """The arguments after where it runs: the test's namespace, the short start deadline,
        TELO_E2E_OPERATOR_ARGS, the test's --set settings and arguments."""
        argv = ["--set", "namespaces=%s" % self.namespace,
                "--set", "startDeadlineSeconds=15",
                # Reachability probes only the real node's pods: kwok's fake pod IPs
                # (10.244.0.0/16) would be routed off this machine.
                "--set", "reachability.podCIDRs=" + REAL_POD_CIDR] + OPERATOR_ARGS
        for s in self.sets:
            argv += ["--set", s]
        return argv + self.args

    def start(self, timeout=30):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        log = open(self.log_path, "a")
        log.write("--- %s\n" % " ".join(self.argv()))
        log.flush()
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()

        def port():
            if self.proc.poll() is not None:
                raise AssertionError("telo-operator exited %s at start:\n%s" %
                                     (self.proc.returncode, self.log_tail()))
            with open(self.log_path) as f:
                f.seek(offset)
                # logfmt, or JSON with --log-format=json (test_logs.py)
                m = re.search(r'msg="serving health and metrics".* port=(\d+)|'
                              r'"msg":"serving health and metrics".*"port":(\d+)', f.read())
            return int(m.group(1) or m.group(2)) if m else None

        self.port = wait_until(port, timeout=timeout, interval=0.05, what="the operator's port")
        wait_until(lambda: self.get("/readyz")[0] == 200, timeout=timeout, interval=0.1,
                   what="the operator's /readyz")
        return self

    def get(self, path):
        """(status, body) of GET path on the health/metrics server; (0, error) if unreachable."""
        return http_get("http://127.0.0.1:%d%s" % (self.port, path))

    def metric(self, name, labels=None):
        """The sum of the samples of one metric family line name{...}, matching labels."""
        status, body = self.get("/metrics")
        assert status == 200, body
        total = 0.0
        for line in body.splitlines():
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
            if not m or m.group(1) != name:
                continue
            if labels and not all('%s="%s"' % kv in (m.group(2) or "") for kv in labels.items()):
                continue
            total += float(m.group(3))
        return total

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=45):
        """SIGTERM, and the exit status (the operator drains and exits 0)."""
        if self.running:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.returncodes.append("SIGTERM ignored for %ds" % timeout)
                return None
            self.returncodes.append(self.proc.returncode)
        return self.proc.returncode if self.proc else None

    def kill(self):
        """SIGKILL: no draining, no goodbye."""
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode

    def pause(self):
        """SIGSTOP: the process holds still (its watches' events pile up unread) until resume()."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, sets=None, args=None):
        self.stop()
        if sets is not None:
            self.sets = list(sets)
        if args is not None:
            self.args = list(args)
        return self.start()

    def log_tail(self, lines=60):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return "(no log: %s)" % e


# --- the operator in-cluster (TELO_E2E_OPERATOR=in-cluster) -----------------------------------

OPERATOR_MODES = ("process", "in-cluster")
OPERATOR_MODE = os.environ.get("TELO_E2E_OPERATOR") or "process"
IN_CLUSTER = OPERATOR_MODE == "in-cluster"
# The operator runs as this ServiceAccount (config/rbac/) when it runs in-cluster, or when
# TELO_E2E_OPERATOR_KUBECONFIG holds its token (test_rbac.py): a test that widens what the
# operator does (a build namespace, a Lease elsewhere) binds the documented roles there for it.
SA_NAMESPACE = "telo-system"
SA_NAME = "telo-operator"
SA_USER = "system:serviceaccount:%s:%s" % (SA_NAMESPACE, SA_NAME)
# The gateway's own ServiceAccount (config/rbac/: the gateway's rules only), for the in-cluster
# gateway and for TELO_E2E_GATEWAY_KUBECONFIG (test_rbac.py's run of the gateway's tests).
GATEWAY_SA_NAME = "telo-operator-gateway"
GATEWAY_SA_USER = "system:serviceaccount:%s:%s" % (SA_NAMESPACE, GATEWAY_SA_NAME)
AS_SERVICE_ACCOUNT = IN_CLUSTER or bool(OPERATOR_KUBECONFIG)
REAL_NODE_LABEL = {"telo.run/node": "real"}
REAL_NODE_TOLERATION = {"key": "telo.run/node", "operator": "Equal", "value": "real",
                        "effect": "NoSchedule"}
# The port the in-cluster operator serves /healthz, /readyz and /metrics on, in its own pod.
IN_CLUSTER_HTTP_PORT = 8080


def pytest_configure(config):
    if OPERATOR_MODE not in OPERATOR_MODES:
        raise pytest.UsageError("TELO_E2E_OPERATOR=%s: want one of %s" %
                                (OPERATOR_MODE, ", ".join(OPERATOR_MODES)))


def audit_events(cluster, user, since):
    """The API server's audit records (ResponseComplete) of one user's requests since an RFC 3339
    time: its own record of every request, not our reading of what the client sent."""
    out = []
    needle = '"username":"%s"' % user
    for name in os.listdir(cluster.log_dir):
        if not name.startswith("audit"):
            continue
        with open(os.path.join(cluster.log_dir, name), errors="replace") as f:
            for line in f:
                if needle not in line:
                    continue
                e = json.loads(line)
                if (e.get("stage") == "ResponseComplete" and e["user"]["username"] == user
                        and e.get("requestReceivedTimestamp", "") >= since):
                    out.append(e)
    return out


def rfc3339_now():
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def pod_reachable_host(cluster):
    """The address at which the operator under test reaches a server a test starts on this
    machine: loopback for the process; in-cluster, the real node's own address (pods may not
    reach the host's loopback, hack/cluster/real-node.sh), where a test binds its server or a
    TcpProxy to a loopback one."""
    if not IN_CLUSTER:
        return "127.0.0.1"
    node = cluster.kubectl_json("get", "nodes", "-l", "telo.run/node=real")["items"][0]
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def bind_leader_election(cluster, namespace):
    """The documented leader-election Role (config/rbac/leader_election_role.yaml) and its
    binding to the operator's ServiceAccount, in another namespace than telo-system: what a user
    who passes --leader-election-namespace does too."""
    import yaml
    with open(os.path.join(ROOT, "config", "rbac", "leader_election_role.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": docs}))


class InClusterPlatform:
    """What every in-cluster operator of a test session shares, prepared once: the image of this
    checkout's binaries (hack/image.sh: pushed to the real node's registry and imported into its
    containerd), the ServiceAccount and the documented RBAC (config/rbac/), and the real node's
    crictl, through which stop() sends SIGTERM and reads the exit status as the kubelet would."""

    _shared = None

    @classmethod
    def get(cls, cluster):
        if cls._shared is None:
            cls._shared = cls(cluster)
        return cls._shared

    def __init__(self, cluster):
        nodes = cluster.kubectl_json("get", "nodes", "-l", "telo.run/node=real")["items"]
        if not any(c["type"] == "Ready" and c["status"] == "True"
                   for n in nodes for c in n["status"].get("conditions", [])):
            pytest.fail("TELO_E2E_OPERATOR=in-cluster needs a Ready real node "
                        "(TELO_REAL_NODE=1 hack/cluster/up.sh)", pytrace=False)
        proc = subprocess.run([os.path.join(ROOT, "hack", "image.sh"),
                               os.path.dirname(OPERATOR_BIN_DIR)],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or "imported" not in proc.stderr:
            pytest.fail("hack/image.sh failed (exit %d): %s" % (proc.returncode,
                                                                proc.stderr[-2000:]),
                        pytrace=False)
        self.image = proc.stdout.strip().splitlines()[-1]
        for ns in (SA_NAMESPACE, "telo-builds"):    # where config/rbac/ binds its Roles
            cluster.kubectl("create", "namespace", ns, check=False)
        cluster.kubectl("apply", "-f", os.path.join(ROOT, "config", "rbac"))
        wait_until(lambda: cluster.kubectl("get", "serviceaccount", SA_NAME, "-n", SA_NAMESPACE,
                                           check=False).returncode == 0,
                   timeout=30, what="the operator's ServiceAccount")
        self.crictl_argv = [os.path.join(_tool_dir("cri-tools"), "crictl"),
                            "--runtime-endpoint", "unix://" + os.path.join(
                                cluster.dir, "real-node", "containerd", "containerd.sock")]
        self.since = rfc3339_now()

    def crictl(self, *args, timeout=120):
        return subprocess.run(self.crictl_argv + list(args), capture_output=True, text=True,
                              timeout=timeout)


class RealNodePod:
    """One of this checkout's binaries as a pod on the real node, under the operator's
    ServiceAccount (or another of config/rbac/'s, with its app name label): the way the chart
    runs it, minus the Deployment. restartPolicy Never, so a start is a new pod; end() stops it
    through the container runtime (SIGTERM, SIGKILL after the grace period) and returns the
    process's own exit status."""

    def __init__(self, cluster, name, command, args, port, service_account=SA_NAME,
                 app="telo-operator"):
        self.cluster = cluster
        self.service_account = service_account
        self.app = app
        self.platform = InClusterPlatform.get(cluster)
        self.name = name
        self.command = command
        self.args = list(args)
        self.port = port
        self.ip = None

    def manifest(self, labels):
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": SA_NAMESPACE,
                         "labels": dict(labels, **{"app.kubernetes.io/name": self.app})},
            "spec": {
                "serviceAccountName": self.service_account,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 60,
                "nodeSelector": REAL_NODE_LABEL,
                "tolerations": [REAL_NODE_TOLERATION],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "main", "image": self.platform.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [self.command], "args": self.args,
                    "ports": [{"name": "http", "containerPort": self.port}],
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                }],
            },
        }

    def pod(self):
        proc = self.cluster.kubectl("get", "pod", self.name, "-n", SA_NAMESPACE, "-o", "json",
                                    check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def container(self):
        statuses = ((self.pod() or {}).get("status", {}).get("containerStatuses")) or [{}]
        return statuses[0]

    @property
    def running(self):
        return "running" in self.container().get("state", {})

    def start(self, labels, timeout):
        """Creates the pod and waits until its process runs; returns its IP."""
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps(self.manifest(labels)))

        def ip():
            c = self.container()
            if "terminated" in c.get("state", {}):
                raise AssertionError("pod %s/%s exited %s at start:\n%s" % (
                    SA_NAMESPACE, self.name, c["state"]["terminated"].get("exitCode"),
                    self.logs()))
            if "running" not in c.get("state", {}):
                return None
            return (self.pod() or {}).get("status", {}).get("podIP")

        try:
            self.ip = wait_until(ip, timeout=timeout, interval=0.2,
                                 what="pod %s to run" % self.name)
        except AssertionError as e:
            # Say why: unscheduled (the scheduler's condition, or none when it never looked), or
            # scheduled and not started (the node's container statuses).
            status = (self.pod() or {}).get("status", {})
            raise AssertionError("%s; its status: %s" % (e, json.dumps(
                {k: status.get(k) for k in ("phase", "conditions", "containerStatuses")})))
        return self.ip

    def logs(self, tail=None):
        args = ["--tail=%d" % tail] if tail else []
        return self.cluster.kubectl("logs", self.name, "-n", SA_NAMESPACE, *args,
                                    check=False).stdout

    def end(self, grace):
        """Stops the process (grace 0: SIGKILL at once), deletes the pod, and returns (exit
        status or a crictl error, the whole log)."""
        cid = self.container().get("containerID", "").partition("://")[2]
        rc = None
        if cid:
            stop = self.platform.crictl("stop", "--timeout", str(grace), cid, timeout=grace + 60)
            inspect = self.platform.crictl("inspect", cid)
            if stop.returncode == 0 and inspect.returncode == 0:
                rc = json.loads(inspect.stdout)["status"].get("exitCode")
            else:
                rc = "crictl failed: %s %s" % (stop.stderr.strip(), inspect.stderr.strip())
        log = self.logs()
        self.cluster.kubectl("delete", "pod", self.name, "-n", SA_NAMESPACE, "--grace-period=0",
                             "--force", "--wait=true", check=False)
        return rc, log


class InClusterOperator(Operator):
    """The same operator as a pod on the real node, as users run it: this checkout's image,
    the ServiceAccount telo-system/telo-operator under config/rbac/'s rules, the in-cluster
    config (token, CA, the kubernetes Service), the same settings as the process. Each start is
    a new pod; stop() is SIGTERM through the container runtime, kill() SIGKILL. The log is copied
    to log_path when the pod goes."""

    def __init__(self, cluster, namespace, log_path, sets=(), args=()):
        super().__init__(cluster, namespace, log_path, sets, args)
        self.pod = None
        self.starts = 0

    def argv(self):
        return ["run", "--http-bind-address", "0.0.0.0:%d" % IN_CLUSTER_HTTP_PORT] + self.settings()

    def start(self, timeout=60):
        assert not self.running, "already running"
        self.starts += 1
        self.pod = RealNodePod(self.cluster, "telo-operator-%s-%d" % (self.namespace[-6:],
                                                                     self.starts),
                               "/usr/bin/telo-operator", self.argv(), IN_CLUSTER_HTTP_PORT)
        with open(self.log_path, "a") as log:
            log.write("--- pod %s/%s: %s\n" % (SA_NAMESPACE, self.pod.name, " ".join(self.argv())))
        # The chart's instance label too, so the chart's session NetworkPolicy (release
        # telo-operator) lets this operator's reachability probes in (test_reachability_real_node).
        self.pod.start({"telo.run/e2e-namespace": self.namespace,
                        "app.kubernetes.io/instance": "telo-operator"}, timeout)
        wait_until(lambda: self.get("/readyz")[0] == 200, timeout=timeout, interval=0.1,
                   what="the operator's /readyz")
        return self

    def get(self, path):
        return http_get("http://%s:%d%s" % (self.pod.ip, IN_CLUSTER_HTTP_PORT, path))

    @property
    def running(self):
        return self.pod is not None and self.pod.running

    def _end(self, grace):
        rc, log = self.pod.end(grace)
        with open(self.log_path, "a") as f:
            f.write(log)
        self.pod = None
        return rc

    def stop(self, timeout=45):
        if self.pod is None:
            return None
        was_running = self.running
        rc = self._end(timeout)
        if was_running:
            if rc == 137:
                rc = "SIGTERM ignored for %ds" % timeout
            self.returncodes.append(rc)
        return rc

    def kill(self):
        return self._end(0) if self.pod is not None else None

    def _host_pid(self):
        """The container's process as this machine sees it (the real node runs here)."""
        cid = self.pod.container().get("containerID", "").partition("://")[2]
        inspect = self.pod.platform.crictl("inspect", cid)
        assert inspect.returncode == 0, inspect.stderr
        return json.loads(inspect.stdout)["info"]["pid"]

    def pause(self):
        os.kill(self._host_pid(), signal.SIGSTOP)

    def resume(self):
        os.kill(self._host_pid(), signal.SIGCONT)

    def log_tail(self, lines=60):
        if self.pod is not None:
            return self.pod.logs(lines)
        return super().log_tail(lines)


def new_operator(cluster, namespace, log_path, sets=(), args=()):
    """The operator under test, as TELO_E2E_OPERATOR chooses: a local process (the default) or
    a pod on the real node (in-cluster)."""
    cls = InClusterOperator if IN_CLUSTER else Operator
    return cls(cluster, namespace, log_path, sets, args)


# Whether -k or -m left any test out: the whole-suite checks below hold only for the whole suite.
DESELECTED = []


def pytest_deselected(items):
    DESELECTED.extend(items)


def whole_suite(session):
    """Every test of every test file here is in this run."""
    here = os.path.dirname(os.path.abspath(__file__))
    files = {f for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py")}
    return not DESELECTED and files == {i.path.name for i in session.items}


def rbac_denied(event):
    """A 403 the authorizer gave (a rule missing from config/rbac/), not one an admission step
    gave to an authorized request (a ResourceQuota, a webhook: test_refused_writes.py makes
    those on purpose); the audit record says which in its authorization decision."""
    decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
    return event.get("responseStatus", {}).get("code") == 403 and decision != "allow"


@pytest.fixture(scope="session", autouse=True)
def no_forbidden_requests_in_cluster(request, cluster):
    """In-cluster, the operator's ServiceAccount must never be refused: after the session, the
    audit log holds no 403 for it (a missing rule in config/rbac/ shows up here). When the whole
    suite ran, every verb the manager is granted must show in it as well (a rule no request
    needs shows up here); test_rbac.py's nested run of test_sessions.py checks both otherwise."""
    yield
    if not IN_CLUSTER or InClusterPlatform._shared is None:
        return
    # The gateway's own ServiceAccount (the in-cluster gateway of test_gateway.py) too.
    gateway_events = audit_events(cluster, GATEWAY_SA_USER, InClusterPlatform._shared.since)
    refused = [e for e in gateway_events if rbac_denied(e)]
    assert not refused, "403 for %s:\n%s" % (GATEWAY_SA_USER, "\n".join(
        "%s %s" % (e["verb"], e.get("requestURI")) for e in refused[:20]))
    events = audit_events(cluster, SA_USER, InClusterPlatform._shared.since)
    refused = [e for e in events if rbac_denied(e)]
    assert not refused, "403 for %s:\n%s" % (SA_USER, "\n".join(
        "%s %s" % (e["verb"], e.get("requestURI")) for e in refused[:20]))
    if whole_suite(request.session):
        from test_rbac import check_grants_used, documented_build_rules, documented_rules
        check_grants_used(events, documented_rules(), documented_build_rules())


@pytest.fixture
def operator(cluster, crd, pod_namespace, tmp_path):
    """A factory: operator(*sets, args=()) starts `telo-operator run` (build/bin, or
    $TELO_BIN_DIR) watching only this test's namespace, with startDeadlineSeconds=15 and the
    given `--set key=value` settings, and returns the Operator (stop, kill, restart, port,
    metric). At teardown every operator still running gets SIGTERM and must exit 0; its log tail
    is printed (pytest shows it when the test fails)."""
    started = []
    own = {os.getpid()}

    def start(*sets, args=()):
        others = foreign_operators(own | {op.proc.pid for op in started if op.proc},
                                   pod_namespace)
        if others:
            pytest.fail("another telo-operator watches this test's namespace (every namespace) "
                        "and would reconcile its sessions too; stop it first (make run leaves "
                        "one: kill $(cat %s)):"
                        "\n  %s" % (os.path.join(cluster.dir, "pids", "telo-operator.pid"),
                                    "\n  ".join(others)), pytrace=False)
        if IN_CLUSTER and "--leader-election-namespace" in args:
            bind_leader_election(cluster, args[list(args).index("--leader-election-namespace") + 1])
        op = new_operator(cluster, pod_namespace,
                          str(tmp_path / ("operator-%d.log" % len(started))), sets, args)
        started.append(op)
        return op.start()

    yield start
    bad = []
    for op in started:
        op.stop()
        print("--- telo-operator log (%s), exits %s:\n%s" % (op.log_path, op.returncodes,
                                                            op.log_tail()))
        bad += ["%s exited %s" % (op.log_path, rc) for rc in op.returncodes if rc != 0]
    assert not bad, "telo-operator must exit 0 on SIGTERM: %s" % "; ".join(bad)

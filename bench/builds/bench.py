"""The measuring half of bench/builds/run.sh: image builds on the real node, timed from the
client's apply to Running, beside the same kaniko run by hand on the same context.

  bench.py run --kubeconfig K --operator BIN --refs REFS.json --out RESULT.json [--repeats N]
               [--shared N] [--log-dir DIR]
  bench.py summary RESULT.json...        the table (medians, spread) over every repeat given

`run` sets up what test/e2e/test_real_builds.py sets up (the build registry reached at the real
node's address through a TCP proxy of its own, containerd's hosts.toml for it, the stand-in
pushed as the builds' base image, a build namespace with the push Secret, a session namespace
with the pull Secret) and starts build/bin/telo-operator watching only its namespace. Then, per
repeat, in this order:

  plain   a session whose bundle imports nothing: no build step, the base image runs (the floor
          a cache hit is compared with)
  first   a session with imports no build has seen (a fresh tag): registry check, Job, kaniko,
          push, the session pod from the built image
  hand    the same kaniko on the same context, by hand: the first build's Job pod template
          (init container writing the same Dockerfile, the same executor image and arguments,
          the same push Secret) created as a bare pod, with --destination changed to a tag of
          its own and the context ConfigMap copied; timed from its create to Succeeded
  hit     the first build's imports with another body: the registry has the tag (CacheHit)
  shared  N sessions (10) with imports no build has seen, created at once: one Job, all Running

Every time is this machine's wall clock (CLOCK_REALTIME): watch events stamped when received
(the client's receive time, as clusterloader2 times informers), and kaniko's own log lines as
containerd stamped them (`kubectl logs --timestamps`, nanoseconds), which run on this machine
too. The result's schema is in bench/builds/README.md.
"""

import argparse
import base64
import datetime
import io
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config, watch

SCHEMA = "telo-bench-builds/1"
REAL = "telo.run/node"
TELO_REGISTRY = "https://registry.telo.run"
BUILD_TIMEOUT = 420
WAIT = 600.0


def log(msg):
    print("bench: [%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# --- the registry where pods reach it (as test/e2e/conftest.py's TcpProxy) -----------------------

class TcpProxy:
    def __init__(self, target, bind_host):
        self.target = target
        self.listener = socket.create_server((bind_host, 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            for x in (c, s):
                x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(c, s), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [])
                for s in ready:
                    data = s.recv(1 << 18)
                    if not data:
                        raise OSError("closed")
                    (b if s is a else a).sendall(data)
        except OSError:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self):
        self.listener.close()


# --- watches: every event of the kinds the bench times, stamped on receipt ----------------------

class Recorder:
    """One thread per (kind, namespace) watch; events kept as (t, kind, type, object)."""

    def __init__(self, api):
        self.api = api
        self.events = []
        self.lock = threading.Lock()
        self.stop = False

    def add(self, kind, ns, list_fn):
        ready = threading.Event()
        threading.Thread(target=self._loop, args=(kind, ns, list_fn, ready), daemon=True).start()
        if not ready.wait(30):
            raise SystemExit("bench: the %s watch in %s did not start" % (kind, ns))

    def _loop(self, kind, ns, list_fn, ready):
        rv = None
        while not self.stop:
            try:
                if rv is None:
                    lst = list_fn(ns, _preload_content=False)
                    body = json.loads(lst.data)
                    rv = body["metadata"]["resourceVersion"]
                    now = time.time()
                    with self.lock:
                        for o in body["items"]:
                            self.events.append((now, kind, "LISTED", o))
                    ready.set()
                w = watch.Watch()
                for ev in w.stream(list_fn, ns, resource_version=rv, timeout_seconds=300,
                                   allow_watch_bookmarks=True):
                    now = time.time()
                    o = ev["raw_object"]
                    if ev["type"] == "ERROR":
                        rv = None
                        break
                    rv = o["metadata"].get("resourceVersion", rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    with self.lock:
                        self.events.append((now, kind, ev["type"], o))
                    if self.stop:
                        return
            except Exception as e:  # noqa: BLE001 (the stream broke: watch again)
                if "410" in str(e) or "Expired" in str(e):
                    rv = None
                time.sleep(0.05)

    def first(self, kind, pred, after=0.0):
        """The receive time of the first event of kind whose object satisfies pred, or None."""
        with self.lock:
            evs = list(self.events)
        for t, k, typ, o in evs:
            if k == kind and t >= after and typ != "DELETED" and pred(o):
                return t
        return None

    def objects(self, kind, pred, after=0.0):
        with self.lock:
            evs = list(self.events)
        out = {}
        for t, k, typ, o in evs:
            if k == kind and t >= after and pred(o):
                out.setdefault(o["metadata"]["name"], o)
        return out

    def wait(self, what, fn, timeout=WAIT):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = fn()
            if v is not None:
                return v
            time.sleep(0.02)
        raise TimeoutError("bench: timed out waiting for " + what)


def name_is(n):
    return lambda o: o["metadata"]["name"] == n


def labels(o):
    return o["metadata"].get("labels") or {}


def phase_is(n, phase):
    return lambda o: o["metadata"]["name"] == n and (o.get("status") or {}).get("phase") == phase


def owned_by(n):
    return lambda o: any(r.get("kind") == "TeloSession" and r.get("name") == n
                         for r in o["metadata"].get("ownerReferences") or [])


def and_(*ps):
    return lambda o: all(p(o) for p in ps)


def pod_phase(phase):
    return lambda o: (o.get("status") or {}).get("phase") == phase


def container_state(name, state, init=False):
    key = "initContainerStatuses" if init else "containerStatuses"

    def p(o):
        for c in (o.get("status") or {}).get(key) or []:
            if c.get("name") == name and state in (c.get("state") or {}):
                return True
        return False
    return p


def job_done(o):
    return any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in (o.get("status") or {}).get("conditions") or [])


def job_failed(o):
    return any(c.get("type") == "Failed" and c.get("status") == "True"
               for c in (o.get("status") or {}).get("conditions") or [])


def ts_of(stamp):
    """A containerd log stamp (RFC 3339, nanoseconds) as Unix time."""
    date, frac = stamp.rstrip("Z").split(".") if "." in stamp else (stamp.rstrip("Z"), "0")
    whole = datetime.datetime.fromisoformat(date).replace(tzinfo=datetime.timezone.utc)
    return whole.timestamp() + float("0." + frac)


def kaniko_marks(core, ns, pod):
    """kaniko's own timeline from its log: first line, the RUN step, the push's start and end,
    last line (Unix times), and the log."""
    text = core.read_namespaced_pod_log(pod, ns, container="kaniko", timestamps=True)
    marks, lines = {}, []
    for line in text.splitlines():
        stamp, _, msg = line.partition(" ")
        try:
            t = ts_of(stamp)
        except ValueError:
            continue
        lines.append(msg)
        marks.setdefault("first", t)
        marks["last"] = t
        if "RUN [" in msg or "Running: [" in msg:
            marks.setdefault("run", t)
        if "Pushing image to" in msg:
            marks.setdefault("push", t)
        if "msg=\"Pushed " in msg or "msg=\"Pushed image" in msg:
            marks["pushed"] = t
    return marks, lines


# --- objects ------------------------------------------------------------------------------------

def bundle_tgz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def app(imports, greeting):
    """A Telo manifest the operator reads for its imports; the stand-in prints the greeting and
    runs until stopped."""
    lines = ["#! print %s" % greeting, "kind: Telo.Application", "metadata:", "  name: Bench",
             "  version: 1.0.0"]
    if imports:
        lines.append("imports:")
        lines += ["  %s: %s" % kv for kv in imports]
    return "\n".join(lines) + "\n"


def session_objects(name, imports, greeting):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name + "-bundle"},
          "binaryData": {"bundle.tgz": base64.b64encode(
              bundle_tgz({"app/telo.yaml": app(imports, greeting)})).decode()}}
    ts = {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession", "metadata": {"name": name},
          "spec": {"entry": "app/telo.yaml", "bundle": {"configMap": {"name": name + "-bundle"}}}}
    return cm, ts


def dockerconfig_secret(name, host, auth):
    cfg = json.dumps({"auths": {host: {"auth": auth}}})
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name},
            "data": {".dockerconfigjson": base64.b64encode(cfg.encode()).decode()}}


def span(a, b):
    return None if a is None or b is None else round(b - a, 3)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


# --- the bench ----------------------------------------------------------------------------------

class Bench:
    def __init__(self, a):
        self.a = a
        self.kubeconfig = a.kubeconfig
        self.cluster_dir = os.path.dirname(os.path.abspath(a.kubeconfig))
        self.api = config.new_client_from_config(config_file=a.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)
        self.id = uuid.uuid4().hex[:6]
        self.ns = "bench-builds-" + self.id
        self.bns = "bench-builds-%s-b" % self.id
        self.log_dir = a.log_dir or os.path.dirname(os.path.abspath(a.out))
        self.cleanups = []
        self.op = None

    # -- setup --
    def setup(self):
        with open(self.a.refs) as f:
            self.refs = json.load(f)
        nodes = self.core.list_node(label_selector=REAL + "=real").items
        node = next((n for n in nodes if any(c.type == "Ready" and c.status == "True"
                                             for c in n.status.conditions or [])), None)
        if node is None:
            raise SystemExit("bench: no Ready real node (TELO_REAL_NODE=1 hack/cluster/up.sh)")
        self.node = node.metadata.name
        node_ip = next(x.address for x in node.status.addresses if x.type == "InternalIP")
        with open(os.path.join(self.cluster_dir, "build-registry", "dockerconfig.json")) as f:
            local_host, entry = next(iter(json.load(f)["auths"].items()))
        self.local_host, self.auth = local_host, entry["auth"]
        self.user, self.password = base64.b64decode(self.auth).decode().split(":", 1)
        self.proxy = TcpProxy(("127.0.0.1", int(local_host.rsplit(":", 1)[1])), node_ip)
        self.cleanups.append(self.proxy.close)
        self.host = "%s:%d" % (node_ip, self.proxy.port)
        certs = os.path.join(self.cluster_dir, "real-node", "containerd", "certs.d", self.host)
        os.makedirs(certs, exist_ok=True)
        self.cleanups.append(lambda: shutil.rmtree(certs, ignore_errors=True))
        with open(os.path.join(certs, "hosts.toml"), "w") as f:
            f.write('server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", '
                    '"resolve"]\n' % (self.host, self.host))
        stand_in = self.refs["telo-session-test"]
        tag = stand_in.rsplit(":", 1)[1]
        layout = os.path.join(self.cluster_dir, "real-node", "images", "oci", "telo-session-test")
        base_path = "telo/base/telo-session-test:%s" % tag
        subprocess.run(["skopeo", "copy", "--quiet", "--insecure-policy",
                        "--dest-tls-verify=false", "--dest-creds",
                        "%s:%s" % (self.user, self.password), "oci:%s:%s" % (layout, tag),
                        "docker://%s/%s" % (local_host, base_path)],
                       check=True, capture_output=True, timeout=120)
        self.base = "%s/%s" % (self.host, base_path)
        self.repository = "%s/telo/apps" % self.host
        for ns, level in ((self.ns, "restricted"), (self.bns, "baseline")):
            self.core.create_namespace({"metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest"}}})
            self.cleanups.append(lambda ns=ns: self.core.delete_namespace(ns))
        self.core.create_namespaced_secret(self.bns, dockerconfig_secret("push", self.host,
                                                                         self.auth))
        self.core.create_namespaced_secret(self.ns, dockerconfig_secret("pull", self.host,
                                                                        self.auth))
        self.rec = Recorder(self.api)
        self.cleanups.append(lambda: setattr(self.rec, "stop", True))
        crd = lambda ns, **kw: self.co.list_namespaced_custom_object(  # noqa: E731
            "telo.run", "v1alpha1", ns, "telosessions", **kw)
        self.rec.add("sessions", self.ns, crd)
        self.rec.add("pods", self.ns, self.core.list_namespaced_pod)
        self.rec.add("bpods", self.bns, self.core.list_namespaced_pod)
        self.rec.add("jobs", self.bns, self.batch.list_namespaced_job)
        self.rec.add("cms", self.bns, self.core.list_namespaced_config_map)
        self.start_operator()

    def start_operator(self):
        tol = json.dumps([{"key": REAL, "operator": "Equal", "value": "real",
                           "effect": "NoSchedule"}])
        sets = ["namespaces=" + self.ns, "nodeSelector=%s=real" % REAL, "tolerations=" + tol,
                "reachability.podCIDRs=" + os.environ.get("TELO_REAL_POD_CIDR", "10.85.0.0/24"),
                "images.init=" + self.refs["telo-init"], "images.default=" + self.base,
                "imagePullSecret=pull", "startDeadlineSeconds=300",
                # Small pods: the real node has 2 CPUs, shared with the other tests' pods, and a
                # repeat runs 14 sessions at once (the default ceiling, 500m, fits 2-4).
                "limits.cpu=" + os.environ.get("TELO_BENCH_CPU", "20m"),
                "limits.memory=" + os.environ.get("TELO_BENCH_MEMORY", "64Mi"),
                "build.repository=" + self.repository, "build.namespace=" + self.bns,
                "build.pushSecret=push", "build.insecureRegistry=true",
                "build.builderImage=" + self.refs["kaniko"],
                "build.timeoutSeconds=%d" % BUILD_TIMEOUT,
                "build.nodeSelector=%s=real" % REAL, "build.tolerations=" + tol]
        argv = [self.a.operator, "run", "--kubeconfig", self.kubeconfig, "--http-bind-address",
                "127.0.0.1:%d" % self.a.metrics_port, "--log-level",
                os.environ.get("TELO_BENCH_LOG_LEVEL", "info")]
        for s in sets:
            argv += ["--set", s]
        self.op_log = os.path.join(self.log_dir, "operator.log")
        logf = open(self.op_log, "w")
        self.op = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT)
        self.cleanups.append(self.stop_operator)
        for _ in range(150):
            if self.op.poll() is not None:
                raise SystemExit("bench: telo-operator exited: " + self.op_log)
            try:
                import urllib.request
                urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.a.metrics_port,
                                       timeout=1).read()
                return
            except Exception:  # noqa: BLE001
                time.sleep(0.2)
        raise SystemExit("bench: telo-operator not ready: " + self.op_log)

    def metrics(self):
        import urllib.request
        try:
            return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.a.metrics_port,
                                          timeout=5).read().decode()
        except Exception:  # noqa: BLE001
            return ""

    def stop_operator(self):
        if self.op and self.op.poll() is None:
            self.op.terminate()
            try:
                self.op.wait(10)
            except subprocess.TimeoutExpired:
                self.op.kill()

    def cleanup(self):
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                log("clean-up: %s" % e)

    # -- one session --
    def apply_session(self, name, imports, greeting):
        cm, ts = session_objects(name, imports, greeting)
        self.core.create_namespaced_config_map(self.ns, cm)
        t = time.time()
        self.co.create_namespaced_custom_object("telo.run", "v1alpha1", self.ns, "telosessions",
                                                ts, _preload_content=False).read()
        return t

    def wait_session(self, name, after):
        def ended():
            t = self.rec.first("sessions", lambda o: o["metadata"]["name"] == name and
                               (o.get("status") or {}).get("phase") in ("Failed", "Succeeded"),
                               after)
            if t is not None:
                ts = self.co.get_namespaced_custom_object("telo.run", "v1alpha1", self.ns,
                                                          "telosessions", name)
                raise RuntimeError("session %s ended: %s" % (name, json.dumps(
                    ts.get("status", {}))[-1500:]))
            return self.rec.first("sessions", phase_is(name, "Running"), after)
        return self.rec.wait("session %s Running" % name, ended)

    def session_times(self, name, t0):
        r = self.rec
        t = {"apply": t0,
             "building": r.first("sessions", phase_is(name, "Building"), t0),
             "pod": r.first("pods", owned_by(name), t0),
             "pod_running": r.first("pods", and_(owned_by(name), pod_phase("Running")), t0),
             "running": r.first("sessions", phase_is(name, "Running"), t0)}
        return t

    def image_of(self, name):
        ts = self.co.get_namespaced_custom_object("telo.run", "v1alpha1", self.ns, "telosessions",
                                                  name)
        return (ts.get("status") or {}).get("image") or {}

    # -- the paths --
    def plain(self, r):
        name = "r%d-plain" % r
        t0 = self.apply_session(name, [], "plain %d" % r)
        self.wait_session(name, t0)
        t = self.session_times(name, t0)
        return {"session": name, "total_s": span(t0, t["running"]),
                "phases": {"apply_to_pod_s": span(t0, t["pod"]),
                           "pod_start_s": span(t["pod"], t["pod_running"]),
                           "pod_running_to_session_running_s": span(t["pod_running"],
                                                                     t["running"])},
                "image_reason": self.image_of(name).get("reason")}

    def build_times(self, tag, t0, pod_pred):
        r = self.rec
        t = {"job": r.first("jobs", lambda o: labels(o).get("telo.run/tag") == tag, t0),
             "context_cm": r.first("cms", lambda o: labels(o).get("telo.run/tag") == tag, t0),
             "bpod": r.first("bpods", pod_pred, t0)}
        t["bpod_scheduled"] = r.first("bpods", and_(pod_pred, lambda o: any(
            c.get("type") == "PodScheduled" and c.get("status") == "True"
            for c in (o.get("status") or {}).get("conditions") or [])), t0)
        t["context_done"] = r.first("bpods", and_(pod_pred, container_state(
            "context", "terminated", init=True)), t0)
        t["kaniko_running_seen"] = r.first("bpods", and_(pod_pred, container_state(
            "kaniko", "running")), t0)
        t["bpod_succeeded"] = r.first("bpods", and_(pod_pred, pod_phase("Succeeded")), t0)
        t["job_complete"] = r.first("jobs", and_(lambda o: labels(o).get("telo.run/tag") == tag,
                                                 job_done), t0)
        return t

    def first(self, r):
        name = "r%d-first" % r
        run_id = "%s-%d" % (self.id, r)
        imports = [("Http", "std/http-server@0.15.0"), ("Run", "bench/run-%s@1.0.0" % run_id)]
        t0 = self.apply_session(name, imports, "first " + run_id)
        self.wait_session(name, t0)
        img = self.image_of(name)
        tag = img.get("tag")
        if img.get("reason") != "Built":
            raise RuntimeError("%s: expected a build, got %s" % (name, img))
        is_build = lambda o: labels(o).get("telo.run/tag") == tag  # noqa: E731
        t = self.session_times(name, t0)
        t.update(self.build_times(tag, t0, is_build))
        bpod = next(iter(self.rec.objects("bpods", is_build, t0)))
        k, lines = kaniko_marks(self.core, self.bns, bpod)
        with open(os.path.join(self.log_dir, "kaniko-%s.log" % name), "w") as f:
            f.write("\n".join(lines) + "\n")
        res = self.build_result(name, t0, t, k)
        res.update({"session": name, "tag": tag, "image_reason": img.get("reason"),
                    "total_s": span(t0, t["running"])})
        res["phases"].update({
            "apply_to_job_s": span(t0, t["job"]),
            "job_to_build_pod_s": span(t["job"], t["bpod"]),
            "job_to_context_configmap_s": span(t["job"], t["context_cm"]),
            "build_pod_succeeded_to_job_complete_s": span(t["bpod_succeeded"],
                                                          t["job_complete"]),
            "job_complete_to_session_pod_s": span(t["job_complete"], t["pod"]),
            "session_pod_start_s": span(t["pod"], t["pod_running"]),
            "pod_running_to_session_running_s": span(t["pod_running"], t["running"])})
        self.last = {"tag": tag, "imports": imports, "run_id": run_id, "bpod": bpod}
        return res

    @staticmethod
    def build_result(name, t0, t, k):
        return {"times": {key: span(t0, v) for key, v in t.items() if key != "apply"},
                "kaniko_log": {key: span(t0, v) for key, v in k.items()},
                "phases": {
                    "build_pod_to_scheduled_s": span(t["bpod"], t.get("bpod_scheduled")),
                    "build_pod_to_kaniko_start_s": span(t["bpod"], k.get("first")),
                    "context_init_done_seen_s": span(t["bpod"], t.get("context_done")),
                    "kaniko_start_to_push_s": span(k.get("first"), k.get("push")),
                    "push_s": span(k.get("push"), k.get("pushed")),
                    "pushed_to_last_line_s": span(k.get("pushed"), k.get("last")),
                    "kaniko_last_line_to_pod_succeeded_s": span(k.get("last"),
                                                                t.get("bpod_succeeded")),
                    "kaniko_log_s": span(k.get("first"), k.get("last"))}}

    def hand(self, r):
        """The first build's pod, by hand: the Job's pod template as a bare pod, its context
        ConfigMap copied, another destination tag."""
        tag = self.last["tag"]
        job = self.batch.read_namespaced_job("telo-build-" + tag, self.bns)
        spec = self.api.sanitize_for_serialization(job.spec.template.spec)
        cm = self.core.read_namespaced_config_map("telo-build-" + tag, self.bns)
        name = "hand-r%d-%s" % (r, self.id)
        self.core.create_namespaced_config_map(self.bns, {
            "metadata": {"name": name}, "binaryData": cm.binary_data})
        for v in spec["volumes"]:
            if v.get("configMap", {}).get("name") == "telo-build-" + tag:
                v["configMap"]["name"] = name
        dest = "%s:hand-%s-r%d" % (self.repository, self.id, r)
        for c in spec["containers"]:
            c["args"] = [("--destination=" + dest) if a.startswith("--destination=") else a
                         for a in c.get("args") or []]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"bench.telo.run/hand": "true"}},
               "spec": spec}
        t0 = time.time()
        self.core.create_namespaced_pod(self.bns, pod, _preload_content=False).read()
        is_hand = name_is(name)

        def done():
            if self.rec.first("bpods", and_(is_hand, pod_phase("Failed")), t0):
                raise RuntimeError("the hand-run kaniko pod %s failed" % name)
            return self.rec.first("bpods", and_(is_hand, pod_phase("Succeeded")), t0)
        self.rec.wait("hand pod %s Succeeded" % name, done)
        t = self.build_times("-", t0, is_hand)
        t["job"] = t["context_cm"] = t["job_complete"] = None
        k, lines = kaniko_marks(self.core, self.bns, name)
        with open(os.path.join(self.log_dir, "kaniko-%s.log" % name), "w") as f:
            f.write("\n".join(lines) + "\n")
        res = self.build_result(name, t0, t, k)
        res.update({"pod": name, "destination": dest, "total_s": span(t0, t["bpod_succeeded"])})
        self.core.delete_namespaced_pod(name, self.bns, grace_period_seconds=0)
        return res

    def hit(self, r):
        name = "r%d-hit" % r
        t0 = self.apply_session(name, self.last["imports"], "hit " + self.last["run_id"])
        self.wait_session(name, t0)
        img = self.image_of(name)
        t = self.session_times(name, t0)
        return {"session": name, "tag": img.get("tag"), "image_reason": img.get("reason"),
                "total_s": span(t0, t["running"]),
                "phases": {"apply_to_pod_s": span(t0, t["pod"]),
                           "pod_start_s": span(t["pod"], t["pod_running"]),
                           "pod_running_to_session_running_s": span(t["pod_running"],
                                                                     t["running"])}}

    def shared(self, r, n):
        run_id = "%s-%d-shared" % (self.id, r)
        imports = [("Http", "std/http-server@0.15.0"), ("Run", "bench/run-%s@1.0.0" % run_id)]
        names = ["r%d-s%02d" % (r, i) for i in range(n)]
        objs = [session_objects(nm, imports, "shared %s %d" % (run_id, i))
                for i, nm in enumerate(names)]
        for cm, _ in objs:
            self.core.create_namespaced_config_map(self.ns, cm)
        jobs_before = set(self.rec.objects("jobs", lambda o: True))
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=n) as pool:
            list(pool.map(lambda o: self.co.create_namespaced_custom_object(
                "telo.run", "v1alpha1", self.ns, "telosessions", o[1],
                _preload_content=False).read(), objs))
        t_created = time.time()
        ends = [self.wait_session(nm, t0) for nm in names]
        imgs = [self.image_of(nm) for nm in names]
        tags = sorted({i.get("tag") for i in imgs})
        jobs = sorted(set(self.rec.objects("jobs", lambda o: True, t0)) - jobs_before)
        tag = tags[0] if len(tags) == 1 else None
        t = self.build_times(tag, t0, lambda o: labels(o).get("telo.run/tag") == tag) \
            if tag else {}
        running = sorted(e - t0 for e in ends)
        return {"sessions": n, "tags": tags, "jobs": jobs, "jobs_created": len(jobs),
                "reasons": sorted({i.get("reason") for i in imgs}),
                "created_s": span(t0, t_created),
                "all_running_s": round(running[-1], 3),
                "first_running_s": round(running[0], 3),
                "p50_running_s": round(statistics.median(running), 3),
                "running_s": [round(x, 3) for x in running],
                "times": {k: span(t0, v) for k, v in t.items()}}

    def clear(self, r):
        """Deletes the repeat's sessions and waits for their pods to go: a quiet next repeat."""
        self.co.delete_collection_namespaced_custom_object("telo.run", "v1alpha1", self.ns,
                                                           "telosessions")
        deadline = time.time() + 120
        while time.time() < deadline:
            if not self.core.list_namespaced_pod(self.ns).items:
                return
            time.sleep(0.5)
        log("repeat %d: session pods still there after 120 s" % r)

    def raw(self, r):
        """The plain session's pod, created by hand as a bare pod: what the node takes to run a
        pod of that shape (init container, session container), without the operator."""
        src = self.rec.objects("pods", owned_by("r%d-plain" % r))
        pod = self.core.read_namespaced_pod(next(iter(src)), self.ns)
        spec = self.api.sanitize_for_serialization(pod.spec)
        for k in ("nodeName",):
            spec.pop(k, None)
        name = "raw-r%d" % r
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"bench.telo.run/raw": "true"}},
                "spec": spec}
        t0 = time.time()
        self.core.create_namespaced_pod(self.ns, body, _preload_content=False).read()
        t_run = self.rec.wait("raw pod %s Running" % name, lambda: self.rec.first(
            "pods", and_(name_is(name), pod_phase("Running")), t0))
        t_pod = self.rec.first("pods", name_is(name), t0)
        self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
        return {"pod": name, "total_s": span(t0, t_run),
                "phases": {"create_to_seen_s": span(t0, t_pod),
                           "pod_start_s": span(t_pod, t_run)}}

    def repeat(self, r, n_shared, out):
        out.update({"repeat": r, "load_before": loadavg(), "started": time.time()})
        for key, fn in (("plain", lambda: self.plain(r)), ("raw", lambda: self.raw(r)),
                        ("first", lambda: self.first(r)),
                        ("hand", lambda: self.hand(r)), ("hit", lambda: self.hit(r)),
                        ("shared", lambda: self.shared(r, n_shared))):
            try:
                out[key] = fn()
                line = out[key].get("total_s", out[key].get("all_running_s"))
                log("repeat %d %-6s %6.2f s  %s" % (r, key, line if line is not None else -1,
                                                    " ".join("%s=%s" % kv for kv in (
                                                        out[key].get("phases") or {}).items())))
            except Exception as e:  # noqa: BLE001 (recorded; the next paths may still run)
                out[key] = {"error": str(e)[:2000]}
                log("repeat %d %s: ERROR %s" % (r, key, str(e)[:500]))
                if key == "first":
                    break
        out["overhead"] = overhead(out)
        out["load_after"] = loadavg()
        self.clear(r)
        return out


def overhead(rep):
    """The operator's cost over the builder itself, from one repeat's paths."""
    f, h, k = rep.get("first") or {}, rep.get("hand") or {}, rep.get("hit") or {}
    o = {}
    if f.get("total_s") is not None and h.get("total_s") is not None:
        # Over kaniko by hand as a pod (create to Succeeded, as this client sees it).
        o["first_over_hand_pod_s"] = round(f["total_s"] - h["total_s"], 3)
        o["first_over_hand_ratio"] = round(f["total_s"] / h["total_s"], 3)
    fk = (f.get("phases") or {}).get("kaniko_log_s")
    if f.get("total_s") is not None and fk is not None:
        # Over kaniko's own run in the operator's build pod (its first to last log line).
        o["first_over_kaniko_log_s"] = round(f["total_s"] - fk, 3)
    hk = (h.get("phases") or {}).get("kaniko_log_s")
    if fk is not None and hk is not None:
        o["kaniko_log_op_minus_hand_s"] = round(fk - hk, 3)
    p = rep.get("plain") or {}
    if k.get("total_s") is not None and p.get("total_s") is not None:
        o["hit_over_plain_s"] = round(k["total_s"] - p["total_s"], 3)
    w = rep.get("raw") or {}
    if k.get("total_s") is not None and w.get("total_s") is not None:
        o["hit_over_raw_pod_s"] = round(k["total_s"] - w["total_s"], 3)
    if None not in (f.get("total_s"), h.get("total_s"), w.get("total_s")):
        # Over doing it by hand: kaniko's pod, then the session's pod (raw), one after the other.
        o["first_over_hand_and_raw_pod_s"] = round(f["total_s"] - h["total_s"] - w["total_s"], 3)
    t = f.get("times") or {}
    built = [v for v in (t.get("bpod_succeeded"), t.get("job_complete")) if v is not None]
    if None not in (t.get("job"), t.get("bpod"), t.get("pod"), t.get("pod_running"),
                    t.get("running")) and built:
        # The operator's and the job controller's own steps: apply to Job, Job to its pod, the
        # build's end (pod Succeeded) to the session pod, session pod Running to Running.
        o["orchestration_s"] = round(t["bpod"] + (t["pod"] - min(built)) +
                                     (t["running"] - t["pod_running"]), 3)
    s = rep.get("shared") or {}
    if s.get("all_running_s") is not None and f.get("total_s") is not None:
        o["shared_all_over_first_s"] = round(s["all_running_s"] - f["total_s"], 3)
    return o


# --- results ------------------------------------------------------------------------------------

def flat(rep):
    """The figures of one repeat as name -> seconds (the summary's rows)."""
    out = {}
    for path in ("plain", "raw", "first", "hand", "hit"):
        p = rep.get(path) or {}
        if p.get("total_s") is not None:
            out["%s.total_s" % path] = p["total_s"]
        for k, v in (p.get("phases") or {}).items():
            if v is not None:
                out["%s.%s" % (path, k)] = v
    s = rep.get("shared") or {}
    for k in ("all_running_s", "p50_running_s", "first_running_s", "jobs_created"):
        if s.get(k) is not None:
            out["shared.%s" % k] = s[k]
    t = (rep.get("first") or {}).get("times") or {}
    if t.get("bpod_succeeded") is not None and t.get("pod") is not None:
        out["first.build_pod_succeeded_to_session_pod_s"] = round(t["pod"] - t["bpod_succeeded"],
                                                                  3)
    # Recomputed, so that figures added later apply to older files too.
    for k, v in overhead(rep).items():
        out["overhead.%s" % k] = v
    return out


def stats(values):
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values), "values": values}


def summarise(repeats):
    rows = {}
    for rep in repeats:
        for k, v in flat(rep).items():
            rows.setdefault(k, []).append(v)
    return {k: stats(v) for k, v in rows.items()}


def git_describe():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    p = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return p.stdout.strip()


ORDER = [
    ("first.total_s", "first build: apply to Running"),
    ("hand.total_s", "kaniko by hand (pod create to Succeeded)"),
    ("overhead.first_over_hand_pod_s", "  overhead over kaniko by hand"),
    ("overhead.first_over_hand_ratio", "  first / hand (ratio)"),
    ("overhead.first_over_kaniko_log_s", "  overhead over kaniko's own run (log)"),
    ("overhead.first_over_hand_and_raw_pod_s", "  over kaniko by hand + the pod by hand"),
    ("overhead.orchestration_s", "  operator + job controller steps (sum)"),
    ("first.apply_to_job_s", "  apply to Job created"),
    ("first.job_to_build_pod_s", "  Job to build pod (job controller)"),
    ("first.job_to_context_configmap_s", "  Job to its context ConfigMap"),
    ("first.build_pod_to_kaniko_start_s", "  build pod to kaniko's first line"),
    ("hand.build_pod_to_kaniko_start_s", "    (by hand)"),
    ("first.kaniko_start_to_push_s", "  kaniko: start to push"),
    ("hand.kaniko_start_to_push_s", "    (by hand)"),
    ("first.push_s", "  kaniko: push"),
    ("hand.push_s", "    (by hand)"),
    ("first.kaniko_last_line_to_pod_succeeded_s", "  kaniko's last line to pod Succeeded"),
    ("hand.kaniko_last_line_to_pod_succeeded_s", "    (by hand)"),
    ("first.build_pod_succeeded_to_job_complete_s", "  pod Succeeded to Job Complete"),
    ("first.job_complete_to_session_pod_s", "  Job Complete to session pod"),
    ("first.build_pod_succeeded_to_session_pod_s", "  build pod Succeeded to session pod"),
    ("first.session_pod_start_s", "  session pod start (pull + run)"),
    ("first.pod_running_to_session_running_s", "  pod Running to session Running"),
    ("hit.total_s", "cache hit: apply to Running"),
    ("hit.apply_to_pod_s", "  apply to session pod"),
    ("hit.pod_start_s", "  session pod start"),
    ("hit.pod_running_to_session_running_s", "  pod Running to session Running"),
    ("plain.total_s", "no imports (no build step): apply to Running"),
    ("plain.apply_to_pod_s", "  apply to session pod"),
    ("plain.pod_start_s", "  session pod start"),
    ("overhead.hit_over_plain_s", "  cache hit over no imports"),
    ("raw.total_s", "the same pod by hand: create to Running"),
    ("overhead.hit_over_raw_pod_s", "  cache hit over the pod by hand"),
    ("shared.all_running_s", "shared build, 10 sessions: all Running"),
    ("shared.p50_running_s", "  p50 session Running"),
    ("shared.jobs_created", "  Jobs created"),
    ("overhead.shared_all_over_first_s", "  all Running over one first build"),
]


def print_summary(summ, n_runs, loads):
    print("%-46s %9s %9s %9s %4s" % ("figure (seconds)", "median", "min", "max", "n"))
    for key, label in ORDER + [(k, k) for k in sorted(summ) if k not in dict(ORDER)]:
        s = summ.get(key)
        if not s:
            continue
        print("%-46s %9.3f %9.3f %9.3f %4d" % (label[:46], s["median"], s["min"], s["max"],
                                               s["n"]))
    print("repeats: %d; load average (1/5/15 min) at each repeat's start: %s" % (
        n_runs, "; ".join("%.2f %.2f %.2f" % tuple(x) for x in loads)))
    goals = []
    o = summ.get("overhead.first_over_hand_pod_s")
    if o:
        goals.append("first build overhead over kaniko by hand %.2f s (goal < 2 s): %s" % (
            o["median"], "met" if o["median"] < 2 else "MISSED"))
    h = summ.get("hit.total_s")
    if h:
        goals.append("cache hit to Running %.2f s (goal < 1 s): %s" % (
            h["median"], "met" if h["median"] < 1 else "MISSED"))
    for g in goals:
        print(g)


def cmd_run(a):
    b = Bench(a)
    res = {"schema": SCHEMA, "bench": "builds", "commit": git_describe(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": {"cores": os.cpu_count(), "load_before": loadavg()},
           "label": a.label, "operator": os.path.abspath(a.operator),
           "config": {"repeats": a.repeats, "shared_sessions": a.shared,
                      "hand": "the operator's Job pod template as a bare pod in the build "
                              "namespace, same node, context ConfigMap copied, own "
                              "--destination tag"},
           "repeats": []}
    t_start = time.time()
    try:
        b.setup()
        res["config"].update({"builder_image": b.refs["kaniko"], "base_image": b.base,
                              "repository": b.repository, "node": b.node,
                              "namespaces": [b.ns, b.bns]})
        for r in range(1, a.repeats + 1):
            rep = {}
            res["repeats"].append(rep)  # partial when interrupted: still written
            b.repeat(r, a.shared, rep)
            with open(os.path.join(b.log_dir, "operator.metrics"), "w") as f:
                f.write(b.metrics())
    finally:
        res["host"]["load_after"] = loadavg()
        res["wall_s"] = round(time.time() - t_start, 1)
        res["summary"] = summarise(res["repeats"])
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        b.cleanup()
    print("telo-operator %s, %s, %d cores, %s" % (res["commit"], res["date"], os.cpu_count(),
                                                  a.out))
    print_summary(res["summary"], len(res["repeats"]),
                  [rep["load_before"] for rep in res["repeats"]])
    bad = [rep for rep in res["repeats"] if any("error" in (rep.get(k) or {}) for k in rep
                                                 if isinstance(rep.get(k), dict))]
    return 1 if bad else 0


def cmd_summary(files):
    repeats, commits = [], set()
    for fn in files:
        with open(fn) as f:
            r = json.load(f)
        if r.get("schema") != SCHEMA:
            raise SystemExit("bench: %s is not a %s result" % (fn, SCHEMA))
        commits.add(r.get("commit"))
        repeats += r["repeats"]
    print("%d file(s), telo-operator %s" % (len(files), ", ".join(sorted(commits))))
    print_summary(summarise(repeats), len(repeats), [rep["load_before"] for rep in repeats])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "summary":
        cmd_summary(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("cmd", choices=["run"])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--operator", required=True)
    p.add_argument("--refs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--log-dir")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shared", type=int, default=10)
    p.add_argument("--metrics-port", type=int, default=16330)
    p.add_argument("--label", default="")
    return cmd_run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())

"""TeloSessions end to end: the operator (build/bin/telo-operator run, or $TELO_BIN_DIR) runs
against the local cluster, watching only the test's namespace, and the tests drive sessions with
kubectl as a user would.

Session pods run on kwok's simulated nodes (hack/cluster/README.md): nothing executes, kwok plays
their status through Stages. The operator creates the pods, and it has no way (and must have
none) to pass test labels to them, so the tests make kwok misbehave by labelling the pod itself:
- a Running pod's app exits with a chosen code: the chaos stage pod-container-running-failed,
  labelled once the session is Running;
- stages that act on a Pending pod (init container failure, ImagePullBackOff, a stalled start)
  race kwok's pod-ready, which turns a bound pod Running at once. To make that race-free the
  operator runs with `--set nodeSelector=...,<hold label>=yes` (its real nodeSelector setting):
  the pod stays unschedulable while the test labels it, then the test puts the hold label on the
  kwok node and the scheduler binds the already-labelled pod;
- a stalled start (StartTimeout) is a bound pod that no stage plays: the label
  `sim.telo.run/image-pull=stall` keeps pod-ready off it (its selector wants the label absent) and
  our image-pull stage only answers `backoff`, so the pod stays Pending with no container status,
  as behind a kubelet that never reports.
The session pods go to a kwok node of the module's own (labelled and tainted; the operator gets
the matching nodeSelector and toleration), so other suites' and benchmarks' pods filling the
shared kwok nodes cannot make every test here Unschedulable.
Init containers, ports, terminals, exit codes and memory limits that really act need the real
node: test_sessions_real_node.py runs sessions there (bundle delivery by URL with a wrong
sha256 or an unreachable URL among them) and is skipped when it is not up.

Writes are counted from the API server's audit log (user agent telo-operator/...), so "nothing
created twice" and "steady state writes nothing" are the server's word.

kwok's pod IPs are made up and routed off this machine, so the operator here probes none of them
(NotProbed). The 100-session steady state is the exception: its kwok node's pods take addresses
from a network this machine makes local for the module (LOOPBACK_POD_CIDR, an AnyIP route on lo,
as root), and the test listens on their port itself, so every probe connects and stays here."""

import collections
import glob
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest
import yaml

from conftest import ROOT, LineReader, wait_until

HELLO_SAMPLE = os.path.join(ROOT, "crds", "samples", "hello.yaml")
CHAOS_EXIT = "pod-container-running-failed.stage.kwok.x-k8s.io"
CHAOS_INIT = "pod-init-container-running-failed.stage.kwok.x-k8s.io"
IMAGE_PULL = "sim.telo.run/image-pull"
TERMINAL = ("Succeeded", "Failed", "Stopped")
CHILD_RESOURCES = ("pods", "services", "ingresses", "secrets")


# --- objects -------------------------------------------------------------------------------------

def hello_bundle(name="hello-bundle"):
    """The sample's bundle ConfigMap (crds/samples/hello.yaml), under another name if asked."""
    with open(HELLO_SAMPLE) as f:
        cm = next(d for d in yaml.safe_load_all(f) if d and d["kind"] == "ConfigMap")
    cm["metadata"] = {"name": name}
    return cm


def session(name, ports=((8080, "TCP"),), bundle="hello-bundle", **spec):
    body = {"entry": "app/telo.yaml", "bundle": {"configMap": {"name": bundle}}}
    if ports:
        body["ports"] = [{"port": p, "protocol": proto} for p, proto in ports]
    body.update(spec)
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": name}, "spec": body}


UNREACHABLE = ("connection refused", "Unable to connect", "connection reset", "EOF",
               "ServiceUnavailable", "the server is currently unable")


def kubectl_patiently(cluster, *args, input=None, outage=90):
    """kubectl that waits out an API server outage (other suites sharing the cluster restart it)
    instead of failing the test on it; any other failure is returned as is."""
    deadline = time.monotonic() + outage
    while True:
        proc = cluster.kubectl(*args, input=input, check=False)
        if (proc.returncode == 0 or not any(u in proc.stderr for u in UNREACHABLE)
                or time.monotonic() > deadline):
            return proc
        time.sleep(1)


def apply(cluster, ns, *objects):
    proc = kubectl_patiently(cluster, "apply", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    assert proc.returncode == 0, proc.stderr


def get(cluster, ns, kind, name):
    proc = kubectl_patiently(cluster, "get", kind, name, "-n", ns, "-o", "json")
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    return json.loads(proc.stdout)


def get_ts(cluster, ns, name):
    return get(cluster, ns, "telosessions", name)


def pod_name(name):
    return "telo-run-" + name


def host_id(ts):
    """The session's part of its ingress hosts, written here from the contract rather than read
    from the operator: "<name>-<namespace>" cut to 40 characters (dots as dashes, no trailing
    dash), "-", then the first 16 bytes of sha256(<the session's uid>), each byte's low 5 bits
    as a letter of the base32 alphabet a-z2-7. The uid, not the name, makes the secret part: a
    host cannot be computed from a session's name (issue 15, finding 6)."""
    meta = ts["metadata"]
    digest = hashlib.sha256(meta["uid"].encode()).digest()
    readable = ("%s-%s" % (meta["name"], meta["namespace"])).replace(".", "-")[:40].rstrip("-")
    return readable + "-" + "".join("abcdefghijklmnopqrstuvwxyz234567"[b & 31]
                                    for b in digest[:16])


def dns_label(text):
    return (1 <= len(text) <= 63 and text[0].isalnum() and text[-1].isalnum()
            and all(c.isdigit() or "a" <= c <= "z" or c == "-" for c in text))


def condition(ts, kind):
    for c in ts.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c
    raise AssertionError("no condition %s in %s" % (kind, ts.get("status")))


def wait_phase(cluster, ns, name, phase, timeout=90, reason=None):
    """Waits for status.phase (and reason); fails at once on another terminal phase."""
    def check():
        ts = get_ts(cluster, ns, name)
        st = (ts or {}).get("status", {})
        if st.get("phase") == phase and (reason is None or st.get("reason") == reason):
            return ts
        if st.get("phase") in TERMINAL and st.get("phase") != phase:
            raise AssertionError("%s ended %s, not %s: %s" % (name, st.get("phase"), phase,
                                                               json.dumps(st, indent=1)))
        return None
    return wait_until(check, timeout=timeout, what="%s/%s phase %s %s" % (ns, name, phase,
                                                                          reason or ""))


def wait_pod(cluster, ns, name, timeout=20):
    return wait_until(lambda: get(cluster, ns, "pod", pod_name(name)), timeout=timeout,
                      what="pod of session %s" % name)


def children(cluster, ns, name):
    """Names of the session's children by kind, found by the telo.run/session label."""
    items = cluster.kubectl_json("get", "pods,services,ingresses,secrets", "-n", ns,
                                 "-l", "telo.run/session=" + name)["items"]
    found = collections.defaultdict(list)
    for item in items:
        found[item["kind"]].append(item["metadata"]["name"])
    return dict(found)


def mark_pod(cluster, ns, pod, labels, annotations=None):
    """Annotates, then labels, a pod: kwok's stages key on the label and read the annotations."""
    if annotations:
        cluster.kubectl("annotate", "pod", pod, "-n", ns, "--overwrite",
                        *["%s=%s" % kv for kv in annotations.items()])
    cluster.kubectl("label", "pod", pod, "-n", ns, "--overwrite",
                    *["%s=%s" % kv for kv in labels.items()])


def chaos(cluster, ns, pod, stage, exit_code, container, message):
    mark_pod(cluster, ns, pod, {stage: "true"},
             {stage + "/exit-code": str(exit_code), stage + "/container-name": container,
              stage + "/reason": "Error", stage + "/message": message})


SESSION_NODE_KEY = "e2e.telo.run/sessions"


def own_kwok_node(cluster, prefix="e2e-sessions", pod_cidr=None):
    """A kwok node of a test's own, labelled and tainted (SESSION_NODE_KEY=<its name>) so that
    only the session pods of an operator given the matching nodeSelector and toleration land
    there; with pod_cidr, kwok gives its pods addresses from that network (spec.podCIDR).
    A generator: yields the node's name once kwok made it Ready, deletes it when closed."""
    name = "%s-%s" % (prefix, uuid.uuid4().hex[:6])
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name,
                     "annotations": {"kwok.x-k8s.io/node": "fake",
                                     "node.alpha.kubernetes.io/ttl": "0"},
                     "labels": {SESSION_NODE_KEY: name, "kubernetes.io/hostname": name,
                                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                "telo.run/node": "kwok"}},
        "spec": {"taints": [{"key": SESSION_NODE_KEY, "value": name, "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "10000",
                                   "ephemeral-storage": "100Ti"},
                   "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "10000",
                                "ephemeral-storage": "100Ti"},
                   "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake",
                                "kubeProxyVersion": "fake", "operatingSystem": "linux"}}}
    if pod_cidr:
        node["spec"].update(podCIDR=pod_cidr, podCIDRs=[pod_cidr])
    cluster.kubectl("create", "-f", "-", input=json.dumps(node))
    try:
        wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                               cluster.kubectl_json("get", "node", name)["status"].get(
                                   "conditions", [])),
                   timeout=30, what="kwok to make node %s Ready" % name)
        yield name
    finally:
        cluster.kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def session_node(cluster):
    """A kwok node of this module's own, labelled and tainted so that only the session pods of
    these tests land there (the operator gets the matching nodeSelector and toleration). The
    shared kwok nodes may be full of other suites' and benchmarks' pods; a full node would turn
    every test here into an Unschedulable one."""
    yield from own_kwok_node(cluster)


class Hold:
    """A node label nothing has yet: session pods selecting it stay unschedulable until
    release() puts it on the tests' kwok node."""

    def __init__(self, cluster, node):
        self.cluster = cluster
        self.key = "e2e.telo.run/hold-%s" % uuid.uuid4().hex[:8]
        self.node = node

    def release(self):
        self.cluster.kubectl("label", "node", self.node, "--overwrite", self.key + "=yes")

    def drop(self):
        self.cluster.kubectl("label", "node", self.node, self.key + "-", check=False)


@pytest.fixture
def hold(cluster, session_node):
    h = Hold(cluster, session_node)
    yield h
    h.drop()


@pytest.fixture
def start(operator, session_node):
    """start(*sets, hold=None, node_selector=None, args=(), node=None): the operator fixture,
    with session pods sent to the tests' kwok node (nodeSelector and toleration), or to node (one
    of own_kwok_node's), held back by a Hold when given; node_selector replaces that nodeSelector
    (and drops the toleration)."""
    def run(*sets, hold=None, node_selector=None, args=(), node=None):
        if node_selector is None:
            selector = {SESSION_NODE_KEY: node or session_node}
            if hold:
                selector[hold.key] = "yes"
            base = ["nodeSelector=" + ",".join("%s=%s" % kv for kv in selector.items()),
                    "tolerations=" + json.dumps([{"key": SESSION_NODE_KEY, "operator": "Exists",
                                                  "effect": "NoSchedule"}])]
        else:
            base = ["nodeSelector=" + node_selector]
        # Tests about the deadline set a short one; the others must not hit it when the shared
        # kwok is busy playing other suites' pods (its stages run for every node in one queue).
        if not any(s_.startswith("startDeadlineSeconds=") for s_ in sets):
            base.append("startDeadlineSeconds=90")
        return operator(*(base + list(sets)), args=args)
    return run


class Audit:
    """Requests the operator made in one namespace, from the API server's audit log (and its
    rotated copies, so a rotation during the test loses nothing)."""

    WRITES = ("create", "update", "patch", "delete", "deletecollection")

    def __init__(self, cluster, ns):
        self.pattern = os.path.join(cluster.log_dir, "audit*.log")
        self.ns = ns
        self.needle = '"namespace":"%s"' % ns

    def events(self):
        out = []
        for path in glob.glob(self.pattern):
            with open(path, errors="replace") as f:
                for line in f:
                    if self.needle not in line or "telo-operator/" not in line:
                        continue
                    e = json.loads(line)
                    ref = e.get("objectRef", {})
                    if (e.get("stage") == "ResponseComplete" and ref.get("namespace") == self.ns
                            and e.get("userAgent", "").startswith("telo-operator/")):
                        out.append(e)
        out.sort(key=lambda e: e.get("requestReceivedTimestamp", ""))
        return out

    def writes(self, since=""):
        return [e for e in self.events() if e["verb"] in self.WRITES
                and e.get("requestReceivedTimestamp", "") >= since]

    @staticmethod
    def describe(events):
        return ["%s %s%s %s -> %s" % (e["verb"], e["objectRef"].get("resource"),
                                      "/" + e["objectRef"]["subresource"]
                                      if e["objectRef"].get("subresource") else "",
                                      e["objectRef"].get("name"),
                                      e.get("responseStatus", {}).get("code"))
                for e in events]

    def creates(self):
        """Objects created (201) per (resource, name)."""
        count = collections.Counter()
        for e in self.writes():
            if e.get("responseStatus", {}).get("code") == 201:
                count[(e["objectRef"]["resource"], e["objectRef"].get("name"))] += 1
        return count


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000000Z"


def assert_failure(ts, reason, *words):
    st = ts["status"]
    assert st["phase"] == "Failed" and st.get("reason") == reason, json.dumps(st, indent=1)
    for w in words:
        assert w in st.get("message", ""), "%r not in the message: %s" % (w, st.get("message"))
    assert condition(ts, "Ready")["status"] == "False"
    stalled = condition(ts, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == reason, stalled
    assert condition(ts, "Reconciling")["status"] == "False"


# --- the sample, and what a user sees ------------------------------------------------------------

def not_probed(endpoints, status):
    """endpoints as a Running session on a kwok node reports them since issue 17's reachability:
    each says why the operator does not probe it (kwok's fake pod IPs are outside the suite's
    reachability.podCIDRs; UDP is never probed), and Ready does not wait for them."""
    out = []
    for e in endpoints:
        why = ("UDP ports are not probed: only TCP accepts a connection to check"
               if e["protocol"] == "UDP" else
               "the pod IP %s is outside the operator's reachability.podCIDRs: not probed"
               % status["podIP"])
        out.append(dict(e, state="NotProbed", message=why))
    return out


def attach_secret_name(cluster, ns, name):
    return get_ts(cluster, ns, name).get("status", {}).get("attach", {}).get("secretName")


def test_hello_sample_runs_and_deleting_it_removes_its_children(cluster, start, pod_namespace):
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test")
    cluster.kubectl("apply", "-n", ns, "-f", HELLO_SAMPLE)
    wait = cluster.kubectl("wait", "-n", ns, "--for=condition=Ready", "ts/hello",
                           "--timeout=60s", check=False)
    assert wait.returncode == 0, wait.stderr
    assert "condition met" in wait.stdout
    ts = get_ts(cluster, ns, "hello")
    st = ts["status"]
    assert st["phase"] == "Running" and st["podName"] == "telo-run-hello", st
    assert st["observedGeneration"] == ts["metadata"]["generation"]
    assert all(c["observedGeneration"] == ts["metadata"]["generation"] for c in st["conditions"])
    assert st["progress"] == {"phase": "provision", "message": "Running", "done": True}
    url = "http://8080-%s.sessions.example.test" % host_id(ts)
    assert st["endpoints"] == not_probed([{"name": "http", "port": 8080, "protocol": "TCP",
                                           "host": url[len("http://"):], "url": url}], st)
    # No attach-token Secret unless spec.attachToken asks for one (issue 20), below.
    assert "secretName" not in st.get("attach", {}), st

    pod = get(cluster, ns, "pod", "telo-run-hello")
    node = cluster.kubectl_json("get", "node", pod["spec"]["nodeName"])["metadata"]
    assert node["annotations"]["kwok.x-k8s.io/node"] == "fake", node
    assert pod["status"]["podIP"] == st["podIP"]
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = spec["containers"][0]
    assert c["name"] == "session" and c["tty"] and c["stdin"]
    assert c["command"] == ["telo", "run", "/app/app/telo.yaml", "--no-cache-write"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["limits"] == c["resources"]["requests"]
    assert spec["initContainers"][0]["name"] == "fetch-bundle"

    # kubectl get ts: the printer columns, filled from the status.
    table = cluster.kubectl("get", "ts", "-n", ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "READY", "URL", "REASON", "AGE"], table
    assert table[1].split()[:4] == ["hello", "Running", "True", url], table
    wide = cluster.kubectl("get", "ts", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-3:] == ["IMAGE", "POD", "MESSAGE"], wide
    assert "telo-run-hello" in wide[1].split(), wide

    uid = ts["metadata"]["uid"]
    assert children(cluster, ns, "hello") == {
        "Pod": ["telo-run-hello"], "Service": ["telo-run-hello"], "Ingress": ["telo-run-hello"]}
    # Asked for, the token's Secret comes, named in the status, and goes with the rest.
    cluster.kubectl("patch", "ts", "hello", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"attachToken":true}}')
    secret = wait_until(lambda: attach_secret_name(cluster, ns, "hello"), timeout=30,
                        what="status.attach.secretName after spec.attachToken")
    assert secret == "telo-run-hello-attach", secret
    assert len(get(cluster, ns, "secret", "telo-run-hello-attach")["data"]["token"]) > 0
    kids = children(cluster, ns, "hello")
    assert kids == {"Pod": ["telo-run-hello"], "Service": ["telo-run-hello"],
                    "Ingress": ["telo-run-hello"], "Secret": ["telo-run-hello-attach"]}, kids
    for kind, names in kids.items():
        obj = get(cluster, ns, kind.lower(), names[0])
        owner = obj["metadata"]["ownerReferences"]
        assert owner == [{"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
                          "name": "hello", "uid": uid, "controller": True,
                          "blockOwnerDeletion": True}], (kind, owner)
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "telo-operator"

    # The story, for kubectl describe.
    events = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns,
                                  "--field-selector", "regarding.name=hello")["items"]
    assert "Running" in {e["reason"] for e in events}, [e["reason"] for e in events]

    cluster.kubectl("delete", "ts", "hello", "-n", ns)
    wait_until(lambda: not children(cluster, ns, "hello"), timeout=60,
               what="the children of hello to be garbage-collected")


# --- failures ------------------------------------------------------------------------------------

def test_app_exit_code_fails_the_session_with_app_exited(cluster, start, pod_namespace):
    ns = pod_namespace
    op = start()
    apply(cluster, ns, hello_bundle(), session("app"))
    wait_phase(cluster, ns, "app", "Running")
    chaos(cluster, ns, "telo-run-app", CHAOS_EXIT, 3, "session", "app-crashed")
    ts = wait_phase(cluster, ns, "app", "Failed", timeout=60)
    assert_failure(ts, "AppExited", 'container "session"', "exit code 3", "app-crashed",
                   "kubectl logs -n %s telo-run-app -c session" % ns)
    assert ts["status"]["exitCode"] == 3
    assert ts["status"]["completionTime"]
    # The failed pod stays for its logs.
    assert get(cluster, ns, "pod", "telo-run-app")["status"]["phase"] == "Failed"
    events = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns,
                                  "--field-selector", "regarding.name=app")["items"]
    failed = [e for e in events if e["reason"] == "Failed"]
    assert failed and failed[0]["type"] == "Warning" and "AppExited" in failed[0]["note"], events
    described = cluster.kubectl("describe", "ts", "app", "-n", ns).stdout
    # A new session's Pending is not written (its pod's arrival writes what follows), so the
    # story starts at the state the pod showed.
    for word in ("Running", "Failed", "AppExited"):
        assert word in described, described
    # The session metrics tell the same story.
    assert op.metric("telo_session_starts_total") == 1
    assert op.metric("telo_session_failures_total", {"reason": "AppExited"}) == 1
    assert op.metric("telo_session_startup_seconds_count") == 1
    assert op.metric("telo_sessions", {"phase": "Failed"}) == 1
    assert op.metric("telo_sessions", {"phase": "Running"}) == 0


def test_oom_killed_app_fails_with_oom_killed(cluster, start, pod_namespace):
    ns = pod_namespace
    start()
    apply(cluster, ns, hello_bundle(), session("hog"))
    wait_phase(cluster, ns, "hog", "Running")
    mark_pod(cluster, ns, "telo-run-hog", {CHAOS_EXIT: "true"},
             {CHAOS_EXIT + "/exit-code": "137", CHAOS_EXIT + "/container-name": "session",
              CHAOS_EXIT + "/reason": "OOMKilled", CHAOS_EXIT + "/message": "over-limit"})
    ts = wait_phase(cluster, ns, "hog", "Failed", timeout=60)
    assert_failure(ts, "OOMKilled", 'container "session" failed: OOMKilled (exit code 137)')
    assert ts["status"]["exitCode"] == 137


def test_init_container_failure_fails_with_bundle_fetch_failed(cluster, start, pod_namespace,
                                                               hold):
    ns = pod_namespace
    start(hold=hold)
    apply(cluster, ns, hello_bundle(), session("init"))
    wait_pod(cluster, ns, "init")
    chaos(cluster, ns, "telo-run-init", CHAOS_INIT, 66, "fetch-bundle", "bundle-unreadable")
    hold.release()
    ts = wait_phase(cluster, ns, "init", "Failed", timeout=60)
    assert_failure(ts, "BundleFetchFailed", 'init container "fetch-bundle"', "exit code 66",
                   "bundle-unreadable", "kubectl logs -n %s telo-run-init -c fetch-bundle" % ns)


def test_image_pull_backoff_fails_with_image_pull_failed_after_the_deadline(
        cluster, start, pod_namespace, hold):
    ns = pod_namespace
    start("startDeadlineSeconds=10", hold=hold)
    apply(cluster, ns, hello_bundle(), session("pull"))
    wait_pod(cluster, ns, "pull")
    mark_pod(cluster, ns, "telo-run-pull", {IMAGE_PULL: "backoff"})
    hold.release()
    # Until the deadline a back-off is only a step of starting.
    ts = wait_phase(cluster, ns, "pull", "Provisioning", timeout=10)
    wait_until(lambda: get_ts(cluster, ns, "pull")["status"].get("progress", {}).get("message")
               == "Pulling image" or get_ts(cluster, ns, "pull")["status"]["phase"] == "Failed",
               timeout=10, what="progress 'Pulling image'")
    ts = wait_phase(cluster, ns, "pull", "Failed", timeout=20)
    assert_failure(ts, "ImagePullFailed", "did not start within 10s", "last step: Pulling image",
                   'container "session"', "ImagePullBackOff", "telorun/node:latest-slim")
    # A pod that will never start is deleted.
    wait_until(lambda: get(cluster, ns, "pod", "telo-run-pull") is None, timeout=60,
               what="the stuck pod to be deleted")


def test_unschedulable_session_fails_with_unschedulable(cluster, start, pod_namespace):
    ns = pod_namespace
    start("startDeadlineSeconds=8", node_selector="e2e.telo.run/nowhere=true")
    apply(cluster, ns, hello_bundle(), session("nowhere"))
    ts = wait_until(lambda: (lambda t: t if "waiting for a node" in
                             t.get("status", {}).get("message", "") else None)(
                                 get_ts(cluster, ns, "nowhere")),
                    timeout=8, what="the scheduler's complaint while provisioning")
    assert ts["status"]["phase"] == "Provisioning"
    ts = wait_phase(cluster, ns, "nowhere", "Failed", timeout=20)
    assert_failure(ts, "Unschedulable", "no node could run the session within 8s",
                   "didn't match Pod's node affinity/selector", "nodeSelector",
                   "kubectl describe pod -n %s telo-run-nowhere" % ns)
    wait_until(lambda: get(cluster, ns, "pod", "telo-run-nowhere") is None, timeout=60,
               what="the unschedulable pod to be deleted")


def test_start_deadline_fails_with_start_timeout(cluster, start, pod_namespace, hold):
    ns = pod_namespace
    start("startDeadlineSeconds=8", hold=hold)
    apply(cluster, ns, hello_bundle(), session("slow"))
    wait_pod(cluster, ns, "slow")
    mark_pod(cluster, ns, "telo-run-slow", {IMAGE_PULL: "stall"})
    hold.release()
    wait_until(lambda: get(cluster, ns, "pod", "telo-run-slow")["spec"].get("nodeName"),
               timeout=10, what="the pod to be bound")
    # Shown once the pod is 1-2 s old (a new session's first status waits that long for its pod
    # to settle), and kept until the deadline.
    wait_phase(cluster, ns, "slow", "Provisioning", timeout=5)
    ts = wait_phase(cluster, ns, "slow", "Failed", timeout=20)
    assert_failure(ts, "StartTimeout", "the session did not start within 8s", "last step:",
                   "kubectl describe pod -n %s telo-run-slow" % ns)


def test_pod_deleted_by_someone_else_fails_with_pod_disappeared(cluster, start, pod_namespace):
    ns = pod_namespace
    start()
    apply(cluster, ns, hello_bundle(), session("gone"))
    wait_phase(cluster, ns, "gone", "Running")
    cluster.kubectl("delete", "pod", "telo-run-gone", "-n", ns)
    ts = wait_phase(cluster, ns, "gone", "Failed", timeout=60)
    assert_failure(ts, "PodDisappeared", "pod telo-run-gone was deleted",
                   "kubectl get events -n %s" % ns)
    time.sleep(2)
    assert get(cluster, ns, "pod", "telo-run-gone") is None, "a vanished pod is not recreated"


def owner_uid(obj):
    """The uid of obj's controller owner reference, or None."""
    refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")]
    return refs[0]["uid"] if refs else None


def test_a_foreign_pod_of_the_sessions_name_is_a_name_conflict_and_left_alone(
        cluster, start, pod_namespace, session_node):
    """Issue 21: a pod holding the session's pod name that no TeloSession of that name controls
    is never reported, patched or deleted: the session says whose name it is and waits."""
    ns = pod_namespace
    start()
    # Labelled as ours (so it is in the operator's cache), owned by nobody, and parked: a
    # nodeSelector nothing has keeps it Pending whatever kwok plays.
    foreign = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "telo-run-clash",
                            "labels": {"app.kubernetes.io/managed-by": "telo-operator",
                                       "telo.run/session": "clash"}},
               "spec": {"nodeSelector": {"e2e.telo.run/nowhere": "yes"},
                        "containers": [{"name": "c", "image": "busybox"}]}}
    apply(cluster, ns, hello_bundle(), foreign)
    before = get(cluster, ns, "pod", "telo-run-clash")
    apply(cluster, ns, session("clash"))
    ts = wait_phase(cluster, ns, "clash", "Pending", reason="NameConflict", timeout=30)
    st = ts["status"]
    assert "pod %s/telo-run-clash exists and is not owned by this session" % ns in st["message"], st
    assert "podName" not in st and "podUID" not in st, st
    assert condition(ts, "Stalled")["status"] == "True", st
    time.sleep(2)
    after = get(cluster, ns, "pod", "telo-run-clash")
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the foreign pod was replaced"
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        "the foreign pod was written to")
    # Once its owner removes it, the session goes on with a pod of its own.
    cluster.kubectl("delete", "pod", "telo-run-clash", "-n", ns, "--grace-period=0", "--force")
    # Nothing maps an owner-less pod's deletion to the session: its periodic look (10 s) does.
    ts = wait_phase(cluster, ns, "clash", "Running", timeout=60)
    pod = get(cluster, ns, "pod", "telo-run-clash")
    assert owner_uid(pod) == ts["metadata"]["uid"], pod["metadata"]
    assert ts["status"]["podUID"] == pod["metadata"]["uid"], ts["status"]


def test_a_planted_pod_on_the_hosts_network_is_never_the_sessions(
        cluster, start, pod_namespace, session_node):
    """Someone who may create pods plants one under the session's pod name before the operator
    looks, labelled as the operator's and with a controller reference to the session (that needs
    no permission on the session), on the host's network: its address is the node's. Taken for
    the session's, that address would be written as status.podIP, probed on the session's ports
    and relayed to by the gateway's debug stream. The operator never writes hostNetwork: the
    session is Pending/NameConflict, no address is written, the pod is left alone."""
    ns = pod_namespace
    apply(cluster, ns, hello_bundle(), session("planted"))
    uid = get_ts(cluster, ns, "planted")["metadata"]["uid"]
    planted = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "telo-run-planted",
                            "labels": {"app.kubernetes.io/managed-by": "telo-operator",
                                       "telo.run/session": "planted"},
                            "ownerReferences": [{"apiVersion": "telo.run/v1alpha1",
                                                 "kind": "TeloSession", "name": "planted",
                                                 "uid": uid, "controller": True}]},
               "spec": {"hostNetwork": True,
                        "nodeSelector": {SESSION_NODE_KEY: session_node},
                        "tolerations": [{"key": SESSION_NODE_KEY, "operator": "Exists",
                                         "effect": "NoSchedule"}],
                        "containers": [{"name": "session", "image": "busybox"}]}}
    apply(cluster, ns, planted)
    wait_until(lambda: (get(cluster, ns, "pod", "telo-run-planted") or {}).get(
        "status", {}).get("phase") == "Running", timeout=60, what="the planted pod Running")
    before = get(cluster, ns, "pod", "telo-run-planted")
    start()
    ts = wait_phase(cluster, ns, "planted", "Pending", reason="NameConflict", timeout=30)
    st = ts["status"]
    assert "pod %s/telo-run-planted exists and is not owned by this session" % ns in \
        st["message"], st
    assert "podIP" not in st and "podName" not in st, st
    time.sleep(2)
    st = get_ts(cluster, ns, "planted")["status"]
    assert st.get("reason") == "NameConflict" and "podIP" not in st, st
    after = get(cluster, ns, "pod", "telo-run-planted")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        "the planted pod was written to")


@pytest.mark.disruptive
def test_a_session_created_again_under_its_name_never_inherits_its_predecessors_children(
        cluster, start, pod_namespace):
    """Issue 21, as a GitOps replace does it, with the garbage collector held back: session
    `again` Running; deleted (kubectl delete --wait returns once the object is gone) and applied
    again, so a new `again` with a new uid exists while the old pod, Service, Ingress and Secret
    (owned only by the old uid) are still there. The new session must never report the old pod,
    must end Running on a pod of its own, never Failed/PodDisappeared, with children of its own
    (a fresh attach token) and another host (issue 15 finding 6: hosts come from the uid)."""
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test")
    apply(cluster, ns, hello_bundle(), session("again", attachToken=True))
    old = wait_phase(cluster, ns, "again", "Running")
    old_uid = old["metadata"]["uid"]
    old_children = {kind: get(cluster, ns, kind, name)["metadata"]["uid"] for kind, name in (
        ("pod", "telo-run-again"), ("service", "telo-run-again"),
        ("ingress", "telo-run-again"), ("secret", "telo-run-again-attach"))}
    old_pod_uid = old_children["pod"]
    old_host = old["status"]["endpoints"][0]["host"]
    assert old["status"].get("podUID") == old_pod_uid, old["status"]
    seen = []
    cluster.script("down.sh", "kube-controller-manager")
    try:
        proc = cluster.kubectl("delete", "ts", "again", "-n", ns, "--wait=true", timeout=60)
        assert proc.returncode == 0, proc.stderr
        # No garbage collector: every child of the old session is still there.
        for kind, uid in old_children.items():
            name = "telo-run-again-attach" if kind == "secret" else "telo-run-again"
            assert get(cluster, ns, kind, name)["metadata"]["uid"] == uid, kind
        # Every version of the new session's status, from a watch: polling could miss one.
        watch = LineReader([cluster.kubectl_path, "--kubeconfig", cluster.kubeconfig, "get", "ts",
                            "-n", ns, "-w", "-o", "jsonpath={.metadata.uid}|{.status.phase}|"
                            "{.status.reason}|{.status.podUID}|{.status.progress.message}{\"\\n\"}"])
        apply(cluster, ns, session("again", attachToken=True))
        new_uid = get_ts(cluster, ns, "again")["metadata"]["uid"]
        assert new_uid != old_uid

        def converged():
            ts = get_ts(cluster, ns, "again")
            st = ts.get("status", {})
            seen.append({k: st.get(k) for k in ("phase", "reason", "podName", "podUID", "podIP")}
                        | {"progress": (st.get("progress") or {}).get("message")})
            assert st.get("phase") != "Failed", json.dumps(st, indent=1)
            assert st.get("podUID") != old_pod_uid, "reports the old pod: %s" % st
            if st.get("phase") != "Running":
                return None
            pod = get(cluster, ns, "pod", "telo-run-again")
            assert pod and owner_uid(pod) == new_uid, (
                "Running on a pod owned by %s (old session %s, new %s): %s" % (
                    pod and owner_uid(pod), old_uid, new_uid, st))
            assert st.get("podUID") == pod["metadata"]["uid"], st
            return ts
        try:
            ts = wait_until(converged, timeout=60, interval=0.2,
                            what="the new session Running on a pod of its own")
            watch.expect(lambda line: line.startswith(new_uid + "|Running|"), timeout=10,
                         what="the watch to see Running")
        finally:
            watch.stop()
        versions = [line.split("|") for line in watch.seen if line.startswith(new_uid + "|")]
        assert versions, watch.seen
        assert not [v for v in versions if v[1] == "Failed" or v[3] == old_pod_uid], versions
        # Said what it waited for on the way (the old pod takes a moment to go).
        assert ["Pending", "Replacing the previous session's pod"] in [
            [v[1], v[4]] for v in versions], versions
        for kind, uid in old_children.items():
            name = "telo-run-again-attach" if kind == "secret" else "telo-run-again"
            obj = wait_until(lambda: (lambda o: o if o and o["metadata"]["uid"] != uid else None)(
                get(cluster, ns, kind, name)), timeout=30, what="a new %s" % kind)
            assert owner_uid(obj) == new_uid, (kind, obj["metadata"])
        new_host = ts["status"]["endpoints"][0]["host"]
        assert new_host != old_host and new_host.startswith("8080-" + host_id(ts)), (
            old_host, new_host)
    finally:
        cluster.script("up.sh")
    # The garbage collector is back: nothing of the new session is collected, and it stays
    # Running on the same pod.
    pod_uid = ts["status"]["podUID"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st = get_ts(cluster, ns, "again")["status"]
        assert st["phase"] == "Running" and st["podUID"] == pod_uid, st
        time.sleep(0.5)


# --- lifecycle -----------------------------------------------------------------------------------

def test_stopped_deletes_the_pod_and_keeps_the_record(cluster, start, pod_namespace):
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test")
    audit = Audit(cluster, ns)
    apply(cluster, ns, hello_bundle(), session("run", attachToken=True),
          session("parked", stopped=True))
    wait_phase(cluster, ns, "run", "Running")
    cluster.kubectl("patch", "ts", "run", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":true}}')
    ts = wait_phase(cluster, ns, "run", "Stopped", timeout=60)
    st = ts["status"]
    assert st["reason"] == "Stopped", st
    assert condition(ts, "Ready")["status"] == "False"
    assert condition(ts, "Stalled")["status"] == "False"
    assert st["observedGeneration"] == ts["metadata"]["generation"] == 2
    wait_until(lambda: get(cluster, ns, "pod", "telo-run-run") is None, timeout=60,
               what="the stopped session's pod to go")
    # Its Service and Ingress go with the pod (nothing left to route to), as the reference
    # runner's did through their owner reference to the pod; the record stays.
    wait_until(lambda: sorted(children(cluster, ns, "run")) == ["Secret"], timeout=20,
               what="only the attach Secret left")
    assert get_ts(cluster, ns, "run")["status"]["phase"] == "Stopped"
    # Stopped from the start: never a pod.
    ts = wait_phase(cluster, ns, "parked", "Stopped", timeout=10)
    assert not [e for e in audit.writes() if e["objectRef"].get("resource") == "pods"
                and e["objectRef"].get("name") == "telo-run-parked"]


def test_ttl_after_finished_deletes_the_session(cluster, start, pod_namespace):
    ns = pod_namespace
    start()
    apply(cluster, ns, hello_bundle(), session("brief", ttlSecondsAfterFinished=3))
    wait_phase(cluster, ns, "brief", "Running")
    chaos(cluster, ns, "telo-run-brief", CHAOS_EXIT, 1, "session", "done")
    ts = wait_phase(cluster, ns, "brief", "Failed", timeout=60)
    finished = time.monotonic()
    assert ts["status"]["completionTime"]
    wait_until(lambda: get_ts(cluster, ns, "brief") is None, timeout=60,
               what="the finished session to be deleted")
    assert time.monotonic() - finished >= 1.5, "deleted before its ttlSecondsAfterFinished"
    wait_until(lambda: not children(cluster, ns, "brief"), timeout=60,
               what="the deleted session's children to go")


# --- what the operator builds --------------------------------------------------------------------

def test_limits_above_the_ceilings_are_clamped(cluster, start, pod_namespace):
    ns = pod_namespace
    start("limits.cpu=250m", "limits.memory=256Mi", "limits.ephemeralStorage=512Mi",
             "limits.ttlSeconds=600")
    apply(cluster, ns, hello_bundle(),
          session("big", resources={"cpu": "4", "memory": "8Gi", "ephemeralStorage": "20Gi"},
                  ttlSeconds=99999),
          session("small", resources={"cpu": "100m", "memory": "64Mi"}, ttlSeconds=60))
    wait_phase(cluster, ns, "big", "Running")
    wait_phase(cluster, ns, "small", "Running")
    big = get(cluster, ns, "pod", "telo-run-big")["spec"]
    ceiling = {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "512Mi"}
    for c in big["containers"] + big["initContainers"]:
        assert c["resources"] == {"limits": ceiling, "requests": ceiling}, c["resources"]
    assert big["activeDeadlineSeconds"] == 600
    small = get(cluster, ns, "pod", "telo-run-small")["spec"]
    kept = {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "512Mi"}
    assert small["containers"][0]["resources"] == {"limits": kept, "requests": kept}
    assert small["activeDeadlineSeconds"] == 60


def test_ingress_hosts_and_endpoints_with_a_base_domain(cluster, start, pod_namespace):
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test", "ingress.className=nginx",
             "ingress.tlsSecretName=wildcard-tls")
    long_name = "a-session-with-a-rather-long-name-" + "x" * 20
    web = session("web", ports=((8080, "TCP"), (9230, "TCP"), (5353, "UDP")))
    web["spec"]["ports"][1]["name"] = "debug"
    apply(cluster, ns, hello_bundle(), web, session(long_name))
    ts = wait_phase(cluster, ns, "web", "Running")
    host = lambda port: "%d-%s.sessions.example.test" % (port, host_id(ts))  # noqa: E731
    assert ts["status"]["endpoints"] == not_probed([
        {"name": "p8080", "port": 8080, "protocol": "TCP", "host": host(8080),
         "url": "https://" + host(8080)},
        {"name": "debug", "port": 9230, "protocol": "TCP", "host": host(9230),
         "url": "https://" + host(9230)},
        {"name": "p5353-udp", "port": 5353, "protocol": "UDP",
         "host": "telo-run-web.%s.svc" % ns}], ts["status"]), ts["status"]["endpoints"]
    ing = get(cluster, ns, "ingress", "telo-run-web")["spec"]
    assert ing["ingressClassName"] == "nginx"
    assert [(r["host"], r["http"]["paths"][0]["backend"]["service"]) for r in ing["rules"]] == [
        (host(8080), {"name": "telo-run-web", "port": {"number": 8080}}),
        (host(9230), {"name": "telo-run-web", "port": {"number": 9230}})], ing["rules"]
    assert ing["tls"] == [{"hosts": [host(8080), host(9230)], "secretName": "wildcard-tls"}]
    svc = get(cluster, ns, "service", "telo-run-web")["spec"]
    assert [(p["port"], p["protocol"]) for p in svc["ports"]] == [
        (8080, "TCP"), (9230, "TCP"), (5353, "UDP")]
    assert svc["selector"] == {"telo.run/session": "web"}
    table = cluster.kubectl("get", "ts", "web", "-n", ns).stdout
    assert "https://" + host(8080) in table, table

    # A name too long for a DNS label with the namespace: cut and hashed, still one label.
    ts = wait_phase(cluster, ns, long_name, "Running")
    endpoint = ts["status"]["endpoints"][0]
    label = endpoint["host"].split(".")[0]
    assert label == "8080-" + host_id(ts) and dns_label(label), endpoint
    pod = ts["status"]["podName"]
    assert len(pod) <= 63 and get(cluster, ns, "pod", pod), pod
    ing = get(cluster, ns, "ingress", pod)["spec"]
    assert ing["rules"][0]["host"] == endpoint["host"]


def test_ingress_hosts_do_not_collide_across_namespaces(cluster, start, pod_namespace):
    """Name "web-x" in namespace N and name "web" in namespace "x-N" both read "web-x-N": hosts
    share one DNS zone, so joining the names alone would route two sessions to one host."""
    ns = pod_namespace
    other = "x-" + ns
    cluster.kubectl("create", "namespace", other)
    try:
        wait_until(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", other,
                                           check=False).returncode == 0,
                   timeout=30, what="the default ServiceAccount in %s" % other)
        start("namespaces=%s,%s" % (ns, other), "ingress.baseDomain=sessions.example.test")
        apply(cluster, ns, hello_bundle(), session("web-x"))
        apply(cluster, other, hello_bundle(), session("web"))
        hosts = {}
        for where, name in ((ns, "web-x"), (other, "web")):
            ts = wait_phase(cluster, where, name, "Running")
            st = ts["status"]
            host = st["endpoints"][0]["host"]
            label, domain = host.split(".", 1)
            assert domain == "sessions.example.test" and dns_label(label), host
            assert label == "8080-" + host_id(ts), (label, host_id(ts))
            # Readable: the session and its namespace are in the host.
            assert label.startswith("8080-web-x-" + ns[:30]), label
            ing = get(cluster, where, "ingress", pod_name(name))["spec"]
            assert [r["host"] for r in ing["rules"]] == [host], ing["rules"]
            hosts[(where, name)] = host
        assert len(set(hosts.values())) == 2, hosts
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_endpoints_without_a_base_domain_have_no_ingress(cluster, start, pod_namespace):
    ns = pod_namespace
    start()
    apply(cluster, ns, hello_bundle(), session("plain", ports=((8080, "TCP"), (5353, "UDP"))))
    ts = wait_phase(cluster, ns, "plain", "Running")
    svc_host = "telo-run-plain.%s.svc" % ns
    assert ts["status"]["endpoints"] == not_probed([
        {"name": "p8080", "port": 8080, "protocol": "TCP", "host": svc_host},
        {"name": "p5353-udp", "port": 5353, "protocol": "UDP", "host": svc_host}], ts["status"])
    # No Secret either: spec.attachToken is off by default (issue 20).
    assert sorted(children(cluster, ns, "plain")) == ["Pod", "Service"]


def test_udp_only_session_gets_a_service_and_no_ingress(cluster, start, pod_namespace):
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test")
    cluster.kubectl("apply", "-n", ns, "-f", HELLO_SAMPLE,
                    "-f", os.path.join(ROOT, "crds", "samples", "udp.yaml"))
    ts = wait_phase(cluster, ns, "hello-udp", "Running")
    assert ts["status"]["endpoints"] == not_probed([{"name": "dns", "port": 5353, "protocol": "UDP",
                                                     "host": "telo-run-hello-udp.%s.svc" % ns}],
                                                   ts["status"])
    svc = get(cluster, ns, "service", "telo-run-hello-udp")["spec"]
    assert [(p["port"], p["protocol"]) for p in svc["ports"]] == [(5353, "UDP")]
    wait_phase(cluster, ns, "hello", "Running")  # the TCP one next to it does get an Ingress
    assert sorted(children(cluster, ns, "hello-udp")) == ["Pod", "Service"]
    assert "Ingress" in children(cluster, ns, "hello")


def test_children_changed_by_hand_are_put_back_and_spec_changes_follow(cluster, start,
                                                                      pod_namespace):
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test")
    audit = Audit(cluster, ns)
    apply(cluster, ns, hello_bundle(), session("drift", attachToken=True))
    wait_phase(cluster, ns, "drift", "Running")
    token = get(cluster, ns, "secret", "telo-run-drift-attach")["data"]["token"]
    svc_uid = get(cluster, ns, "service", "telo-run-drift")["metadata"]["uid"]
    cluster.kubectl("delete", "service", "telo-run-drift", "-n", ns)
    cluster.kubectl("delete", "ingress", "telo-run-drift", "-n", ns)
    wait_until(lambda: (get(cluster, ns, "service", "telo-run-drift") or {}).get(
        "metadata", {}).get("uid", svc_uid) != svc_uid, timeout=20, what="the Service back")
    wait_until(lambda: get(cluster, ns, "ingress", "telo-run-drift"), timeout=20,
               what="the Ingress back")
    # The attach token survives all this.
    assert get(cluster, ns, "secret", "telo-run-drift-attach")["data"]["token"] == token

    # A new port: Service, Ingress and endpoints follow; the pod (immutable) stays.
    pod_uid = get(cluster, ns, "pod", "telo-run-drift")["metadata"]["uid"]
    cluster.kubectl("patch", "ts", "drift", "-n", ns, "--type=json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/ports/-", "value": {"port": 9000, "protocol": "TCP"}}]))

    def followed():
        ts = get_ts(cluster, ns, "drift")
        ports = [e["port"] for e in ts["status"].get("endpoints", [])]
        svc = [p["port"] for p in get(cluster, ns, "service", "telo-run-drift")["spec"]["ports"]]
        hosts = [r["host"] for r in get(cluster, ns, "ingress", "telo-run-drift")["spec"]["rules"]]
        return (ts["status"]["observedGeneration"] == 2 and ports == [8080, 9000]
                and svc == [8080, 9000] and len(hosts) == 2)
    wait_until(followed, timeout=20, what="service, ingress and endpoints to gain port 9000")
    assert get(cluster, ns, "pod", "telo-run-drift")["metadata"]["uid"] == pod_uid
    assert all(c["observedGeneration"] == 2
               for c in get_ts(cluster, ns, "drift")["status"]["conditions"])
    time.sleep(2)
    secrets = [e for e in audit.writes() if e["objectRef"]["resource"] == "secrets"]
    assert len(secrets) == 1, Audit.describe(secrets)


def test_operator_restarted_without_a_base_domain_removes_the_ingress(cluster, start,
                                                                      pod_namespace):
    ns = pod_namespace
    op = start("ingress.baseDomain=sessions.example.test")
    apply(cluster, ns, hello_bundle(), session("moved"))
    ts = wait_phase(cluster, ns, "moved", "Running")
    assert ts["status"]["endpoints"][0]["url"] == (
        "http://8080-%s.sessions.example.test" % host_id(ts))
    op.restart(sets=[s_ for s_ in op.sets if not s_.startswith("ingress.")])
    wait_until(lambda: get(cluster, ns, "ingress", "telo-run-moved") is None, timeout=20,
               what="the Ingress to go with the base domain")
    wait_until(lambda: "url" not in get_ts(cluster, ns, "moved")["status"]["endpoints"][0],
               timeout=20, what="the endpoint to lose its URL")
    assert get_ts(cluster, ns, "moved")["status"]["phase"] == "Running"


def test_annotations_dropped_from_the_config_leave_the_session_ingress(cluster, start,
                                                                       pod_namespace):
    """ingress.annotations changed by the administrator: a key no longer configured goes from a
    running session's Ingress at the operator's restart, and all of them when none is left;
    annotations others put there (cert-manager's, a person's) stay."""
    ns = pod_namespace
    op = start("ingress.baseDomain=sessions.example.test",
               "ingress.annotations=a.example/keep=1,a.example/drop=2")
    apply(cluster, ns, hello_bundle(), session("annot"))
    wait_phase(cluster, ns, "annot", "Running")

    def annotations():
        return (get(cluster, ns, "ingress", "telo-run-annot") or {}).get("metadata", {}).get(
            "annotations") or {}
    wait_until(lambda: annotations().get("a.example/drop") == "2", timeout=20,
               what="the configured annotations on the Ingress")
    cluster.kubectl("annotate", "ingress", "telo-run-annot", "-n", ns, "other.example/theirs=x")
    base = [s_ for s_ in op.sets if not s_.startswith("ingress.annotations=")]
    op.restart(sets=base + ["ingress.annotations=a.example/keep=1"])
    wait_until(lambda: "a.example/drop" not in annotations(), timeout=20,
               what="the dropped annotation to go: %s" % annotations())
    ann = annotations()
    assert ann["a.example/keep"] == "1" and ann["other.example/theirs"] == "x", ann
    op.restart(sets=base)
    wait_until(lambda: "a.example/keep" not in annotations(), timeout=20,
               what="the last configured annotation to go: %s" % annotations())
    assert annotations() == {"other.example/theirs": "x"}, annotations()
    assert get_ts(cluster, ns, "annot")["status"]["phase"] == "Running"


@pytest.mark.parametrize("argv,words", [
    (["--set", "limits.cpu=lots"], ["limits.cpu", '"lots" is not a positive quantity']),
    (["--set", "ingress.basedomain=x"], ["unknown key 'ingress.basedomain'", "ingress.baseDomain"]),
    (["--set", "startDeadlineSeconds=0"], ["startDeadlineSeconds", "whole number"]),
    (["--resync-period", "0"], ["--resync-period 0"]),
], ids=["quantity", "unknown-key", "deadline", "resync-period"])
def test_bad_operator_settings_are_refused_at_start(cluster, argv, words):
    from conftest import OPERATOR_BIN_DIR
    proc = subprocess.run([os.path.join(OPERATOR_BIN_DIR, "telo-operator"), "run",
                           "--kubeconfig", cluster.kubeconfig, "--http-bind-address", "0", *argv],
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
    for w in words:
        assert w in proc.stderr, proc.stderr


def test_several_namespaces_are_served_and_no_other(cluster, start, pod_namespace):
    ns = pod_namespace
    extra = ["%s-%s" % (ns[:50], suffix) for suffix in ("b", "c")]
    for name in extra:
        cluster.kubectl("create", "namespace", name)
    try:
        for name in extra:
            wait_until(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name,
                                               check=False).returncode == 0,
                       timeout=30, what="the default ServiceAccount in %s" % name)
            apply(cluster, name, hello_bundle(), session("elsewhere"))
        apply(cluster, ns, hello_bundle(), session("here"))
        # With more than one namespace the informers list every namespace: the others' sessions
        # are cached, and must be left alone.
        op = start("namespaces=%s,%s" % (ns, extra[0]))
        wait_phase(cluster, ns, "here", "Running")
        wait_phase(cluster, extra[0], "elsewhere", "Running")
        time.sleep(3)
        assert "status" not in get_ts(cluster, extra[1], "elsewhere")
        assert get(cluster, extra[1], "pod", "telo-run-elsewhere") is None
        assert not Audit(cluster, extra[1]).writes()
        assert op.metric("telo_sessions", {"phase": "Running"}) == 2
    finally:
        for name in extra:
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


# --- bad inputs the schema cannot see ------------------------------------------------------------

def test_missing_configmap_stalls_until_it_exists_and_others_keep_running(
        cluster, start, pod_namespace):
    ns = pod_namespace
    start()
    apply(cluster, ns, hello_bundle(), session("lost", bundle="lost-bundle"))

    def blocked():
        ts = get_ts(cluster, ns, "lost")
        return ts if ts.get("status", {}).get("reason") == "BundleNotFound" else None
    ts = wait_until(blocked, timeout=20, what="lost to report BundleNotFound")
    st = ts["status"]
    assert st["phase"] == "Pending", st
    assert "ConfigMap lost-bundle (spec.bundle.configMap.name) does not exist" in st["message"]
    assert "kubectl create configmap lost-bundle -n %s" % ns in st["message"]
    stalled = condition(ts, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "BundleNotFound", stalled
    assert condition(ts, "Reconciling")["status"] == "False"
    assert get(cluster, ns, "pod", "telo-run-lost") is None

    # Meanwhile the operator serves everyone else.
    apply(cluster, ns, session("fine"))
    wait_phase(cluster, ns, "fine", "Running", timeout=60)

    apply(cluster, ns, hello_bundle("lost-bundle"))
    ts = wait_phase(cluster, ns, "lost", "Running", timeout=60)
    assert condition(ts, "Stalled")["status"] == "False"
    assert "reason" not in ts["status"], ts["status"]


def test_configmap_without_the_bundle_key_stalls_with_bundle_not_found(cluster, start,
                                                                       pod_namespace):
    ns = pod_namespace
    start()
    ts = session("keyless")
    ts["spec"]["bundle"]["configMap"]["key"] = "app.tgz"
    apply(cluster, ns, hello_bundle(), ts)
    ts = wait_until(lambda: (lambda t: t if t.get("status", {}).get("reason") == "BundleNotFound"
                             else None)(get_ts(cluster, ns, "keyless")),
                    timeout=20, what="keyless to report BundleNotFound")
    assert ts["status"]["phase"] == "Pending"
    assert "ConfigMap hello-bundle has no key app.tgz" in ts["status"]["message"], ts["status"]
    assert condition(ts, "Stalled")["status"] == "True"
    assert get(cluster, ns, "pod", "telo-run-keyless") is None


# --- restarts and steady state -------------------------------------------------------------------

def test_sigkill_in_the_middle_leaves_every_session_correct_and_creates_nothing_twice(
        cluster, start, pod_namespace, hold):
    ns = pod_namespace
    audit = Audit(cluster, ns)
    op = start("startDeadlineSeconds=40", "ingress.baseDomain=sessions.example.test", hold=hold)
    names = ["run", "vanish", "stop", "crash", "pull", "udp", "brief"]
    apply(cluster, ns, hello_bundle(),
          *[session(n) for n in names if n not in ("udp", "brief")],
          session("udp", ports=((5353, "UDP"),)),
          session("brief", ttlSecondsAfterFinished=2),
          session("parked", stopped=True),
          session("blocked", bundle="late-bundle"))
    for n in names:
        wait_pod(cluster, ns, n)
    mark_pod(cluster, ns, "telo-run-pull", {IMAGE_PULL: "backoff"})
    hold.release()
    for n in ["run", "vanish", "stop", "crash", "udp", "brief"]:
        wait_phase(cluster, ns, n, "Running")
    wait_phase(cluster, ns, "parked", "Stopped")
    wait_until(lambda: get_ts(cluster, ns, "blocked")["status"].get("reason") == "BundleNotFound",
               timeout=15, what="blocked to report BundleNotFound")
    wait_until(lambda: get_ts(cluster, ns, "pull")["status"].get("progress", {}).get("message")
               == "Pulling image", timeout=15, what="pull to be pulling")
    uids = {n: get(cluster, ns, "pod", pod_name(n))["metadata"]["uid"] for n in names}

    # A burst of new sessions, and SIGKILL while their writes are in flight.
    burst = ["b%d" % i for i in range(10)]
    apply(cluster, ns, *[session(n) for n in burst])
    time.sleep(0.3)
    op.kill()

    # While it is down: the app of one exits, one pod is deleted, one session is stopped and
    # the missing bundle appears.
    chaos(cluster, ns, "telo-run-crash", CHAOS_EXIT, 3, "session", "crashed-while-down")
    chaos(cluster, ns, "telo-run-brief", CHAOS_EXIT, 1, "session", "ended-while-down")
    cluster.kubectl("delete", "pod", "telo-run-vanish", "-n", ns)
    cluster.kubectl("patch", "ts", "stop", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":true}}')
    apply(cluster, ns, hello_bundle("late-bundle"))
    for n in ("crash", "brief"):
        wait_until(lambda: get(cluster, ns, "pod", pod_name(n))["status"]["phase"] == "Failed",
                   timeout=60, what="the %s pod to fail" % n)

    op.start()
    for n in burst + ["run", "udp", "blocked"]:
        wait_phase(cluster, ns, n, "Running", timeout=60)
    assert_failure(wait_phase(cluster, ns, "crash", "Failed", timeout=60), "AppExited",
                   'container "session"', "exit code 3", "crashed-while-down")
    assert_failure(wait_phase(cluster, ns, "vanish", "Failed", timeout=60), "PodDisappeared",
                   "pod telo-run-vanish was deleted")
    wait_phase(cluster, ns, "stop", "Stopped", timeout=60)
    # Ended while the operator was down: Failed once it is back, deleted 2 s later.
    wait_until(lambda: get_ts(cluster, ns, "brief") is None, timeout=60,
               what="brief (ttlSecondsAfterFinished 2) to be deleted")
    wait_phase(cluster, ns, "parked", "Stopped")
    assert_failure(wait_phase(cluster, ns, "pull", "Failed", timeout=45), "ImagePullFailed",
                   'container "session"', "ImagePullBackOff")
    wait_until(lambda: get(cluster, ns, "pod", "telo-run-stop") is None, timeout=60,
               what="the stopped session's pod to go")

    # Survivors kept their pods; nothing was created twice; no pod for the vanished or parked.
    for n in ["run", "udp", "crash"]:
        assert get(cluster, ns, "pod", pod_name(n))["metadata"]["uid"] == uids[n], n
    brief = [e for e in audit.writes() if e["objectRef"].get("name") == "brief"
             and e["objectRef"]["resource"] == "telosessions" and e["verb"] == "delete"]
    assert brief, "the operator deletes a session ttlSecondsAfterFinished after it ended"
    time.sleep(2)
    creates = audit.creates()
    twice = {k: v for k, v in creates.items() if v > 1 and k[0] != "events"}
    assert not twice, "created more than once: %s" % twice
    pods = {name for (resource, name) in creates if resource == "pods"}
    assert pods == {pod_name(n) for n in names + burst + ["blocked"]}, pods
    ingresses = {name for (resource, name) in creates if resource == "ingresses"}
    assert pod_name("udp") not in ingresses
    # Not even a repeated apply of an existing child (a second attach Secret apply would also
    # replace the token clients hold). An apply cut short by the SIGKILL is answered 504 and
    # changes nothing: only the ones that took effect count.
    applies = collections.Counter((e["objectRef"]["resource"], e["objectRef"]["name"])
                                  for e in audit.writes() if e["verb"] == "patch"
                                  and e["objectRef"]["resource"] in CHILD_RESOURCES
                                  and e.get("responseStatus", {}).get("code", 0) < 300)
    assert not {k: v for k, v in applies.items() if v > 1}, applies


def test_a_burst_on_one_bundle_reads_it_once_and_writes_each_session_lean(
        cluster, start, pod_namespace):
    """20 sessions on one bundle, applied at once: the bundle ConfigMap is read a few times, not
    once per session; each session gets one pod apply, no Secret (none asked for with
    spec.attachToken: issue 20), no bare Pending status (its pod's arrival writes Provisioning or
    Running) and at most one Event per transition."""
    ns = pod_namespace
    audit = Audit(cluster, ns)
    start()
    names = ["burst-%02d" % i for i in range(20)]
    apply(cluster, ns, hello_bundle(), *[session(n, ports=()) for n in names])
    for n in names:
        ts = wait_phase(cluster, ns, n, "Running", timeout=90)
        assert "secretName" not in ts["status"].get("attach", {}), ts["status"]
    time.sleep(2)
    seen = audit.events()
    reads = [e for e in seen if e["verb"] == "get" and e["objectRef"]["resource"] == "configmaps"]
    # 20 would be one per session; a read answers the others for 5 s.
    assert 1 <= len(reads) <= 4, Audit.describe(reads)
    ok = [e for e in seen if e["verb"] in Audit.WRITES
          and e.get("responseStatus", {}).get("code", 0) < 300]
    per = collections.Counter((e["objectRef"]["resource"], e["objectRef"].get("subresource", ""))
                              for e in ok if e["objectRef"]["resource"] != "events")
    assert per[("pods", "")] == len(names), per
    assert per[("secrets", "")] == 0, per
    status = collections.Counter(e["objectRef"]["name"] for e in ok
                                 if e["objectRef"]["resource"] == "telosessions"
                                 and e["objectRef"].get("subresource") == "status")
    assert set(status) == set(names) and max(status.values()) <= 2, status
    events = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns)["items"]
    ours = [e for e in events if e["regarding"]["kind"] == "TeloSession"]
    assert not [e for e in ours if e["reason"] == "Pending"], ours
    stories = collections.Counter((e["regarding"]["name"], e["reason"]) for e in ours)
    assert not {k: v for k, v in stories.items() if v > 1}, stories
    assert all((e.get("series") or {}).get("count", 1) == 1 for e in ours), ours


def test_a_burst_in_one_namespace_tells_its_story_within_the_namespace_event_budget(
        cluster, start, pod_namespace):
    """events.namespaceBurst 3, one token a minute: 8 sessions starting at once in one namespace
    get at most 3 Running Events between them (issue 20: a burst's Events are told at a rate),
    while every status says Running and a failing session's Warning is never held back."""
    ns = pod_namespace
    start("events.namespaceBurst=3", "events.namespaceRefillSeconds=60")
    names = ["told-%d" % i for i in range(8)]
    apply(cluster, ns, hello_bundle(), *[session(n, ports=()) for n in names])
    for n in names:
        wait_phase(cluster, ns, n, "Running", timeout=90)
    apply(cluster, ns, session("broken", bundle="no-such-bundle", ports=()))

    def theirs():
        items = cluster.kubectl_json("get", "events.events.k8s.io", "-n", ns)["items"]
        return [e for e in items if e["regarding"]["kind"] == "TeloSession"]
    warned = wait_until(lambda: [e for e in theirs() if e["regarding"]["name"] == "broken"
                                 and e["type"] == "Warning"], timeout=30,
                        what="the Warning of the session whose bundle is missing")
    assert warned[0]["reason"] == "BundleNotFound", warned
    running = [e["regarding"]["name"] for e in theirs() if e["reason"] == "Running"]
    assert 1 <= len(running) <= 3 and set(running) <= set(names), running
    normal = [e for e in theirs() if e["type"] == "Normal"]
    assert len(normal) <= 3, [(e["regarding"]["name"], e["reason"]) for e in normal]


# --- reachability at scale: kwok pods on a loopback pod network ---------------------------------

# kwok's pods have made-up addresses, routed off this machine: no test may connect to them. The
# 100-session steady state wants them probed and Reachable all the same, so its kwok node takes
# its pods' addresses from a network of its own that this machine makes local for the test (an
# AnyIP route, `ip route add local CIDR dev lo`): a connection to any address in it is delivered
# to this machine's own listener, never leaves it (in-cluster, the operator's pod reaches it
# through the real node's bridge, as it does the node).
LOOPBACK_POD_CIDR = os.environ.get("TELO_E2E_LOOPBACK_POD_CIDR", "10.87.0.0/16")
ROUTE_KINDS = ("local", "broadcast", "unicast", "unreachable", "blackhole", "prohibit", "throw",
               "anycast", "multicast", "nat")


def ip_cmd(*args, check=True):
    proc = subprocess.run(("ip",) + args, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 or not check, "ip %s: %s" % (" ".join(args), proc.stderr)
    return proc.stdout


def routes_into(net):
    """This machine's routes (every table) and interface addresses that overlap net."""
    found = []
    for line in ip_cmd("-4", "route", "show", "table", "all").splitlines():
        words = line.split()
        if not words:
            continue
        dst = words[1] if words[0] in ROUTE_KINDS and len(words) > 1 else words[0]
        try:
            if dst != "default" and ipaddress.ip_network(dst, strict=False).overlaps(net):
                found.append(line)
        except ValueError:
            pass
    for line in ip_cmd("-4", "-o", "addr", "show").splitlines():
        words = line.split()
        if "inet" in words and ipaddress.ip_interface(words[words.index("inet") + 1]) \
                .network.overlaps(net):
            found.append(line)
    return found


@pytest.fixture(scope="module")
def loopback_pod_network():
    """LOOPBACK_POD_CIDR made local to this machine for the module (so torn down after every
    operator of its tests stopped), checked unused first and checked with `ip route get` to
    resolve to `local ... dev lo` at both ends before any test uses it."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("a loopback pod network needs root and ip(8)")
    net = ipaddress.ip_network(LOOPBACK_POD_CIDR)
    ours = "local %s dev lo" % net
    found = routes_into(net)
    others = [line for line in found if not line.startswith(ours)]
    if others:
        pytest.fail("%s is in use on this machine (%s); set TELO_E2E_LOOPBACK_POD_CIDR to a free "
                    "network" % (net, "; ".join(others)), pytrace=False)
    if not found:  # else the route of a run killed before its teardown: ours to reuse and remove
        ip_cmd("route", "add", "local", str(net), "dev", "lo")
    try:
        for host in (net[1], net[-2]):
            got = ip_cmd("route", "get", str(host)).splitlines()[0]
            assert got.startswith("local %s dev lo" % host), \
                "%s would not stay on this machine: %s" % (host, got)
        yield str(net)
    finally:
        ip_cmd("route", "del", "local", str(net), "dev", "lo", check=False)


@pytest.fixture(scope="module")
def probed_node(cluster, loopback_pod_network):
    """A kwok node of the module's own whose pods get addresses on the loopback pod network."""
    yield from own_kwok_node(cluster, "e2e-probed", pod_cidr=loopback_pod_network)


class AppListener:
    """The sessions' app: a TCP listener of the test on 0.0.0.0 (a free port, which the sessions
    declare), accepting and closing every connection and counting them, so the test sees the
    operator's probes arrive. close() makes every later connect refused at once."""

    def __init__(self, port=0):
        self.sock = socket.create_server(("0.0.0.0", port), backlog=1024)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()
            with self.lock:
                self.accepted += 1

    def count(self):
        with self.lock:
            return self.accepted

    def close(self):
        # shutdown first: a close alone leaves accept() blocked, taking one more connection.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


@pytest.fixture
def app_listeners():
    """app_listeners(port=0): a new AppListener, closed at teardown."""
    made = []

    def make(port=0):
        made.append(AppListener(port))
        return made[-1]
    yield make
    for listener in made:
        listener.close()


def status_writes(events):
    """Successful status writes per session name, from audit events."""
    return collections.Counter(e["objectRef"]["name"] for e in events
                               if e["objectRef"]["resource"] == "telosessions"
                               and e["objectRef"].get("subresource") == "status"
                               and e.get("responseStatus", {}).get("code", 0) < 300)


def by_resource(events):
    return dict(collections.Counter("%s%s" % (e["objectRef"]["resource"],
                                              "/" + e["objectRef"]["subresource"]
                                              if e["objectRef"].get("subresource") else "")
                                    for e in events))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_steady_state_with_100_running_sessions_writes_nothing(
        cluster, probed_node, loopback_pod_network, start, pod_namespace, app_listeners):
    """100 sessions Running and Ready with their port probed and Reachable (issue 17): in a
    half minute of steady state, with the operator resyncing every 10 s and probing every port
    again at each resync, the audit log shows no write; nor after a restart. Then the app stops
    listening: every session goes Unreachable (Degraded), its status written for that change
    only, and nothing is written while it stays so; the app back, each is Ready again."""
    ns = pod_namespace
    audit = Audit(cluster, ns)
    n = 100
    app = app_listeners()
    net = ipaddress.ip_network(loopback_pod_network)
    op = start("ingress.baseDomain=sessions.example.test", "startDeadlineSeconds=120",
               "reachability.podCIDRs=" + loopback_pod_network, "reachability.timeoutSeconds=5",
               args=["--resync-period", "10"], node=probed_node)
    names = ["s%03d" % i for i in range(n)]
    t0 = time.monotonic()
    apply(cluster, ns, hello_bundle(), *[session(name, ports=((app.port, "TCP"),))
                                         for name in names])

    def sessions_where(check):
        def poll():
            items = cluster.kubectl_json("get", "ts", "-n", ns)["items"]
            return items if len(items) == n and all(check(i) for i in items) else None
        return poll

    def ready(ts):
        st = ts.get("status", {})
        return (st.get("phase") == "Running" and
                [e.get("state") for e in st.get("endpoints", [])] == ["Reachable"] and
                any(c["type"] == "Ready" and c["status"] == "True"
                    for c in st.get("conditions", [])))
    items = wait_until(sessions_where(ready), timeout=120, interval=1,
                       what="%d sessions Running, Ready, their port Reachable" % n)
    print("%d sessions applied, Ready and Reachable in %.1f s" % (n, time.monotonic() - t0))
    for ts in items:
        st = ts["status"]
        assert ipaddress.ip_address(st["podIP"]) in net, st  # probed where it stays local
        assert condition(ts, "AppReachable")["status"] == "True", st
        assert condition(ts, "AppReachable")["reason"] == "Reachable", st
    # Each became Running once: one startup observation each (a reconcile reading a status the
    # cache had not caught up with recomputed the transition and counted it again).
    assert op.metric("telo_session_startup_seconds_count") == n
    # Let the last status writes and Events land, then watch 30 s of nothing changing.
    time.sleep(3)
    since = now_rfc3339()
    reconciles = op.metric("controller_runtime_reconcile_total")
    probes = app.count()
    time.sleep(30)
    writes = audit.writes(since=since)
    resynced = op.metric("controller_runtime_reconcile_total") - reconciles
    probed = app.count() - probes
    print("steady 30 s: %d writes, %d reconciles, %d probes accepted" % (len(writes), resynced,
                                                                          probed))
    assert not writes, "steady state wrote %d times: %s" % (len(writes),
                                                            Audit.describe(writes)[:20])
    # --resync-period 10 (each session's 9-11 s): at least two resyncs of every session happened
    # in the half minute, and each probed its Reachable port again: the probes kept running, they
    # wrote nothing.
    assert resynced >= 2 * n, "only %d reconciles in 30 s with --resync-period 10" % resynced
    assert probed >= 2 * n, "only %d probes in 30 s with --resync-period 10" % probed

    # A restart is the strongest resync: a fresh list of everything, every session reconciled,
    # every port probed afresh (a prober that knows nothing yet keeps what the status says).
    since = now_rfc3339()
    probes = app.count()
    op.restart()
    wait_until(lambda: op.metric("controller_runtime_reconcile_total") >= n, timeout=30,
               what="every session reconciled after the restart")
    wait_until(lambda: app.count() - probes >= n, timeout=30,
               what="every port probed after the restart")
    time.sleep(3)
    writes = audit.writes(since=since)
    print("restart: %d writes, %d probes accepted" % (len(writes), app.count() - probes))
    assert not writes, "a restart wrote %d times: %s" % (len(writes), Audit.describe(writes)[:20])

    # The app stops listening: at the next resync's probe each session goes Checking, then
    # Unreachable (Degraded, AppUnreachable) reachability.timeoutSeconds later.
    since = now_rfc3339()
    app.close()
    t0 = time.monotonic()
    items = wait_until(sessions_where(
        lambda ts: ts.get("status", {}).get("reason") == "AppUnreachable"), timeout=60,
        interval=1, what="every session Degraded (AppUnreachable)")
    print("%d sessions AppUnreachable %.1f s after the app closed" % (n, time.monotonic() - t0))
    for ts in items:
        st = ts["status"]
        assert st["phase"] == "Running", st  # Degraded, not Failed
        assert [e["state"] for e in st["endpoints"]] == ["Unreachable"], st
        assert condition(ts, "AppReachable")["reason"] == "Unreachable", st
        assert condition(ts, "Ready")["status"] == "False", st
    time.sleep(3)
    down = [e for e in audit.writes(since=since)
            if e.get("responseStatus", {}).get("code", 0) < 300]
    per = status_writes(down)
    print("outage: writes %s, status writes per session %s" % (
        by_resource(down), dict(collections.Counter(per.values()))))
    # One status write for each change the session went through: Checking, then Unreachable.
    assert set(per) == set(names) and set(per.values()) == {2}, per
    # Unreachable and staying so: probed every intervalSeconds, and at the resync; no write.
    since = now_rfc3339()
    time.sleep(11)  # two probe intervals (5 s)
    writes = audit.writes(since=since)
    print("unreachable 11 s: %d writes" % len(writes))
    assert not writes, "an unreachable steady state wrote %d times: %s" % (
        len(writes), Audit.describe(writes)[:20])

    # The app back on its port: the next probe (every intervalSeconds) finds it, one write each.
    since = now_rfc3339()
    app = app_listeners(app.port)
    t0 = time.monotonic()
    wait_until(sessions_where(ready), timeout=30, interval=1,
               what="every session Ready again")
    print("%d sessions Ready again %.1f s after the app came back" % (n, time.monotonic() - t0))
    time.sleep(3)
    back = [e for e in audit.writes(since=since)
            if e.get("responseStatus", {}).get("code", 0) < 300]
    per = status_writes(back)
    print("recovery: writes %s, status writes per session %s" % (
        by_resource(back), dict(collections.Counter(per.values()))))
    assert set(per) == set(names) and set(per.values()) == {1}, per
"""On-cluster image builds end to end (issue 6): the operator (build/bin/telo-operator run, or
$TELO_BIN_DIR) with builds configured against a real registry, Debian's docker-registry with
htpasswd Basic auth that `TELO_BUILD_REGISTRY=1 hack/cluster/up.sh` starts on TELO_REGISTRY_PORT
(or TELO_BUILD_REGISTRY_PORT), and real images pushed into it with umoci and skopeo.

Build Jobs run on kwok: their pod completes through kwok's pod-complete stage, or fails through
the chaos stage pod-container-running-failed, and `kubectl logs` of the builder is served by the
ClusterLogs up.sh configures (the file kwok-logs/build.log under the cluster directory). To hold a
build "running" while the test looks, the operator's build.nodeSelector names a label no node has
yet (the Hold of test_sessions); releasing it lets the scheduler bind the pod and kwok play it.

Every test gets its own session namespace and its own build namespace (with the push Secret), so
Jobs of different tests never meet; writes are counted from the API server's audit log."""

import base64
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import (AS_SERVICE_ACCOUNT, ROOT, TcpProxy, pod_reachable_host, run_tool,
                      wait_until)
from test_sessions import (SESSION_NODE_KEY, Audit, Hold, apply, condition, get, get_ts,  # noqa: F401
                           hello_bundle, session, session_node, start, wait_phase)

TOOLS = ("umoci", "skopeo", "docker-registry", "htpasswd")
BIN_DIR = os.path.join(ROOT, os.environ.get("TELO_BIN_DIR") or os.path.join("build", "bin"))
CHECK_BIN = os.path.join(BIN_DIR, "telo-build-check")
CHAOS_EXIT = "pod-container-running-failed.stage.kwok.x-k8s.io"
BASE_IMAGE = "telorun/node:latest-slim"      # the operator's default images.default
TELO_REGISTRY = "https://registry.telo.run"  # and its default registryUrl
REPO_PATH = "telo/apps"

pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                reason="needs %s" % ", ".join(TOOLS))

APP = """kind: Telo.Application
metadata:
  name: Hello
  version: 1.0.0
imports:
  Http: std/http-server@0.15.0
  JavaScript: std/javascript@0.5.0
targets:
  - !ref Server
---
kind: Http.Server
metadata:
  name: Server
port: 8080
mounts:
  - path: /
    mount: !ref Api
---
kind: Http.Api
metadata:
  name: Api
routes:
  - request: {path: /hello, method: GET}
    handler:
      kind: JavaScript.Script
      code: 'function main() { return { greeting: %s }; }'
"""


# --- the registry and the bundles ----------------------------------------------------------------

@pytest.fixture(scope="module")
def registry(cluster):
    """The cluster's build registry, started by up.sh if it is not running yet."""
    env = dict(os.environ, TELO_BUILD_REGISTRY="1")
    proc = subprocess.run([os.path.join(ROOT, "hack", "cluster", "up.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail("the build registry did not start: %s" % proc.stderr[-1500:])
    d = os.path.join(cluster.dir, "build-registry")
    with open(os.path.join(d, "dockerconfig.json")) as f:
        config = json.load(f)
    host = local = next(iter(config["auths"]))
    user, password = base64.b64decode(config["auths"][host]["auth"]).decode().split(":", 1)
    proxy = None
    reach = pod_reachable_host(cluster)
    if reach != "127.0.0.1":
        # In-cluster the operator asks the registry from its pod: the same registry, where the
        # real node's pods reach it.
        proxy = TcpProxy("127.0.0.1", int(host.rsplit(":", 1)[1]), bind_host=reach)
        host = "%s:%d" % (reach, proxy.port)
    # "repository" as the operator reaches it, "local" as this machine does (the test's pushes).
    yield {"host": host, "user": user, "password": password, "config": config,
           "repository": "%s/%s" % (host, REPO_PATH), "local": "%s/%s" % (local, REPO_PATH)}
    if proxy:
        proxy.close()


def tgz(files, mode="w:gz"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        for path, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(path)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bundle_cm(name, data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "binaryData": {"bundle.tgz": base64.b64encode(data).decode()}}


def app_bundle(name, greeting):
    """The hello app with its own greeting: same imports, another entry body."""
    return bundle_cm(name, tgz({"app/telo.yaml": APP % json.dumps(greeting)}))


def tag_of(data, namespace=None):
    """The tag telo-build-check computes for a bundle with the operator's default inputs: the
    reference runner's (build.shareAcrossNamespaces=true), or with namespace the one a session
    there gets by default (the namespace keyed into it)."""
    path = "/tmp/telo-e2e-%s.tgz" % uuid.uuid4().hex
    with open(path, "wb") as f:
        f.write(data)
    try:
        argv = [CHECK_BIN, "tag", path, "--base", BASE_IMAGE, "--telo-registry", TELO_REGISTRY]
        if namespace:
            argv += ["--namespace", namespace]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return out.split()[0][len("tag="):]


def push_one_file_image(registry, dest, layout, rootfs, layout_tag, filename, content):
    """A one-file image (filename holding content) built with umoci in layout (as layout_tag)
    and rootfs, and pushed with skopeo to dest (host/repo:tag) as the registry's user."""
    image = "%s:%s" % (layout, layout_tag)
    run_tool("umoci", "init", "--layout", str(layout))
    run_tool("umoci", "new", "--image", image)
    run_tool("umoci", "unpack", "--rootless", "--image", image, str(rootfs))
    (rootfs / "rootfs" / filename).write_text(content)
    run_tool("umoci", "repack", "--image", image, str(rootfs))
    run_tool("umoci", "config", "--image", image, "--os", "linux", "--architecture", "amd64")
    run_tool("skopeo", "copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false",
             "--dest-creds", "%s:%s" % (registry["user"], registry["password"]),
             "oci:" + image, "docker://" + dest)


def push_image(registry, tag, tmp):
    """A one-file image built with umoci and pushed with skopeo as the registry's user."""
    push_one_file_image(registry, "%s:%s" % (registry["local"], tag), tmp / "oci",
                        tmp / "unpacked", tag, "hello.txt",
                        "built by the e2e test, not by a Job\n")


# --- the operator with builds --------------------------------------------------------------------

@pytest.fixture
def builds(cluster, registry, start, session_node):
    """A build namespace with the push Secret, and builder(*sets, hold=None, password=None)
    starting the operator with builds into it (builds held back by hold until released)."""
    ns = "e2e-builds-%s" % uuid.uuid4().hex[:8]
    cluster.kubectl("create", "namespace", ns)
    if AS_SERVICE_ACCOUNT:
        # Under the operator's ServiceAccount (in-cluster, or test_rbac.py): the build rules of
        # config/rbac, bound in this test's build namespace as build_role.yaml binds them in
        # telo-builds.
        cluster.kubectl("create", "rolebinding", "telo-operator-builds", "-n", ns,
                        "--clusterrole=telo-operator-builds",
                        "--serviceaccount=telo-system:telo-operator")
    holds = []

    def push_secret(password):
        auth = base64.b64encode(("%s:%s" % (registry["user"], password)).encode()).decode()
        config = json.dumps({"auths": {registry["host"]: {"auth": auth}}})
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                  "metadata": {"name": "push", "namespace": ns},
                  "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()}}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))

    def builder(*sets, hold=None, password=None):
        push_secret(password or registry["password"])
        selector = {SESSION_NODE_KEY: session_node}
        if hold:
            selector[hold.key] = "yes"
            holds.append(hold)
        base = ["build.repository=" + registry["repository"], "build.namespace=" + ns,
                "build.pushSecret=push", "build.insecureRegistry=true",
                "build.builderImage=example.invalid/kaniko:test",
                "build.nodeSelector=" + ",".join("%s=%s" % kv for kv in selector.items()),
                "build.tolerations=" + json.dumps([{"key": SESSION_NODE_KEY, "operator": "Exists",
                                                    "effect": "NoSchedule"}])]
        return start(*(base + list(sets)))

    builder.namespace = ns
    builder.push_secret = push_secret
    yield builder
    for h in holds:
        h.drop()
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def jobs(cluster, ns):
    return cluster.kubectl_json("get", "jobs", "-n", ns, "-l", "telo.run/build=true")["items"]


def job_creates(cluster, ns):
    return {name: n for (resource, name), n in Audit(cluster, ns).creates().items()
            if resource == "jobs"}


def build_pod(cluster, ns, job):
    def find():
        items = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                     "batch.kubernetes.io/job-name=" + job)["items"]
        return items[0]["metadata"]["name"] if items else None
    return wait_until(find, timeout=30, what="the pod of build Job %s" % job)


def progress(cluster, ns, name):
    return ((get_ts(cluster, ns, name) or {}).get("status", {}).get("progress") or {}).get("message")


def wait_progress(cluster, ns, name, text, timeout=30):
    return wait_until(lambda: progress(cluster, ns, name) == text, timeout=timeout,
                      what="%s progress %r (now %r)" % (name, text, progress(cluster, ns, name)))


def pod_image(cluster, ns, name):
    return get(cluster, ns, "pod", "telo-run-" + name)["spec"]["containers"][0]["image"]


# --- the Done-when bullets -----------------------------------------------------------------------

def test_two_sessions_with_the_same_dependencies_share_one_build_job(cluster, builds, registry,
                                                                     pod_namespace, session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    op = builds(hold=hold)
    a, b = app_bundle("bundle-a", "from a"), app_bundle("bundle-b", "from b")
    tag = tag_of(base64.b64decode(a["binaryData"]["bundle.tgz"]), ns)
    assert tag == tag_of(base64.b64decode(b["binaryData"]["bundle.tgz"]), ns)
    job = "telo-build-" + tag
    apply(cluster, ns, a, session("a", bundle="bundle-a"))
    wait_phase(cluster, ns, "a", "Building")
    wait_progress(cluster, ns, "a", "Building image\u2026")
    apply(cluster, ns, b, session("b", bundle="bundle-b"))
    wait_phase(cluster, ns, "b", "Building")
    wait_progress(cluster, ns, "b", "Waiting for in-progress build\u2026")
    for name in ("a", "b"):
        st = get_ts(cluster, ns, name)["status"]
        assert st["image"] == {"ref": "%s:%s" % (registry["repository"], tag), "tag": tag,
                               "buildJob": job}, st["image"]
        ready = condition(get_ts(cluster, ns, name), "ImageReady")
        assert ready["status"] == "False" and ready["reason"] == "Building", ready

    found = jobs(cluster, builds.namespace)
    assert [j["metadata"]["name"] for j in found] == [job]
    spec = found[0]["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 600
    assert spec["ttlSecondsAfterFinished"] == 300
    assert found[0]["metadata"]["annotations"]["telo.run/requested-by"] == "%s/a" % ns
    args = spec["template"]["spec"]["containers"][0]["args"]
    assert "--destination=%s:%s" % (registry["repository"], tag) in args
    assert "--insecure" in args
    # The build's context: the first session's bundle, owned by the Job.
    ctx = cluster.kubectl_json("get", "configmap", job, "-n", builds.namespace)
    assert ctx["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert ctx["metadata"]["ownerReferences"][0]["uid"] == found[0]["metadata"]["uid"]

    hold.release()
    for name in ("a", "b"):
        ts = wait_phase(cluster, ns, name, "Running", timeout=60)
        assert ts["status"]["image"]["reason"] == "Built", ts["status"]["image"]
        assert condition(ts, "ImageReady")["reason"] == "Built"
        assert pod_image(cluster, ns, name) == ts["status"]["image"]["ref"]
    # The API server's word: one Job and one context created, never a second.
    assert job_creates(cluster, builds.namespace) == {job: 1}
    assert Audit(cluster, builds.namespace).creates()[("configmaps", job)] == 1
    assert op.metric("telo_image_builds_total", {"result": "succeeded"}) == 1
    assert op.metric("telo_image_builds_total", {"result": "failed"}) == 0
    assert op.metric("telo_image_build_seconds_count") == 1
    assert op.metric("telo_image_cache_hits_total") == 0


def test_a_tag_already_in_the_registry_is_a_cache_hit_without_a_job(cluster, builds, registry,
                                                                    pod_namespace, tmp_path):
    ns = pod_namespace
    # The tag covers the imports, not the body: make them unique to this test.
    cm = bundle_cm("bundle", tgz({"app/telo.yaml": APP.replace(
        "std/javascript@0.5.0", "std/javascript@0.5.%d" % (time.time_ns() % 100000)) % '"hi"'}))
    tag = tag_of(base64.b64decode(cm["binaryData"]["bundle.tgz"]), ns)
    push_image(registry, tag, tmp_path)
    op = builds()
    apply(cluster, ns, cm, session("hit", bundle="bundle"))
    ts = wait_phase(cluster, ns, "hit", "Running", timeout=60)
    ref = "%s:%s" % (registry["repository"], tag)
    assert ts["status"]["image"] == {"ref": ref, "tag": tag, "reason": "CacheHit"}, ts["status"]
    assert condition(ts, "ImageReady")["status"] == "True"
    assert condition(ts, "ImageReady")["reason"] == "CacheHit"
    assert pod_image(cluster, ns, "hit") == ref
    # A second session with the same dependencies: the positive answer is remembered.
    apply(cluster, ns, session("hit2", bundle="bundle"))
    wait_phase(cluster, ns, "hit2", "Running", timeout=60)
    assert jobs(cluster, builds.namespace) == []
    assert job_creates(cluster, builds.namespace) == {}
    assert op.metric("telo_image_cache_hits_total") == 2
    assert op.metric("telo_image_builds_total") == 0


def write_build_log(cluster, lines):
    """What the builder 'prints' on kwok: CRI log lines in the ClusterLogs file."""
    path = os.path.join(cluster.dir, "kwok-logs", "build.log")
    with open(path, "w") as f:
        for line in lines:
            f.write("2026-01-01T00:00:00.000000000Z stdout F %s\n" % line)


def kwok_serves_build_logs(cluster):
    try:
        with open(os.path.join(cluster.dir, "kwok.yaml")) as f:
            return "name: build-logs" in f.read()
    except OSError:
        return False


def test_a_failing_build_puts_its_log_tail_into_the_session_message(cluster, builds,
                                                                    pod_namespace, session_node):
    if not kwok_serves_build_logs(cluster):
        pytest.skip("this cluster's kwok was started without the build-logs ClusterLogs")
    ns, hold = pod_namespace, Hold(cluster, session_node)
    op = builds(hold=hold)
    marker = uuid.uuid4().hex[:8]
    cm = bundle_cm("bundle", tgz({"app/telo.yaml": APP.replace(
        "std/http-server@0.15.0", "std/http-server@0.15.%s" % int(marker, 16)) % '"x"'}))
    apply(cluster, ns, cm, session("broken", bundle="bundle"))
    ts = wait_phase(cluster, ns, "broken", "Building")
    job = ts["status"]["image"]["buildJob"]
    pod = build_pod(cluster, builds.namespace, job)
    write_build_log(cluster, ["%s line %02d" % (marker, i) for i in range(1, 26)] +
                    ["error: telo install: module std/http-server not found"])
    cluster.kubectl("annotate", "pod", pod, "-n", builds.namespace, "--overwrite",
                    CHAOS_EXIT + "/exit-code=1", CHAOS_EXIT + "/container-name=kaniko",
                    CHAOS_EXIT + "/reason=Error")
    cluster.kubectl("label", "pod", pod, "-n", builds.namespace, CHAOS_EXIT + "=true")
    hold.release()
    ts = wait_phase(cluster, ns, "broken", "Failed", timeout=60)
    st = ts["status"]
    assert st["reason"] == "BuildFailed", st
    message = st["message"]
    assert "image build failed (job '%s/%s')" % (builds.namespace, job) in message
    # The last 20 lines: 7..25 and the error, not line 06.
    for i in range(7, 26):
        assert "%s line %02d" % (marker, i) in message, message
    assert "%s line 06" % marker not in message
    assert "module std/http-server not found" in message
    assert "kubectl delete job -n %s %s" % (builds.namespace, job) in message
    assert condition(ts, "Stalled")["reason"] == "BuildFailed"
    assert condition(ts, "ImageReady")["status"] == "False"
    assert get(cluster, ns, "pod", "telo-run-broken") is None
    assert op.metric("telo_image_builds_total", {"result": "failed"}) == 1
    assert op.metric("telo_session_failures_total", {"reason": "BuildFailed"}) == 1


def test_a_wrong_registry_password_is_actionable_and_builds_nothing(cluster, builds, registry,
                                                                    pod_namespace):
    ns = pod_namespace
    builds(password="wrong-password")
    apply(cluster, ns, app_bundle("bundle", "denied"), session("denied", bundle="bundle"))
    ts = wait_phase(cluster, ns, "denied", "Pending", reason="RegistryAuthFailed", timeout=30)
    st = ts["status"]
    assert "refused the credentials of Secret %s/push" % builds.namespace in st["message"], st
    assert "fix the username and password" in st["message"], st
    assert condition(ts, "Stalled")["status"] == "True"
    assert condition(ts, "ImageReady")["reason"] == "RegistryAuthFailed"
    # It is looked at again (every 10 s), never built: no Job, however long it waits.
    time.sleep(12)
    assert job_creates(cluster, builds.namespace) == {}
    assert jobs(cluster, builds.namespace) == []
    assert get_ts(cluster, ns, "denied")["status"]["reason"] == "RegistryAuthFailed"
    # Fixing the Secret is enough: the next look builds (one Job), and the session runs. Its
    # Building phase may last less than a poll: a kwok build pod succeeds at once, and a
    # Succeeded build pod ends the build.
    builds.push_secret(registry["password"])
    wait_until(lambda: job_creates(cluster, builds.namespace), timeout=30,
               what="the build Job once the Secret is fixed")
    wait_phase(cluster, ns, "denied", "Running", timeout=60)
    assert len(job_creates(cluster, builds.namespace)) == 1


def test_deleting_a_session_during_its_build_neither_leaks_nor_breaks_the_other(
        cluster, builds, pod_namespace, session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    builds("build.ttlSecondsAfterFinished=3", hold=hold)
    marker = "%d" % (time.time_ns() % 100000)
    app = APP.replace("std/http-server@0.15.0", "std/http-server@0.16.%s" % marker)
    apply(cluster, ns, bundle_cm("bundle-a", tgz({"app/telo.yaml": app % '"a"'})),
          bundle_cm("bundle-b", tgz({"app/telo.yaml": app % '"b"'})),
          session("a", bundle="bundle-a"))
    job = wait_phase(cluster, ns, "a", "Building")["status"]["image"]["buildJob"]
    apply(cluster, ns, session("b", bundle="bundle-b"))
    wait_phase(cluster, ns, "b", "Building")
    # a made the Job; a goes while it builds.
    cluster.kubectl("delete", "ts", "a", "-n", ns)
    wait_until(lambda: get_ts(cluster, ns, "a") is None, timeout=30, what="a to be gone")
    time.sleep(2)
    assert [j["metadata"]["name"] for j in jobs(cluster, builds.namespace)] == [job]
    assert get_ts(cluster, ns, "b")["status"]["phase"] == "Building"
    hold.release()
    ts = wait_phase(cluster, ns, "b", "Running", timeout=60)
    assert ts["status"]["image"]["reason"] == "Built"
    assert get(cluster, ns, "pod", "telo-run-a") is None
    # No leak: the finished Job and its context go with the Job's TTL.
    wait_until(lambda: not jobs(cluster, builds.namespace) and
               cluster.kubectl("get", "configmap", job, "-n", builds.namespace,
                               check=False).returncode != 0,
               timeout=60, what="the build Job and its context ConfigMap to be removed")
    assert job_creates(cluster, builds.namespace) == {job: 1}


def test_a_free_build_slot_goes_to_the_namespace_with_fewer_builds_running(
        cluster, builds, pod_namespace, session_node):
    """build.maxConcurrent=2: namespace A's two builds hold both slots and its third session
    waits; then namespace B's session waits too. When one of A's Jobs goes, the slot goes to B
    (A still has a build running, B none), not to A's session that waited longer, nor to the
    one whose Job went (it asks again, last in line). Before, whichever session was looked at
    first took it."""
    a, hold = pod_namespace, Hold(cluster, session_node)
    b = "e2e-builds-other-%s" % uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", b)
    try:
        builds("build.maxConcurrent=2", "namespaces=%s,%s" % (a, b), hold=hold)
        marker = "%d" % (time.time_ns() % 100000)

        def app_session(ns, name, minor):
            app = APP.replace("std/http-server@0.15.0",
                              "std/http-server@0.%d.%s" % (minor, marker))
            apply(cluster, ns, bundle_cm("bundle-" + name, tgz({"app/telo.yaml": app % '"x"'})),
                  session(name, bundle="bundle-" + name))

        def build_job(ns, name):
            return (((get_ts(cluster, ns, name) or {}).get("status") or {}).get("image")
                    or {}).get("buildJob")
        full = "Waiting for a build slot: 2 builds run, at most 2 (build.maxConcurrent)"
        app_session(a, "a1", 21)
        app_session(a, "a2", 22)
        wait_until(lambda: build_job(a, "a1") and build_job(a, "a2"), timeout=30,
                   what="a1 and a2 building")
        app_session(a, "a3", 23)
        wait_progress(cluster, a, "a3", full)
        app_session(b, "b1", 24)
        wait_progress(cluster, b, "b1", full)
        gone = build_job(a, "a1")
        deleted = time.monotonic()
        cluster.kubectl("delete", "job", gone, "-n", builds.namespace, "--wait=false")
        # The Job's events queue each namespace's first in line (else their recheck, 10 s).
        wait_until(lambda: build_job(b, "b1"), timeout=30, what="b1's Job")
        handed_on = time.monotonic() - deleted
        print("\nb1's Job %.1f s after a1's was deleted" % handed_on)
        # Which mechanism, not how fast: woken by the Job's delete it took 0.2 s, by its recheck
        # (10 s after its last look) 10.1-10.2 s.
        assert handed_on < 7, "b1 waited for its recheck: %.1f s" % handed_on
        names = {j["metadata"]["name"] for j in jobs(cluster, builds.namespace)
                 if not j["metadata"].get("deletionTimestamp")}
        assert names == {build_job(a, "a2"), build_job(b, "b1")}, names
        assert build_job(a, "a3") is None
        assert progress(cluster, a, "a3") in (full, (
            "Waiting for a build slot: 1 session ahead (namespaces with fewer builds running "
            "first, then the longest waiting)")), progress(cluster, a, "a3")
    finally:
        cluster.kubectl("delete", "namespace", b, "--wait=false", check=False)


def test_a_namespace_out_of_build_slots_waits_and_builds_when_one_ends(
        cluster, builds, pod_namespace, session_node):
    """build.maxConcurrentPerNamespace=1: of two sessions with different dependencies made at
    once, one builds and the other waits in Building without a Job, saying what for; when the
    first build ends the second one's Job is created, and both run. Never two Jobs at once."""
    ns, hold = pod_namespace, Hold(cluster, session_node)
    builds("build.maxConcurrentPerNamespace=1", hold=hold)
    marker = "%d" % (time.time_ns() % 100000)
    objs = []
    for name, minor in (("a", 17), ("b", 18)):
        app = APP.replace("std/http-server@0.15.0", "std/http-server@0.%d.%s" % (minor, marker))
        objs += [bundle_cm("bundle-" + name, tgz({"app/telo.yaml": app % '"%s"' % name})),
                 session(name, bundle="bundle-" + name)]
    apply(cluster, ns, *objs)
    waiting = "Waiting for a build slot: 1 build of namespace %s runs, at most 1 " \
              "(build.maxConcurrentPerNamespace)" % ns

    def split():
        progress_of = {n: progress(cluster, ns, n) for n in ("a", "b")}
        queued = [n for n, text in progress_of.items() if text == waiting]
        return (set(progress_of) - set(queued)).pop() if len(queued) == 1 else None
    first = wait_until(split, timeout=30, what="one session building and one waiting for a slot")
    second = "b" if first == "a" else "a"
    first_job = get_ts(cluster, ns, first)["status"]["image"]["buildJob"]
    st = get_ts(cluster, ns, second)["status"]
    assert st["phase"] == "Building" and "buildJob" not in st["image"], st
    assert [j["metadata"]["name"] for j in jobs(cluster, builds.namespace)] == [first_job]
    time.sleep(2)  # it stays so: no second Job while the first runs
    assert [j["metadata"]["name"] for j in jobs(cluster, builds.namespace)] == [first_job]

    hold.release()
    for name in (first, second):
        ts = wait_phase(cluster, ns, name, "Running", timeout=90)
        assert ts["status"]["image"]["reason"] == "Built", ts["status"]["image"]
    found = {j["metadata"]["name"]: j for j in jobs(cluster, builds.namespace)}
    second_job = get_ts(cluster, ns, second)["status"]["image"]["buildJob"]
    assert set(found) == {first_job, second_job}
    assert found[second_job]["metadata"]["creationTimestamp"] >= \
        found[first_job]["status"]["completionTime"], found
    assert job_creates(cluster, builds.namespace) == {first_job: 1, second_job: 1}


def test_a_build_job_deleted_before_it_ends_fails_the_session_saying_so(cluster, builds,
                                                                       pod_namespace,
                                                                       session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    builds(hold=hold)
    marker = "%d" % (time.time_ns() % 100000)
    app = APP.replace("std/http-server@0.15.0", "std/http-server@0.17.%s" % marker)
    apply(cluster, ns, bundle_cm("bundle", tgz({"app/telo.yaml": app % '"v"'})),
          session("v", bundle="bundle"))
    job = wait_phase(cluster, ns, "v", "Building")["status"]["image"]["buildJob"]
    cluster.kubectl("delete", "job", job, "-n", builds.namespace, "--cascade=background")
    ts = wait_phase(cluster, ns, "v", "Failed", timeout=60)
    assert ts["status"]["reason"] == "BuildFailed"
    assert "image build job '%s/%s'" % (builds.namespace, job) in ts["status"]["message"]
    assert "before completing" in ts["status"]["message"]
    hold.drop()


def test_a_build_past_its_deadline_fails_with_build_timed_out(cluster, builds, pod_namespace,
                                                             session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    op = builds("build.timeoutSeconds=3", hold=hold)
    marker = "%d" % (time.time_ns() % 100000)
    app = APP.replace("std/http-server@0.15.0", "std/http-server@0.18.%s" % marker)
    apply(cluster, ns, bundle_cm("bundle", tgz({"app/telo.yaml": app % '"t"'})),
          session("slow", bundle="bundle"))
    job = wait_phase(cluster, ns, "slow", "Building")["status"]["image"]["buildJob"]
    ts = wait_phase(cluster, ns, "slow", "Failed", timeout=60)
    assert ts["status"]["reason"] == "BuildTimedOut", ts["status"]
    assert "image build did not finish within 3s (job '%s/%s')" % (builds.namespace, job) \
        in ts["status"]["message"]
    assert "build.timeoutSeconds" in ts["status"]["message"]
    assert op.metric("telo_image_builds_total", {"result": "timed_out"}) == 1


def bomb():
    """50 MiB of zeros: about 50 KiB of gzip, well under a ConfigMap's 1 MiB."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo("app/bomb.bin")
        info.size = 50 << 20
        t.addfile(info, io.BytesIO(bytes(50 << 20)))
    return buf.getvalue()


BAD_BUNDLES = {
    "notgzip": (b"this is not a gzip file at all\n" * 20, "not gzip data"),
    "traversal": (tgz({"app/telo.yaml": APP % '"x"', "../x": "escape"}), "'..' segment"),
    "absolute": (tgz({"app/telo.yaml": APP % '"x"', "/etc/x": "escape"}), "absolute path"),
    "bomb": (None, "larger than the 16777216 bytes allowed per file"),
    "badyaml": (tgz({"app/telo.yaml": "kind: Telo.Application\nimports: [a\n  b: c: d\n"}),
                "app/telo.yaml: line"),
}


def test_bad_bundles_fail_the_session_with_a_clear_reason(cluster, builds, pod_namespace):
    ns = pod_namespace
    op = builds()
    objects = []
    for name, (data, _) in BAD_BUNDLES.items():
        objects += [bundle_cm("bundle-" + name, data if data is not None else bomb()),
                    session(name, bundle="bundle-" + name)]
    started = time.monotonic()
    apply(cluster, ns, *objects)
    for name, (_, words) in BAD_BUNDLES.items():
        ts = wait_phase(cluster, ns, name, "Failed", timeout=60)
        st = ts["status"]
        assert st["reason"] == "BundleInvalid", (name, st)
        assert words in st["message"], (name, st["message"])
        assert "bundle ConfigMap %s/bundle-%s key bundle.tgz" % (ns, name) in st["message"], \
            st["message"]
        assert "fix the bundle" in st["message"]
        assert get(cluster, ns, "pod", "telo-run-" + name) is None
    assert time.monotonic() - started < 45
    # The operator neither crashed nor stalled: it is healthy and still starts a good session.
    assert op.running and op.get("/healthz")[0] == 200
    apply(cluster, ns, hello_bundle(), session("good"))
    assert wait_phase(cluster, ns, "good", "Running", timeout=60)["status"]["image"]["reason"] \
        == "Built"
    assert op.metric("telo_session_failures_total", {"reason": "BundleInvalid"}) == 5


def test_an_unreachable_registry_is_retried_a_bounded_number_of_times_then_built(
        cluster, builds, pod_namespace, session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    reach = pod_reachable_host(cluster)
    with socket.socket() as s:
        s.bind((reach, 0))
        dead = s.getsockname()[1]
    builds("build.registryApiUrl=http://%s:%d" % (reach, dead), hold=hold)
    started = time.monotonic()
    apply(cluster, ns, app_bundle("bundle", "unreachable"), session("u", bundle="bundle"))
    ts = wait_phase(cluster, ns, "u", "Building", timeout=30)
    note = ts["status"]["progress"]["message"]
    assert note.startswith("Building image\u2026 (registry check of "), note
    assert "failed 3 times" in note and "treating the image as missing and building it" in note
    # 500 ms and 1 s between three refused connections, then the build.
    assert 1.4 < time.monotonic() - started < 20
    assert len(jobs(cluster, builds.namespace)) == 1


@pytest.fixture
def bundle_server(cluster):
    """An HTTP server where the operator reaches it (pod_reachable_host) serving the bytes put
    into it by path."""
    files = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            data = files.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *args):
            pass

    reach = pod_reachable_host(cluster)
    server = ThreadingHTTPServer((reach, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.files = files
    server.url = "http://%s:%d" % (reach, server.server_address[1])
    yield server
    server.shutdown()


def test_url_bundles_are_read_by_the_operator_and_built_from_the_url(
        cluster, builds, registry, pod_namespace, session_node, bundle_server):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    # The bundle server listens on loopback (or the real node's address): a private address
    # the operator refuses for spec.bundle.url unless allowed.
    builds("bundle.allowedUrlCidrs=%s/32" % pod_reachable_host(cluster), hold=hold)
    marker = "%d" % (time.time_ns() % 100000)
    data = tgz({"app/telo.yaml": APP.replace("std/http-server@0.15.0",
                                             "std/http-server@0.19.%s" % marker) % '"u"'})
    bundle_server.files["/app.tgz"] = data
    digest = hashlib.sha256(data).hexdigest()
    url = bundle_server.url + "/app.tgz"

    def url_session(name, sha):
        body = session(name)
        body["spec"]["bundle"] = {"url": {"url": url, "sha256": sha}}
        return body
    apply(cluster, ns, url_session("u", digest), url_session("bad", "0" * 64))
    ts = wait_phase(cluster, ns, "u", "Building", timeout=30)
    tag = tag_of(data, ns)
    assert ts["status"]["image"]["tag"] == tag
    job = jobs(cluster, builds.namespace)[0]
    init = job["spec"]["template"]["spec"]["initContainers"][0]
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["BUNDLE_URL"] == url and env["BUNDLE_SHA256"] == digest, env
    # No context ConfigMap: the build fetches the URL itself.
    assert cluster.kubectl("get", "configmap", job["metadata"]["name"], "-n", builds.namespace,
                           check=False).returncode != 0
    bad = wait_phase(cluster, ns, "bad", "Failed", timeout=30)["status"]
    assert bad["reason"] == "BundleFetchFailed", bad
    assert "bundle sha256 mismatch for %s: spec.bundle.url.sha256 is %s but the download is %s" \
        % (url, "0" * 64, digest) in bad["message"], bad["message"]
    hold.release()
    ts = wait_phase(cluster, ns, "u", "Running", timeout=60)
    assert ts["status"]["image"]["reason"] == "Built"
    assert pod_image(cluster, ns, "u") == "%s:%s" % (registry["repository"], tag)


def test_an_operator_killed_during_a_build_follows_the_same_job_after_restart(
        cluster, builds, pod_namespace, session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    op = builds(hold=hold)
    marker = "%d" % (time.time_ns() % 100000)
    app = APP.replace("std/http-server@0.15.0", "std/http-server@0.20.%s" % marker)
    apply(cluster, ns, bundle_cm("bundle", tgz({"app/telo.yaml": app % '"k"'})),
          session("k1", bundle="bundle"))
    job = wait_phase(cluster, ns, "k1", "Building")["status"]["image"]["buildJob"]
    op.kill()
    apply(cluster, ns, session("k2", bundle="bundle"))
    op.start()
    wait_phase(cluster, ns, "k2", "Building", timeout=30)
    assert get_ts(cluster, ns, "k2")["status"]["image"]["buildJob"] == job
    hold.release()
    for name in ("k1", "k2"):
        ts = wait_phase(cluster, ns, name, "Running", timeout=60)
        assert ts["status"]["image"]["reason"] == "Built", ts["status"]
    assert job_creates(cluster, builds.namespace) == {job: 1}


def test_a_context_left_by_an_earlier_job_of_the_tag_is_replaced_not_trusted(
        cluster, builds, registry, pod_namespace):
    """Issue 21: the build context ConfigMap telo-build-<tag> is owned by its Job. One owned by
    another Job (an earlier Job of the tag, deleted while the garbage collector was behind) is
    not the new Job's: trusted, the new Job would build another bundle's copy, and the collector
    would remove it under the new Job's pod. The operator deletes it with a uid precondition and
    makes its own."""
    ns = pod_namespace
    op = builds()
    bundle = app_bundle("bundle-ctx", "fresh")
    tag = tag_of(base64.b64decode(bundle["binaryData"]["bundle.tgz"]), ns)
    job = "telo-build-" + tag
    # The earlier owner stays alive (a suspended Job) so the collector leaves its context be.
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "earlier", "namespace": builds.namespace},
        "spec": {"suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}))
    earlier = cluster.kubectl_json("get", "job", "earlier", "-n", builds.namespace)
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": job, "namespace": builds.namespace,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "earlier",
                                          "uid": earlier["metadata"]["uid"]}]},
        "data": {"stale": "another bundle"}}))
    stale_uid = cluster.kubectl_json("get", "configmap", job, "-n",
                                     builds.namespace)["metadata"]["uid"]
    apply(cluster, ns, bundle, session("ctx", bundle="bundle-ctx"))

    def replaced():
        found = jobs(cluster, builds.namespace)
        ctx = cluster.kubectl("get", "configmap", job, "-n", builds.namespace, "-o", "json",
                              check=False)
        if not found or ctx.returncode != 0:
            return None
        ctx = json.loads(ctx.stdout)
        refs = ctx["metadata"].get("ownerReferences", [])
        return ctx if (ctx["metadata"]["uid"] != stale_uid and refs
                       and refs[0]["uid"] == found[0]["metadata"]["uid"]) else None
    ctx = wait_until(replaced, timeout=30, what="the context owned by the new Job")
    assert "stale" not in ctx.get("data", {}) and "bundle.tgz" in ctx["binaryData"], ctx
    ts = wait_phase(cluster, ns, "ctx", "Running", timeout=60)
    assert ts["status"]["image"]["reason"] == "Built", ts["status"]
    assert Audit(cluster, builds.namespace).creates()[("configmaps", job)] == 1
    assert op.metric("telo_image_builds_total", {"result": "succeeded"}) == 1

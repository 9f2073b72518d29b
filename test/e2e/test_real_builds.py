"""Image builds for real (issue 18): the build Job the operator writes runs on the real node
`telo.run/node=real` with the real kaniko executor (`hack/build-tools.sh kaniko`, packed by
`hack/images/build.sh kaniko`), pushes the per-app image into the cluster's build registry (htpasswd
Basic auth, `TELO_BUILD_REGISTRY=1 hack/cluster/up.sh`), and the session pod runs that image,
pulled by containerd with the session's imagePullSecret.

The base image (FROM) is this checkout's stand-in CLI telo-session-test, whose `telo install`
records the entry's imports with the TELO_REGISTRY_URL it saw under TELO_CACHE_DIR
(hack/images/README.md): the built image provably holds the install step's work, and the app
prints it and serves it on its HTTP port.

Where things are reached (hack/cluster/README.md, "The real node"): pods reach this machine only
at the node's own address (its InternalIP), never at its loopback, and the build registry listens
on loopback. So the test puts a TcpProxy to the registry on the node address, and that one
address names the registry everywhere: in build.repository (kaniko pushes there from the build
pod, the operator checks tags there from this machine), in FROM (kaniko pulls the base image
there, with the push Secret's credentials), and in the session pod's image (containerd pulls it
there with the imagePullSecret; the test adds the plain-HTTP hosts.toml containerd needs for it,
as real-node.sh does for the local registry).

The build namespace enforces Pod Security `baseline`: kaniko runs as root (it unpacks the base
image's files as their owners and switches to the image's USER for RUN steps, which takes
CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE, CAP_SETUID and CAP_SETGID of the runtime's defaults),
which `restricted` forbids; the session namespace stays `restricted`.

Skipped, with the reason, when no Ready real node exists."""

import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid

import pytest

from conftest import AS_SERVICE_ACCOUNT, ROOT, TcpProxy, wait_until
from test_sessions import assert_failure, condition, get, get_ts, wait_phase
from test_sessions_real_node import (REAL, _ready_real_node, bundle_configmap, curl,
                                     real_session)
from test_kubectl_telo import plugin_argv, plugin_env, telo

TOOLS = ("umoci", "skopeo", "docker-registry", "htpasswd", "ctr")
TELO_REGISTRY = "https://registry.telo.run"  # the operator's default registryUrl
BUILD_TIMEOUT = 420  # a first build on the shared 2-core machine: pull, unpack, RUN, push

pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                reason="needs %s" % ", ".join(TOOLS))


def _script(*argv, timeout=600):
    proc = subprocess.run([os.path.join(ROOT, *argv[0].split("/"))] + list(argv[1:]),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, "%s exited %d:\n%s" % (argv[0], proc.returncode,
                                                       proc.stderr[-3000:])
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def real_node(cluster):
    node = _ready_real_node(cluster)
    if node is None:
        pytest.skip("no Ready node labelled telo.run/node=real: builds cannot run for real "
                    "(start it as root: TELO_REAL_NODE=1 hack/cluster/up.sh)")
    return node


@pytest.fixture(scope="module")
def images(cluster, real_node):
    """This checkout's stand-in, init and kaniko images, built, pushed to the real node's registry
    and imported into its containerd (refs.json holds whatever checkout built last, so the refs
    come from this checkout's build.sh). The executor is built once (cached by version)."""
    _script("hack/build-tools.sh", "kaniko", timeout=3600)
    _script("hack/images/build.sh", "telo-init", "telo-session-test", "kaniko", timeout=900)
    return {name: _script("hack/images/build.sh", "--ref", name)
            for name in ("telo-init", "telo-session-test", "kaniko")}


@pytest.fixture(scope="module")
def registry(cluster, real_node, images):
    """The build registry where pods and containerd reach it: a TcpProxy on the node address,
    the hosts.toml containerd needs for plain HTTP there, and the stand-in pushed into it as the
    builds' base image."""
    proc = subprocess.run([os.path.join(ROOT, "hack", "cluster", "up.sh")],
                          env=dict(os.environ, TELO_BUILD_REGISTRY="1"),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail("the build registry did not start: %s" % proc.stderr[-1500:])
    with open(os.path.join(cluster.dir, "build-registry", "dockerconfig.json")) as f:
        local = next(iter(json.load(f)["auths"].items()))
    local_host, auth = local[0], local[1]["auth"]
    user, password = base64.b64decode(auth).decode().split(":", 1)
    node_ip = next(a["address"] for a in real_node["status"]["addresses"]
                   if a["type"] == "InternalIP")
    proxy = TcpProxy("127.0.0.1", int(local_host.rsplit(":", 1)[1]), bind_host=node_ip)
    host = "%s:%d" % (node_ip, proxy.port)
    certs = os.path.join(cluster.dir, "real-node", "containerd", "certs.d", host)
    os.makedirs(certs, exist_ok=True)
    with open(os.path.join(certs, "hosts.toml"), "w") as f:
        f.write('server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n'
                % (host, host))
    # The base image, as the builds' FROM: this checkout's stand-in, from its OCI layout.
    stand_in = images["telo-session-test"]
    tag = stand_in.rsplit(":", 1)[1]
    layout = os.path.join(cluster.dir, "real-node", "images", "oci", "telo-session-test")
    base_path = "telo/base/telo-session-test:%s" % tag
    subprocess.run(["skopeo", "copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false",
                    "--dest-creds", "%s:%s" % (user, password), "oci:%s:%s" % (layout, tag),
                    "docker://%s/%s" % (local_host, base_path)],
                   check=True, capture_output=True, timeout=120)
    yield {"host": host, "local": local_host, "user": user, "password": password,
           "auth": auth, "base": "%s/%s" % (host, base_path),
           "repository": "%s/telo/apps" % host}
    shutil.rmtree(certs, ignore_errors=True)
    proxy.close()


def dockerconfig_secret(name, namespace, host, auth):
    config = json.dumps({"auths": {host: {"auth": auth}}})
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": namespace},
            "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()}}


@pytest.fixture
def real_builds(cluster, operator, pod_namespace, images, registry):
    """real_builds(*sets) starts the operator with builds on the real node: the build namespace
    (Pod Security baseline) with the push Secret as the chart makes it, the session namespace
    (restricted) with the pull Secret; returns (session namespace, build namespace, operator)."""
    ns, bns = pod_namespace, "e2e-real-builds-%s" % uuid.uuid4().hex[:8]
    cluster.kubectl("label", "namespace", ns, "--overwrite",
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    cluster.kubectl("create", "namespace", bns)
    cluster.kubectl("label", "namespace", bns, "--overwrite",
                    "pod-security.kubernetes.io/enforce=baseline",
                    "pod-security.kubernetes.io/enforce-version=latest")
    if AS_SERVICE_ACCOUNT:
        # Under the operator's ServiceAccount (in-cluster, or test_rbac.py): the build rules of
        # config/rbac, bound in this test's build namespace as build_role.yaml binds them in
        # telo-builds.
        cluster.kubectl("create", "rolebinding", "telo-operator-builds", "-n", bns,
                        "--clusterrole=telo-operator-builds",
                        "--serviceaccount=telo-system:telo-operator")
    for name, where in (("push", bns), ("pull", ns)):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(dockerconfig_secret(
            name, where, registry["host"], registry["auth"])))
    toleration = json.dumps([{"key": REAL, "operator": "Equal", "value": "real",
                              "effect": "NoSchedule"}])

    def run(*sets):
        return ns, bns, operator(
            "nodeSelector=%s=real" % REAL, "tolerations=" + toleration,
            "images.init=" + images["telo-init"], "images.default=" + registry["base"],
            "imagePullSecret=pull", "startDeadlineSeconds=120",
            "build.repository=" + registry["repository"], "build.namespace=" + bns,
            "build.pushSecret=push", "build.insecureRegistry=true",
            "build.builderImage=" + images["kaniko"], "build.timeoutSeconds=%d" % BUILD_TIMEOUT,
            "build.nodeSelector=%s=real" % REAL, "build.tolerations=" + toleration, *sets)
    yield run
    cluster.kubectl("delete", "namespace", bns, "--wait=false", check=False)


def app(imports, greeting):
    """A Telo manifest the operator reads for its imports; the stand-in acts out its `#! `
    lines: print the greeting, serve what `telo install` recorded on port 8080."""
    lines = ["#! print %s" % greeting, "#! http 8080 @installed", "kind: Telo.Application",
             "metadata:", "  name: Hello", "  version: 1.0.0", "imports:"]
    lines += ["  %s: %s" % kv for kv in imports]
    return "\n".join(lines) + "\n"


def pod_log(cluster, ns, pod):
    return cluster.kubectl("logs", "-n", ns, pod, "-c", "session", check=False).stdout


def build_log(cluster, bns, tag=None):
    selector = "telo.run/build=true" + (",telo.run/tag=" + tag if tag else "")
    return cluster.kubectl("logs", "-n", bns, "-l", selector, "-c", "kaniko", "--tail=60",
                           check=False).stdout


def jobs(cluster, bns):
    return sorted(j["metadata"]["name"] for j in cluster.kubectl_json(
        "get", "jobs", "-n", bns, "-l", "telo.run/build=true")["items"])


def start_session(cluster, ns, name, imports, greeting):
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        bundle_configmap(name + "-bundle", {"app/telo.yaml": app(imports, greeting)})))
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        real_session(name, entry="app/telo.yaml", ports=(8080,))))


def wait_built(cluster, ns, bns, name):
    try:
        return wait_phase(cluster, ns, name, "Running", timeout=BUILD_TIMEOUT + 60)
    except AssertionError:
        print("build log:\n" + build_log(cluster, bns))
        st = (get_ts(cluster, ns, name) or {}).get("status", {})
        print("session:\n" + json.dumps(st, indent=1)[-4000:])
        # Last, in one line: a CI log keeps the tail of a failure, and the message is the why.
        print("session %s: %s %s: %s" % (name, st.get("phase"), st.get("reason"),
                                         (st.get("message") or "").replace("\n", " | ")[:1500]))
        raise


def app_output(cluster, ns, ts, marker):
    """The session's log once it shows marker, and what its port 8080 serves."""
    pod = ts["status"]["podName"]

    def logs_show():
        out = pod_log(cluster, ns, pod)
        return out if marker in out else None
    out = wait_until(logs_show, timeout=30, what="%r in the log of %s" % (marker, pod))
    ip = ts["status"].get("podIP") or get(cluster, ns, "pod", pod)["status"]["podIP"]
    _, body = wait_until(lambda: (lambda r: r if r[0] == 0 else None)(
        curl("http://%s:8080/" % ip)), timeout=30, what="the port 8080 of %s" % pod)
    return out, body


def test_a_session_with_imports_runs_the_image_kaniko_built(cluster, real_builds, registry):
    """The first Done-when bullet: a real build, the tag in the registry, the session running
    it with the install step's output; the same imports with another body are a cache hit with
    no Job; other imports build another tag."""
    ns, bns, op = real_builds()
    # Imports unique to this run, so the tag is new and the registry cannot already hold it.
    run_id = uuid.uuid4().hex[:10]
    imports = [("Http", "std/http-server@0.15.0"), ("Run", "e2e/run-%s@1.0.0" % run_id)]
    start_session(cluster, ns, "built", imports, "hello from " + run_id)
    start = time.monotonic()
    wait_phase(cluster, ns, "built", "Building", timeout=60)
    ts = wait_built(cluster, ns, bns, "built")
    took = time.monotonic() - start
    image = ts["status"]["image"]
    tag = image["tag"]
    log = build_log(cluster, bns, tag)
    print("apply to Running through a real kaniko build: %.1f s; the builder's log:\n%s"
          % (took, log))
    assert image["ref"] == "%s:%s" % (registry["repository"], tag), image
    assert image["reason"] == "Built", image
    assert image.get("buildJob", "telo-build-" + tag) == "telo-build-" + tag, image
    assert condition(ts, "ImageReady")["reason"] == "Built"
    pod = get(cluster, ns, "pod", ts["status"]["podName"])
    assert pod["spec"]["containers"][0]["image"] == image["ref"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]

    # The build ran on the real node, as root (kaniko's need), and its log is kaniko's own.
    (build_pod,) = cluster.kubectl_json("get", "pods", "-n", bns, "-l",
                                        "telo.run/tag=" + tag)["items"]
    assert build_pod["spec"]["nodeName"] == ts["status"].get("nodeName", pod["spec"]["nodeName"])
    assert build_pod["status"]["phase"] == "Succeeded", build_pod["status"]
    builder = build_pod["spec"]["containers"][0]
    assert builder["securityContext"]["runAsUser"] == 0
    assert builder["securityContext"]["allowPrivilegeEscalation"] is False
    assert "Pushing image to %s" % image["ref"] in log, log
    assert "telo install: installed Run e2e/run-%s@1.0.0" % run_id in log, log

    # The registry holds the tag (asked on loopback with the registry's credentials).
    proc = subprocess.run(["curl", "-fsS", "-o", "/dev/null", "-w", "%{http_code}",
                           "-u", "%s:%s" % (registry["user"], registry["password"]),
                           "-H", "Accept: application/vnd.oci.image.manifest.v1+json, "
                           "application/vnd.docker.distribution.manifest.v2+json",
                           "http://%s/v2/telo/apps/manifests/%s" % (registry["local"], tag)],
                          capture_output=True, text=True)
    assert proc.stdout == "200", (proc.stdout, proc.stderr)

    # The app shows what `telo install` did at build time, with the registry URL it saw.
    record = ["registry " + TELO_REGISTRY, "import Http std/http-server@0.15.0",
              "import Run e2e/run-%s@1.0.0" % run_id]
    out, body = app_output(cluster, ns, ts, "hello from " + run_id)
    for line in record:
        assert "telo:   " + line in out, out
    assert body.splitlines() == record, body
    assert jobs(cluster, bns) == ["telo-build-" + tag]

    # The same imports, another body: the same image from the registry, no second Job.
    start_session(cluster, ns, "again", imports, "another body " + run_id)
    ts2 = wait_phase(cluster, ns, "again", "Running", timeout=120)
    assert ts2["status"]["image"]["tag"] == tag, ts2["status"]["image"]
    assert ts2["status"]["image"]["reason"] == "CacheHit", ts2["status"]["image"]
    # No build to follow: `kubectl telo logs --build` says why.
    proc = telo(cluster, ns, "logs", "again", "--build")
    assert proc.returncode == 1 and "had no build" in proc.stderr and "CacheHit" in proc.stderr, \
        (proc.returncode, proc.stderr)
    out, body = app_output(cluster, ns, ts2, "another body " + run_id)
    assert body.splitlines() == record, body
    assert jobs(cluster, bns) == ["telo-build-" + tag]

    # Other imports: another tag, another real build.
    other = imports + [("Extra", "e2e/extra-%s@2.0.0" % run_id)]
    start_session(cluster, ns, "other", other, "other imports " + run_id)
    ts3 = wait_built(cluster, ns, bns, "other")
    tag3 = ts3["status"]["image"]["tag"]
    assert tag3 != tag and ts3["status"]["image"]["reason"] == "Built", ts3["status"]["image"]
    out, body = app_output(cluster, ns, ts3, "other imports " + run_id)
    assert body.splitlines() == record + ["import Extra e2e/extra-%s@2.0.0" % run_id], body
    assert jobs(cluster, bns) == sorted(["telo-build-" + tag, "telo-build-" + tag3])
    assert op.metric("telo_image_builds_total", {"result": "succeeded"}) == 2
    assert op.metric("telo_image_cache_hits_total") == 1


def test_a_failing_install_step_fails_the_session_with_the_builders_last_lines(
        cluster, real_builds):
    """A Dockerfile step that fails for real (the stand-in's install exits 1 for a marked
    import): BuildFailed, with kaniko's own last lines in the message."""
    ns, bns, op = real_builds()
    run_id = uuid.uuid4().hex[:10]
    start_session(cluster, ns, "broken", [("Broken", "e2e/telo-install-fails-%s@1.0.0" % run_id)],
                  "never runs")
    ts = wait_phase(cluster, ns, "broken", "Failed", timeout=BUILD_TIMEOUT + 60)
    print("the failed session's message:\n" + ts["status"].get("message", ""))
    assert_failure(ts, "BuildFailed",
                   "the stand-in fails imports marked telo-install-fails",
                   "e2e/telo-install-fails-%s@1.0.0" % run_id)
    # kaniko's own word that the RUN step failed, as the build pod's log has it.
    log = build_log(cluster, bns)
    assert "exit status 1" in log, log
    message = ts["status"]["message"]
    assert "exit status 1" in message, message
    # kaniko logs in colour unless told otherwise (--log-format=text: logrus's key=value lines):
    # the message is plain text, with no escape sequence a terminal showing `kubectl describe`
    # would obey.
    assert 'level=info msg="RUN [\\"telo\\",\\"install\\",\\"/app/app/telo.yaml\\"]"' in message, \
        message
    assert not any(ord(c) < 0x20 and c not in "\n\t" for c in message), repr(message)
    assert op.metric("telo_image_builds_total", {"result": "failed"}) == 1
    # The message keeps the builder's last 20 lines, as `kubectl logs --tail=20` shows them.
    last = build_log(cluster, bns).rstrip("\n").split("\n")[-20:]
    assert len(last) == 20, last
    for line in last:
        assert line.strip() in message, (line, message)


def test_a_build_step_cannot_read_the_push_credentials(cluster, real_builds, registry):
    """A RUN step runs where kaniko has the push Secret mounted (/kaniko/.docker/config.json).
    The operator mounts it 0400 (owned by root): kaniko, root, reads it; the install step runs
    as the base image's USER (1000 here) and cannot, so it cannot bake the credentials into the
    image. (A base image that installs as root could: the builds' base images are the
    administrator's choice, images.default and build.allowedBaseImages.)"""
    ns, bns, op = real_builds()
    run_id = uuid.uuid4().hex[:10]
    start_session(cluster, ns, "probe", [("Probe", "e2e/telo-install-reads-credentials-%s@1.0.0"
                                          % run_id)], "probe " + run_id)
    ts = wait_built(cluster, ns, bns, "probe")
    out, body = app_output(cluster, ns, ts, "probe " + run_id)
    print("the install record:\n" + body)
    assert "credentials /kaniko/.docker/config.json: not readable by uid 1000" in body, body
    assert registry["password"] not in body and registry["password"] not in out
    (build_pod,) = cluster.kubectl_json("get", "pods", "-n", bns, "-l",
                                        "telo.run/tag=" + ts["status"]["image"]["tag"])["items"]
    (vol,) = [v for v in build_pod["spec"]["volumes"] if v["name"] == "docker-config"]
    assert vol["secret"]["defaultMode"] == 0o400, vol


STEP = re.compile(r"^(Building image|Waiting for in-progress build)\u2026 (starting|step [1-6]/6|"
                  r"pushing)(, (\d+ min( \d+ s)?|\d+ s))?$")


def test_an_operator_killed_mid_build_follows_the_same_job(cluster, real_builds, tmp_path):
    """`kubectl telo run` of an app with new imports whose install takes 20 s: the session's
    progress follows the builder's steps ("Building image… step 6/6, 10 s"), which the plugin
    prints while it waits past its --wait for the build; the operator is SIGKILLed while kaniko
    runs the install step, and the one started again follows the same Job (no second Job, the
    same uid) to Running. `kubectl telo logs --build` then shows kaniko's log."""
    ns, bns, op = real_builds()
    run_id = uuid.uuid4().hex[:10]
    app_dir = tmp_path / "killed"
    app_dir.mkdir()
    # Installing it takes 20 s (the stand-in's telo-install-sleeps-<N>): the RUN step runs long
    # enough to be seen (the log is read every 5 s) and to stop the operator during it.
    source = "e2e/telo-install-sleeps-20-%s@1.0.0" % run_id
    (app_dir / "telo.yaml").write_text(app([("Run", source)], "after the kill " + run_id))
    started = time.monotonic()
    plugin = subprocess.Popen(plugin_argv(cluster, ns, "run", str(app_dir), "--port", "8080",
                                          "--no-attach", "--wait", "10"),
                              env=plugin_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        seen = []

        def stepping():
            st = (get_ts(cluster, ns, "killed") or {}).get("status", {})
            message = st.get("progress", {}).get("message", "")
            if message and (not seen or seen[-1] != message):
                seen.append(message)
            return st if re.search(r" step [1-6]/6", message) else None
        st = wait_until(stepping, timeout=BUILD_TIMEOUT, interval=0.5,
                        what="the build's progress to show a step of the Dockerfile")
        tag = st["image"]["tag"]
        (job,) = cluster.kubectl_json("get", "jobs", "-n", bns, "-l",
                                      "telo.run/build=true")["items"]
        assert job["metadata"]["name"] == "telo-build-" + tag
        assert st["build"]["namespace"] == bns and st["build"]["job"] == "telo-build-" + tag, st
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", st["build"]["deadline"]), st
        op.kill()
        op.start()
        ts = wait_built(cluster, ns, bns, "killed")
        assert ts["status"]["image"]["reason"] == "Built", ts["status"]["image"]
        (again,) = cluster.kubectl_json("get", "jobs", "-n", bns, "-l",
                                        "telo.run/build=true")["items"]
        assert again["metadata"]["uid"] == job["metadata"]["uid"], "a second Job was made"
        # status.build stays, without a deadline once built.
        assert ts["status"]["build"] == {"namespace": bns, "job": "telo-build-" + tag}, ts
        out, body = app_output(cluster, ns, ts, "after the kill " + run_id)
        assert "import Run " + source in body, body
        _, err = plugin.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        if plugin.poll() is None:
            plugin.kill()
            plugin.communicate()
    print("apply to Running through a build and an operator restart: %.1f s; progress seen: %s;"
          "\nthe plugin said:\n%s" % (took, seen, err))
    building = [m for m in seen if m.startswith(("Building image", "Waiting for"))]
    assert all(STEP.match(m) or m in ("Building image\u2026", "Waiting for in-progress build"
                                      "\u2026") for m in building), building
    # The plugin printed the same progress, and waited past its --wait 10 for the build.
    assert plugin.returncode == 0, err
    assert re.search(r"session killed: Building: Building image\u2026 (starting|step)", err), err
    assert "session killed is Running" in err, err
    assert took > 10, "the build took under --wait: the test shows nothing; took %.1f s" % took
    # The build's log, as the user follows it.
    proc = telo(cluster, ns, "logs", "killed", "--build", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Pushing image to %s:%s" % (ts["status"]["image"]["ref"].rsplit(":", 1)[0], tag) \
        in proc.stdout, proc.stdout[-3000:]
    assert "telo install: installed Run " + source in proc.stdout, proc.stdout[-3000:]


class OpenRegistry:
    """A registry API that knows no image and asks for no credentials, on a free port of host:
    the operator's tag check (build.registryApiUrl) finds every tag absent there, so a build
    runs, and kaniko meets the real registry's refusal itself."""

    def __init__(self, host):
        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                self.send_response(200 if self.path == "/v2/" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()
            do_GET = do_HEAD = _answer

            def log_message(self, *args):
                pass
        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = "http://%s:%d" % (host, self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_wrong_push_password_fails_the_build_naming_the_push_secret(
        cluster, real_builds, registry, real_node):
    """The push Secret's password is wrong. The operator's own tag check asks elsewhere
    (build.registryApiUrl, an open registry API that knows no tag), so a build runs and kaniko
    meets the registry's 401 itself when it checks it may push: BuildFailed, saying the push
    credentials were refused and naming the Secret, with kaniko's own line."""
    node_ip = registry["host"].rsplit(":", 1)[0]
    api = OpenRegistry(node_ip)
    try:
        ns, bns, op = real_builds("build.registryApiUrl=" + api.url)
        wrong = base64.b64encode(("%s:not-the-password" % registry["user"]).encode()).decode()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(dockerconfig_secret(
            "push", bns, registry["host"], wrong)))
        run_id = uuid.uuid4().hex[:10]
        start_session(cluster, ns, "refused", [("Run", "e2e/refused-%s@1.0.0" % run_id)],
                      "never runs")
        ts = wait_phase(cluster, ns, "refused", "Failed", timeout=BUILD_TIMEOUT + 60)
    finally:
        api.close()
    message = ts["status"].get("message", "")
    print("the failed session's message:\n" + message)
    assert_failure(ts, "BuildFailed", "the push Secret %s/push (build.pushSecret)" % bns)
    assert "the registry refused the push credentials" in message, message
    assert "UNAUTHORIZED" in message or "401" in message, message
    assert registry["password"] not in message
    assert op.metric("telo_image_builds_total", {"result": "failed"}) == 1


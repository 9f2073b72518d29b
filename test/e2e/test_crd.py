"""The TeloSession CRD (crds/telo.run_telosessions.yaml) as users meet it through kubectl: it
installs and is served with its names, every malformed session in test/e2e/bad/ is rejected with
the message its `# expect:` line names, every sample in crds/samples/ is accepted, defaults are
filled in, `kubectl explain` teaches the API, and the printer columns show the status."""

import base64
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid

import pytest
import yaml

from conftest import CRD_FILE, ROOT, wait_until

BAD_DIR = os.path.join(ROOT, "test", "e2e", "bad")
SAMPLES_DIR = os.path.join(ROOT, "crds", "samples")
BAD_FILES = sorted(glob.glob(os.path.join(BAD_DIR, "*.yaml")))
SAMPLE_FILES = sorted(glob.glob(os.path.join(SAMPLES_DIR, "*.yaml")))

MINIMAL = """
apiVersion: telo.run/v1alpha1
kind: TeloSession
metadata:
  name: %s
spec:
  entry: app/telo.yaml
  bundle:
    configMap:
      name: hello-bundle
  ports:
    - port: 8080
"""


@pytest.fixture(scope="module")
def shared_namespace(cluster):
    """One namespace for the parametrized tests below: nothing they apply is stored (rejected or
    dry-run), and conftest's per-test namespace is named after the test, which for a
    parametrized test contains '[' and is not a valid namespace name."""
    name = "e2e-crd-%s" % uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def expectation(path):
    """The substring the API server's error must contain, from the file's first line."""
    with open(path) as f:
        first = f.readline()
    assert first.startswith("# expect: "), "%s must start with '# expect: <substring>'" % path
    return first[len("# expect: "):].strip()


def schema():
    with open(CRD_FILE) as f:
        crd = yaml.safe_load(f)
    (version,) = crd["spec"]["versions"]
    return crd, version["schema"]["openAPIV3Schema"]


def walk(node, path):
    """Yields (path, schema node) for every property and list item below node."""
    for name, child in (node.get("properties") or {}).items():
        yield path + "." + name, child
        yield from walk(child, path + "." + name)
    if "items" in node:
        yield path + "[]", node["items"]
        yield from walk(node["items"], path + "[]")


# Offline checks of the file itself: they fail before any cluster is involved.

def test_every_field_has_a_description():
    _, root = schema()
    # metadata itself may only constrain name and generateName (kubectl explain shows the
    # standard ObjectMeta text for it).
    missing = [p for p, node in walk(root, "") if not node.get("description") and p != ".metadata"]
    assert not missing, "fields without a description: %s" % missing


def test_cel_inputs_are_bounded():
    """The API server estimates each rule's cost from maxLength/maxItems; unbounded strings or
    lists under a rule make the estimate explode (or the CRD be refused), so every string a rule
    sees and every list with rules inside has a bound."""
    _, root = schema()
    unbounded = []
    for path, node in walk(root, ""):
        if not path.startswith(".spec"):
            continue
        if node.get("type") == "string" and "enum" not in node and "maxLength" not in node:
            unbounded.append(path)
        if node.get("type") == "array" and "maxItems" not in node:
            unbounded.append(path)
    assert not unbounded, "spec fields without maxLength/maxItems: %s" % unbounded


def test_bad_inputs_are_many_and_labelled():
    assert len(BAD_FILES) >= 30, "only %d files in test/e2e/bad" % len(BAD_FILES)
    for path in BAD_FILES:
        assert expectation(path)


def test_hello_bundle_is_the_hello_app_directory():
    """hello.yaml's ConfigMap holds exactly crds/samples/hello-app/ packed as app/."""
    with open(os.path.join(SAMPLES_DIR, "hello.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (ts,) = [d for d in docs if d["kind"] == "TeloSession"]
    assert ts["spec"]["bundle"]["configMap"]["name"] == cm["metadata"]["name"] == "hello-bundle"
    assert ts["spec"]["entry"] == "app/telo.yaml"
    assert ts["spec"]["ports"] == [{"port": 8080, "protocol": "TCP", "name": "http"}]

    tgz = base64.b64decode(cm["binaryData"]["bundle.tgz"])
    packed = {}
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        for member in tar.getmembers():
            assert member.uid == 0 and member.gid == 0 and member.mtime == 0, member.name
            if member.isfile():
                packed[member.name] = tar.extractfile(member).read()
    app_dir = os.path.join(SAMPLES_DIR, "hello-app")
    on_disk = {}
    for dirpath, _, files in os.walk(app_dir):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                on_disk["app/" + os.path.relpath(full, app_dir)] = f.read()
    assert packed == on_disk, "hello.yaml is stale: run crds/samples/make-bundle.sh"

    # url-bundle.yaml names the same bundle by URL; its digest must be this bundle's.
    with open(os.path.join(SAMPLES_DIR, "url-bundle.yaml")) as f:
        url_session = yaml.safe_load(f)
    assert url_session["spec"]["bundle"]["url"]["sha256"] == hashlib.sha256(tgz).hexdigest()


def test_make_bundle_is_deterministic(tmp_path):
    """make-bundle.sh run on a fresh copy reproduces the committed hello.yaml byte for byte."""
    copy = tmp_path / "samples"
    shutil.copytree(SAMPLES_DIR, copy)
    os.utime(copy / "hello-app" / "telo.yaml", (12345, 12345))  # mtimes must not matter
    subprocess.run([str(copy / "make-bundle.sh")], check=True, capture_output=True)
    with open(os.path.join(SAMPLES_DIR, "hello.yaml")) as committed:
        assert (copy / "hello.yaml").read_text() == committed.read()
    with open(os.path.join(SAMPLES_DIR, "hello-standin.yaml")) as committed:
        assert (copy / "hello-standin.yaml").read_text() == committed.read()


def test_hello_standin_bundle_is_its_app_directory():
    """hello-standin.yaml (make run's sample on the real node, for the stand-in CLI) holds exactly
    crds/samples/hello-standin-app/ packed as app/, whose `#! http` line answers on its port."""
    with open(os.path.join(SAMPLES_DIR, "hello-standin.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (ts,) = [d for d in docs if d["kind"] == "TeloSession"]
    assert ts["metadata"]["name"] == "hello-standin"
    assert ts["spec"]["bundle"]["configMap"]["name"] == cm["metadata"]["name"]
    assert ts["spec"]["entry"] == "app/telo.yaml"
    assert ts["spec"]["ports"] == [{"port": 8080, "protocol": "TCP", "name": "http"}]
    packed = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(cm["binaryData"]["bundle.tgz"])),
                      mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                packed[member.name] = tar.extractfile(member).read()
    with open(os.path.join(SAMPLES_DIR, "hello-standin-app", "telo.yaml"), "rb") as f:
        assert packed == {"app/telo.yaml": f.read()}, "hello-standin.yaml is stale: run make-bundle.sh"
    assert b"\n#! http 8080 Hello from telo-operator" in packed["app/telo.yaml"]


# Against the cluster.

def test_crd_is_served_with_its_names(cluster, crd):
    got = cluster.kubectl_json("get", "crd", crd)
    names = got["spec"]["names"]
    assert names["kind"] == "TeloSession"
    assert names["plural"] == "telosessions" and names["singular"] == "telosession"
    assert names["shortNames"] == ["ts"] and names["categories"] == ["telo"]
    assert got["spec"]["scope"] == "Namespaced"
    (version,) = got["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [(c["name"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]
    assert columns == [("Phase", 0), ("Ready", 0), ("URL", 0), ("Reason", 0), ("Age", 0),
                       ("Image", 1), ("Pod", 1), ("Message", 1)]
    conditions = {c["type"]: c["status"] for c in got["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    # The server reports no problems with the schema (structural, CEL compiled within budget).
    assert conditions.get("NonStructuralSchema", "False") == "False"


@pytest.mark.parametrize("path", BAD_FILES, ids=[os.path.basename(p)[:-5] for p in BAD_FILES])
def test_bad_session_is_rejected(cluster, crd, shared_namespace, path):
    expect = expectation(path)
    proc = cluster.kubectl("apply", "-f", path, "-n", shared_namespace, check=False)
    assert proc.returncode != 0, "kubectl apply accepted %s: %s" % (path, proc.stdout)
    assert expect in proc.stderr, "expected %r in: %s" % (expect, proc.stderr)
    # Nothing was stored.
    with open(path) as f:
        name = yaml.safe_load(f)["metadata"]["name"]
    got = cluster.kubectl("get", "telosession", name, "-n", shared_namespace, check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr


@pytest.mark.parametrize("path", SAMPLE_FILES,
                         ids=[os.path.basename(p)[:-5] for p in SAMPLE_FILES])
def test_sample_is_accepted(cluster, crd, shared_namespace, path):
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", path, "-n", shared_namespace)
    assert "telosession.telo.run/" in proc.stdout


def test_samples_cover_every_feature():
    names = {os.path.basename(p)[:-5] for p in SAMPLE_FILES}
    assert {"hello", "url-bundle", "inspect", "udp", "stopped", "ttl", "resources",
            "self-contained", "env"} <= names


def test_defaults_are_applied(cluster, crd, namespace):
    session = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-n", namespace,
                              "-f", "-", input=MINIMAL % "defaults")
    spec = json.loads(session.stdout)["spec"]
    assert spec["stopped"] is False
    assert spec["inspect"] is False
    assert spec["selfContained"] is False
    assert spec["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert spec["bundle"]["configMap"] == {"name": "hello-bundle", "key": "bundle.tgz"}
    # Defaults for what the operator's configuration decides are not baked into the object.
    for operator_default in ("image", "pullPolicy", "registryUrl", "resources", "ttlSeconds"):
        assert operator_default not in spec


def test_quantities_accept_integers_and_strings(cluster, crd, namespace):
    manifest = (MINIMAL % "quantities") + "  resources:\n    cpu: 2\n    memory: 1.5Gi\n" \
        "    ephemeralStorage: 500M\n"
    spec = json.loads(cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-n", namespace,
                                      "-f", "-", input=manifest).stdout)["spec"]
    assert spec["resources"] == {"cpu": 2, "memory": "1.5Gi", "ephemeralStorage": "500M"}


def test_largest_session_fits_the_cel_budget(cluster, crd, namespace):
    """A session at every bound (longest entry with the most segments, 20 named ports, 100 env
    entries) is validated within the API server's runtime CEL budget."""
    entry = "/".join(["a"] * 511) + "x"  # 1,023 characters, 511 segments
    ports = [{"port": 10000 + i, "protocol": "UDP" if i % 2 else "TCP", "name": "p%d" % i}
             for i in range(20)]
    env = [{"name": "V%03d" % i, "value": "x" * 1000} for i in range(100)]
    session = {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
               "metadata": {"name": "x" * 63},
               "spec": {"entry": entry, "bundle": {"url": {"url": "https://e.x/" + "a" * 2000,
                                                           "sha256": "0" * 64}},
                        "ports": ports, "env": env, "registryUrl": "https://r.x/" + "b" * 2000,
                        "image": "i" * 512,
                        "resources": {"cpu": "1", "memory": "1Gi", "ephemeralStorage": "1Gi"}}}
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                    input=json.dumps(session))


def test_explain_teaches_the_api(cluster, crd):
    # kubectl explain reads the OpenAPI document, which follows the CRD by a moment.
    def explain(field):
        proc = cluster.kubectl("explain", field, check=False)
        return proc.stdout if proc.returncode == 0 else None

    out = wait_until(lambda: explain("telosession.spec.bundle"), timeout=60,
                     what="kubectl explain telosession.spec.bundle")
    assert "exactly one of configMap or url" in out
    assert "configMap" in out and "url" in out and "ConfigMap in the session's namespace" in out
    sha = explain("telosession.spec.bundle.url.sha256")
    assert "64 lowercase" in sha and "-required-" in explain("telosession.spec.bundle.url")
    assert "Pending, Building" in explain("telosession.status.phase")
    assert "Run the image's own entrypoint" in explain("ts.spec.selfContained")


def test_printer_columns_and_status_subresource(cluster, crd, namespace):
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=MINIMAL % "columns")
    status = {"status": {
        "phase": "Running", "reason": "AppStarted", "message": "the session is running",
        "podName": "telo-run-columns",
        "image": {"ref": "ghcr.io/telorun/node:1", "reason": "BaseImage"},
        "endpoints": [{"name": "http", "port": 8080, "protocol": "TCP",
                       "host": "8080-columns.example.test",
                       "url": "https://8080-columns.example.test"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Running",
                        "message": "the session pod is running", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    cluster.kubectl("patch", "ts", "columns", "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps(status))

    wide = cluster.kubectl("get", "ts", "columns", "-n", namespace, "-o", "wide").stdout
    header, row = wide.splitlines()
    assert header.split() == ["NAME", "PHASE", "READY", "URL", "REASON", "AGE", "IMAGE", "POD",
                              "MESSAGE"]
    for value in ("Running", "True", "https://8080-columns.example.test", "AppStarted",
                  "ghcr.io/telorun/node:1", "telo-run-columns", "the session is running"):
        assert value in row
    narrow = cluster.kubectl("get", "telo", "-n", namespace).stdout  # the category works too
    assert "columns" in narrow and "ghcr.io" not in narrow

    # Status is written only through the subresource: a spec write ignores it, and the status
    # schema is enforced.
    cluster.kubectl("patch", "ts", "columns", "-n", namespace, "--type=merge",
                    "-p", '{"status":{"phase":"Failed"},"spec":{"stopped":true}}')
    got = cluster.kubectl_json("get", "ts", "columns", "-n", namespace)
    assert got["status"]["phase"] == "Running" and got["spec"]["stopped"] is True
    bad = cluster.kubectl("patch", "ts", "columns", "-n", namespace, "--subresource=status",
                          "--type=merge", "-p", '{"status":{"phase":"Exploded"}}', check=False)
    assert bad.returncode != 0 and "status.phase: Unsupported value" in bad.stderr

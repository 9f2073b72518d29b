"""The registry check of pkg/imagebuild against a real registry: Debian's docker-registry (distribution
2.8) started here on a free loopback port with htpasswd Basic auth, a small image built with
umoci and pushed with skopeo, and the dev tool build/bin/telo-build-check (or $TELO_BIN_DIR)
asking whether <repository>:<tag> exists: present, absent, a wrong password (denied with an
actionable message, never "absent"), no credentials, an unreachable registry (bounded retries,
then "missing"). Also the tag of bundles made with tar: the same as the reference vectors.
Needs docker-registry, umoci, skopeo and htpasswd (apache2-utils); skipped without them."""

import base64
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, os.environ.get("TELO_BIN_DIR") or os.path.join("build", "bin"),
                   "telo-build-check")
TOOLS = ("docker-registry", "umoci", "skopeo", "htpasswd")

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS) or not os.path.exists(BIN),
    reason="needs %s and %s" % (", ".join(TOOLS), BIN))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("docker-registry exited with %s" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("docker-registry did not listen on %d" % port)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A private registry: htpasswd user alice / s3cret, storage in a temp dir."""
    d = tmp_path_factory.mktemp("registry")
    port = free_port()
    subprocess.run(["htpasswd", "-Bbc", str(d / "htpasswd"), "alice", "s3cret"], check=True,
                   capture_output=True)
    (d / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        "storage:\n  filesystem:\n    rootdirectory: %s\n"
        "auth:\n  htpasswd:\n    realm: telo-test\n    path: %s\n"
        "http:\n  addr: 127.0.0.1:%d\n" % (d / "data", d / "htpasswd", port))
    log = open(d / "registry.log", "w")
    proc = subprocess.Popen(["docker-registry", "serve", str(d / "config.yml")], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc)
        yield {"port": port, "host": "127.0.0.1:%d" % port, "dir": d}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def push_image(registry, repo, tag, tmp):
    """Builds a one-file image with umoci and pushes it with skopeo as alice."""
    layout = tmp / "oci"
    bundle = tmp / "bundle"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, text=True)
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", "%s:%s" % (layout, tag))
    run("umoci", "unpack", "--rootless", "--image", "%s:%s" % (layout, tag), str(bundle))
    (bundle / "rootfs" / "hello.txt").write_text("hello from telo-operator's e2e\n")
    run("umoci", "repack", "--image", "%s:%s" % (layout, tag), str(bundle))
    run("umoci", "config", "--image", "%s:%s" % (layout, tag), "--os", "linux",
        "--architecture", "amd64", "--config.cmd", "/bin/true")
    run("skopeo", "copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false",
        "--dest-creds", "alice:s3cret", "oci:%s:%s" % (layout, tag),
        "docker://%s/%s:%s" % (registry["host"], repo, tag))


def dockerconfig(tmp, host, user, password, name):
    auth = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    path = tmp / name
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return str(path)


def check(registry, repo, tag, config=None, api=None, attempts=None):
    argv = [BIN, "exists", "--repository", "%s/%s" % (registry["host"], repo), "--tag", tag,
            "--api-url", api or "http://%s" % registry["host"],
            "--secret-name", "telo-builds/push",
            # The test registry serves plain HTTP: credentials go there only when it is declared
            # insecure (as build.insecureRegistry does for the operator).
            "--insecure"]
    if config:
        argv += ["--dockerconfigjson", config]
    if attempts:
        argv += ["--attempts", str(attempts)]
    started = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout.strip(), p.stderr.strip(), time.monotonic() - started


def test_present_absent_and_wrong_password(registry, tmp_path):
    push_image(registry, "telo/apps", "b22120d36cb167f3a56d4153967b95db", tmp_path)
    good = dockerconfig(tmp_path, registry["host"], "alice", "s3cret", "good.json")
    bad = dockerconfig(tmp_path, "https://%s/v1/" % registry["host"], "alice", "wrong", "bad.json")

    rc, out, err, _ = check(registry, "telo/apps", "b22120d36cb167f3a56d4153967b95db", good)
    assert rc == 0, (out, err)
    assert out.startswith("presence=present ref=%s/telo/apps:b22120d36cb167f3a56d4153967b95db "
                          "attempts=1 digest=sha256:" % registry["host"]), out

    rc, out, err, _ = check(registry, "telo/apps", "0000000000000000000000000000000f", good)
    assert rc == 1, (out, err)
    assert out == "presence=absent ref=%s/telo/apps:0000000000000000000000000000000f " \
                  "attempts=1" % registry["host"]

    # A wrong password is an error the user can act on, not "absent" (which would rebuild).
    rc, out, err, _ = check(registry, "telo/apps", "b22120d36cb167f3a56d4153967b95db", bad)
    assert rc == 3, (out, err)
    # (a HEAD answer has no body, so no registry error text follows the status)
    assert ('message="registry %s refused the credentials of Secret telo-builds/push: HTTP 401; '
            'fix the username and password of its entry for %s"'
            % (registry["host"], registry["host"])) in out, out

    rc, out, err, _ = check(registry, "telo/apps", "b22120d36cb167f3a56d4153967b95db")
    assert rc == 3, (out, err)
    assert "wants credentials for telo/apps (HTTP 401" in out
    assert "no push Secret is configured" in out

    # A Secret without an entry for the registry is refused before any request.
    other = dockerconfig(tmp_path, "other.example", "x", "y", "other.json")
    rc, out, err, _ = check(registry, "telo/apps", "b22120d36cb167f3a56d4153967b95db", other)
    assert rc == 64
    assert "Secret telo-builds/push: .dockerconfigjson has no entry for %s (it has: " \
           "other.example)" % registry["host"] in err


def test_unreachable_registry_is_missing_after_bounded_retries(registry, tmp_path):
    dead = free_port()
    rc, out, err, secs = check(registry, "telo/apps", "t", api="http://127.0.0.1:%d" % dead,
                               attempts=3)
    assert rc == 2, (out, err)
    assert "attempts=3" in out
    assert "failed 3 times" in out and "treating the image as missing and building it" in out
    # 500 ms + 1 s of backoff between three refused connections.
    assert 1.4 < secs < 10, secs


def tgz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_tags_of_tar_made_bundles_match_the_reference_vectors(tmp_path):
    """Bundles made by Python's tarfile (another writer than the unit tests' libarchive) get the
    tags test/unit/data/build/vectors.py computes."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "vectors", os.path.join(ROOT, "test", "unit", "data", "build", "vectors.py"))
    try:
        vectors = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vectors)
    except ImportError:
        pytest.skip("vectors.py needs PyYAML")
    for name, files, digest in vectors.VECTORS:
        path = tmp_path / ("%s.tgz" % name)
        path.write_bytes(tgz(files))
        argv = [BIN, "tag", str(path), "--base", vectors.BASE, "--telo-registry", vectors.REGISTRY]
        if digest:
            argv += ["--base-digest", digest]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        assert out.startswith("tag=%s " % vectors.tag(files, digest)), (name, out)


@pytest.mark.parametrize("files,message", [
    ({"../x": "a"}, "../x: '..' segment (path leaves the bundle)"),
    ({"/etc/x": "a"}, "absolute path"),
])
def test_bad_bundles_are_refused_with_the_entry_named(tmp_path, files, message):
    path = tmp_path / "bad.tgz"
    path.write_bytes(tgz(files))
    p = subprocess.run([BIN, "tag", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert message in p.stderr, p.stderr


def test_gzip_bomb_is_refused_quickly(tmp_path):
    path = tmp_path / "bomb.tgz"
    with tarfile.open(path, mode="w:gz") as t:
        info = tarfile.TarInfo("bomb.bin")
        info.size = 50 << 20
        t.addfile(info, io.BytesIO(bytes(50 << 20)))
    assert path.stat().st_size < 200 << 10
    started = time.monotonic()
    p = subprocess.run([BIN, "tag", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "bomb.bin: file of 52428800 bytes is larger than the 16777216 bytes allowed per file" \
        in p.stderr
    assert time.monotonic() - started < 5

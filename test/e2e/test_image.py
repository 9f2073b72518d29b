"""make image (hack/image.sh): the operator's OCI image holds its binaries, their libraries, CA
certificates and a passwd naming the non-root user it runs as, and nothing else (no shell)."""

import json
import os
import subprocess
import tarfile

from conftest import ROOT
from conftest import OPERATOR_BIN_DIR

BUILD = os.path.dirname(OPERATOR_BIN_DIR)


def test_the_image_holds_the_binaries_their_libraries_and_no_shell():
    proc = subprocess.run([os.path.join(ROOT, "hack", "image.sh"), BUILD], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ref = proc.stdout.strip().splitlines()[-1]
    tag = ref.rsplit(":", 1)[1]
    archive = os.path.join(BUILD, "image", "telo-operator.tar")
    config = json.loads(subprocess.run(
        ["skopeo", "inspect", "--config", "oci-archive:%s:%s" % (archive, tag)],
        check=True, capture_output=True, text=True).stdout)
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["/usr/bin/telo-operator"]
    layout = os.path.join(BUILD, "image", "oci")
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    manifest_digest = next(m["digest"] for m in index["manifests"]
                           if m.get("annotations", {}).get("org.opencontainers.image.ref.name")
                           == tag)
    with open(os.path.join(layout, "blobs", *manifest_digest.split(":"))) as f:
        manifest = json.load(f)
    files = set()
    for layer in manifest["layers"]:
        with tarfile.open(os.path.join(layout, "blobs", *layer["digest"].split(":"))) as t:
            files |= {m.name.lstrip("./") for m in t.getmembers() if m.isfile()}
    assert "usr/bin/telo-operator" in files
    if os.path.exists(os.path.join(OPERATOR_BIN_DIR, "telo-gateway")):
        assert "usr/bin/telo-gateway" in files
    assert "etc/ssl/certs/ca-certificates.crt" in files
    assert not {"bin/sh", "usr/bin/sh", "bin/busybox"} & files
    others = {f for f in files if not (f.startswith("usr/bin/telo-") or ".so" in f
                                       or f in ("etc/passwd", "etc/group", "etc/nsswitch.conf",
                                                "etc/ssl/certs/ca-certificates.crt"))}
    assert not others, "unexpected files in the image: %s" % sorted(others)
    libs = {f for f in files if ".so" in f}
    # The HTTP and WebSocket stack is the project's own (pkg/ws): libwebsockets and its libev
    # plugin are no longer shipped.
    assert not any("libwebsockets" in f for f in libs), "libwebsockets in the image: %s" % sorted(libs)
    print("image %s: %d files, %d libraries" % (ref, len(files), len(libs)))

"""Hostile tenants and image builds (issue 15, finding 1): a tenant's spec.entry never reaches a
shell (the CRD refuses anything but a plain path, naming the field), a tenant's spec.image is a
build's FROM only when the operator allows it (build.allowedBaseImages), and one namespace's
build is never another namespace's image (build.shareAcrossNamespaces, off by default).

The build tests reuse test_image_builds.py's registry and `builds` operator (a build namespace
with the push Secret, Jobs held back on kwok); nothing here needs a build to run."""

import json
import shutil
import time
import uuid

import pytest

from conftest import wait_for_default_service_account, wait_until
from test_image_builds import (APP, TOOLS, app_bundle, builds, bundle_cm, job_creates,  # noqa: F401
                               jobs, registry, tag_of, tgz)
from test_sessions import (Hold, apply, condition, get, get_ts, session, session_node,  # noqa: F401
                           start, wait_phase)

needs_build_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                       reason="needs %s" % ", ".join(TOOLS))

ALLOWED = "letters, digits, '.', '_', '-' and '/'"

# Each would run `id` (or worse) in a shell-form `RUN telo install /app/<entry>`; the last is the
# issue's own example, a valid bundle path that runs a script from the bundle.
INJECTIONS = [
    "app/t.yaml;id",
    "app/$(id).yaml",
    "app/`id`.yaml",
    "app/t.yaml|sh",
    "app/t.yaml&&id",
    "app/t yaml",
    'app/t".yaml',
    "app/t'.yaml",
    "app/t.yaml>/tmp/x",
    'app/t.yaml;sh -c "$(cat x.sh)";#',
]


def manifest(name, entry, image=None):
    spec = {"entry": entry, "bundle": {"configMap": {"name": "hello-bundle"}}}
    if image:
        spec["image"] = image
    return json.dumps({"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
                       "metadata": {"name": name}, "spec": spec})


def test_entries_a_shell_would_read_are_refused_naming_the_field(cluster, crd, namespace):
    for i, entry in enumerate(INJECTIONS):
        name = "inject-%d" % i
        proc = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest(name, entry),
                               check=False)
        assert proc.returncode != 0, "kubectl apply accepted entry %r: %s" % (entry, proc.stdout)
        assert "spec.entry may contain only %s" % ALLOWED in proc.stderr, (entry, proc.stderr)
        assert cluster.kubectl("get", "telosession", name, "-n", namespace,
                               check=False).returncode != 0
    # What bundles really name still goes in: nested paths, dots, dashes, underscores, capitals.
    for i, entry in enumerate(["app/telo.yaml", "main.telo", "A-b_c/v1.2/..x/Telo.YAML"]):
        cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                        input=manifest("fine-%d" % i, entry))


# --- with builds -------------------------------------------------------------------------------

def unique_app(greeting):
    """The hello app with imports no other test (or run) has, so its tags are this test's."""
    marker = "%d%s" % (time.time_ns() % 100000, uuid.uuid4().hex[:4])
    return tgz({"app/telo.yaml": APP.replace("std/http-server@0.15.0",
                                             "std/http-server@0.15.%d" % int(marker, 16))
                % json.dumps(greeting)})


@pytest.fixture
def other_namespace(cluster):
    """A second session namespace, for what one tenant must not share with another."""
    ns = "e2e-hostile-b-%s" % uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", ns)
    wait_for_default_service_account(cluster, ns)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@needs_build_tools
def test_a_base_image_the_operator_does_not_allow_is_refused_with_the_reason(
        cluster, builds, pod_namespace, session_node):
    ns, hold = pod_namespace, Hold(cluster, session_node)
    builds("build.allowedBaseImages=ghcr.io/telorun/node:*", hold=hold)
    data = unique_app("from an image of my own")
    apply(cluster, ns, bundle_cm("bundle", data),
          session("evil", bundle="bundle", image="evil.example/node:1"),
          session("fine", bundle="bundle", image="ghcr.io/telorun/node:22-slim"))
    ts = wait_phase(cluster, ns, "evil", "Pending", reason="ImageNotAllowed", timeout=30)
    st = ts["status"]
    assert 'spec.image "evil.example/node:1" is not an allowed base image' in st["message"], st
    assert "telorun/node:latest-slim (images.default), ghcr.io/telorun/node:*" in st["message"]
    assert "build.allowedBaseImages" in st["message"], st
    assert condition(ts, "Stalled")["status"] == "True"
    assert condition(ts, "Stalled")["reason"] == "ImageNotAllowed"
    ready = condition(ts, "ImageReady")
    assert ready["status"] == "False" and ready["reason"] == "ImageNotAllowed", ready
    # An allowed one builds (held back here); the refused one got no Job and no pod.
    fine = wait_phase(cluster, ns, "fine", "Building", timeout=30)
    assert [j["metadata"]["name"] for j in jobs(cluster, builds.namespace)] == \
        [fine["status"]["image"]["buildJob"]]
    time.sleep(2)
    assert get_ts(cluster, ns, "evil")["status"]["reason"] == "ImageNotAllowed"
    assert get(cluster, ns, "pod", "telo-run-evil") is None
    assert len(job_creates(cluster, builds.namespace)) == 1
    # An allowed spec.image is all it takes.
    cluster.kubectl("patch", "ts", "evil", "-n", ns, "--type=merge",
                    "-p", json.dumps({"spec": {"image": "ghcr.io/telorun/node:23"}}))
    ts = wait_phase(cluster, ns, "evil", "Building", timeout=30)
    assert ts["status"]["image"]["buildJob"] != fine["status"]["image"]["buildJob"]


@needs_build_tools
def test_two_namespaces_with_the_same_imports_get_different_images(
        cluster, builds, pod_namespace, other_namespace, session_node):
    a, b, hold = pod_namespace, other_namespace, Hold(cluster, session_node)
    builds("namespaces=%s,%s" % (a, b), hold=hold)
    data = unique_app("same imports")
    for ns in (a, b):
        apply(cluster, ns, bundle_cm("bundle", data), session("app", bundle="bundle"))
    tags = {}
    for ns in (a, b):
        ts = wait_phase(cluster, ns, "app", "Building", timeout=30)
        tags[ns] = ts["status"]["image"]["tag"]
        assert tags[ns] == tag_of(data, ns), (ns, ts["status"]["image"])
        assert ts["status"]["image"]["buildJob"] == "telo-build-" + tags[ns]
    assert tags[a] != tags[b]
    assert tag_of(data) not in tags.values()  # not the shared (reference) tag
    assert sorted(j["metadata"]["name"] for j in jobs(cluster, builds.namespace)) == \
        sorted("telo-build-" + t for t in tags.values())


@needs_build_tools
def test_shared_across_namespaces_one_image_with_the_reference_tag(
        cluster, builds, pod_namespace, other_namespace, session_node):
    a, b, hold = pod_namespace, other_namespace, Hold(cluster, session_node)
    builds("namespaces=%s,%s" % (a, b), "build.shareAcrossNamespaces=true", hold=hold)
    data = unique_app("shared")
    tag = tag_of(data)
    apply(cluster, a, bundle_cm("bundle", data), session("app", bundle="bundle"))
    wait_phase(cluster, a, "app", "Building", timeout=30)
    apply(cluster, b, bundle_cm("bundle", data), session("app", bundle="bundle"))
    for ns in (a, b):
        ts = wait_phase(cluster, ns, "app", "Building", timeout=30)
        assert ts["status"]["image"]["tag"] == tag, ts["status"]["image"]
    wait_until(lambda: get_ts(cluster, b, "app")["status"].get("progress", {}).get("message")
               == "Waiting for in-progress build\u2026", timeout=30,
               what="the second namespace to wait on the first one's build")
    assert [j["metadata"]["name"] for j in jobs(cluster, builds.namespace)] == \
        ["telo-build-" + tag]

"""Base-image freshness (issue 17): with a session's pullPolicy Always, the base image's registry
digest (a manifest HEAD, Docker-Content-Digest) is keyed into the per-app image's tag, so a base
tag moved in the registry (same tag, new content) rebuilds the app image once; the digest is kept
for build.baseDigestTtlSeconds. With the registry down, the session starts from the cached image
(the last digest known) and its progress says "Base image freshness check failed (...); using
cached image", as the reference runner's does.

The base image lives in the cluster's build registry (test_image_builds' registry fixture); build
Jobs are kwok's stand-ins, so after a Job succeeds the test pushes the image the Job would have
pushed. The registry is taken "down" for the operator only: the operator reaches it through a
TcpProxy of this test (build.registryApiUrl), which the test closes."""

import re
import socket
import time
import uuid

import pytest

from conftest import TcpProxy, pod_reachable_host, wait_until
from test_image_builds import (TOOLS, app_bundle, builds, job_creates, jobs, progress,  # noqa: F401
                               push_one_file_image, registry)
from test_sessions import apply, condition, get_ts, session, session_node, start, wait_phase  # noqa: F401

import shutil

pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                reason="needs %s" % ", ".join(TOOLS))

FRESHNESS = "Base image freshness check failed ("
ABSENT_TTL = 5.5  # how long the operator trusts a tag check's "absent" (builds.c ANSWER_TTL_S)


def push(registry, repo, tag, content, tmp):
    """A one-file image whose file holds content (so another content is another manifest
    digest), pushed as repo:tag with skopeo."""
    layout, rootfs = tmp / ("oci-%s" % uuid.uuid4().hex[:6]), tmp / ("rootfs-%s" % uuid.uuid4().hex[:6])
    local = registry["local"].rsplit("/", 2)[0]
    push_one_file_image(registry, "%s/%s:%s" % (local, repo, tag), layout, rootfs, "t",
                        "content.txt", content)


def take_down(proxy):
    """Closes proxy so that a connection is refused at once: a listener closed while its accept
    thread waits in accept() would still take one more connection (Linux wakes that accept only
    for a shutdown)."""
    try:
        proxy.listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    proxy.close()


def image_tag(cluster, ns, name):
    """The session's status.image.tag once it has one."""
    return wait_until(lambda: ((get_ts(cluster, ns, name) or {}).get("status", {})
                               .get("image") or {}).get("tag"), timeout=30,
                      what="%s's image tag" % name)


def built(cluster, builds, registry, ns, name, tmp):
    """Waits for the session's build Job to succeed (kwok), pushes the image it stands for, and
    waits for the session to run it. Returns its status."""
    ts = wait_phase(cluster, ns, name, "Running", timeout=60)
    tag = ts["status"]["image"]["tag"]
    push(registry, "telo/apps", tag, "app image %s" % tag, tmp)
    return ts


def dockerfile_from(cluster, bns, tag):
    """The FROM line of build Job telo-build-<tag>'s Dockerfile (its init container's DOCKERFILE)."""
    job = cluster.kubectl_json("get", "job", "-n", bns, "telo-build-" + tag)
    (init,) = job["spec"]["template"]["spec"]["initContainers"]
    (dockerfile,) = [e["value"] for e in init["env"] if e["name"] == "DOCKERFILE"]
    return dockerfile.splitlines()[0]


@pytest.fixture
def base(registry):
    """A base image repository of this test's own in the build registry: (repo, image)."""
    repo = "telo/base-%s" % uuid.uuid4().hex[:8]
    host = registry["repository"].rsplit("/", 2)[0]
    return repo, "%s/%s:slim" % (host, repo)


def test_a_moved_base_tag_rebuilds_the_app_image_once(cluster, builds, registry, base,
                                                      pod_namespace, tmp_path):
    ns = pod_namespace
    repo, image = base
    push(registry, repo, "slim", "base v1", tmp_path)
    op = builds("build.allowedBaseImages=%s:*" % image.rsplit(":", 1)[0],
                "build.baseDigestTtlSeconds=1")
    marker = uuid.uuid4().hex[:6]
    apply(cluster, ns, app_bundle("bundle", "fresh " + marker),
          session("s1", bundle="bundle", image=image, pullPolicy="Always"))
    # The tag, from the Building phase on (a kwok build pod succeeds at once, and its Succeeded
    # ends the build: the phase may last less than a poll).
    t1 = image_tag(cluster, ns, "s1")
    ts = built(cluster, builds, registry, ns, "s1", tmp_path)
    assert ts["status"]["image"]["reason"] == "Built", ts["status"]
    assert job_creates(cluster, builds.namespace) == {"telo-build-" + t1: 1}
    # The build pulls the base content its tag was keyed with, not whatever the tag names then.
    from1 = dockerfile_from(cluster, builds.namespace, t1)
    assert re.fullmatch("FROM %s@sha256:[0-9a-f]{64}" % re.escape(image), from1), from1

    # The same tag, new content: another manifest digest.
    push(registry, repo, "slim", "base v2", tmp_path)
    time.sleep(1.5)  # past build.baseDigestTtlSeconds
    apply(cluster, ns, session("s2", bundle="bundle", image=image, pullPolicy="Always"))
    t2 = image_tag(cluster, ns, "s2")
    assert t2 != t1, "the moved base tag did not change the image tag %s: %s" % (
        t1, get_ts(cluster, ns, "s2")["status"])
    ts = built(cluster, builds, registry, ns, "s2", tmp_path)
    assert ts["status"]["image"] == {"ref": "%s:%s" % (registry["repository"], t2), "tag": t2,
                                     "reason": "Built", "buildJob": "telo-build-" + t2}
    assert job_creates(cluster, builds.namespace) == {"telo-build-" + t1: 1,
                                                      "telo-build-" + t2: 1}
    from2 = dockerfile_from(cluster, builds.namespace, t2)
    assert re.fullmatch("FROM %s@sha256:[0-9a-f]{64}" % re.escape(image), from2), from2
    assert from2 != from1, "the moved tag's build pulls the old base: %s" % from2

    # Right after: the same base, the same digest, the image is there. (Past the 5 s an "absent"
    # answer of the tag check stands, which s2's build left.)
    time.sleep(ABSENT_TTL)
    apply(cluster, ns, session("s3", bundle="bundle", image=image, pullPolicy="Always"))
    ts = wait_phase(cluster, ns, "s3", "Running", timeout=30)
    assert ts["status"]["image"] == {"ref": "%s:%s" % (registry["repository"], t2), "tag": t2,
                                     "reason": "CacheHit"}, ts["status"]
    assert job_creates(cluster, builds.namespace) == {"telo-build-" + t1: 1,
                                                      "telo-build-" + t2: 1}
    assert op.metric("telo_image_builds_total", {"result": "succeeded"}) == 2

    # IfNotPresent: no digest in the key, whatever the base's digest (the reference's key).
    apply(cluster, ns, session("s4", bundle="bundle", image=image))
    t4 = image_tag(cluster, ns, "s4")
    assert t4 not in (t1, t2)
    wait_until(lambda: "telo-build-" + t4 in [j["metadata"]["name"] for j in
                                              jobs(cluster, builds.namespace)],
               timeout=30, what="s4's build Job")
    assert dockerfile_from(cluster, builds.namespace, t4) == "FROM " + image


def test_with_the_registry_down_a_session_starts_from_the_cached_image(
        cluster, builds, registry, base, pod_namespace, tmp_path):
    ns = pod_namespace
    repo, image = base
    push(registry, repo, "slim", "base v1", tmp_path)
    host, port = registry["host"].rsplit(":", 1)
    proxy = TcpProxy(host, int(port), bind_host=pod_reachable_host(cluster))
    try:
        builds("build.allowedBaseImages=%s:*" % image.rsplit(":", 1)[0],
               "build.baseDigestTtlSeconds=1",
               "build.registryApiUrl=http://%s:%d" % (pod_reachable_host(cluster), proxy.port))
        apply(cluster, ns, app_bundle("bundle", "down " + uuid.uuid4().hex[:6]),
              session("s1", bundle="bundle", image=image, pullPolicy="Always"))
        ts = built(cluster, builds, registry, ns, "s1", tmp_path)
        tag = ts["status"]["image"]["tag"]
        time.sleep(ABSENT_TTL)
        apply(cluster, ns, session("s2", bundle="bundle", image=image, pullPolicy="Always"))
        ts = wait_phase(cluster, ns, "s2", "Running", timeout=30)
        assert ts["status"]["image"]["reason"] == "CacheHit", ts["status"]
        assert condition(ts, "ImageReady")["message"] == "%s:%s" % (registry["repository"], tag)

        take_down(proxy)  # the registry is down, as the operator sees it
        with pytest.raises(OSError):
            socket.create_connection((pod_reachable_host(cluster), proxy.port), timeout=2)
        time.sleep(1.5)
        apply(cluster, ns, session("s3", bundle="bundle", image=image, pullPolicy="Always"))
        ts = wait_phase(cluster, ns, "s3", "Running", timeout=60)
        st = ts["status"]
        assert st["image"] == {"ref": "%s:%s" % (registry["repository"], tag), "tag": tag,
                               "reason": "CacheHit"}, st
        # The progress says it until the pod speaks; the ImageReady condition keeps saying it.
        ready = condition(ts, "ImageReady")
        assert ready["status"] == "True" and ready["reason"] == "CacheHit", ready
        message = ready["message"]
        assert message.startswith("%s:%s (%s" % (registry["repository"], tag, FRESHNESS)), message
        assert message.endswith("); using cached image)"), message
        assert image in message, message
        assert len(jobs(cluster, builds.namespace)) == 1
    finally:
        proxy.close()

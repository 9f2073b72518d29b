"""Hostile tenants: a user who may only create TeloSessions must not make the operator overwrite
others' objects. An object without the operator's labels (outside its informer caches) that holds
a child's name (telo-run-<session>: pod, Service, Ingress; telo-run-<session>-attach: Secret) is
never written, adopted or deleted: the session is Pending/NameConflict, names the object, and goes
on with a child of its own once the object's owner deletes it."""

import base64
import json
import time

import pytest

from conftest import wait_until
from test_sessions import (apply, condition, get, get_ts, hello_bundle, owner_uid,  # noqa: F401
                           session, session_node, start, wait_phase)

TENANT = "e2e-tenant"
FOREIGN_LABELS = {"owner": "someone-else"}


def foreign_object(kind, name):
    """Someone else's object of kind under name: none of the operator's labels, a label of its
    own and content the operator would write otherwise."""
    meta = {"name": name, "labels": dict(FOREIGN_LABELS)}
    if kind == "pod":
        # Parked: a nodeSelector nothing has keeps it Pending whatever kwok plays.
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"nodeSelector": {"e2e.telo.run/nowhere": "yes"},
                         "containers": [{"name": "c", "image": "busybox"}]}}
    if kind == "service":
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"selector": {"app": "someone-else"},
                         "ports": [{"name": "theirs", "port": 9999, "protocol": "TCP",
                                    "targetPort": 9999}]}}
    if kind == "ingress":
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta,
                "spec": {"rules": [{"host": "other.example.test", "http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "other", "port": {"number": 80}}}}]}}]}}
    assert kind == "secret", kind
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "data": {"token": base64.b64encode(b"not-yours").decode()}}


def fingerprint(obj):
    """What a write to obj would change: its identity, version, owners, metadata and content."""
    meta = obj["metadata"]
    return {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
            "ownerReferences": meta.get("ownerReferences"), "labels": meta.get("labels"),
            "annotations": meta.get("annotations"),
            "content": {k: obj.get(k) for k in ("spec", "data", "type")}}


def assert_untouched(cluster, ns, kind, name, before):
    after = get(cluster, ns, kind, name)
    assert after is not None, "the foreign %s %s/%s was deleted" % (kind, ns, name)
    was, now = fingerprint(before), fingerprint(after)
    changed = {k: {"before": was[k], "after": now[k]} for k in was if was[k] != now[k]}
    assert not changed, "the foreign %s %s/%s was written to: %s" % (
        kind, ns, name, json.dumps(changed, indent=1))
    assert not after["metadata"].get("ownerReferences"), after["metadata"]
    assert after["metadata"].get("labels", {}).get("owner") == "someone-else", after["metadata"]


@pytest.fixture
def tenant(cluster, pod_namespace):
    """create(obj): kubectl create as a user who may write TeloSessions in the test's namespace
    and nothing else there (no pods, Services, Ingresses or Secrets)."""
    ns = pod_namespace
    cluster.kubectl("create", "role", "telosession-writer", "-n", ns,
                    "--verb=create,get,list,watch,update,patch", "--resource=telosessions")
    cluster.kubectl("create", "rolebinding", TENANT, "-n", ns, "--role=telosession-writer",
                    "--user=" + TENANT)

    def can(verb, resource):
        return cluster.kubectl("auth", "can-i", verb, resource, "-n", ns, "--as=" + TENANT,
                               check=False).stdout.strip() == "yes"
    wait_until(lambda: can("create", "telosessions"), timeout=30,
               what="%s to be allowed to create TeloSessions in %s" % (TENANT, ns))
    for resource in ("pods", "services", "ingresses.networking.k8s.io", "secrets"):
        for verb in ("create", "update", "patch", "delete"):
            assert not can(verb, resource), "%s may %s %s" % (TENANT, verb, resource)

    def create(obj):
        proc = cluster.kubectl("create", "--as=" + TENANT, "-n", ns, "-f", "-",
                               input=json.dumps(obj), check=False)
        assert proc.returncode == 0, proc.stderr
    return create


@pytest.mark.parametrize("kind", ["pod", "service", "ingress", "secret"])
def test_an_unlabeled_object_under_a_childs_name_is_a_name_conflict_and_left_alone(
        cluster, start, pod_namespace, tenant, kind):  # noqa: F811
    ns = pod_namespace
    start("ingress.baseDomain=sessions.example.test")
    # Every child wanted: a pod, a Service and an Ingress for the port, a Secret for the token.
    name = "telo-run-clash" + ("-attach" if kind == "secret" else "")
    apply(cluster, ns, hello_bundle())
    cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(foreign_object(kind, name)))
    if kind == "pod":
        # The scheduler's one status write comes first, so the versions below are the owner's.
        wait_until(lambda: any(c["type"] == "PodScheduled" for c in (get(
            cluster, ns, "pod", name).get("status", {}).get("conditions") or [])),
            timeout=30, what="the scheduler to find no node for the foreign pod")
    before = get(cluster, ns, kind, name)

    tenant(session("clash", attachToken=True))

    # A taken pod name keeps the session from its pod (Pending). Another child's create goes out
    # with the pod's and meets the name taken only then: that session runs, not Ready.
    phases = ("Pending",) if kind == "pod" else ("Pending", "Running")

    def conflict():
        # Checked on every look, so a write shows at once with what it changed.
        assert_untouched(cluster, ns, kind, name, before)
        ts = get_ts(cluster, ns, "clash")
        st = (ts or {}).get("status", {})
        return ts if st.get("phase") in phases and st.get("reason") == "NameConflict" else None
    try:
        ts = wait_until(conflict, timeout=30, what="clash %s NameConflict" % "/".join(phases))
    except AssertionError as e:
        if "timed out" not in str(e):
            raise
        raise AssertionError("%s; its status: %s" % (e, json.dumps(
            get_ts(cluster, ns, "clash").get("status"), indent=1))) from None
    st = ts["status"]
    assert "%s %s/%s exists" % (kind, ns, name) in st.get("message", ""), st
    assert condition(ts, "Stalled")["status"] == "True", st
    assert condition(ts, "Ready")["status"] == "False", st
    time.sleep(2)
    assert_untouched(cluster, ns, kind, name, before)

    # Once its owner removes it, the session goes on with a child of its own; nothing maps an
    # unlabeled object's deletion to the session: the create tried again (after 10 s) does.
    force = ["--grace-period=0", "--force"] if kind == "pod" else []
    cluster.kubectl("delete", kind, name, "-n", ns, *force)
    ts = wait_phase(cluster, ns, "clash", "Running", timeout=60)
    wait_until(lambda: condition(get_ts(cluster, ns, "clash"), "Ready")["status"] == "True",
               timeout=30, what="clash Ready once the name is free")
    child = get(cluster, ns, kind, name)
    assert child is not None, "no %s %s/%s once Running" % (kind, ns, name)
    assert child["metadata"]["uid"] != before["metadata"]["uid"], child["metadata"]
    assert owner_uid(child) == ts["metadata"]["uid"], child["metadata"]

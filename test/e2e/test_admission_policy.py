"""The chart's ValidatingAdmissionPolicy (templates/admissionpolicy.yaml) on the real API server:
a TeloSession's pod hands the Secrets and ConfigMaps its spec names to the session's app, so a
write that newly names one its writer may not get is refused, with a message naming the field,
the object and the fix; what the writer may read passes, and so does a write by anyone that
leaves the stored references as they are (the operator's own writes, a GitOps re-apply).

Each tenant here is a user the test impersonates (kubectl --as), bound to a Role that may write
TeloSessions and get some Secrets and ConfigMaps by name; the policy is bound to the test's
namespace only (config.namespaces), so no other test's writes meet it."""

import json
import uuid

import pytest

from conftest import wait_until
from test_chart import CHART, helm  # noqa: F401

POLICY = "templates/admissionpolicy.yaml"


def session(ns, name, bundle="mine", secrets=(), config_maps=()):
    env = [{"name": "PLAIN", "value": "x"}]
    env += [{"name": "S%d" % i, "valueFrom": {"secretKeyRef": {"name": n, "key": "k"}}}
            for i, n in enumerate(secrets)]
    env += [{"name": "C%d" % i, "valueFrom": {"configMapKeyRef": {"name": n, "key": "k"}}}
            for i, n in enumerate(config_maps)]
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"entry": "main.telo", "bundle": {"configMap": {"name": bundle}}, "env": env}}


@pytest.fixture
def policed(cluster, crd, helm):  # noqa: F811
    """A namespace under the chart's policy (release e2e-<suffix>), and a function that writes a
    TeloSession as a user and returns (accepted, the API server's message)."""
    suffix = uuid.uuid4().hex[:6]
    ns, release = "e2e-vap-" + suffix, "e2e-vap-" + suffix
    cluster.kubectl("create", "namespace", ns)
    rendered = helm("template", release, CHART, "--set", "config.namespaces={%s}" % ns,
                    "--show-only", POLICY).stdout
    cluster.kubectl("apply", "-f", "-", input=rendered)
    name = release + "-telo-operator-session-references"
    # A policy takes effect once the API server has compiled it; until then writes pass.
    probe = session(ns, "probe", bundle="never-granted")

    def enforced():
        proc = cluster.kubectl("create", "--as=e2e-probe", "-f", "-", input=json.dumps(probe),
                               check=False)
        if proc.returncode == 0:
            cluster.kubectl("delete", "telosession", "probe", "-n", ns, check=False)
        return "ValidatingAdmissionPolicy" in proc.stderr
    cluster.kubectl("create", "role", "writer", "-n", ns, "--verb=create,get,update,patch",
                    "--resource=telosessions")
    cluster.kubectl("create", "rolebinding", "e2e-probe", "-n", ns, "--role=writer",
                    "--user=e2e-probe")
    wait_until(enforced, timeout=30, what="the policy to be enforced")

    def write(user, obj, verb="create", patch=None):
        args = [verb, "--as=" + user] if user else [verb]
        if patch is None:
            proc = cluster.kubectl(*args, "-f", "-", input=json.dumps(obj), check=False)
        else:
            proc = cluster.kubectl(*args, "telosession", obj, "-n", ns, "--type=json", "-p",
                                   json.dumps(patch), check=False)
        return proc.returncode == 0, proc.stderr.partition("denied request: ")[2].strip()

    def grant(user, resource, *names):
        role = "%s-%s" % (user, resource)
        cluster.kubectl("create", "role", role, "-n", ns, "--verb=get", "--resource=" + resource,
                        *["--resource-name=" + n for n in names])
        cluster.kubectl("create", "rolebinding", role, "-n", ns, "--role=" + role,
                        "--user=" + user)

    def tenant(user):
        cluster.kubectl("create", "rolebinding", user, "-n", ns, "--role=writer",
                        "--user=" + user)
        grant(user, "configmaps", "mine")

    yield ns, write, grant, tenant
    cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name,
                    check=False)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_session_naming_what_its_writer_may_not_get_is_refused(policed):
    ns, write, grant, tenant = policed
    tenant("e2e-ann")
    grant("e2e-ann", "secrets", "ann-token")

    ok, msg = write("e2e-ann", session(ns, "a1", secrets=["ann-token", "admin-pull"]))
    assert not ok
    assert msg.startswith("spec.env[].valueFrom.secretKeyRef.name: you may not get Secret "
                          "admin-pull in namespace %s" % ns), msg
    assert "ask for get on this one" in msg, msg
    ok, msg = write("e2e-ann", session(ns, "a2", config_maps=["mine", "theirs"]))
    assert not ok and msg.startswith("spec.env[].valueFrom.configMapKeyRef.name: you may not "
                                     "get ConfigMap theirs"), msg
    ok, msg = write("e2e-ann", session(ns, "a3", bundle="theirs"))
    assert not ok and msg.startswith("spec.bundle.configMap.name: you may not get ConfigMap "
                                     "theirs"), msg

    # What she may read passes: by name, each name once however many variables read it.
    ok, msg = write("e2e-ann", session(ns, "a4", secrets=["ann-token"] * 6, config_maps=["mine"]))
    assert ok, msg
    assert write(None, session(ns, "a4"), verb="get")[0]


def test_a_write_that_keeps_the_stored_references_passes_and_a_new_one_is_checked(policed):
    ns, write, grant, tenant = policed
    # Someone who may read everything (the admin, or a GitOps tool) made the session.
    ok, msg = write(None, session(ns, "b1", bundle="theirs", secrets=["s%d" % i for i in range(6)],
                                  config_maps=["c1", "c2"]))
    assert ok, msg
    tenant("e2e-bob")
    ok, msg = write("e2e-bob", "b1", verb="patch",
                    patch=[{"op": "add", "path": "/spec/stopped", "value": True}])
    assert ok, msg
    ok, msg = write("e2e-bob", "b1", verb="patch", patch=[
        {"op": "add", "path": "/spec/env/-",
         "value": {"name": "NEW", "valueFrom": {"secretKeyRef": {"name": "admin-pull",
                                                                  "key": "k"}}}}])
    assert not ok and "you may not get Secret admin-pull" in msg, msg
    ok, msg = write("e2e-bob", "b1", verb="patch", patch=[
        {"op": "replace", "path": "/spec/bundle/configMap/name", "value": "admins"}])
    assert not ok and msg.startswith("spec.bundle.configMap.name: you may not get ConfigMap "
                                     "admins"), msg


def test_many_new_names_need_get_on_the_kind_namespace_wide(policed):
    """An authorizer check costs a third of an expression's budget: the policy asks about four
    new names of a kind per write by name, and more need get on every one of the kind."""
    ns, write, grant, tenant = policed
    tenant("e2e-cy")
    names = ["s%d" % i for i in range(5)]
    grant("e2e-cy", "secrets", *names)
    ok, msg = write("e2e-cy", session(ns, "c1", secrets=names[:4]))
    assert ok, msg
    ok, msg = write("e2e-cy", session(ns, "c2", secrets=names))
    assert not ok
    assert msg.startswith("spec: this write names 5 Secrets the TeloSession did not name before "
                          "(s0, s1, s2, s3, s4); more than 4 at once need get on every Secret"), msg
    tenant("e2e-dee")
    grant("e2e-dee", "secrets")  # every Secret of the namespace
    ok, msg = write("e2e-dee", session(ns, "c3", secrets=["s%d" % i for i in range(40)]))
    assert ok, msg

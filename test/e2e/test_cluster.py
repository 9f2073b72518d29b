"""The local cluster is real: each test needs a specific control-plane component doing its job
(apiserver, kwok, the job and garbage-collector controllers, the scheduler, Pod Security
admission, kwok's failure stages), and fails when that component is missing."""

import json

import pytest
from kubernetes import client as kclient
from kubernetes.client.rest import ApiException

from conftest import wait_until


def test_apiserver_readyz(cluster, api):
    resp = api.call_api("GET", api.configuration.host + "/readyz?verbose=true")
    resp.read()
    assert resp.status == 200
    body = resp.data.decode()
    assert "[+]etcd ok" in body
    assert "readyz check passed" in body
    # The version the binaries were built with (ldflags), not v0.0.0-master.
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.34.")
    assert version["clientVersion"]["gitVersion"] == version["serverVersion"]["gitVersion"]


def test_two_kwok_nodes_ready(api):
    nodes = kclient.CoreV1Api(api).list_node(label_selector="type=kwok").items
    ready = sorted(n.metadata.name for n in nodes
                   if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions))
    assert ready == ["kwok-node-0", "kwok-node-1"]
    # node-lifecycle-controller removes the not-ready taint once kwok reports Ready.
    for n in nodes:
        assert not any(t.key == "node.kubernetes.io/not-ready" for t in (n.spec.taints or []))


def test_job_pod_runs_to_completion(cluster, api, pod_namespace):
    # Needs the job controller (pod creation), the scheduler (binding) and kwok (pod phases).
    batch = kclient.BatchV1Api(api)
    batch.create_namespaced_job(pod_namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}},
    })
    job = wait_until(lambda: (lambda j: j if j.status.succeeded == 1 else None)(
        batch.read_namespaced_job("hello", pod_namespace)), timeout=90, what="Job hello to succeed")
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    pods = kclient.CoreV1Api(api).list_namespaced_pod(pod_namespace, label_selector="job-name=hello")
    assert [p.status.phase for p in pods.items] == ["Succeeded"]
    assert pods.items[0].spec.node_name.startswith("kwok-node-")


def test_deleting_owner_garbage_collects_dependent(api, namespace):
    core = kclient.CoreV1Api(api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(namespace, {"metadata": {
        "name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner.metadata.uid}]}})
    core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone():
        try:
            core.read_namespaced_config_map("dependent", namespace)
            return False
        except ApiException as e:
            return e.status == 404
    wait_until(dependent_gone, timeout=60, what="the garbage collector to delete 'dependent'")


PRIVILEGED_POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged"},
    "spec": {"containers": [{"name": "c", "image": "busybox",
                             "securityContext": {"privileged": True}}]},
}


def test_restricted_namespace_rejects_privileged_pod(cluster, api, pod_namespace):
    core = kclient.CoreV1Api(api)
    # Without the label the same pod is admitted, so the rejection below is Pod Security's doing.
    core.create_namespaced_pod(pod_namespace, PRIVILEGED_POD)
    core.delete_namespaced_pod("privileged", pod_namespace, grace_period_seconds=0)

    cluster.kubectl("label", "namespace", pod_namespace,
                    "pod-security.kubernetes.io/enforce=restricted")
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(pod_namespace, dict(PRIVILEGED_POD, metadata={"name": "again"}))
    assert rejected.value.status == 403
    message = json.loads(rejected.value.body)["message"]
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "privileged" in message


def _pod(name, labels=None, annotations=None, init=False):
    spec = {"containers": [{"name": "main", "image": "busybox"}]}
    if init:
        spec["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": spec}


def _wait_phase(core, namespace, name, phase, timeout=60):
    return wait_until(lambda: (lambda p: p if p.status.phase == phase else None)(
        core.read_namespaced_pod(name, namespace)), timeout=timeout,
        what="pod %s to reach %s" % (name, phase))


def test_chaos_pod_fails_with_chosen_exit_code(api, pod_namespace):
    core = kclient.CoreV1Api(api)
    prefix = "pod-container-running-failed.stage.kwok.x-k8s.io"
    core.create_namespaced_pod(pod_namespace, _pod(
        "crash", labels={prefix: "true"},
        annotations={prefix + "/exit-code": "42", prefix + "/reason": "Error",
                     prefix + "/delay": "200ms", prefix + "/jitter-delay": "100ms"}))
    pod = _wait_phase(core, pod_namespace, "crash", "Failed")
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (42, "Error")


def test_init_container_failure(api, pod_namespace):
    core = kclient.CoreV1Api(api)
    prefix = "pod-init-container-running-failed.stage.kwok.x-k8s.io"
    core.create_namespaced_pod(pod_namespace, _pod(
        "init-fails", init=True, labels={prefix: "true"},
        annotations={prefix + "/exit-code": "3", prefix + "/delay": "200ms",
                     prefix + "/jitter-delay": "100ms"}))
    pod = _wait_phase(core, pod_namespace, "init-fails", "Failed")
    assert pod.status.init_container_statuses[0].state.terminated.exit_code == 3


def test_image_pull_backoff_stage(api, pod_namespace):
    core = kclient.CoreV1Api(api)
    core.create_namespaced_pod(pod_namespace, _pod(
        "no-image", labels={"sim.telo.run/image-pull": "backoff"},
        annotations={"sim.telo.run/image-pull-message": "failed to pull"}))

    def waiting():
        p = core.read_namespaced_pod("no-image", pod_namespace)
        statuses = p.status.container_statuses or []
        return p if statuses and statuses[0].state.waiting else None
    pod = wait_until(waiting, timeout=60, what="pod no-image to wait on its image")
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
    assert pod.status.container_statuses[0].state.waiting.message == 'failed to pull "busybox"'

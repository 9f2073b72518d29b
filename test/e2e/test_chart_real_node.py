"""The chart as a user installs it, run for real: `helm install` of charts/telo-operator with
this checkout's image (hack/image.sh), its operator and gateway Deployments and the sessions
they start all placed on the real node (the chart's nodeSelector and tolerations values, and the
same for sessions under config), where kubelet, containerd and runc run them and the
NetworkPolicy enforcer polices them.

test_chart.py proves the release's objects on kwok nodes, where a pod is Ready without a
process; here the kubelet itself probes the health ports the Deployments name, the operator
elects itself leader with the chart's Lease and RBAC from inside its pod, and a session it
starts is attached to through the chart's gateway with the Service URL the operator published.
Skipped, with the reason, when no Ready node carries telo.run/node=real."""

import json
import time

import pytest

from conftest import REAL_NODE_LABEL, REAL_NODE_TOLERATION, InClusterPlatform, http_get, \
    wait_until
from test_chart import CHART, chart_namespaces, helm, pods_of, ready  # noqa: F401
from test_gateway import Client, _images, start_session
from test_sessions_real_node import _ready_real_node

# The Deployments' liveness probe: initialDelaySeconds 5, periodSeconds 10 (templates/).
LIVENESS_FIRST_RUN = 5 + 10


def image_values(ref):
    """image.repository and image.tag of a reference repo:tag (the registry may have a port)."""
    repo, _, tag = ref.rpartition(":")
    assert repo and "/" not in tag, "hack/image.sh printed %r, want repository:tag" % ref
    return {"repository": repo, "tag": tag}


def events_of(cluster, ns, pod):
    return cluster.kubectl_json("get", "events", "-n", ns, "--field-selector",
                                "involvedObject.name=" + pod)["items"]


@pytest.mark.slow
def test_the_chart_on_a_real_node_probes_runs_and_attaches_a_session(cluster, helm, crd,  # noqa: F811
                                                                     chart_namespaces,
                                                                     tmp_path):
    node = _ready_real_node(cluster)
    if node is None:
        pytest.skip("no Ready node labelled telo.run/node=real: the chart's pods need a kubelet "
                    "(start it as root: TELO_REAL_NODE=1 hack/cluster/up.sh)")
    release_ns, sessions_ns, builds_ns = chart_namespaces
    release = "e2e-" + release_ns[-6:]
    platform = InClusterPlatform.get(cluster)
    images = _images(cluster)
    values = {
        "image": image_values(platform.image),
        "nodeSelector": REAL_NODE_LABEL,
        "tolerations": [REAL_NODE_TOLERATION],
        "namespaces": {"builds": builds_ns},
        "config": {
            "namespaces": [sessions_ns],
            "images": {"init": images["telo-init"], "default": images["telo-session-test"]},
            "nodeSelector": REAL_NODE_LABEL,
            "tolerations": [REAL_NODE_TOLERATION],
            "startDeadlineSeconds": 90,
        },
    }
    values_file = tmp_path / "values.json"  # JSON is YAML: helm reads it as a values file
    values_file.write_text(json.dumps(values))
    # The attach ClusterRole has one name per cluster: the plain YAML's copy would refuse the
    # release's, as in test_chart.py.
    if "telo-session-attach" in cluster.kubectl("get", "clusterrole", "-o", "name").stdout and \
            "Helm" not in cluster.kubectl("get", "clusterrole", "telo-session-attach",
                                          "-o", "jsonpath={.metadata.labels}").stdout:
        cluster.kubectl("delete", "clusterrole", "telo-session-attach")
    installed = time.monotonic()
    try:
        helm("install", release, CHART, "-n", release_ns, "-f", str(values_file), "--wait",
             "--timeout", "180s")
        run_release(cluster, release, release_ns, sessions_ns, node, installed)
    except AssertionError as e:
        # Say why: a probe the kubelet saw fail (helm --wait only says its deadline passed),
        # and what the release's processes logged.
        events = cluster.kubectl("get", "events", "-n", release_ns, "--field-selector",
                                 "type=Warning", check=False)
        logs = cluster.kubectl("logs", "-n", release_ns, "--tail=40", "--prefix", "-l",
                               "app.kubernetes.io/instance=" + release, check=False)
        raise AssertionError("%s\n--- the release's warnings:\n%s--- its logs:\n%s%s" % (
            e, events.stdout, logs.stdout, logs.stderr))
    finally:
        helm("uninstall", release, "-n", release_ns, "--wait", "--timeout", "120s", check=False)


def run_release(cluster, release, release_ns, sessions_ns, node, installed):
    deployment = "%s-telo-operator" % release
    pods = {}
    for app in ("telo-operator", "telo-gateway"):
        pods[app] = wait_until(lambda: [p for p in pods_of(cluster, release_ns, release, app)
                                        if ready(p)], timeout=90,
                               what="the release's %s pod Ready on the real node" % app)[0]
        # Ready on a kubelet means the readiness probe on the health port answered 200.
        assert pods[app]["spec"]["nodeName"] == node["metadata"]["name"], app
        status = pods[app]["status"]["containerStatuses"][0]
        assert status["ready"] and "running" in status["state"], status
    op_ip = pods["telo-operator"]["status"]["podIP"]
    code, body = http_get("http://%s:8081/readyz" % op_ip)
    assert code == 200, (code, body)
    code, body = http_get("http://%s:8080/metrics" % op_ip)
    assert code == 200 and "telo_" in body, code
    # The operator leads from inside its pod, with the chart's Lease and RBAC.
    def lease():
        proc = cluster.kubectl("get", "lease", "telo-operator.telo.run", "-n", release_ns,
                               "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None
    lease = wait_until(lease, timeout=60, what="the chart's Lease")
    assert lease["spec"]["holderIdentity"].startswith(pods["telo-operator"]["metadata"]["name"]), \
        lease["spec"]

    # A session the chart's operator runs on the real node, attached to through the chart's
    # gateway at the URL the operator published (the gateway Service's in-cluster name; this
    # machine has no kube-proxy, so the test dials the gateway pod the Service selects).
    env = {"cluster": cluster, "ns": sessions_ns}
    status, token = start_session(env, "chart", [])
    path = "/v1/namespaces/%s/telosessions/chart/attach" % sessions_ns
    assert status["attach"]["url"] == "http://%s-gateway.%s.svc:80%s" % (
        deployment, release_ns, path), status["attach"]
    gw_ip = pods["telo-gateway"]["status"]["podIP"]
    client = Client("ws://%s:8081%s" % (gw_ip, path), token)
    try:
        client.type("through-the-chart\n")
        client.wait_for("echo: through-the-chart")
    finally:
        client.close()

    # The liveness probe has run by now: no probe of either pod failed, nothing restarted.
    left = LIVENESS_FIRST_RUN - (time.monotonic() - installed)
    if left > 0:
        time.sleep(left)
    for app, pod in pods.items():
        name = pod["metadata"]["name"]
        unhealthy = [e["message"] for e in events_of(cluster, release_ns, name)
                     if e["reason"] == "Unhealthy"]
        assert not unhealthy, "%s: %s" % (app, unhealthy)
        now = cluster.kubectl_json("get", "pod", name, "-n", release_ns)
        assert now["status"]["containerStatuses"][0]["restartCount"] == 0, (app, now["status"])

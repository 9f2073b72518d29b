"""App reachability on the real node (issue 17): Ready waits until the app accepts connections on
its declared TCP ports, and a port that never does makes the session Degraded (reason
AppUnreachable, Stalled) with the port named, not Failed.

Sessions run on the real node as in test_sessions_real_node.py (the stand-in CLI, a ConfigMap
bundle), in a namespace holding the chart's session NetworkPolicy (the real node enforces it,
hack/cluster/README.md "NetworkPolicy"). The operator of the suite probes only the real node's
pod network (conftest: reachability.podCIDRs). The stand-in serves its `http` ports from its
start; the late listener is the stand-in's own HTTP server started in the session container with
`kubectl exec` 10 s after the session is Running, so the test decides when the port opens."""

import json
import os
import subprocess
import threading
import time

import pytest

from conftest import SA_NAMESPACE, wait_until
from test_chart import render, helm  # noqa: F401  (helm is a fixture)
from test_sessions import apply, condition, get_ts, wait_phase
from test_sessions_real_node import bundle_configmap, curl, real, real_node, real_session  # noqa: F401

LATE_PORT = 9090
NEVER_PORT = 9999
RELEASE = "telo-operator"


def endpoint(ts, port):
    return next(e for e in ts["status"].get("endpoints", []) if e["port"] == port)


def policies_on(cluster, helm, ns):  # noqa: F811
    """The chart's NetworkPolicy for session namespace ns, for an operator in the namespace the
    suite's in-cluster operator runs in (a process operator connects from the node, which
    policies never police, as the kubelet's probes), applied and checked to exist."""
    docs = render(helm, "config.namespaces={%s}" % ns, "networkPolicy.operator.enabled=false",
                  "networkPolicy.gateway.enabled=false",
                  "namespaces.createBuildNamespace=false", "namespaces.createSessionNamespaces=false",
                  release=RELEASE, namespace=SA_NAMESPACE)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert len(policies) == 1, policies
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": policies}))
    assert cluster.kubectl("get", "networkpolicy", "-n", ns, "-o", "name").stdout.strip()
    return policies


def test_ready_waits_until_the_app_listens_on_its_declared_port(cluster, helm, real):  # noqa: F811
    ns, op = real()
    policies_on(cluster, helm, ns)
    apply(cluster, ns, bundle_configmap("late-bundle", {
        "app/main.telo": "print listens on %d only when the test says so\n" % LATE_PORT}),
        real_session("late", ports=(LATE_PORT,)))
    # kubectl wait, as a user or a pipeline runs it, from the start.
    waited = {}

    def wait_ready():
        proc = cluster.kubectl("wait", "-n", ns, "--for=condition=Ready", "ts/late",
                               "--timeout=150s", check=False, timeout=200)
        waited["at"], waited["rc"], waited["out"] = time.monotonic(), proc.returncode, \
            proc.stdout + proc.stderr
    waiter = threading.Thread(target=wait_ready)
    waiter.start()
    ts = wait_phase(cluster, ns, "late", "Running", timeout=90)
    running_at = time.monotonic()
    pod, ip = ts["status"]["podName"], ts["status"]["podIP"]
    # Running, not Ready, for as long as nothing listens.
    seen = []
    while time.monotonic() < running_at + 10:
        ts = get_ts(cluster, ns, "late")
        seen.append((round(time.monotonic() - running_at, 1), condition(ts, "Ready")["status"],
                     endpoint(ts, LATE_PORT).get("state")))
        assert ts["status"]["phase"] == "Running", ts["status"]
        assert condition(ts, "Ready")["status"] == "False", seen
        time.sleep(1)
    assert "at" not in waited, "kubectl wait returned before the app listened: %s" % waited
    assert {s[2] for s in seen} == {"Checking"}, seen
    ts = get_ts(cluster, ns, "late")
    assert condition(ts, "AppReachable")["status"] == "False"
    assert condition(ts, "AppReachable")["reason"] == "Checking"
    assert condition(ts, "Reconciling")["status"] == "True"  # kstatus: InProgress
    assert str(LATE_PORT) in condition(ts, "Ready")["message"], condition(ts, "Ready")

    # The app opens its port now: the stand-in's HTTP server, in the session container.
    listen_at = time.monotonic()
    listener = subprocess.Popen(
        [cluster.kubectl_path, "--kubeconfig", cluster.kubeconfig, "exec", "-n", ns, pod,
         "-c", "session", "--", "nc", "-ll", "-p", str(LATE_PORT), "-e",
         "/usr/lib/telo/http-answer", str(LATE_PORT), "/app/app/main.telo"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: curl("http://%s:%d/" % (ip, LATE_PORT), timeout=2)[0] == 0,
                   timeout=20, interval=0.2, what="the late listener")
        up_at = time.monotonic()
        waiter.join(timeout=60)
        assert waited.get("rc") == 0, waited
        ready_after_listen = waited["at"] - listen_at
        ready_after_up = waited["at"] - up_at
        print("Running at 0 s; listening from %.1f s (answering %.1f s); kubectl wait returned "
              "%.1f s after Running, %.1f s after the port answered" % (
                  listen_at - running_at, up_at - running_at, waited["at"] - running_at,
                  ready_after_up))
        assert ready_after_listen > 0, waited
        # Probed every intervalSeconds (5) with a 1 s connect timeout, plus a status write.
        assert ready_after_up <= 5 + 1 + 4, ready_after_up
        ts = get_ts(cluster, ns, "late")
        assert condition(ts, "Ready")["status"] == "True"
        assert condition(ts, "AppReachable")["status"] == "True"
        assert condition(ts, "Reconciling")["status"] == "False"
        ep = endpoint(ts, LATE_PORT)
        assert ep["state"] == "Reachable" and ep["since"], ep
        # Steady: the probe writes nothing more while nothing changes.
        rv = ts["metadata"]["resourceVersion"]
        time.sleep(12)
        assert get_ts(cluster, ns, "late")["metadata"]["resourceVersion"] == rv
    finally:
        listener.kill()
        listener.wait()


def test_an_app_that_never_listens_on_its_declared_port_is_degraded(cluster, helm, real):  # noqa: F811
    ns, op = real("reachability.timeoutSeconds=10")
    policies_on(cluster, helm, ns)
    apply(cluster, ns, bundle_configmap("deaf-bundle", {
        "app/main.telo": "print serves %d but not %d\nhttp 8080 hello\n" % (8080, NEVER_PORT)}),
        real_session("deaf", ports=(8080, NEVER_PORT)))
    ts = wait_phase(cluster, ns, "deaf", "Running", timeout=90)
    running_at = time.monotonic()

    def degraded():
        t = get_ts(cluster, ns, "deaf")
        return t if t["status"].get("reason") == "AppUnreachable" else None
    ts = wait_until(degraded, timeout=60, interval=0.5, what="reason AppUnreachable")
    took = time.monotonic() - running_at
    print("AppUnreachable %.1f s after Running (timeoutSeconds 10)" % took)
    assert took >= 6, took  # not before the timeout (counted from the app's start)
    st = ts["status"]
    assert st["phase"] == "Running", st  # Degraded, not Failed
    assert "TCP port %d " % NEVER_PORT in st["message"] and "port 8080" not in st["message"], st
    assert "kubectl logs -n %s %s -c session" % (ns, st["podName"]) in st["message"], st
    assert condition(ts, "Ready")["status"] == "False"
    assert condition(ts, "Ready")["reason"] == "AppUnreachable"
    assert condition(ts, "Stalled")["status"] == "True"
    assert condition(ts, "AppReachable")["reason"] == "Unreachable"
    assert endpoint(ts, NEVER_PORT)["state"] == "Unreachable", st["endpoints"]
    assert endpoint(ts, 8080)["state"] == "Reachable", st["endpoints"]
    events = cluster.kubectl("get", "events", "-n", ns, "--field-selector",
                             "involvedObject.name=deaf", "-o", "json").stdout
    assert "AppUnreachable" in events, events[-2000:]
    # Steady: no further status write while it stays so.
    rv = ts["metadata"]["resourceVersion"]
    time.sleep(12)
    assert get_ts(cluster, ns, "deaf")["metadata"]["resourceVersion"] == rv

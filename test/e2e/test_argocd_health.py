"""hack/argocd/health.lua, the Argo CD health check of TeloSessions, run by Debian's Lua 5.1 (the
language of Argo CD's gopher-lua) on sample statuses, and on statuses the operator wrote."""

import json
import os
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT, wait_until

HEALTH = os.path.join(ROOT, "hack", "argocd", "health.lua")
LUA = shutil.which("lua5.1")


def lua_literal(value):
    """A Lua table constructor for a JSON value (Argo CD hands the script the object likewise:
    maps as tables, lists as 1-based arrays, numbers as numbers)."""
    if isinstance(value, dict):
        return "{%s}" % ",".join("[%s]=%s" % (json.dumps(k), lua_literal(v))
                                 for k, v in value.items())
    if isinstance(value, list):
        return "{%s}" % ",".join(lua_literal(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nil"
    return json.dumps(value)


def health(obj):
    if not LUA:
        pytest.fail("lua5.1 is missing: run hack/install-deps.sh")
    driver = ("obj = %s\nlocal hs = dofile(%s)\nio.write(hs.status, '\\n', hs.message or '')"
              % (lua_literal(obj), json.dumps(HEALTH)))
    proc = subprocess.run([LUA, "-"], input=driver, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    status, _, message = proc.stdout.partition("\n")
    return status, message


def cond(kind, status, reason=""):
    return {"type": kind, "status": status, "reason": reason, "observedGeneration": 1}


def ts(status, generation=1):
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": "s", "generation": generation}, "spec": {}, "status": status}


CASES = [
    ("no-status", {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
                   "metadata": {"name": "s", "generation": 1}}, "Progressing", "pick"),
    ("pending", ts({"phase": "Pending", "observedGeneration": 1,
                    "conditions": [cond("Ready", "False"), cond("Reconciling", "True"),
                                   cond("Stalled", "False")]}), "Progressing", "Pending"),
    ("provisioning", ts({"phase": "Provisioning", "observedGeneration": 1,
                         "progress": {"phase": "provision", "message": "Pulling image",
                                      "done": False}}),
     "Progressing", "Provisioning: Pulling image"),
    ("building", ts({"phase": "Building", "observedGeneration": 1}), "Progressing", "Building"),
    ("running", ts({"phase": "Running", "observedGeneration": 1,
                    "endpoints": [{"name": "http", "port": 8080, "protocol": "TCP",
                                   "url": "http://8080-s.example.test"}],
                    "conditions": [cond("Ready", "True", "Running")]}),
     "Healthy", "Running at http://8080-s.example.test"),
    ("succeeded", ts({"phase": "Succeeded", "observedGeneration": 1, "exitCode": 0}),
     "Healthy", "code 0"),
    ("failed", ts({"phase": "Failed", "observedGeneration": 1, "reason": "AppExited",
                   "message": "container \"session\" exited with exit code 3",
                   "conditions": [cond("Stalled", "True", "AppExited")]}),
     "Degraded", "AppExited: container \"session\" exited with exit code 3"),
    ("stopped", ts({"phase": "Stopped", "observedGeneration": 1, "reason": "Stopped"}),
     "Suspended", "spec.stopped"),
    ("blocked", ts({"phase": "Pending", "observedGeneration": 1, "reason": "BundleNotFound",
                    "message": "ConfigMap b does not exist",
                    "conditions": [cond("Stalled", "True", "BundleNotFound")]}),
     "Degraded", "BundleNotFound: ConfigMap b does not exist"),
    # The spec changed (generation 3) and the operator has not looked yet: whatever the old
    # status says, it is not the answer for this spec.
    ("generation-behind", ts({"phase": "Running", "observedGeneration": 2,
                              "conditions": [cond("Ready", "True", "Running")]}, generation=3),
     "Progressing", "observe generation 3"),
    ("unknown-phase", ts({"phase": "Exploded", "observedGeneration": 1}), "Unknown", "Exploded"),
    # Issue 17: Running, its TCP port not accepting connections yet; then never.
    ("running-checking", ts({"phase": "Running", "observedGeneration": 1,
                             "conditions": [cond("Ready", "False", "WaitingForPorts"),
                                            cond("Stalled", "False", "NotStalled"),
                                            dict(cond("AppReachable", "False", "Checking"),
                                                 message="waiting for TCP port 8080 to accept "
                                                         "connections on 10.85.0.9")]}),
     "Progressing", "Running: waiting for TCP port 8080"),
    ("running-unreachable", ts({"phase": "Running", "observedGeneration": 1,
                                "reason": "AppUnreachable",
                                "message": "TCP port 8080 of the session's pod (10.85.0.9) has not "
                                           "accepted a connection for 30s",
                                "conditions": [cond("Ready", "False", "AppUnreachable"),
                                               cond("Stalled", "True", "AppUnreachable"),
                                               cond("AppReachable", "False", "Unreachable")]}),
     "Degraded", "AppUnreachable: TCP port 8080"),
    ("running-not-probed", ts({"phase": "Running", "observedGeneration": 1,
                               "conditions": [cond("Ready", "True", "Running"),
                                              cond("AppReachable", "True", "NotProbed")]}),
     "Healthy", "Running"),
    # Refused writes (issue 17): Stalled (403/422) is Degraded, whatever the phase; a refusal
    # retried without being Stalled (429, 5xx) is Progressing.
    ("pod-rejected", ts({"phase": "Pending", "observedGeneration": 1, "reason": "PodRejected",
                         "message": "the API server refused the session's pod d/telo-run-s "
                                    "(403 Forbidden): exceeded quota",
                         "conditions": [cond("Ready", "False", "Pending"),
                                        cond("Stalled", "True", "PodRejected")]}),
     "Degraded", "PodRejected: the API server refused the session's pod"),
    ("service-rejected-running",
     ts({"phase": "Running", "observedGeneration": 1, "reason": "ServiceRejected",
         "message": "admission webhook \"deny\" denied the request",
         "conditions": [cond("Ready", "False", "Running"),
                        cond("Stalled", "True", "ServiceRejected")]}),
     "Degraded", "ServiceRejected: admission webhook"),
    ("ingress-rejected-retrying",
     ts({"phase": "Running", "observedGeneration": 1, "reason": "IngressRejected",
         "message": "the API server refused the session's Ingress (503 ServiceUnavailable)",
         "conditions": [cond("Ready", "False", "Running"),
                        cond("Stalled", "False", "NotStalled")]}),
     "Progressing", "IngressRejected: the API server refused"),
    ("build-job-rejected", ts({"phase": "Building", "observedGeneration": 1,
                               "reason": "BuildJobRejected", "message": "forbidden",
                               "conditions": [cond("Stalled", "True", "BuildJobRejected")]}),
     "Degraded", "BuildJobRejected: forbidden"),
    ("start-timeout-without-pod",
     ts({"phase": "Failed", "observedGeneration": 1, "reason": "StartTimeout",
         "message": "the session did not start within 120s: it never got a pod. Last refusal: x",
         "conditions": [cond("Stalled", "True", "StartTimeout")]}),
     "Degraded", "StartTimeout: the session did not start within 120s: it never got a pod"),
    # Waiting for a slot under the session limits is progress, not a fault (issue 17).
    ("session-limit", ts({"phase": "Pending", "observedGeneration": 1, "reason": "SessionLimit",
                          "message": "limits.maxSessionsPerNamespace is 3 and 3 sessions in "
                                     "namespace n hold a slot; 1 waiting ahead of this one "
                                     "(place 2 in line).",
                          "queuePosition": 2,
                          "progress": {"phase": "provision",
                                       "message": "Waiting for a session slot", "done": False},
                          "conditions": [cond("Ready", "False", "Pending"),
                                         cond("Reconciling", "True", "Pending"),
                                         cond("Stalled", "False", "NotStalled")]}),
     "Progressing", "SessionLimit: limits.maxSessionsPerNamespace is 3"),
    # A new run after a resume or a restart starts like a new session.
    ("new-run", ts({"phase": "Pending", "observedGeneration": 2, "run": 2,
                    "lastRun": {"phase": "Stopped", "reason": "Stopped"},
                    "progress": {"phase": "provision", "message": "Scheduling", "done": False},
                    "conditions": [cond("Stalled", "False")]}, generation=2),
     "Progressing", "Pending: Scheduling"),
]


@pytest.mark.parametrize("name,obj,status,words", CASES, ids=[c[0] for c in CASES])
def test_health_of_sample_statuses(name, obj, status, words):
    got, message = health(obj)
    assert got == status and words in message, (name, got, message)


def test_health_of_what_the_operator_writes(cluster, operator, pod_namespace):
    """The real thing: the sample session, Running and then stopped, as the operator wrote it."""
    ns = pod_namespace
    operator("ingress.baseDomain=sessions.example.test")
    cluster.kubectl("apply", "-n", ns, "-f", os.path.join(ROOT, "crds", "samples", "hello.yaml"))
    cluster.kubectl("wait", "-n", ns, "--for=condition=Ready", "ts/hello", "--timeout=60s")
    obj = cluster.kubectl_json("get", "ts", "hello", "-n", ns)
    assert health(obj) == ("Healthy", "Running at " + obj["status"]["endpoints"][0]["url"]), obj
    cluster.kubectl("patch", "ts", "hello", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":true}}')
    # Right after the patch the status is the old generation's: Progressing, then Suspended.
    stopped = wait_until(lambda: health(cluster.kubectl_json("get", "ts", "hello", "-n", ns))
                         [0] == "Suspended", timeout=30, what="Suspended")
    assert stopped
    obj = yaml.safe_load(cluster.kubectl("get", "ts", "hello", "-n", ns, "-o", "yaml").stdout)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]

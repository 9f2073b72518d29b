"""Refused writes in status (issue 17): when the API server refuses a session's pod or Service
(a ResourceQuota, an admission policy, a validating webhook), the session's status names the
refusal within 5 s, and the session becomes Ready once the obstacle is removed, with no operator
restart; a session that never gets a pod ends StartTimeout naming the last refusal.

Session pods run on the tests' kwok node (test_sessions.py's fixtures). Pod Security admission
cannot be made to refuse our pods honestly: they are built to the `restricted` profile whatever
the spec or the operator's settings (runAsNonRoot, uid 1000, no privilege escalation, every
capability dropped, RuntimeDefault seccomp, only configMap/emptyDir volumes). The second test
therefore labels the namespace `restricted` (our pod passes it) and refuses the session's image
with a ValidatingAdmissionPolicy, the other admission path a cluster administrator uses for it.
The webhook of the third test is a real HTTPS server this test runs on 127.0.0.1 (the API server
runs on this machine), with a self-signed CA in the ValidatingWebhookConfiguration's caBundle."""

import base64
import http.server
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from conftest import wait_until
from test_sessions import (apply, condition, get_ts, hello_bundle, session,  # noqa: F401
                           session_node, start, wait_phase)


def status_of(cluster, ns, name):
    return ((get_ts(cluster, ns, name) or {}).get("status") or {})


def wait_reason(cluster, ns, name, reason, timeout):
    """Waits for status.reason; returns the status."""
    def check():
        st = status_of(cluster, ns, name)
        return st if st.get("reason") == reason else None
    return wait_until(check, timeout=timeout, interval=0.1,
                      what="%s/%s reason %s" % (ns, name, reason))


def assert_refused(ts_status, reason, *words):
    assert ts_status.get("reason") == reason, json.dumps(ts_status, indent=1)
    message = ts_status.get("message", "")
    for w in words:
        assert w in message, "%r not in the message: %s" % (w, message)
    assert "Run: kubectl" in message, message
    conds = {c["type"]: c for c in ts_status.get("conditions", [])}
    assert conds["Ready"]["status"] == "False", conds["Ready"]
    assert conds["Stalled"]["status"] == "True" and conds["Stalled"]["reason"] == reason, conds


def wait_ready(cluster, ns, name, timeout):
    def check():
        st = status_of(cluster, ns, name)
        conds = {c["type"]: c for c in st.get("conditions", [])}
        return st if conds.get("Ready", {}).get("status") == "True" else None
    st = wait_until(check, timeout=timeout, what="%s/%s Ready" % (ns, name))
    assert not st.get("reason"), json.dumps(st, indent=1)
    assert {c["type"]: c for c in st["conditions"]}["Stalled"]["status"] == "False"
    return st


def server_dry_run_refused(cluster, ns, manifest, words):
    """Whether a server-side dry run of manifest is refused with words in the answer (an admission
    object takes a moment to be in force)."""
    proc = cluster.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-",
                           input=json.dumps(manifest), check=False)
    return proc.returncode != 0 and words in proc.stderr


# --- (1) a ResourceQuota of one pod -----------------------------------------------------------

def quota(ns, pods):
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods", "namespace": ns},
            "spec": {"hard": {"pods": str(pods)}}}


def wait_quota_enforced(cluster, ns, pods):
    wait_until(lambda: (cluster.kubectl_json("get", "resourcequota", "pods", "-n", ns)
                        .get("status", {}).get("hard", {}).get("pods") == str(pods)),
               timeout=30, what="the quota controller to publish the quota")


def test_a_pod_over_the_namespace_quota_is_pod_rejected_then_ready_when_raised(
        cluster, start, pod_namespace):
    ns = pod_namespace
    apply(cluster, ns, quota(ns, 1))
    wait_quota_enforced(cluster, ns, 1)
    start()
    apply(cluster, ns, hello_bundle(), session("first"))
    wait_phase(cluster, ns, "first", "Running", timeout=60)
    created = time.monotonic()
    apply(cluster, ns, session("second"))
    st = wait_reason(cluster, ns, "second", "PodRejected", timeout=5)
    took = time.monotonic() - created
    assert st["phase"] == "Pending", json.dumps(st, indent=1)
    assert_refused(st, "PodRejected", "pod %s/telo-run-second" % ns, "403 Forbidden",
                   "exceeded quota", "kubectl describe resourcequota -n %s" % ns)
    assert st.get("startTime"), st
    print("PodRejected after %.1f s: %s" % (took, st["message"]))
    apply(cluster, ns, quota(ns, 2))
    st = wait_ready(cluster, ns, "second", timeout=90)
    assert st["phase"] == "Running"


# --- (2) a `restricted` namespace and an admission policy refusing the session's image -----------

REFUSED_IMAGE = "registry.e2e.invalid/telo/refused-by-policy:1"


def test_a_pod_refused_by_admission_policy_is_pod_rejected_then_ready_when_lifted(
        cluster, start, pod_namespace):
    ns = pod_namespace
    cluster.kubectl("label", "namespace", ns, "--overwrite",
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    name = "e2e-refuse-%s" % uuid.uuid4().hex[:8]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                     "resources": ["pods"]}]},
                 "validations": [{
                     "expression": "object.spec.containers.all(c, !c.image.contains("
                                   "'refused-by-policy'))",
                     "message": "e2e policy: image refused-by-policy is not allowed here"}]}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {
                     "matchLabels": {"kubernetes.io/metadata.name": ns}}}}}
    # A pod `restricted` admits, so that only the policy can refuse it.
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
             "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                          "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{"name": "c", "image": REFUSED_IMAGE, "securityContext": {
                          "allowPrivilegeEscalation": False,
                          "capabilities": {"drop": ["ALL"]}}}]}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
    try:
        wait_until(lambda: server_dry_run_refused(cluster, ns, probe, "e2e policy"),
                   timeout=30, what="the admission policy to be in force")
        start()
        created = time.monotonic()
        apply(cluster, ns, hello_bundle(), session("imaged", image=REFUSED_IMAGE))
        st = wait_reason(cluster, ns, "imaged", "PodRejected", timeout=5)
        took = time.monotonic() - created
        assert st["phase"] == "Pending", json.dumps(st, indent=1)
        assert_refused(st, "PodRejected", "pod %s/telo-run-imaged" % ns,
                       "e2e policy: image refused-by-policy is not allowed here",
                       "kubectl get validatingadmissionpolicies")
        print("PodRejected after %.1f s: %s" % (took, st["message"]))
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
        cluster.kubectl("delete", "validatingadmissionpolicy", name, check=False)
    st = wait_ready(cluster, ns, "imaged", timeout=90)
    assert st["phase"] == "Running"


# --- (3) a validating webhook refusing Services ---------------------------------------------------

WEBHOOK_MESSAGE = "e2e webhook: Services are not allowed in this namespace"


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_certs(tmp):
    """A self-signed CA and a server certificate for 127.0.0.1 signed by it; returns
    (ca.pem, server.pem, server.key) paths."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "1", "-subj", "/CN=e2e-webhook-ca", cwd=tmp)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=127.0.0.1", cwd=tmp)
    with open(os.path.join(tmp, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf", cwd=tmp)
    return tuple(os.path.join(tmp, n) for n in ("ca.pem", "server.pem", "server.key"))


class DenyServices(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.seen += 1
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": {"uid": review["request"]["uid"], "allowed": False,
                               "status": {"code": 403, "message": WEBHOOK_MESSAGE}}}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook_server():
    with tempfile.TemporaryDirectory() as tmp:
        ca, cert, key = make_certs(tmp)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), DenyServices)
        server.seen = 0
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        with open(ca, "rb") as f:
            server.ca_bundle = base64.b64encode(f.read()).decode()
        try:
            yield server
        finally:
            server.shutdown()
            server.server_close()


def test_a_service_refused_by_a_webhook_is_service_rejected_then_ready_when_removed(
        cluster, start, pod_namespace, webhook_server):
    ns = pod_namespace
    name = "e2e-deny-services-%s" % uuid.uuid4().hex[:8]
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
        "webhooks": [{
            "name": "deny-services.e2e.telo.run",
            "clientConfig": {"url": "https://127.0.0.1:%d/validate" % webhook_server.server_port,
                             "caBundle": webhook_server.ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["services"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"]}]}
    probe = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probe"},
             "spec": {"ports": [{"port": 80}]}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(config))
    try:
        wait_until(lambda: server_dry_run_refused(cluster, ns, probe, WEBHOOK_MESSAGE),
                   timeout=30, what="the webhook to be in force")
        start()
        created = time.monotonic()
        apply(cluster, ns, hello_bundle(), session("served"))
        st = wait_reason(cluster, ns, "served", "ServiceRejected", timeout=5)
        took = time.monotonic() - created
        assert_refused(st, "ServiceRejected", "Service %s/telo-run-served" % ns,
                       'admission webhook "deny-services.e2e.telo.run" denied the request',
                       WEBHOOK_MESSAGE, "kubectl get validatingwebhookconfigurations")
        assert webhook_server.seen > 0
        print("ServiceRejected after %.1f s: %s" % (took, st["message"]))
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", name, check=False)
    st = wait_ready(cluster, ns, "served", timeout=90)
    assert st["phase"] == "Running"
    assert cluster.kubectl("get", "service", "telo-run-served", "-n", ns,
                           check=False).returncode == 0


# --- (4) a session that never gets a pod --------------------------------------------------------

def test_a_session_that_never_gets_a_pod_ends_start_timeout_naming_the_refusal(
        cluster, start, pod_namespace):
    ns = pod_namespace
    apply(cluster, ns, quota(ns, 0))
    wait_quota_enforced(cluster, ns, 0)
    start("startDeadlineSeconds=8")
    created = time.monotonic()
    apply(cluster, ns, hello_bundle(), session("never"))
    st = wait_reason(cluster, ns, "never", "PodRejected", timeout=5)
    assert st.get("startTime"), st
    ts = wait_phase(cluster, ns, "never", "Failed", timeout=30)
    took = time.monotonic() - created
    st = ts["status"]
    assert st["reason"] == "StartTimeout", json.dumps(st, indent=1)
    for w in ("the session did not start within 8s", "it never got a pod", "Last refusal",
              "pod %s/telo-run-never" % ns, "exceeded quota"):
        assert w in st["message"], "%r not in %s" % (w, st["message"])
    assert condition(ts, "Stalled")["status"] == "True"
    assert condition(ts, "Ready")["status"] == "False"
    # The deadline counts from startTime (the first reconcile): 8 s, plus a write's round trip.
    assert 7 <= took <= 20, took
    print("StartTimeout after %.1f s: %s" % (took, st["message"]))

"""One tenant's flood does not hold back another's sessions: the operator's work queue takes
namespaces in turn (pkg/workqueue/queue.h), so a namespace that queues hundreds of sessions at
once delays another namespace's next session by about one session, not by the hundreds.

The flood is made to pile up in the queue, not raced against the operator: the operator is
stopped (SIGSTOP) while the sessions are created, so on SIGCONT its watch delivers every
creation at once, the other tenant's last. Which session the operator served when is read from
the API server's audit log: the order in which its status writes reached the API server."""
import glob
import json
import os
import uuid

from conftest import rfc3339_now, wait_until

FLOOD = 300


def session(name):
    # A bundle ConfigMap that does not exist: the operator answers with one status write
    # (Pending, BundleNotFound) and creates nothing, so the flood costs the node nothing.
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": name},
            "spec": {"entry": "app/telo.yaml",
                     "bundle": {"configMap": {"name": "not-there"}}}}


def create(cluster, ns, sessions):
    proc = cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": sessions}), timeout=300)
    assert proc.returncode == 0, proc.stderr


def status_writes(cluster, namespaces, since):
    """(requestReceivedTimestamp, namespace, name) of the operator's status writes in the given
    namespaces since an RFC 3339 time, in the order the API server received them."""
    out = []
    for path in glob.glob(os.path.join(cluster.log_dir, "audit*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                if "telo-operator/" not in line or '"subresource":"status"' not in line:
                    continue
                e = json.loads(line)
                ref = e.get("objectRef", {})
                if (e.get("stage") == "ResponseComplete" and ref.get("namespace") in namespaces
                        and ref.get("resource") == "telosessions"
                        and e.get("userAgent", "").startswith("telo-operator/")
                        and e["verb"] in ("patch", "update")
                        and e.get("requestReceivedTimestamp", "") >= since):
                    out.append((e["requestReceivedTimestamp"], ref["namespace"], ref["name"]))
    return sorted(out)


def reason(cluster, ns, name):
    proc = cluster.kubectl("get", "telosession", name, "-n", ns, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout).get("status", {}).get("reason")


def test_a_flood_in_one_namespace_delays_another_namespaces_session_by_about_one(
        cluster, operator, pod_namespace):
    flood = pod_namespace
    quiet = "e2e-quiet-%s" % uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", quiet)
    try:
        op = operator("namespaces=%s,%s" % (flood, quiet))
        since = rfc3339_now()
        op.pause()
        try:
            create(cluster, flood, [session("s-%03d" % i) for i in range(FLOOD)])
            create(cluster, quiet, [session("mine")])
        finally:
            op.resume()
        wait_until(lambda: reason(cluster, quiet, "mine") == "BundleNotFound", timeout=120,
                   what="the quiet namespace's session to say BundleNotFound")
        wait_until(lambda: len({w[2] for w in status_writes(cluster, (flood,), since)}) == FLOOD,
                   timeout=180, interval=1, what="a status write for every flood session")
        writes = status_writes(cluster, (flood, quiet), since)
        firsts = []
        for _, ns, name in writes:
            if (ns, name) not in firsts:
                firsts.append((ns, name))
        position = firsts.index((quiet, "mine"))
        # Served in turn, the quiet tenant's session waits for the sessions already being
        # reconciled (the operator's 16 workers) and about one more; in one FIFO it would wait
        # for all 300. The bound leaves room for the workers' writes landing out of order.
        assert position <= 60, (
            "the quiet namespace's session was served after %d of the %d flood sessions"
            % (position, FLOOD))
        assert reason(cluster, flood, "s-%03d" % (FLOOD - 1)) == "BundleNotFound"
    finally:
        cluster.kubectl("delete", "namespace", quiet, "--wait=false", check=False)

"""The controller runtime (pkg/controller, pkg/cache, pkg/workqueue) end to end, through the test
controller build/bin/telo-mirror, which keeps <name>-mirror ConfigMaps in step with ConfigMaps
labelled mirror.telo.run/source=true. Writes are counted from the API server's audit log, so
"no duplicate writes" is the server's word, not the controller's."""

import glob
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT, LineReader, wait_until

BIN_DIR = os.environ.get("TELO_BIN_DIR") or os.path.join(ROOT, "build", "bin")
SOURCE = "mirror.telo.run/source=true"


def start_mirror(cluster, namespace):
    return LineReader([os.path.join(BIN_DIR, "telo-mirror"), "--kubeconfig", cluster.kubeconfig,
                       "-n", namespace])


def make_sources(cluster, namespace, names):
    for name in names:
        cluster.kubectl("create", "configmap", name, "-n", namespace,
                        "--from-literal=value=%s" % name)
        cluster.kubectl("label", "configmap", name, "-n", namespace, SOURCE)


def mirror_data(cluster, namespace, name):
    proc = cluster.kubectl("get", "configmap", name + "-mirror", "-n", namespace, "-o", "json",
                           check=False)
    return json.loads(proc.stdout).get("data") if proc.returncode == 0 else None


def wait_mirrored(cluster, namespace, name, value, timeout=60):
    wait_until(lambda: mirror_data(cluster, namespace, name) == {"value": value},
               timeout=timeout, what="%s-mirror to hold value=%s" % (name, value))


def audited(cluster, namespace, agent):
    """The writes agent (in the user agent: "telo-mirror/") made in namespace, as audit
    events, from the audit log and its rotated copies: a rotation during the test (the log is
    kept across runs) loses none."""
    for path in glob.glob(os.path.join(cluster.log_dir, "audit*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                if namespace not in line or agent not in line:
                    continue
                event = json.loads(line)
                ref = event.get("objectRef", {})
                if (event.get("stage") == "ResponseComplete"
                        and ref.get("namespace") == namespace
                        and event.get("verb") in ("create", "update", "patch", "delete")
                        and agent in event.get("userAgent", "")):
                    yield event


def audited_writes(cluster, namespace):
    """Writes our controller made in namespace (user agent telo-operator)."""
    return sum(1 for _ in audited(cluster, namespace, "telo-operator/"))


def test_mirrors_follow_sources_and_steady_state_writes_nothing(cluster, namespace):
    make_sources(cluster, namespace, ["a", "b", "c"])
    ctl = start_mirror(cluster, namespace)
    try:
        for name in "abc":
            wait_mirrored(cluster, namespace, name, name)
        cluster.kubectl("patch", "configmap", "b", "-n", namespace, "-p",
                        '{"data":{"value":"changed"}}')
        wait_mirrored(cluster, namespace, "b", "changed")
        # A deleted mirror comes back: the owner mapping requeues its source.
        cluster.kubectl("delete", "configmap", "c-mirror", "-n", namespace)
        wait_mirrored(cluster, namespace, "c", "c")
        time.sleep(2)
        writes = audited_writes(cluster, namespace)
        assert writes == 5, "3 creates, 1 update, 1 re-create; audit log says %d" % writes
        time.sleep(3)
        assert audited_writes(cluster, namespace) == writes, "steady state must not write"
    finally:
        assert ctl.stop() == 0, ctl.stderr_tail()


def test_sigkill_and_restart_converges_without_duplicate_writes(cluster, namespace):
    make_sources(cluster, namespace, ["s%d" % i for i in range(5)])
    ctl = start_mirror(cluster, namespace)
    for i in range(5):
        wait_mirrored(cluster, namespace, "s%d" % i, "s%d" % i)
    ctl.proc.send_signal(signal.SIGKILL)
    ctl.proc.wait()
    time.sleep(1)
    before = audited_writes(cluster, namespace)
    assert before == 5
    # One change while the controller is down: exactly one write is owed.
    cluster.kubectl("patch", "configmap", "s3", "-n", namespace, "-p",
                    '{"data":{"value":"while-down"}}')
    ctl = start_mirror(cluster, namespace)
    try:
        wait_mirrored(cluster, namespace, "s3", "while-down")
        time.sleep(3)
        assert audited_writes(cluster, namespace) == before + 1
    finally:
        assert ctl.stop() == 0, ctl.stderr_tail()


@pytest.mark.disruptive
def test_converges_after_apiserver_restart(cluster, namespace):
    make_sources(cluster, namespace, ["x"])
    ctl = start_mirror(cluster, namespace)
    try:
        wait_mirrored(cluster, namespace, "x", "x")
        cluster.script("down.sh", "kube-apiserver")
        time.sleep(3)  # the controller sees the connection fail and backs off
        assert ctl.proc.poll() is None, "the controller must survive the API server going away"
        cluster.script("up.sh")
        cluster.kubectl("patch", "configmap", "x", "-n", namespace, "-p",
                        '{"data":{"value":"after-restart"}}')
        wait_mirrored(cluster, namespace, "x", "after-restart", timeout=90)
    finally:
        assert ctl.stop() == 0, ctl.stderr_tail()


@pytest.mark.disruptive
def test_converges_after_forced_410(cluster, namespace):
    make_sources(cluster, namespace, ["y"])
    ctl = start_mirror(cluster, namespace)
    try:
        wait_mirrored(cluster, namespace, "y", "y")
        cluster.script("down.sh", "kube-apiserver")
        # The mirror vanishes behind the API server's back and history is compacted: the
        # controller's watch cannot resume (410 Expired), and only its relist can notice.
        etcd = [cluster.etcdctl_path, "--endpoints", cluster.etcd_endpoint]
        subprocess.run(etcd + ["del", "/registry/configmaps/%s/y-mirror" % namespace],
                       check=True, capture_output=True)
        status = json.loads(subprocess.run(etcd + ["endpoint", "status", "-w", "json"],
                                           check=True, capture_output=True, text=True).stdout)
        subprocess.run(etcd + ["compact", str(status[0]["Status"]["header"]["revision"])],
                       check=True, capture_output=True)
        cluster.script("up.sh")
        wait_mirrored(cluster, namespace, "y", "y", timeout=90)
    finally:
        assert ctl.stop() == 0, ctl.stderr_tail()


def lease_holder(cluster, namespace):
    proc = cluster.kubectl("get", "lease", "telo-mirror", "-n", namespace, "-o",
                           "jsonpath={.spec.holderIdentity}", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


# A crashed leader is replaced once its lease has run out on the follower's clock: up to lease
# duration + a retry (2.2 x retry period with client-go's jitter) to see the last renew + another
# to notice the expiry. At client-go's 15/10/2 s that is 15-24 s after the kill; these settings
# bound it at 8 + 2 x 2.2 = 12.4 s, within the 15 s the replicas must hand over in.
LEASE = ["--leader-elect-lease-duration", "8s", "--leader-elect-renew-deadline", "6s",
         "--leader-elect-retry-period", "1s"]


def start_replica(cluster, namespace, identity):
    return LineReader([os.path.join(BIN_DIR, "telo-mirror"), "--kubeconfig", cluster.kubeconfig,
                       "-n", namespace, "--leader-elect", "--identity", identity] + LEASE)


def writes_by_replica(cluster, namespace):
    """(time, identity) of every ConfigMap write the replicas made in namespace."""
    return sorted((e["stageTimestamp"], e["userAgent"].split("telo-mirror/")[1])
                  for e in audited(cluster, namespace, "telo-mirror/")
                  if e["objectRef"].get("resource") == "configmaps")


def test_leader_election_hands_over_and_never_two_writers(cluster, namespace):
    a = start_replica(cluster, namespace, "replica-a")
    b = c = None
    try:
        wait_until(lambda: lease_holder(cluster, namespace) == "replica-a", timeout=30,
                   what="replica-a to lead")
        b = start_replica(cluster, namespace, "replica-b")
        make_sources(cluster, namespace, ["one"])
        wait_mirrored(cluster, namespace, "one", "one")
        time.sleep(2)
        assert lease_holder(cluster, namespace) == "replica-a"

        # A crashed leader: the follower waits out the lease (8 s) and takes over.
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        killed = time.monotonic()
        make_sources(cluster, namespace, ["two"])
        wait_mirrored(cluster, namespace, "two", "two", timeout=40)
        takeover = time.monotonic() - killed
        print("takeover after SIGKILL of the leader: %.1fs" % takeover)
        assert takeover < 15, takeover
        assert lease_holder(cluster, namespace) == "replica-b"

        # A leader that stops gracefully releases the lease: the next one leads within a retry.
        c = start_replica(cluster, namespace, "replica-c")
        time.sleep(2)
        b.proc.send_signal(signal.SIGTERM)
        assert b.proc.wait(timeout=30) == 0
        stopped = time.monotonic()
        wait_until(lambda: lease_holder(cluster, namespace) == "replica-c", timeout=15,
                   what="replica-c to lead after the release")
        handover = time.monotonic() - stopped
        print("takeover after SIGTERM of the leader: %.1fs" % handover)
        assert handover < 5, handover
        make_sources(cluster, namespace, ["three"])
        wait_mirrored(cluster, namespace, "three", "three")

        # Never two writers: each replica's writes form one block, in the order they led.
        writers = [who for _, who in writes_by_replica(cluster, namespace)]
        blocks = [w for i, w in enumerate(writers) if i == 0 or writers[i - 1] != w]
        assert blocks == ["replica-a", "replica-b", "replica-c"], writers
    finally:
        for r in (a, b, c):
            if r:
                r.stop()

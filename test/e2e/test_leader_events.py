"""Leader election (pkg/controller/leader) and the event recorder (pkg/controller/events) against
the real API server, through the dev tool build/bin/telo-leader-demo: one candidate leads and the
others wait; a SIGKILLed leader is replaced once its lease has aged 15 s on the follower's clock;
a SIGTERMed leader releases the lease so a follower leads within one retry; two candidates never
lead at once; repeated events become one Event whose series counts them, similar ones are
combined, and the spam filter caps a burst at 25."""

import os
import queue
import signal
import subprocess
import threading
import time

from conftest import ROOT, LineReader, wait_until

BIN_DIR = os.environ.get("TELO_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LEASE = "demo-lease"


class TimedLineReader(LineReader):
    """A LineReader that also keeps when each line was printed (read by its thread), so tests can
    measure intervals without the delay of whoever calls expect()."""

    def __init__(self, argv):
        self.timed = []
        super().__init__(argv)

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.timed.append((time.monotonic(), line))
            self.lines.put(line)
        self.lines.put(None)

    def time_of(self, line):
        return next(t for t, l in self.timed if l == line)

    def quiet_for(self, seconds, predicate):
        """Fails if a line matching predicate arrives within seconds."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                return
            if line is None:
                return
            self.seen.append(line)
            assert not predicate(line), "unexpected %r; seen %s" % (line, self.seen)


def candidate(cluster, namespace, identity, *args):
    return TimedLineReader([os.path.join(BIN_DIR, "telo-leader-demo"), "--kubeconfig",
                            cluster.kubeconfig, "--namespace", namespace, "--lease-name", LEASE,
                            "--identity", identity, *args])


def lease_spec(cluster, namespace):
    return cluster.kubectl_json("get", "lease", LEASE, "-n", namespace)["spec"]


def stop_all(*readers):
    for r in readers:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()


def test_one_leads_and_a_second_waits(cluster, namespace):
    a = candidate(cluster, namespace, "alpha")
    b = None
    try:
        a.expect(lambda l: l == "LEADING", timeout=15, what="alpha leading")
        spec = lease_spec(cluster, namespace)
        assert spec["holderIdentity"] == "alpha"
        assert spec["leaseDurationSeconds"] == 15
        assert spec["leaseTransitions"] == 0
        # MicroTime: six fractional digits.
        assert len(spec["renewTime"].split(".")[1]) == len("000000Z"), spec["renewTime"]
        b = candidate(cluster, namespace, "beta")
        b.expect(lambda l: l == "NEW_LEADER alpha", timeout=10, what="beta seeing alpha")
        # A retry period is 2..4.4 s: several rounds without a takeover.
        b.quiet_for(8, lambda l: l == "LEADING")
        renewed = lease_spec(cluster, namespace)
        assert renewed["holderIdentity"] == "alpha"
        assert renewed["renewTime"] > spec["renewTime"], "the leader renews"
        assert renewed["acquireTime"] == spec["acquireTime"]
    finally:
        stop_all(a, *([b] if b else []))


def test_sigkilled_leader_is_replaced_after_the_lease_expires(cluster, namespace):
    a = candidate(cluster, namespace, "alpha")
    b = None
    try:
        a.expect(lambda l: l == "LEADING", timeout=15, what="alpha leading")
        b = candidate(cluster, namespace, "beta")
        b.expect(lambda l: l == "NEW_LEADER alpha", timeout=10, what="beta seeing alpha")
        killed = time.monotonic()
        a.proc.kill()
        a.proc.wait()
        b.expect(lambda l: l == "LEADING", timeout=30, what="beta taking over")
        took = b.time_of("LEADING") - killed
        print("takeover after SIGKILL of the leader: %.2f s" % took)
        # The last renewal was at most one retry (2 s) before the kill and beta waits a whole
        # lease (15 s) from when it saw it: at least ~13 s, at most 15 + one jittered retry.
        assert 12 < took < 20, took
        spec = lease_spec(cluster, namespace)
        assert spec["holderIdentity"] == "beta"
        assert spec["leaseTransitions"] == 1
    finally:
        stop_all(a, *([b] if b else []))


def test_sigterm_releases_the_lease_for_a_fast_takeover(cluster, namespace):
    a = candidate(cluster, namespace, "alpha")
    b = None
    try:
        a.expect(lambda l: l == "LEADING", timeout=15, what="alpha leading")
        b = candidate(cluster, namespace, "beta")
        b.expect(lambda l: l == "NEW_LEADER alpha", timeout=10, what="beta seeing alpha")
        a.proc.send_signal(signal.SIGTERM)
        terminated = time.monotonic()
        a.expect(lambda l: l.startswith("RELEASED"), timeout=10, what="alpha releasing")
        assert "RELEASED rc=0" in a.seen
        assert a.proc.wait(timeout=10) == 0
        assert a.seen.index("STOPPED") < a.seen.index("RELEASED rc=0")
        b.expect(lambda l: l == "LEADING", timeout=10, what="beta taking over")
        took = b.time_of("LEADING") - terminated
        print("takeover after SIGTERM (release) of the leader: %.2f s" % took)
        # A released lease is free at once: beta takes it at its next retry, 2..4.4 s apart.
        assert took < 5, took
        spec = lease_spec(cluster, namespace)
        assert spec["holderIdentity"] == "beta"
        assert spec["leaseTransitions"] == 1
    finally:
        stop_all(a, *([b] if b else []))


def test_never_two_leaders_at_once(cluster, namespace):
    """Three candidates; the leader is stopped five times in turn (SIGTERM and SIGKILL) and
    replaced by a new candidate. Every leadership interval, from LEADING to STOPPED (or to the
    kill), must end before the next one starts, and the Lease counts each hand-over once."""
    readers = {}
    intervals = []
    serial = 0

    def start():
        nonlocal serial
        serial += 1
        name = "cand-%d" % serial
        readers[name] = candidate(cluster, namespace, name)
        return name

    for _ in range(3):
        start()
    try:
        for round_no in range(5):
            leader = wait_until(
                lambda: next((n for n, r in readers.items()
                              if r.proc.poll() is None and any(l == "LEADING" for _, l in r.timed)
                              and not any(l == "STOPPED" for _, l in r.timed)), None),
                timeout=30, interval=0.1, what="a leader (round %d)" % round_no)
            r = readers[leader]
            began = r.time_of("LEADING")
            time.sleep(3)  # a few renewals, seen by the followers
            if round_no % 2 == 0:
                r.proc.send_signal(signal.SIGTERM)
                r.expect(lambda l: l.startswith("RELEASED"), timeout=15, what="the release")
                assert r.proc.wait(timeout=15) == 0
                ended = r.time_of("STOPPED")
            else:
                ended = time.monotonic()
                r.proc.kill()
                r.proc.wait()
            intervals.append((began, ended, leader))
            del readers[leader]
            start()
        # The last leader is still leading.
        leader = wait_until(
            lambda: next((n for n, r in readers.items()
                          if any(l == "LEADING" for _, l in r.timed)), None),
            timeout=30, interval=0.1, what="the last leader")
        intervals.append((readers[leader].time_of("LEADING"), time.monotonic(), leader))
        for r in readers.values():
            assert not any(l == "STOPPED" for _, l in r.timed), r.timed
        intervals.sort()
        print("leadership intervals:", [(n, round(e - b, 2)) for b, e, n in intervals])
        for (b1, e1, n1), (b2, e2, n2) in zip(intervals, intervals[1:]):
            assert e1 <= b2, "%s led until %.3f but %s led from %.3f" % (n1, e1, n2, b2)
        spec = lease_spec(cluster, namespace)
        assert spec["holderIdentity"] == leader
        assert spec["leaseTransitions"] == len(intervals) - 1
    finally:
        stop_all(*readers.values())


def demo_events(cluster, namespace, *args):
    cluster.kubectl("create", "configmap", "subject", "-n", namespace)
    uid = cluster.kubectl_json("get", "configmap", "subject", "-n", namespace)["metadata"]["uid"]
    r = candidate(cluster, namespace, "recorder", "--event-demo", "subject", *args)
    try:
        line = r.expect(lambda l: l.startswith("EVENTS "), timeout=60, what="the EVENTS line")
    finally:
        stop_all(r)
    stats = dict(kv.split("=") for kv in line.split()[1:])
    items = [e for e in cluster.kubectl_json("get", "events.events.k8s.io", "-n", namespace)["items"]
             if e["regarding"].get("name") == "subject" and e["reason"] == "DemoEvent"]
    for e in items:
        assert e["regarding"]["uid"] == uid
        assert e["regarding"]["kind"] == "ConfigMap"
        assert e["reportingController"] == "telo-operator"
        assert e["reportingInstance"] == "recorder"
        assert e["action"] == "Demo" and e["type"] == "Normal"
    return stats, items


def test_a_repeated_event_is_one_object_with_a_series(cluster, namespace):
    stats, items = demo_events(cluster, namespace, "--event-count", "20", "--event-interval",
                               "0.05")
    assert len(items) == 1, [e["metadata"]["name"] for e in items]
    assert items[0]["series"]["count"] == 20
    assert items[0]["note"] == "the same demo event"
    assert stats["recorded"] == "20" and stats["created"] == "1" and stats["failed"] == "0"
    # The core/v1 view of the same object, as kubectl get events shows it.
    core = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
    mine = [e for e in core if e["involvedObject"].get("name") == "subject"]
    assert len(mine) == 1 and mine[0]["series"]["count"] == 20
    print("20 identical events: 1 object, series.count=20, writes: %s creates + %s patches" %
          (stats["created"], stats["patched"]))


def test_the_spam_filter_caps_a_burst_at_25(cluster, namespace):
    stats, items = demo_events(cluster, namespace, "--event-count", "40")
    assert len(items) == 1
    assert items[0]["series"]["count"] == 25
    assert stats["filtered"] == "15"


def test_similar_events_are_combined_after_ten(cluster, namespace):
    stats, items = demo_events(cluster, namespace, "--event-count", "15", "--event-distinct",
                               "--event-interval", "0.02")
    combined = [e for e in items if e["note"].startswith("(combined from similar events): ")]
    single = [e for e in items if e not in combined]
    # Nine distinct notes stand alone; the tenth starts the combined event, which the next five
    # bump.
    assert len(single) == 9, [e["note"] for e in single]
    assert len(combined) == 1
    assert combined[0]["note"] == "(combined from similar events): demo event number 10"
    assert combined[0]["series"]["count"] == 6
    assert stats["recorded"] == "15"

"""Session limits (issue 17): with limits.maxSessionsPerNamespace the sessions over it wait in
Pending with reason SessionLimit, a message naming the limit and their place in line
(status.queuePosition), and the oldest starts as soon as a session holding a slot goes.

Session pods run on the kwok node of test_sessions.py (its fixtures are reused)."""

import json
import subprocess
import time

from conftest import wait_until
from test_sessions import (Audit, apply, get, get_ts, hello_bundle, now_rfc3339, pod_name,  # noqa: F401
                           session, session_node, start, status_writes, wait_phase)


def status_of(cluster, ns, name):
    return (get_ts(cluster, ns, name) or {}).get("status", {})


def test_sessions_over_the_namespace_limit_wait_in_line_and_start_when_a_slot_frees(
        cluster, start, pod_namespace):
    ns = pod_namespace
    start("limits.maxSessionsPerNamespace=3")
    apply(cluster, ns, hello_bundle())
    names = ["lim-%d" % i for i in range(1, 6)]
    # One apply: the line is creationTimestamp, then name, so lim-1..3 are first whatever second
    # each lands in.
    apply(cluster, ns, *[session(n) for n in names])
    for n in names[:3]:
        wait_phase(cluster, ns, n, "Running", timeout=60)

    def waiting():
        st = {n: status_of(cluster, ns, n) for n in names[3:]}
        if all(s.get("reason") == "SessionLimit" and s.get("queuePosition") for s in st.values()):
            return st
        return None
    st = wait_until(waiting, timeout=20, what="lim-4 and lim-5 waiting with SessionLimit")
    assert st["lim-4"]["phase"] == "Pending" and st["lim-5"]["phase"] == "Pending", st
    assert st["lim-4"]["queuePosition"] == 1 and st["lim-5"]["queuePosition"] == 2, st
    for n, ahead in (("lim-4", 0), ("lim-5", 1)):
        msg = st[n]["message"]
        assert "limits.maxSessionsPerNamespace is 3" in msg, msg
        assert "%d waiting ahead" % ahead in msg, msg
    # Waiting is progress, not a stall (kstatus: InProgress; Argo CD: Progressing).
    ts = get_ts(cluster, ns, "lim-4")
    conds = {c["type"]: c for c in ts["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False"
    assert conds["Stalled"]["status"] == "False"
    assert conds["Reconciling"]["status"] == "True"
    # Nothing of a waiting session exists yet.
    for n in names[3:]:
        assert get(cluster, ns, "pod", pod_name(n)) is None
    # Three hold a slot, no more, a while later too.
    time.sleep(2)
    pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l", "telo.run/session")["items"]
    assert sorted(p["metadata"]["labels"]["telo.run/session"] for p in pods) == names[:3]

    # Deleting a Running session starts the next in line within 2 s: watch the pods and take
    # the time the new pod is first seen, from the delete's return.
    watch = subprocess.Popen([cluster.kubectl_path, "--kubeconfig", cluster.kubeconfig, "get",
                              "pods", "-n", ns, "-w", "--output-watch-events", "-o", "json"],
                             stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1)  # the watch is established
        cluster.kubectl("delete", "ts", "lim-1", "-n", ns, "--wait=false")
        t0 = time.monotonic()
        seen = None
        decoder = json.JSONDecoder()
        buf = ""
        deadline = t0 + 10
        while seen is None and time.monotonic() < deadline:
            line = watch.stdout.readline()
            if not line:
                break
            buf += line
            try:
                event, _ = decoder.raw_decode(buf.strip())
            except ValueError:
                continue
            buf = ""
            if (event.get("type") == "ADDED" and
                    event["object"]["metadata"]["name"] == pod_name("lim-4")):
                seen = time.monotonic() - t0
        assert seen is not None, "lim-4's pod never came"
        print("lim-4's pod was created %.3f s after lim-1's delete returned" % seen)
        assert seen < 2.0, seen
    finally:
        watch.kill()
        watch.wait()
    wait_phase(cluster, ns, "lim-4", "Running", timeout=60)
    st = wait_until(lambda: (lambda s: s if s.get("queuePosition") == 1 else None)(
        status_of(cluster, ns, "lim-5")), timeout=10, what="lim-5 first in line")
    assert st["reason"] == "SessionLimit", st
    assert get(cluster, ns, "pod", pod_name("lim-5")) is None
    # Stopping one frees its slot too: lim-5 starts.
    cluster.kubectl("patch", "ts", "lim-2", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":true}}')
    wait_phase(cluster, ns, "lim-5", "Running", timeout=30)
    assert "queuePosition" not in status_of(cluster, ns, "lim-5")


def test_a_freed_slot_rewrites_the_front_of_a_long_line_not_all_of_it(
        cluster, start, pod_namespace):
    """Issue 20: each freed slot moves every waiting session up one place. The status shows the
    place exactly within the first 10; further back it keeps the place it shows until the session
    has moved up by a quarter, so one freed slot writes the front of the line, not all of it (a
    line of 1,000 was 1,000 status writes per slot). The place shown is never ahead of the real
    one."""
    ns = pod_namespace
    start("limits.maxSessionsPerNamespace=1")
    apply(cluster, ns, hello_bundle(), session("q00"))
    wait_phase(cluster, ns, "q00", "Running", timeout=60)
    names = ["q%02d" % i for i in range(1, 21)]
    apply(cluster, ns, *[session(n) for n in names])

    seen = []

    def line():
        seen[:] = [status_of(cluster, ns, n).get("queuePosition") for n in names]
        return seen == list(range(1, 21))
    try:
        wait_until(line, timeout=30, what="20 sessions waiting in line, places 1 to 20")
    except AssertionError as e:
        raise AssertionError("%s; places: %s" % (e, seen)) from None

    audit = Audit(cluster, ns)
    time.sleep(1)
    since = now_rfc3339()
    cluster.kubectl("delete", "ts", "q00", "-n", ns, "--wait=false")
    wait_phase(cluster, ns, "q01", "Running", timeout=60)
    wait_until(lambda: status_of(cluster, ns, "q11").get("queuePosition") == 10, timeout=10,
               what="q11 at place 10")
    time.sleep(3)  # the wake's reconciles of the rest of the line have run
    st = {n: status_of(cluster, ns, n) for n in names[1:]}
    shown = [st[n]["queuePosition"] for n in names[1:]]
    print("places shown after one freed slot: %s" % shown)
    real = list(range(1, 20))
    assert shown[:10] == real[:10], shown  # the front: exact
    assert shown[10:] == list(range(12, 21)), shown  # behind: as they were, one place back
    assert all(s >= r for s, r in zip(shown, real)), shown
    for n in names[11:]:
        assert "place %d in line" % st[n]["queuePosition"] in st[n]["message"], st[n]
    written = status_writes(audit.writes(since=since))
    print("status writes after the freed slot: %s" % dict(sorted(written.items())))
    assert not set(written) & set(names[11:]), written
    # The front: its new place, once. The count of sessions holding a slot that the message names
    # stays put while the freed slot is handed on (it dipped to 0, and each was written twice).
    assert all(written[n] == 1 for n in names[1:11]), written

"""Resume and restart (issue 17): spec.stopped back to false and a raised spec.restartGeneration
each start a new run of the same TeloSession: a new pod (new uid), Ready again, and the ended
run kept in status.lastRun.

Session pods run on the kwok node of test_sessions.py (its fixtures are reused)."""

import time

from conftest import wait_until
from test_sessions import (Audit, apply, condition, get, get_ts, hello_bundle, pod_name,  # noqa: F401
                           session, session_node, start, wait_phase)


def ready(cluster, ns, name, old_pod_uid, timeout=60):
    """Waits for the session to be Running and Ready with a pod other than old_pod_uid. A timeout
    names the status last seen (phase, reason and message say why it is not Ready)."""
    seen = {}

    def check():
        ts = get_ts(cluster, ns, name)
        st = (ts or {}).get("status", {})
        seen["status"] = {k: st.get(k) for k in ("phase", "reason", "message", "podUID", "run")}
        if (st.get("phase") == "Running" and st.get("podUID") and st["podUID"] != old_pod_uid
                and condition(ts, "Ready")["status"] == "True"):
            return ts
        return None
    try:
        return wait_until(check, timeout=timeout, what="%s Ready with a new pod" % name)
    except AssertionError as e:
        raise AssertionError("%s; status: %r" % (e, seen.get("status"))) from None


def test_stop_resume_and_restart_generation_start_new_runs_of_the_same_session(
        cluster, start, pod_namespace):
    ns = pod_namespace
    start()
    audit = Audit(cluster, ns)
    apply(cluster, ns, hello_bundle(), session("again"))
    ts = ready(cluster, ns, "again", None)
    uid = ts["metadata"]["uid"]
    pod1 = ts["status"]["podUID"]
    assert get(cluster, ns, "pod", pod_name("again"))["metadata"]["uid"] == pod1
    assert "lastRun" not in ts["status"] and "run" not in ts["status"]

    # Stop: the pod goes, the record stays.
    cluster.kubectl("patch", "ts", "again", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":true}}')
    stopped = wait_phase(cluster, ns, "again", "Stopped", timeout=30)
    wait_until(lambda: get(cluster, ns, "pod", pod_name("again")) is None, timeout=60,
               what="the stopped session's pod to go")

    # Resume: a new pod, the same session, the stopped run in lastRun.
    cluster.kubectl("patch", "ts", "again", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"stopped":false}}')
    ts = ready(cluster, ns, "again", pod1)
    st = ts["status"]
    assert ts["metadata"]["uid"] == uid
    pod2 = st["podUID"]
    pod = get(cluster, ns, "pod", pod_name("again"))
    assert pod["metadata"]["uid"] == pod2 != pod1
    assert pod["metadata"]["labels"]["telo.run/run"] == "2"
    assert st["run"] == 2
    last = st["lastRun"]
    assert last["podName"] == pod_name("again") and last["podUID"] == pod1, last
    assert last["phase"] == "Stopped" and last["reason"] == "Stopped", last
    assert last["finishedAt"] == stopped["status"]["completionTime"], (last, stopped["status"])
    assert "completionTime" not in st and st.get("reason") is None, st

    # Restart by restartGeneration: the running pod is replaced, the run recorded.
    cluster.kubectl("patch", "ts", "again", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"restartGeneration":1}}')
    ts = ready(cluster, ns, "again", pod2)
    st = ts["status"]
    assert ts["metadata"]["uid"] == uid
    pod3 = st["podUID"]
    assert pod3 not in (pod1, pod2)
    pod = get(cluster, ns, "pod", pod_name("again"))
    assert pod["metadata"]["uid"] == pod3
    assert pod["metadata"]["labels"]["telo.run/run"] == "3"
    assert st["run"] == 3 and st["restartGeneration"] == 1, st
    last = st["lastRun"]
    assert last["podUID"] == pod2 and last["phase"] == "Running", last
    assert last["reason"] == "Restarted" and last["finishedAt"], last
    # The same generation again is no restart.
    cluster.kubectl("annotate", "ts", "again", "-n", ns, "touch=1")
    time.sleep(3)
    st = get_ts(cluster, ns, "again")["status"]
    assert st["podUID"] == pod3 and st["run"] == 3, st
    # One pod per run: none made twice, none made for a run and deleted again.
    creates = audit.creates()
    assert creates[("pods", pod_name("again"))] == 3, Audit.describe(audit.writes())

"""Churn under chaos (issue 21): sessions are created, deleted and re-created under the same name
(delete, then apply at once, as Argo CD's Replace=true and `kubectl delete && kubectl apply` do)
while two operator replicas with leader election run, the leader is SIGKILLed again and again,
its lease is stolen, kube-apiserver is restarted and kube-controller-manager is stopped for a
while (no garbage collection: a deleted session's children outlive it and wait under its name for
the next session of that name).

What must hold, judged from the objects and the API server's audit log, not from the operator:
- every live session ends Running on a pod whose controller ownerReference carries its own uid;
- no session ever reports another uid's pod: every version of every TeloSession is watched, and
  a status naming a pod (podName, podIP, podUID when the status has one) that belongs to another
  uid is a violation, as is a child whose controller owner changes from one uid to another;
- no object is created twice: at most one object per (kind, name, owner uid) is ever seen, and
  the audit log's successful creates of a name are no more than the incarnations of its session;
- nothing is left of deleted sessions once the garbage collector runs;
- no write after a lost lease: from a steal of the lease plus the renew deadline until an
  operator could legitimately lead again, the operators write nothing (audit log).

The default run is small (make test). The long form is the same test with bigger numbers from the
environment (bench/chaos/run.sh runs it and prints the summary):
  TELO_CHURN_SESSIONS (20)  sessions created in all, re-creations not counted
  TELO_CHURN_KILLS (3)      SIGKILLs of the leading replica
  TELO_CHURN_APISERVER_RESTARTS (1)
  TELO_CHURN_GC_OUTAGE (15) seconds kube-controller-manager is down
  TELO_CHURN_REPLICAS (2)   operator replicas with leader election
  TELO_CHURN_STEALS (1)     leases stolen from the leader
  TELO_CHURN_SEED (21)      seeds the choice of the sessions re-created and deleted
  TELO_CHURN_SUMMARY        a file to write the summary to (JSON)
Session pods run on a kwok node of the test's own (test_sessions.py's session_node)."""

import collections
import glob
import json
import logging
import math
import os
import random
import re
import threading
import time

import pytest
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.watch.watch import iter_resp_lines

from conftest import IN_CLUSTER, wait_until
from test_sessions import (Audit, hello_bundle, kubectl_patiently, session,  # noqa: F401
                           session_node, start)


# Two replicas as local processes, SIGKILLed and robbed of their lease by this test: in-cluster
# the operator fixture runs one pod per test namespace. make test runs this file in process mode
# beside the in-cluster suite (hack/test.sh).
pytestmark = pytest.mark.skipif(IN_CLUSTER, reason="runs its operator replicas as local "
                                "processes; make test runs it with TELO_E2E_OPERATOR=process")


def _env_int(name, default):
    return int(os.environ.get(name) or default)


SESSIONS = _env_int("TELO_CHURN_SESSIONS", 20)
KILLS = _env_int("TELO_CHURN_KILLS", 3)
APISERVER_RESTARTS = _env_int("TELO_CHURN_APISERVER_RESTARTS", 1)
GC_OUTAGE = _env_int("TELO_CHURN_GC_OUTAGE", 15)
REPLICAS = _env_int("TELO_CHURN_REPLICAS", 2)
STEALS = _env_int("TELO_CHURN_STEALS", 1)
SUMMARY = os.environ.get("TELO_CHURN_SUMMARY")
SEED = _env_int("TELO_CHURN_SEED", 21)

LEASE = "telo-churn"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6, 4, 1
THIEF = "churn-thief"
THIEF_HOLD = 6          # seconds the thief keeps renewing the stolen lease
CHILD_KINDS = ("pods", "secrets", "services", "ingresses")
TIMEOUT = 300 + 4 * SESSIONS + 20 * KILLS + 60 * APISERVER_RESTARTS + 2 * GC_OUTAGE + 30 * STEALS


def now_micro():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def rfc3339_to_epoch(text):
    """Seconds since the epoch of an RFC 3339 UTC time with or without fractional seconds."""
    base, _, frac = text.rstrip("Z").partition(".")
    import calendar
    return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + float("0." + (frac or "0"))


# --- every version of every object, watched ------------------------------------------------------

class Recorder:
    """Watches the test namespace's TeloSessions and session children (list, then watch from the
    list's resourceVersion; after any break, list again) and keeps a summary of every version
    seen, with the time it was seen. A relist that no longer shows an object ends its life."""

    def __init__(self, kubeconfig, ns):
        self.kubeconfig = kubeconfig
        self.ns = ns
        self.lock = threading.Lock()
        self.obs = []
        # The API server restarts under the watches: each refused connection is counted in gaps,
        # not retried and logged by urllib3.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        self.gaps = collections.Counter()
        self.latest_ts = {}          # name -> latest summary of the live TeloSession
        self.stopping = threading.Event()
        # Set once each kind's first list is in: the churn starts after, so no child is made and
        # gone before its watcher looks.
        self.listed = {k: threading.Event() for k in ("telosessions",) + CHILD_KINDS}
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                        for k in ("telosessions",) + CHILD_KINDS]
        for t in self.threads:
            t.start()

    def _lister(self, api, kind):
        ns = self.ns
        if kind == "telosessions":
            c = kclient.CustomObjectsApi(api)
            return lambda **kw: c.list_namespaced_custom_object("telo.run", "v1alpha1", ns,
                                                                "telosessions", **kw)
        if kind == "ingresses":
            n = kclient.NetworkingV1Api(api)
            return lambda **kw: n.list_namespaced_ingress(ns, **kw)
        core = kclient.CoreV1Api(api)
        fn = getattr(core, "list_namespaced_" + kind[:-1])
        return lambda **kw: fn(ns, label_selector="telo.run/session", **kw)

    @staticmethod
    def summary(kind, o):
        meta = o.get("metadata", {})
        owners = meta.get("ownerReferences") or []
        s = {"kind": kind, "name": meta.get("name"), "uid": meta.get("uid"),
             "rv": meta.get("resourceVersion"), "deleting": bool(meta.get("deletionTimestamp")),
             "owner": next((r.get("uid") for r in owners if r.get("controller")), None),
             "session": (meta.get("labels") or {}).get("telo.run/session")}
        st = o.get("status") or {}
        if kind == "pods":
            s.update(ip=st.get("podIP"), phase=st.get("phase"))
        elif kind == "telosessions":
            s.update(phase=st.get("phase"), podName=st.get("podName"), podIP=st.get("podIP"),
                     podUID=st.get("podUID") or (st.get("pod") or {}).get("uid"),
                     reason=st.get("reason"), message=st.get("message"))
        return s

    def _record(self, t, ev, kind, obj):
        s = self.summary(kind, obj)
        s["t"], s["ev"] = t, ev
        with self.lock:
            self.obs.append(s)
            if kind == "telosessions":
                if ev == "DELETED":
                    if (self.latest_ts.get(s["name"]) or {}).get("uid") == s["uid"]:
                        del self.latest_ts[s["name"]]
                else:
                    self.latest_ts[s["name"]] = s

    def _run(self, kind):
        cfg = kclient.Configuration()
        kconfig.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        cfg.retries = False
        api = kclient.ApiClient(cfg)
        lister = self._lister(api, kind)
        live = set()
        while not self.stopping.is_set():
            try:
                resp = lister(_preload_content=False, _request_timeout=(5, 30))
                body = json.loads(resp.data)
                t = time.time()
                seen = set()
                for item in body.get("items", []):
                    self._record(t, "LISTED", kind, item)
                    seen.add(item["metadata"]["uid"])
                for uid in live - seen:
                    # Gone while we were not watching: its end is somewhere before this list.
                    with self.lock:
                        self.obs.append({"kind": kind, "uid": uid, "t": t, "ev": "VANISHED"})
                        if kind == "telosessions":
                            for n, s in list(self.latest_ts.items()):
                                if s["uid"] == uid:
                                    del self.latest_ts[n]
                live = seen
                self.listed[kind].set()
                rv = body["metadata"]["resourceVersion"]
                resp = lister(watch=True, resource_version=rv, timeout_seconds=20,
                              allow_watch_bookmarks=True, _preload_content=False,
                              _request_timeout=(5, 40))
                for line in iter_resp_lines(resp):
                    if self.stopping.is_set():
                        break
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        raise RuntimeError("watch error: %s" % ev["object"])
                    if ev["type"] == "BOOKMARK":
                        continue
                    self._record(time.time(), ev["type"], kind, ev["object"])
                    uid = ev["object"]["metadata"]["uid"]
                    (live.discard if ev["type"] == "DELETED" else live.add)(uid)
                resp.release_conn()
            except Exception as e:  # noqa: BLE001 (the API server restarts under us)
                if self.stopping.is_set():
                    break
                self.gaps[kind] += 1
                self.last_error = repr(e)
                time.sleep(0.5)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=45)

    def running_sessions(self):
        with self.lock:
            return sorted(n for n, s in self.latest_ts.items()
                          if s.get("phase") == "Running" and not s["deleting"])

    def snapshot(self):
        with self.lock:
            return list(self.obs)


def analyse_observations(obs, kwok_taken=None):
    """Violations visible in the watched history: a status naming another uid's pod, a child
    whose controller owner changed, two objects of one (kind, name, owner) (a pod kwok took,
    kwok_taken[name] of them, may be made again)."""
    violations = []
    owners_of = collections.defaultdict(set)        # (kind, uid) -> owner uids
    name_of = {}
    pods_by_uid = {}
    pods_by_name_ip = collections.defaultdict(set)  # (name, ip) -> pod uids
    life = {}                                       # pod uid -> [first seen, last seen or gone]
    objects = collections.defaultdict(set)          # (kind, name, owner) -> object uids
    for s in obs:
        if s["ev"] == "VANISHED" or s["kind"] == "telosessions":
            continue
        if s["owner"]:
            owners_of[(s["kind"], s["uid"])].add(s["owner"])
            objects[(s["kind"], s["name"], s["owner"])].add(s["uid"])
        name_of[(s["kind"], s["uid"])] = s["name"]
        if s["kind"] == "pods":
            pods_by_uid[s["uid"]] = s["owner"]
            span = life.setdefault(s["uid"], [s["t"], None])
            if s["ev"] == "DELETED":
                span[1] = s["t"]
            if s.get("ip"):
                pods_by_name_ip[(s["name"], s["ip"])].add(s["uid"])
    for s in obs:
        if s["ev"] == "VANISHED" and s["kind"] == "pods" and s["uid"] in life:
            if life[s["uid"]][1] is None:
                life[s["uid"]][1] = s["t"]
    for (kind, uid), owners in sorted(owners_of.items()):
        if len(owners) > 1:
            violations.append("%s %s (uid %s) changed its controller owner: %s" % (
                kind, name_of[(kind, uid)], uid, sorted(owners)))
    for (kind, name, owner), uids in sorted(objects.items()):
        if len(uids) - (kwok_taken or {}).get(name, 0) * (kind == "pods") > 1:
            violations.append("%s %s created %d times for owner %s: %s" % (
                kind, name, len(uids), owner, sorted(uids)))
    reported = set()
    unattributed = 0
    for s in obs:
        if s["kind"] != "telosessions" or s["ev"] == "VANISHED" or not s.get("podName"):
            continue
        if s.get("podUID"):
            # The status names its pod exactly. A pod the recorder never saw (made and gone
            # before the pod watcher's first list: the first session re-created 0.9 s in) cannot
            # be told by its IP: kwok hands the freed IP to the successor's pod of the same
            # name, which made the predecessor's own Running status look like its successor's.
            owners = {pods_by_uid[s["podUID"]]} if s["podUID"] in pods_by_uid else set()
        elif s.get("podIP"):
            # kwok hands a pod's IP to a later pod: the pod of that name and IP alive then.
            uids = pods_by_name_ip.get((s["podName"], s["podIP"]), set())
            alive = {u for u in uids if life[u][0] <= s["t"] + 1
                     and (life[u][1] is None or life[u][1] >= s["t"] - 1)}
            owners = {pods_by_uid[u] for u in (alive or uids)}
        else:
            owners = set()
        if not owners:
            unattributed += 1
            continue
        if s["uid"] not in owners:
            key = (s["name"], s["uid"], s["podName"])
            if key not in reported:
                reported.add(key)
                violations.append(
                    "session %s (uid %s) reported pod %s (ip %s) of owner %s: phase %s %s" % (
                        s["name"], s["uid"], s["podName"], s.get("podIP"), sorted(owners),
                        s.get("phase"), s.get("reason") or ""))
    return violations, unattributed


def child_session(kind, name):
    """The session a child's name is derived from (telo-run-NAME, its Secret telo-run-NAME-attach)."""
    base = name[len("telo-run-"):] if name.startswith("telo-run-") else name
    return base[:-len("-attach")] if kind == "secrets" and base.endswith("-attach") else base


# --- the operators -------------------------------------------------------------------------------

STARTED_RE = re.compile(r'msg="telo-operator started".* identity=(\S+)')


def identity(op):
    found = STARTED_RE.findall(op.log_tail(4000))
    return found[-1] if found else None


class Churn:
    def __init__(self, cluster, ns, ops):
        self.cluster = cluster
        self.ns = ns
        self.ops = ops
        self.live = set()            # names the churn expects to exist at the end
        self.serial = 0
        self.counts = collections.Counter()
        self.steals = []             # (steal time, thief's last renew time), epoch seconds
        self.incarnations = collections.Counter()   # name -> sessions of that name applied
        self.log = []
        self.rng = random.Random(SEED)

    def note(self, what):
        line = "%6.1fs %s" % (time.monotonic() - self.t0, what)
        self.log.append(line)
        print(line, flush=True)

    # sessions
    def apply(self, names):
        if names:
            proc = kubectl_patiently(self.cluster, "apply", "-n", self.ns, "-f", "-",
                                     input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": [session(n) for n in names]}))
            assert proc.returncode == 0, proc.stderr

    def create(self, count):
        names = []
        for _ in range(count):
            if self.counts["created"] >= SESSIONS:
                break
            names.append("c%03d" % self.serial)
            self.serial += 1
            self.counts["created"] += 1
        self.apply(names)
        self.live.update(names)
        self.incarnations.update(names)
        return names

    def delete(self, names, wait):
        if names:
            proc = kubectl_patiently(self.cluster, "delete", "ts", "-n", self.ns,
                                     "--wait=%s" % ("true" if wait else "false"), *names)
            assert proc.returncode == 0, proc.stderr

    def pick(self, count, recorder):
        """Some Running sessions (any live ones when none is Running), chosen at random."""
        running = [n for n in recorder.running_sessions() if n in self.live]
        pool = running or sorted(self.live)
        return sorted(self.rng.sample(pool, min(count, len(pool))))

    def remove(self, count, recorder):
        names = self.pick(count, recorder)
        self.delete(names, wait=False)
        self.live.difference_update(names)
        self.counts["deleted"] += len(names)
        return names

    def recreate(self, count, recorder):
        """Delete (waiting until each is gone), then apply the same manifests at once."""
        names = [n for n in self.pick(count, recorder)
                 if n in recorder.running_sessions()]
        self.delete(names, wait=True)
        self.apply(names)
        self.incarnations.update(names)
        self.counts["recreated"] += len(names)
        return names

    def step(self, recorder, creates):
        made = self.create(creates)
        again = self.recreate(max(1, creates // 3), recorder)
        gone = self.remove(max(1, creates // 4), recorder)
        self.note("created %d, re-created %s, deleted %s" % (len(made), again, gone))

    # operators
    def ensure_replicas(self):
        for op in self.ops:
            if not op.running:
                rc = op.kill()   # collects a process that exited (a pod: deletes it)
                self.counts["replica_exits"] += 1
                self.note("replica %s had exited (%s): %s" % (
                    op.log_path, rc, (op.log_tail(3) or "").strip().splitlines()[-1:]))
                op.start()

    def lease(self):
        proc = kubectl_patiently(self.cluster, "get", "lease", LEASE, "-n", self.ns, "-o", "json")
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def leader(self, timeout=60):
        """The replica holding the lease (waits for one)."""
        def find():
            self.ensure_replicas()
            holder = ((self.lease() or {}).get("spec") or {}).get("holderIdentity")
            return next((op for op in self.ops if op.running and identity(op) == holder), None)
        return wait_until(find, timeout=timeout, interval=0.5, what="a leading replica")

    def kill_leader(self, recorder, creates):
        op = self.leader()
        self.step(recorder, creates)
        time.sleep(0.3)                  # the leader's writes for that burst are in flight
        op.kill()
        self.counts["kills"] += 1
        self.note("SIGKILLed the leader %s" % identity(op))
        op.start()

    def steal(self, recorder, creates):
        op = self.leader()
        victim = identity(op)
        self.step(recorder, creates)
        stolen = time.time()
        last = stolen
        while time.time() < stolen + THIEF_HOLD:
            last = time.time()
            kubectl_patiently(self.cluster, "patch", "lease", LEASE, "-n", self.ns,
                              "--type=merge", "-p", json.dumps(
                                  {"spec": {"holderIdentity": THIEF, "renewTime": now_micro()}}))
            time.sleep(1)
        self.steals.append((stolen, last))
        self.counts["steals"] += 1
        self.note("stole the lease from %s for %d s" % (victim, THIEF_HOLD))

    def restart_apiserver(self, recorder, creates):
        self.step(recorder, creates)
        self.cluster.script("down.sh", "kube-apiserver")
        try:
            time.sleep(3)
        finally:
            self.cluster.script("up.sh")
        self.counts["apiserver_restarts"] += 1
        self.note("restarted kube-apiserver")

    def gc_outage(self, recorder, creates):
        """kube-controller-manager down for GC_OUTAGE seconds: sessions re-created meanwhile
        find their predecessor's children still there."""
        self.cluster.script("down.sh", "kube-controller-manager")
        began = time.monotonic()
        try:
            self.note("kube-controller-manager stopped")
            self.step(recorder, creates)
            while time.monotonic() - began < GC_OUTAGE - 2:
                time.sleep(2)
                self.ensure_replicas()
                again = self.recreate(1, recorder)
                self.note("re-created %s while the garbage collector is down" % again)
        finally:
            self.cluster.script("up.sh")
        self.counts["gc_outage_s"] += round(time.monotonic() - began)
        self.note("kube-controller-manager back")


def plan():
    """The disruptions in order, each kind spread over the run; the GC outage in the middle."""
    items = []
    for kind, n in (("kill", KILLS), ("apiserver", APISERVER_RESTARTS), ("steal", STEALS)):
        items += [((i + 0.5) / n, kind) for i in range(n)]
    if GC_OUTAGE > 0:
        items.append((0.45, "gc"))
    return [k for _, k in sorted(items)]


# --- the test ------------------------------------------------------------------------------------

def live_children(cluster, ns):
    items = []
    for kind in CHILD_KINDS:
        proc = kubectl_patiently(cluster, "get", kind, "-n", ns, "-l", "telo.run/session",
                                 "-o", "json")
        assert proc.returncode == 0, proc.stderr
        items += [(kind, i) for i in json.loads(proc.stdout)["items"]]
    return items


def owner_of(obj):
    return next((r["uid"] for r in obj["metadata"].get("ownerReferences") or []
                 if r.get("controller")), None)


def convergence_problems(cluster, ns, expected):
    """What keeps the live sessions from being converged: each must be Running on a live pod
    whose controller owner is its own uid (and whose uid is the status's, when it has one)."""
    proc = kubectl_patiently(cluster, "get", "ts", "-n", ns, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    sessions = {i["metadata"]["name"]: i for i in json.loads(proc.stdout)["items"]}
    pods = {i["metadata"]["name"]: i for k, i in live_children(cluster, ns) if k == "pods"}
    problems = []
    disappeared = {}
    final = []      # Failed: nothing will change them
    if set(sessions) != expected:
        problems.append("sessions %s missing, %s unexpected" % (
            sorted(expected - set(sessions)), sorted(set(sessions) - expected)))
    for name, ts in sorted(sessions.items()):
        st = ts.get("status") or {}
        pod = pods.get(st.get("podName") or "")
        uid = ts["metadata"]["uid"]
        if (st.get("phase"), st.get("reason")) == ("Failed", "PodDisappeared") and \
                st.get("podUID"):
            # Settled; judged at the end from the audit log (judge_disappeared).
            disappeared[name] = {"uid": uid, "podName": st.get("podName"),
                                 "podUID": st["podUID"]}
        elif st.get("phase") != "Running":
            problems.append("%s is %s %s: %s" % (name, st.get("phase"), st.get("reason") or "",
                                                 st.get("message") or ""))
            if st.get("phase") == "Failed":
                final.append(name)
        elif pod is None:
            problems.append("%s is Running on pod %s, which does not exist" % (
                name, st.get("podName")))
        elif owner_of(pod) != uid:
            problems.append("%s (uid %s) is Running on pod %s owned by %s" % (
                name, uid, pod["metadata"]["name"], owner_of(pod)))
        elif st.get("podUID") and st["podUID"] != pod["metadata"]["uid"]:
            problems.append("%s reports pod uid %s, the pod's is %s" % (
                name, st["podUID"], pod["metadata"]["uid"]))
        elif pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Running":
            problems.append("%s: its pod is %s%s" % (name, pod["status"].get("phase"),
                                                     " (deleting)" if pod["metadata"].get(
                                                         "deletionTimestamp") else ""))
    if problems and len(problems) == len(final):
        problems.append("(every problem is a Failed session: no use waiting)")
    return problems, {n: t["metadata"]["uid"] for n, t in sessions.items()}, disappeared


def audit_pod_writes(cluster, ns):
    """(time, verb, name, user, user agent, code) of every create, patch and delete of a pod in
    the namespace, by anyone, from the audit log."""
    out = []
    needle = '"namespace":"%s"' % ns
    for path in glob.glob(os.path.join(cluster.log_dir, "audit*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                if needle not in line or '"resource":"pods"' not in line:
                    continue
                e = json.loads(line)
                ref = e.get("objectRef", {})
                if (e.get("stage") == "ResponseComplete" and ref.get("namespace") == ns
                        and ref.get("resource") == "pods" and not ref.get("subresource")
                        and e["verb"] in ("create", "patch", "delete")):
                    out.append((rfc3339_to_epoch(e["requestReceivedTimestamp"]), e["verb"],
                                ref.get("name"), e["user"]["username"], e.get("userAgent", ""),
                                e.get("responseStatus", {}).get("code", 0)))
    return sorted(out)


def judge_disappeared(disappeared, obs, pod_writes):
    """A session Failed PodDisappeared is right only if the pod its status names by uid was its
    own and someone else deleted it. kwok is such a someone: its pod-delete stage finishes a
    deleted pod by name, without a uid precondition (a kubelet sends the pod's uid), and retries
    one that failed; one that lands just after the operator created the predecessor's
    replacement under the same name deletes the replacement. (hack/cluster/kwok/pod-delete.yaml
    no longer plays the stage twice per pod, which made most of these.) Those are counted
    apart (kwok, not the operator); anything else is a violation. Returns (kwok, violations)."""
    owner = {s["uid"]: s["owner"] for s in obs if s["kind"] == "pods" and s["ev"] != "VANISHED"}
    kwok, violations = [], []
    for name, d in sorted(disappeared.items()):
        pod = d["podName"]
        if owner.get(d["podUID"]) != d["uid"]:
            violations.append("%s (uid %s) is Failed PodDisappeared for pod uid %s, owned by %s" % (
                name, d["uid"], d["podUID"], owner.get(d["podUID"], "(never seen)")))
            continue
        made = [w for w in pod_writes if w[2] == pod and w[1] in ("create", "patch")
                and w[5] == 201 and w[4].startswith("telo-operator/")]
        t0 = made[-1][0] if made else None
        deletes = [w for w in pod_writes if t0 is not None and w[2] == pod and w[1] == "delete"
                   and w[5] in (200, 202) and w[0] >= t0]
        if deletes and all(w[3] == "kwok" for w in deletes) and deletes[0][0] - t0 < 2:
            kwok.append("%s: kwok deleted its new pod %.2f s after the operator made it" % (
                name, deletes[0][0] - t0))
        else:
            violations.append("%s (uid %s) is Failed PodDisappeared; its pod %s was deleted by %s" % (
                name, d["uid"], pod, ["%s %s" % (w[3], w[5]) for w in deletes] or "nobody"))
    return kwok, violations


def kwok_taken_pods(pod_writes):
    """The pods the operator made that kwok deleted before anyone else did, within 2 s of their
    creation: kwok's late by-name delete of a predecessor's pod (see judge_disappeared) taking the
    replacement. The operator must make such a pod again, so each counts as an allowed extra
    create of that name. Returns a Counter by pod name."""
    taken = collections.Counter()
    made = [w for w in pod_writes if w[1] in ("create", "patch") and w[5] == 201
            and w[4].startswith("telo-operator/")]
    for i, (t0, _verb, name, _user, _agent, _code) in enumerate(made):
        later = [w[0] for w in made[i + 1:] if w[2] == name]
        t1 = later[0] if later else float("inf")
        deletes = [w for w in pod_writes if w[2] == name and w[1] == "delete"
                   and w[5] in (200, 202) and t0 <= w[0] < t1]
        if deletes and deletes[0][3] == "kwok" and deletes[0][0] - t0 < 2:
            taken[name] += 1
    return taken


def orphans(cluster, ns, live_uids):
    return ["%s %s (owner %s)" % (k, i["metadata"]["name"], owner_of(i))
            for k, i in live_children(cluster, ns) if owner_of(i) not in live_uids]


def lease_violations(audit_events, steals):
    """Successful writes by the operators between a steal plus the renew deadline and the first
    moment a replica could take the lease from the thief (its last renew plus a lease)."""
    out = []
    for stolen, last in steals:
        lo, hi = stolen + RENEW_DEADLINE, last + LEASE_DURATION - 0.5
        for e in audit_events:
            if e["verb"] not in Audit.WRITES or e.get("responseStatus", {}).get("code", 0) >= 300:
                continue
            t = rfc3339_to_epoch(e["requestReceivedTimestamp"])
            if lo <= t <= hi:
                out.append("write %.1f s after the steal: %s" % (t - stolen,
                                                                  Audit.describe([e])[0]))
    return out


def audit_creates(audit_events, incarnations, kwok_taken):
    """Successful creates of each child name in the audit log, against the incarnations of the
    session it belongs to: each incarnation may create each child once, and a pod once more for
    each time kwok took it (kwok_taken_pods)."""
    creates = collections.Counter()
    for e in audit_events:
        ref = e["objectRef"]
        # 201 Created, by a create or by a server-side apply (a patch) that made the object.
        if (e["verb"] in ("create", "patch", "update") and ref.get("resource") in CHILD_KINDS
                and not ref.get("subresource") and e.get("responseStatus", {}).get("code") == 201):
            creates[(ref["resource"], ref.get("name"))] += 1
    out = []
    for (kind, name), n in sorted(creates.items()):
        allowed = incarnations.get(child_session(kind, name), 0)
        if kind == "pods":
            allowed += kwok_taken.get(name, 0)
        if n > allowed:
            out.append("%s %s created %d times by the operators, for %d incarnation(s) of "
                       "session %s" % (kind, name, n, allowed, child_session(kind, name)))
    return out, sum(creates.values())


@pytest.mark.disruptive
@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
def test_churn_under_kills_restarts_gc_outage_and_a_stolen_lease(cluster, start, pod_namespace):
    ns = pod_namespace
    le_args = ["--leader-elect", "--leader-election-namespace", ns,
               "--leader-election-id", LEASE,
               "--leader-elect-lease-duration", "%ds" % LEASE_DURATION,
               "--leader-elect-renew-deadline", "%ds" % RENEW_DEADLINE,
               "--leader-elect-retry-period", "%ds" % RETRY_PERIOD]
    kubectl_patiently(cluster, "apply", "-n", ns, "-f", "-", input=json.dumps(hello_bundle()))
    recorder = Recorder(cluster.kubeconfig, ns)
    for kind, listed in recorder.listed.items():
        assert listed.wait(30), "the recorder's first list of %s did not come in 30 s" % kind
    ops = [start("ingress.baseDomain=sessions.example.test", "startDeadlineSeconds=120",
                 args=le_args) for _ in range(max(1, REPLICAS))]
    churn = Churn(cluster, ns, ops)
    churn.t0 = time.monotonic()
    began_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 2))
    disruptions = plan()
    per_step = max(1, math.ceil(SESSIONS / (len(disruptions) + 1)))
    violations = []
    disappeared = {}
    try:
        churn.leader()
        churn.step(recorder, per_step)
        for what in disruptions:
            time.sleep(2)   # sessions reach Running, so there are some to re-create
            churn.ensure_replicas()
            {"kill": churn.kill_leader, "apiserver": churn.restart_apiserver,
             "steal": churn.steal, "gc": churn.gc_outage}[what](recorder, per_step)
        while churn.counts["created"] < SESSIONS:
            time.sleep(1)
            churn.step(recorder, per_step)
        last_disruption = time.monotonic()
        # Work for whoever leads next (after a kill there is no leader for up to a lease).
        again = churn.recreate(max(1, per_step // 2), recorder)
        churn.note("last disruption done; re-created %s" % again)

        # Convergence: every live session Running on a pod of its own.
        problems = []

        def converged():
            nonlocal problems
            churn.ensure_replicas()
            problems, uids, _ = convergence_problems(cluster, ns, churn.live)
            if problems and problems[-1].startswith("(every problem is a Failed"):
                raise AssertionError("only Failed sessions left")
            return uids if not problems else None
        try:
            live_uids = wait_until(converged, timeout=120 + SESSIONS // 2, interval=1,
                                   what="every session Running on its own pod")
            churn.counts["convergence_s"] = round(time.monotonic() - last_disruption, 1)
        except AssertionError:
            churn.counts["convergence_s"] = None
            violations += ["not converged: " + p for p in problems if not p.startswith("(")]
            live_uids = convergence_problems(cluster, ns, churn.live)[1]
        churn.note("converged: %s" % (not problems))

        # Nothing left of deleted sessions once the garbage collector has run.
        left = []

        def collected():
            nonlocal left
            left = orphans(cluster, ns, set(live_uids.values()))
            return not left
        try:
            wait_until(collected, timeout=120, interval=2, what="the garbage collector")
            churn.counts["gc_cleanup_s"] = round(time.monotonic() - last_disruption, 1)
        except AssertionError:
            violations += ["left after the garbage collector: " + x for x in left]
        # A session the garbage collector broke (its reported pod deleted) shows only now.
        problems, _, disappeared = convergence_problems(cluster, ns, churn.live)
        violations += ["after the garbage collector: " + p for p in problems
                       if not p.startswith("(")]
    finally:
        recorder.stop()

    obs = recorder.snapshot()
    time.sleep(2)   # the audit log's batch backend
    pod_writes = audit_pod_writes(cluster, ns)
    kwok_taken = kwok_taken_pods(pod_writes)
    watched, unattributed = analyse_observations(obs, kwok_taken)
    violations += watched
    incarnations = collections.Counter()
    for name, uid in {(s["name"], s["uid"]) for s in obs
                      if s["kind"] == "telosessions" and s["ev"] != "VANISHED"}:
        incarnations[name] += 1
    for name, n in churn.incarnations.items():
        incarnations[name] = max(incarnations[name], n)
    events = [e for e in Audit(cluster, ns).events()
              if e.get("requestReceivedTimestamp", "") >= began_at]
    kwok, wrong = judge_disappeared(disappeared, obs, pod_writes)
    violations += wrong
    twice, creates = audit_creates(events, incarnations, kwok_taken)
    violations += twice
    violations += lease_violations(events, churn.steals)

    summary = dict(churn.counts, sessions_live=len(churn.live), replicas=len(ops),
                   incarnations=sum(incarnations.values()), child_creates=creates,
                   observations=len(obs), status_observations_unattributed=unattributed,
                   watch_failures=dict(recorder.gaps), in_cluster=IN_CLUSTER,
                   pods_deleted_by_kwok=len(kwok), pods_taken_by_kwok=sum(kwok_taken.values()),
                   violations=len(violations))
    print("churn summary: %s" % json.dumps(summary, sort_keys=True))
    for k in kwok:
        print("KWOK (not counted): %s" % k)
    for v in violations[:200]:
        print("VIOLATION: %s" % v)
    if SUMMARY:
        with open(SUMMARY + ".observations.jsonl", "w") as f:
            f.writelines(json.dumps(o, sort_keys=True) + "\n" for o in obs)
        with open(SUMMARY, "w") as f:
            json.dump(dict(summary, violation_list=violations, kwok_list=kwok, log=churn.log),
                      f, indent=1,
                      sort_keys=True)
    assert not violations, "%d violation(s):\n%s" % (len(violations),
                                                     "\n".join(violations[:60]))
    assert churn.counts["kills"] == KILLS and churn.counts["steals"] == STEALS

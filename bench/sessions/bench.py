"""The measuring half of bench/sessions/run.sh: creates N objects at once with a thread pool and
times, with watches started before the first create, when every pod exists and is Running (and,
for TeloSessions, when every session's status.phase is Running). Times are client receive times
on CLOCK_MONOTONIC, as clusterloader2 measures with informers (creationTimestamp has 1 s
resolution). Talks to the cluster with the official Python client; decodes watch events with
json.loads rather than the client's models, so the watcher keeps up.

  bench.py template KUBECONFIG NS POD OUT        the session pod's shape, as a reusable template
  bench.py run KUBECONFIG PATH NS N TEMPLATE OUT  PATH: sessions | jobs | raw
  bench.py clear KUBECONFIG NS                   empty NS quickly (before deleting it)
  bench.py summary RESULT.json...                the table of medians and ratios
"""

import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

THREADS = int(os.environ.get("TELO_BENCH_CLIENT_THREADS", "32"))
# Seconds of kube-apiserver CPU profile to take from the first create on (0: none): where its
# time goes, read with `go tool pprof -top RESULT.pprof`.
PPROF_S = int(os.environ.get("TELO_BENCH_PPROF", "0"))
TIMEOUT = float(os.environ.get("TELO_BENCH_TIMEOUT", "600"))
SESSION_NAME = "b-%05d"
BUNDLE = "hello-bundle"
# kwok's pod-complete stage ends every Running pod a Job owns. The chaos stage
# pod-container-running-failed has a positive weight, so it wins; with a one-hour delay it never
# fires before the namespace is gone, and the Job's pod stays Running like a session's. (kwok
# takes the jitter as the delay when it is not above the delay: both are 1h.)
KEEP_RUNNING_LABEL = {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"}
KEEP_RUNNING_ANNOTATIONS = {"pod-container-running-failed.stage.kwok.x-k8s.io/delay": "1h",
                            "pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay": "1h"}


def api(kubeconfig, pool=THREADS):
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


# --- the pod shape -----------------------------------------------------------------------------

def template(kubeconfig, ns, pod_name, out):
    """The session pod as the operator made it, minus what identifies that one pod: the spec the
    raw pods and the Jobs' pod template reuse, so every path creates the same pod."""
    pod = client.CoreV1Api(api(kubeconfig)).read_namespaced_pod(
        pod_name, ns, _preload_content=False)
    pod = json.loads(pod.data)
    spec = pod["spec"]
    # Set by admission or the scheduler, not by the operator; the other paths get them the same
    # way. nodeName empty: every path goes through kube-scheduler. The nodeSelector and
    # tolerations the operator set (the bench's nodes) stay.
    for k in ("nodeName", "serviceAccountName", "serviceAccount", "schedulerName",
              "enableServiceLinks", "preemptionPolicy", "priority",
              "terminationGracePeriodSeconds", "dnsPolicy"):
        spec.pop(k, None)
    with open(out, "w") as f:
        json.dump({"spec": spec}, f, indent=1)


def pod_object(tpl, name, labels, annotations=None):
    meta = {"name": name, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tpl["spec"]}


def job_object(tpl, name):
    pod_meta = {"labels": dict(KEEP_RUNNING_LABEL, **{"bench.telo.run/path": "jobs"}),
                "annotations": KEEP_RUNNING_ANNOTATIONS}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"metadata": pod_meta, "spec": tpl["spec"]}}}


def session_object(name):
    # What crds/samples/hello.yaml runs, without the port: a Job has no Service either, so the
    # only children left are the pod and the attach-token Secret.
    return {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
            "metadata": {"name": name, "labels": {"bench.telo.run/path": "sessions"}},
            "spec": {"entry": "app/telo.yaml", "bundle": {"configMap": {"name": BUNDLE}}}}


# --- the watcher -------------------------------------------------------------------------------

def watch_loop(kubeconfig, ns, kind, ready, out_q, stop_when, deadline):
    """Runs in its own process: list (for the resourceVersion), watch, record the first receive
    time of each object and of its first Running; put the result on out_q when stop_when says
    the numbers are complete or at the deadline. Like an informer, it watches again from the last
    resourceVersion when the server ends the stream (the apiserver drops a watcher that falls
    behind, which on 2 busy cores happens), and lists again on 410 Gone."""
    a = api(kubeconfig, 2)
    if kind == "pods":
        core = client.CoreV1Api(a)
        def do_list():
            return json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)
        def open_watch(rv):
            return core.list_namespaced_pod(ns, watch=True, resource_version=rv,
                                            allow_watch_bookmarks=True, timeout_seconds=int(TIMEOUT),
                                            _preload_content=False)
    else:
        co = client.CustomObjectsApi(a)
        args = ("telo.run", "v1alpha1", ns, "telosessions")
        def do_list():
            return json.loads(co.list_namespaced_custom_object(*args, _preload_content=False).data)
        def open_watch(rv):
            return co.list_namespaced_custom_object(*args, watch=True, resource_version=rv,
                                                    allow_watch_bookmarks=True,
                                                    timeout_seconds=int(TIMEOUT),
                                                    _preload_content=False)
    added, running, other = {}, {}, {}
    stats = {"events": 0, "rewatches": 0, "relists": 0}

    def seen(obj, now):
        name = obj["metadata"]["name"]
        added.setdefault(name, now)
        phase = (obj.get("status") or {}).get("phase")
        if phase == "Running":
            running.setdefault(name, now)
        elif phase in ("Failed", "Succeeded"):
            other.setdefault(name, phase)

    def list_again():
        while True:  # the apiserver may be restarting (other people's tests do that)
            try:
                return do_list()
            except Exception:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    lst = list_again()
    rv = lst["metadata"]["resourceVersion"]
    for obj in lst["items"]:
        seen(obj, time.monotonic())
    first = True
    while time.monotonic() < deadline:
        try:
            resp = open_watch(rv)
        except Exception:  # noqa: BLE001 (the apiserver restarting, say: try again)
            time.sleep(0.2)
            continue
        if first:
            ready.set()
            first = False
        relist = False
        try:
            for line in iter_resp_lines(resp):
                now = time.monotonic()
                ev = json.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    if obj.get("code") == 410:
                        relist = True
                        break
                    out_q.put({"kind": kind, "error": obj.get("message", str(obj))})
                    return
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] == "BOOKMARK":
                    continue
                stats["events"] += 1
                seen(obj, now)
                if stop_when(len(added), len(running)) or now > deadline:
                    resp.close()
                    out_q.put(dict(stats, kind=kind, added=added, running=running, other=other))
                    return
        except Exception:  # noqa: BLE001 (the stream broke: watch again)
            pass
        resp.close()
        if relist:
            stats["relists"] += 1
            lst = list_again()
            rv = lst["metadata"]["resourceVersion"]
            now = time.monotonic()
            for obj in lst["items"]:
                seen(obj, now)
            if stop_when(len(added), len(running)):
                break
        else:
            stats["rewatches"] += 1
            time.sleep(0.05)
    out_q.put(dict(stats, kind=kind, added=added, running=running, other=other))


class Done:
    def __init__(self, n):
        self.n = n

    def __call__(self, n_added, n_running):
        return n_running >= self.n


def start_watch(kubeconfig, ns, kind, n, deadline):
    ctx = mp.get_context("fork")
    ready, q = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=watch_loop, args=(kubeconfig, ns, kind, ready, q, Done(n), deadline),
                    daemon=True)
    p.start()
    if not ready.wait(30):
        p.kill()
        raise SystemExit("bench: the %s watch did not start within 30 s" % kind)
    return p, q


# --- one run -----------------------------------------------------------------------------------

def cpu_ticks(pids):
    out = {}
    for name, pid in pids.items():
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[name] = int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    # The bench's own client: the creating threads, and the watch processes once joined.
    own = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    out["bench-client"] = round(sum(u.ru_utime + u.ru_stime for u in own) * os.sysconf("SC_CLK_TCK"))
    # The whole machine's busy time, every process and core: how close to saturated the run was.
    with open("/proc/stat") as f:
        t = [int(v) for v in f.readline().split()[1:]]
    out["machine"] = sum(t) - t[3] - t[4]  # less idle and iowait
    return out


def loadavg():
    """The machine's 1, 5 and 15 min load averages: a figure is read beside the load it had."""
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def start_profile(a, out):
    """Fetches the apiserver's CPU profile for PPROF_S seconds into OUT with .pprof for .json."""
    def fetch():
        url = "%s/debug/pprof/profile?seconds=%d" % (a.configuration.host, PPROF_S)
        try:
            r = a.rest_client.pool_manager.request("GET", url, preload_content=False,
                                                   timeout=PPROF_S + 30)
            with open(out[:-len(".json")] + ".pprof", "wb") as f:
                f.write(r.read())
        except Exception as e:  # noqa: BLE001 (a missing profile is not the run's failure)
            print("bench: no apiserver profile: %s" % e, file=sys.stderr)
    t = threading.Thread(target=fetch, daemon=True)
    t.start()
    return t


def run(kubeconfig, path, ns, n, tpl_file, out):
    tpl = None
    if path != "sessions":
        with open(tpl_file) as f:
            tpl = json.load(f)
    deadline = time.monotonic() + TIMEOUT
    # Component pids to account CPU to, from the environment: name=pid,name=pid
    pids = dict(kv.split("=", 1) for kv in os.environ.get("TELO_BENCH_PIDS", "").split(",") if kv)
    watches = [start_watch(kubeconfig, ns, "pods", n, deadline)]
    if path == "sessions":
        watches.append(start_watch(kubeconfig, ns, "telosessions", n, deadline))
    a = api(kubeconfig)
    if path == "sessions":
        co = client.CustomObjectsApi(a)
        objs = [session_object(SESSION_NAME % i) for i in range(n)]
        def create(o):
            done(co.create_namespaced_custom_object("telo.run", "v1alpha1", ns, "telosessions", o,
                                               _preload_content=False))
    elif path == "jobs":
        batch = client.BatchV1Api(a)
        objs = [job_object(tpl, "job-%05d" % i) for i in range(n)]
        def create(o):
            done(batch.create_namespaced_job(ns, o, _preload_content=False))
    elif path == "raw-apply":
        # The raw pods again, but by server-side apply as the operator writes them: what SSA
        # costs the apiserver beside a plain create.
        core = client.CoreV1Api(a)
        objs = [pod_object(tpl, "raw-%05d" % i, {"bench.telo.run/path": "raw"}) for i in range(n)]
        def create(o):
            done(core.patch_namespaced_pod(o["metadata"]["name"], ns, o, field_manager="bench",
                                           force=True, _content_type="application/apply-patch+yaml",
                                           _preload_content=False))
    elif path == "raw":
        core = client.CoreV1Api(a)
        objs = [pod_object(tpl, "raw-%05d" % i, {"bench.telo.run/path": "raw"}) for i in range(n)]
        def create(o):
            done(core.create_namespaced_pod(ns, o, _preload_content=False))
    else:
        raise SystemExit("bench: unknown path %s" % path)
    create_errors = []

    def done(resp):
        # Read the body before the connection goes back to the pool: an unread body would be
        # taken for the next response's status line.
        resp.read()
        resp.release_conn()

    def safe(o):
        try:
            create(o)
        except Exception as e:  # noqa: BLE001 (reported in the result)
            create_errors.append("%s: %s" % (o["metadata"]["name"], str(e)[:300]))
    # Serialising the bodies is the client's work, not the path's: warm the pool's connections
    # and build the objects before the clock starts.
    prof = start_profile(a, out) if PPROF_S > 0 else None
    load0 = loadavg()
    cpu0 = cpu_ticks(pids)
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(safe, objs))
    t_created = time.monotonic()
    results = {}
    if create_errors:
        deadline = min(deadline, time.monotonic() + 30)
    for p, q in watches:
        left = max(1.0, deadline - time.monotonic())
        try:
            r = q.get(timeout=left)
        except Exception:
            r = {"error": "no result before the timeout"}
        p.join(5)
        if p.is_alive():
            p.kill()
        results[r.get("kind", "?")] = r
    cpu1 = cpu_ticks(pids)
    t_end = time.monotonic()
    if prof:
        prof.join(PPROF_S + 30)
    hz = os.sysconf("SC_CLK_TCK")
    res = {"path": os.environ.get("TELO_BENCH_LABEL", path), "kind": path, "n": n, "ns": ns,
           "commit": os.environ.get("TELO_BENCH_COMMIT", "unknown"),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "loadavg_start": load0, "loadavg_end": loadavg(),
           "created_s": t_created - t0,
           "cpu_s": {k: (cpu1[k] - cpu0[k]) / hz for k in cpu1 if k in cpu0}}
    # How much of the machine the run had: busy core-seconds over the wall time until the last
    # watch ended, against the cores there are. Near 1, the run was bound by CPU, not by waiting.
    res["machine_busy_share"] = round(res["cpu_s"].get("machine", 0) /
                                      ((t_end - t0) * os.cpu_count()), 2)
    if create_errors:
        res["error"] = "%d creates failed, first: %s" % (len(create_errors), create_errors[0])
    for kind, r in results.items():
        if "error" in r:
            res["error"] = "; ".join(filter(None, [res.get("error"), "%s watch: %s" % (kind, r["error"])]))
            continue
        added = sorted(v - t0 for v in r["added"].values())
        running = sorted(v - t0 for v in r["running"].values())
        pre = "pods" if kind == "pods" else "sessions"
        res[pre + "_seen"] = len(added)
        res[pre + "_running"] = len(running)
        res[pre + "_events"] = r["events"]
        if r["rewatches"] or r["relists"]:
            res[pre + "_rewatches"] = r["rewatches"]
            res[pre + "_relists"] = r["relists"]
        if len(added) >= n:
            res[pre + "_exist_s"] = added[n - 1]
        if len(running) >= n:
            res[pre + "_running_s"] = running[n - 1]
            res[pre + "_running_p50_s"] = running[(n - 1) // 2]
            res[pre + "_running_p90_s"] = running[int(0.9 * (n - 1))]
        if r["other"]:
            res[pre + "_ended"] = len(r["other"])
    if any(k.endswith("_running") and res[k] < n for k in list(res)):
        res.setdefault("error", "not every object reached Running before the timeout")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    line = "bench: %-12s N=%-5d created %.2fs" % (res["path"], n, res["created_s"])
    for key in ("pods_exist_s", "pods_running_s", "sessions_running_s"):
        if key in res:
            line += "  %s %.2fs" % (key[:-2], res[key])
    if "error" in res:
        line += "  ERROR: " + res["error"]
    print(line, file=sys.stderr)
    return 0 if "error" not in res else 1


def clear(kubeconfig, ns):
    """Empties ns fast, so its deletion does not load the next run: removes the
    batch.kubernetes.io/job-tracking finalizer of every pod in parallel (a job controller held
    to 20 QPS takes a minute to release 1,000 pods), deletes every pod at once with grace period
    0 (rather than one by one by the namespace controller and kwok) and the Secrets, then the
    Jobs and TeloSessions. The operator is stopped before this; a job controller could make a
    few pods again between the pods' and the Jobs' deletion: the namespace deletion takes them."""
    a = api(kubeconfig)
    core = client.CoreV1Api(a)
    pods = json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]

    def strip(p):
        fins = p["metadata"].get("finalizers") or []
        if not fins:
            return
        keep = [f for f in fins if f != "batch.kubernetes.io/job-tracking"]
        body = [{"op": "test", "path": "/metadata/finalizers", "value": fins},
                {"op": "replace", "path": "/metadata/finalizers", "value": keep}]
        try:  # a list body is sent as application/json-patch+json
            resp = core.patch_namespaced_pod(p["metadata"]["name"], ns, body,
                                             _preload_content=False)
            resp.read()
            resp.release_conn()
        except client.ApiException:
            pass  # changed meanwhile (the job controller did it) or gone
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(strip, pods))
    # Children before owners: the garbage collector then finds no dependents to delete one by
    # one (at its 50 QPS, for minutes, loading the next run).
    for call in (lambda: core.delete_collection_namespaced_pod(
                     ns, grace_period_seconds=0, _preload_content=False),
                 lambda: core.delete_collection_namespaced_secret(ns, _preload_content=False),
                 lambda: client.BatchV1Api(a).delete_collection_namespaced_job(
                     ns, propagation_policy="Background", _preload_content=False),
                 lambda: client.CustomObjectsApi(a).delete_collection_namespaced_custom_object(
                     "telo.run", "v1alpha1", ns, "telosessions", _preload_content=False)):
        try:
            call().read()
        except client.ApiException:
            pass


# --- the summary -------------------------------------------------------------------------------

def summary(files):
    rows = {}
    for fn in files:
        with open(fn) as f:
            r = json.load(f)
        rows.setdefault((r["n"], r["path"]), []).append(r)
    order = ["sessions", "jobs-kcm-20/30", "jobs-kcm-1000/2000", "raw"]
    paths = sorted({p for _, p in rows}, key=lambda p: (order.index(p) if p in order else 99, p))
    ns_ = sorted({n for n, _ in rows})

    def med(rs, key):
        v = [r[key] for r in rs if key in r and "error" not in r]
        return statistics.median(v) if v else None

    def fmt(v, unit="s"):
        return "-" if v is None else ("%.2f%s" % (v, unit))

    def spread(rs):
        # The end point's range over the valid repeats: a median is read with its spread.
        v = [r.get("sessions_running_s", r.get("pods_running_s")) for r in rs if "error" not in r]
        v = [x for x in v if x is not None]
        return "%.2f-%.2f" % (min(v), max(v)) if v else "-"

    print("%-20s %6s %4s %10s %10s %10s %10s %10s %8s %6s  %s" % (
        "path", "N", "runs", "exist", "running", "sess.Run", "exist/s", "Running/s", "cpu", "busy",
        "end min-max"))
    done = {}
    for n in ns_:
        for p in paths:
            rs = rows.get((n, p))
            if not rs:
                continue
            ok = [r for r in rs if "error" not in r]
            ex, ru, sr = med(rs, "pods_exist_s"), med(rs, "pods_running_s"), med(rs, "sessions_running_s")
            end = sr if sr is not None else ru
            done[(n, p)] = (ex, end)
            machine = [r["cpu_s"]["machine"] for r in ok if "machine" in r.get("cpu_s", {})]
            cpu = statistics.median(machine) if machine else None
            busy = med(rs, "machine_busy_share")
            print("%-20s %6d %2d/%d %10s %10s %10s %10s %10s %8s %6s  %s" % (
                p, n, len(ok), len(rs), fmt(ex), fmt(ru), fmt(sr),
                fmt(n / ex if ex else None, ""), fmt(n / end if end else None, ""),
                fmt(cpu), fmt(busy, ""), spread(rs)))
    print()
    print("Running = every pod Running; for sessions the end point is every TeloSession's")
    print("status.phase Running (sess.Run), which comes after its pod. Rates are N / median time.")
    print("cpu = core-seconds the whole machine was busy during a run; busy = that over the")
    print("run's wall time times the cores (1.00: every core busy the whole time, bound by CPU).")
    print("end min-max = the fastest and slowest valid repeat of sess.Run (sessions) or running.")
    print("ratio = other path's time / sessions' time (> 1: sessions faster; vs raw: the share of")
    print("the raw ceiling sessions reach, goal >= 0.80)")
    for n in ns_:
        s = done.get((n, "sessions"))
        if not s:
            continue
        jobs = [(p, v) for (m, p), v in done.items() if m == n and p.startswith("jobs")]
        best = min((v for v in jobs if v[1][1]), key=lambda v: v[1][1], default=None)
        for label, other in (("jobs (best: %s)" % best[0] if best else "jobs", best[1] if best else None),
                             ("raw", done.get((n, "raw")))):
            if not other:
                continue
            r_ex = other[0] / s[0] if other[0] and s[0] else None
            r_ru = other[1] / s[1] if other[1] and s[1] else None
            print("N=%-5d sessions vs %-30s exist %s   running %s" % (
                n, label, fmt(r_ex, "x"), fmt(r_ru, "x")))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "template":
        template(*args)
    elif cmd == "run":
        sys.exit(run(args[0], args[1], args[2], int(args[3]), args[4], args[5]))
    elif cmd == "clear":
        clear(*args)
    elif cmd == "summary":
        summary(args)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()

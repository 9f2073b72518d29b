"""The measuring half of bench/limits/run.sh: N TeloSessions created at once in NS, reconciled by
one telo-operator (pid PID) with or without session limits (limits.maxSessions M), and what the
operator's CPU does:

  - burst: from the first create until every session is decided (Running, or Pending with
    reason SessionLimit): wall seconds and operator CPU seconds;
  - idle: the next IDLE_S seconds with nothing changing but the waiting sessions' own rechecks
    (SESSION_LIMITS_RECHECK_S, 30 s): operator CPU seconds per second;
  - wake (limits on): the M Running sessions deleted, until M waiting ones are Running: wall and
    operator CPU seconds, and the sessions' status writes from the API server's audit log (the
    cluster's logs/audit*.log next to KUBECONFIG) from the first delete until 3 s after the last
    start, in all and per freed slot: each slot moves every waiting session up one place.

  bench.py run KUBECONFIG NS N M PID OUT     M = 0: limits off (the peer)
  bench.py summary RESULT.json...            the table, medians and the on/off ratios

Sessions are polled with a LIST every 0.5 s (the bench's cost falls on the API server, not the
operator)."""

import datetime
import glob
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config

GROUP, VERSION, PLURAL = "telo.run", "v1alpha1", "telosessions"
IDLE_S = float(os.environ.get("TELO_BENCH_IDLE_S", "65"))
TIMEOUT = float(os.environ.get("TELO_BENCH_TIMEOUT", "900"))
TICK = os.sysconf("SC_CLK_TCK")


def api(kubeconfig):
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = 32
    return client.CustomObjectsApi(client.ApiClient(cfg))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def sessions(co, ns):
    items = co.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
    return {o["metadata"]["name"]: o.get("status") or {} for o in items}


def decided(st):
    return st.get("phase") == "Running" or (st.get("phase") == "Pending" and
                                            st.get("reason") == "SessionLimit")


def wait(co, ns, pred, what):
    deadline = time.monotonic() + TIMEOUT
    while True:
        seen = sessions(co, ns)
        if pred(seen):
            return seen
        if time.monotonic() > deadline:
            raise SystemExit("bench: timed out waiting for %s" % what)
        time.sleep(0.5)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status_writes(kubeconfig, ns, since, until):
    """Successful TeloSession status writes in ns between two RFC 3339 times, from the audit
    log; None when the cluster keeps none."""
    paths = glob.glob(os.path.join(os.path.dirname(os.path.abspath(kubeconfig)), "logs",
                                   "audit*.log"))
    if not paths:
        return None
    needle, count = '"namespace":"%s"' % ns, 0
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                if needle not in line or '"subresource":"status"' not in line:
                    continue
                e = json.loads(line)
                ref = e.get("objectRef", {})
                if (e.get("stage") == "ResponseComplete" and ref.get("namespace") == ns
                        and ref.get("resource") == PLURAL and ref.get("subresource") == "status"
                        and e.get("verb") in ("patch", "update")
                        and e.get("responseStatus", {}).get("code", 0) < 300
                        and since <= e.get("requestReceivedTimestamp", "") <= until):
                    count += 1
    return count


def session_object(name):
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "TeloSession",
            "metadata": {"name": name},
            "spec": {"entry": "app/telo.yaml", "bundle": {"configMap": {"name": "hello-bundle"}}}}


def run(kubeconfig, ns, n, m, pid, out):
    co = api(kubeconfig)
    names = ["l-%05d" % i for i in range(n)]
    res = {"schema": "telo-bench-limits/1", "n": n, "max_sessions": m, "load_start": loadavg()}
    c0, t0 = cpu_s(pid), time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda name: co.create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, session_object(name)), names))
    seen = wait(co, ns, lambda s: len(s) == n and all(decided(v) for v in s.values()),
                "every session decided")
    running = sorted(k for k, v in seen.items() if v.get("phase") == "Running")
    res["burst"] = {"wall_s": round(time.monotonic() - t0, 2),
                    "operator_cpu_s": round(cpu_s(pid) - c0, 2), "running": len(running)}
    if m and len(running) != m:
        raise SystemExit("bench: %d Running under maxSessions %d" % (len(running), m))
    c1 = cpu_s(pid)
    time.sleep(IDLE_S)
    res["idle"] = {"seconds": IDLE_S, "operator_cpu_s": round(cpu_s(pid) - c1, 2),
                   "operator_cpu_s_per_s": round((cpu_s(pid) - c1) / IDLE_S, 4)}
    if m:
        c2, t2, since = cpu_s(pid), time.monotonic(), utc_now()
        for name in running:
            co.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        wait(co, ns, lambda s: sum(1 for k, v in s.items() if k not in running and
                                   v.get("phase") == "Running") == m, "%d more Running" % m)
        res["wake"] = {"wall_s": round(time.monotonic() - t2, 2),
                       "operator_cpu_s": round(cpu_s(pid) - c2, 2)}
        time.sleep(3)  # the waiting sessions' last reconciles of the wake
        writes = status_writes(kubeconfig, ns, since, utc_now())
        if writes is not None:
            res["wake"]["status_writes"] = writes
            res["wake"]["status_writes_per_slot"] = round(writes / m, 1)
    res["load_end"] = loadavg()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


def summary(files):
    runs = {}
    for path in files:
        with open(path) as f:
            r = json.load(f)
        runs.setdefault((r.get("label", ""), r["n"], r["max_sessions"]), []).append(r)

    def med(rs, *keys):
        vals = []
        for r in rs:
            v = r
            for k in keys:
                v = (v or {}).get(k)
            if v is not None:
                vals.append(v)
        return (statistics.median(vals), min(vals), max(vals)) if vals else None

    def fmt(t, digits=2):
        return "-" if t is None else "%.*f (%.*f-%.*f)" % (digits, t[0], digits, t[1], digits, t[2])
    print("| build | N | maxSessions | runs | burst wall s | burst operator CPU s | idle operator "
          "CPU s/s | wake wall s | wake operator CPU s | wake status writes per slot | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (label, n, m), rs in sorted(runs.items()):
        print("| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            label, n, m, len(rs), fmt(med(rs, "burst", "wall_s")),
            fmt(med(rs, "burst", "operator_cpu_s")),
            fmt(med(rs, "idle", "operator_cpu_s_per_s"), 4), fmt(med(rs, "wake", "wall_s")),
            fmt(med(rs, "wake", "operator_cpu_s")), fmt(med(rs, "wake", "status_writes_per_slot"), 1),
            "%.1f" % statistics.median(r["load_start"][0] for r in rs)))


def main():
    if len(sys.argv) >= 8 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
            sys.argv[7])
    elif len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

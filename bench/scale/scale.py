"""The measuring half of bench/scale/run.sh, beside bench/sessions/bench.py (whose `run`, `clear`
and `template` it uses unchanged for the burst itself).

  scale.py now                                         UTC time as the audit log writes it
  scale.py proc PID...                                 RSS now and peak, CPU seconds (JSON)
  scale.py augment RESULT.json KEY JSON                sets RESULT[KEY] = JSON
  scale.py audit LOGDIR NS N FROM TO [AGENT]           requests in NS between FROM and TO (JSON)
  scale.py restart KUBECONFIG NS N OUT -- OPERATOR...  restart and resync phases (see restart())
  scale.py summary RESULT.json...                      the table (medians of the valid runs)
  scale.py plot OUTDIR RESULT.json...                  one PNG per figure (needs matplotlib)

Every result is one JSON file per run; the schema is in bench/scale/README.md.
"""

import collections
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HZ = os.sysconf("SC_CLK_TCK")
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def now_utc():
    # The audit log's requestReceivedTimestamp: RFC 3339 with microseconds, so strings compare.
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def proc(pid):
    """RSS now and at its peak (VmHWM) in MiB, and CPU seconds (utime + stime) of one process."""
    out = {"pid": int(pid)}
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[{"VmRSS": "rss_mib", "VmHWM": "rss_peak_mib"}[k]] = round(
                        int(v.split()[0]) / 1024, 2)
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / HZ
    except (OSError, IndexError, ValueError):
        out["gone"] = True
    return out


# --- the audit log ---------------------------------------------------------------------------

def audit(log_dir, ns, t_from, t_to, agent=None):
    """Requests that completed in NS with t_from <= requestReceivedTimestamp < t_to, watches left
    out (one per client, not per object), per client (user agent's product), verb and
    resource[/subresource]. Rotated logs (audit-*.log) are read when they may hold the window."""
    needle = '"namespace":"%s"' % ns
    per = collections.Counter()
    files = sorted(glob.glob(os.path.join(log_dir, "audit*.log")))
    t0 = datetime.datetime.strptime(t_from, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    for path in files:
        if os.path.getmtime(path) < t0 - 5:
            continue
        with open(path, errors="replace") as f:
            for line in f:
                if needle not in line:
                    continue
                e = json.loads(line)
                ref = e.get("objectRef", {})
                if e.get("stage") != "ResponseComplete" or ref.get("namespace") != ns:
                    continue
                ts = e["requestReceivedTimestamp"]
                if ts < t_from or ts >= t_to or e["verb"] == "watch":
                    continue
                who = e.get("userAgent", "?").split("/")[0]
                if agent and not who.startswith(agent):
                    continue
                resource = ref.get("resource", "?")
                if ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                per[(who, e["verb"], resource)] += 1
    rows = [{"client": c, "verb": v, "resource": r, "count": n}
            for (c, v, r), n in sorted(per.items(), key=lambda kv: -kv[1])]
    return {"from": t_from, "to": t_to, "total": sum(per.values()),
            "writes": sum(n for (_, v, _), n in per.items() if v in WRITES), "requests": rows}


# --- the operator's /metrics ------------------------------------------------------------------

def metrics(port):
    """The sums of the samples of a few metrics, or None when the operator does not answer."""
    want = ("controller_runtime_reconcile_total", "workqueue_depth",
            "controller_runtime_active_workers", "workqueue_adds_total")
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = dict.fromkeys(want, 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            try:
                out[name] += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return out


def ready(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


SCRAPES = [0]


def drained(port, want_reconciles, timeout, poll=0.1):
    """Polls /metrics until at least want_reconciles reconciles ran and the queue is empty and
    idle; returns (monotonic time, metrics) or None at the timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = metrics(port)
        SCRAPES[0] += 1
        if (m and m["controller_runtime_reconcile_total"] >= want_reconciles
                and m["workqueue_depth"] == 0 and m["controller_runtime_active_workers"] == 0):
            return time.monotonic(), m
        time.sleep(poll)
    return None


def kubectl_get(kubectl, kubeconfig):
    t = time.monotonic()
    subprocess.run([kubectl, "--kubeconfig", kubeconfig, "get", "telosessions,pods", "-A", "-o",
                    "json"], stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t


def restart(kubeconfig, ns, n, out, log_dir, kubectl, port, resync, op_log, cmd):
    """The operator's restart and resync on N sessions that are Running and right (the previous
    operator has been stopped by the caller):
    1. `kubectl get telosessions,pods -A -o json >/dev/null`, 3 times: the median is the yardstick.
    2. The operator starts (cmd, with --resync-period RESYNC); /readyz is polled every 10 ms:
       exec to 200 is restart-to-caches-synced (readyz is 200 exactly when every informer synced).
    3. /metrics is polled until N reconciles ran and the queue is empty: the first reconcile of
       every session. 3 s later the audit log's window from exec on gives the restart's requests,
       and its writes (must be 0: every session is already right).
    4. The resync timer fires RESYNC +-10 % after the start: /metrics polled every 0.5 s; the
       CPU seconds from the last poll before the reconcile count moved until the queue is empty
       again are the resync's, and the audit window around it its writes. The idle CPU rate of
       the wait before is kept beside it."""
    res = {"kubectl_get_s": [kubectl_get(kubectl, kubeconfig) for _ in range(3)]}
    res["kubectl_get_median_s"] = statistics.median(res["kubectl_get_s"])
    t_audit0 = now_utc()
    logf = open(op_log, "ab")
    t0 = time.monotonic()
    p = subprocess.Popen(cmd + ["--resync-period", str(resync)], stdout=logf, stderr=logf)
    try:
        while not ready(port):
            if p.poll() is not None:
                raise SystemExit("scale: the restarted operator exited: see %s" % op_log)
            if time.monotonic() - t0 > 600:
                raise SystemExit("scale: the restarted operator not ready after 600 s")
            time.sleep(0.01)
        res["synced_s"] = time.monotonic() - t0
        res["synced_over_kubectl"] = res["synced_s"] / res["kubectl_get_median_s"]
        res["after_synced"] = proc(p.pid)
        d = drained(port, n, 600, 0.05)
        if d is None:
            res["error"] = "the restart's first reconciles did not finish in 600 s"
            return finish(res, out, p)
        res["first_reconcile_all_s"] = d[0] - t0
        res["after_first_reconcile"] = proc(p.pid)
        res["reconciles_after_restart"] = d[1]["controller_runtime_reconcile_total"]
        time.sleep(3)
        res["restart_audit"] = audit(log_dir, ns, t_audit0, now_utc(), "telo-operator")
        res["restart_writes"] = res["restart_audit"]["writes"]
        # What the bench's own /metrics polls cost (each scrape counts the sessions by phase over
        # the cache), and the idle rate without them, so the resync's CPU can be read net of them.
        c0, t = proc(p.pid)["cpu_s"], time.monotonic()
        time.sleep(10)
        res["idle_quiet_cpu_s_per_s"] = (proc(p.pid)["cpu_s"] - c0) / (time.monotonic() - t)
        c0 = proc(p.pid)["cpu_s"]
        for _ in range(20):
            metrics(port)
        res["scrape_cpu_s"] = (proc(p.pid)["cpu_s"] - c0) / 20
        # 4. the resync
        base = metrics(port)["controller_runtime_reconcile_total"]
        idle0, t_idle0 = proc(p.pid)["cpu_s"], time.monotonic()
        t_res0 = now_utc()
        last_cpu = idle0
        end = t0 + resync * 1.1 + 120
        moved = False
        while time.monotonic() < end:
            cpu = proc(p.pid)["cpu_s"]
            m = metrics(port)
            if m and m["controller_runtime_reconcile_total"] > base:
                moved = True
                break
            last_cpu = cpu
            t_last = time.monotonic()
            time.sleep(0.5)
        if not moved:
            res["error"] = "no resync within %.0f s" % (resync * 1.1 + 120)
            return finish(res, out, p)
        res["idle_cpu_s_per_s"] = (last_cpu - idle0) / max(0.001, t_last - t_idle0)
        SCRAPES[0] = 1
        d = drained(port, base + n, 600, 0.05)
        if d is None:
            res["error"] = "the resync did not finish in 600 s"
            return finish(res, out, p)
        res["resync_cpu_s"] = proc(p.pid)["cpu_s"] - last_cpu
        res["resync_scrapes"] = SCRAPES[0]
        res["resync_cpu_net_s"] = max(0.0, res["resync_cpu_s"] - SCRAPES[0] * res["scrape_cpu_s"])
        res["resync_reconciles"] = d[1]["controller_runtime_reconcile_total"] - base
        res["resync_wall_s"] = d[0] - t_last
        time.sleep(3)
        res["resync_audit"] = audit(log_dir, ns, t_res0, now_utc(), "telo-operator")
        res["resync_writes"] = res["resync_audit"]["writes"]
        res["after_resync"] = proc(p.pid)
        return finish(res, out, p)
    except BaseException:
        p.terminate()
        raise


def finish(res, out, p):
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    line = "scale: restart synced %.2fs (kubectl get %.2fs, %.2fx), writes %s; resync cpu %s s, writes %s" % (
        res.get("synced_s", -1), res["kubectl_get_median_s"], res.get("synced_over_kubectl", -1),
        res.get("restart_writes"), res.get("resync_cpu_s"), res.get("resync_writes"))
    if "error" in res:
        line += "  ERROR: " + res["error"]
    print(line, file=sys.stderr)
    return 0 if "error" not in res else 1


def finalize(out, kv):
    """Adds to bench.py's result of one run what bench/scale measures around it. kv: log_dir, ns,
    n, from, to (the audit window of the burst), agent (the controller's user agent), controller
    (its name in bench.py's cpu_s), procs (a `proc` result file: controller, apiserver, etcd),
    load_before, load_after (JSON), restart (a restart() result file, sessions only), commit."""
    with open(out) as f:
        r = json.load(f)
    n = int(kv["n"])
    r["end_s"] = r.get("sessions_running_s", r.get("pods_running_s"))
    with open(kv["procs"]) as f:
        procs = json.load(f)
    ctl = procs.pop("controller", {})
    ctl["name"] = kv["controller"]
    ctl["cpu_run_s"] = r.get("cpu_s", {}).get(kv["controller"])
    if ctl["cpu_run_s"] is not None:
        ctl["cpu_ms_per_object"] = 1000 * ctl["cpu_run_s"] / n
    r["controller"] = ctl
    r["components"] = procs
    a = audit(kv["log_dir"], kv["ns"], kv["from"], kv["to"])
    a["per_object"] = a["total"] / n
    a["controller_per_object"] = sum(x["count"] for x in a["requests"]
                                     if x["client"].startswith(kv["agent"])) / n
    a["rows_per_object"] = ["%-24s %-7s %-22s %7.3f" % (x["client"][:24], x["verb"], x["resource"],
                                                         x["count"] / n) for x in a["requests"]]
    r["audit_run"] = a
    r["load_before"] = json.loads(kv["load_before"])
    r["load_after"] = json.loads(kv["load_after"])
    r["commit"] = kv.get("commit")
    if kv.get("binary"):
        r["operator_binary"] = kv["binary"]
    if kv.get("restart") and os.path.exists(kv["restart"]):
        with open(kv["restart"]) as f:
            r["restart"] = json.load(f)
        if "error" in r["restart"]:
            r["restart_error"] = r["restart"]["error"]
    with open(out, "w") as f:
        json.dump(r, f, indent=1)
    print("scale: %s N=%d end %s s, %s RSS peak %s MiB end %s MiB, cpu %s s, %.2f req/obj (%s %.2f)"
          % (r["path"], n, r["end_s"], ctl["name"], ctl.get("rss_peak_mib"), ctl.get("rss_mib"),
             ctl["cpu_run_s"], a["per_object"], kv["agent"], a["controller_per_object"]),
          file=sys.stderr)


# --- summary and plots ------------------------------------------------------------------------

def load(files):
    rows = collections.defaultdict(list)
    for fn in files:
        with open(fn) as f:
            r = json.load(f)
        rows[(r["n"], r["path"])].append(r)
    return rows


def get(r, *path):
    for k in path:
        if isinstance(r, list) and isinstance(k, int) and k < len(r):
            r = r[k]
        elif isinstance(r, dict) and k in r:
            r = r[k]
        else:
            return None
    return r


def median_of(rs, *path):
    """The median of a figure over the valid runs rs (None when none has it)."""
    v = [get(r, *path) for r in rs or [] if "error" not in r]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


# (label, path in the result, format)
COLUMNS = [
    ("running", ("end_s",), "%.2f"),
    ("ctl rss peak MiB", ("controller", "rss_peak_mib"), "%.1f"),
    ("ctl rss end MiB", ("controller", "rss_mib"), "%.1f"),
    ("ctl cpu s", ("controller", "cpu_run_s"), "%.2f"),
    ("ctl ms/obj", ("controller", "cpu_ms_per_object"), "%.2f"),
    ("req/obj", ("audit_run", "per_object"), "%.2f"),
    ("ctl req/obj", ("audit_run", "controller_per_object"), "%.2f"),
    ("synced s", ("restart", "synced_s"), "%.2f"),
    ("kubectl s", ("restart", "kubectl_get_median_s"), "%.2f"),
    ("synced/kubectl", ("restart", "synced_over_kubectl"), "%.2f"),
    ("restart writes", ("restart", "restart_writes"), "%d"),
    ("resync cpu s", ("restart", "resync_cpu_s"), "%.3f"),
    ("resync writes", ("restart", "resync_writes"), "%d"),
    ("load1", ("load_before", 0), "%.1f"),
]


def summary(files):
    rows = load(files)
    order = ["sessions", "jobs-kcm-1000/2000", "raw"]
    keys = sorted(rows, key=lambda k: (k[0], order.index(k[1]) if k[1] in order else 99, k[1]))
    head = "%-20s %6s %5s" % ("path", "N", "runs") + "".join(" %*s" % (max(8, len(c[0])), c[0])
                                                             for c in COLUMNS)
    print(head)
    for k in keys:
        rs = rows[k]
        ok = [r for r in rs if "error" not in r]
        line = "%-20s %6d %2d/%-2d" % (k[1], k[0], len(ok), len(rs))
        for label, path, fmt in COLUMNS:
            m = median_of(ok, *path)
            s = fmt % m if m is not None else "-"
            line += " %*s" % (max(8, len(label)), s)
        print(line)
    print()
    print("Medians of the valid runs (runs = valid/total); a single run where runs is 1/1.")
    print("ctl = the controller: telo-operator for sessions, the job-only kube-controller-manager")
    print("for Jobs. rss peak = VmHWM over the process's life (started fresh for each run), end =")
    print("VmRSS once every object is Running. req/obj = every request in the run's namespace")
    print("(all clients) per object; ctl req/obj = the controller's own. load1 = the 1-minute load")
    print("average before the run.")
    for n in sorted({k[0] for k in keys}):
        s, raw = rows.get((n, "sessions")), rows.get((n, "raw"))
        a, b = median_of(s, "audit_run", "per_object"), median_of(raw, "audit_run", "per_object")
        if a is not None and b is not None:
            print("N=%-6d sessions/raw: API requests per object %.3f / %.3f = %.4f"
                  % (n, a, b, a / b))
    for n in sorted({k[0] for k in keys}):
        s, j = rows.get((n, "sessions")), rows.get((n, "jobs-kcm-1000/2000"))
        if not s or not j:
            continue
        a, b = (median_of(x, "controller", "rss_peak_mib") for x in (s, j))
        c, d = (median_of(x, "controller", "cpu_ms_per_object") for x in (s, j))
        e, f = (median_of(x, "end_s") for x in (s, j))
        if None not in (a, b, c, d, e, f):
            print("N=%-6d operator/job-KCM: RSS peak %.2f, CPU per object %.2f, time to Running %.2f"
                  % (n, a / b, c / d, e / f))


def plot(outdir, files):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = load(files)
    figures = [
        ("running", "time to all Running (s)", ("end_s",)),
        ("rss_peak", "controller RSS peak (MiB)", ("controller", "rss_peak_mib")),
        ("rss_end", "controller RSS at the end (MiB)", ("controller", "rss_mib")),
        ("cpu_per_object", "controller CPU per object (ms)", ("controller", "cpu_ms_per_object")),
        ("requests_per_object", "API requests per object (all clients)", ("audit_run", "per_object")),
        ("restart_synced", "restart to caches synced (s)", ("restart", "synced_s")),
        ("resync_cpu", "resync of N unchanged sessions: CPU (s)", ("restart", "resync_cpu_s")),
    ]
    os.makedirs(outdir, exist_ok=True)
    paths = sorted({k[1] for k in rows})
    # One colour per path in every figure, whichever paths a figure has points for.
    colour = {p: "C%d" % i for i, p in enumerate(paths)}
    for name, title, path in figures:
        fig, ax = plt.subplots(figsize=(6, 4))
        for p in paths:
            pts = []
            for n in sorted({k[0] for k in rows if k[1] == p}):
                m = median_of(rows[(n, p)], *path)
                if m is not None:
                    pts.append((n, m))
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p,
                        color=colour[p])
        if name == "restart_synced":
            pts = []
            for n in sorted({k[0] for k in rows if k[1] == "sessions"}):
                m = median_of(rows[(n, "sessions")], "restart", "kubectl_get_median_s")
                if m is not None:
                    pts.append((n, m))
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="x", linestyle="--",
                        color="black", label="kubectl get telosessions,pods -A -o json")
        ax.set_xscale("log")
        ax.set_xlabel("N")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, name + ".png"), dpi=100)
        plt.close(fig)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "now":
        print(now_utc())
    elif cmd == "loadavg":
        print(json.dumps(loadavg()))
    elif cmd == "proc":
        print(json.dumps({a.split("=")[0]: proc(a.split("=")[1]) for a in args}))
    elif cmd == "augment":
        with open(args[0]) as f:
            r = json.load(f)
        r[args[1]] = json.loads(args[2])
        with open(args[0], "w") as f:
            json.dump(r, f, indent=1)
    elif cmd == "audit":
        print(json.dumps(audit(args[0], args[1], args[3], args[4],
                               args[5] if len(args) > 5 else None)))
    elif cmd == "restart":
        # KUBECONFIG NS N OUT LOGDIR KUBECTL PORT RESYNC OPLOG -- CMD...
        sep = args.index("--")
        a, op = args[:sep], args[sep + 1:]
        sys.exit(restart(a[0], a[1], int(a[2]), a[3], a[4], a[5], int(a[6]), int(a[7]), a[8], op))
    elif cmd == "finalize":
        finalize(args[0], dict(a.split("=", 1) for a in args[1:]))
    elif cmd == "summary":
        summary(args)
    elif cmd == "plot":
        plot(args[0], args[1:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()

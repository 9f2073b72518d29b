"""Plots of the benches' own result files (run through bench/report/run.sh, which provides the
pinned matplotlib). Nothing here measures: every point comes from a file a bench wrote, and
SOURCES.md beside the plots names each file.

- bench/sessions (run.sh writes RESULTS/<N>-<path>-<repeat>.json, bench.py `run`, and run.json;
  RESULTS defaults to bench/sessions/results/<time>-<commit> in the tree): time until every
  object of a run is Running, per path and N (median of the valid repeats, min and max as the
  error bar; for the sessions path the end point is every TeloSession's status.phase Running).
- bench/cache-memory (run.sh writes RESULTS/cache-memory.json, RESULTS defaulting to
  bench/cache-memory/results/<time>-<commit>): bytes of memory per cached pod, median of the
  repeats with min and max as the error bar.
- bench/gateway (run.sh writes RESULTS/samples.json, bench.py --json): the keystroke round-trip
  distribution of every path (CDF) and the output throughput of every round.
- bench/scale (results in the tree, bench/scale/results/<run>/<N>-<path>-<repeat>.json, the
  per-run JSON of bench/scale/README.md): time to all Running, controller RSS peak and API
  requests per object against N, per path (median of the runs, min and max as the error bar);
  every results directory is its own series, since each is another build of the operator.
- bench/builds (bench/builds/results/*.json, schema telo-bench-builds/1): apply to Running per
  path (first build, cache hit, all of 10 sharing one build, kaniko by hand) for every labelled
  run (before, after, before2, after2), median of its repeats, min and max as the error bar.
- bench/gateway fan-out (bench/gateway/results/fanout-*.json, written by fanout.py): keystroke
  p99 of the crowded gateway against the idle peer's, per run of every batch, and RSS per idle
  client.
- bench/gateway flood (bench/gateway/results/flood-*.json, written by flood.py): every probe of
  the flood in time, GET /readyz and another session's keystroke, per gateway (new, old).
- bench/limits (bench/limits/results/<run>/<path>-<N>-<repeat>.json, schema telo-bench-limits/1):
  the operator's CPU seconds for the burst, per second idle, and for the wake, per path (no limit,
  limits on, a before build) and N: median of the repeats, min and max as the error bar.
"""

import argparse
import calendar
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 100
SESSIONS_ORDER = ["sessions", "jobs-kcm-20/30", "jobs-kcm-1000/2000", "raw"]


def log(msg):
    print("report: " + msg, file=sys.stderr)


def load(fn):
    try:
        with open(fn) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stamp(fn):
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(fn)))


def median_bars(values_by_x, i, nseries, width):
    """Series i of nseries grouped bars: for each x position with values, its bar's x, the median,
    and the distances down to the min and up to the max (the error bar)."""
    xs, meds, lo, hi = [], [], [], []
    for j, v in enumerate(values_by_x):
        v = [x for x in v if x is not None]
        if not v:
            continue
        m = statistics.median(v)
        xs.append(j + (i - (nseries - 1) / 2) * width)
        meds.append(m)
        lo.append(m - min(v))
        hi.append(max(v) - m)
    return xs, meds, lo, hi


def written(root, fn):
    """A file's modification time; for a file in the tree, the commit that last changed it (a
    checkout's modification times are the checkout's)."""
    if not os.path.isabs(fn):
        try:
            c = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %cd",
                                "--date=format-local:%Y-%m-%d %H:%M UTC", "--", fn],
                               capture_output=True, text=True, check=False, env=dict(os.environ, TZ="UTC"))
            if c.returncode == 0 and c.stdout.strip():
                h, _, d = c.stdout.strip().partition(" ")
                return "committed %s (%s)" % (d, h)
        except OSError:
            pass
        fn = os.path.join(root, fn)
    return stamp(fn)


# --- finding results --------------------------------------------------------------------------


def sessions_files(d):
    """The run files of a bench/sessions results directory (not warm-up.json or pod-template)."""
    out = []
    for fn in sorted(glob.glob(os.path.join(d, "[0-9]*.json"))):
        r = load(fn)
        if isinstance(r, dict) and {"path", "n", "kind"} <= set(r):
            out.append(fn)
    return out


def is_gateway(fn):
    r = load(fn)
    return isinstance(r, dict) and isinstance(r.get("rtt_s"), dict) and isinstance(r.get("mb_s"), dict)


def newest(paths):
    return max(paths, key=os.path.getmtime) if paths else None


def run_time(d):
    """When a results directory was written: for one in the tree the UTC time its name starts with
    (<YYYYmmddTHHMMSSZ>-<commit>; a checkout's modification times are the checkout's), else the
    newest file's modification time."""
    m = re.match(r"(\d{8}T\d{6}Z)", os.path.basename(os.path.normpath(d)))
    if m:
        return calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ"))
    return max((os.path.getmtime(f) for f in glob.glob(os.path.join(d, "*"))), default=0)


def find_sessions(tmp, bench):
    """The latest bench/sessions run: the newest results directory in the tree
    (bench/sessions/results/) or under tmp (runs with TELO_BENCH_OUT there, or from before the
    results moved into the tree)."""
    dirs = [d for d in glob.glob(os.path.join(bench, "sessions", "results", "*")) +
            glob.glob(os.path.join(tmp, "telo-bench-sessions-*")) if sessions_files(d)]
    return [max(dirs, key=run_time)] if dirs else []


def find_cache_memory(tmp, bench):
    """The latest bench/cache-memory result, in the tree or under tmp, as find_sessions."""
    files = [f for f in glob.glob(os.path.join(bench, "cache-memory", "results", "*", "cache-memory.json")) +
             glob.glob(os.path.join(tmp, "telo-bench-cache-memory-*", "cache-memory.json"))
             if isinstance(load(f), dict)]
    return [max(files, key=lambda f: run_time(os.path.dirname(f)))] if files else []


def find_gateway(tmp):
    files = [f for f in glob.glob(os.path.join(tmp, "*", "samples.json")) if is_gateway(f)]
    return [newest(files)] if files else []


# --- bench/sessions ---------------------------------------------------------------------------


def load_text(meta):
    """The load averages at a run's start and end, as a run's JSON gives them."""
    if not meta or not meta.get("load_start"):
        return ""
    return "load %s -> %s" % (meta["load_start"].split()[0], (meta.get("load_end") or "?").split()[0])


def plot_sessions(dirs, out, sources, root):
    rows, runs = {}, []
    for d in dirs:
        meta = load(os.path.join(d, "run.json"))
        if isinstance(meta, dict):
            sources.append(("bench/sessions", rel(root, os.path.join(d, "run.json"))))
            runs.append("%s %s, %s" % (meta.get("started", "?")[:16].replace("T", " "),
                                       meta.get("commit", "?"), load_text(meta)))
        for fn in sessions_files(d):
            r = load(fn)
            rows.setdefault((r["n"], r["path"]), []).append(r)
            sources.append(("bench/sessions", rel(root, fn)))
    ns = sorted({n for n, _ in rows})
    paths = sorted({p for _, p in rows},
                   key=lambda p: (SESSIONS_ORDER.index(p) if p in SESSIONS_ORDER else 99, p))

    def end(r):
        return r.get("sessions_running_s", r.get("pods_running_s"))

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=DPI)
    width = 0.8 / max(len(paths), 1)
    plotted = 0
    for i, p in enumerate(paths):
        xs, meds, lo, hi, labels = [], [], [], [], []
        for j, n in enumerate(ns):
            ok = [end(r) for r in rows.get((n, p), []) if "error" not in r and end(r) is not None]
            if not ok:
                continue
            m = statistics.median(ok)
            xs.append(j + (i - (len(paths) - 1) / 2) * width)
            meds.append(m)
            lo.append(m - min(ok))
            hi.append(max(ok) - m)
            labels.append("%d/%d" % (len(ok), len(rows[(n, p)])))
        if not xs:
            continue
        bars = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, label=p)
        for b, m, lab in zip(bars, meds, labels):
            ax.annotate("%.2fs\n%s" % (m, lab), (b.get_x() + b.get_width() / 2, m), ha="center",
                        va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
        plotted += 1
    if not plotted:
        plt.close(fig)
        log("bench/sessions: no valid run (every run has an error): not plotted")
        return None
    ax.set_xticks(range(len(ns)), ["N = %d" % n for n in ns])
    ax.set_yscale("log")
    ax.set_ylabel("seconds until all N are Running (log)")
    ax.set_title("bench/sessions: time to Running, median of valid runs (bars: min-max)" +
                 "".join("\n" + t for t in runs), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fn = os.path.join(out, "sessions-time-to-running.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    return fn


# --- bench/cache-memory -----------------------------------------------------------------------


def plot_cache_memory(files, out, sources, root):
    runs = []
    for fn in files:
        r = load(fn)
        if not r or not r.get("count"):
            log("%s: not a cache-memory result, skipped" % fn)
            continue
        # telo-bench-cache-memory/2 has every repeat; the first format was one measurement.
        r["_reps"] = r.get("repeats") if isinstance(r.get("repeats"), list) else [r]
        runs.append(r)
        sources.append(("bench/cache-memory", rel(root, fn)))
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=DPI)
    series = [
        ("telo-informer RSS growth / N", lambda r, n: (r["informer_rss_kib"] - r["empty_rss_kib"]) * 1024 / n),
        ("telo-informer store estimate / N", lambda r, n: r["store_bytes"] / n),
        ("kube-controller-manager (job controller only) RSS / N", lambda r, n: r["kcm_rss_kib"] * 1024 / n),
    ]
    width = 0.8 / len(series)
    for i, (label, f) in enumerate(series):
        xs, meds, lo, hi = [], [], [], []
        for j, r in enumerate(runs):
            v = [f(rep, r["count"]) for rep in r["_reps"]]
            m = statistics.median(v)
            xs.append(j + (i - 1) * width)
            meds.append(m)
            lo.append(m - min(v))
            hi.append(max(v) - m)
        bars = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, label=label)
        for b, v, h in zip(bars, meds, hi):
            ax.annotate("%.0f B" % v, (b.get_x() + b.get_width() / 2, v + h), ha="center",
                        va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(runs)), [
        "%d pods, %d repeat(s)\n%s %s\n%s" % (
            r["count"], len(r["_reps"]), (r.get("started") or r.get("date") or "?")[:16].replace("T", " "),
            r.get("commit", ""), load_text(r)) for r in runs], fontsize=8)
    ax.set_ylabel("bytes per cached pod")
    ax.set_title("bench/cache-memory: memory per cached session pod, median of the repeats "
                 "(bars: min-max)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fn = os.path.join(out, "cache-memory-per-object.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    return fn


# --- bench/gateway ----------------------------------------------------------------------------


def plot_gateway(files, out, sources):
    made = []
    for k, fn in enumerate(files):
        r = load(fn)
        sources.append(("bench/gateway", fn))
        suffix = "" if k == 0 else "-%d" % (k + 1)
        paths = [p for p, v in r["rtt_s"].items() if v]
        when = stamp(fn)

        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=DPI)
        for p in paths:
            ms = sorted(v * 1000 for v in r["rtt_s"][p])
            ys = [(i + 1) / len(ms) for i in range(len(ms))]
            ax.step(ms, ys, where="post",
                    label="%s (p50 %.2f, p99 %.2f ms, n=%d)" % (
                        p, ms[len(ms) // 2], ms[min(len(ms) - 1, int(0.99 * len(ms)))], len(ms)))
        ax.set_xscale("log")
        ax.set_xlabel("keystroke round trip, ms (log)")
        ax.set_ylabel("share of keystrokes at or below")
        ax.set_title("bench/gateway: keystroke round trip distribution (%s)" % when)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        f1 = os.path.join(out, "gateway-latency%s.png" % suffix)
        fig.tight_layout()
        fig.savefig(f1)
        plt.close(fig)
        made.append(f1)

        rate_paths = [p for p in paths if r["mb_s"].get(p)]
        if rate_paths:
            fig, ax = plt.subplots(figsize=(8, 4.5), dpi=DPI)
            data = [r["mb_s"][p] for p in rate_paths]
            ax.boxplot(data, vert=False, showfliers=False)
            for i, d in enumerate(data):
                ax.plot(d, [i + 1] * len(d), "o", alpha=0.6, markersize=4)
            ax.set_yticks(range(1, len(rate_paths) + 1), rate_paths, fontsize=8)
            ax.set_xlim(left=0)
            ax.set_xlabel("output throughput, MB/s per round")
            ax.set_title("bench/gateway: flood of %d bytes, %d rounds (%s)" % (
                r.get("flood_bytes", 0), r.get("rounds", len(data[0])), when))
            ax.grid(axis="x", which="both", alpha=0.3)
            f2 = os.path.join(out, "gateway-throughput%s.png" % suffix)
            fig.tight_layout()
            fig.savefig(f2)
            plt.close(fig)
            made.append(f2)
    return made


# --- bench/scale -----------------------------------------------------------------------------


def rel(root, fn):
    fn = os.path.abspath(fn)
    return os.path.relpath(fn, root) if fn.startswith(os.path.abspath(root) + os.sep) else fn


def dig(r, *path):
    for k in path:
        if not isinstance(r, dict) or k not in r:
            return None
        r = r[k]
    return r if isinstance(r, (int, float)) and not isinstance(r, bool) else None


def scale_files(d):
    out = []
    for fn in sorted(glob.glob(os.path.join(d, "[0-9]*.json"))):
        r = load(fn)
        if isinstance(r, dict) and {"path", "n", "end_s"} <= set(r):
            out.append(fn)
    return out


def plot_scale(dirs, out, sources, root):
    """One series per (results directory, path): each directory is one build of the operator."""
    series = {}
    for d in dirs:
        run = os.path.basename(os.path.normpath(d))
        for fn in scale_files(d):
            r = load(fn)
            if "error" in r:
                continue
            series.setdefault((run, r["path"]), {}).setdefault(r["n"], []).append(r)
            sources.append(("bench/scale", rel(root, fn)))
    if not series:
        log("bench/scale: no valid run: not plotted")
        return []
    figures = [
        ("scale-time-to-running.png", "seconds until all N are Running", ("end_s",), True),
        ("scale-controller-rss.png", "controller RSS peak, MiB", ("controller", "rss_peak_mib"),
         True),
        ("scale-requests-per-object.png", "API requests per object, all clients (audit log)",
         ("audit_run", "per_object"), False),
    ]
    made = []
    for name, ylabel, path, logy in figures:
        fig, ax = plt.subplots(figsize=(8, 4.8), dpi=DPI)
        for (run, p), byn in sorted(series.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            xs, ys, lo, hi = [], [], [], []
            for n in sorted(byn):
                v = [dig(r, *path) for r in byn[n]]
                v = [x for x in v if x is not None]
                if not v:
                    continue
                m = statistics.median(v)
                xs.append(n)
                ys.append(m)
                lo.append(m - min(v))
                hi.append(max(v) - m)
            if not xs:
                continue
            style = "--" if p.startswith("jobs") else "-"
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", linestyle=style, capsize=3,
                        label="%s (%s)" % (p, run))
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("N (objects applied at once; log)")
        ax.set_ylabel(ylabel + (" (log)" if logy else ""), fontsize=8)
        ax.set_title("bench/scale: median of the runs at each N (bars: min-max); controller = "
                     "telo-operator or the job-only kube-controller-manager", fontsize=8)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fn = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(fn)
        plt.close(fig)
        made.append(fn)
    return made


# --- bench/builds -----------------------------------------------------------------------------

BUILD_PATHS = [
    ("first build", lambda rep: dig(rep, "first", "total_s")),
    ("cache hit", lambda rep: dig(rep, "hit", "total_s")),
    ("shared: all 10 Running", lambda rep: dig(rep, "shared", "all_running_s")),
    ("kaniko by hand (pod)", lambda rep: dig(rep, "hand", "total_s")),
    ("no build (base image)", lambda rep: dig(rep, "plain", "total_s")),
    ("raw pod", lambda rep: dig(rep, "raw", "total_s")),
]


def plot_builds(files, out, sources, root):
    runs = []
    for fn in files:
        r = load(fn)
        if not isinstance(r, dict) or r.get("schema") != "telo-bench-builds/1" or not r.get("repeats"):
            log("%s: not a telo-bench-builds/1 result, skipped" % fn)
            continue
        runs.append(r)
        sources.append(("bench/builds", rel(root, fn)))
    if not runs:
        return None
    runs.sort(key=lambda r: r.get("date", ""))
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=DPI)
    width = 0.8 / len(runs)
    for i, r in enumerate(runs):
        xs, meds, lo, hi = median_bars([[f(rep) for rep in r["repeats"]] for _, f in BUILD_PATHS],
                                       i, len(runs), width)
        bars = ax.bar(xs, meds, width, yerr=[lo, hi], capsize=2,
                      label="%s (%s, %d repeats)" % (r.get("label", "?"), r.get("commit", "?"),
                                                     len(r["repeats"])))
        for b, m in zip(bars, meds):
            ax.annotate("%.1f" % m, (b.get_x() + b.get_width() / 2, m), ha="center",
                        va="bottom", fontsize=6, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(BUILD_PATHS)), [p for p, _ in BUILD_PATHS], fontsize=8)
    ax.set_ylabel("seconds, apply to Running (hand: pod created to Succeeded)", fontsize=8)
    ax.set_title("bench/builds: per path, median of the repeats (bars: min-max)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fn = os.path.join(out, "builds-apply-to-running.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    return fn


# --- bench/gateway fan-out --------------------------------------------------------------------


def plot_fanout(files, out, sources, root):
    batches = []
    for fn in sorted(files):
        r = load(fn)
        if not isinstance(r, dict) or r.get("bench") != "gateway-fanout" or not r.get("runs"):
            log("%s: not a fanout.py result, skipped" % fn)
            continue
        name = os.path.basename(fn)[:-len(".json")]
        name = re.sub(r"^fanout-(\d{8}-)?", "", name)  # fanout-20261202-a-x -> a-x
        batches.append((name, r["runs"]))
        sources.append(("bench/gateway fanout", rel(root, fn)))
    if not batches:
        return []
    made = []
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=DPI)
    labels, crowded, peer = [], [], []
    for name, runs in batches:
        for run in runs:
            c = dig(run, "paired_ms", "loaded_p99")
            q = dig(run, "paired_ms", "peer_p99")
            if c is None or q is None:
                continue
            labels.append("%s\nrun %s" % (name.replace("-", "\n", 1), run.get("run", "?")))
            crowded.append(c)
            peer.append(q)
    xs = range(len(labels))
    b1 = ax.bar([x - 0.2 for x in xs], crowded, 0.4, label="crowded gateway (1,000 clients)")
    b2 = ax.bar([x + 0.2 for x in xs], peer, 0.4, label="idle peer gateway, same blocks")
    for bars in (b1, b2):
        for b in bars:
            v = b.get_height()
            ax.annotate("%.2f" % v, (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                        fontsize=6, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("keystroke round trip p99, ms (log)")
    ax.set_title("bench/gateway fanout: keystroke p99, crowded gateway vs idle peer, per run",
                 fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fn = os.path.join(out, "fanout-keystroke-p99.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    made.append(fn)

    fig, ax = plt.subplots(figsize=(8, 4), dpi=DPI)
    for i, (name, runs) in enumerate(batches):
        v = [dig(run, "rss_per_client_kib") for run in runs]
        v = [x for x in v if x is not None]
        ax.plot([i] * len(v), v, "o", alpha=0.7)
        if v:
            m = statistics.median(v)
            ax.annotate("median %.1f KiB" % m, (i, m), xytext=(8, 0), textcoords="offset points",
                        fontsize=7, va="center")
    ax.set_xticks(range(len(batches)), [n for n, _ in batches], fontsize=8)
    ax.set_xlim(-0.5, len(batches) - 0.2)
    top = max((v for _, runs in batches for v in
               (dig(run, "rss_per_client_kib") for run in runs) if v is not None), default=1)
    ax.set_ylim(0, top * 1.2)
    ax.set_ylabel("gateway RSS per idle client, KiB")
    ax.set_title("bench/gateway fanout: RSS per client (1,000 clients over 100 sessions), per run",
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fn = os.path.join(out, "fanout-rss-per-client.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    made.append(fn)
    return made


# --- bench/gateway flood ----------------------------------------------------------------------


def plot_flood(files, out, sources, root):
    """Every probe of every run in time: GET /readyz and another session's keystroke while one
    session floods (its output, or one-byte input messages), per gateway (label: new, old)."""
    runs = []
    for fn in sorted(files):
        r = load(fn)
        if not isinstance(r, dict) or r.get("bench") != "gateway-flood" or not r.get("runs"):
            log("%s: not a flood.py result, skipped" % fn)
            continue
        runs += r["runs"]
        sources.append(("bench/gateway flood", rel(root, fn)))
    if not runs:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=DPI, sharey=True)
    colours = {}
    for r in runs:
        line = (r.get("flood") or {}).get("timeline") or []
        if not line:
            continue
        name = "%s gateway, %s flood" % (r.get("label", "?"), r.get("mode", "output"))
        colour = colours.setdefault(name, "C%d" % len(colours))
        for ax, col in zip(axes, (1, 2)):
            ax.plot([p[0] for p in line], [p[col] * 1e3 for p in line], ".", color=colour,
                    alpha=0.5, markersize=3, label=name)
    for ax, what in zip(axes, ("GET /readyz", "keystroke echo on another session")):
        ax.set_yscale("log")
        ax.axhline(1000, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("seconds into the flood")
        ax.set_title(what, fontsize=9)
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        seen = {}
        for h, l in zip(handles, labels):
            seen.setdefault(l, h)
        ax.legend(seen.values(), seen.keys(), fontsize=7)
    axes[0].set_ylabel("answer time, ms (log; dashed: a kubelet probe's 1 s timeout)")
    fig.suptitle("bench/gateway flood: the gateway's answers to others while one session's app "
                 "floods, every probe of every run", fontsize=10)
    fn = os.path.join(out, "flood-answer-times.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    return [fn]


PLOT_BENCH = [("sessions-", "bench/sessions"), ("cache-memory-", "bench/cache-memory"),
              ("gateway-", "bench/gateway"), ("scale-", "bench/scale"), ("builds-", "bench/builds"),
              ("fanout-", "bench/gateway fanout"), ("limits-", "bench/limits"),
              ("flood-", "bench/gateway flood")]


# --- bench/limits -------------------------------------------------------------------------------

LIMITS_FIGURES = [("burst: operator CPU s", ("burst", "operator_cpu_s")),
                  ("idle: operator CPU s per s", ("idle", "operator_cpu_s_per_s")),
                  ("wake: operator CPU s", ("wake", "operator_cpu_s")),
                  ("wake: status writes per freed slot", ("wake", "status_writes_per_slot"))]
LIMITS_LABELS = {"off": "no limit (peer)", "on": "maxSessions 32",
                 "on-b": "maxSessions 32, the build before (TELO_BENCH_OPERATOR_B)"}


def plot_limits(files, out, sources, root):
    runs = {}
    for fn in files:
        r = load(fn)
        if not isinstance(r, dict) or r.get("schema") != "telo-bench-limits/1":
            continue
        runs.setdefault((r.get("label", "?"), r.get("commit", "?")), {}).setdefault(
            r["n"], []).append(r)
        sources.append(("bench/limits", rel(root, fn)))
    if not runs:
        return None
    sizes = sorted({n for per in runs.values() for n in per})
    series = sorted(runs, key=lambda k: (["off", "on", "on-b"].index(k[0])
                                         if k[0] in ("off", "on", "on-b") else 9, k[1]))
    fig, axes = plt.subplots(1, len(LIMITS_FIGURES), figsize=(15, 4.2), dpi=DPI)
    width = 0.8 / len(series)
    for ax, (title, path) in zip(axes, LIMITS_FIGURES):
        for i, key in enumerate(series):
            xs, meds, lo, hi = median_bars(
                [[dig(r, *path) for r in runs[key].get(n, [])] for n in sizes], i, len(series),
                width)
            if xs:  # one colour per series in every panel, whichever has no value there
                ax.bar(xs, meds, width, yerr=[lo, hi], capsize=2, color="C%d" % i,
                       label="%s, run of %s" % (LIMITS_LABELS.get(key[0], key[0]), key[1]))
        ax.set_xticks(range(len(sizes)), ["N=%d" % n for n in sizes], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(series), fontsize=7)
    fig.suptitle("bench/limits: what session limits cost the operator (median, bars: min-max)",
                 fontsize=10)
    fn = os.path.join(out, "limits-operator-cpu.png")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(fn)
    plt.close(fig)
    return fn


def previous_sources(out, missing, made):
    """From the SOURCES.md already in out: the source rows of the benches in missing, and their
    plots still in out that this report did not draw again."""
    try:
        with open(os.path.join(out, "SOURCES.md")) as f:
            lines = f.read().splitlines()
    except OSError:
        return [], []
    made = {os.path.basename(x) for x in made}
    rows = [ln for ln in lines if ln.startswith("| ") and ln.count("|") == 4 and
            ln.split("|")[1].strip() in missing]
    plots = []
    for ln in lines:
        m = re.match(r"^\| \[([^]]+\.png)\]", ln)
        if not m or m.group(1) in made or not os.path.exists(os.path.join(out, m.group(1))):
            continue
        bench = next((b for pre, b in PLOT_BENCH if m.group(1).startswith(pre)), None)
        if bench in missing:
            plots.append(m.group(1))
    return rows, plots


# --- main -------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--out")
    ap.add_argument("--sessions", action="append", default=[], help="a bench/sessions results dir")
    ap.add_argument("--cache-memory", action="append", default=[], help="a cache-memory.json")
    ap.add_argument("--gateway", action="append", default=[], help="a bench/gateway samples.json")
    ap.add_argument("--scale", action="append", default=[],
                    help="a bench/scale results dir (default: every one under bench/scale/results)")
    ap.add_argument("--builds", action="append", default=[],
                    help="a bench/builds results JSON (default: bench/builds/results/*.json)")
    ap.add_argument("--fanout", action="append", default=[],
                    help="a bench/gateway/fanout.py JSON (default: bench/gateway/results/fanout-*.json)")
    ap.add_argument("--flood", action="append", default=[],
                    help="a bench/gateway/flood.py JSON (default: bench/gateway/results/flood-*.json)")
    ap.add_argument("--limits", action="append", default=[],
                    help="a bench/limits result JSON (default: bench/limits/results/*/*.json)")
    a = ap.parse_args()
    out = a.out or os.path.join(a.root, "bench", "report", "plots")
    os.makedirs(out, exist_ok=True)
    tmp = os.environ.get("TMPDIR", "/tmp")
    explicit = (a.sessions or a.cache_memory or a.gateway or a.scale or a.builds or a.fanout or
                a.limits or a.flood)
    bench = os.path.join(a.root, "bench")
    sessions = a.sessions or ([] if explicit else find_sessions(tmp, bench))
    cache = a.cache_memory or ([] if explicit else find_cache_memory(tmp, bench))
    gateway = a.gateway or ([] if explicit else find_gateway(tmp))
    scale = a.scale or ([] if explicit else sorted(
        d for d in glob.glob(os.path.join(bench, "scale", "results", "*")) if scale_files(d)))
    builds = a.builds or ([] if explicit else sorted(
        glob.glob(os.path.join(bench, "builds", "results", "*.json"))))
    fanout = a.fanout or ([] if explicit else sorted(
        glob.glob(os.path.join(bench, "gateway", "results", "fanout-*.json"))))
    flood = a.flood or ([] if explicit else sorted(
        glob.glob(os.path.join(bench, "gateway", "results", "flood-*.json"))))
    limits = a.limits or ([] if explicit else sorted(
        glob.glob(os.path.join(bench, "limits", "results", "*", "*-*-*.json"))))

    sources, made, missing = [], [], []
    for name, found, plot in (("bench/sessions", sessions, plot_sessions),
                              ("bench/cache-memory", cache, plot_cache_memory),
                              ("bench/gateway", gateway, plot_gateway),
                              ("bench/scale", scale, plot_scale),
                              ("bench/builds", builds, plot_builds),
                              ("bench/gateway fanout", fanout, plot_fanout),
                              ("bench/gateway flood", flood, plot_flood),
                              ("bench/limits", limits, plot_limits)):
        if not found:
            missing.append(name)
            log("%s: no result files found (run it first; see its run.sh): nothing plotted" % name)
            continue
        if plot is not plot_gateway:
            res = plot(found, out, sources, a.root)
        else:
            res = plot(found, out, sources)
        made += [res] if isinstance(res, str) else (res or [])

    # A bench with no results here keeps the plots drawn from its results elsewhere (gateway
    # samples live in a /tmp of the machine that ran it) and their rows of SOURCES.md: a redraw
    # for one bench does not orphan another's plots.
    kept_sources, kept_plots = previous_sources(out, missing, made)
    with open(os.path.join(out, "SOURCES.md"), "w") as f:
        f.write("# Where these plots come from\n\n")
        f.write("Written by `bench/report/run.sh` from the result files below (their times are the\n"
                "files' modification times, or for a file in the tree the commit that last changed\n"
                "it). Nothing else is plotted.\n\n")
        f.write("| bench | result file | written |\n|---|---|---|\n")
        for bench, fn in sources:
            f.write("| %s | `%s` | %s |\n" % (bench, fn, written(a.root, fn)))
        for row in kept_sources:
            f.write(row + "\n")
        if missing:
            f.write("\nNo result files on the machine that made these plots, so no new plot: %s.\n"
                    % ", ".join(missing))
        if kept_plots:
            f.write("Their plots from an earlier report are kept, with their sources above: %s.\n"
                    % ", ".join(kept_plots))
        f.write("\n| plot |\n|---|\n")
        for fn in [os.path.basename(x) for x in made] + kept_plots:
            f.write("| [%s](%s) |\n" % (fn, fn))
    for fn in made:
        log("wrote " + fn)
    return 0


if __name__ == "__main__":
    sys.exit(main())

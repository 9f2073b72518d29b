"""Plots of the benches' own result files (run through bench/report/run.sh, which provides the
pinned matplotlib). Nothing here measures: every point comes from a file a bench wrote, and
SOURCES.md beside the plots names each file.

- bench/sessions (run.sh writes RESULTS/<N>-<path>-<repeat>.json, bench.py `run`): time until
  every object of a run is Running, per path and N (median of the valid repeats, min and max as
  the error bar; for the sessions path the end point is every TeloSession's status.phase Running).
- bench/cache-memory (run.sh writes RESULTS/cache-memory.json): bytes of memory per cached pod.
- bench/gateway (run.sh writes RESULTS/samples.json, bench.py --json): the keystroke round-trip
  distribution of every path (CDF) and the output throughput of every round.
"""

import argparse
import glob
import json
import os
import statistics
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


def find_sessions(tmp):
    dirs = [d for d in glob.glob(os.path.join(tmp, "telo-bench-sessions-*")) if sessions_files(d)]
    if not dirs:
        return []
    return [max(dirs, key=lambda d: max(os.path.getmtime(f) for f in sessions_files(d)))]


def find_cache_memory(tmp):
    files = [f for f in glob.glob(os.path.join(tmp, "telo-bench-cache-memory-*", "cache-memory.json"))
             if isinstance(load(f), dict)]
    return [newest(files)] if files else []


def find_gateway(tmp):
    files = [f for f in glob.glob(os.path.join(tmp, "*", "samples.json")) if is_gateway(f)]
    return [newest(files)] if files else []


# --- bench/sessions ---------------------------------------------------------------------------


def plot_sessions(dirs, out, sources):
    rows = {}
    for d in dirs:
        for fn in sessions_files(d):
            r = load(fn)
            rows.setdefault((r["n"], r["path"]), []).append(r)
            sources.append(("bench/sessions", fn))
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
            ax.annotate("%.2fs" % m, (b.get_x() + b.get_width() / 2, m), ha="center",
                        va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
        plotted += 1
    if not plotted:
        plt.close(fig)
        log("bench/sessions: no valid run (every run has an error): not plotted")
        return None
    ax.set_xticks(range(len(ns)), ["N = %d" % n for n in ns])
    ax.set_yscale("log")
    ax.set_ylabel("seconds until all N are Running (log)")
    ax.set_title("bench/sessions: time to Running, median of valid runs (bars: min-max)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fn = os.path.join(out, "sessions-time-to-running.png")
    fig.tight_layout()
    fig.savefig(fn)
    plt.close(fig)
    return fn


# --- bench/cache-memory -----------------------------------------------------------------------


def plot_cache_memory(files, out, sources):
    runs = []
    for fn in files:
        r = load(fn)
        if not r or not r.get("count"):
            log("%s: not a cache-memory result, skipped" % fn)
            continue
        runs.append(r)
        sources.append(("bench/cache-memory", fn))
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=DPI)
    series = [
        ("telo-informer RSS growth / N", lambda r: (r["informer_rss_kib"] - r["empty_rss_kib"]) * 1024 / r["count"]),
        ("telo-informer store estimate / N", lambda r: r["store_bytes"] / r["count"]),
        ("kube-controller-manager (job controller only) RSS / N", lambda r: r["kcm_rss_kib"] * 1024 / r["count"]),
    ]
    width = 0.8 / len(series)
    for i, (label, f) in enumerate(series):
        xs = [j + (i - 1) * width for j in range(len(runs))]
        vals = [f(r) for r in runs]
        bars = ax.bar(xs, vals, width, label=label)
        for b, v in zip(bars, vals):
            ax.annotate("%.0f B" % v, (b.get_x() + b.get_width() / 2, v), ha="center",
                        va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(runs)), ["%d pods" % r["count"] for r in runs])
    ax.set_ylabel("bytes per cached pod")
    ax.set_title("bench/cache-memory: memory per cached session pod")
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


# --- main -------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--out")
    ap.add_argument("--sessions", action="append", default=[], help="a bench/sessions results dir")
    ap.add_argument("--cache-memory", action="append", default=[], help="a cache-memory.json")
    ap.add_argument("--gateway", action="append", default=[], help="a bench/gateway samples.json")
    a = ap.parse_args()
    out = a.out or os.path.join(a.root, "bench", "report", "plots")
    os.makedirs(out, exist_ok=True)
    tmp = os.environ.get("TMPDIR", "/tmp")
    explicit = a.sessions or a.cache_memory or a.gateway
    sessions = a.sessions or ([] if explicit else find_sessions(tmp))
    cache = a.cache_memory or ([] if explicit else find_cache_memory(tmp))
    gateway = a.gateway or ([] if explicit else find_gateway(tmp))

    sources, made, missing = [], [], []
    for name, found, plot in (("bench/sessions", sessions, plot_sessions),
                              ("bench/cache-memory", cache, plot_cache_memory),
                              ("bench/gateway", gateway, plot_gateway)):
        if not found:
            missing.append(name)
            log("%s: no result files found (run it first; see its run.sh): nothing plotted" % name)
            continue
        res = plot(found, out, sources)
        made += [res] if isinstance(res, str) else (res or [])

    with open(os.path.join(out, "SOURCES.md"), "w") as f:
        f.write("# Where these plots come from\n\n")
        f.write("Written by `bench/report/run.sh` from the result files below (their times are the\n"
                "files' modification times). Nothing else is plotted.\n\n")
        f.write("| bench | result file | written |\n|---|---|---|\n")
        for bench, fn in sources:
            f.write("| %s | `%s` | %s |\n" % (bench, fn, stamp(fn)))
        if missing:
            f.write("\nNo result files on the machine that made these plots, so no plot: %s.\n"
                    % ", ".join(missing))
        f.write("\n| plot |\n|---|\n")
        for fn in made:
            f.write("| [%s](%s) |\n" % (os.path.basename(fn), os.path.basename(fn)))
    for fn in made:
        log("wrote " + fn)
    return 0


if __name__ == "__main__":
    sys.exit(main())

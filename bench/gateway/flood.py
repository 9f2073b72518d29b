"""One tenant's flood and everyone else's gateway (bench/gateway/flood.sh sets up the sessions):
how long the gateway takes to answer others while one session's app writes as fast as it can.

    flood.py --port GATEWAY_PORT --ns NS --token TOKEN --flood-token TOKEN --label NAME
             [--bytes 300000000] [--quiet-seconds 5] [--interval 0.05] [--json FILE]
    flood.py --summarize RUN.json... --json FILE

Sessions: `flood` (the flooding app, attached with --flood-token) and `solo` (another tenant's
terminal, --token). One run per call, on one gateway:
1. quiet: for --quiet-seconds, every --interval a GET /readyz (what a kubelet's probe asks; its
   default timeout is 1 s) and a keystroke on `solo` (the time to its echo);
2. flood (--mode output): a client attached to `flood` reads everything (in a thread) and
   types `flood --bytes`; the same probes go on until that client has seen `flood: done`.
   With --mode stdin that client instead sends one-byte stdin messages as fast as its socket
   takes them for --seconds (a line end every 64; the TTY echoes them back, and it reads that),
   and the probes go on as long.
Each probe waits at most 30 s. Figures: p50, p99 and max of each probe, quiet and during the
flood, the probes over 1 s, the flood's rate, and every probe of the flood in time (timeline:
bench/report plots it). With --cpu NAME=PID (repeated: the gateway, the API server, the kubelet)
each one's CPU seconds during the flood, and with --mode stdin the input the gateway forwarded
(its telo_gateway_stdin_bytes_total), so the CPU per MB of input carried. Standard library
only."""

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fanout import DONE, Client, Terminal, pct  # noqa: E402

PROBE_CAP = 30.0


def readyz(port):
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_CAP) as s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
            head = b""
            while b"\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
    except socket.timeout:
        return PROBE_CAP
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("GET /readyz answered %r" % head[:80])
    return time.perf_counter() - start


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_metric(port, name):
    with socket.create_connection(("127.0.0.1", port), timeout=PROBE_CAP) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
        body = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def keystroke(term, i):
    ch = bytes([ord("a") + i % 26])
    start = time.perf_counter()
    term.send(ch)
    while not any(ch in out for out in term.read(1.0)):
        if time.perf_counter() - start > PROBE_CAP:
            return PROBE_CAP
    took = time.perf_counter() - start
    if i % 50 == 49:
        term.send(b"\r")
        term.drain(0.05)
    return took


class Flooder(threading.Thread):
    """Reads all of the flooding session's output; done once `flood: done` came."""

    def __init__(self, client):
        super().__init__(daemon=True)
        self.c = client
        self.done = threading.Event()
        self.tail = b""

    def run(self):
        self.c.s.settimeout(None)
        while not self.done.is_set():
            data = self.c.s.recv(1 << 20)
            if not data:
                break
            for out in self.c.feed(data):
                self.tail = (self.tail + out)[-64:]
                if DONE in self.tail:
                    self.done.set()
        self.done.set()


class Typist(threading.Thread):
    """Sends one-byte stdin messages (channel 0, masked, a line end every 64) as fast as the
    socket takes them, for `seconds`; the Flooder on the same socket reads what comes back."""

    def __init__(self, sock, seconds):
        super().__init__(daemon=True)
        self.s, self.seconds = sock, seconds
        self.done = threading.Event()
        self.sent = 0
        mask = b"\x11\x22\x33\x44"
        frames = []
        for i in range(64):
            payload = b"\x00" + (b"\r" if i == 63 else b"x")
            frames.append(b"\x82\x82" + mask + bytes(b ^ mask[j % 4] for j, b in enumerate(payload)))
        self.block = b"".join(frames) * 256  # 16,384 messages

    def run(self):
        end = time.monotonic() + self.seconds
        try:
            while time.monotonic() < end:
                self.s.sendall(self.block)
                self.sent += 16384
        except OSError:
            pass
        self.done.set()


def figures(samples):
    return {"n": len(samples), "p50_ms": pct(samples, 0.5) * 1e3,
            "p99_ms": pct(samples, 0.99) * 1e3, "max_ms": max(samples) * 1e3,
            "over_1s": sum(1 for s in samples if s > 1.0)}


def probe_until(args, term, stop, counter, timeline=None):
    """Probes until stop(); timeline, when given, gets [seconds since its start, readyz s,
    keystroke s] per probe."""
    ready, keys, t0 = [], [], time.monotonic()
    while not stop():
        at = time.monotonic() - t0
        ready.append(readyz(args.port))
        keys.append(keystroke(term, counter[0]))
        counter[0] += 1
        if timeline is not None:
            timeline.append([round(at, 3), round(ready[-1], 6), round(keys[-1], 6)])
        time.sleep(args.interval)
    return ready, keys


def one_run(args):
    term = Terminal(args.port, args.ns, "solo", args.token)
    term.drain(0.3)
    counter = [0]
    result = {"label": args.label, "loadavg_start": os.getloadavg()[0]}
    quiet_end = time.monotonic() + args.quiet_seconds
    ready, keys = probe_until(args, term, lambda: time.monotonic() > quiet_end, counter)
    result["quiet"] = {"readyz": figures(ready), "keystroke": figures(keys)}

    flooder = Flooder(Client(args.port, args.ns, "flood", args.flood_token))
    flooder.start()
    time.sleep(0.5)  # the scrollback replay, before the flood
    cpus = dict(c.split("=", 1) for c in args.cpu)
    cpu_before = {name: cpu_seconds(int(pid)) for name, pid in cpus.items()}
    stdin_before = gateway_metric(args.port, "telo_gateway_stdin_bytes_total")
    start = time.monotonic()
    if args.mode == "output":
        flooder.c.send(b"flood %d\r" % args.bytes)
        stop = flooder.done.is_set
    else:
        typist = Typist(flooder.c.s, args.seconds)
        typist.start()
        stop = typist.done.is_set
    timeline = []
    ready, keys = probe_until(args, term, stop, counter, timeline)
    took = time.monotonic() - start
    cpu = {name: cpu_seconds(int(pid)) - cpu_before[name] for name, pid in cpus.items()}
    carried = gateway_metric(args.port, "telo_gateway_stdin_bytes_total") - stdin_before
    result["mode"] = args.mode
    result["flood"] = {"readyz": figures(ready), "keystroke": figures(keys), "timeline": timeline,
                       "seconds": took, "bytes_read": flooder.c.bytes,
                       "mb_per_s": flooder.c.bytes / took / 1e6}
    result["flood"]["cpu_s"] = cpu
    if args.mode == "stdin":
        result["flood"]["messages_sent"] = typist.sent
        result["flood"]["messages_per_s"] = typist.sent / took
        result["flood"]["stdin_bytes_forwarded"] = carried
        result["flood"]["cpu_s_per_mb_forwarded"] = {
            name: c / (carried / 1e6) if carried else None for name, c in cpu.items()}
    result["loadavg_end"] = os.getloadavg()[0]
    flooder.c.s.close()
    term.s.close()
    return result


def report(r):
    q, f = r["quiet"], r["flood"]
    print("%-10s readyz p50/p99/max quiet %.2f/%.2f/%.0f ms, flood %.2f/%.2f/%.0f ms (%d of %d "
          "over 1 s); keystroke p99 quiet %.2f ms, flood %.2f ms, max %.0f ms; %.0f MB in %.1f s; "
          "load %.1f-%.1f" % (
              r["label"], q["readyz"]["p50_ms"], q["readyz"]["p99_ms"], q["readyz"]["max_ms"],
              f["readyz"]["p50_ms"], f["readyz"]["p99_ms"], f["readyz"]["max_ms"],
              f["readyz"]["over_1s"], f["readyz"]["n"], q["keystroke"]["p99_ms"],
              f["keystroke"]["p99_ms"], f["keystroke"]["max_ms"], f["bytes_read"] / 1e6,
              f["seconds"], r["loadavg_start"], r["loadavg_end"]))
    if "messages_per_s" in f:
        print("%-10s stdin: %d one-byte messages sent, %.0f a second; %.1f MB forwarded" % (
            r["label"], f["messages_sent"], f["messages_per_s"],
            f["stdin_bytes_forwarded"] / 1e6))
    for name, c in sorted(f.get("cpu_s", {}).items()):
        per_mb = f.get("cpu_s_per_mb_forwarded", {}).get(name)
        print("%-10s cpu %s: %.2f s%s" % (r["label"], name, c,
                                          "" if per_mb is None else ", %.3f s per MB forwarded"
                                          % per_mb))


def summarize(paths, out):
    runs = [json.load(open(p)) for p in paths]
    by_label = {}
    for r in runs:
        by_label.setdefault("%s %s" % (r.get("mode", "output"), r["label"]), []).append(r)
    summary = {}
    for label, rs in by_label.items():
        def spread(key, probe, fig):
            return [r[key][probe][fig] for r in rs]
        summary[label] = {
            "runs": len(rs),
            "flood_readyz_p99_ms": spread("flood", "readyz", "p99_ms"),
            "flood_readyz_max_ms": spread("flood", "readyz", "max_ms"),
            "flood_readyz_over_1s": spread("flood", "readyz", "over_1s"),
            "flood_keystroke_p99_ms": spread("flood", "keystroke", "p99_ms"),
            "quiet_keystroke_p99_ms": spread("quiet", "keystroke", "p99_ms"),
            "flood_mb_per_s": [r["flood"]["mb_per_s"] for r in rs],
            "stdin_messages_per_s": [r["flood"].get("messages_per_s") for r in rs],
            "stdin_mb_forwarded": [(r["flood"].get("stdin_bytes_forwarded") or 0) / 1e6
                                   for r in rs],
            "cpu_s_per_mb_forwarded": {
                name: [(r["flood"].get("cpu_s_per_mb_forwarded") or {}).get(name) for r in rs]
                for name in rs[0]["flood"].get("cpu_s", {})},
            "median_flood_keystroke_p99_over_quiet": statistics.median(
                r["flood"]["keystroke"]["p99_ms"] / r["quiet"]["keystroke"]["p99_ms"]
                for r in rs),
        }
        print("%s: %s" % (label, json.dumps(summary[label])))
    with open(out, "w") as f:
        json.dump({"bench": "gateway-flood", "runs": runs, "summary": summary}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int)
    p.add_argument("--ns")
    p.add_argument("--token")
    p.add_argument("--flood-token")
    p.add_argument("--label", default="gateway")
    p.add_argument("--bytes", type=int, default=300000000)
    p.add_argument("--mode", choices=("output", "stdin"), default="output")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--quiet-seconds", type=float, default=5.0)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--json")
    p.add_argument("--cpu", action="append", default=[], metavar="NAME=PID")
    p.add_argument("--summarize", nargs="*")
    args = p.parse_args()
    if args.summarize:
        return summarize(args.summarize, args.json)
    r = one_run(args)
    report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()

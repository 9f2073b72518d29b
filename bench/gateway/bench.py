"""Terminal latency and throughput of attach clients, each driven on its own pseudo-terminal the
way a person's terminal drives it (bench/gateway/run.sh sets up the session and the paths).

    bench.py --path NAME=COMMAND... [--beside NAME=COMMAND]... [--keystrokes N] [--warmup N]
             [--rounds R] [--flood BYTES] [--json FILE]

Every path is a command line that ends up attached to the same session TTY (kubectl attach -it,
kubectl telo attach --direct, kubectl telo attach through the gateway). The app is the stand-in
CLI (hack/images/README.md): its TTY echoes what is typed (cooked mode), and `flood BYTES` writes
BYTES of text then `flood: done`.

- keystroke round trip: one byte typed, timed until its echo comes back on the terminal; N per
  round per path, paths interleaved round by round so drift and neighbours hit them alike; the
  line is ended with Enter after each burst so the app's input buffer stays short.
- the same load on the TTY for every path: every client attached to a TTY receives all of its
  output (the container runtime, the kubelet and the API server carry one stream per client).
  The gateway keeps its one upstream attached once a client came (the scrollback), so while the
  other paths are timed a second stream is there. `--beside NAME=COMMAND` keeps COMMAND attached
  and idle (a pseudo-terminal nobody types into, output discarded) while path NAME is timed:
  run.sh gives the gateway path an idle direct attach, so each path is timed with exactly one
  other stream on the TTY. Before the first round every path attaches once, untimed, which
  opens the gateway's upstream before anything is timed.
- warm-up: the first --warmup keystrokes of every attach are typed and not counted, so each
  path's connections and caches are warm when the timed ones start.
- output throughput: `flood BYTES` typed, timed from Enter until `flood: done` is read; MB/s of
  the bytes the terminal received (the TTY turns each LF into CRLF, so slightly more than BYTES).

- `--before NAME=COMMAND`: COMMAND runs (untimed, to completion) before every attach of path
  NAME: run.sh switches the gateway on its port between the current build and an older one, so
  old and new are timed in the same rounds, side by side with kubectl attach.
- `--cpu`: CPU seconds every process spent during each flood (/proc/PID/stat, utime + stime,
  read before Enter and after `flood: done`), summed by component (kube-apiserver, kubelet,
  containerd and its shims, the gateway, the client, standin.py, ...; processes that started and ended
  inside the flood, such as the app's `yes | head`, and other work on the machine are in
  `other`, the machine's busy time from /proc/stat less the rest), as seconds per 100 MB.
- the load average (1 min) is read at the start of every round.

Prints one line per path (p50, p99, mean of the round trips in ms; median MB/s) and ratios to the
first path: of the pooled percentiles, and the median over rounds of each round's own p50 ratio
(paired by round, so load that drifts between rounds cancels out). `--compare A/B` prints, for
path A over path B, the per-round ratios of MB/s and of p50: median, min, max and every round.
--json writes the raw samples."""

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time


class Attached:
    """A command on a pseudo-terminal, attached once its banner (or, for kubectl, a typed probe's
    echo) shows up."""

    def __init__(self, name, argv):
        self.name = name
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvp(argv[0], argv)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.buf = b""

    def read(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return b""
        try:
            data = os.read(self.fd, 1 << 20)
        except OSError:
            raise RuntimeError("%s: the client ended:\n%s" % (self.name, self.buf[-2000:]))
        self.buf = (self.buf + data)[-65536:]
        return data

    def expect(self, token, timeout=60):
        seen = b""
        deadline = time.monotonic() + timeout
        while token not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("%s: no %r after %ss:\n%s" % (self.name, token, timeout,
                                                                  self.buf[-2000:]))
            seen = (seen + self.read(left))[-4 * len(token) - 65536:]
        return seen

    def ready(self):
        """Types a probe until its echo arrives: the stream is up end to end."""
        probe = b"ready%d" % os.getpid()
        deadline = time.monotonic() + 60
        while True:
            os.write(self.fd, probe + b"\r")
            try:
                self.expect(b"echo: " + probe, timeout=3)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise

    def close(self):
        try:
            os.write(self.fd, b"\x10\x11")  # ctrl-p ctrl-q detaches both kubectl and ours
            time.sleep(0.2)
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


class Beside:
    """A client kept attached and idle beside a timed path: its terminal is a pseudo-terminal
    nobody types into (of the timed terminal's size, so it resizes nothing), its output goes to
    /dev/null; attached once it says so on stderr."""

    def __init__(self, argv):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        os.close(slave)
        said = b""
        deadline = time.monotonic() + 60
        while b"attached" not in said:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stderr], [], [], max(left, 0))
            data = os.read(self.proc.stderr.fileno(), 4096) if ready else b""
            if not data:
                self.close()
                raise RuntimeError("beside %s: not attached:\n%s" % (argv, said[-2000:]))
            said += data

    def close(self):
        try:
            os.write(self.master, b"\x10\x11")
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def keystrokes(a, n):
    """n round trips of one typed byte to its echo, in seconds."""
    samples = []
    for i in range(n):
        ch = bytes([ord("a") + i % 26])
        t0 = time.perf_counter()
        os.write(a.fd, ch)
        got = b""
        while ch not in got:
            data = a.read(5)
            if not data:
                raise RuntimeError("%s: keystroke %d not echoed in 5 s" % (a.name, i))
            got += data
        samples.append(time.perf_counter() - t0)
    os.write(a.fd, b"\r")
    a.expect(b"\n", timeout=10)
    time.sleep(0.05)
    while a.read(0.05):
        pass
    return samples


def flood(a, nbytes):
    """Seconds and bytes from Enter on `flood N` to `flood: done` on the terminal."""
    os.write(a.fd, b"flood %d" % nbytes)
    a.expect(b"flood %d" % nbytes, timeout=10)  # the typed command's own echo
    received = 0
    t0 = time.perf_counter()
    os.write(a.fd, b"\r")
    tail = b""
    while b"flood: done" not in tail:
        data = a.read(30)
        if not data:
            raise RuntimeError("%s: flood stalled after %d bytes" % (a.name, received))
        received += len(data)
        tail = (tail + data)[-64:]
    return time.perf_counter() - t0, received


# Components of the attach path, by the process name (comm) in /proc/PID/stat.
COMPONENTS = [
    ("kube-apiserver", ("kube-apiserver",)),
    ("kubelet", ("kubelet",)),
    ("containerd", ("containerd", "containerd-shim", "containerd-shim-runc-v2", "runc")),
    ("telo-gateway", ("telo-gateway",)),
    ("client", ("kubectl-telo", "kubectl")),
    ("bench.py", ("python3", "python")),
    ("standin", ("telo-standin",)),
    ("etcd", ("etcd",)),
]


# Processes whose read and write syscalls are counted too (/proc/PID/io): bytes per read and per
# write show the sizes the stream moves in (the client writes each message it receives to the
# terminal in one write, so its bytes per write are the size of the messages it gets).
# kubectl-telo counts the idle direct attach beside the timed path too: on the kubectl-attach
# path it is that one alone, a direct client of the API server.
IO_COMMS = {"telo-gateway": "gateway", "kubectl-telo": "kubectl-telo", "kubectl": "kubectl"}


def cpu_snapshot():
    """Per-process CPU seconds by pid (with its comm), and the machine's busy seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    procs = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        io = {}
        if comm in IO_COMMS:
            try:
                with open("/proc/%s/io" % pid) as f:
                    io = {k: int(v) for k, v in (line.split(": ") for line in f)}
            except OSError:
                pass
        procs[int(pid)] = (comm, (int(fields[11]) + int(fields[12])) / tick, io)
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(cpu) - cpu[3] - cpu[4]) / tick  # all but idle and iowait
    return procs, busy


def cpu_delta(before, after):
    """Seconds by component between two snapshots ("other": the rest of the machine's)."""
    (p0, busy0), (p1, busy1) = before, after
    out = {name: 0.0 for name, _ in COMPONENTS}
    for pid, (comm, secs, io) in p1.items():
        prev = p0.get(pid)
        d = secs - (prev[1] if prev and prev[0] == comm else 0.0)
        if comm in IO_COMMS and prev and prev[0] == comm and io and prev[2]:
            for k in ("syscr", "rchar", "syscw", "wchar"):
                key = "io:%s:%s" % (IO_COMMS[comm], k)
                out[key] = out.get(key, 0) + io[k] - prev[2][k]
        for name, comms in COMPONENTS:
            if comm in comms or (name == "containerd" and comm.startswith("containerd-shim")):
                out[name] += d
                break
    counted = sum(v for k, v in out.items() if not k.startswith("io:"))
    out["other"] = max(0.0, (busy1 - busy0) - counted)
    out["machine"] = busy1 - busy0
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def spread(xs):
    xs = sorted(xs)
    return "median x%.2f  min x%.2f  max x%.2f  rounds %s" % (
        statistics.median(xs), xs[0], xs[-1], " ".join("%.2f" % x for x in xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", action="append", required=True, help="NAME=COMMAND")
    ap.add_argument("--beside", action="append", default=[], help="NAME=COMMAND")
    ap.add_argument("--keystrokes", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flood", type=int, default=20_000_000)
    ap.add_argument("--json")
    ap.add_argument("--before", action="append", default=[], help="NAME=COMMAND")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--compare", action="append", default=[], help="A/B: per-round ratios")
    args = ap.parse_args()
    paths = []
    for spec in args.path:
        name, _, cmd = spec.partition("=")
        paths.append((name, cmd.split()))

    beside = {}
    for spec in args.beside:
        name, _, cmd = spec.partition("=")
        beside[name] = cmd.split()

    before = {}
    for spec in args.before:
        name, _, cmd = spec.partition("=")
        before[name] = cmd.split()

    for name, argv in paths:  # untimed: every path attached once (the gateway's upstream opens)
        if name in before:
            subprocess.run(before[name], check=True)
        a = Attached(name, argv)
        try:
            a.ready()
        finally:
            a.close()

    rtt = {name: [] for name, _ in paths}
    rate = {name: [] for name, _ in paths}
    round_p50 = {name: [] for name, _ in paths}
    cpu = {name: [] for name, _ in paths}
    short = {name: 0 for name, _ in paths}
    io = {name: [] for name, _ in paths}
    loads = []
    for r in range(args.rounds):
        loads.append(loadavg())
        order = paths[r % len(paths):] + paths[:r % len(paths)]
        for name, argv in order:
            if name in before:
                subprocess.run(before[name], check=True)
            other = Beside(beside[name]) if name in beside else None
            a = Attached(name, argv)
            try:
                a.ready()
                if args.warmup:
                    keystrokes(a, args.warmup)
                got = keystrokes(a, args.keystrokes)
                rtt[name] += got
                round_p50[name].append(statistics.median(got))
                if args.flood:
                    snap = cpu_snapshot() if args.cpu else None
                    secs, got = flood(a, args.flood)
                    rate[name].append(got / secs / 1e6)
                    if got < args.flood:  # a gateway's gap marker instead of output
                        print("bench: round %d %s: flood short, %d of %d bytes" % (
                            r + 1, name, got, args.flood), file=sys.stderr)
                        short[name] += 1
                    if snap is not None:
                        d = cpu_delta(snap, cpu_snapshot())
                        cpu[name].append(
                            {k: v / got * 1e8 for k, v in d.items() if not k.startswith("io:")})
                        io[name].append({k: v for k, v in d.items() if k.startswith("io:")})
            finally:
                a.close()
                if other is not None:
                    other.close()
            print("bench: round %d %s done" % (r + 1, name), file=sys.stderr)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rtt_s": rtt, "mb_s": rate, "round_p50_s": round_p50,
                       "keystrokes": args.keystrokes, "warmup": args.warmup,
                       "rounds": args.rounds, "flood_bytes": args.flood, "cpu": cpu, "io": io,
                       "load": loads, "short": short}, f)

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]

    base = paths[0][0]
    b50, b99 = pct(rtt[base], 50), pct(rtt[base], 99)
    bmb = statistics.median(rate[base]) if rate[base] else 0
    print("%-22s %9s %9s %9s %10s   %s" % ("path", "p50 ms", "p99 ms", "mean ms", "MB/s",
                                           "ratios to " + base))
    for name, _ in paths:
        p50, p99, mean = pct(rtt[name], 50), pct(rtt[name], 99), statistics.mean(rtt[name])
        mb = statistics.median(rate[name]) if rate[name] else 0
        paired = statistics.median(
            x / b for x, b in zip(round_p50[name], round_p50[base]))
        print("%-22s %9.3f %9.3f %9.3f %10.1f   p50 x%.3f (per round x%.3f)  p99 x%.2f  "
              "MB/s x%.2f" % (name, p50 * 1e3, p99 * 1e3, mean * 1e3, mb, p50 / b50, paired,
                              p99 / b99, mb / bmb if bmb else 0))
    print("load average (1 min) at each round's start: %s" % " ".join("%.1f" % x for x in loads))
    for name, n in short.items():
        if n:
            print("%s: %d of %d floods arrived short (output dropped)" % (name, n, args.rounds))
    for spec in args.compare:
        a, _, b = spec.partition("/")
        if rate[a] and rate[b]:
            print("%s / %s MB/s per round: %s" % (
                a, b, spread([x / y for x, y in zip(rate[a], rate[b])])))
        print("%s / %s p50 per round:  %s" % (
            a, b, spread([x / y for x, y in zip(round_p50[a], round_p50[b])])))
    if args.cpu:
        keys = [name for name, _ in COMPONENTS] + ["other", "machine"]
        print("CPU s per 100 MB of flood (median over rounds): " + " ".join(keys))
        for name, _ in paths:
            if cpu[name]:
                print("%-22s %s" % (name, " ".join(
                    "%.2f" % statistics.median(d[k] for d in cpu[name]) for k in keys)))
        print("bytes per read and per write syscall during the floods (pooled over rounds; the "
              "client's writes are the messages it got)")
        for name, _ in paths:
            tot = {}
            for d in io[name]:
                for k, v in d.items():
                    tot[k] = tot.get(k, 0) + v
            parts = []
            for who in ("gateway", "kubectl-telo", "kubectl"):
                k = "io:%s:" % who
                if tot.get(k + "syscr"):
                    parts.append("%s read %.0f (%d) write %.0f (%d)" % (
                        who, tot[k + "rchar"] / tot[k + "syscr"], tot[k + "syscr"],
                        tot[k + "wchar"] / max(1, tot[k + "syscw"]), tot[k + "syscw"]))
            print("%-22s %s" % (name, "; ".join(parts)))



if __name__ == "__main__":
    main()

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

Prints one line per path (p50, p99, mean of the round trips in ms; median MB/s) and ratios to the
first path: of the pooled percentiles, and the median over rounds of each round's own p50 ratio
(paired by round, so load that drifts between rounds cancels out); --json writes the raw samples."""

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", action="append", required=True, help="NAME=COMMAND")
    ap.add_argument("--beside", action="append", default=[], help="NAME=COMMAND")
    ap.add_argument("--keystrokes", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flood", type=int, default=20_000_000)
    ap.add_argument("--json")
    args = ap.parse_args()
    paths = []
    for spec in args.path:
        name, _, cmd = spec.partition("=")
        paths.append((name, cmd.split()))

    beside = {}
    for spec in args.beside:
        name, _, cmd = spec.partition("=")
        beside[name] = cmd.split()

    for name, argv in paths:  # untimed: every path attached once (the gateway's upstream opens)
        a = Attached(name, argv)
        try:
            a.ready()
        finally:
            a.close()

    rtt = {name: [] for name, _ in paths}
    rate = {name: [] for name, _ in paths}
    round_p50 = {name: [] for name, _ in paths}
    for r in range(args.rounds):
        order = paths[r % len(paths):] + paths[:r % len(paths)]
        for name, argv in order:
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
                    secs, got = flood(a, args.flood)
                    rate[name].append(got / secs / 1e6)
            finally:
                a.close()
                if other is not None:
                    other.close()
            print("bench: round %d %s done" % (r + 1, name), file=sys.stderr)

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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rtt_s": rtt, "mb_s": rate, "round_p50_s": round_p50,
                       "keystrokes": args.keystrokes, "warmup": args.warmup,
                       "rounds": args.rounds, "flood_bytes": args.flood}, f)


if __name__ == "__main__":
    main()

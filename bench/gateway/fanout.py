"""Many clients on one gateway (issue 20; bench/gateway/fanout.sh sets up the sessions):
memory per attached client, keystroke latency with a crowd attached, and fan-out fairness.

    fanout.py --port GATEWAY_PORT --ns NS --token TOKEN --pid GATEWAY_PID
              [--sessions 100] [--per-session 10] [--viewers 200] [--flood 10000000]
              [--keystrokes 2000] [--run K] [--workers 4] [--json FILE]
    fanout.py --summarize RUN.json... --json FILE


Sessions are named bench-0 .. bench-(N-1), solo (the timed terminal's) and fan (the fan-out
one); one token attaches to all.
One run per call (fanout.sh starts a fresh gateway for each; --summarize gives the spread):
1. quiet: one terminal on `solo` (no other client) types --keystrokes keys, one at a time
   (p50/p99 round trip), with the crowd's processes running but nothing attached;
2. one client per session (--sessions clients, so every session has its upstream), the
   gateway's VmRSS once settled; then the rest up to --per-session per session, VmRSS again:
   RSS per idle attached client = the difference over the clients added;
3. loaded: the same keystrokes on `solo` with the crowd attached to the other sessions; with
   --peer-port, again in alternating blocks of 50 with a terminal on a second gateway that
   has no crowd (the same machine load on both: p99 loaded over peer is the crowd's cost); then
   shared: the same on bench-0, whose --per-session crowd clients receive every echo too;
4. fan-out: --viewers clients on `fan`, spread over --workers processes that each read all of
   theirs; a terminal types `flood --flood`; each viewer's time from the keystroke to the
   `flood: done` line and its bytes. Slowest over fastest, and how many bytes each got.
Every client reads what it is sent and answers pings, as a terminal does. Clients come from
127.0.2.x addresses, 20 of them, so that per-address limits see a spread. Standard library only."""

import argparse
import base64
import json
import multiprocessing
import os
import resource
import selectors
import socket
import statistics
import struct
import sys
import time

DONE = b"flood: done"


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def upgrade(sock, ns, session, token):
    """Sends the upgrade and reads the head; returns the bytes after it."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(("GET /v1/namespaces/%s/telosessions/%s/attach HTTP/1.1\r\nHost: gateway\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"
                  "Authorization: Bearer %s\r\n\r\n" % (ns, session, key, token)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("the gateway closed the upgrade of %s" % session)
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError("attach to %s refused: %r" % (session, head[:200]))
    return head.split(b"\r\n\r\n", 1)[1]


def masked(opcode, payload):
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + body


class Client:
    """A WebSocket client that parses frames only to answer pings and find stdout payloads."""

    def __init__(self, port, ns, session, token, source=None):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if source:
            self.s.bind((source, 0))
        self.s.connect(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(upgrade(self.s, ns, session, token))
        self.bytes = 0
        self.done_at = None

    def feed(self, data):
        """Consumes received bytes; returns the stdout payloads (pings answered)."""
        self.buf += data
        out = []
        while len(self.buf) >= 2:
            n, pos = self.buf[1] & 0x7F, 2
            if n == 126:
                if len(self.buf) < 4:
                    break
                n, pos = struct.unpack(">H", self.buf[2:4])[0], 4
            elif n == 127:
                if len(self.buf) < 10:
                    break
                n, pos = struct.unpack(">Q", self.buf[2:10])[0], 10
            if len(self.buf) < pos + n:
                break
            op, payload = self.buf[0] & 0x0F, bytes(self.buf[pos:pos + n])
            del self.buf[:pos + n]
            if op == 0x9:
                self.s.sendall(masked(0xA, payload))
            elif op == 0x2 and payload[:1] == b"\x01":
                out.append(payload[1:])
                self.bytes += n - 1
        return out

    def send(self, data):
        self.s.sendall(masked(0x2, b"\x00" + data))


class Terminal(Client):
    def read(self, timeout):
        self.s.settimeout(timeout)
        try:
            data = self.s.recv(1 << 20)
        except socket.timeout:
            return []
        if not data:
            raise RuntimeError("the gateway closed the terminal")
        return self.feed(data)

    def drain(self, quiet=0.3):
        while self.read(quiet):
            pass

    def keystrokes(self, n):
        samples = []
        for i in range(n):
            ch = bytes([ord("a") + i % 26])
            start = time.perf_counter()
            self.send(ch)
            while not any(ch in out for out in self.read(10)):
                if time.perf_counter() - start > 10:
                    raise RuntimeError("no echo of %r in 10 s" % ch)
            samples.append(time.perf_counter() - start)
            if i % 50 == 49:
                self.send(b"\r")
                self.drain()
        self.send(b"\r")
        self.drain()
        return samples


def worker(conn, port, ns, token, index):
    """A process holding clients: ('attach', [(session, source)...]) attaches them, ('arm',)
    starts watching for the flood's end, ('report',) answers each client's (bytes, done_at),
    ('close',) ends. Between commands it reads everything its clients are sent."""
    raise_nofile()
    sel = selectors.DefaultSelector()
    clients = []
    armed = False
    while True:
        if conn.poll(0):
            cmd = conn.recv()
            if cmd[0] == "attach":
                try:
                    for session, source in cmd[1]:
                        c = Client(port, ns, session, token, source)
                        c.s.setblocking(False)
                        sel.register(c.s, selectors.EVENT_READ, c)
                        clients.append(c)
                    conn.send(("ok", len(clients)))
                except (OSError, RuntimeError) as e:
                    conn.send(("error", "worker %d: %s" % (index, e)))
            elif cmd[0] == "arm":
                for c in clients:
                    c.bytes, c.done_at, c.tail = 0, None, b""
                armed = True
                conn.send(("ok",))
            elif cmd[0] == "report":
                conn.send(("ok", [(c.bytes, c.done_at) for c in clients]))
            else:
                conn.send(("ok",))
                return
        for key, _ in sel.select(0.02):
            c = key.data
            try:
                data = c.s.recv(1 << 18)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(c.s)
                continue
            for out in c.feed(data):
                if armed and c.done_at is None:
                    window = c.tail + out
                    if DONE in window:
                        c.done_at = time.time()
                    c.tail = window[-len(DONE):]


class Crowd:
    def __init__(self, args, n_workers):
        self.pipes, self.procs = [], []
        for i in range(n_workers):
            parent, child = multiprocessing.Pipe()
            p = multiprocessing.Process(target=worker, args=(child, args.port, args.ns, args.token, i),
                                        daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def call(self, cmds):
        for pipe, cmd in zip(self.pipes, cmds):
            pipe.send(cmd)
        answers = [pipe.recv() for pipe in self.pipes[:len(cmds)]]
        for a in answers:
            if a[0] != "ok":
                raise RuntimeError(a[1])
        return answers

    def attach(self, targets):
        """Spreads (session, source) pairs over the workers, 50 at a time per call."""
        n = len(self.pipes)
        for start in range(0, len(targets), 50 * n):
            batch = targets[start:start + 50 * n]
            self.call([("attach", batch[i::n]) for i in range(n)])

    def close(self):
        for pipe in self.pipes:
            pipe.send(("close",))
        for p in self.procs:
            p.join(5)


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def settle_rss(pid, seconds=2.0):
    time.sleep(seconds)
    return rss_kib(pid)


def one_run(args, run):
    sources = ["127.0.2.%d" % (1 + i % 20) for i in range(args.sessions * args.per_session)]
    result = {"run": run, "loadavg_start": os.getloadavg()[0]}
    # The crowd's processes run (idle) during the quiet keystrokes too: the only difference
    # between quiet and loaded is the clients attached.
    crowd = Crowd(args, args.workers)
    term = Terminal(args.port, args.ns, "solo", args.token)
    term.keystrokes(20)
    quiet = term.keystrokes(args.keystrokes)
    result["quiet_ms"] = {"p50": pct(quiet, 0.5) * 1e3, "p99": pct(quiet, 0.99) * 1e3}

    rss0 = settle_rss(args.pid)
    first = [("bench-%d" % s, sources[s]) for s in range(args.sessions)]
    crowd.attach(first)
    rss1 = settle_rss(args.pid)
    rest = [("bench-%d" % s, sources[args.sessions + s * (args.per_session - 1) + k])
            for s in range(args.sessions) for k in range(args.per_session - 1)]
    t = time.perf_counter()
    crowd.attach(rest)
    attach_s = time.perf_counter() - t
    rss2 = settle_rss(args.pid)
    clients = len(first) + len(rest)
    result.update({"clients": clients, "attach_rest_s": attach_s,
                   "rss_kib": {"before": rss0, "one_per_session": rss1, "all": rss2},
                   "rss_per_session_kib": (rss1 - rss0) / max(1, len(first)),
                   "rss_per_client_kib": (rss2 - rss1) / max(1, len(rest))})
    term.keystrokes(20)
    loaded = term.keystrokes(args.keystrokes)
    result["loaded_ms"] = {"p50": pct(loaded, 0.5) * 1e3, "p99": pct(loaded, 0.99) * 1e3}
    result["p99_loaded_over_quiet"] = result["loaded_ms"]["p99"] / result["quiet_ms"]["p99"]
    if args.peer_port:
        # The same keystrokes through a peer gateway nobody else uses, in alternating blocks of
        # 50, so that the machine's load falls on both alike: the crowd's own cost is the ratio.
        peer = Terminal(args.peer_port, args.ns, "solo", args.token)
        peer.keystrokes(20)
        mine, theirs = [], []
        for _ in range(max(1, args.keystrokes // 50)):
            mine += term.keystrokes(50)
            theirs += peer.keystrokes(50)
        peer.s.close()
        result["paired_ms"] = {"loaded_p50": pct(mine, 0.5) * 1e3,
                               "loaded_p99": pct(mine, 0.99) * 1e3,
                               "peer_p50": pct(theirs, 0.5) * 1e3,
                               "peer_p99": pct(theirs, 0.99) * 1e3}
        result["p99_loaded_over_peer"] = pct(mine, 0.99) / pct(theirs, 0.99)
    term.s.close()
    # The same on a session the crowd shares: every echo also goes to its other viewers.
    term = Terminal(args.port, args.ns, "bench-0", args.token)
    term.keystrokes(20)
    shared = term.keystrokes(args.keystrokes)
    result["shared_ms"] = {"p50": pct(shared, 0.5) * 1e3, "p99": pct(shared, 0.99) * 1e3}
    term.s.close()

    # Fan-out: viewers of `fan` in their own workers (the crowd stays attached).
    fan = Crowd(args, args.workers)
    fan.attach([("fan", "127.0.3.%d" % (1 + i % 20)) for i in range(args.viewers)])
    typist = Terminal(args.port, args.ns, "fan", args.token)
    typist.drain()
    fan.call([("arm",)] * len(fan.pipes))
    start = time.time()
    typist.send(b"flood %d\r" % args.flood)
    deadline = start + args.flood_timeout
    while time.time() < deadline:
        got = [r for a in fan.call([("report",)] * len(fan.pipes)) for r in a[1]]
        if all(done is not None for _, done in got):
            break
        time.sleep(0.2)
    got = [r for a in fan.call([("report",)] * len(fan.pipes)) for r in a[1]]
    times = [done - start for _, done in got if done is not None]
    result["fanout"] = {
        "viewers": args.viewers, "flood_bytes": args.flood,
        "finished": len(times),
        "fastest_s": min(times) if times else None, "slowest_s": max(times) if times else None,
        "slowest_over_fastest": (max(times) / min(times)) if times else None,
        "bytes_min": min(b for b, _ in got), "bytes_max": max(b for b, _ in got),
        "rss_kib_after": rss_kib(args.pid)}
    typist.s.close()
    fan.close()
    crowd.close()
    result["loadavg_end"] = os.getloadavg()[0]
    return result


def report(r):
    f = r["fanout"]
    print("run %d: load %.1f-%.1f; %d clients over %d sessions: RSS %d -> %d -> %d KiB, "
          "%.1f KiB per session's upstream, %.1f KiB per idle client; keystroke p50/p99 "
          "quiet %.3f/%.3f ms, loaded %.3f/%.3f ms (p99 x%.2f), shared %.3f/%.3f ms; fan-out "
          "%d/%d viewers got %d MB: fastest %.2f s, slowest %.2f s (x%.2f), bytes %d..%d"
          % (r["run"], r["loadavg_start"], r["loadavg_end"], r["clients"], r["sessions"],
             r["rss_kib"]["before"], r["rss_kib"]["one_per_session"], r["rss_kib"]["all"],
             r["rss_per_session_kib"], r["rss_per_client_kib"], r["quiet_ms"]["p50"],
             r["quiet_ms"]["p99"], r["loaded_ms"]["p50"], r["loaded_ms"]["p99"],
             r["p99_loaded_over_quiet"], r["shared_ms"]["p50"], r["shared_ms"]["p99"],
             f["finished"], f["viewers"], f["flood_bytes"] // 1_000_000, f["fastest_s"] or -1,
             f["slowest_s"] or -1, f["slowest_over_fastest"] or -1, f["bytes_min"],
             f["bytes_max"]), flush=True)
    if "paired_ms" in r:
        p = r["paired_ms"]
        print("run %d: alternating blocks, crowded gateway p50/p99 %.3f/%.3f ms, peer gateway "
              "%.3f/%.3f ms: p99 x%.2f" % (r["run"], p["loaded_p50"], p["loaded_p99"],
                                            p["peer_p50"], p["peer_p99"], r["p99_loaded_over_peer"]),
              flush=True)


def summarize(paths, out):
    runs = [json.load(open(p))["runs"][0] for p in paths]
    summary = {
        "rss_per_client_kib": [r["rss_per_client_kib"] for r in runs],
        "rss_per_session_kib": [r["rss_per_session_kib"] for r in runs],
        "p50_loaded_over_quiet": [r["loaded_ms"]["p50"] / r["quiet_ms"]["p50"] for r in runs],
        "p99_loaded_over_quiet": [r["p99_loaded_over_quiet"] for r in runs],
        "p99_shared_over_quiet": [r["shared_ms"]["p99"] / r["quiet_ms"]["p99"] for r in runs],
        "p99_loaded_over_peer": [r.get("p99_loaded_over_peer") for r in runs],
        "fanout_slowest_over_fastest": [r["fanout"]["slowest_over_fastest"] for r in runs],
    }
    for k, v in summary.items():
        vals = [x for x in v if x is not None]
        if vals:
            print("%s: median %.2f (min %.2f, max %.2f) over %d runs"
                  % (k, statistics.median(vals), min(vals), max(vals), len(vals)))
    if out:
        with open(out, "w") as f:
            json.dump({"bench": "gateway-fanout", "runs": runs, "summary": summary}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", nargs="+")
    ap.add_argument("--port", type=int)
    ap.add_argument("--ns")
    ap.add_argument("--token")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--peer-port", type=int, help="a second gateway with no crowd, timed alongside")
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--per-session", type=int, default=10)
    ap.add_argument("--viewers", type=int, default=200)
    ap.add_argument("--flood", type=int, default=10_000_000)
    ap.add_argument("--flood-timeout", type=float, default=120)
    ap.add_argument("--keystrokes", type=int, default=2000)
    ap.add_argument("--run", type=int, default=1)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize, args.json)
        return 0
    if None in (args.port, args.ns, args.token, args.pid):
        ap.error("--port, --ns, --token and --pid are required for a run")
    raise_nofile()
    r = one_run(args, args.run)
    r["sessions"] = args.sessions
    report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "gateway-fanout", "args": vars(args), "runs": [r]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

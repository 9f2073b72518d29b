"""The gateway under 2,000 hostile connections (bench/gateway/hostile.sh sets up the session):
a legitimate client's keystroke round trip, quiet and under load, and the gateway's RSS.

    hostile.py --url WS_URL --token TOKEN --pid GATEWAY_PID --attack-url WS_URL
               --attack-token TOKEN [--runs 3] [--keystrokes 200]
               [--idle 800] [--auth 800] [--unauth 400]

The load, from a child process on loopback addresses 127.0.1-3.x (the gateway limits per
address; 20 addresses per kind keep each under the default 64 pending):
- idle: connections that never send a head (the gateway closes them after 10 s; they are
  opened again at once), 127.0.1.x;
- auth: clients attached to the attacker's own session (--attack-url, its token) that never
  read and send a burst of 64 pings (125 bytes each) every 2 s, 127.0.2.x;
- unauth: requests for the attacker's session with a random bearer token, the head's last line end sent 1-8 s after the
  rest (so the slot is open most of the time), each slot asking again at once after its answer
  (401 or 429), 127.0.3.x.
Each run: --keystrokes keystrokes quiet (after 20 untimed), then the load until every kind is
established, the same number of keystrokes under it while the gateway's VmRSS is sampled every
0.2 s, then the load stops and the gateway settles. Prints per run the p50/p99 round trips, the
ratio of p50s, the peak RSS and the connections open; then the spread over the runs."""

import argparse
import base64
import multiprocessing
import os
import random
import re
import resource
import secrets
import selectors
import socket
import statistics
import struct
import sys
import time
import urllib.parse

PING = b"\x89\xfd\x00\x00\x00\x00" + b"p" * 125  # masked with the zero mask: legal, RFC 6455 5.3


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def upgrade_request(path, token):
    key = base64.b64encode(os.urandom(16)).decode()
    return ("GET %s HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n"
            "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\nAuthorization: Bearer %s\r\n\r\n"
            % (path, key, token)).encode()


class Terminal:
    """The legitimate client: a WebSocket on v5.channel.k8s.io typing one byte at a time."""

    def __init__(self, host, port, path, token):
        self.s = socket.create_connection((host, port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.sendall(upgrade_request(path, token))
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError("attach refused: %r" % head[:200])
        self.buf = b""

    def send(self, data):
        payload = b"\x00" + data  # stdin
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.s.sendall(bytes([0x82, 0x80 | len(payload)]) + mask + masked)

    def frames(self, timeout):
        """Yields the stdout payloads that arrive within timeout."""
        self.s.settimeout(timeout)
        try:
            data = self.s.recv(1 << 20)
        except socket.timeout:
            return []
        if not data:
            raise RuntimeError("the gateway closed the terminal")
        self.buf += data
        out = []
        while len(self.buf) >= 2:
            n = self.buf[1] & 0x7F
            pos = 2
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
            op, payload = self.buf[0] & 0x0F, self.buf[pos:pos + n]
            self.buf = self.buf[pos + n:]
            if op == 0x9:  # answer the gateway's pings: a legitimate client reads and answers
                mask = os.urandom(4)
                self.s.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask +
                               bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
            elif op == 0x2 and payload[:1] == b"\x01":
                out.append(payload[1:])
        return out

    def drain(self, quiet=0.3):
        while self.frames(quiet):
            pass

    def keystroke(self, ch):
        start = time.perf_counter()
        self.send(ch)
        while True:
            for out in self.frames(10):
                if ch in out:
                    return time.perf_counter() - start
            if time.perf_counter() - start > 10:
                raise RuntimeError("no echo of %r in 10 s" % ch)

    def type_round(self, n):
        samples = []
        for i in range(n):
            ch = bytes([ord("a") + i % 26])
            samples.append(self.keystroke(ch))
            if i % 50 == 49:
                self.send(b"\r")  # keep the app's line short
                self.drain()
        self.send(b"\r")
        self.drain()
        return samples


def load(host, port, path, token, counts, ready, stop, stats):
    """The hostile connections, until stop is set; ready is set once each kind is established."""
    raise_nofile()
    sel = selectors.DefaultSelector()
    state = {}  # socket -> (kind, source, phase, next time)
    now = time.monotonic
    opened = {"idle": 0, "auth": 0, "unauth": 0}
    answers = {}

    def source(kind, i):
        return "127.0.%d.%d" % ({"idle": 1, "auth": 2, "unauth": 3}[kind], 1 + i % 20)

    def open_one(kind, i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
        s.bind((source(kind, i), 0))
        s.setblocking(False)
        try:
            s.connect((host, port))
        except BlockingIOError:
            pass
        state[s] = [kind, i, "connecting", 0.0]
        sel.register(s, selectors.EVENT_WRITE)
        opened[kind] += 1

    def close_one(s, again_in):
        kind, i = state.pop(s)[:2]
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass  # an attached one is not watched
        s.close()
        pending_reopen.append((now() + again_in, kind, i))

    pending_reopen = []
    for kind in ("idle", "auth", "unauth"):
        for i in range(counts[kind]):
            pending_reopen.append((now() + random.random() * 3, kind, i))
    next_ping = now() + 2
    while not stop.is_set():
        t = now()
        due = [p for p in pending_reopen if p[0] <= t]
        pending_reopen[:] = [p for p in pending_reopen if p[0] > t]
        for _, kind, i in due:
            try:
                open_one(kind, i)
            except OSError:
                pending_reopen.append((t + 1, kind, i))
        for key, ev in sel.select(0.05):
            s = key.fileobj
            st = state.get(s)
            if st is None:
                continue
            kind = st[0]
            if st[2] == "connecting":
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    close_one(s, 1)
                    continue
                st[2] = "open"
                if kind == "idle":
                    sel.modify(s, selectors.EVENT_READ)  # never sends: waits to be closed
                    continue
                tok = token if kind == "auth" else secrets.token_hex(24)
                req = upgrade_request(path, tok)
                if kind == "unauth":
                    # All but the head's last line end now, the rest 1-8 s later (within the
                    # gateway's 10 s for a head): the slot stays open most of the time.
                    req = req[:-2]
                    st[2], st[3] = "partial", now() + 1 + 7 * random.random()
                try:
                    s.send(req)
                except OSError:
                    close_one(s, 1)
                    continue
                sel.modify(s, selectors.EVENT_READ)
                continue
            if kind == "auth" and st[2] == "attached":
                continue
            try:
                data = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if kind == "auth" and data.startswith(b"HTTP/1.1 101"):
                st[2] = "attached"  # from now on it never reads; it pings on the timer
                sel.unregister(s)
                continue
            m = re.match(rb"HTTP/1\.1 (\d+)", data)
            if m:
                answers[int(m.group(1))] = answers.get(int(m.group(1)), 0) + 1
            close_one(s, 0.05 if kind == "unauth" else 0.2)
        for s, st in list(state.items()):
            if st[2] == "partial" and st[3] <= t:
                st[2] = "asked"
                try:
                    s.send(b"\r\n")
                except OSError:
                    close_one(s, 0.05)
        if t >= next_ping:
            next_ping = t + 2
            for s, st in list(state.items()):
                if st[0] == "auth" and st[2] == "attached":
                    try:
                        s.send(PING * 64)
                    except BlockingIOError:
                        pass
                    except OSError:
                        close_one(s, 1)
        live = {k: 0 for k in counts}
        for st in state.values():
            if st[2] != "connecting":
                live[st[0]] += 1
        stats["live"] = dict(live)
        stats["answers"] = dict(answers)
        if (all(live[k] >= 0.9 * counts[k] for k in ("idle", "auth"))
                and sum(live.values()) >= 0.9 * sum(counts.values()) - counts["unauth"] * 0.5):
            ready.set()
    for s in list(state):
        s.close()


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--attack-url", required=True, help="the attacker's own session")
    ap.add_argument("--attack-token", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keystrokes", type=int, default=200)
    ap.add_argument("--idle", type=int, default=800)
    ap.add_argument("--auth", type=int, default=800)
    ap.add_argument("--unauth", type=int, default=400)
    a = ap.parse_args()
    raise_nofile()
    u = urllib.parse.urlparse(a.url)
    host, port, path = u.hostname, u.port, u.path
    counts = {"idle": a.idle, "auth": a.auth, "unauth": a.unauth}
    results = []
    for run in range(1, a.runs + 1):
        term = Terminal(host, port, path, a.token)
        term.drain(1)
        term.type_round(20)
        quiet = term.type_round(a.keystrokes)
        mgr = multiprocessing.Manager()
        stats = mgr.dict()
        ready, stop = multiprocessing.Event(), multiprocessing.Event()
        rss_before = rss_kib(a.pid)
        attack_path = urllib.parse.urlparse(a.attack_url).path
        proc = multiprocessing.Process(target=load, args=(host, port, attack_path, a.attack_token,
                                                          counts, ready, stop, stats))
        proc.start()
        if not ready.wait(90):
            print("bench: the load never established: %s" % dict(stats), file=sys.stderr)
        time.sleep(2)
        peak = rss_kib(a.pid)
        cpu0, wall0 = cpu_seconds(a.pid), time.monotonic()
        loaded = []
        live_seen = dict(stats.get("live", {}))
        for i in range(a.keystrokes):
            ch = bytes([ord("a") + i % 26])
            loaded.append(term.keystroke(ch))
            if i % 10 == 9:
                peak = max(peak, rss_kib(a.pid))
                live = dict(stats.get("live", {}))
                if sum(live.values()) > sum(live_seen.values()):
                    live_seen = live
            if i % 50 == 49:
                term.send(b"\r")
                term.drain(0.2)
        peak = max(peak, rss_kib(a.pid))
        gw_cpu = (cpu_seconds(a.pid) - cpu0) / (time.monotonic() - wall0)
        answers = dict(stats.get("answers", {}))
        stop.set()
        proc.join(30)
        mgr.shutdown()
        term.send(b"\r")
        term.drain()
        term.s.close()
        time.sleep(12)  # the idle ones time out, the attached ones are closed
        r = {"quiet_p50": pct(quiet, 0.5), "quiet_p99": pct(quiet, 0.99),
             "loaded_p50": pct(loaded, 0.5), "loaded_p99": pct(loaded, 0.99),
             "rss_before_mib": rss_before / 1024, "rss_peak_mib": peak / 1024,
             "live": live_seen, "answers": answers, "gw_cpu": gw_cpu}
        r["ratio"] = r["loaded_p50"] / r["quiet_p50"]
        results.append(r)
        print("run %d: keystroke p50 quiet %.3f ms, under load %.3f ms: ratio %.2f (p99 %.3f -> "
              "%.3f ms); gateway RSS %.1f MiB before, peak %.1f MiB under load, CPU %.0f %% of a core; hostile "
              "connections open %s = %d; answers to the unauthenticated %s" %
              (run, r["quiet_p50"], r["loaded_p50"], r["ratio"], r["quiet_p99"],
               r["loaded_p99"], r["rss_before_mib"], r["rss_peak_mib"], 100 * gw_cpu, live_seen,
               sum(live_seen.values()), answers), flush=True)
    ratios = [r["ratio"] for r in results]
    peaks = [r["rss_peak_mib"] for r in results]
    print("summary over %d runs: p50 ratio %s (median %.2f), peak RSS MiB %s (max %.1f); "
          "goals: ratio < 2, RSS < 64 MiB: %s" %
          (len(results), " ".join("%.2f" % x for x in ratios), statistics.median(ratios),
           " ".join("%.1f" % x for x in peaks), max(peaks),
           "met" if max(ratios) < 2 and max(peaks) < 64 else "NOT met"))
    return 0 if max(peaks) < 64 else 1


if __name__ == "__main__":
    sys.exit(main())

"""The gateway's own ceiling (bench/gateway/ceiling.sh): a raw WebSocket client on the channel
protocol (v5.channel.k8s.io, plain ws:// on loopback), no terminal, that types `flood N` and reads
until `flood: done`, FLOODS times, and prints one line per flood: bytes received, MB/s, and the
CPU seconds the gateway process (--pid) spent during it, per 100 MB.

    ceiling_client.py --port PORT --path /v1/namespaces/NS/telosessions/NAME/attach --token TOKEN
                      --pid GATEWAY_PID [--floods 3] [--bytes 20000000]"""

import argparse
import base64
import os
import socket
import struct
import time


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--floods", type=int, default=3)
    ap.add_argument("--bytes", type=int, default=20_000_000)
    args = ap.parse_args()
    s = socket.create_connection(("127.0.0.1", args.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16))
    s.sendall(b"GET " + args.path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Authorization: Bearer " + args.token.encode() + b"\r\n"
              b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key +
              b"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        data = s.recv(4096)
        if not data:
            raise SystemExit("ceiling: the gateway closed during the upgrade")
        head += data
    if not head.startswith(b"HTTP/1.1 101"):
        raise SystemExit("ceiling: %r" % head.split(b"\r\n", 1)[0])

    def send(payload):
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        s.sendall(struct.pack("!BB", 0x82, 0x80 | len(masked)) + mask + masked)

    time.sleep(0.5)  # the gateway opens its upstream
    for _ in range(args.floods):
        c0 = cpu_s(args.pid)
        t0 = time.perf_counter()
        send(b"\x00flood %d\r" % args.bytes)
        tail, got = b"", 0
        while b"flood: done" not in tail:
            data = s.recv(1 << 20)
            if not data:
                raise SystemExit("ceiling: the gateway closed mid-flood")
            got += len(data)
            tail = (tail + data)[-64:]
        secs = time.perf_counter() - t0
        cpu = cpu_s(args.pid) - c0
        print("bytes %d MB/s %.1f gateway_cpu_s_per_100MB %.3f%s" % (
            got, got / secs / 1e6, cpu / got * 1e8, "" if got >= args.bytes else " SHORT"),
            flush=True)


if __name__ == "__main__":
    main()

"""A stand-in for the API server, for the gateway alone (bench/gateway/run.sh, TELO_BENCH_STANDIN):
what telo-gateway asks of the API server, without the API server, the kubelet or the container
runtime on the path, so the gateway's own ceiling shows beside the real path's.

    standin.py --port PORT --cert PEM --key PEM --get PATH=FILE... [--frame BYTES]

- GET of a path given with --get answers FILE's bytes (JSON snapshots of the TeloSession, its
  attach Secret and its pod, taken from the real cluster by run.sh); any other request 404.
- GET of .../pods/NAME/attach with a WebSocket upgrade offering v5.channel.k8s.io: the session
  TTY's stand-in. Typed bytes (channel 0) are echoed as a cooked-mode TTY echoes them (Enter as
  CR LF); a whole line is answered "echo: LINE" as the stand-in CLI does
  (hack/images/telo-session-test/telo), and `flood N` then writes the CLI's `yes` line until N
  bytes went out (each LF as CR LF, as the TTY's ONLCR makes it), a line end and `flood: done`.
  Output goes as binary messages on channel 1 of at most --frame bytes (default 32 KiB: what the
  API server's frames were measured to be at most, README).

TLS with the given certificate; one thread per connection. Standard library only."""

import argparse
import base64
import hashlib
import http.server
import socket
import ssl
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
LINE = b"telo flood 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"


def frame(payload, opcode=2):
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def read_exact(f, n):
    data = f.read(n)
    if data is None or len(data) < n:
        raise EOFError
    return data


def read_frame(f):
    b0, b1 = read_exact(f, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", read_exact(f, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", read_exact(f, 8))[0]
    mask = read_exact(f, 4) if b1 & 0x80 else b"\0\0\0\0"
    data = bytearray(read_exact(f, n))
    for i in range(n):
        data[i] ^= mask[i % 4]
    return b0 & 0x0F, bytes(data)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the bench reads stdout
        pass

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path.endswith("/attach") and self.headers.get("Upgrade", "").lower() == "websocket":
            return self.attach()
        body = self.server.gets.get(path)
        if body is None:
            body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}'
            self.send_response(404)
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def out(self, data):
        step = self.server.frame - 1
        for i in range(0, len(data), step):
            self.wfile.write(frame(b"\x01" + data[i:i + step]))

    def attach(self):
        key = self.headers["Sec-WebSocket-Key"].encode()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
        self.end_headers()
        self.wfile.flush()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        line = b""
        try:
            while True:
                op, data = read_frame(self.rfile)
                if op == 8:
                    self.wfile.write(frame(data[:2], 8))
                    return
                if op == 9:
                    self.wfile.write(frame(data, 10))
                    continue
                if op != 2 or not data or data[0] != 0:
                    continue  # resize, stdin close, text
                for ch in data[1:]:
                    if ch != 13:
                        line += bytes([ch])
                        self.out(bytes([ch]))
                        continue
                    self.out(b"\r\n" + b"echo: " + line + b"\r\n")
                    if line.startswith(b"flood "):
                        self.flood(int(line[6:]))
                    line = b""
                self.wfile.flush()
        except (EOFError, OSError, ValueError):
            return

    def flood(self, n):
        lines = max(1, (self.server.frame - 1) // (len(LINE) + 1))
        block = LINE * lines  # as the CLI writes it; on the wire each LF is CR LF
        wire = frame(b"\x01" + block.replace(b"\n", b"\r\n"))
        left = n
        while left >= len(block):
            self.wfile.write(wire)
            left -= len(block)
        if left > 0:
            self.out(block[:left].replace(b"\n", b"\r\n"))
        self.out(b"\r\nflood: done\r\n")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--get", action="append", default=[], help="PATH=FILE")
    ap.add_argument("--frame", type=int, default=32768)
    args = ap.parse_args()
    srv = Server(("127.0.0.1", args.port), Handler)
    srv.gets = {}
    for spec in args.get:
        path, _, name = spec.partition("=")
        with open(name, "rb") as f:
            srv.gets[path] = f.read()
    srv.frame = args.frame
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("standin: listening on %d" % args.port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()

"""A terminal client for gotty's WebSocket protocol, for bench/gateway only (run.sh starts it on a
pseudo-terminal like the other paths' clients):

    gotty_client.py ws://HOST:PORT/ws

gotty (github.com/sorenisanerd/gotty, server/handlers.go and webtty/) speaks subprotocol
`webtty`, text frames only: the client's first message is the JSON {"Arguments", "AuthToken"};
then input is '1' + bytes and a resize '3' + {"columns", "rows"}; output is '1' + base64 of
what the PTY gave, and '2' (pong), '3' (title) ... which a terminal ignores. Only the Python
standard library: one select loop over the user's terminal (raw mode) and the socket, so the
client side does the same work per keystroke as the others (read, one frame out; one frame in,
one write). ctrl-p ctrl-q ends it, as for the other clients."""

import base64
import fcntl
import json
import os
import select
import socket
import struct
import sys
import termios
import tty
import urllib.parse


def handshake(url):
    u = urllib.parse.urlsplit(url)
    sock = socket.create_connection((u.hostname, u.port or 80))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Protocol: webtty\r\n\r\n" % (u.path or "/", u.netloc, key))
                 .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit("gotty_client: the server closed during the handshake")
        head += chunk
    head, _, rest = head.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        sys.exit("gotty_client: no upgrade: %s" % head.split(b"\r\n")[0].decode(errors="replace"))
    return sock, rest


def frame(opcode, payload):
    """A masked client frame (RFC 6455 5.2)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    mask = os.urandom(4)
    body = int.from_bytes(payload, "little") ^ int.from_bytes(mask * (n // 4 + 1), "little") \
        & ((1 << (8 * n)) - 1) if n else 0
    return head + mask + body.to_bytes(n, "little")


def frames(buf):
    """Complete unmasked server frames in buf: ([(fin, opcode, payload)], bytes left)."""
    out = []
    pos = 0
    while len(buf) - pos >= 2:
        b0, b1 = buf[pos], buf[pos + 1]
        n, hl = b1 & 0x7F, 2
        if n == 126:
            if len(buf) - pos < 4:
                break
            n, hl = struct.unpack_from("!H", buf, pos + 2)[0], 4
        elif n == 127:
            if len(buf) - pos < 10:
                break
            n, hl = struct.unpack_from("!Q", buf, pos + 2)[0], 10
        if len(buf) - pos < hl + n:
            break
        out.append((b0 & 0x80, b0 & 0x0F, buf[pos + hl:pos + hl + n]))
        pos += hl + n
    return out, buf[pos:]


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gotty_client.py ws://HOST:PORT/ws")
    sock, buf = handshake(sys.argv[1])
    sock.sendall(frame(1, json.dumps({"Arguments": "", "AuthToken": ""}).encode()))
    rows, cols = 24, 80
    if os.isatty(0):
        rows, cols = struct.unpack("HHHH", fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))[:2]
    sock.sendall(frame(1, b"3" + json.dumps({"columns": cols, "rows": rows}).encode()))
    saved = termios.tcgetattr(0) if os.isatty(0) else None
    if saved:
        tty.setraw(0)
    out = sys.stdout.fileno()
    held = False
    message = b""
    try:
        while True:
            ready, _, _ = select.select([0, sock], [], [])
            if 0 in ready:
                data = os.read(0, 4096)
                if not data:
                    break
                if (held and data[:1] == b"\x11") or b"\x10\x11" in data:
                    break
                held = data[-1:] == b"\x10"
                sock.sendall(frame(1, b"1" + data))
            if sock in ready:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                got, buf = frames(buf + chunk)
                shown = []
                for fin, opcode, payload in got:
                    if opcode == 9:
                        sock.sendall(frame(10, payload))
                        continue
                    if opcode == 8:
                        return
                    message += payload
                    if not fin:
                        continue
                    if message[:1] == b"1":
                        shown.append(base64.b64decode(message[1:]))
                    message = b""
                if shown:
                    write_all(out, b"".join(shown))
    finally:
        if saved:
            termios.tcsetattr(0, termios.TCSANOW, saved)


if __name__ == "__main__":
    main()

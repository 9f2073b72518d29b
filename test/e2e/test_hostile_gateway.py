"""Hostile clients and tenants against the real gateway (issue 15, findings 2 and 5): odd JSON in
control frames, control JSON typed as stdin, an app writing odd inspector frames, a credential
revoked while its stream is open, a foreign browser origin and an API server that cannot be
asked. Each test asserts the gateway process survives and another client keeps working.

The attach tests use test_gateway.py's module gateway and sessions on the real node (skipped
without one); the others start a gateway of their own and need only the cluster: their
TeloSession is a stand-in whose status this test writes (no operator watches its namespace)."""

import base64
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.request
import uuid

import pytest
import websocket

from conftest import wait_until
from test_gateway import (IN_CLUSTER, IO, V5, Client, Gateway, InClusterGateway,  # noqa: F401
                          env, sessions, start_session)


def alive(gw):
    """Whether the gateway's process still runs (a local process, or the in-cluster pod's)."""
    if getattr(gw, "proc", None) is not None:
        return gw.proc.poll() is None
    return gw.pod.running


def healthz(gw):
    with urllib.request.urlopen("http://%s/healthz" % gw.base, timeout=5) as r:
        return r.status


def attach_url(gw, ns, name):
    return "ws://%s/v1/namespaces/%s/telosessions/%s/attach" % (gw.base, ns, name)


def assert_serves(env, name, token, line):
    """A new client attaches to session name and its typing comes back: the gateway serves."""
    c = Client(attach_url(env["gw"], env["ns"], name), token, V5)
    try:
        c.type(line + "\n")
        c.wait_for("echo: " + line)
    finally:
        c.close()


# --- finding 2: odd JSON --------------------------------------------------------------------

ODD_CONTROL = ['{"type":null}', '{"type":5}', '{"type":["resize"]}', '{"type":{"a":1}}',
               '{"type":"resize","cols":null,"rows":null}',
               '{"type":"resize","cols":{"n":1},"rows":[2]}', 'null', '[]', '"resize"']


def test_odd_control_frames_do_not_crash_the_gateway(env, sessions):
    """telo.io.v1 text frames whose "type" or sizes are null, numbers, arrays or objects: each is
    ignored (the session goes on), none takes the shared gateway down."""
    _, token = start_session(env, "odd", sessions)
    c = Client(attach_url(env["gw"], env["ns"], "odd"), token, IO)
    try:
        for text in ODD_CONTROL:
            c.ws.send(text)
        c.type("after-odd-frames\n")
        c.wait_for("echo: after-odd-frames", timeout=20)
        assert c.closed is None, "the client of the odd frames stays attached"
        assert alive(env["gw"]), "the gateway died:\n" + env["gw"].log()[-3000:]
    finally:
        c.close()
    assert_serves(env, "odd", token, "another-client-after-odd-frames")


def test_binary_stdin_is_typed_never_parsed_as_control(env, sessions):
    """On telo.io.v1 binary frames are stdin only: a pasted resize JSON reaches the app as text
    and leaves the terminal's size alone, and {"type":null} typed is just text."""
    _, token = start_session(env, "paste", sessions)
    c = Client(attach_url(env["gw"], env["ns"], "paste"), token, IO)
    try:
        c.resize(100, 30)
        time.sleep(0.5)  # the resize throttle
        c.type("size\n")
        start = c.wait_for("size: 30 100")
        resize = json.dumps({"type": "resize", "cols": 33, "rows": 11})
        c.ws.send_binary(resize.encode())  # a frame of its own, as a paste may be
        c.ws.send_binary(b"\n")
        c.wait_for("echo: " + resize, start=start)
        c.ws.send_binary(b'{"type":null}')
        c.ws.send_binary(b"\n")
        c.wait_for('echo: {"type":null}', start=start)
        time.sleep(0.5)
        c.type("size\n")
        after = c.wait_for("size: ", start=c.wait_for('echo: {"type":null}', start=start))
        line = bytes(c.out[after:after + 40]).split(b"\r")[0].split(b"\n")[0]
        assert line == b"size: 30 100", "typed JSON resized the terminal: %r" % line
        assert alive(env["gw"]), "the gateway died:\n" + env["gw"].log()[-3000:]
    finally:
        c.close()
    assert_serves(env, "paste", token, "another-client-after-the-paste")


def fake_pod(cluster, ns, session, pod, pod_ip):
    """A pod the TeloSession session controls, never scheduled (no node matches), whose status
    says pod_ip: the gateway reads the pod before it connects to a debug stream's inspector."""
    uid = cluster.kubectl_json("get", "telosession", session, "-n", ns)["metadata"]["uid"]
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "ownerReferences": [{
            "apiVersion": "telo.run/v1alpha1", "kind": "TeloSession", "name": session,
            "uid": uid, "controller": True}]},
        "spec": {"nodeSelector": {"telo.run/e2e": "nowhere"},
                 "containers": [{"name": "session", "image": "registry.invalid/none"}]}}))
    cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}}))


def fake_session(cluster, ns, name, token, pod_ip="127.0.0.1", inspect=False):
    """A TeloSession that looks Running (status written here, no operator involved), its attach
    Secret holding token, and its pod at pod_ip."""
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name + "-attach"},
             "stringData": {"token": token}},
            {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession",
             "metadata": {"name": name},
             "spec": {"entry": "main.telo", "bundle": {"configMap": {"name": name}}}}]}))
    fake_pod(cluster, ns, name, name + "-pod", pod_ip)
    status = {"phase": "Running", "podName": name + "-pod", "podIP": pod_ip,
              "attach": {"secretName": name + "-attach", "url": "http://gateway.invalid"}}
    if inspect:
        status["inspectUrl"] = "http://gateway.invalid/debug"
    cluster.kubectl("patch", "telosession", name, "-n", ns, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": status}))


class FakeInspector:
    """The app's inspector on host:9230 (the port the gateway relays from), writing the given
    server-sent events and then holding the stream open."""

    def __init__(self, events, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, 9230))
        except OSError as e:
            self.sock.close()
            pytest.skip("%s:9230 is taken (%s): the gateway relays from that port" % (host, e))
        self.sock.listen(8)
        self.events = events
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            try:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" +
                             b"".join(b"data: %s\n\n" % e.encode() for e in self.events))
            except OSError:
                pass

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone would not)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()


@pytest.fixture
def own_gateway(cluster, tmp_path):
    """A factory: gateway(*args) starts build/bin/telo-gateway (a local process) with args;
    each is stopped at teardown and must exit 0 (it survived)."""
    started = []

    def start(*args, kubeconfig=None):
        extra = ["--kubeconfig", kubeconfig] if kubeconfig else []
        gw = Gateway(cluster, str(tmp_path / ("gateway-%d.log" % len(started))),
                     [*extra, *args])
        started.append(gw)
        return gw
    yield start
    for gw in started:
        rc = gw.stop()
        print("--- telo-gateway log:\n" + gw.log()[-4000:])
        assert rc == 0, "telo-gateway must exit 0 on SIGTERM (got %s)" % rc


def debug_stream(gw, ns, name, token, origin=None):
    conn = http.client.HTTPConnection(gw.base, timeout=20)
    headers = {"Accept": "text/event-stream", "Authorization": "Bearer " + token}
    if origin:
        headers["Origin"] = origin
    conn.request("GET", "/v1/namespaces/%s/telosessions/%s/debug" % (ns, name), headers=headers)
    return conn, conn.getresponse()


def test_an_inspector_frame_with_a_null_kind_does_not_crash_the_relay(cluster, crd, namespace,
                                                                      own_gateway):
    """A session's own app writes its inspector stream: {"kind":null} (relayed: null is no kind,
    as the reference's `!frame.kind`) and kinds of other types (dropped) leave the gateway up."""
    gw = own_gateway()
    token = base64.b16encode(os.urandom(16)).decode()
    fake_session(cluster, namespace, "inspected", token, inspect=True)
    inspector = FakeInspector(['{"kind":null,"n":1}', '{"kind":7,"n":2}', '{"kind":["event"]}',
                               '{"kind":{"a":1}}', 'null', '{"kind":"event","n":3}'])
    try:
        conn, resp = debug_stream(gw, namespace, "inspected", token)
        assert resp.status == 200
        frames, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline and len(frames) < 2:
            line = resp.fp.readline().decode()
            if line.startswith("data: "):
                frames.append(json.loads(line[6:])["frame"])
        conn.close()
        assert frames == [{"kind": None, "n": 1}, {"kind": "event", "n": 3}], frames
        assert alive(gw), "the gateway died:\n" + gw.log()[-3000:]
        # Another client of the same gateway is served.
        conn, resp = debug_stream(gw, namespace, "inspected", token)
        assert resp.status == 200
        conn.close()
        assert healthz(gw) == 200
    finally:
        inspector.close()


# --- finding 5: revoked credentials, origins, error text ---------------------------------------

def test_a_revoked_token_is_closed_within_the_reauth_time(env, sessions, tmp_path):
    """A Kubernetes token allowed to attach, then its RoleBinding deleted: within
    --reauth-seconds (here 2) its streams close, with a Status 403 on channel 3 (v5) and an error
    frame (telo.io.v1); a client with the session's own token stays."""
    cluster, ns = env["cluster"], env["ns"]
    gw = (InClusterGateway if IN_CLUSTER else Gateway)(
        cluster, str(tmp_path / "gateway.log"), ["--reauth-seconds", "2"])
    try:
        _, token = start_session(env, "revoke", sessions)
        cluster.kubectl("create", "serviceaccount", "revoked", "-n", ns)
        cluster.kubectl("create", "role", "attach-revoked", "-n", ns, "--verb=create",
                        "--resource=telosessions.telo.run/attach")
        cluster.kubectl("create", "rolebinding", "attach-revoked", "-n", ns,
                        "--role=attach-revoked", "--serviceaccount=%s:revoked" % ns)
        sa_token = cluster.kubectl("create", "token", "revoked", "-n", ns).stdout.strip()
        url = attach_url(gw, ns, "revoke")

        def connects():
            try:
                Client(url, sa_token, V5, read=False).close()
                return True
            except websocket.WebSocketBadStatusException:
                return False
        wait_until(connects, timeout=15, what="RBAC for the revoked ServiceAccount")
        a = Client(url, sa_token, V5)
        b = Client(url, sa_token, IO)
        keep = Client(url, token, V5)
        a.type("before-revoke\n")
        for c in (a, b, keep):
            c.wait_for("echo: before-revoke")
        time.sleep(3)  # a re-authorization passes while the binding exists
        assert a.closed is None and b.closed is None
        cluster.kubectl("delete", "rolebinding", "attach-revoked", "-n", ns)
        revoked_at = time.monotonic()
        for c in (a, b):
            assert c.wait_closed(timeout=20) == 1008, "closed: %s" % c.closed
        took = time.monotonic() - revoked_at
        assert took < 15, "closed %.1f s after the revocation" % took
        status = [f[1] for f in a.frames if f[0] == "status"]
        assert status and status[-1]["code"] == 403 and status[-1]["status"] == "Failure", \
            a.frames[-3:]
        errors = [f[1] for f in b.frames if f[0] == "text" and f[1].get("type") == "error"]
        assert errors and errors[-1]["code"] == 403, b.frames[-3:]
        assert alive(gw)
        keep.type("after-revoke\n")
        keep.wait_for("echo: after-revoke")
        assert keep.closed is None, "the session token's client stays"
        keep.close()
        # A new client with the revoked token is refused at the door.
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            Client(url, sa_token, V5, read=False)
        assert e.value.status_code == 403
        assert 'msg="attach client refused on re-authorization"' in gw.log()
    finally:
        assert gw.stop() == 0


def test_a_token_audience_admits_only_tokens_issued_for_it(env, sessions, tmp_path):
    """--token-audience: a Kubernetes token issued for the API server (kubectl create token's
    default) is refused with 401 although its ServiceAccount may attach; one issued for the
    gateway's audience is admitted; the session's own token is not a Kubernetes token and passes
    as before."""
    cluster, ns = env["cluster"], env["ns"]
    audience = "telo-gateway-e2e"
    gw = (InClusterGateway if IN_CLUSTER else Gateway)(
        cluster, str(tmp_path / "gateway.log"), ["--token-audience", audience])
    try:
        _, token = start_session(env, "audience", sessions)
        cluster.kubectl("create", "serviceaccount", "aud", "-n", ns)
        cluster.kubectl("create", "role", "attach-aud", "-n", ns, "--verb=create",
                        "--resource=telosessions.telo.run/attach")
        cluster.kubectl("create", "rolebinding", "attach-aud", "-n", ns, "--role=attach-aud",
                        "--serviceaccount=%s:aud" % ns)
        api_token = cluster.kubectl("create", "token", "aud", "-n", ns).stdout.strip()
        gw_token = cluster.kubectl("create", "token", "aud", "-n", ns,
                                   "--audience", audience).stdout.strip()
        url = attach_url(gw, ns, "audience")

        def admitted():
            try:
                Client(url, gw_token, V5, read=False).close()
                return True
            except websocket.WebSocketBadStatusException:
                return False
        wait_until(admitted, timeout=15, what="the audience's token admitted (RBAC in place)")
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            Client(url, api_token, V5, read=False)
        assert e.value.status_code == 401, e.value
        c = Client(url, gw_token, V5)
        keep = Client(url, token, V5)
        c.type("with-the-audience\n")
        for client in (c, keep):
            client.wait_for("echo: with-the-audience")
        c.close()
        keep.close()
        assert alive(gw)
    finally:
        assert gw.stop() == 0


def test_a_rotated_session_token_ends_the_debug_stream(cluster, crd, namespace, own_gateway):
    """The session's attach Secret gets a new token while a debug stream admitted with the old
    one is open: within --reauth-seconds the stream gets `event: error` (401) and ends; a client
    with the new token is served."""
    gw = own_gateway("--reauth-seconds", "1")
    old = base64.b16encode(os.urandom(16)).decode()
    fake_session(cluster, namespace, "rotated", old, inspect=True)
    inspector = FakeInspector(['{"kind":"event","n":1}'])
    try:
        conn, resp = debug_stream(gw, namespace, "rotated", old)
        assert resp.status == 200
        assert resp.fp.readline().startswith(b": relaying")
        time.sleep(2.5)  # re-authorizations pass while the token is current
        new = base64.b16encode(os.urandom(16)).decode()
        cluster.kubectl("patch", "secret", "rotated-attach", "-n", namespace, "--type=merge",
                        "-p", json.dumps({"stringData": {"token": new}}))
        rotated_at = time.monotonic()
        lines = []
        while time.monotonic() - rotated_at < 15:
            line = resp.fp.readline()
            if not line:
                break
            lines.append(line.decode().rstrip("\n"))
        took = time.monotonic() - rotated_at
        conn.close()
        assert "event: error" in lines, lines
        error = json.loads(lines[lines.index("event: error") + 1][len("data: "):])
        assert error["code"] == 401 and error["type"] == "error", error
        assert took < 10, "the stream ended %.1f s after the rotation" % took
        assert alive(gw)
        conn, resp = debug_stream(gw, namespace, "rotated", new)
        assert resp.status == 200
        conn.close()
    finally:
        inspector.close()


def read_stream(resp, until, seconds):
    """Lines of a debug stream (newlines stripped) until one contains until or seconds pass."""
    lines, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = resp.fp.readline()
        if not line:
            break
        lines.append(line.decode().rstrip("\n"))
        if until in lines[-1]:
            break
    return lines


def test_a_debug_stream_follows_its_session_and_never_reads_an_address_it_gave_up(
        cluster, crd, namespace, own_gateway):
    """The session's pod is replaced (status.podIP moves from 127.0.0.2 to 127.0.0.3) and its
    old address is taken at once by another tenant's inspector. The relay reads the session
    again before it reconnects: it follows the new pod, and the stranger at the old address is
    never connected to. Before, the relay reconnected to the address it was admitted with for as
    long as the client stayed, and streamed whatever listened there. When the session stops,
    the stream ends with an error event."""
    gw = own_gateway("--reauth-seconds", "60")
    token = base64.b16encode(os.urandom(16)).decode()
    fake_session(cluster, namespace, "moved", token, pod_ip="127.0.0.2", inspect=True)
    old = FakeInspector(['{"kind":"event","from":"old-pod"}'], host="127.0.0.2")
    new = stranger = None
    try:
        conn, resp = debug_stream(gw, namespace, "moved", token)
        assert resp.status == 200
        assert "old-pod" in read_stream(resp, "old-pod", 20)[-1]
        cluster.kubectl("delete", "pod", "moved-pod", "-n", namespace, "--grace-period=0",
                        "--force")
        fake_pod(cluster, namespace, "moved", "moved-pod-2", "127.0.0.3")
        cluster.kubectl("patch", "telosession", "moved", "-n", namespace, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {
                            "podName": "moved-pod-2", "podIP": "127.0.0.3"}}))
        new = FakeInspector(['{"kind":"event","from":"new-pod"}'], host="127.0.0.3")
        old.close()
        stranger = FakeInspector(['{"kind":"event","from":"another-tenant"}'], host="127.0.0.2")
        lines = read_stream(resp, "new-pod", 30)
        assert "new-pod" in lines[-1], lines
        assert not any("another-tenant" in line for line in lines), lines
        time.sleep(2)
        assert stranger.conns == [], "the relay connected to the address its session gave up"
        cluster.kubectl("patch", "telosession", "moved", "-n", namespace, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {
                            "phase": "Stopped", "podIP": None}}))
        new.close()
        lines = read_stream(resp, '"code":409', 30)
        conn.close()
        assert "event: error" in lines and '"code":409' in lines[-1], lines
        assert stranger.conns == []
        assert 'msg="debug relay follows the session\'s new pod"' in gw.log()
    finally:
        for inspector in (old, new, stranger):
            if inspector is not None:
                inspector.close()


def inspected_sessions(cluster, namespace, *names):
    """Fake running sessions with spec.inspect, one token each, and the inspector they share
    (the caller closes it): (token, ..., inspector)."""
    tokens = [base64.b16encode(os.urandom(16)).decode() for _ in names]
    for name, token in zip(names, tokens):
        fake_session(cluster, namespace, name, token, inspect=True)
    return (*tokens, FakeInspector(['{"kind":"event","n":1}']))


def test_debug_streams_count_under_the_per_session_cap(cluster, crd, namespace, own_gateway):
    """A session's debug streams count under --max-clients-per-session (each may hold ~1.5 MiB
    in the gateway, so one tenant's viewers cannot grow it without bound): past the cap 429 with
    Retry-After; another session is unaffected, and a freed slot is usable again."""
    gw = own_gateway("--max-clients-per-session", "2")
    token, other, inspector = inspected_sessions(cluster, namespace, "capped", "beside")
    streams = []
    try:
        for _ in range(2):
            conn, resp = debug_stream(gw, namespace, "capped", token)
            assert resp.status == 200
            streams.append((conn, resp))  # the response holds the socket open
        conn, resp = debug_stream(gw, namespace, "capped", token)
        status, retry_after = resp.status, resp.getheader("Retry-After")
        conn.close()
        assert status == 429 and retry_after, (status, retry_after)
        conn, resp = debug_stream(gw, namespace, "beside", other)
        assert resp.status == 200
        streams.append((conn, resp))
        for held in streams.pop(0):
            held.close()
        wait_until(lambda: gw.metric("telo_gateway_debug_streams") == 2, timeout=10,
                   interval=0.1, what="a debug stream gone")
        conn, resp = debug_stream(gw, namespace, "capped", token)
        assert resp.status == 200
        streams.append((conn, resp))
        assert alive(gw)
    finally:
        for held in streams:
            for c in held:
                c.close()
        inspector.close()


def test_debug_streams_of_all_sessions_stop_at_max_debug_streams(cluster, crd, namespace,
                                                                 own_gateway):
    """Each debug stream may hold ~1.5 MiB: --max-debug-streams bounds them across sessions
    (503 with Retry-After past it, counted); attach clients are not counted in it."""
    gw = own_gateway("--max-debug-streams", "1")
    token, other, inspector = inspected_sessions(cluster, namespace, "first", "second")
    held = None
    try:
        held = debug_stream(gw, namespace, "first", token)
        assert held[1].status == 200
        conn, resp = debug_stream(gw, namespace, "second", other)
        status, retry_after = resp.status, resp.getheader("Retry-After")
        conn.close()
        assert status == 503 and retry_after, (status, retry_after)
        assert gw.metric('telo_gateway_limited_total{limit="debug_streams"}') == 1
        for c in held:
            c.close()
        held = None
        wait_until(lambda: gw.metric("telo_gateway_debug_streams") == 0, timeout=10,
                   interval=0.1, what="the debug stream gone")
        held = debug_stream(gw, namespace, "second", other)
        assert held[1].status == 200
        assert alive(gw)
    finally:
        for c in held or ():
            c.close()
        inspector.close()


def test_one_namespace_cannot_take_every_debug_stream(cluster, crd, namespace, own_gateway):
    """--max-debug-streams-per-namespace (a quarter of --max-debug-streams): a namespace whose
    sessions hold their share of the debug streams gets 429 for one more, while another
    namespace's session still gets its stream. Before, one tenant could hold all 32."""
    gw = own_gateway("--max-debug-streams", "8")
    other_ns = "e2e-debug-other-" + uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", other_ns)
    a1, a2, a3, inspector = inspected_sessions(cluster, namespace, "a1", "a2", "a3")
    b_token = base64.b16encode(os.urandom(16)).decode()
    fake_session(cluster, other_ns, "b1", b_token, inspect=True)
    held = []
    try:
        for name, token in (("a1", a1), ("a2", a2)):
            held.append(debug_stream(gw, namespace, name, token))
            assert held[-1][1].status == 200
        conn, resp = debug_stream(gw, namespace, "a3", a3)
        status, retry_after = resp.status, resp.getheader("Retry-After")
        conn.close()
        assert status == 429 and retry_after, (status, retry_after)
        assert gw.metric(
            'telo_gateway_limited_total{limit="debug_streams_per_namespace"}') == 1
        held.append(debug_stream(gw, other_ns, "b1", b_token))
        assert held[-1][1].status == 200
        assert gw.metric('telo_gateway_limited_total{limit="debug_streams"}') == 0
    finally:
        for conn, _ in held:
            conn.close()
        inspector.close()
        cluster.kubectl("delete", "namespace", other_ns, "--wait=false", check=False)


def test_a_repeated_upgrade_key_authorization_or_origin_is_a_400(cluster, crd, namespace,
                                                                   own_gateway):
    """A request that repeats Upgrade, Sec-WebSocket-Key, Authorization or Origin is refused 400
    naming the header: we read the first, a proxy in front of us may read the last. The same
    request with each header once is upgraded."""
    gw = own_gateway()
    token = base64.b16encode(os.urandom(16)).decode()
    fake_session(cluster, namespace, "dups", token)
    lines = ["GET /v1/namespaces/%s/telosessions/dups/attach HTTP/1.1" % namespace,
             "Host: %s" % gw.base, "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Protocol: v5.channel.k8s.io", "Authorization: Bearer " + token]

    def answer(extra):
        host, port = gw.base.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(("\r\n".join(lines + extra) + "\r\n\r\n").encode())
            data = b""
            # A refusal ends with the connection; an upgrade stays open after its head.
            while not (data.startswith(b"HTTP/1.1 101 ") and b"\r\n\r\n" in data):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.decode(errors="replace")

    assert answer([]).startswith("HTTP/1.1 101 ")
    for extra in ("Upgrade: websocket", "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==",
                  "Authorization: Bearer " + token, "Origin: https://a.example"):
        name = extra.split(":")[0]
        more = [extra] if name != "Origin" else [extra, "Origin: https://b.example"]
        got = answer(more)
        assert got.startswith("HTTP/1.1 400 "), (name, got[:200])
        assert "repeats the %s header" % name in got, (name, got)
    assert alive(gw)


def test_a_foreign_origin_is_refused_by_default(cluster, crd, namespace, own_gateway):
    """Without --allowed-origin no browser origin may attach or read the debug stream; a client
    that sends no Origin (kubectl telo, client-go) is unaffected; a listed origin passes."""
    token = base64.b16encode(os.urandom(16)).decode()
    fake_session(cluster, namespace, "origins", token, inspect=True)
    plain = own_gateway()

    def status(gw, origin):
        try:
            Client(attach_url(gw, namespace, "origins"), token, V5, origin=origin,
                   read=False).close()
            return 101
        except websocket.WebSocketBadStatusException as e:
            return e.status_code
    assert status(plain, "http://evil.example") == 403
    assert status(plain, None) == 101
    listed = own_gateway("--allowed-origins", "http://a.example,http://b.example")
    assert status(listed, "http://evil.example") == 403
    assert status(listed, "http://b.example") == 101
    conn, resp = debug_stream(plain, namespace, "origins", token, origin="http://evil.example")
    assert resp.status == 403
    conn.close()
    assert alive(plain) and alive(listed)


def test_a_503_carries_no_internal_text(cluster, crd, namespace, own_gateway, tmp_path):
    """The API server cannot be asked (nothing listens where the kubeconfig points): the client,
    not even authenticated, gets 503 "authorization unavailable, retry" and no error text of the
    API client; the log has the details. The gateway goes on serving."""
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cfg = cluster.kubectl("config", "view", "--raw", "--minify", "--flatten").stdout
    server = cluster.kubectl("config", "view", "--minify", "-o",
                             "jsonpath={.clusters[0].cluster.server}").stdout
    kubeconfig = tmp_path / "dead.kubeconfig"
    kubeconfig.write_text(cfg.replace(server, "https://127.0.0.1:%d" % dead))
    gw = own_gateway(kubeconfig=str(kubeconfig))
    conn = http.client.HTTPConnection(gw.base, timeout=30)
    conn.request("GET", "/v1/namespaces/%s/telosessions/x/attach" % namespace, headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        "Sec-WebSocket-Protocol": V5, "Authorization": "Bearer not-a-real-token"})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    assert resp.status == 503, body
    status = json.loads(body)
    assert status["message"] == "authorization unavailable, retry", status
    for internal in ("127.0.0.1", str(dead), "TeloSession", "telosessions", "onnect", "failed"):
        assert internal not in body, "internal text %r in the 503: %s" % (internal, body)
    assert "code=503" in gw.log() and str(dead) in gw.log(), "the details go to the log"
    assert alive(gw) and healthz(gw) == 200

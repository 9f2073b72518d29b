"""Hostile tenants against the real gateway (issue 15, finding 4): build/bin/telo-gateway as a
local process with its own limits, beside the sessions of test_gateway's module environment
(the real node runs them). Every attack comes from loopback, from several 127.0.0.x source
addresses where a per-address limit is in play; a legitimate client on another session keeps
working meanwhile.

- a client that pings without pause and never reads leaves the gateway's RSS bounded;
- connections over the caps before admission (per address, overall) and after it (per
  session, overall) get 429 and 503 with Retry-After;
- a flood of unauthenticated requests costs the API server at most the admission rate (its
  audit log counts the gateway's requests), and the gateway survives;
- out of file descriptors (RLIMIT_NOFILE lowered under the running gateway), the gateway does not
  spin, and it serves again once they are back;
- one namespace cannot take every client slot or every held session: a session of another
  namespace (its own operator) still attaches;
- a flood of refusals writes a bounded number of log lines, and says how many it held back."""

import collections
import concurrent.futures
import json
import os
import re
import resource
import secrets
import select
import socket
import subprocess
import threading
import time
import uuid

import pytest

from conftest import (OPERATOR_BIN_DIR, new_operator, rfc3339_now, wait_for_default_service_account,
                      wait_until)
from test_gateway import V5, Client, Gateway, env, start_session  # noqa: F401 (env: fixture)

PAYLOAD = b"p" * 125
# A masked ping with the zero mask (legal: RFC 6455 5.3) carrying 125 bytes, the largest control
# frame: the most pong bytes one ping can ask for.
PING = b"\x89\xfd\x00\x00\x00\x00" + PAYLOAD


@pytest.fixture(scope="module")
def two(env):
    """Two running sessions for the module (each test uses them read-only), with their tokens."""
    started = []
    out = {}
    for name in ("victim", "bystander"):
        _, token = start_session(env, name, started)
        out[name] = token
    yield out
    env["cluster"].kubectl("delete", "telosession", "-n", env["ns"], *started, "--wait=false",
                           check=False)


@pytest.fixture(scope="module")
def elsewhere(env, tmp_path_factory):
    """A running session of another tenant: its own namespace, reconciled by an operator of its
    own with the module operator's settings. Yields (env of that namespace, its attach token)."""
    cluster = env["cluster"]
    ns = "e2e-gateway-other-" + uuid.uuid4().hex[:6]
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    wait_for_default_service_account(cluster, ns)
    op = new_operator(cluster, ns, str(tmp_path_factory.mktemp("elsewhere") / "operator.log"),
                      env["op"].sets).start()
    other = dict(env, ns=ns, op=op)
    started = []
    try:
        _, token = start_session(other, "neighbour", started)
        yield other, token
    finally:
        cluster.kubectl("delete", "telosession", "-n", ns, *started, "--wait=false", check=False)
        op.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def attach_url(gw, env, name):
    return "ws://%s/v1/namespaces/%s/telosessions/%s/attach" % (gw.base, env["ns"], name)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect_from(source, gw, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", gw.port))
    return s


def http_status(sock, request=None):
    """The status code and headers of the answer on sock (after sending request, if any)."""
    if request is not None:
        try:
            sock.sendall(request)
        except OSError:
            pass  # answered and closed before our request went: the answer is still there
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode(errors="replace")
    m = re.match(r"HTTP/1\.1 (\d+)", head)
    return (int(m.group(1)) if m else None), head


def upgrade_request(env, name, token):
    return ("GET /v1/namespaces/%s/telosessions/%s/attach HTTP/1.1\r\nHost: gw\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: %s\r\n"
            "Authorization: Bearer %s\r\n\r\n" % (env["ns"], name, V5, token)).encode()


def attach_status(gw, env, name, token, source="127.0.0.1"):
    s = connect_from(source, gw)
    try:
        return http_status(s, upgrade_request(env, name, token))
    finally:
        s.close()


def echo_works(client, word):
    client.type(word + "\n")
    client.wait_for("echo: " + word, timeout=20)
    return True


def start_gateway(env, tmp_path, name, *args):
    return Gateway(env["cluster"], str(tmp_path / (name + ".log")), list(args))


def test_ping_flood_from_a_non_reader_keeps_rss_bounded(env, two, tmp_path):
    gw = start_gateway(env, tmp_path, "pingflood")
    try:
        legit = Client(attach_url(gw, env, "bystander"), two["bystander"], V5)
        assert echo_works(legit, "before-pings")
        s = connect_from("127.0.0.2", gw)
        status, head = http_status(s, upgrade_request(env, "victim", two["victim"]))
        assert status == 101, head
        time.sleep(0.5)
        before = rss_kib(gw.proc.pid)
        s.setblocking(False)
        batch = PING * 512
        sent, deadline = 0, time.monotonic() + 8
        # 40 MB of pings, never reading: the old gateway queued a pong for each (one
        # reproduction: 25 MB); the bounded one stops reading and our writes stop being taken.
        while sent < 40 * 1000 * 1000 and time.monotonic() < deadline:
            _, writable, _ = select.select([], [s], [], 0.2)
            if not writable:
                continue
            try:
                sent += s.send(batch)
            except BlockingIOError:
                pass
        time.sleep(0.5)
        after = rss_kib(gw.proc.pid)
        print("\nping flood: %.1f MB of pings sent in 8 s, gateway RSS %d -> %d KiB (+%d)" %
              (sent / 1e6, before, after, after - before))
        assert gw.proc.poll() is None, "the gateway died:\n" + gw.log()[-3000:]
        assert after - before < 16 * 1024, (
            "gateway RSS grew %d KiB while a client pinged and never read (%d bytes of pings)"
            % (after - before, sent))
        assert echo_works(legit, "during-pings")
        s.close()
        legit.close()
    finally:
        gw.stop()


def pending_unless_full(gw, refused):
    """telo_gateway_pending, or None while the gateway still counts the closed connections and
    so refuses the /metrics request itself with 503 (a slower build notices closes later); each
    such refusal is counted in refused[0], as the gateway counts it too."""
    import urllib.error
    try:
        return gw.metric("telo_gateway_pending")
    except urllib.error.HTTPError as e:
        if e.code != 503:
            raise
        refused[0] += 1
        return None


def test_connections_over_the_caps_get_429_and_503(env, two, tmp_path):
    # Silent connections must outlive the checks below on a slow machine: the first-byte deadline
    # up to the head's own.
    gw = start_gateway(env, tmp_path, "caps", "--max-pending", "6", "--max-pending-per-ip", "3",
                       "--max-clients", "3", "--max-clients-per-session", "2",
                       "--first-byte-seconds", "10")
    idle = []
    clients = []
    try:
        # Before admission: three idle connections from one address fill its share...
        idle += [connect_from("127.0.0.5", gw) for _ in range(3)]
        wait_until(lambda: gw.metric("telo_gateway_pending") == 3, timeout=5, interval=0.05,
                   what="three pending connections")
        status, head = http_status(connect_from("127.0.0.5", gw),
                                   upgrade_request(env, "victim", two["victim"]))
        assert status == 429 and "Retry-After:" in head, head
        # ...and five more addresses the gateway's, one each (an address holding two more than
        # a newcomer's would give way to it: make_pending_room).
        for s in idle[1:]:
            s.close()
        del idle[1:]
        wait_until(lambda: gw.metric("telo_gateway_pending") == 1, timeout=5, interval=0.05,
                   what="one pending connection left")
        idle += [connect_from("127.0.0.%d" % i, gw) for i in (6, 7, 8, 10, 11)]
        time.sleep(0.5)  # accepted (a /metrics request would now be refused itself)
        status, head = http_status(connect_from("127.0.0.9", gw))
        assert status == 503 and "Retry-After:" in head, head
        for s in idle:
            s.close()
        probes_refused = [0]
        wait_until(lambda: pending_unless_full(gw, probes_refused) == 0, timeout=5,
                   interval=0.05, what="the idle connections gone")
        # After admission: two clients per session, three in all.
        clients += [Client(attach_url(gw, env, "victim"), two["victim"], V5) for _ in range(2)]
        status, head = attach_status(gw, env, "victim", two["victim"])
        assert status == 429 and "Retry-After:" in head, head
        clients.append(Client(attach_url(gw, env, "bystander"), two["bystander"], V5))
        status, head = attach_status(gw, env, "bystander", two["bystander"])
        assert status == 503 and "Retry-After:" in head, head
        # The attached ones are unaffected, and a freed slot is usable again.
        assert echo_works(clients[2], "under-the-caps")
        clients.pop(0).close()
        wait_until(lambda: gw.metric("telo_gateway_clients") == 2, timeout=10,
                   what="a client gone")
        clients.append(Client(attach_url(gw, env, "victim"), two["victim"], V5))
        for limit, want in (("pending_per_source", 1), ("pending", 1 + probes_refused[0]),
                            ("clients_per_session", 1), ("clients", 1)):
            got = gw.metric('telo_gateway_limited_total{limit="%s"}' % limit)
            assert got == want, "telo_gateway_limited_total{limit=%s} = %s" % (limit, got)
        assert gw.metric('telo_gateway_refusals_total{code="429"}') == 2
        assert gw.metric('telo_gateway_refusals_total{code="503"}') == 2 + probes_refused[0]
    finally:
        for c in clients:
            c.close()
        for s in idle:
            s.close()
        gw.stop()


def _gateway_api_requests(cluster, since):
    """The API server's record of the gateway's admission requests since an RFC 3339 time."""
    out = []
    for name in os.listdir(cluster.log_dir):
        if not name.startswith("audit"):
            continue
        with open(os.path.join(cluster.log_dir, name), errors="replace") as f:
            for line in f:
                if "telo-gateway/" not in line:
                    continue
                e = json.loads(line)
                if (e.get("stage") == "ResponseComplete"
                        and e.get("userAgent", "").startswith("telo-gateway/")
                        and e.get("requestReceivedTimestamp", "") >= since
                        and e.get("objectRef", {}).get("resource") in (
                            "telosessions", "secrets", "tokenreviews", "subjectaccessreviews")):
                    out.append(e)
    return out


def test_an_unauthenticated_flood_costs_the_api_server_a_bounded_rate(env, two, tmp_path):
    rate, burst = 4, 8
    gw = start_gateway(env, tmp_path, "flood", "--admission-rate", str(rate), "--admission-burst",
                       str(burst), "--admission-rate-per-ip", "2", "--admission-burst-per-ip", "4")
    try:
        legit = Client(attach_url(gw, env, "bystander"), two["bystander"], V5)
        assert echo_works(legit, "before-flood")
        time.sleep(1.1)
        since = rfc3339_now()
        statuses = {}
        lock = threading.Lock()

        def attacker(i):
            for _ in range(40):
                try:
                    code, _ = attach_status(gw, env, "victim", secrets.token_hex(24),
                                            source="127.0.0.%d" % (20 + i))
                except OSError as e:
                    code = type(e).__name__
                with lock:
                    statuses[code] = statuses.get(code, 0) + 1
        start = time.monotonic()
        threads = [threading.Thread(target=attacker, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            assert echo_works(legit, "during-flood-%d" % int(time.monotonic() - start))
            time.sleep(0.3)
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        assert gw.proc.poll() is None, "the gateway died:\n" + gw.log()[-3000:]
        lookups = gw.metric("telo_gateway_admission_lookups_total")
        bound = burst + rate * (elapsed + 1) + 1  # + the legitimate client's own lookup
        time.sleep(2)  # the audit log's buffer
        calls = _gateway_api_requests(env["cluster"], since)
        print("\nflood: 400 unauthenticated requests in %.1f s from 10 addresses: %s; %s lookups, "
              "%d API requests (bound %d lookups, 3 requests each)" %
              (elapsed, statuses, lookups, len(calls), bound))
        assert statuses.get(401, 0) + statuses.get(429, 0) == 400, statuses
        assert statuses.get(429, 0) > 0, statuses
        assert lookups <= bound, (lookups, bound)
        assert len(calls) <= 3 * bound, "%d API requests for a flood (bound %d)" % (
            len(calls), 3 * bound)
        # The session's own client is served once the buckets refill.
        assert wait_until(lambda: attach_status(gw, env, "bystander", two["bystander"])[0] == 101,
                          timeout=10, interval=0.5, what="a legitimate attach after the flood")
        assert echo_works(legit, "after-flood")
        legit.close()
    finally:
        gw.stop()


def forwarded_status(gw, env, name, token, source, xff):
    """An attach from source carrying X-Forwarded-For: xff (several values: one line each)."""
    lines = "".join("X-Forwarded-For: %s\r\n" % v for v in ([xff] if isinstance(xff, str) else xff))
    request = upgrade_request(env, name, token).replace(b"\r\n\r\n", b"\r\n" + lines.encode()
                                                       + b"\r\n", 1)
    s = connect_from(source, gw)
    try:
        return http_status(s, request)[0]
    finally:
        s.close()


def test_clients_behind_a_trusted_proxy_are_limited_apart(env, two, tmp_path):
    """Behind an Ingress controller or the API server's service proxy every client arrives from
    the proxy's address. With --trusted-proxies naming it (127.0.0.2 plays the proxy), each client
    its X-Forwarded-For names has its own admission bucket and pending count: tenant A's flood of
    bad tokens gets A 429s while tenant B, through the same proxy, attaches at once. A's forged
    entries left of the proxy's own do not make it B, and X-Forwarded-For from an untrusted
    address (127.0.0.3) is ignored. The proxy's connections are spared the per-address cap at
    accept (an untrusted address's third waiting connection gets 429 there)."""
    gw = start_gateway(env, tmp_path, "proxied", "--admission-rate", "100", "--admission-burst",
                       "200", "--admission-rate-per-ip", "0.1", "--admission-burst-per-ip", "3",
                       "--max-pending-per-ip", "2", "--trusted-proxies", "127.0.0.2/32, fd00::/8")
    proxy, stranger = "127.0.0.2", "127.0.0.3"
    tenant_a, tenant_b = "203.0.113.1", "203.0.113.2"
    try:
        # A floods through the proxy until its own bucket is empty.
        codes = [forwarded_status(gw, env, "victim", secrets.token_hex(24), proxy, tenant_a)
                 for _ in range(8)]
        assert codes.count(401) == 3 and codes.count(429) == 5, codes
        # B, through the same proxy, is not A.
        assert forwarded_status(gw, env, "bystander", two["bystander"], proxy, tenant_b) == 101
        # A's forged chain (B's address first; the proxy appends A's own): still A, whose
        # bucket is empty (B's is not: as B, a bad token would get 401). Both the one-line form
        # (nginx, the API server) and a line of the proxy's own (HAProxy). Fresh tokens: a
        # verdict the gateway holds in its admission cache takes no token from any bucket.
        assert forwarded_status(gw, env, "bystander", secrets.token_hex(24), proxy,
                                "%s, %s" % (tenant_b, tenant_a)) == 429
        assert forwarded_status(gw, env, "bystander", secrets.token_hex(24), proxy,
                                [tenant_b, tenant_a]) == 429
        assert forwarded_status(gw, env, "bystander", secrets.token_hex(24), proxy,
                                tenant_b) == 401
        # Not a proxy: its X-Forwarded-For changes nothing, its flood is its own address's.
        codes = [forwarded_status(gw, env, "victim", secrets.token_hex(24), stranger,
                                  "198.51.100.%d" % i) for i in range(5)]
        assert codes.count(401) == 3 and codes.count(429) == 2, codes
        assert forwarded_status(gw, env, "bystander", secrets.token_hex(24), stranger,
                                "198.51.100.99") == 429
        # Waiting connections: the proxy's are counted per client, once the head names one.
        waiting = [connect_from(proxy, gw) for _ in range(4)]
        strangers = [connect_from("127.0.0.4", gw) for _ in range(3)]
        time.sleep(0.5)
        for s in waiting + strangers[:2]:
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)  # no answer: still waiting for a head
        assert http_status(strangers[2])[0] == 429
        for s in waiting + strangers:
            s.close()
        assert gw.metric('telo_gateway_limited_total{limit="pending_per_source"}') >= 1
        assert forwarded_status(gw, env, "bystander", two["bystander"], proxy,
                                "203.0.113.3") == 101
        assert gw.proc.poll() is None, "the gateway died:\n" + gw.log()[-3000:]
    finally:
        gw.stop()


def test_a_bad_trusted_proxies_list_is_refused_at_start(env):
    proc = subprocess.run([os.path.join(OPERATOR_BIN_DIR, "telo-gateway"), "--kubeconfig",
                           env["cluster"].kubeconfig, "--bind-address", "127.0.0.1:0",
                           "--trusted-proxies", "10.0.0.0/8,10.0.0.0/33"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert ("--trusted-proxies: '10.0.0.0/33' is not an IPv4 or IPv6 address with an optional "
            "/prefix length") in proc.stdout + proc.stderr, proc


def test_out_of_file_descriptors_the_gateway_does_not_spin(env, two, tmp_path):
    gw = start_gateway(env, tmp_path, "emfile")
    socks = []
    try:
        legit = Client(attach_url(gw, env, "bystander"), two["bystander"], V5)
        assert echo_works(legit, "before-emfile")
        resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE, (64, 64))
        # 120 connections from four addresses (under the per-address cap): more than it has
        # descriptors; the rest wait in the listen backlog.
        for i in range(120):
            socks.append(connect_from("127.0.0.%d" % (40 + i % 4), gw))
        time.sleep(1)  # it has accepted what it can and met EMFILE
        c0 = cpu_seconds(gw.proc.pid)
        time.sleep(3)
        used = cpu_seconds(gw.proc.pid) - c0
        print("\nout of descriptors: %.2f s of CPU in 3 s" % used)
        assert gw.proc.poll() is None, "the gateway died:\n" + gw.log()[-3000:]
        assert used < 0.5, "the gateway spun: %.2f s of CPU in 3 s without descriptors" % used
        # Still at 64: closing them is enough.
        for s in socks:
            s.close()
        socks = []
        assert wait_until(lambda: attach_status(gw, env, "bystander", two["bystander"])[0] == 101,
                          timeout=15, interval=0.5, what="attach once descriptors are back")
        assert echo_works(legit, "after-emfile")
        assert gw.metric("telo_gateway_accept_exhausted_total") > 0
        assert "accept paused" in gw.log()
        legit.close()
    finally:
        for s in socks:
            s.close()
        gw.stop()


def test_a_session_past_max_sessions_takes_an_idle_ones_place_or_gets_503(env, two, tmp_path):
    """--max-sessions bounds the rings and pods/attach the gateway holds: with 1, a second
    session is refused 503 while the first has a client, and takes its place (scrollback
    dropped early, counted) once it has none."""
    gw = start_gateway(env, tmp_path, "maxsessions", "--max-sessions", "1")
    clients = []
    try:
        clients.append(Client(attach_url(gw, env, "victim"), two["victim"], V5))
        assert echo_works(clients[0], "held")
        status, head = attach_status(gw, env, "bystander", two["bystander"])
        assert status == 503 and "Retry-After:" in head, head
        assert gw.metric('telo_gateway_limited_total{limit="sessions"}') == 1
        assert gw.metric("telo_gateway_sessions") == 1
        clients.pop().close()
        wait_until(lambda: gw.metric("telo_gateway_clients") == 0, timeout=10,
                   what="the client gone")
        # The victim's session is still held (idle keep), without a client: it makes room.
        assert gw.metric("telo_gateway_sessions") == 1
        clients.append(Client(attach_url(gw, env, "bystander"), two["bystander"], V5))
        assert echo_works(clients[0], "in-its-place")
        assert gw.metric("telo_gateway_evictions_total") == 1
        assert gw.metric("telo_gateway_sessions") == 1
        assert "attach session dropped to make room" in gw.log()
        status, head = attach_status(gw, env, "victim", two["victim"])
        assert status == 503 and "Retry-After:" in head, head
    finally:
        for c in clients:
            c.close()
        gw.stop()


def refused_here_served_elsewhere(gw, env, two, elsewhere, limit, clients, word):
    """The bystander's attach is refused 429 (with Retry-After) over limit, counted once, and the
    other namespace's session attaches and echoes word all the same. Returns its client (also
    appended to clients, closed by the caller)."""
    status, head = attach_status(gw, env, "bystander", two["bystander"])
    assert status == 429 and "Retry-After:" in head, head
    assert gw.metric('telo_gateway_limited_total{limit="%s"}' % limit) == 1
    other, other_token = elsewhere
    clients.append(Client(attach_url(gw, other, "neighbour"), other_token, V5))
    assert echo_works(clients[-1], word)
    return clients[-1]


def test_one_namespace_cannot_take_every_client_slot(env, two, elsewhere, tmp_path):
    """--max-clients-per-namespace: a tenant whose sessions hold their namespace's share of the
    clients gets 429 for one more; another namespace's session still attaches, far below
    --max-clients."""
    gw = start_gateway(env, tmp_path, "nsclients", "--max-clients", "8",
                       "--max-clients-per-namespace", "3")
    clients = []
    try:
        clients += [Client(attach_url(gw, env, "victim"), two["victim"], V5) for _ in range(2)]
        clients.append(Client(attach_url(gw, env, "bystander"), two["bystander"], V5))
        refused_here_served_elsewhere(gw, env, two, elsewhere, "clients_per_namespace", clients,
                                      "another-tenant")
        # A freed slot of the namespace is usable again.
        clients.pop(0).close()
        wait_until(lambda: gw.metric("telo_gateway_clients") == 3, timeout=10,
                   what="a client gone")
        clients.append(Client(attach_url(gw, env, "bystander"), two["bystander"], V5))
        assert echo_works(clients[-1], "room-again")
        assert gw.metric('telo_gateway_limited_total{limit="clients"}') == 0
    finally:
        for c in clients:
            c.close()
        gw.stop()


def test_one_namespace_cannot_hold_every_session(env, two, elsewhere, tmp_path):
    """--max-sessions-per-namespace: with 1, a tenant's second session is refused 429 while its
    first has a client, and takes that one's place once it has none; another namespace's
    session is held beside it all along."""
    gw = start_gateway(env, tmp_path, "nssessions", "--max-sessions", "8",
                       "--max-sessions-per-namespace", "1")
    clients = []
    try:
        clients.append(Client(attach_url(gw, env, "victim"), two["victim"], V5))
        assert echo_works(clients[0], "held")
        neighbour = refused_here_served_elsewhere(gw, env, two, elsewhere,
                                                  "sessions_per_namespace", clients, "beside-it")
        assert gw.metric("telo_gateway_sessions") == 2
        clients.pop(0).close()
        wait_until(lambda: gw.metric("telo_gateway_clients") == 1, timeout=10,
                   what="the victim's client gone")
        clients.append(Client(attach_url(gw, env, "bystander"), two["bystander"], V5))
        assert echo_works(clients[-1], "in-its-place")
        assert gw.metric("telo_gateway_evictions_total") == 1
        assert gw.metric("telo_gateway_sessions") == 2
        assert echo_works(neighbour, "untouched")
        assert gw.metric('telo_gateway_limited_total{limit="sessions"}') == 0
    finally:
        for c in clients:
            c.close()
        gw.stop()


def non_reader(gw, env, name, token):
    """An attached client that never reads, with a receive buffer as small as the kernel allows,
    so what the gateway sends it piles up in the gateway rather than in socket buffers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", gw.port))
    s.sendall(upgrade_request(env, name, token))
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def test_clients_that_do_not_read_share_one_queue_budget(env, two, tmp_path):
    """--client-queue-total-bytes: eight attached clients that never read each hold their share
    of it (here the 16 KiB floor) plus at most one 16 KiB chunk, not --client-queue-bytes (256
    KiB) each, while a flood passes; the reading client still gets all of it."""
    gw = start_gateway(env, tmp_path, "queues", "--client-queue-total-bytes", "65536")
    stalled = []
    try:
        reader = Client(attach_url(gw, env, "victim"), two["victim"], V5)
        assert echo_works(reader, "before-flood")
        stalled = [non_reader(gw, env, "victim", two["victim"]) for _ in range(8)]
        wait_until(lambda: gw.metric("telo_gateway_clients") == 9, timeout=10,
                   what="nine clients")
        mark = len(reader.out)
        reader.type("flood %d\n" % (8 * 1000 * 1000))
        reader.wait_for("flood: done\r\n", timeout=120, start=mark)
        time.sleep(0.5)  # the reader's own queue drains
        queued = gw.metric("telo_gateway_client_queued_bytes")
        print("\n8 stalled clients beside a reader, after an 8 MB flood: %d bytes queued" % queued)
        assert gw.proc.poll() is None, "the gateway died:\n" + gw.log()[-3000:]
        # They did fill their queues (the bound is what stopped them)...
        assert queued >= 8 * 16 * 1024, queued
        # ...to their share and one chunk each (16 KiB at most), where each took 256 KiB before.
        assert queued <= 8 * (16 + 16) * 1024, queued
        assert echo_works(reader, "after-flood")
    finally:
        for s in stalled:
            s.close()
        gw.stop()


def test_a_reader_with_the_smallest_queue_gets_every_byte_and_the_end(env, two, tmp_path):
    """--client-queue-bytes 16384 (its floor): a client that keeps up gets an 8 MB flood whole
    and its end, however little its queue holds. Each pump stops where the queue is full; when
    the socket took that at once there is no drain to call it again, so a pump that stopped
    there and did not go on left the reader a ring behind after every batch of output and, when
    the output stopped, without its end (one CI run: no `flood: done` in 120 s)."""
    ring = 32 << 20  # larger than the flood: any byte lost here is the gateway's doing
    gw = start_gateway(env, tmp_path, "smallqueue", "--client-queue-bytes", "16384",
                       "--ring-bytes", str(ring))
    try:
        reader = Client(attach_url(gw, env, "victim"), two["victim"], V5)
        assert echo_works(reader, "before-flood")
        size = 8 * 1000 * 1000
        mark = len(reader.out)
        reader.type("flood %d\n" % size)
        end = reader.wait_for("flood: done\r\n", timeout=120, start=mark)
        assert b"[telo-gateway: output skipped" not in bytes(reader.out[mark:end])
        assert end - mark >= size, "only %d of %d bytes arrived" % (end - mark, size)
        assert gw.metric("telo_gateway_gaps_total") == 0
        assert echo_works(reader, "after-flood")
    finally:
        gw.stop()


def test_a_flood_of_refusals_cannot_flood_the_log(env, tmp_path):
    """Anyone who can connect causes a refusal at will. 1,500 attaches from a foreign origin are
    each refused 403 and counted, but their log lines stay within the budget (100 at once, 10 a
    second), and the ones held back are told in one line within 10 s of the flood's end: the
    flood neither fills the log at its own rate nor goes unsaid."""
    gw = start_gateway(env, tmp_path, "refusals")
    try:
        n = 1500
        request = upgrade_request(env, "nobody", "t").replace(
            b"\r\n\r\n", b"\r\nOrigin: http://evil.example\r\n\r\n", 1)

        def refused(_):
            s = connect_from("127.0.0.1", gw)
            try:
                return http_status(s, request)[0]
            finally:
                s.close()
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            codes = collections.Counter(pool.map(refused, range(n)))
        elapsed = time.monotonic() - start
        assert codes == {403: n}, codes
        lines = gw.log().count('msg="attach refused"')
        bound = 100 + 10 * elapsed + 1
        print("\nrefusal flood: %d requests in %.1f s, %d lines logged (bound %.0f)" % (
            n, elapsed, lines, bound))
        assert lines <= bound, "%d refusal lines for %d refusals in %.1f s" % (lines, n, elapsed)
        summary = re.compile(r'msg="log lines suppressed" of="attach refused" suppressed=(\d+)')

        def told():
            log = gw.log()
            return log.count('msg="attach refused"') + sum(int(m) for m in summary.findall(log))
        # The last ones held back are told by the timer (no refusal comes after them).
        wait_until(lambda: told() == n, timeout=15, interval=0.5,
                   what="every refusal logged or told as held back")
        held = sum(int(m) for m in summary.findall(gw.log()))
        assert gw.metric("telo_gateway_log_lines_suppressed_total") == held
    finally:
        assert gw.stop() == 0

"""The operator's probes on a listener of their own (--health-bind-address; the chart points
the kubelet's probes there and its NetworkPolicy keeps that port closed to pods): clients that
hold every connection the metrics port allows (256, 16 per address) cannot fail /healthz and
/readyz, so they cannot get the operator restarted."""

import os
import re
import socket
import subprocess

import pytest

from conftest import IN_CLUSTER, OPERATOR_BIN_DIR, http_get, wait_until


def health_port(op):
    def port():
        with open(op.log_path) as f:
            m = re.search(r'msg="serving health and metrics" flag=--health-bind-address '
                          r'.* port=(\d+)', f.read())
        return int(m.group(1)) if m else None
    return wait_until(port, timeout=10, interval=0.05, what="the health listener's port")


def test_probes_answer_on_their_own_listener_while_the_metrics_port_is_full(operator):
    if IN_CLUSTER:
        pytest.skip("the operator runs in a pod: its loopback listeners are not this machine's")
    op = operator(args=("--health-bind-address", "127.0.0.1:0"))
    port = health_port(op)
    assert port != op.port
    socks = []
    try:
        for i in range(16):
            for _ in range(16):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.%d" % (10 + i), 0))
                s.connect(("127.0.0.1", op.port))
                socks.append(s)
        # The metrics port is full: a request there is closed at accept...
        wait_until(lambda: op.get("/healthz")[0] == 0, timeout=10, interval=0.2,
                   what="the metrics port refusing a 257th connection")
        # ...and the probes' listener answers.
        for path in ("/healthz", "/readyz"):
            status, body = http_get("http://127.0.0.1:%d%s" % (port, path))
            assert status == 200, (path, status, body)
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: op.get("/healthz")[0] == 200, timeout=40, interval=0.5,
               what="the metrics port serving again")


def test_a_bad_health_bind_address_is_refused_naming_the_flag(cluster):
    proc = subprocess.run([os.path.join(OPERATOR_BIN_DIR, "telo-operator"), "run",
                           "--kubeconfig", cluster.kubeconfig, "--http-bind-address", "0",
                           "--health-bind-address", "8081"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "--health-bind-address 8081: want HOST:PORT" in proc.stderr, proc.stderr[-2000:]

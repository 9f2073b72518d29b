"""`make run` (hack/run.sh) as a newcomer sees it (issue 19), in a namespace of the test's own, with
its own gateway and operator ports and pid files, so a `make run` left running is not touched.

On the real node: the output holds the sample app's HTTP answer (fetched by run.sh through the
API server's proxy to the session's Service) and exactly one `kubectl telo attach` command, and
that command, typed as printed into an interactive bash whose environment has neither KUBECONFIG
nor kubectl nor the plugin, attaches (the stand-in echoes a typed line) and detaches with ctrl-p
ctrl-q. Skipped, with the reason, without a Ready real node or without root. With
TELO_REAL_NODE=0: kwok's nodes, and the one line that says why."""

import os
import pty
import re
import select
import signal
import socket
import subprocess
import time

import pytest

from conftest import ROOT, OPERATOR_BIN_DIR

ANSWER = "Hello from telo-operator (answered by telo-session-test, a stand-in for the Telo CLI)"
CLEAN_ENV = {"HOME": os.path.expanduser("~"), "TERM": "xterm",
             "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def real_node_ready(cluster):
    out = cluster.kubectl("get", "nodes", "-l", "telo.run/node=real", "-o",
                          'jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}',
                          check=False).stdout
    return "True" in out.split()


@pytest.fixture
def make_run(cluster, namespace):
    """make_run(**env) runs hack/run.sh on this checkout's build dir for the test's namespace and
    returns its CompletedProcess; at teardown the sample is deleted while the operator still runs,
    then the operator and gateway it started are stopped (by their pid files)."""
    pids = [os.path.join(cluster.dir, "pids", "telo-%s-%s.pid" % (p, namespace))
            for p in ("operator", "gateway")]
    ran = []

    def run(**extra):
        env = dict(os.environ, TELO_DEMO_NAMESPACE=namespace, TELO_RUN_WATCH_NAMESPACES=namespace,
                   TELO_OPERATOR_HTTP_PORT=str(free_port()), TELO_GATEWAY_PORT=str(free_port()))
        env.pop("TELO_REAL_NODE", None)  # make run's own choice, unless the test sets it
        env.update(extra)
        proc = subprocess.run([os.path.join(ROOT, "hack", "run.sh"),
                               os.path.dirname(OPERATOR_BIN_DIR)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        ran.append(proc)
        print("--- hack/run.sh exited %d\n%s\n--- stderr\n%s" % (proc.returncode, proc.stdout,
                                                                  proc.stderr))
        return proc

    yield run
    cluster.kubectl("delete", "telosessions.telo.run", "--all", "-n", namespace, "--timeout=60s",
                    check=False)
    for path in pids:
        try:
            with open(path) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        try:
            os.unlink(path)
        except OSError:
            pass


def type_into_shell(command, line, timeout=30):
    """Types command into an interactive bash on a pseudo-terminal (a clean environment), then
    line once attached, then ctrl-p ctrl-q, then `echo rc=$?`; returns what the terminal showed."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], CLEAN_ENV)
    seen = b""

    def until(want, seconds):
        """Reads until want (bytes, or a compiled pattern) is in what the terminal showed."""
        nonlocal seen
        found = (lambda: want.search(seen)) if hasattr(want, "search") else (lambda: want in seen)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not found():
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
        return bool(found())

    try:
        os.write(fd, command.encode() + b"\r")
        if until(b"attached to", timeout):
            os.write(fd, line.encode() + b"\r")
            if until(b"echo: " + line.encode(), timeout):
                os.write(fd, b"\x10\x11")  # ctrl-p ctrl-q
                if until(b"detached", timeout):
                    os.write(fd, b"echo rc=$?\r")
                    until(re.compile(rb"rc=[0-9]"), 5)  # the answer, not the typed line's echo
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    return seen.decode(errors="replace")


def test_make_run_prints_the_apps_answer_and_an_attach_command_that_works(cluster, make_run):
    if os.geteuid() != 0:
        pytest.skip("make run uses the real node only as root")
    if not real_node_ready(cluster):
        pytest.skip("no Ready node labelled telo.run/node=real (TELO_REAL_NODE=1 "
                    "hack/cluster/up.sh): make run would use kwok")
    proc = make_run()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "the session runs on the real node telo-real-0 (pods run for real: containerd, runc, a " \
        "kubelet)" in out, out[:4]
    assert ANSWER in out, proc.stdout
    assert "its image\nis a stand-in: telo-session-test" in proc.stdout, proc.stdout
    attach = [s for s in out if "kubectl telo attach" in s]
    assert len(attach) == 1, attach

    shown = type_into_shell(attach[0].strip(), "typed-as-a-newcomer")
    assert "kubectl-telo: attached to hello-standin (gateway)" in shown, shown
    assert "echo: typed-as-a-newcomer" in shown, shown
    assert "kubectl-telo: detached; session hello-standin goes on" in shown, shown
    assert "rc=0" in shown, shown


def test_make_run_says_in_one_line_why_it_uses_kwok(cluster, namespace, make_run):
    proc = make_run(TELO_REAL_NODE="0")
    assert proc.returncode == 0, proc.stderr
    why = [s for s in proc.stdout.splitlines() if s.startswith("the session runs on")]
    assert why == ["the session runs on kwok's simulated nodes (nothing runs behind them), not "
                   "the real node: TELO_REAL_NODE=0 is set"], why
    assert "kubectl telo attach" not in proc.stdout, proc.stdout
    phase = cluster.kubectl("get", "telosessions.telo.run", "hello", "-n", namespace, "-o",
                            "jsonpath={.status.phase}", check=False).stdout
    assert phase == "Running", phase

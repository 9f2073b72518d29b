"""The informer cache (pkg/cache reflector + store) against the real API server, through the
dev tool build/bin/telo-informer: list then watch, every change seen once, and after an API
server restart during which objects vanished, a relist that reports their deletion."""

import json
import os
import re
import signal
import subprocess

import pytest

from conftest import ROOT, LineReader, wait_until

BIN_DIR = os.environ.get("TELO_BIN_DIR") or os.path.join(ROOT, "build", "bin")


def informer(cluster, *args):
    return LineReader([os.path.join(BIN_DIR, "telo-informer"), "--kubeconfig",
                       cluster.kubeconfig, *args])


def stats(reader):
    reader.proc.send_signal(signal.SIGUSR1)
    line = reader.expect(lambda l: l.startswith("STATS "), what="STATS")
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def cache_matches_server(cluster, inf, namespace, present, absent):
    names = set(cluster.kubectl("get", "configmaps", "-n", namespace, "-o",
                                "jsonpath={.items[*].metadata.name}").stdout.split())
    assert present <= names and not absent & names, names
    return stats(inf)["objects"] == len(names)


def test_list_then_watch_sees_every_change_once(cluster, namespace):
    cluster.kubectl("create", "configmap", "before", "-n", namespace)
    inf = informer(cluster, "-n", namespace, "configmaps")
    try:
        inf.expect(lambda l: l.startswith("SYNCED"), what="the first list")
        assert any(l.startswith("ADD %s/before " % namespace) and l.endswith("from=list")
                   for l in inf.seen)
        cluster.kubectl("create", "configmap", "after", "-n", namespace)
        inf.expect(lambda l: l.startswith("ADD %s/after " % namespace), what="ADD after")
        cluster.kubectl("patch", "configmap", "after", "-n", namespace, "-p",
                        '{"data":{"k":"v"}}')
        inf.expect(lambda l: l.startswith("UPDATE %s/after " % namespace), what="UPDATE after")
        cluster.kubectl("delete", "configmap", "after", "-n", namespace)
        inf.expect(lambda l: l.startswith("DELETE %s/after " % namespace), what="DELETE after")
        # before (and kube-root-ca.crt, when the controller-manager has published it) remain;
        # one list, one watch, no failures.
        wait_until(lambda: cache_matches_server(cluster, inf, namespace, {"before"}, {"after"}),
                   timeout=30, what="the cache to match the API server")
        s = stats(inf)
        assert (s["lists"], s["watches"], s["failures"]) == (1, 1, 0), s
        adds = [l for l in inf.seen if l.startswith("ADD %s/after " % namespace)]
        assert len(adds) == 1
    finally:
        assert inf.stop() == 0, inf.stderr_tail()


def test_a_page_too_large_for_the_client_is_asked_for_again_in_smaller_pages(cluster, namespace):
    """Anyone who may create objects the operator lists (a tenant's labelled Secrets or pods)
    can make one page of 500 pass the client's 64 MiB answer cap, each object holding up to
    about 1 MiB: here 70 ConfigMaps of 1,000,000 bytes. The page is asked for again half as
    long until it fits, and the cache syncs with all of them. Before, the same page failed
    forever: the operator's caches never synced and it reconciled nothing, for every tenant."""
    blob = "x" * 1000000
    items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big-%02d" % i},
              "data": {"k": blob}} for i in range(70)]
    cluster.kubectl("create", "-n", namespace, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    inf = informer(cluster, "-n", namespace, "--quiet", "configmaps")
    try:
        inf.expect(lambda l: l.startswith("SYNCED"), timeout=120, what="the first list")
        s = stats(inf)
    finally:
        rc = inf.stop()
        log = inf.proc.stderr.read()
        cluster.kubectl("delete", "configmaps", "-n", namespace, "--all", "--wait=false")
    assert rc == 0, log[-2000:]
    assert s["objects"] >= 70 and s["failures"] == 0, s
    assert "list page too large; asking for smaller pages" in log, log[-2000:]


def etcdctl(cluster, *args):
    proc = subprocess.run([cluster.etcdctl_path, "--endpoints", cluster.etcd_endpoint, *args],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.disruptive
def test_relist_after_apiserver_restart_reports_what_vanished(cluster, namespace):
    for name in ("keep", "vanish"):
        cluster.kubectl("create", "configmap", name, "-n", namespace)
    inf = informer(cluster, "-n", namespace, "configmaps")
    try:
        inf.expect(lambda l: l.startswith("SYNCED"), what="the first list")
        cluster.script("down.sh", "kube-apiserver")
        # Behind the API server's back: the object vanishes from etcd and history is compacted,
        # so the informer's resourceVersion cannot be resumed and only a relist can tell.
        etcdctl(cluster, "del", "/registry/configmaps/%s/vanish" % namespace)
        revision = json.loads(etcdctl(cluster, "endpoint", "status", "-w", "json"))[0]
        etcdctl(cluster, "compact", str(revision["Status"]["header"]["revision"]))
        assert inf.proc.poll() is None, "the informer must survive the API server going away"
        cluster.script("up.sh")
        line = inf.expect(lambda l: l.startswith("DELETE %s/vanish " % namespace), timeout=90,
                          what="the deletion of 'vanish'")
        assert line.endswith("from=list"), line
        cluster.kubectl("create", "configmap", "newcomer", "-n", namespace)
        inf.expect(lambda l: l.startswith("ADD %s/newcomer " % namespace), timeout=30,
                   what="the newcomer, through the new watch")
        # kube-root-ca.crt is published by the controller-manager, itself reconnecting after the
        # restart, at any moment: the cache must end up holding what the server holds.
        wait_until(lambda: cache_matches_server(cluster, inf, namespace, {"keep", "newcomer"},
                                                {"vanish"}),
                   timeout=60, what="the cache to match the API server")
        s = stats(inf)
        # A relist: after a 410, or after the error a watch from a compacted version can end in.
        assert s["lists"] >= 2 and s["failures"] >= 1, s
        # Nothing that stayed was reported as added again.
        assert not [l for l in inf.seen if l.startswith("ADD %s/keep " % namespace)
                    and "from=watch" in l]
    finally:
        assert inf.stop() == 0, inf.stderr_tail()

"""Our Kubernetes client (pkg/kube) against the real API server, through the development CLI
`telo-kube ...` (cmd/telo-kube), from $TELO_BIN_DIR like the other binaries (e.g. the sanitizer
build, build-asan/bin); the default is build/bin/telo-kube."""

import json
import os
import stat
import subprocess

import pytest

from conftest import OPERATOR_BIN_DIR, LineReader, wait_until

BIN = os.path.join(OPERATOR_BIN_DIR, "telo-kube")


def kube(cluster, *args, check=True, input=None, timeout=120, kubeconfig=None):
    proc = subprocess.run([BIN, "--kubeconfig", kubeconfig or cluster.kubeconfig, *args],
                          input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError("kube %s failed (exit %d): %s" %
                             (" ".join(args), proc.returncode, proc.stderr.strip()))
    return proc


def kube_json(cluster, *args, **kw):
    return json.loads(kube(cluster, *args, **kw).stdout)


class Watch(LineReader):
    """`kube watch` in the background."""

    def __init__(self, cluster, *args):
        super().__init__([BIN, "--kubeconfig", cluster.kubeconfig, "watch", *args])

    def expect(self, predicate, timeout=30, what="a watch line"):
        return super().expect(predicate, timeout=timeout, what=what)


def configmap_yaml(ns, name, data):
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata:", "  name: %s" % name,
             "  namespace: %s" % ns, "data:"]
    lines += ["  %s: %s" % (k, json.dumps(v)) for k, v in data.items()]
    return "\n".join(lines) + "\n"


def test_crud_and_server_side_apply(cluster, namespace, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(configmap_yaml(namespace, "demo", {"a": "1", "b": "two words"}))
    first = kube_json(cluster, "apply", "-f", str(manifest), "--field-manager", "e2e")
    assert first["data"] == {"a": "1", "b": "two words"}
    assert first["metadata"]["managedFields"][0]["manager"] == "e2e"
    assert first["metadata"]["managedFields"][0]["operation"] == "Apply"
    # An identical second apply changes nothing, so the server keeps the resourceVersion.
    second = kube_json(cluster, "apply", "-f", str(manifest), "--field-manager", "e2e")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    got = kube_json(cluster, "get", "configmaps", "demo", "-n", namespace)
    assert got["metadata"]["uid"] == first["metadata"]["uid"]
    assert cluster.kubectl_json("get", "configmap", "demo", "-n", namespace)["data"]["b"] == \
        "two words"

    patched = kube_json(cluster, "patch", "cm", "demo", "-n", namespace, "-p",
                        '{"data":{"c":"3"}}')
    assert patched["data"]["c"] == "3"
    assert int(patched["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    jsonpatched = kube_json(cluster, "patch", "configmap", "demo", "-n", namespace, "--type",
                            "json", "-p", '[{"op":"remove","path":"/data/c"}]')
    assert "c" not in jsonpatched["data"]

    listed = kube_json(cluster, "list", "configmaps", "-n", namespace, "--limit", "1")
    names = sorted(i["metadata"]["name"] for i in listed["items"])
    assert names == ["demo", "kube-root-ca.crt"]  # two pages of one, merged
    assert "continue" not in listed["metadata"]

    # A stale delete precondition is refused; the right one deletes.
    stale = kube(cluster, "delete", "cm", "demo", "-n", namespace, "--uid", "not-the-uid",
                 check=False)
    assert stale.returncode == 1
    assert "409 Conflict" in stale.stderr
    kube(cluster, "delete", "cm", "demo", "-n", namespace, "--uid", first["metadata"]["uid"],
         "--propagation-policy", "Background")
    gone = kube(cluster, "get", "cm", "demo", "-n", namespace, check=False)
    assert gone.returncode == 1
    assert '404 NotFound: configmaps "demo" not found' in gone.stderr


def test_named_group_and_cluster_scoped_resources(cluster, namespace, tmp_path):
    manifest = tmp_path / "role.yaml"
    manifest.write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: r1\n"
        "  namespace: %s\nrules:\n- apiGroups: ['']\n  resources: [configmaps]\n"
        "  verbs: [get]\n" % namespace)
    role = kube_json(cluster, "apply", "-f", str(manifest), "--field-manager", "e2e")
    assert role["rules"][0]["verbs"] == ["get"]
    assert kube_json(cluster, "get", "roles.rbac.authorization.k8s.io", "r1", "-n",
                     namespace)["metadata"]["name"] == "r1"
    ns = kube_json(cluster, "get", "ns", namespace)
    assert ns["kind"] == "Namespace"
    unknown = kube(cluster, "get", "nosuchthings", "x", check=False)
    assert unknown.returncode == 1
    assert 'does not have a resource type "nosuchthings"' in unknown.stderr


def test_stale_update_conflicts(cluster, namespace, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(configmap_yaml(namespace, "c", {"v": "1"}))
    kube(cluster, "create", "-f", str(manifest))
    old = kube_json(cluster, "get", "cm", "c", "-n", namespace)
    kube(cluster, "patch", "cm", "c", "-n", namespace, "-p", '{"data":{"v":"2"}}')
    stale = tmp_path / "stale.json"
    old["data"]["v"] = "3"
    stale.write_text(json.dumps(old))
    result = kube(cluster, "update", "-f", str(stale), check=False)
    assert result.returncode == 1
    assert "409 Conflict" in result.stderr
    assert "the object has been modified" in result.stderr
    # With the current resourceVersion the same update goes through.
    fresh = kube_json(cluster, "get", "cm", "c", "-n", namespace)
    fresh["data"]["v"] = "3"
    stale.write_text(json.dumps(fresh))
    assert kube_json(cluster, "update", "-f", str(stale))["data"]["v"] == "3"
    # A second create of the same name: AlreadyExists.
    again = kube(cluster, "create", "-f", str(manifest), check=False)
    assert "409 AlreadyExists" in again.stderr


def test_watch_sees_added_modified_deleted_and_bookmark(cluster, namespace, tmp_path):
    w = Watch(cluster, "configmaps", "-n", namespace, "--timeout", "8")
    try:
        # The namespace's own kube-root-ca.crt arrives first; it also shows the watch is up.
        w.expect(lambda l: l.startswith("ADDED %s/kube-root-ca.crt" % namespace))
        manifest = tmp_path / "cm.yaml"
        manifest.write_text(configmap_yaml(namespace, "w", {"k": "1"}))
        kube(cluster, "apply", "-f", str(manifest), "--field-manager", "e2e")
        w.expect(lambda l: l.startswith("ADDED %s/w " % namespace), what="ADDED")
        kube(cluster, "patch", "cm", "w", "-n", namespace, "-p", '{"data":{"k":"2"}}')
        w.expect(lambda l: l.startswith("MODIFIED %s/w " % namespace), what="MODIFIED")
        kube(cluster, "delete", "cm", "w", "-n", namespace)
        deleted = w.expect(lambda l: l.startswith("DELETED %s/w " % namespace), what="DELETED")
        # Bookmarks come from the watch cache (right after the initial events, and before the
        # timeout); the stream then ends cleanly at timeoutSeconds.
        end = w.expect(lambda l: l.startswith("END"), timeout=40, what="END")
        assert any(l.startswith("BOOKMARK") for l in w.seen), w.seen
        assert end.startswith("END closed rv=")
        assert int(end.split("rv=")[1]) >= int(deleted.split()[-1])
        assert w.proc.wait(timeout=10) == 0
    finally:
        w.stop()


def test_watch_from_compacted_version_reports_expired(cluster, namespace):
    # Compact etcd up to now, so a watch from an early version can be served neither from etcd
    # nor from the watch cache: the API server answers 410 Expired (as an ERROR event).
    status = subprocess.run([cluster.etcdctl_path, "--endpoints", cluster.etcd_endpoint,
                             "endpoint", "status", "-w", "json"], capture_output=True, text=True,
                            check=True)
    revision = json.loads(status.stdout)[0]["Status"]["header"]["revision"]
    subprocess.run([cluster.etcdctl_path, "--endpoints", cluster.etcd_endpoint, "compact",
                    str(revision)], capture_output=True, text=True, check=True)
    proc = kube(cluster, "watch", "configmaps", "-n", namespace, "--resource-version", "2",
                "--timeout", "10", check=False)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert proc.stdout.strip().splitlines()[-1].startswith("END expired rv=2 code=Expired")
    # The watch cache says "too old resource version", etcd "... watch is too old".
    assert "410 Expired:" in proc.stderr and "too old" in proc.stderr, proc.stderr


def test_watch_and_200_requests_share_one_http2_connection(cluster, namespace):
    # --hold keeps the connection open after the requests so `ss` can count it from outside.
    proc = subprocess.Popen([BIN, "--kubeconfig", cluster.kubeconfig, "stress",
                             "--requests", "200", "--with-watch", "--hold", "3", "-n", namespace],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(proc.stdout.readline()) == {"holding": 3.0}
        ss = subprocess.run(["ss", "-Htnp", "state", "established"], capture_output=True,
                            text=True, check=True).stdout
        ours = [l for l in ss.splitlines() if "pid=%d," % proc.pid in l]
        report = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(ours) == 1, ss
    assert report["ok"] == 200 and report["failed"] == 0
    assert report["watch_open"] is True
    assert report["connections"] == 1  # CURLINFO_NUM_CONNECTS summed over every transfer
    assert report["tcp_connections"] == 1  # the kernel's view, from /proc/self/fd


def _write_exec_kubeconfig(cluster, tmp_path, token):
    admin = cluster.kubectl_json("config", "view", "--raw", "--minify")
    server = admin["clusters"][0]["cluster"]["server"]
    ca = os.path.join(cluster.dir, "pki", "ca.crt")
    counter = tmp_path / "runs"
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        "#!/bin/sh\n"
        "echo run >> %s\n"
        "test \"$KUBERNETES_EXEC_INFO\" != '' || { echo 'no exec info' >&2; exit 1; }\n"
        "cat <<EOF\n"
        '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        '"status":{"token":"%s"}}\n'
        "EOF\n" % (counter, token))
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    kubeconfig = tmp_path / "exec-kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: local\n  cluster:\n    server: %s\n    certificate-authority: %s\n"
        "users:\n- name: plugin\n  user:\n    exec:\n"
        "      apiVersion: client.authentication.k8s.io/v1\n      command: %s\n"
        "      interactiveMode: Never\n"
        "contexts:\n- name: x\n  context:\n    cluster: local\n    user: plugin\n"
        "current-context: x\n" % (server, ca, plugin))
    return kubeconfig, counter


def test_exec_plugin_kubeconfig(cluster, namespace, tmp_path):
    tokens = open(os.path.join(cluster.dir, "pki", "tokens.csv")).read()
    token = tokens.split(",")[0].strip()
    kubeconfig, counter = _write_exec_kubeconfig(cluster, tmp_path, token)
    got = kube_json(cluster, "get", "namespaces", namespace, kubeconfig=str(kubeconfig))
    assert got["metadata"]["name"] == namespace
    listed = kube_json(cluster, "list", "cm", "-n", namespace, kubeconfig=str(kubeconfig))
    assert listed["kind"] == "ConfigMapList"
    assert counter.read_text().count("run") == 2  # once per process: the credential is cached

    # A plugin that returns a token the server refuses: 401 after one re-exec.
    bad_kubeconfig, bad_counter = _write_exec_kubeconfig(cluster, tmp_path / "..", "wrong")
    denied = kube(cluster, "get", "ns", namespace, kubeconfig=str(bad_kubeconfig), check=False)
    assert denied.returncode == 1
    assert "401 Unauthorized" in denied.stderr
    assert bad_counter.read_text().count("run") == 2  # the 401 made us run it again, once


@pytest.mark.disruptive
def test_apiserver_restart_mid_watch_ends_cleanly_and_rewatch_works(cluster, namespace,
                                                                     tmp_path):
    # Watch from a listed version: without a watch cache (the local cluster has none for
    # ConfigMaps) a watch "from now" sends no initial ADDED to wait for, so start from a known
    # version and let the change below arrive whenever the stream is up.
    rv = kube_json(cluster, "list", "configmaps", "-n", namespace)["metadata"]["resourceVersion"]
    w = Watch(cluster, "configmaps", "-n", namespace, "--rewatch", "--timeout", "300",
              "--duration", "120", "--resource-version", rv)
    try:
        manifest = tmp_path / "a.yaml"
        manifest.write_text(configmap_yaml(namespace, "before", {"k": "1"}))
        kube(cluster, "apply", "-f", str(manifest), "--field-manager", "e2e")
        w.expect(lambda l: l.startswith("ADDED %s/before " % namespace))

        cluster.script("down.sh", "kube-apiserver")
        end = w.expect(lambda l: l.startswith("END"), timeout=30, what="END after the kill")
        assert end.startswith("END connection") or end.startswith("END closed"), end
        assert w.proc.poll() is None  # a clean end, not a crash
        cluster.script("up.sh")

        manifest.write_text(configmap_yaml(namespace, "after", {"k": "2"}))
        wait_until(lambda: kube(cluster, "apply", "-f", str(manifest), "--field-manager", "e2e",
                                check=False).returncode == 0, timeout=60,
                   what="the restarted API server to accept writes")
        line = w.expect(lambda l: l.startswith("ADDED %s/after " % namespace)
                        or l.startswith("END expired"), timeout=60,
                        what="ADDED after the re-watch, or Expired")
        if line.startswith("END expired"):
            # A restarted API server whose watch cache no longer reaches back to our version
            # answers 410: the client reports it distinctly (and its caller relists; the
            # reflector's side of that is test_informer's). A fresh watch sees the change.
            assert w.proc.wait(timeout=10) == 3
            fresh = Watch(cluster, "configmaps", "-n", namespace, "--timeout", "60",
                          "--duration", "30")
            try:
                fresh.expect(lambda l: l.startswith("ADDED %s/after " % namespace), timeout=30,
                             what="ADDED after from a fresh watch")
            finally:
                fresh.stop()
        else:
            # Resumed from the last version: "before" is not replayed.
            assert sum(1 for l in w.seen if l.startswith("ADDED %s/before " % namespace)) == 1
    finally:
        w.stop()

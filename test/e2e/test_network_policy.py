"""The chart's NetworkPolicies, enforced on the real node (telo-netpol, hack/cluster/README.md
"NetworkPolicy"): a session pod is reachable from the gateway (its own pods) and from the
ingress controller, from no other pod; its egress reaches addresses outside the blocked ranges but
not the cloud metadata address 169.254.169.254. A build pod gets the same egress (it downloads
tenants' URL bundles) and reaches the registries named in networkPolicy.builds.registryPeers.

The policies are the chart's own, rendered by `helm template` for the test's namespaces. Before
they are applied, every connection the tests expect to be refused is made and must succeed, so a
test fails whenever the policy or its enforcement is missing, not only when the network is broken.

Pods are the stand-in CLI (telo-session-test) serving HTTP, clients are `wget` run in them with
`kubectl exec`: pod-to-pod traffic, the kind the enforcer sees. Connections from this machine's
root processes (this test, the kubelet's probes) are not policed, as with upstream
kube-network-policies, so they cannot stand in for a pod.

There is no cloud metadata server here, and the node forwards nothing (ip_forward is 0), so a
"world" pod stands in for it and for a public address: it gets 169.254.169.254 and 198.51.100.10
(TEST-NET-2, outside every blocked range) on its interface, and the client session pod gets
on-link routes to both, added from this machine in the pods' network namespaces. Without a
policy both answer; with the chart's, only the public one must."""

import json
import os
import subprocess
import time

import pytest

from conftest import ROOT, _tool_dir, wait_for_default_service_account, wait_until
from test_chart import render, helm  # noqa: F401  (helm is a fixture)
from test_real_node import _real_node, apply, entry_configmap, session_pod, wait_running
from test_sessions import wait_phase
from test_sessions_real_node import bundle_configmap, real, real_node, real_session  # noqa: F401

METADATA_IP = "169.254.169.254"
PUBLIC_IP = "198.51.100.10"  # TEST-NET-2: not in the chart's blockedEgressCidrs
PORT = 8080
RELEASE = "telo-operator"
INGRESS_LABELS = {"app.kubernetes.io/name": "ingress-nginx"}
SESSION_LABELS = {"app.kubernetes.io/managed-by": "telo-operator"}  # the chart's config.managedBy
# Each pod and the namespace (by role) it runs in.
HOME = {"gateway": "ops", "stranger": "ops", "session-a": "sessions", "session-b": "sessions",
        "ingress": "ingress", "dns": "dns", "world": "world", "operator": "ops",
        "builder": "builds", "registry": "registry"}
# The registry stand-in's labels, which the test names in networkPolicy.builds.registryPeers.
REGISTRY_LABELS = {"app": "registry-stand-in"}
# A port session-a serves without declaring it (issue 17: the operator's probes reach declared
# TCP ports only, the container ports the operator names telo-tcp-<i>).
UNDECLARED = 8081


@pytest.fixture(scope="module")
def enforcing_node(cluster):
    if _real_node(cluster) is None:
        pytest.skip("no Ready node labelled telo.run/node=real (TELO_REAL_NODE=1 hack/cluster/up.sh)")
    disabled = os.path.join(cluster.dir, "real-node", "netpol.disabled")
    if os.path.exists(disabled):
        with open(disabled) as f:
            pytest.skip("the real node enforces no NetworkPolicy here: " + f.read().strip())
    with open(os.path.join(cluster.dir, "real-node", "images", "refs.json")) as f:
        return json.load(f)


def crictl(cluster, *args):
    sock = "unix://" + os.path.join(cluster.dir, "real-node", "containerd", "containerd.sock")
    return subprocess.run([os.path.join(_tool_dir("cri-tools"), "crictl"), "--config", "/dev/null",
                           "--runtime-endpoint", sock, "--image-endpoint", sock, *args],
                          check=True, capture_output=True, text=True, timeout=30).stdout


def in_pod_netns(cluster, namespace, pod, *command):
    """Runs an `ip` command in a pod's network namespace, from this machine (as root), so the
    pods themselves need no NET_ADMIN."""
    ids = crictl(cluster, "pods", "-q", "--namespace", namespace, "--name", pod,
                 "--state", "ready").split()
    assert len(ids) == 1, "sandbox of %s/%s: %r" % (namespace, pod, ids)
    info = json.loads(crictl(cluster, "inspectp", ids[0]))
    netns = next(n["path"] for n in info["info"]["runtimeSpec"]["linux"]["namespaces"]
                 if n["type"] == "network")
    subprocess.run(["nsenter", "--net=" + netns, "ip", *command], check=True,
                   capture_output=True, text=True, timeout=30)


def fetch(cluster, namespace, pod, address, seconds=4):
    """GET http://address/ (ip:port) from inside a pod: (True, body) or (False, why)."""
    proc = cluster.kubectl("exec", "-n", namespace, pod, "--", "timeout", str(seconds),
                           "wget", "-q", "-O", "-", "http://%s/" % address,
                           check=False, timeout=seconds + 30)
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    return False, "exit %d %s" % (proc.returncode,
                                                                  proc.stderr.strip()[-300:])


def server_pod(name, image, labels):
    # Six of them on a 2-core node: a small CPU request each.
    pod = session_pod(name, image, limits={"memory": "64Mi", "cpu": "100m"})
    pod["metadata"]["labels"].update(labels)
    # The kubelet's probe must keep working under the policies (it comes from the node).
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/", "port": PORT}, "periodSeconds": 2, "failureThreshold": 2}
    return pod


def new_namespace(cluster, name, restricted=False):
    cluster.kubectl("create", "namespace", name)
    if restricted:  # as the chart makes session namespaces
        cluster.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    wait_for_default_service_account(cluster, name)
    return name


def chart(helm, ns, sessions_ns):  # noqa: F811
    """The chart rendered for a release in ns["ops"] running the sessions of sessions_ns: its
    NetworkPolicies and the labels of its gateway's pods (the gateway's own Deployment)."""
    docs = render(helm, "config.namespaces={%s}" % sessions_ns,
                  "networkPolicy.ingressControllerNamespace=" + ns["ingress"],
                  "json:networkPolicy.ingressControllerPodLabels=" + json.dumps(INGRESS_LABELS),
                  "networkPolicy.dnsNamespace=" + ns["dns"],
                  # The operator's and the gateway's own policies (test_chart.py) are about
                  # their pods.
                  "networkPolicy.operator.enabled=false", "networkPolicy.gateway.enabled=false",
                  "namespaces.createBuildNamespace=false", release=RELEASE, namespace=ns["ops"])
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert [p["metadata"]["namespace"] for p in policies] == [sessions_ns], policies
    deployment = next(d for d in docs if d["kind"] == "Deployment"
                      and d["metadata"]["name"].endswith("-gateway"))
    return policies, deployment["spec"]["template"]["metadata"]["labels"]


def build_policy(helm, ns):  # noqa: F811
    """The chart's NetworkPolicy for the build namespace ns["builds"], with the registry
    stand-in (its namespace and labels) as the one registry peer."""
    peers = [{"namespaceSelector": {"matchLabels": {
                 "kubernetes.io/metadata.name": ns["registry"]}},
              "podSelector": {"matchLabels": REGISTRY_LABELS}}]
    docs = render(helm, "namespaces.builds=" + ns["builds"],
                  "networkPolicy.dnsNamespace=" + ns["dns"],
                  "json:networkPolicy.builds.registryPeers=" + json.dumps(peers),
                  "networkPolicy.operator.enabled=false", release=RELEASE, namespace=ns["ops"])
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"
                and d["metadata"]["namespace"] == ns["builds"]]
    assert len(policies) == 1, policies
    return policies[0]


def operator_labels(helm, ns):  # noqa: F811
    """The labels of the chart's operator pods (its manager Deployment), for a stand-in."""
    docs = render(helm, "networkPolicy.operator.enabled=false",
                  "namespaces.createBuildNamespace=false", release=RELEASE, namespace=ns["ops"])
    deployment = next(d for d in docs if d["kind"] == "Deployment"
                      and not d["metadata"]["name"].endswith("-gateway"))
    return deployment["spec"]["template"]["metadata"]["labels"]


def apply_policies(cluster, policies):
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": policies}))


@pytest.fixture(scope="module")
def net(cluster, helm, enforcing_node):  # noqa: F811
    """Namespaces and pods, no policy yet: the operator's namespace (a pod with the chart's
    gateway labels, a stranger without), the sessions namespace (two session pods), the ingress
    controller's namespace, the cluster DNS's (a pod answering on port 53 too) and the world."""
    suffix = os.urandom(3).hex()
    ns = {k: "e2e-np-%s-%s" % (suffix, k)
          for k in ("ops", "sessions", "ingress", "dns", "world", "builds", "registry")}
    image = enforcing_node["telo-session-test"]
    # The stand-in gets the labels of the chart's gateway pods.
    policies, gateway_labels = chart(helm, ns, ns["sessions"])
    policies.append(build_policy(helm, ns))
    try:
        for key, name in ns.items():
            new_namespace(cluster, name, restricted=key == "sessions")
        labels = {"gateway": gateway_labels, "session-a": SESSION_LABELS,
                  "session-b": SESSION_LABELS, "ingress": INGRESS_LABELS,
                  "operator": operator_labels(helm, ns), "registry": REGISTRY_LABELS}
        for name, where in HOME.items():
            entry = "http %d hello from %s\n" % (PORT, name)
            pod = server_pod(name, image, labels.get(name, {}))
            if name == "session-a":  # declares PORT as the operator does, serves UNDECLARED too
                entry += "http %d undeclared\n" % UNDECLARED
                pod["spec"]["containers"][0]["ports"] = [
                    {"containerPort": PORT, "protocol": "TCP", "name": "telo-tcp-0"}]
            if name == "dns":  # TCP port 53 as the DNS stand-in, without root
                entry += "http 53 dns stand-in\n"
                pod["spec"]["securityContext"]["sysctls"] = [
                    {"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]
            apply(cluster, ns[where], entry_configmap(name, {"main.telo": entry}), pod)
        ips = {}
        for name, where in HOME.items():
            ips[name] = wait_running(cluster, ns[where], name, timeout=120)["status"]["podIP"]
        # The stand-ins for the metadata server and a public address, and the clients' routes.
        for ip in (METADATA_IP, PUBLIC_IP):
            in_pod_netns(cluster, ns["world"], "world", "addr", "add", ip + "/32", "dev", "eth0")
            for client in ("session-a", "builder"):
                in_pod_netns(cluster, ns[HOME[client]], client, "route", "add", ip + "/32",
                             "dev", "eth0")
        yield {"ns": ns, "ips": ips, "policies": policies, "image": image}
    finally:
        for name in ns.values():
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


# (client pod, target): connections the policies must refuse, and some they must let through.
FORBIDDEN = [("stranger", "session-a"), ("session-b", "session-a"), ("world", "session-a"),
             ("session-a", METADATA_IP), ("session-a", "world"), ("session-a", "dns"),
             ("operator", "session-a:%d" % UNDECLARED),
             ("builder", METADATA_IP), ("builder", "world"), ("builder", "dns"),
             ("stranger", "builder"), ("session-a", "registry")]
ALLOWED = [("gateway", "session-a"), ("ingress", "session-a"), ("session-a", PUBLIC_IP),
           ("session-a", "dns:53"), ("operator", "session-a"),
           ("builder", PUBLIC_IP), ("builder", "dns:53"), ("builder", "registry")]


def target_ip(net, target):
    """"ip:port" of a target: a pod's name or an address, with ":port" unless it is PORT."""
    host, _, port = target.partition(":")
    return "%s:%s" % (net["ips"].get(host, host), port or PORT)


def fetch_from(cluster, net, client, target, seconds=4):
    return fetch(cluster, net["ns"][HOME[client]], client, target_ip(net, target), seconds)


@pytest.fixture(scope="module")
def policies(cluster, net):
    """Checks that every connection the policies must refuse works without them, then applies
    the chart's policies."""
    for client, target in FORBIDDEN + ALLOWED:
        ok, why = fetch_from(cluster, net, client, target)
        assert ok, "without any policy, %s -> %s must work: %s" % (client, target, why)
    apply_policies(cluster, net["policies"])
    return time.monotonic()


def assert_refused(cluster, net, client, target, policies_applied):
    """The connection is refused within 20 s of the policies' creation (the enforcer learns of
    them through its watch); the time it took is printed."""
    def refused():
        ok, why = fetch_from(cluster, net, client, target, seconds=2)
        return None if ok else why
    try:
        why = wait_until(refused, timeout=max(1, policies_applied + 20 - time.monotonic()),
                         interval=0.5, what="refusal")
    except AssertionError:
        raise AssertionError("%s -> %s still works 20 s after the chart's NetworkPolicies were "
                             "applied" % (client, target)) from None
    print("%s -> %s refused (%s), %.1f s after the policies" % (
        client, target, why, time.monotonic() - policies_applied))


@pytest.mark.parametrize("client", ["gateway", "ingress"])
def test_a_session_is_reachable_from_the_gateway_and_the_ingress_controller(
        cluster, net, policies, client):
    ok, body = fetch_from(cluster, net, client, "session-a")
    assert ok and body == "hello from session-a", body


@pytest.mark.parametrize("client", ["stranger", "session-b", "world"])
def test_a_session_is_not_reachable_from_any_other_pod(cluster, net, policies, client):
    assert_refused(cluster, net, client, "session-a", policies)


def test_session_egress_skips_cloud_metadata_and_private_ranges_but_reaches_outside(
        cluster, net, policies):
    ok, body = fetch_from(cluster, net, "session-a", PUBLIC_IP)
    assert ok and body == "hello from world", "egress to %s: %s" % (PUBLIC_IP, body)
    for target in (METADATA_IP, "world"):  # the world pod's own address is in 10.0.0.0/8
        assert_refused(cluster, net, "session-a", target, policies)


def test_build_egress_reaches_outside_dns_and_the_named_registry_only(cluster, net, policies):
    """A build pod downloads a tenant's URL bundle: like a session it reaches a public address
    and DNS on port 53, not cloud metadata nor a private address (the world pod); the registry
    stand-in, at a private address too, only because registryPeers names it, and a session,
    which the peer does not cover, still cannot reach it."""
    for target, answer in ((PUBLIC_IP, "hello from world"), ("dns:53", "dns stand-in"),
                           ("registry", "hello from registry")):
        ok, body = fetch_from(cluster, net, "builder", target)
        assert ok and body == answer, "build pod egress to %s: %s" % (target, body)
    for target in (METADATA_IP, "world", "dns"):
        assert_refused(cluster, net, "builder", target, policies)
    assert_refused(cluster, net, "session-a", "registry", policies)


def test_nothing_reaches_a_build_pod(cluster, net, policies):
    assert_refused(cluster, net, "stranger", "builder", policies)


def test_session_egress_reaches_cluster_dns_on_port_53_only(cluster, net, policies):
    """The chart lets sessions out to port 53 (UDP and TCP) in the DNS namespace; the stand-in
    answers HTTP on TCP 53, and on 8080, which the policy must refuse (a private address)."""
    ok, body = fetch_from(cluster, net, "session-a", "dns:53")
    assert ok and body == "dns stand-in", "egress to the DNS namespace on port 53: %s" % body
    assert_refused(cluster, net, "session-a", "dns", policies)


def test_the_kubelet_still_probes_a_session_under_the_policies(cluster, net, policies):
    """The readiness probe (every 2 s, 2 failures to go unready) comes from the node: after the
    policies it keeps the session Ready."""
    time.sleep(6)
    pod = cluster.kubectl_json("get", "pod", "session-a", "-n", net["ns"]["sessions"])
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions.get("Ready") == "True", \
        "session-a went unready under the policies (its readiness probe refused?): %s" % conditions


def test_the_policy_selects_the_session_pods_the_operator_makes(cluster, helm, net, policies,  # noqa: F811
                                                                real):
    """The chart's podSelector against the labels the operator really puts on a session's pod:
    a TeloSession run by the operator (local process) on the real node, in a namespace of its
    own with the chart's policies rendered for it."""
    ns, _ = real()
    apply(cluster, ns, bundle_configmap("web-bundle", {"app/main.telo": "http %d web\n" % PORT}),
          real_session("web", ports=(PORT,)))
    ts = wait_phase(cluster, ns, "web", "Running", timeout=90)
    web = "%s:%d" % (ts["status"]["podIP"], PORT)
    for client in ("gateway", "stranger"):
        ok, why = fetch(cluster, net["ns"][HOME[client]], client, web)
        assert ok, "without a policy, %s -> the session must work: %s" % (client, why)
    applied = time.monotonic()
    apply_policies(cluster, chart(helm, net["ns"], ns)[0])
    assert_refused(cluster, net, "stranger", web, applied)
    ok, body = fetch(cluster, net["ns"]["ops"], "gateway", web)
    assert ok and body == "web", "the gateway -> the operator's session pod: %s" % body


def test_the_operator_reaches_a_session_on_its_declared_ports_only(cluster, net, policies):
    """Issue 17: the operator's reachability probes come from its pods; the chart lets them in on
    the session container's declared TCP ports (named telo-tcp-<i>) and on no other port."""
    ok, body = fetch_from(cluster, net, "operator", "session-a")
    assert ok and body == "hello from session-a", "operator -> declared port: %s" % body
    assert_refused(cluster, net, "operator", "session-a:%d" % UNDECLARED, policies)


def test_the_ingress_controller_reaches_a_session_on_its_declared_ports_only(cluster, net,
                                                                             policies):
    """The ingress controller serves tenants' own Ingresses, which a tenant may point at any
    Service, another tenant's included: the chart lets it in on the session container's
    declared TCP ports only, never on another port (an inspector's, say)."""
    ok, body = fetch_from(cluster, net, "ingress", "session-a")
    assert ok and body == "hello from session-a", "ingress -> declared port: %s" % body
    assert_refused(cluster, net, "ingress", "session-a:%d" % UNDECLARED, policies)


def test_the_operator_reaches_the_declared_port_of_a_session_it_made(cluster, helm, net,  # noqa: F811
                                                                      policies, real):
    """The port names the operator really gives a session's container match the chart's policy:
    a TeloSession on the real node, the chart's policies rendered for its namespace; the
    operator's stand-in pod gets through on the declared port, a stranger does not."""
    ns, _ = real()
    apply(cluster, ns, bundle_configmap("web-bundle", {
        "app/main.telo": "http %d web\nhttp %d undeclared\n" % (PORT, UNDECLARED)}),
        real_session("web", ports=(PORT,)))
    ts = wait_phase(cluster, ns, "web", "Running", timeout=90)
    web = "%s:%d" % (ts["status"]["podIP"], PORT)
    hidden = "%s:%d" % (ts["status"]["podIP"], UNDECLARED)
    for target in (web, hidden):
        ok, why = fetch(cluster, net["ns"]["ops"], "operator", target)
        assert ok, "without a policy, the operator -> %s must work: %s" % (target, why)
    applied = time.monotonic()
    apply_policies(cluster, chart(helm, net["ns"], ns)[0])
    assert_refused(cluster, net, "stranger", web, applied)
    assert_refused(cluster, net, "operator", hidden, applied)
    ok, body = fetch(cluster, net["ns"]["ops"], "operator", web)
    assert ok and body == "web", "the operator -> the session's declared port: %s" % body

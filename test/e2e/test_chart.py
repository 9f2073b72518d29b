"""charts/telo-operator: lint, server-side dry run of everything it renders, the schema refusing a
wrong value by its key, and a release's life (install, an upgrade that rolls the pod, uninstall
leaving no cluster-scoped object but the CRD) against the local cluster.

On the kwok cluster the operator's pod is played by kwok (Running and Ready without a process):
that proves the Kubernetes objects, not the image; hack/image and the real node prove the image."""

import json
import os
import re
import shutil
import subprocess
import uuid

import pytest
import yaml

from conftest import OPERATOR_BIN_DIR, ROOT, wait_until

CHART = os.path.join(ROOT, "charts", "telo-operator")
RBAC_DIR = os.path.join(ROOT, "config", "rbac")


@pytest.fixture(scope="module")
def helm(cluster):
    subprocess.run([os.path.join(ROOT, "hack", "build-tools.sh"), "helm"], check=True,
                   capture_output=True, text=True)
    path = os.path.join(subprocess.run(
        [os.path.join(ROOT, "hack", "build-tools.sh"), "--print-dir", "helm"],
        check=True, capture_output=True, text=True).stdout.strip(), "helm")

    def run(*args, check=True, input=None):
        proc = subprocess.run([path, "--kubeconfig", cluster.kubeconfig, *args], input=input,
                              capture_output=True, text=True, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError("helm %s failed (exit %d): %s" %
                                 (" ".join(args), proc.returncode, proc.stderr))
        return proc
    return run


def render(helm, *sets, release="telo-operator", namespace="telo-system", crds=False):
    args = ["template", release, CHART, "-n", namespace] + (["--include-crds"] if crds else [])
    for s in sets:  # "key=value", or "json:key=JSON" for --set-json
        args += ["--set-json", s[5:]] if s.startswith("json:") else ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def test_helm_lint_is_clean(helm):
    proc = helm("lint", "--strict", CHART)
    assert "0 chart(s) failed" in proc.stdout, proc.stdout


def test_the_chart_ships_the_crd_of_crds_dir(helm):
    """One source: the chart's crds/ file is a copy of crds/ (hack/sync-chart.sh; make lint
    checks it), and helm reads the same bytes."""
    chart_crd = os.path.join(CHART, "crds", "telo.run_telosessions.yaml")
    source = os.path.join(ROOT, "crds", "telo.run_telosessions.yaml")
    with open(source) as f, open(chart_crd) as g:
        assert g.read() == f.read(), "the chart's CRD differs from crds/: run hack/sync-chart.sh"
    with open(source) as f:
        assert helm("show", "crds", CHART).stdout.strip() == f.read().strip()


def test_the_chart_has_no_links_and_packages_without_a_warning(helm, tmp_path):
    """Issue 19: Helm warns on every symbolic link it follows, and GitOps tools that drop links
    (Flux's GitRepository) would render a chart of links with no CRD and no RBAC."""
    links = [os.path.join(d, n) for d, dirs, files in os.walk(CHART) for n in dirs + files
             if os.path.islink(os.path.join(d, n))]
    assert not links, links
    proc = helm("package", CHART, "-d", str(tmp_path))
    assert proc.stderr.strip() == "", proc.stderr
    assert "Successfully packaged chart" in proc.stdout, proc.stdout
    for name in sorted(os.listdir(RBAC_DIR)):
        if name.endswith(".yaml"):
            with open(os.path.join(RBAC_DIR, name)) as f, \
                    open(os.path.join(CHART, "files", "rbac", name)) as g:
                assert g.read() == f.read(), "files/rbac/%s differs: run hack/sync-chart.sh" % name


def test_a_chart_fetched_as_plain_files_without_links_installs_crd_and_rbac(helm, tmp_path):
    """The chart as a tool that skips symbolic links sees it: it still renders the CRD and every
    RBAC object of config/rbac/."""
    copy = tmp_path / "telo-operator"
    shutil.copytree(CHART, copy, symlinks=True,
                    ignore=lambda d, names: [n for n in names if os.path.islink(os.path.join(d, n))])
    docs = [d for d in yaml.safe_load_all(helm("template", "telo-operator", str(copy), "-n",
                                                "telo-system", "--include-crds",
                                                "--set-json", "config.namespaces=[]").stdout) if d]
    assert [d for d in docs if d["kind"] == "CustomResourceDefinition"], "no CRD rendered"
    assert rbac_view(docs) == rbac_view(plain_rbac())


def plain_rbac():
    docs = []
    for name in sorted(os.listdir(RBAC_DIR)):
        if name.endswith(".yaml"):
            with open(os.path.join(RBAC_DIR, name)) as f:
                docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def rbac_view(docs):
    """{(kind, name, namespace): rules or (roleRef, subjects)} of the RBAC objects."""
    out = {}
    for d in docs:
        if d["apiVersion"] != "rbac.authorization.k8s.io/v1":
            continue
        meta = d["metadata"]
        key = (d["kind"], meta["name"], meta.get("namespace"))
        out[key] = d.get("rules") if "rules" in d else (d["roleRef"], d["subjects"])
    return out


def test_the_chart_binds_the_rules_of_config_rbac(helm):
    """Cluster-wide (every namespace watched), release telo-operator in telo-system: the chart
    renders exactly the plain YAML's RBAC objects."""
    assert rbac_view(render(helm, "json:config.namespaces=[]")) == rbac_view(plain_rbac())


def test_one_session_namespace_gets_role_bindings_there(helm):
    docs = render(helm, "config.namespaces={team-a}")
    kinds = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs
             if d["kind"].endswith("Binding") and d["apiVersion"].startswith("rbac.")}
    assert kinds == {("RoleBinding", "telo-operator-manager", "team-a"),
                     ("RoleBinding", "telo-operator-gateway", "team-a"),
                     ("ClusterRoleBinding", "telo-operator-auth", None),
                     ("RoleBinding", "telo-operator-leader-election", "telo-system"),
                     ("RoleBinding", "telo-operator-builds", "telo-builds"),
                     ("RoleBinding", "telo-operator-gateway-proxy", "telo-system")}, kinds
    ns = next(d for d in docs if d["kind"] == "Namespace" and d["metadata"]["name"] == "team-a")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The admission policy is bound there too (test_admission_policy.py), and everywhere when
    # the operator watches every namespace.
    vap = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert vap["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]
    vap = next(d for d in render(helm, "config.namespaces=null")
               if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert "matchResources" not in vap["spec"], vap
    assert not any(d["kind"].startswith("ValidatingAdmissionPolicy")
                   for d in render(helm, "admissionPolicy.enabled=false"))


def test_several_session_namespaces_grant_no_write_cluster_wide(helm):
    """With two session namespaces the operator's informers watch every namespace, so list and
    watch are granted cluster-wide; every write (pods, Secrets, Services, Ingresses, Events,
    status) and the gateway's reads and attach are bound in the listed namespaces only. Bound
    cluster-wide, a compromised operator could create a pod under any ServiceAccount of
    kube-system, and the gateway attach to any pod of the cluster."""
    docs = render(helm, "config.namespaces={team-a,team-b}")
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    bindings = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d
                for d in docs if d["kind"].endswith("Binding") and
                d["apiVersion"].startswith("rbac.")}
    assert set(bindings) == {("ClusterRoleBinding", "telo-operator-manager-watch", None),
                             ("RoleBinding", "telo-operator-manager", "team-a"),
                             ("RoleBinding", "telo-operator-manager", "team-b"),
                             ("RoleBinding", "telo-operator-gateway", "team-a"),
                             ("RoleBinding", "telo-operator-gateway", "team-b"),
                             ("ClusterRoleBinding", "telo-operator-auth", None),
                             ("RoleBinding", "telo-operator-leader-election", "telo-system"),
                             ("RoleBinding", "telo-operator-builds", "telo-builds"),
                             ("RoleBinding", "telo-operator-gateway-proxy", "telo-system")}, \
        sorted(bindings)
    cluster_wide = [bindings[k]["roleRef"]["name"] for k in bindings
                    if k[0] == "ClusterRoleBinding"]
    granted = {verb for name in cluster_wide for rule in roles[name] for verb in rule["verbs"]
               if name != "telo-operator-auth"}
    assert granted == {"list", "watch"}, granted
    # The watch role is the manager's list and watch, nothing left out: the informers need them.
    manager = {(g, r) for rule in roles["telo-operator-manager"] for g in rule["apiGroups"]
               for r in rule["resources"] if {"list", "watch"} & set(rule["verbs"])}
    watch = {(g, r) for rule in roles["telo-operator-manager-watch"] for g in rule["apiGroups"]
             for r in rule["resources"]}
    assert watch == manager, (watch, manager)


def config_keys_from_help():
    out = subprocess.run([os.path.join(OPERATOR_BIN_DIR, "telo-operator"), "run", "--help"],
                         capture_output=True, text=True).stdout + subprocess.run(
        [os.path.join(OPERATOR_BIN_DIR, "telo-operator"), "run", "--help"],
        capture_output=True, text=True).stderr
    section = out.split("Configuration keys:", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.strip()}


def test_every_config_key_has_a_value_with_a_comment():
    """values.yaml's config: section holds every key `telo-operator run --help` lists, each
    under a comment line, and no other."""
    with open(os.path.join(CHART, "values.yaml")) as f:
        text = f.read()
    config = yaml.safe_load(text)["config"]

    def flatten(prefix, value):
        if isinstance(value, dict) and value and prefix.split(".")[-1] not in ("nodeSelector",):
            for k, v in value.items():
                yield from flatten(prefix + "." + k if prefix else k, v)
        else:
            yield prefix
    keys = set(flatten("", config))
    assert keys == config_keys_from_help(), (sorted(keys), sorted(config_keys_from_help()))
    lines = text.split("\nconfig:\n", 1)[1].splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s+)([A-Za-z]+):(.*)$", line)
        if not m or m.group(3).strip() == "":  # a map heading ("images:")
            continue
        assert lines[i - 1].strip().startswith("#"), "config.%s has no comment" % m.group(2)


def test_a_wrong_value_fails_the_install_naming_the_key(helm):
    for value, key in (("config.limits.cpu=lots", "/config/limits/cpu"),
                       ("config.limts.cpu=1", "limts"),
                       ("replicas=-1", "/replicas"),
                       ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
                       # Two replicas without leader election would both reconcile.
                       ("replicas=2,leaderElection.enabled=false", "/leaderElection/enabled")):
        proc = helm("install", "e2e-wrong", CHART, "-n", "default", "--set", value, check=False)
        assert proc.returncode != 0 and key in proc.stderr, (value, proc.stderr)
    assert "e2e-wrong" not in helm("list", "-A", "-q").stdout


def test_the_operators_own_pod_is_closed_but_for_its_metrics_port(helm):
    """The operator's NetworkPolicy selects its pod (not the gateway's, which serves clients):
    ingress only on the health and metrics port; with apiServerCidrs, egress only to DNS, the API
    server and addresses outside the blocked ranges (what a URL bundle may reach)."""
    def operator_policy(*sets):
        docs = render(helm, *sets)
        gateway = next(d for d in docs if d["kind"] == "Deployment"
                       and d["metadata"]["name"].endswith("-gateway"))
        operator = next(d for d in docs if d["kind"] == "Deployment"
                        and not d["metadata"]["name"].endswith("-gateway"))
        policy = next(d for d in docs if d["kind"] == "NetworkPolicy"
                      and d["metadata"]["name"].endswith("-operator"))
        selector = policy["spec"]["podSelector"]["matchLabels"]
        pod_labels = operator["spec"]["template"]["metadata"]["labels"]
        gateway_labels = gateway["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items(), (selector, pod_labels)
        assert not selector.items() <= gateway_labels.items(), (selector, gateway_labels)
        assert policy["metadata"]["namespace"] == "telo-system"
        return policy["spec"]

    spec = operator_policy()
    assert spec["policyTypes"] == ["Ingress"]
    # The probes use a port of their own, which the policy does not open (issue 15: clients
    # filling the metrics port's connections must not get the operator restarted).
    container = next(d for d in render(helm) if d["kind"] == "Deployment"
                     and not d["metadata"]["name"].endswith("-gateway")
                     )["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}, ports
    assert "--health-bind-address=0.0.0.0:8081" in container["args"], container["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "health", container[probe]
    assert spec["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]
    spec = operator_policy("networkPolicy.operator.apiServerCidrs={192.0.2.1/32}")
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    peers = [p for rule in spec["egress"] for p in rule["to"]]
    assert {"ipBlock": {"cidr": "192.0.2.1/32"}} in peers
    world = next(p["ipBlock"] for p in peers if p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0")
    assert {"169.254.0.0/16", "10.0.0.0/8"} <= set(world["except"])
    assert not any(d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-operator")
                   for d in render(helm, "networkPolicy.operator.enabled=false"))


def test_the_gateways_pod_takes_clients_on_its_client_port_only(helm):
    """The gateway's probes have a listener of their own that takes a few connections at a
    time; open to other pods, a tenant holding them would fail the kubelet's probes and get the
    gateway, every terminal with it, restarted. The chart's policy opens the client port alone
    (the kubelet comes from the node)."""
    docs = render(helm)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy"
                  and d["metadata"]["name"] == "telo-operator-gateway")
    deployment = next(d for d in docs if d["kind"] == "Deployment"
                      and d["metadata"]["name"].endswith("-gateway"))
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": ports["gateway"],
                                                     "protocol": "TCP"}]}]
    assert ports["health"] != ports["gateway"], ports
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ("health", ports["health"]), container[probe]
    assert not any(d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-gateway")
                   for d in render(helm, "networkPolicy.gateway.enabled=false"))


@pytest.fixture
def chart_namespaces(cluster):
    """The release's namespace and a session namespace, unique to the test."""
    suffix = uuid.uuid4().hex[:6]
    release_ns, sessions_ns, builds_ns = ("e2e-chart-%s" % suffix, "e2e-chart-%s-s" % suffix,
                                          "e2e-chart-%s-b" % suffix)
    cluster.kubectl("create", "namespace", release_ns)
    yield release_ns, sessions_ns, builds_ns
    for ns in (release_ns, sessions_ns, builds_ns):
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def test_everything_rendered_passes_a_server_side_dry_run(cluster, helm, crd, chart_namespaces):
    release_ns, sessions_ns, builds_ns = chart_namespaces
    # A dry-run Namespace is not there for the objects inside it: make them first.
    for ns in (sessions_ns, builds_ns):
        cluster.kubectl("create", "namespace", ns)
    release = "e2e-" + release_ns[-6:]
    docs = render(helm, "config.namespaces={%s}" % sessions_ns, "namespaces.builds=" + builds_ns,
                  "resourceQuota.enabled=true", "networkPolicy.ingressControllerNamespace=ingress",
                  "rbac.sessionAttachRole=false", release=release, namespace=release_ns,
                  crds=True)
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                           input="\n---\n".join(yaml.safe_dump(d) for d in docs))
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap",
                     "CustomResourceDefinition", "Deployment", "Namespace", "NetworkPolicy",
                     "ResourceQuota", "Role", "RoleBinding", "Service", "ServiceAccount",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"], kinds
    assert proc.stdout.count("(server dry run)") == len(docs), proc.stdout


def cluster_scoped_of(cluster, release):
    """Every cluster-scoped object labelled with the release, of every listable kind."""
    kinds = cluster.kubectl("api-resources", "--namespaced=false", "--verbs=list",
                            "-o", "name").stdout.split()
    found = cluster.kubectl("get", ",".join(kinds), "-l",
                            "app.kubernetes.io/instance=%s" % release, "-o", "name").stdout
    return sorted(found.split())


def pods_of(cluster, ns, release, app="telo-operator"):
    """The release's operator pods (app telo-gateway: its gateway's)."""
    items = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                 "app.kubernetes.io/instance=%s,app.kubernetes.io/name=%s" %
                                 (release, app))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


@pytest.mark.slow
def test_install_upgrade_rolls_the_pod_and_uninstall_leaves_only_the_crd(cluster, helm, crd,
                                                                          chart_namespaces):
    release_ns, sessions_ns, builds_ns = chart_namespaces
    release = "e2e-" + release_ns[-6:]
    # The attach ClusterRole has one name per cluster: free it if the plain YAML made it.
    if "telo-session-attach" in cluster.kubectl("get", "clusterrole", "-o", "name").stdout and \
            "Helm" not in cluster.kubectl("get", "clusterrole", "telo-session-attach",
                                          "-o", "jsonpath={.metadata.labels}").stdout:
        cluster.kubectl("delete", "clusterrole", "telo-session-attach")
    sets = ["--set", "config.namespaces={%s}" % sessions_ns, "--set",
            "namespaces.builds=" + builds_ns]
    helm("install", release, CHART, "-n", release_ns, *sets, "--wait", "--timeout", "120s")
    deployment = "%s-telo-operator" % release
    pod = wait_until(lambda: [p for p in pods_of(cluster, release_ns, release) if ready(p)],
                     timeout=60, what="the operator pod Ready")[0]
    assert pod["spec"]["containers"][0]["args"][:1] == ["run"]
    assert "--leader-elect" in pod["spec"]["containers"][0]["args"]
    sc = pod["spec"]["securityContext"]
    assert sc["runAsNonRoot"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    for c in pod["spec"]["containers"]:
        csc = c["securityContext"]
        assert csc["readOnlyRootFilesystem"] and csc["capabilities"]["drop"] == ["ALL"], c["name"]
    labels = cluster.kubectl_json("get", "namespace", sessions_ns)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    config = cluster.kubectl_json("get", "configmap", "%s-config" % deployment,
                                  "-n", release_ns)["data"]["config.yaml"]
    assert yaml.safe_load(config)["namespaces"] == [sessions_ns]
    # The release's ServiceAccount may do the documented rules in its session namespace, the
    # Lease rules in its own, the cluster-scoped reviews everywhere, and nothing else.
    from test_rbac import can_i_list, documented_build_rules, documented_rules
    rules = documented_rules()
    user = "system:serviceaccount:%s:%s" % (release_ns, deployment)
    cluster.kubectl("create", "serviceaccount", "e2e-unbound", "-n", release_ns)
    baseline = can_i_list(cluster, "system:serviceaccount:%s:e2e-unbound" % release_ns,
                          release_ns)
    # The build rules hold in the build namespace only.
    build_rules = set(documented_build_rules())
    for ns, scopes in ((sessions_ns, ("sessions", "cluster")), (release_ns, ("operator", "cluster")),
                       ("default", ("cluster",)), (builds_ns, ("builds", "cluster"))):
        want = {k for k, (scope, _c) in rules.items() if scope in scopes}
        if ns == builds_ns:
            want |= build_rules
        granted = can_i_list(cluster, user, ns) - baseline
        assert granted == want, "in %s: extra %s, missing %s" % (ns, sorted(granted - want),
                                                                sorted(want - granted))
    # The gateway: a pod of its own (Ready), under a ServiceAccount of its own that may do its
    # table and nothing else, in every namespace.
    from test_rbac import documented_gateway_rules
    gw_pod = wait_until(lambda: [p for p in pods_of(cluster, release_ns, release, "telo-gateway")
                                 if ready(p)], timeout=60, what="the gateway pod Ready")[0]
    assert gw_pod["spec"]["serviceAccountName"] == deployment + "-gateway"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["manager"]
    gw_user = "system:serviceaccount:%s:%s-gateway" % (release_ns, deployment)
    gw_rules = documented_gateway_rules()
    for ns, scopes in ((sessions_ns, ("sessions", "cluster")), (release_ns, ("cluster",)),
                       ("default", ("cluster",)), (builds_ns, ("cluster",))):
        want = {k for k, (scope, _c) in gw_rules.items() if scope in scopes}
        granted = can_i_list(cluster, gw_user, ns) - baseline
        assert granted == want, "gateway in %s: extra %s, missing %s" % (
            ns, sorted(granted - want), sorted(want - granted))
    installed = cluster_scoped_of(cluster, release)
    assert "namespace/" + sessions_ns in installed and any("clusterrole" in o for o in installed)

    # A changed config value rolls the pod.
    helm("upgrade", release, CHART, "-n", release_ns, *sets, "--set",
         "config.startDeadlineSeconds=77", "--wait", "--timeout", "120s")
    new = wait_until(lambda: [p for p in pods_of(cluster, release_ns, release)
                              if ready(p) and p["metadata"]["uid"] != pod["metadata"]["uid"]],
                     timeout=90, what="a new operator pod after the upgrade")[0]
    assert new["metadata"]["annotations"]["checksum/config"] != \
        pod["metadata"]["annotations"]["checksum/config"]
    wait_until(lambda: len(pods_of(cluster, release_ns, release)) == 1, timeout=60,
               what="the old pod to go")
    config = cluster.kubectl_json("get", "configmap", "%s-config" % deployment,
                                  "-n", release_ns)["data"]["config.yaml"]
    assert yaml.safe_load(config)["startDeadlineSeconds"] == 77

    helm("uninstall", release, "-n", release_ns, "--wait", "--timeout", "120s")
    # Namespaces take a moment to finish terminating; nothing else of the release may stay.
    left = []

    def gone():
        left[:] = cluster_scoped_of(cluster, release)
        return not left
    wait_until(gone, timeout=90, what="no cluster-scoped object of the release")
    assert cluster.kubectl("get", "crd", crd, check=False).returncode == 0, "the CRD stays"
    assert json.loads(cluster.kubectl("get", "deployment", "-n", release_ns, "-o",
                                      "json").stdout)["items"] == []

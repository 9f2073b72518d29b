"""Least privilege (config/rbac/): the operator's ServiceAccount may do exactly what the rule table
in config/rbac/README.md documents, and that is enough: the session suite, run with the operator
under that ServiceAccount's token, gets no 403, and uses every verb of the manager's rules. The
gateway's own ServiceAccount likewise, with its own table and the gateway's tests.

`kubectl auth can-i --list` is the API server's own answer (the RBAC authorizer evaluating every
binding), and the audit log is its record of every request, so neither side is our reading of
the YAML."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from conftest import (GATEWAY_SA_NAME, GATEWAY_SA_USER, IN_CLUSTER, ROOT, SA_NAME, SA_NAMESPACE,
                      SA_USER, audit_events, wait_until, whole_suite)

RBAC_DIR = os.path.join(ROOT, "config", "rbac")

# Granted but not exercised by the session suite: the gateway's rules (the gateway's own tests
# exercise them; the session suite runs no gateway).
NOT_EXERCISED_BY_THE_SESSION_SUITE = {"gateway"}
# Verbs the API server checks inside another request, so the audit log never shows them as
# their own verb: owner references with blockOwnerDeletion (OwnerReferencesPermissionEnforcement
# checks update on the owner's finalizers, inside each child's create).
# test_verbs_checked_inside_other_requests_are_needed shows it is demanded.
CHECKED_INSIDE = {("telosessions.telo.run/finalizers", "update")}
# The event recorder patches an Event when the same one recurs (its count); every transition of
# the session suite is recorded once. test_leader_events.py covers the patch path.
RECURRING_ONLY = {("events.events.k8s.io", "patch")}


def documented_rules(section="## The rule set"):
    """{(resource, verb): (namespace scope, container)} from the README's rule table under
    section (the build namespace's has its own), resources named as RBAC and can-i name them:
    "pods", "ingresses.networking.k8s.io", "telosessions.telo.run/status"."""
    with open(os.path.join(RBAC_DIR, "README.md")) as f:
        text = f.read()
    table = text.split(section, 1)[1].split("\n## ", 1)[0]
    rules = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("API group", "---") or set(cells[0]) <= {"-"}:
            continue
        group, resource, verbs, scope, container = cells[:5]
        group = "" if group == "(core)" else group
        base, _, sub = resource.partition("/")
        name = base + ("." + group if group else "") + ("/" + sub if sub else "")
        for verb in (v.strip() for v in verbs.split(",")):
            key = (name, verb)
            assert key not in rules, "the table lists %s %s twice" % key
            rules[key] = (scope, container)
    assert len(rules) > 5, "could not read the rule table %r of config/rbac/README.md" % section
    return rules


BUILD_NAMESPACE = "telo-builds"


def documented_build_rules():
    return documented_rules("## The build namespace")


def documented_gateway_rules():
    return documented_rules("## The gateway's ServiceAccount")


def can_i_list(cluster, user, namespace):
    """{(resource, verb)} that `kubectl auth can-i --list --as user -n namespace` prints."""
    out = cluster.kubectl("auth", "can-i", "--list", "--as", user, "-n", namespace).stdout
    pairs = set()
    for line in out.splitlines()[1:]:
        m = re.match(r"^(\S+)\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$", line)
        if not m:
            continue  # non-resource URLs: the same for every identity, not ours
        resource, names, verbs = m.groups()
        if names and resource == "services/proxy":
            # config/rbac/gateway_proxy_role.yaml: every authenticated user may reach the gateway
            # Service, by name, through the API server's proxy (kubectl telo attach from outside).
            continue
        assert not names, "a rule limited to resource names: %s" % line
        for verb in verbs.split():
            pairs.add((resource, verb))
    return pairs


def expected_in(rules, namespace_kind):
    """The documented (resource, verb) pairs that hold in a namespace: sessions-scoped and
    cluster-scoped rules everywhere, operator-scoped ones only in the operator's namespace."""
    out = set()
    for (resource, verb), (scope, _container) in rules.items():
        if scope in ("sessions", "cluster") or (scope == "operator" and namespace_kind == "operator"):
            out.add((resource, verb))
    return out


@pytest.fixture(scope="module")
def rbac(cluster, crd):
    for ns in (SA_NAMESPACE, BUILD_NAMESPACE):
        if cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
            cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("apply", "-f", RBAC_DIR)
    # A ServiceAccount bound to nothing: what every ServiceAccount may do anyway (discovery,
    # self reviews), subtracted from the operator's list.
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "e2e-unbound", "namespace": SA_NAMESPACE}}))
    return documented_rules()


def test_the_service_account_may_do_exactly_the_documented_verbs(cluster, rbac, namespace):
    baseline = can_i_list(cluster, "system:serviceaccount:%s:e2e-unbound" % SA_NAMESPACE,
                          namespace)
    for ns, kind in ((namespace, "sessions"), (SA_NAMESPACE, "operator")):
        granted = can_i_list(cluster, SA_USER, ns) - baseline
        want = expected_in(rbac, kind)
        extra, missing = granted - want, want - granted
        assert not extra and not missing, (
            "in namespace %s (%s): granted but not documented: %s; documented but not granted: "
            "%s" % (ns, kind, sorted(extra), sorted(missing)))
    # The build namespace: the build rules on top (the plain YAML binds the session rules
    # cluster-wide, so they hold there too).
    granted = can_i_list(cluster, SA_USER, BUILD_NAMESPACE) - baseline
    want = expected_in(rbac, "sessions") | set(documented_build_rules())
    assert granted == want, "in %s: extra %s, missing %s" % (
        BUILD_NAMESPACE, sorted(granted - want), sorted(want - granted))


def test_the_gateway_service_account_may_do_exactly_its_documented_verbs(cluster, rbac, namespace):
    """The gateway (network-facing) holds only its table: no manager verb, no Lease, no build
    rule, in a session namespace, the operator's and the build namespace alike."""
    baseline = can_i_list(cluster, "system:serviceaccount:%s:e2e-unbound" % SA_NAMESPACE,
                          namespace)
    want = expected_in(documented_gateway_rules(), "sessions")
    assert all(container == "gateway" for _s, container in documented_gateway_rules().values())
    # Both read a session by name, each for its own reason (the gateway: the session a client
    # attaches to; the manager: a live check before a predecessor's children go, issue 21);
    # nothing else of the gateway's is the manager's.
    shared = {("telosessions.telo.run", "get")}
    assert set(documented_gateway_rules()) & set(rbac) == shared, \
        "the operator's table lists gateway rules: %s" % sorted(
            set(documented_gateway_rules()) & set(rbac) - shared)
    for ns in (namespace, SA_NAMESPACE, BUILD_NAMESPACE):
        granted = can_i_list(cluster, GATEWAY_SA_USER, ns) - baseline
        assert granted == want, "%s in %s: granted but not documented: %s; documented but not " \
            "granted: %s" % (GATEWAY_SA_NAME, ns, sorted(granted - want), sorted(want - granted))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gateway_tests_under_its_service_account_get_no_403_and_use_every_verb(cluster, rbac,
                                                                               tmp_path):
    """test_gateway.py's admission, attach and exit tests with the gateway under a token of
    its own ServiceAccount: no request is refused, and every documented verb is used (create on
    pods/attach is checked inside the attach's GET on Kubernetes 1.35+, so it may not show)."""
    kubeconfig = service_account_kubeconfig(cluster, str(tmp_path / "gw.kubeconfig"),
                                            name=GATEWAY_SA_NAME)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1)) + ".000000Z"
    env = dict(os.environ, TELO_E2E_GATEWAY_KUBECONFIG=kubeconfig, TELO_E2E_OPERATOR="process")
    select = os.environ.get("TELO_E2E_RBAC_GATEWAY_K") or \
        "refusals or viewers_share or exit_reaches"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_gateway.py", "-k", select],
                          cwd=os.path.dirname(__file__), env=env, capture_output=True, text=True,
                          timeout=850)
    print(proc.stdout[-4000:])
    if "skipped" in proc.stdout and " passed" not in proc.stdout:
        pytest.skip("test_gateway.py skipped (no real node): " + proc.stdout[-300:])
    assert proc.returncode == 0, "the gateway's tests failed under its ServiceAccount:\n%s\n%s" % (
        proc.stdout[-6000:], proc.stderr[-2000:])
    time.sleep(2)  # the audit log is written asynchronously (batch backend)
    events = audit_events(cluster, GATEWAY_SA_USER, since)
    assert events, "no request of %s in the audit log" % GATEWAY_SA_USER
    forbidden = sorted({"%s %s -> %s" % (e["verb"], e.get("requestURI", ""),
                                         e["responseStatus"].get("message", "")[:200])
                        for e in events if e.get("responseStatus", {}).get("code") == 403})
    assert not forbidden, "403 for %s:\n  %s" % (GATEWAY_SA_USER, "\n  ".join(forbidden))
    used = set(map(used_pair, events))
    documented = set(documented_gateway_rules())
    assert used <= documented, "used but not documented: %s" % sorted(used - documented)
    unused = documented - used - {("pods/attach", "create")}
    assert not unused, "documented for the gateway but never used: %s (used: %s)" % (
        sorted(unused), sorted(used))


def test_the_attach_role_grants_only_telosessions_attach(cluster, rbac, namespace):
    user = "e2e-attach-%s" % namespace[-6:]
    baseline = can_i_list(cluster, user, namespace)
    cluster.kubectl("create", "rolebinding", "attach", "-n", namespace,
                    "--clusterrole=telo-session-attach", "--user=" + user)
    wait_until(lambda: can_i_list(cluster, user, namespace) != baseline, timeout=10,
               what="the RoleBinding to take effect")
    assert can_i_list(cluster, user, namespace) - baseline == {
        ("telosessions.telo.run/attach", "create")}
    proc = cluster.kubectl("auth", "can-i", "create", "telosessions", "--subresource=attach",
                           "--as", user, "-n", namespace, check=False)
    assert proc.stdout.strip() == "yes", proc.stdout + proc.stderr


def service_account_kubeconfig(cluster, path, namespace=SA_NAMESPACE, name=SA_NAME):
    """A kubeconfig holding a fresh token of a ServiceAccount (the operator's unless named), as
    its pod would."""
    token = cluster.kubectl("create", "token", name, "-n", namespace,
                            "--duration=2h").stdout.strip()
    with open(cluster.kubeconfig) as f:
        admin = yaml.safe_load(f)
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
    }
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    os.chmod(path, 0o600)
    return path


def used_pair(e):
    ref = e.get("objectRef", {})
    resource = ref.get("resource", "")
    if ref.get("apiGroup"):
        resource += "." + ref["apiGroup"]
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return resource, e["verb"]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_session_suite_under_the_service_account_gets_no_403_and_uses_every_verb(
        request, cluster, rbac, tmp_path):
    if IN_CLUSTER and whole_suite(request.session):
        pytest.skip("the whole suite runs in-cluster, the operator under this ServiceAccount, and "
                    "conftest.py's no_forbidden_requests_in_cluster checks the same at its end")
    kubeconfig = service_account_kubeconfig(cluster, str(tmp_path / "sa.kubeconfig"))
    # A Lease left by an earlier run would spare the operator its create.
    cluster.kubectl("delete", "lease", "telo-operator.telo.run", "-n", SA_NAMESPACE,
                    "--ignore-not-found")
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1)) + ".000000Z"
    env = dict(os.environ, TELO_E2E_OPERATOR_KUBECONFIG=kubeconfig,
               TELO_E2E_OPERATOR_ARGS="--leader-elect --leader-election-namespace " + SA_NAMESPACE)
    # TELO_E2E_RBAC_K narrows the inner run (pytest -k) while working on this test.
    select = ["-k", os.environ["TELO_E2E_RBAC_K"]] if os.environ.get("TELO_E2E_RBAC_K") else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_sessions.py", *select],
                          cwd=os.path.dirname(__file__), env=env, capture_output=True, text=True,
                          timeout=2300)
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, "the session suite failed under the ServiceAccount:\n%s\n%s" % (
        proc.stdout[-6000:], proc.stderr[-2000:])
    time.sleep(2)  # the audit log is written asynchronously (batch backend)
    events = audit_events(cluster, SA_USER, since)
    assert events, "no request of %s in the audit log" % SA_USER
    forbidden = sorted({"%s %s%s -> %s" % (e["verb"], used_pair(e)[0],
                                          " in " + e["objectRef"].get("namespace", "")
                                          if e.get("objectRef", {}).get("namespace") else "",
                                          e["responseStatus"].get("message", "")[:200])
                        for e in events if e.get("responseStatus", {}).get("code") == 403})
    assert not forbidden, "403 for %s:\n  %s" % (SA_USER, "\n  ".join(forbidden))
    print("requests by %s: %d" % (SA_USER, len(events)))
    check_grants_used(events, rbac)


def check_grants_used(events, rules, also_documented=()):
    """Every verb the manager is granted (rules: documented_rules()) shows in events, the audit
    records of the operator's ServiceAccount, and every request there is documented in rules or
    also_documented (the build namespace's table, whose requests need the image-build tests)."""
    used = set(map(used_pair, events))
    documented = {k: container for k, (_scope, container) in rules.items()}
    unused = sorted(k for k, container in documented.items()
                    if container not in NOT_EXERCISED_BY_THE_SESSION_SUITE and k not in used
                    and k not in CHECKED_INSIDE | RECURRING_ONLY)
    assert not unused, "granted to the manager but never used by the session suite: %s (used: %s)" % (
        unused, sorted(used))
    undocumented = sorted(k for k in used if k not in documented and k not in also_documented)
    assert not undocumented, "used but not documented: %s" % undocumented



def manager_rules():
    with open(os.path.join(RBAC_DIR, "role.yaml")) as f:
        return next(d for d in yaml.safe_load_all(f)
                    if d and d["metadata"]["name"] == "telo-operator-manager")["rules"]


def without(rules, resource, verb):
    out = []
    for r in rules:
        for res in r["resources"]:
            verbs = [v for v in r["verbs"] if not (res == resource and v == verb)]
            if verbs:
                out.append({"apiGroups": r["apiGroups"], "resources": [res], "verbs": verbs})
    return out


def test_verbs_checked_inside_other_requests_are_needed(cluster, rbac, pod_namespace, tmp_path):
    """The manager's rules minus one verb, bound to a throwaway ServiceAccount that does what the
    operator does: the API server refuses exactly the request that needs the missing verb."""
    ns = pod_namespace
    cluster.kubectl("create", "serviceaccount", "e2e-reduced", "-n", ns)
    kubeconfig = service_account_kubeconfig(cluster, str(tmp_path / "reduced"), ns, "e2e-reduced")
    cluster.kubectl("create", "rolebinding", "reduced", "-n", ns, "--role=reduced",
                    "--serviceaccount=%s:e2e-reduced" % ns)
    owner = json.loads(cluster.kubectl("create", "-n", ns, "-o", "json", "-f", "-",
                                       input=json.dumps({
        "apiVersion": "telo.run/v1alpha1", "kind": "TeloSession", "metadata": {"name": "owner"},
        "spec": {"entry": "app/telo.yaml", "bundle": {"configMap": {"name": "none"}},
                 "stopped": True}})).stdout)
    ref = {"apiVersion": "telo.run/v1alpha1", "kind": "TeloSession", "name": "owner",
           "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def child(resource, name):
        meta = {"name": name, "namespace": ns, "ownerReferences": [ref]}
        return {
            "pods": {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                     "spec": {"containers": [{"name": "c", "image": "x"}],
                              "nodeSelector": {"e2e.telo.run/nowhere": "yes"}}},
            "services": {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                         "spec": {"ports": [{"port": 80}]}},
            "secrets": {"apiVersion": "v1", "kind": "Secret", "metadata": meta,
                        "stringData": {"token": "x"}},
            "ingresses.networking.k8s.io": {
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta,
                "spec": {"defaultBackend": {"service": {"name": "x", "port": {"number": 80}}}}},
        }[resource]

    def create_as_reduced(rules, obj):
        cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reduced", "namespace": ns}, "rules": rules}))
        time.sleep(1)  # the RBAC authorizer reads Roles from its informer
        return subprocess.run([cluster.kubectl_path, "--kubeconfig", kubeconfig, "create",
                               "--field-manager=telo-operator", "-f", "-"],
                              input=json.dumps(obj), capture_output=True, text=True)

    full = manager_rules()
    for i, resource in enumerate(("pods", "services", "secrets", "ingresses.networking.k8s.io")):
        name = "c%d" % i
        denied = create_as_reduced(without(full, "telosessions/finalizers", "update"),
                                   child(resource, name))
        # The refusal names the missing permission: the owner-reference plugin's "cannot set
        # blockOwnerDeletion".
        assert denied.returncode != 0 and "blockOwnerDeletion" in denied.stderr, (
            "%s without update telosessions/finalizers: %s" % (resource,
                                                               denied.stdout + denied.stderr))
        allowed = create_as_reduced(full, child(resource, name))
        assert allowed.returncode == 0, "%s with every rule: %s" % (resource, allowed.stderr)

"""charts/telo-operator as a platform team and a GitOps tool see it (issue 19): the values Helm
charts are expected to have (rendered, no cluster), the chart as a subchart of an umbrella chart
(helm dependency build, template and install with values set through the parent; the same install
proves the aggregated view/edit/attach roles with `kubectl auth can-i --as`), a CRD upgrade done
the README's way, and session pod labels and Ingress annotations set through the chart's config
reaching a session's objects."""

import json
import os
import shutil
import subprocess
import uuid

import pytest
import yaml

from conftest import IN_CLUSTER, wait_until
from test_chart import CHART, cluster_scoped_of, helm, render  # noqa: F401  (helm: a fixture)
from test_sessions import (apply, get, hello_bundle, session, session_node,  # noqa: F401
                           start)

CRD_FILE = "telo.run_telosessions.yaml"


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def deployments(docs):
    """{name: the Deployment} of the rendered docs."""
    return {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}


# --- rendered values (helm template: no cluster) ---------------------------------------------

def test_name_overrides_follow_helms_scaffold(helm):
    docs = render(helm, "nameOverride=sessions")
    names = {d["metadata"]["name"] for d in docs
             if d["kind"] in ("Deployment", "Service", "ServiceAccount", "ConfigMap")}
    assert names == {"telo-operator-sessions", "telo-operator-sessions-gateway",
                     "telo-operator-sessions-metrics", "telo-operator-sessions-config"}, names
    op = deployments(docs)["telo-operator-sessions"]
    assert op["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "sessions"
    # A release whose name holds the (overridden) chart name is not prefixed twice.
    assert "my-sessions" in deployments(render(helm, "nameOverride=sessions",
                                               release="my-sessions"))
    docs = render(helm, "fullnameOverride=platform-telo", "json:config.namespaces=[]")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs
             if d["kind"] in ("Deployment", "ClusterRole", "ClusterRoleBinding")}
    assert ("Deployment", "platform-telo") in names
    assert ("Deployment", "platform-telo-gateway") in names
    assert ("ClusterRole", "platform-telo-manager") in names
    assert ("ClusterRoleBinding", "platform-telo-manager") in names
    assert not [n for k, n in names if n.startswith("telo-operator")], names
    # The default names are unchanged.
    assert "telo-operator" in deployments(render(helm))


def test_pod_labels_priority_class_and_annotations_reach_both_pods(helm):
    docs = render(helm, "podLabels.team=platform", "podLabels.app\\.kubernetes\\.io/name=evil",
                  "podAnnotations.example\\.com/a=b", "priorityClassName=telo-high")
    for name, d in deployments(docs).items():
        meta = d["spec"]["template"]["metadata"]
        assert meta["labels"]["team"] == "platform", name
        # The selector labels win over podLabels: the Deployment still selects its pods.
        assert d["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items(), name
        assert meta["annotations"]["example.com/a"] == "b", name
        assert d["spec"]["template"]["spec"]["priorityClassName"] == "telo-high", name
    assert not any("priorityClassName" in d["spec"]["template"]["spec"]
                   for d in deployments(render(helm)).values())


def test_security_contexts_are_overridable_and_openshift_drops_the_uid(helm):
    default = deployments(render(helm))["telo-operator"]["spec"]["template"]["spec"]
    assert default["securityContext"]["runAsUser"] == 65532
    assert default["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    for sets in (("openshift=true",), ("podSecurityContext.runAsUser=null",
                                       "podSecurityContext.runAsGroup=null")):
        for name, d in deployments(render(helm, *sets)).items():
            spec = d["spec"]["template"]["spec"]
            assert "runAsUser" not in spec["securityContext"], (sets, name)
            assert "runAsGroup" not in spec["securityContext"], (sets, name)
            assert spec["securityContext"]["runAsNonRoot"] is True, (sets, name)
            csc = spec["containers"][0]["securityContext"]
            assert csc["capabilities"] == {"drop": ["ALL"]} and "runAsUser" not in csc, name
    spec = deployments(render(helm, "json:securityContext={\"runAsUser\":1001}"))[
        "telo-operator"]["spec"]["template"]["spec"]
    # A map set through --set-json is merged into the defaults, as every Helm map value.
    csc = spec["containers"][0]["securityContext"]
    assert csc["runAsUser"] == 1001 and csc["readOnlyRootFilesystem"] is True, csc


def test_pod_disruption_budgets_only_for_more_than_one_replica(helm):
    assert not by_kind(render(helm, "podDisruptionBudget.enabled=true"), "PodDisruptionBudget")
    assert not by_kind(render(helm, "replicas=2", "gateway.replicas=2"), "PodDisruptionBudget")
    docs = render(helm, "podDisruptionBudget.enabled=true", "replicas=2", "gateway.replicas=3")
    pdbs = {p["metadata"]["name"]: p for p in by_kind(docs, "PodDisruptionBudget")}
    assert set(pdbs) == {"telo-operator", "telo-operator-gateway"}, pdbs
    for name, d in deployments(docs).items():
        assert pdbs[name]["spec"]["selector"]["matchLabels"] == \
            d["spec"]["selector"]["matchLabels"]
        assert pdbs[name]["spec"]["minAvailable"] == 1
    docs = render(helm, "podDisruptionBudget.enabled=true", "gateway.replicas=2",
                  "podDisruptionBudget.maxUnavailable=50%")
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["metadata"]["name"] == "telo-operator-gateway"
    assert pdb["spec"] == {"maxUnavailable": "50%", "selector": pdb["spec"]["selector"]}


def test_service_monitor_only_when_enabled(helm):
    assert not by_kind(render(helm), "ServiceMonitor")
    docs = render(helm, "serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom")
    (sm,) = by_kind(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics", "gateway"]
    assert sm["spec"]["endpoints"][0]["interval"] == "30s"
    # The selector matches both Services; each endpoint's port is on one of them.
    services = by_kind(docs, "Service")
    sel = sm["spec"]["selector"]["matchLabels"]
    ports = {p["name"] for s in services if sel.items() <= s["metadata"]["labels"].items()
             for p in s["spec"]["ports"]}
    assert ports == {"metrics", "gateway"}, ports
    (sm,) = by_kind(render(helm, "serviceMonitor.enabled=true", "gateway.enabled=false"),
                    "ServiceMonitor")
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]


def test_session_metadata_values_reach_the_operators_config(helm):
    docs = render(helm, 'json:config.pod.labels={"team":"platform"}',
                  'json:config.pod.annotations={"example.com/owner":"ops"}',
                  'json:config.ingress.annotations={"cert-manager.io/cluster-issuer":"le"}')
    cm = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["pod"] == {"labels": {"team": "platform"},
                             "annotations": {"example.com/owner": "ops"}}
    assert config["ingress"]["annotations"] == {"cert-manager.io/cluster-issuer": "le"}


def test_the_schema_refuses_the_operators_own_keys_and_allows_global(helm):
    for value, key in (('config.pod.labels={"telo.run/session":"x"}', "/config/pod/labels"),
                       ('config.pod.labels={"app.kubernetes.io/managed-by":"x"}',
                        "/config/pod/labels"),
                       ('config.ingress.annotations={"x.telo.run/y":"z"}',
                        "/config/ingress/annotations"),
                       ('config.pod.labels={"team":"has space"}', "/config/pod/labels/team"),
                       ('podDisruptionBudget={"enabled":true,"minAvailable":"lots"}',
                        "/podDisruptionBudget/minAvailable"),
                       ('nameOverride="Not_A_Name"', "/nameOverride")):
        proc = helm("template", "t", CHART, "--set-json", value, check=False)
        assert proc.returncode != 0 and key in proc.stderr, (value, proc.stderr)
    # Helm's own global (a parent chart's) passes; other unknown keys still do not.
    render(helm, "global.imageRegistry=registry.example.com")
    proc = helm("template", "t", CHART, "--set", "globl.x=1", check=False)
    assert proc.returncode != 0 and "globl" in proc.stderr, proc.stderr


# --- the chart as a subchart; the aggregated roles --------------------------------------------

def can_i(cluster, verb, ns, user):
    proc = cluster.kubectl("auth", "can-i", verb, "telosessions.telo.run", "-n", ns,
                           "--as", user, check=False)
    return proc.stdout.strip() == "yes"


def test_the_chart_works_as_a_subchart_and_edit_users_may_create_sessions(cluster, helm, crd,
                                                                           tmp_path):
    """An umbrella chart depending on this one (file://): dependency build, template and
    install with the subchart's values and a global set through the parent. The release's
    aggregated roles then give the built-in edit and view roles their TeloSession rules."""
    suffix = uuid.uuid4().hex[:6]
    release_ns, sessions_ns, builds_ns = ("e2e-sub-%s" % suffix, "e2e-sub-%s-s" % suffix,
                                          "e2e-sub-%s-b" % suffix)
    release = "e2e-sub-" + suffix
    umbrella = tmp_path / "umbrella"
    (umbrella / "templates").mkdir(parents=True)
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "telo-operator", "version": ">=0.0.0-0",
                          "repository": "file://" + CHART}]}))
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {"imageRegistry": "registry.example.com"},
        "telo-operator": {
            "config": {"namespaces": [sessions_ns], "pod": {"labels": {"team": "platform"}}},
            "namespaces": {"builds": builds_ns},
            "rbac": {"sessionAttachRole": False},
            "podLabels": {"team": "platform"},
            "gateway": {"replicas": 2},
            "podDisruptionBudget": {"enabled": True}}}))
    helm("dependency", "build", str(umbrella))
    assert os.path.exists(umbrella / "charts" / "telo-operator-0.1.0.tgz"), \
        os.listdir(umbrella / "charts")
    docs = [d for d in yaml.safe_load_all(helm("template", release, str(umbrella), "-n",
                                                release_ns).stdout) if d]
    gw = deployments(docs)[release + "-telo-operator-gateway"]
    assert gw["spec"]["replicas"] == 2
    assert gw["spec"]["template"]["metadata"]["labels"]["team"] == "platform"
    assert by_kind(docs, "PodDisruptionBudget")
    cluster.kubectl("create", "namespace", release_ns)
    users = {"edit": "e2e-editor-" + suffix, "view": "e2e-viewer-" + suffix}
    try:
        # Before the install this release's roles do not exist (an older operator's plain
        # config/rbac/ may have aggregated the same rules: the checks below then hold anyway).
        helm("install", release, str(umbrella), "-n", release_ns, "--timeout", "120s")
        roles = {n.split("/", 1)[1] for n in cluster_scoped_of(cluster, release)
                 if n.startswith("clusterrole.")}
        prefix = release + "-telo-operator-"
        assert {prefix + "view", prefix + "edit", prefix + "attach"} <= roles, roles
        edit = cluster.kubectl_json("get", "clusterrole", prefix + "edit")
        assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
        config = yaml.safe_load(cluster.kubectl_json(
            "get", "configmap", release + "-telo-operator-config", "-n",
            release_ns)["data"]["config.yaml"])
        assert config["namespaces"] == [sessions_ns]
        assert config["pod"]["labels"] == {"team": "platform"}
        assert cluster.kubectl("get", "pdb", release + "-telo-operator-gateway", "-n",
                               release_ns, check=False).returncode == 0

        for role, user in users.items():
            cluster.kubectl("create", "rolebinding", "e2e-%s-%s" % (role, suffix), "-n",
                            sessions_ns, "--clusterrole=" + role, "--user=" + user)
        wait_until(lambda: can_i(cluster, "create", sessions_ns, users["edit"]), timeout=30,
                   what="the edit role to aggregate TeloSession create")
        editor = users["edit"]
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert can_i(cluster, verb, sessions_ns, editor), verb
        proc = cluster.kubectl("auth", "can-i", "create", "telosessions.telo.run/attach", "-n",
                               sessions_ns, "--as", editor, check=False)
        assert proc.stdout.strip() == "yes", proc.stdout
        viewer = users["view"]
        for verb in ("get", "list", "watch"):
            assert can_i(cluster, verb, sessions_ns, viewer), verb
        for verb in ("create", "patch", "delete"):
            assert not can_i(cluster, verb, sessions_ns, viewer), verb
        # Only where they are bound.
        assert not can_i(cluster, "create", release_ns, editor)
        # And the editor really creates one (impersonated; the CRD is the shared one).
        proc = cluster.kubectl("--as", editor, "apply", "-n", sessions_ns, "-f", "-",
                               input=json.dumps(session("made-by-an-editor")))
        assert proc.returncode == 0, proc.stderr
        proc = cluster.kubectl("--as", viewer, "apply", "-n", sessions_ns, "-f", "-",
                               input=json.dumps(session("made-by-a-viewer")), check=False)
        assert proc.returncode != 0 and "forbidden" in proc.stderr, proc.stderr
    finally:
        helm("uninstall", release, "-n", release_ns, "--timeout", "120s", check=False)
        for ns in (release_ns, sessions_ns, builds_ns):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found",
                            check=False)


# --- the CRD upgrade ---------------------------------------------------------------------------

UPGRADE_KIND, UPGRADE_PLURAL = "UpgradeTestSession", "upgradetestsessions"

def crd_of_group(group, drop=None):
    """The chart's CRD under another API group and names (so the shared cluster's telo.run CRD,
    and every TeloSession of other tests, stay untouched, and no `kubectl get telosession` or
    `ts` of a later test resolves to this group from kubectl's discovery cache), without
    spec.<drop> if asked: an older CRD."""
    with open(os.path.join(CHART, "crds", CRD_FILE)) as f:
        crd = yaml.safe_load(f)
    crd["metadata"]["name"] = UPGRADE_PLURAL + "." + group
    crd["spec"]["group"] = group
    crd["spec"]["names"] = {"kind": UPGRADE_KIND, "listKind": UPGRADE_KIND + "List",
                            "plural": UPGRADE_PLURAL, "singular": UPGRADE_PLURAL[:-1]}
    if drop:
        for version in crd["spec"]["versions"]:
            del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][drop]
    return crd


def chart_with_crd(tmp_path, name, crd):
    copy = tmp_path / name
    shutil.copytree(CHART, copy)
    (copy / "crds" / CRD_FILE).write_text(yaml.safe_dump(crd))
    return copy


def test_crd_upgrade_the_readme_way_keeps_a_new_field(cluster, helm, tmp_path):
    """README "Upgrading": Helm installs crds/ once and never upgrades it; the new CRD is applied
    with `kubectl apply --server-side --force-conflicts -f <chart>/crds/`, then `helm upgrade`.
    The release is installed from a chart whose CRD lacks spec.restartGeneration (an older
    version); after the documented steps a TeloSession with the field is accepted and keeps it
    (not pruned), and the upgrade did not take the field away again."""
    suffix = uuid.uuid4().hex[:6]
    group = "e2e-%s.telo.run" % suffix
    release_ns = "e2e-crdup-%s" % suffix
    sessions_ns, builds_ns = release_ns + "-s", release_ns + "-b"
    release = "e2e-crdup-" + suffix
    old = chart_with_crd(tmp_path, "old", crd_of_group(group, drop="restartGeneration"))
    new = chart_with_crd(tmp_path, "new", crd_of_group(group))
    sets = ["--set", "config.namespaces={%s}" % sessions_ns, "--set", "namespaces.builds=" +
            builds_ns, "--set", "rbac.sessionAttachRole=false", "--set", "gateway.enabled=false"]
    ts = session("upgraded", restartGeneration=3)
    ts["apiVersion"] = group + "/v1alpha1"
    ts["kind"] = UPGRADE_KIND
    cluster.kubectl("create", "namespace", release_ns)
    try:
        helm("install", release, str(old), "-n", release_ns, *sets, "--timeout", "120s")
        crd_name = UPGRADE_PLURAL + "." + group

        def spec_fields():
            crd = cluster.kubectl_json("get", "crd", crd_name)
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
                "spec"]["properties"]
        assert "restartGeneration" not in spec_fields()
        wait_until(lambda: cluster.kubectl("get", crd_name, "-n", sessions_ns,
                                           check=False).returncode == 0,
                   timeout=30, what="the old CRD served")
        # The old CRD: the field is unknown (kubectl's strict validation refuses it).
        proc = cluster.kubectl("apply", "-n", sessions_ns, "-f", "-", input=json.dumps(ts),
                               check=False)
        assert proc.returncode != 0 and "restartGeneration" in proc.stderr, proc.stderr

        # A plain helm upgrade does not bring the new CRD.
        helm("upgrade", release, str(new), "-n", release_ns, "--reuse-values",
             "--timeout", "120s")
        assert "restartGeneration" not in spec_fields()

        # The README's way.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                        str(new / "crds") + "/")
        helm("upgrade", release, str(new), "-n", release_ns, "--reuse-values",
             "--timeout", "120s")
        assert "restartGeneration" in spec_fields()
        wait_until(lambda: cluster.kubectl("apply", "-n", sessions_ns, "-f", "-",
                                           input=json.dumps(ts), check=False).returncode == 0,
                   timeout=30, what="the new field accepted")
        got = cluster.kubectl_json("get", crd_name, "upgraded", "-n", sessions_ns)
        assert got["spec"]["restartGeneration"] == 3, got["spec"]
    finally:
        helm("uninstall", release, "-n", release_ns, "--timeout", "120s", check=False)
        cluster.kubectl("delete", "crd", UPGRADE_PLURAL + "." + group, "--wait=false",
                        "--ignore-not-found", check=False)
        for ns in (release_ns, sessions_ns, builds_ns):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found",
                            check=False)


# --- session metadata through the chart's config ------------------------------------------------

def test_session_pod_and_ingress_carry_the_charts_labels_and_annotations(cluster, helm, start,
                                                                        pod_namespace, tmp_path):
    """The chart's config.pod.* and config.ingress.annotations, rendered into its ConfigMap, run
    by the operator (--config, as the chart's Deployment does): the session's Pod and Ingress
    carry them beside the operator's own labels."""
    docs = render(helm, 'json:config.pod.labels={"team":"platform","example.com/tier":"gold"}',
                  'json:config.pod.annotations={"example.com/owner":"ops team"}',
                  'json:config.ingress.annotations={"cert-manager.io/cluster-issuer":"le",'
                  '"nginx.ingress.kubernetes.io/proxy-read-timeout":"3600"}',
                  "config.ingress.baseDomain=sessions.example.test")
    cm = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    ns = pod_namespace
    if IN_CLUSTER:
        # The operator's pod cannot read this machine's file: the rendered file's session
        # metadata keys go to it as --set (maps as k=v,k2=v2), the rest as the fixture sets it.
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        sets = ["ingress.baseDomain=" + cfg["ingress"]["baseDomain"]]
        for key, value in (("pod.labels", cfg["pod"]["labels"]),
                           ("pod.annotations", cfg["pod"]["annotations"]),
                           ("ingress.annotations", cfg["ingress"]["annotations"])):
            sets.append("%s=%s" % (key, ",".join("%s=%s" % kv for kv in value.items())))
        start(*sets)
    else:
        start(args=("--config", str(path)))
    apply(cluster, ns, hello_bundle(), session("meta"))
    pod = wait_until(lambda: get(cluster, ns, "pod", "telo-run-meta"), timeout=30,
                     what="the session pod")
    labels, annotations = pod["metadata"]["labels"], pod["metadata"].get("annotations", {})
    assert labels["team"] == "platform" and labels["example.com/tier"] == "gold", labels
    assert labels["telo.run/session"] == "meta", labels
    assert labels["app.kubernetes.io/managed-by"] == "telo-operator", labels
    assert annotations["example.com/owner"] == "ops team", annotations
    ing = wait_until(lambda: get(cluster, ns, "ingress", "telo-run-meta"), timeout=30,
                     what="the session Ingress")
    ann = ing["metadata"]["annotations"]
    assert ann["cert-manager.io/cluster-issuer"] == "le", ann
    assert ann["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600", ann
    assert "team" not in ing["metadata"]["labels"]


# --- a GitOps tool's renderer --------------------------------------------------------------------

def test_argo_cds_helm_template_invocation_renders_the_plain_file_chart(helm, tmp_path):
    """Argo CD's repo-server renders a Helm source by running helm itself (util/helm: `helm
    template <path> --name-template <app> --namespace <ns> --kube-version <v> --api-versions ...
    --include-crds` plus the Application's values), from the Git checkout. The chart as such a
    checkout without symbolic links, with those arguments: the CRD, the RBAC with the aggregated
    roles, and a values file of the Application's (a ServiceMonitor, the cluster has its API)."""
    copy = tmp_path / "checkout" / "charts" / "telo-operator"
    shutil.copytree(CHART, copy, ignore=lambda d, names: [n for n in names if os.path.islink(
        os.path.join(d, n))])
    values = tmp_path / "app-values.yaml"
    values.write_text(yaml.safe_dump({"serviceMonitor": {"enabled": True},
                                      "config": {"ingress": {"annotations": {
                                          "cert-manager.io/cluster-issuer": "le"}}}}))
    proc = helm("template", str(copy), "--name-template", "telo", "--namespace", "telo-system",
                "--kube-version", "1.31.0", "--api-versions", "monitoring.coreos.com/v1",
                "--api-versions", "policy/v1", "--include-crds", "--values", str(values))
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "ServiceMonitor", "ClusterRole",
            "Deployment"} <= kinds, kinds
    aggregated = [d["metadata"]["name"] for d in by_kind(docs, "ClusterRole")
                  if "rbac.authorization.k8s.io/aggregate-to-edit" in d["metadata"]["labels"]]
    assert sorted(aggregated) == ["telo-telo-operator-attach", "telo-telo-operator-edit",
                                  "telo-telo-operator-view"], aggregated

"""The operator's log as a log pipeline reads it (issue 19): with --log-format=json every line is
one JSON object with ts, level and msg, and values the operator did not choose (a session's
name, the API server's answers) arrive intact; -v 4 turns debug lines on, as kube components
count verbosity."""
import json

from conftest import wait_until
from test_sessions import apply, session


def test_json_log_lines_parse(cluster, operator, pod_namespace):
    ns = pod_namespace
    op = operator(args=("--log-format=json", "-v", "4"))
    # A session whose bundle ConfigMap does not exist: reconciled and reported, with its name in
    # the log lines about it.
    apply(cluster, ns, session("logged", bundle="no-such-bundle"))
    wait_until(lambda: (cluster.kubectl("get", "ts", "logged", "-n", ns, "-o",
                                        "jsonpath={.status.reason}", check=False).stdout
                        == "BundleNotFound") or None,
               timeout=30, what="the session's BundleNotFound")
    assert op.stop() == 0
    with open(op.log_path) as f:
        lines = [line for line in f.read().splitlines()
                 if line.strip() and not line.startswith("--- ")]
    assert len(lines) >= 5, lines
    records = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise AssertionError("not a JSON line (%s): %r" % (e, line))
        assert isinstance(rec, dict) and {"ts", "level", "msg"} <= rec.keys(), line
        assert rec["level"] in ("debug", "info", "warn", "error"), line
        records.append(rec)
    levels = {r["level"] for r in records}
    assert "debug" in levels and "info" in levels, levels
    assert any(r["msg"] == "telo-operator started" for r in records), records[:5]
    # A value about the session holds its name, as written (a string, not split at a quote).
    assert any(isinstance(v, str) and "logged" in v
               for r in records for k, v in r.items() if k not in ("ts", "level", "msg")), (
        [r for r in records if r["level"] != "debug"])

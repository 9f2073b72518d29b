#!/usr/bin/env bash
# The long form of the churn suite (test/e2e/test_churn.py, issue 21): sessions created, deleted
# and re-created under the same name while the leading operator replica is SIGKILLed, its lease
# stolen, kube-apiserver restarted and kube-controller-manager stopped; then a summary.
#
#   bench/chaos/run.sh [pytest args...]
#
# Defaults (each overridable from the environment, see bench/chaos/README.md):
#   TELO_CHURN_SESSIONS=300 TELO_CHURN_KILLS=20 TELO_CHURN_APISERVER_RESTARTS=3
#   TELO_CHURN_GC_OUTAGE=60 TELO_CHURN_REPLICAS=2 TELO_CHURN_STEALS=3
# TELO_CHAOS_OUT is where the pytest log and summary.json go (default /tmp/telo-chaos-<pid>).
# It restarts cluster components: on a shared cluster run it under the e2e lock
# (flock /tmp/telo-e2e.lock bench/chaos/run.sh). Build first: the operator is build/bin's
# (TELO_BIN_DIR, TELO_E2E_OPERATOR as for hack/e2e.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
[ -x "${TELO_BIN_DIR:-build/bin}/telo-operator" ] || { echo "chaos: build first" >&2; exit 1; }
export TELO_CHURN_SESSIONS=${TELO_CHURN_SESSIONS:-300}
export TELO_CHURN_KILLS=${TELO_CHURN_KILLS:-20}
export TELO_CHURN_APISERVER_RESTARTS=${TELO_CHURN_APISERVER_RESTARTS:-3}
export TELO_CHURN_GC_OUTAGE=${TELO_CHURN_GC_OUTAGE:-60}
export TELO_CHURN_REPLICAS=${TELO_CHURN_REPLICAS:-2}
export TELO_CHURN_STEALS=${TELO_CHURN_STEALS:-3}
out=${TELO_CHAOS_OUT:-${TMPDIR:-/tmp}/telo-chaos-$$}
mkdir -p "$out"
export TELO_CHURN_SUMMARY=$out/summary.json
rm -f "$TELO_CHURN_SUMMARY"
started=$SECONDS
rc=0
hack/e2e.sh -q -s -x test_churn.py "$@" 2>&1 | tee "$out/pytest.log" || rc=$?
echo
echo "chaos: pytest exit $rc after $((SECONDS - started)) s; log $out/pytest.log"
if [ ! -s "$TELO_CHURN_SUMMARY" ]; then
	echo "chaos: no summary (the test failed before its checks; see the log)" >&2
	exit "${rc/#0/1}"
fi
python3 - "$TELO_CHURN_SUMMARY" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
g = s.get
print("sessions: %d created, %d re-created under the same name, %d deleted, %d live at the end"
      % (g("created", 0), g("recreated", 0), g("deleted", 0), g("sessions_live", 0)))
print("operator: %d replicas, %d SIGKILLs of the leader, %d lease steals, %d exits on its own "
      "(lost lease) restarted" % (g("replicas", 0), g("kills", 0), g("steals", 0),
                                 g("replica_exits", 0)))
print("cluster: %d kube-apiserver restarts, %d s kube-controller-manager outage"
      % (g("apiserver_restarts", 0), g("gc_outage_s", 0)))
print("convergence after the last disruption: %s s (every session Running on its own pod); "
      "garbage collected after %s s" % (g("convergence_s"), g("gc_cleanup_s")))
print("evidence: %d object versions watched (failed list/watch attempts %s), %d session incarnations, "
      "%d child creates in the audit log" % (g("observations", 0), g("watch_failures"),
                                           g("incarnations", 0), g("child_creates", 0)))
print("kwok deleted %d replacement pods by name (not counted, see README)" % g("pods_deleted_by_kwok", 0))
print("violations: %d" % g("violations", 0))
for v in s.get("violation_list", [])[:40]:
    print("  " + v)
PY
exit "$rc"

#!/usr/bin/env bash
# What session limits cost the operator as sessions grow: N TeloSessions created at once on kwok
# nodes of the bench's own, reconciled by telo-operator with limits.maxSessions M (the others wait,
# SessionLimit) and, as the peer in the same run, by the same operator with no limit.
#
#   bench/limits/run.sh [N...]        default N: 300 1000
#
# Per run, in a fresh namespace with a fresh operator process (bench.py's docstring for each
# figure): the burst (create to every session decided), the idle rate (the waiting sessions'
# rechecks), and with limits the wake (the M Running deleted, until M more run).
# Environment: TELO_BENCH_REPEATS (3), TELO_BENCH_MAX_SESSIONS (32), TELO_BENCH_OPERATOR
# (build/bin/telo-operator), TELO_BENCH_OPERATOR_B (a second build, run as path "on-b" for a
# before/after in the same run), TELO_BENCH_PATHS ("off on"), TELO_BENCH_IDLE_S (65),
# TELO_BENCH_OPERATOR_PORT (16313), TELO_BENCH_OUT.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(300 1000)
repeats=${TELO_BENCH_REPEATS:-3}
max=${TELO_BENCH_MAX_SESSIONS:-32}
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
out=${TELO_BENCH_OUT:-$root/bench/limits/results/$(date -u +%Y%m%dT%H%M%SZ)-$commit}
mkdir -p "$out/bin"
cp "${TELO_BENCH_OPERATOR:-$root/build/bin/telo-operator}" "$out/bin/telo-operator"
read -r -a paths <<<"${TELO_BENCH_PATHS:-off on}"
if [ -n "${TELO_BENCH_OPERATOR_B:-}" ]; then
	cp "$TELO_BENCH_OPERATOR_B" "$out/bin/telo-operator-b"
	[[ " ${paths[*]} " == *" on-b "* ]] || paths+=(on-b)
fi
hack/cluster/up.sh >/dev/null
source hack/cluster/lib.sh
# shellcheck source=../lib.sh
source bench/lib.sh
crd_install
venv=$(hack/install-deps.sh --venv)
py() { "$venv/bin/python" "$root/bench/limits/bench.py" "$@"; }
op_port=${TELO_BENCH_OPERATOR_PORT:-16313}
id=bl$$
t_start=$SECONDS
log() { echo "bench: [$((SECONDS - t_start))s] $*" >&2; }
log "results in $out; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

op_pid="" ns=""
nodes=("$id-node-0" "$id-node-1")
finish_ns() {
	[ -n "$ns" ] || return 0
	kubectl_cmd delete ns "$ns" --wait=false >/dev/null 2>&1 || true
	kubectl_cmd wait --for=delete ns/"$ns" --timeout=300s >/dev/null 2>&1 || log "namespace $ns still there"
	ns=""
}
cleanup() {
	local rc=$?
	set +e
	stop_pid "$op_pid"
	finish_ns
	kubectl_cmd delete node "${nodes[@]}" --ignore-not-found >/dev/null 2>&1
	log "results in $out"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_nodes_up "$id" 2000 4Ti 5000 "$out/nodes.yaml" "${nodes[@]}"

for n in "${sizes[@]}"; do
	for r in $(seq 1 "$repeats"); do
		for path in "${paths[@]}"; do
			m=0 bin=telo-operator
			[ "$path" = off ] || m=$max
			[ "$path" != on-b ] || bin=telo-operator-b
			ns=$id-$path-$n-$r
			kubectl_cmd create namespace "$ns" >/dev/null
			sed -n '/^apiVersion: v1$/,/^---$/p' crds/samples/hello.yaml | grep -v '^---$' |
				kubectl_cmd apply -n "$ns" -f - >/dev/null
			cat >"$out/operator-$ns.yaml" <<CFG
namespaces: [$ns]
nodeSelector: {bench.telo.run/node: "$id"}
tolerations: [{key: bench.telo.run/node, operator: Equal, value: "$id", effect: NoSchedule}]
startDeadlineSeconds: 900
reachability: {podCIDRs: [${TELO_REAL_POD_CIDR:-10.85.0.0/24}]}
limits: {maxSessions: $m}
CFG
			"$out/bin/$bin" run --kubeconfig "$kubeconfig" --config "$out/operator-$ns.yaml" \
				--http-bind-address "127.0.0.1:$op_port" --log-level warn >"$out/operator-$ns.log" 2>&1 &
			op_pid=$!
			until curl -fs "http://127.0.0.1:$op_port/readyz" >/dev/null 2>&1; do
				kill -0 "$op_pid" || { log "telo-operator died: $out/operator-$ns.log"; exit 1; }
				sleep 0.2
			done
			log "N=$n run $r: $path (maxSessions $m, $bin)"
			py run "$kubeconfig" "$ns" "$n" "$m" "$op_pid" "$out/$path-$n-$r.json" >/dev/null
			python3 - "$out/$path-$n-$r.json" "$path" "$commit" <<'PY'
import json, sys
p = sys.argv[1]
r = json.load(open(p))
r["label"], r["commit"] = sys.argv[2], sys.argv[3]
json.dump(r, open(p, "w"), indent=1)
PY
			stop_pid "$op_pid"
			op_pid=""
			finish_ns
		done
	done
done
py summary "$out"/*.json | tee "$out/summary.md"

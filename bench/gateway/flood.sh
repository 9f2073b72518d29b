#!/usr/bin/env bash
# One tenant's flood and everyone else's gateway: GET /readyz and another session's keystroke
# echo through the gateway, quiet and while one session's app writes TELO_BENCH_BYTES as fast as
# it can (bench/gateway/flood.py's docstring says how each figure is taken). Two real sessions
# of the real node (TELO_REAL_NODE=1 hack/cluster/up.sh): `flood` and `solo`, their attach
# through the API server and kubelet as users have it. With TELO_BENCH_OLD_BIN (a directory with
# an older telo-gateway) each run measures the old and the new gateway in turn, same sessions.
#
#   TELO_BENCH_RUNS (3), TELO_BENCH_BYTES (300000000), TELO_BENCH_OLD_BIN,
#   TELO_BENCH_MODE (output; stdin: the flooding client sends one-byte input messages instead,
#   for TELO_BENCH_SECONDS, 30). Each run also reads the CPU seconds the gateway, the API server
#   and the kubelet spent during the flood (and, for stdin, per MB of input forwarded).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/gateway/lib.sh
bench_init flood 16370
exec 9>/tmp/telo-e2e.lock
flock 9
bench_namespace
switch="bench/gateway/gw-switch.sh $out $gw_port"
trap '$switch off; bench_cleanup' EXIT
bench_start_operator
bench_sessions flood solo
for s in flood solo; do
	$kubectl wait -n "$ns" "telosessions.telo.run/$s" --for=jsonpath='{.status.phase}'=Running \
		--timeout=120s >/dev/null
done
token() { $kubectl get secret "$(bench_attach_secret "$1")" -n "$ns" -o jsonpath='{.data.token}' | base64 -d; }
solo_token=$(token solo)
flood_token=$(token flood)
cluster_pids=$(dirname "$kubeconfig")/pids
gateways=("new=$bin")
[ -n "${TELO_BENCH_OLD_BIN:-}" ] && gateways+=("old=$TELO_BENCH_OLD_BIN")
runs=()
for run in $(seq 1 "${TELO_BENCH_RUNS:-3}"); do
	for g in "${gateways[@]}"; do
		label=${g%%=*}
		$switch "${g#*=}" "$kubeconfig" --log-level warn
		python3 bench/gateway/flood.py --port "$gw_port" --ns "$ns" --token "$solo_token" \
			--flood-token "$flood_token" --label "$label" --bytes "${TELO_BENCH_BYTES:-300000000}" \
			--mode "${TELO_BENCH_MODE:-output}" --seconds "${TELO_BENCH_SECONDS:-30}" \
			--cpu "gateway=$(cat "$out/gw.pid")" --cpu "kube-apiserver=$(cat "$cluster_pids/kube-apiserver.pid")" \
			--cpu "kubelet=$(cat "$cluster_pids/kubelet.pid")" \
			--json "$out/flood-$label-$run.json"
		runs+=("$out/flood-$label-$run.json")
	done
done
python3 bench/gateway/flood.py --summarize "${runs[@]}" --json "$out/flood.json"
echo "bench: results in $out/flood.json; gateway log $out/gateway.log" >&2

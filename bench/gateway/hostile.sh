#!/usr/bin/env bash
# The gateway under 2,000 hostile connections (issue 15, finding 4): a legitimate client's
# keystroke round trip, quiet and under the load, and the gateway's RSS, over
# TELO_BENCH_RUNS (3) runs of TELO_BENCH_KEYSTROKES (200) keystrokes each way. The load
# (bench/gateway/hostile.py): TELO_BENCH_IDLE (800) connections that never send a head,
# TELO_BENCH_AUTH (800) clients attached with the session's token that never read and ping,
# TELO_BENCH_UNAUTH (400) slots asking again and again with random tokens; all on loopback
# (127.0.1-3.x source addresses). Goals: RSS under 64 MiB, the p50 round trip under 2x quiet.
#
# Two sessions of the real node (the legitimate client's and the attacker's own) (TELO_REAL_NODE=1 hack/cluster/up.sh), its own telo-operator
# (watching only its namespace) and telo-gateway (RLIMIT_NOFILE 8192, --max-pending 4096 and
# --max-clients-per-session 1024 so that it holds every hostile connection rather than refusing
# them: the worst case for its memory); removed on exit. Hold the e2e lock while it runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bin=${TELO_BIN_DIR:-build/bin}
for b in telo-operator telo-gateway kubectl-telo; do
	[ -x "$bin/$b" ] || { echo "bench: $bin/$b missing (make build)" >&2; exit 1; }
done
kubeconfig=${TELO_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/cluster}/kubeconfig
refs=$(dirname "$kubeconfig")/real-node/images/refs.json
kubectl="$(hack/build-tools.sh --print-dir k8s)/kubectl --kubeconfig $kubeconfig"
[ -f "$refs" ] || { echo "bench: no real node (TELO_REAL_NODE=1 hack/cluster/up.sh)" >&2; exit 1; }
image() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$refs" "$1"; }

id=bh$$
ns="bench-hostile-$id"
out=${TELO_BENCH_OUT:-${TMPDIR:-/tmp}/telo-bench-hostile-$id}
mkdir -p "$out"
gw_port=${TELO_BENCH_GATEWAY_PORT:-16330}
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	$kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

source hack/cluster/lib.sh
crd_install
$kubectl create namespace "$ns" >/dev/null
$kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted >/dev/null
(
	ulimit -n 8192
	exec "$bin/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$gw_port" \
		--max-pending 4096 --max-clients-per-session 1024 --log-level warn
) >"$out/gateway.log" 2>&1 &
gw_pid=$!
pids+=($gw_pid)
"$bin/telo-operator" run --kubeconfig "$kubeconfig" --http-bind-address 127.0.0.1:0 \
	--set "namespaces=$ns" --set nodeSelector=telo.run/node=real \
	--set 'tolerations=[{"key":"telo.run/node","operator":"Equal","value":"real","effect":"NoSchedule"}]' \
	--set "images.init=$(image telo-init)" --set "images.default=$(image telo-session-test)" \
	--set startDeadlineSeconds=90 --set "gatewayUrl=http://127.0.0.1:$gw_port" \
	>"$out/operator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$gw_port/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done

app="$out/app"
mkdir -p "$app"
printf 'print bench session\n' >"$app/telo.yaml"
# bench: the legitimate client's session; attacker: the hostile tenant's own session, which its
# authenticated non-readers attach to (its token is theirs to use).
for s in bench attacker; do
	"$bin/kubectl-telo" --kubeconfig "$kubeconfig" -n "$ns" run "$app" --name "$s" --no-attach
done
attach() { # session -> "url token"
	local url secret token
	url=$($kubectl get ts "$1" -n "$ns" -o jsonpath='{.status.attach.url}')
	secret=$($kubectl get ts "$1" -n "$ns" -o jsonpath='{.status.attach.secretName}')
	token=$($kubectl get secret "$secret" -n "$ns" -o jsonpath='{.data.token}' | base64 -d)
	[ -n "$url" ] && [ -n "$token" ] || { echo "bench: no status.attach on $1" >&2; exit 1; }
	echo "${url/http:/ws:} $token"
}
read -r url token < <(attach bench)
read -r attack_url attack_token < <(attach attacker)
echo "bench: session $ns/bench, gateway $url (pid $gw_pid), attacker's session $ns/attacker" >&2

echo "bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/result.txt" >&2
python3 bench/gateway/hostile.py --url "$url" --token "$token" --pid "$gw_pid" \
	--attack-url "$attack_url" --attack-token "$attack_token" \
	--runs "${TELO_BENCH_RUNS:-3}" --keystrokes "${TELO_BENCH_KEYSTROKES:-200}" \
	--idle "${TELO_BENCH_IDLE:-800}" --auth "${TELO_BENCH_AUTH:-800}" \
	--unauth "${TELO_BENCH_UNAUTH:-400}" | tee -a "$out/result.txt"
echo "bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/result.txt" >&2
curl -fsS "http://127.0.0.1:$gw_port/metrics" | grep -E '^telo_gateway_(limited|refusals|admission|pending|clients )' \
	>>"$out/result.txt" || true
echo "bench: results in $out" >&2

#!/usr/bin/env bash
# Terminal attach through the gateway vs straight to the API server, on one session of the real
# node, in one run: keystroke round trip (p50/p99) and output throughput (MB/s).
#
#   bench/gateway/run.sh          (TELO_BENCH_KEYSTROKES=100 per round, TELO_BENCH_ROUNDS=3,
#                                  TELO_BENCH_FLOOD=20000000 bytes, TELO_BENCH_OUT=results dir)
#
# Paths, each a client on its own pseudo-terminal attached to the same session TTY (the stand-in
# CLI, hack/images/README.md: its TTY echoes keystrokes, `flood N` writes N bytes):
#   kubectl-attach   kubectl attach -it POD -c session: kubectl's WebSocket client, API server
#   telo-direct      kubectl telo attach --direct: our client (pkg/kube/attach), API server
#   telo-gateway     kubectl telo attach: our client to build/bin/telo-gateway, which holds one
#                    pods/attach upstream to the API server (status.attach.url, session token)
# telo-gateway vs telo-direct is the gateway's own cost (same client); vs kubectl-attach what a
# user sees. The bench starts its own telo-operator (watching only its namespace, gatewayUrl set)
# and telo-gateway, and removes them and the namespace on exit. It loads the shared cluster:
# run it when nobody else is testing. gotty (the issue's third peer) is not in the Go module
# proxy this machine reaches (403 for github.com/sorenisanerd/gotty and github.com/yudai/gotty),
# so it is not measured.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bin=${TELO_BIN_DIR:-build/bin}
for b in telo-operator telo-gateway kubectl-telo; do
	[ -x "$bin/$b" ] || { echo "bench: $bin/$b missing (make build)" >&2; exit 1; }
done
hack/cluster/up.sh >/dev/null
kubeconfig=${TELO_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/cluster}/kubeconfig
refs=$(dirname "$kubeconfig")/real-node/images/refs.json
kubectl="$(hack/build-tools.sh --print-dir k8s)/kubectl --kubeconfig $kubeconfig"
[ -f "$refs" ] || { echo "bench: no real node (TELO_REAL_NODE=1 hack/cluster/up.sh)" >&2; exit 1; }
image() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$refs" "$1"; }

id=bg$$
ns="bench-gateway-$id"
out=${TELO_BENCH_OUT:-${TMPDIR:-/tmp}/telo-bench-gateway-$id}
mkdir -p "$out"
gw_port=${TELO_BENCH_GATEWAY_PORT:-16320}
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	$kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

$kubectl create namespace "$ns" >/dev/null
$kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted >/dev/null
"$bin/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$gw_port" \
	>"$out/gateway.log" 2>&1 &
pids+=($!)
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
"$bin/kubectl-telo" --kubeconfig "$kubeconfig" -n "$ns" run "$app" --name bench --no-attach
pod=$($kubectl get ts bench -n "$ns" -o jsonpath='{.status.podName}')
url=$($kubectl get ts bench -n "$ns" -o jsonpath='{.status.attach.url}')
[ -n "$url" ] || { echo "bench: the session publishes no status.attach.url" >&2; exit 1; }
echo "bench: session $ns/bench, pod $pod, gateway $url" >&2

telo="$bin/kubectl-telo --kubeconfig $kubeconfig -n $ns"
python3 bench/gateway/bench.py \
	--keystrokes "${TELO_BENCH_KEYSTROKES:-100}" --rounds "${TELO_BENCH_ROUNDS:-3}" \
	--flood "${TELO_BENCH_FLOOD:-20000000}" --json "$out/samples.json" \
	--path "kubectl-attach=$kubectl attach -it -n $ns $pod -c session" \
	--path "telo-direct=$telo attach bench --direct" \
	--path "telo-gateway=$telo attach bench" | tee "$out/result.txt"
echo "bench: results in $out" >&2

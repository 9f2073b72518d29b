#!/usr/bin/env bash
# Terminal attach through the gateway vs straight to the API server, on one session of the real
# node, in one run: keystroke round trip (p50/p99) and output throughput (MB/s); beside gotty on a
# local pseudo-terminal.
#
#   bench/gateway/run.sh          (TELO_BENCH_KEYSTROKES=100 per round, TELO_BENCH_ROUNDS=3,
#                                  TELO_BENCH_WARMUP=20 untimed keystrokes per attach,
#                                  TELO_BENCH_FLOOD=20000000 bytes, TELO_BENCH_OUT=results dir,
#                                  TELO_BENCH_GOTTY=path of a gotty binary; by default
#                                  hack/build-tools.sh gotty builds the one pinned in
#                                  hack/tools/gotty from the Go module proxy; "none" leaves it out)
#
# Paths, each a client on its own pseudo-terminal attached to the same session TTY (the stand-in
# CLI, hack/images/README.md: its TTY echoes keystrokes, `flood N` writes N bytes):
#   kubectl-attach   kubectl attach -it POD -c session: kubectl's WebSocket client, API server
#   telo-direct      kubectl telo attach --direct: our client (pkg/kube/attach), API server
#   telo-gateway     kubectl telo attach: our client to build/bin/telo-gateway, which holds one
#                    pods/attach upstream to the API server (status.attach.url, session token)
#   gotty            gotty -w running the same stand-in on a local
#                    pseudo-terminal (busybox applets first on PATH, as in the image), driven by
#                    bench/gateway/gotty_client.py over gotty's WebSocket protocol; no API server,
#                    kubelet or container runtime on its path
# telo-gateway vs telo-direct is the gateway's own cost (same client); vs kubectl-attach what a
# user sees. Every TTY path is timed with exactly one other stream attached to the TTY (the
# gateway's upstream stays attached for its scrollback; the gateway path gets an idle direct
# attach beside it: bench.py --beside). The bench starts its own telo-operator (watching only its
# namespace, gatewayUrl set) and telo-gateway, and removes them and the namespace on exit. It
# loads the cluster: run it on a cluster nobody else is testing on.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/gateway/lib.sh
hack/cluster/up.sh >/dev/null
bench_init gateway 16320
bench_namespace
"$bin/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$gw_port" \
	>"$out/gateway.log" 2>&1 &
pids+=($!)
bench_start_operator
bench_wait_gateway
bench_sessions bench
pod=$($kubectl get ts bench -n "$ns" -o jsonpath='{.status.podName}')
url=$($kubectl get ts bench -n "$ns" -o jsonpath='{.status.attach.url}')
[ -n "$url" ] || { echo "bench: the session publishes no status.attach.url" >&2; exit 1; }
echo "bench: session $ns/bench, pod $pod, gateway $url" >&2

gotty=()
if [ -z "${TELO_BENCH_GOTTY:-}" ]; then
	hack/build-tools.sh gotty
	TELO_BENCH_GOTTY="$(hack/build-tools.sh --print-dir gotty)/gotty"
fi
if [ "$TELO_BENCH_GOTTY" != none ]; then
	[ -x "$TELO_BENCH_GOTTY" ] || { echo "bench: TELO_BENCH_GOTTY=$TELO_BENCH_GOTTY is not executable" >&2; exit 1; }
	# The stand-in as the image runs it: busybox's applets (yes, head, stty...) before the host's.
	mkdir -p "$out/busybox"
	for a in yes head stty cat nc sleep kill; do ln -sf "$(command -v busybox)" "$out/busybox/$a"; done
	gotty_port=${TELO_BENCH_GOTTY_PORT:-16321}
	"$TELO_BENCH_GOTTY" -a 127.0.0.1 -p "$gotty_port" -w env "PATH=$out/busybox:$PATH" \
		busybox sh hack/images/telo-session-test/telo run "$app/telo.yaml" >"$out/gotty.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 50); do
		grep -q "listening" "$out/gotty.log" 2>/dev/null && break
		sleep 0.1
	done
	gotty=(--path "gotty=python3 bench/gateway/gotty_client.py ws://127.0.0.1:$gotty_port/ws")
fi

telo="$bin/kubectl-telo --kubeconfig $kubeconfig -n $ns"
echo "bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/result.txt" >&2
python3 bench/gateway/bench.py \
	--keystrokes "${TELO_BENCH_KEYSTROKES:-100}" --rounds "${TELO_BENCH_ROUNDS:-3}" \
	--warmup "${TELO_BENCH_WARMUP:-20}" \
	--flood "${TELO_BENCH_FLOOD:-20000000}" --json "$out/samples.json" \
	--path "kubectl-attach=$kubectl attach -it -n $ns $pod -c session" \
	--path "telo-direct=$telo attach bench --direct" \
	--path "telo-gateway=$telo attach bench" \
	--beside "telo-gateway=$telo attach bench --direct" \
	"${gotty[@]}" | tee -a "$out/result.txt"
echo "bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/result.txt" >&2
echo "bench: results in $out" >&2

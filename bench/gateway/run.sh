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
#                                  hack/tools/gotty from the Go module proxy; "none" leaves it out;
#                                  TELO_BENCH_OLD_BIN=dir of an older telo-gateway and kubectl-telo:
#                                  path telo-gateway-old in the same rounds as the current build's;
#                                  TELO_BENCH_STANDIN=1: the gateway-standin path(s);
#                                  TELO_BENCH_DIRECT=0 leaves telo-direct out; TELO_BENCH_CPU=1:
#                                  CPU seconds per component during each flood)
#
# Paths, each a client on its own pseudo-terminal attached to the same session TTY (the stand-in
# CLI, hack/images/README.md: its TTY echoes keystrokes, `flood N` writes N bytes):
#   kubectl-attach   kubectl attach -it POD -c session: kubectl's WebSocket client, API server
#   telo-direct      kubectl telo attach --direct: our client (pkg/kube/attach), API server
#   telo-gateway     kubectl telo attach: our client to build/bin/telo-gateway, which holds one
#                    pods/attach upstream to the API server (status.attach.url, session token)
#   telo-gateway-old TELO_BENCH_OLD_BIN's kubectl-telo through its telo-gateway, on the same port
#   gateway-standin  kubectl telo attach through telo-gateway whose API server is
#                    bench/gateway/standin.py: snapshots of the session, its Secret and its pod,
#                    and a pods/attach that echoes and floods as the stand-in CLI does (Python),
#                    with no API server, kubelet or container runtime behind it: the gateway's
#                    and the client's own ceiling (gateway-standin-old with TELO_BENCH_OLD_BIN)
#   gotty            gotty -w running the same stand-in on a local
#                    pseudo-terminal (busybox applets first on PATH, as in the image), driven by
#                    bench/gateway/gotty_client.py over gotty's WebSocket protocol; no API server,
#                    kubelet or container runtime on its path
# telo-gateway vs telo-direct is the gateway's own cost (same client); vs kubectl-attach what a
# user sees. Every TTY path is timed with exactly one other stream attached to the TTY: an idle
# direct attach beside it (bench.py --beside). Before each attach the gateway on the bench's
# port is restarted with the binaries and API server of the path, or stopped for a path that does
# not use it (bench.py --before gw-switch.sh), so no upstream lingers from the path before. The
# bench starts its own telo-operator (watching only its namespace, gatewayUrl set) and
# telo-gateway, and removes them and the namespace on exit. It loads the cluster: run it on a
# cluster nobody else is testing on.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/gateway/lib.sh
hack/cluster/up.sh >/dev/null
bench_init gateway 16320
bench_namespace
switch="bench/gateway/gw-switch.sh $out $gw_port"
trap '$switch off; bench_cleanup' EXIT
$switch "$bin" "$kubeconfig"
bench_start_operator
bench_sessions bench
pod=$($kubectl get ts bench -n "$ns" -o jsonpath='{.status.podName}')
url=$($kubectl get ts bench -n "$ns" -o jsonpath='{.status.attach.url}')
[ -n "$url" ] || { echo "bench: the session publishes no status.attach.url" >&2; exit 1; }
echo "bench: session $ns/bench, pod $pod, gateway $url" >&2

telo="$bin/kubectl-telo --kubeconfig $kubeconfig -n $ns"
direct="$telo attach bench --direct"
paths=(--path "kubectl-attach=$kubectl attach -it -n $ns $pod -c session"
	--before "kubectl-attach=$switch off" --beside "kubectl-attach=$direct")
if [ "${TELO_BENCH_DIRECT:-1}" != 0 ]; then
	paths+=(--path "telo-direct=$direct" --before "telo-direct=$switch off"
		--beside "telo-direct=$direct")
fi
paths+=(--path "telo-gateway=$telo attach bench" --before "telo-gateway=$switch $bin $kubeconfig"
	--beside "telo-gateway=$direct" --compare telo-gateway/kubectl-attach)
old=${TELO_BENCH_OLD_BIN:-}
if [ -n "$old" ]; then
	paths+=(--path "telo-gateway-old=$old/kubectl-telo --kubeconfig $kubeconfig -n $ns attach bench"
		--before "telo-gateway-old=$switch $old $kubeconfig" --beside "telo-gateway-old=$direct"
		--compare telo-gateway/telo-gateway-old --compare telo-gateway-old/kubectl-attach)
fi

if [ "${TELO_BENCH_STANDIN:-0}" != 0 ]; then
	# The stand-in API server, with the objects the gateway reads as the real cluster has them.
	secret=$(bench_attach_secret bench)
	gets=()
	for p in "/apis/telo.run/v1alpha1/namespaces/$ns/telosessions/bench" \
		"/api/v1/namespaces/$ns/secrets/$secret" "/api/v1/namespaces/$ns/pods/$pod"; do
		f="$out/standin-$(basename "$p").json"
		$kubectl get --raw "$p" >"$f"
		gets+=(--get "$p=$f")
	done
	bench_standin "$out" "${TELO_BENCH_STANDIN_PORT:-16322}" "${gets[@]}"
	# The stand-in outruns any terminal: a replay ring larger than a flood, so that the client
	# gets every byte (with the default 1 MiB it would be sent a gap marker instead).
	ring="--ring-bytes $((2 * ${TELO_BENCH_FLOOD:-20000000} + (1 << 20)))"
	paths+=(--path "gateway-standin=$telo attach bench"
		--before "gateway-standin=$switch $bin $out/standin.kubeconfig $ring"
		--compare gateway-standin/telo-gateway)
	if [ -n "$old" ]; then
		paths+=(--path "gateway-standin-old=$old/kubectl-telo --kubeconfig $kubeconfig -n $ns attach bench"
			--before "gateway-standin-old=$switch $old $out/standin.kubeconfig $ring"
			--compare gateway-standin/gateway-standin-old)
	fi
fi

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
	paths+=(--path "gotty=python3 bench/gateway/gotty_client.py ws://127.0.0.1:$gotty_port/ws"
		--before "gotty=$switch off")
fi
cpu=()
[ "${TELO_BENCH_CPU:-0}" != 0 ] && cpu=(--cpu)

echo "bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/result.txt" >&2
python3 bench/gateway/bench.py \
	--keystrokes "${TELO_BENCH_KEYSTROKES:-100}" --rounds "${TELO_BENCH_ROUNDS:-3}" \
	--warmup "${TELO_BENCH_WARMUP:-20}" \
	--flood "${TELO_BENCH_FLOOD:-20000000}" --json "$out/samples.json" \
	"${paths[@]}" "${cpu[@]}" | tee -a "$out/result.txt"
echo "bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/result.txt" >&2
echo "bench: results in $out" >&2

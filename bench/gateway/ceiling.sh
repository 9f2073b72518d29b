#!/usr/bin/env bash
# The gateway's own throughput ceiling, no cluster: telo-gateway whose API server is
# bench/gateway/standin.py (a session, its attach Secret and pod as JSON, and a pods/attach that
# floods as the stand-in CLI does), driven by ceiling_client.py (a raw WebSocket client on
# loopback, no terminal). What is left on the path is the gateway, Python's TLS on the upstream
# side and Python on the client side.
#
#   bench/gateway/ceiling.sh BIN_DIR...    (TELO_BENCH_ROUNDS=5 rounds, each BIN_DIR's gateway
#                                           in turn; TELO_BENCH_FLOODS=3 floods of
#                                           TELO_BENCH_FLOOD=20000000 bytes per round)
#
# Prints per flood: bytes, MB/s and the gateway's CPU seconds per 100 MB; at the end per BIN_DIR
# the median MB/s and CPU, and the per-round ratio of each BIN_DIR's median MB/s to the first's.
# The gateway runs with a replay ring larger than a flood, so that nothing is dropped for a
# client that reads slower than the stand-in writes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
[ $# -ge 1 ] || { echo "usage: $0 BIN_DIR..." >&2; exit 2; }
rounds=${TELO_BENCH_ROUNDS:-5} floods=${TELO_BENCH_FLOODS:-3} bytes=${TELO_BENCH_FLOOD:-20000000}
out=$(mktemp -d "${TMPDIR:-/tmp}/telo-ceiling-XXXXXX")
sport=${TELO_BENCH_STANDIN_PORT:-16332} gport=${TELO_BENCH_GATEWAY_PORT:-16331}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

token=ceiling-$$
cat >"$out/ts.json" <<EOF
{"apiVersion":"telo.run/v1alpha1","kind":"TeloSession","metadata":{"name":"bench","namespace":"ceiling","uid":"u-$$"},
 "status":{"phase":"Running","podName":"pod","podIP":"127.0.0.2","attach":{"secretName":"attach"}}}
EOF
printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"attach"},"data":{"token":"%s"}}\n' \
	"$(printf %s "$token" | base64)" >"$out/secret.json"
echo '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod"},"status":{"phase":"Running"}}' >"$out/pod.json"
source bench/gateway/lib.sh
bench_standin "$out" "$sport" \
	--get "/apis/telo.run/v1alpha1/namespaces/ceiling/telosessions/bench=$out/ts.json" \
	--get "/api/v1/namespaces/ceiling/secrets/attach=$out/secret.json" \
	--get "/api/v1/namespaces/ceiling/pods/pod=$out/pod.json"

echo "ceiling: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
	for b in "$@"; do
		"$b/telo-gateway" --kubeconfig "$out/standin.kubeconfig" --bind-address "127.0.0.1:$gport" \
			--ring-bytes $((2 * bytes + (1 << 20))) >>"$out/gateway.log" 2>&1 &
		gw=$!
		for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$gport/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
		python3 bench/gateway/ceiling_client.py --port "$gport" --token "$token" --pid "$gw" \
			--path /v1/namespaces/ceiling/telosessions/bench/attach --floods "$floods" --bytes "$bytes" |
			sed "s|^|round $r $b |" | tee -a "$out/result.txt"
		kill "$gw"
		wait "$gw" 2>/dev/null || true
	done
done
echo "ceiling: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/result.txt" "$@" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
bins = sys.argv[2:]
by = {}
for r in rows:  # round R BIN bytes N MB/s X gateway_cpu_s_per_100MB Y
    by.setdefault((r[2], int(r[1])), []).append((float(r[6]), float(r[8])))
rounds = sorted({k[1] for k in by})
for b in bins:
    mbs = [x[0] for k, v in by.items() if k[0] == b for x in v]
    cpu = [x[1] for k, v in by.items() if k[0] == b for x in v]
    line = "%s: MB/s median %.1f (%.1f-%.1f), gateway CPU s per 100 MB median %.3f" % (
        b, statistics.median(mbs), min(mbs), max(mbs), statistics.median(cpu))
    if b != bins[0]:
        ratios = sorted(statistics.median(x[0] for x in by[(b, r)]) /
                        statistics.median(x[0] for x in by[(bins[0], r)]) for r in rounds)
        line += "; MB/s over %s per round: median x%.2f, min x%.2f, max x%.2f" % (
            bins[0], statistics.median(ratios), ratios[0], ratios[-1])
    print(line)
EOF

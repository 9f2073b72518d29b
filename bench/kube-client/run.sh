#!/usr/bin/env bash
# Creates 2,000 ConfigMaps as fast as possible with our client (`telo-kube
# bench-create`, one HTTP/2 connection, all requests in flight at once) and with client-go (go/,
# QPS limiting disabled, one goroutine per object), on the same running cluster, REPEATS times
# each, alternating which goes first. Prints each run, the median wall time of each and the ratio.
#
#   bench/kube-client/run.sh                 5 repeats of 2,000 (hack/cluster/up.sh first)
#   COUNT=500 REPEATS=3 bench/kube-client/run.sh
#
# Each run gets a fresh namespace, deleted (and waited for) before the next run so the previous
# run's garbage does not load the API server during the next.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
count=${COUNT:-2000}
repeats=${REPEATS:-5}
kubeconfig=${KUBECONFIG_FILE:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/cluster/kubeconfig}
kubectl="$("$root/hack/build-tools.sh" --print-dir k8s)/kubectl"
build="$root/build-bench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -f "$kubeconfig" ] || { echo "bench: no kubeconfig at $kubeconfig (run hack/cluster/up.sh)" >&2; exit 1; }

# Both sides optimised: our binary as make build builds it (-O2), the Go driver as go build does.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTELO_TESTS=OFF >/dev/null
ninja -C "$build" telo-kube >/dev/null
ours="$build/bin/telo-kube"
(cd "$root/bench/kube-client/go" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -o "$work/client-go" .)
theirs="$work/client-go"

run_one() { # client index -> prints seconds
	local client=$1 i=$2 ns out
	ns="bench-$client-$i-$RANDOM"
	"$kubectl" --kubeconfig "$kubeconfig" create namespace "$ns" >/dev/null
	if [ "$client" = ours ]; then
		out=$("$ours" --kubeconfig "$kubeconfig" bench-create -n "$ns" --count "$count")
	else
		out=$("$theirs" -kubeconfig "$kubeconfig" -n "$ns" -count "$count")
	fi
	"$kubectl" --kubeconfig "$kubeconfig" delete namespace "$ns" --wait=true --timeout=300s >/dev/null
	echo "run $i $client: $out" >&2
	python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["ok"]==d["count"], d; print(d["seconds"])' "$out"
}

for i in $(seq 1 "$repeats"); do
	if [ $((i % 2)) -eq 1 ]; then order="ours client-go"; else order="client-go ours"; fi
	for client in $order; do
		run_one "$client" "$i" >>"$work/$client.txt"
	done
done

python3 - "$work/ours.txt" "$work/client-go.txt" "$count" <<'PY'
import statistics, sys
ours = [float(x) for x in open(sys.argv[1])]
go = [float(x) for x in open(sys.argv[2])]
mo, mg = statistics.median(ours), statistics.median(go)
print("creates per run: %s, runs: %d each" % (sys.argv[3], len(ours)))
print("telo-kube (C, libcurl HTTP/2):     median %.3f s  runs %s" % (mo, " ".join("%.3f" % x for x in ours)))
print("client-go (Go, QPS unlimited):     median %.3f s  runs %s" % (mg, " ".join("%.3f" % x for x in go)))
print("ratio ours/client-go: %.2f  (below 1: ours is faster)" % (mo / mg))
PY

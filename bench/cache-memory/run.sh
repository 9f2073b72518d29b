#!/usr/bin/env bash
# Cache memory: the RSS of our informer caching N session-shaped pods (telo-informer with the
# session reconciler's pod projection), beside a second kube-controller-manager running only its
# job controller, which caches the same pods, on the same cluster in the same run.
#
#   bench/cache-memory/run.sh [N]      (default 10000; TELO_BENCH_OUT: where cache-memory.json goes)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
count=${1:-10000}
cd "$root"
hack/cluster/up.sh >/dev/null
source hack/cluster/lib.sh
venv=$(hack/install-deps.sh --venv)
ns=bench-cache-$$
kcm_port=${TELO_BENCH_KCM_PORT:-16300}
informer="$root/build/bin/telo-informer"
[ -x "$informer" ] || { echo "bench: build first (make build)" >&2; exit 1; }

rss_kib() { ps -o rss= -p "$1" | tr -d ' '; }
# Waits until a process's RSS stops growing (< 1% over 3 s), then prints it.
settled_rss() {
	local pid=$1 last=0 now
	for _ in $(seq 1 60); do
		sleep 3
		now=$(rss_kib "$pid")
		if [ "$last" -gt 0 ] && [ $((now - last)) -lt $((last / 100 + 1)) ]; then
			echo "$now"
			return
		fi
		last=$now
	done
	echo "$now"
}
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	kubectl_cmd delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The informer's RSS with nothing to cache, to subtract.
kubectl_cmd create namespace "$ns" >/dev/null
keep=(--keep metadata.labels --keep metadata.creationTimestamp --keep status.phase
	--keep status.reason --keep status.message --keep status.podIP --keep status.startTime
	--keep 'status.conditions[].type' --keep 'status.conditions[].status'
	--keep 'status.initContainerStatuses[].name' --keep 'status.initContainerStatuses[].state'
	--keep 'status.containerStatuses[].name' --keep 'status.containerStatuses[].state'
	--keep 'status.containerStatuses[].lastState')
"$informer" --kubeconfig "$kubeconfig" -n "$ns" -l app.kubernetes.io/managed-by=telo-operator \
	--quiet "${keep[@]}" pods >/tmp/bench-informer-empty.out 2>&1 &
empty_pid=$!
pids+=("$empty_pid")
sleep 2
empty_rss=$(rss_kib "$empty_pid")
kill "$empty_pid"

echo "bench: creating $count pods in $ns on the kwok nodes ..." >&2
start=$SECONDS
"$venv/bin/python" bench/cache-memory/pods.py "$kubeconfig" "$ns" "$count"
until [ "$(kubectl_cmd get pods -n "$ns" --field-selector=status.phase=Running -o name | wc -l)" -ge "$count" ]; do
	sleep 2
done
echo "bench: $count pods Running after $((SECONDS - start))s" >&2

"$informer" --kubeconfig "$kubeconfig" -n "$ns" -l app.kubernetes.io/managed-by=telo-operator \
	--quiet "${keep[@]}" pods >/tmp/bench-informer.out 2>&1 &
inf_pid=$!
pids+=("$inf_pid")
until grep -q '^SYNCED' /tmp/bench-informer.out; do sleep 0.5; done
inf_rss=$(settled_rss "$inf_pid")
kill -USR1 "$inf_pid"
sleep 0.5
store_bytes=$(grep '^STATS' /tmp/bench-informer.out | tail -1 | sed 's/.* bytes=\([0-9]*\).*/\1/')

kc="$cluster_dir/kube-controller-manager.kubeconfig"
"$k8s_bin/kube-controller-manager" --kubeconfig="$kc" --authentication-kubeconfig="$kc" \
	--authorization-kubeconfig="$kc" --bind-address=127.0.0.1 --secure-port="$kcm_port" \
	--leader-elect=false --controllers=job-controller --use-service-account-credentials=false \
	>/tmp/bench-kcm.log 2>&1 &
kcm_pid=$!
pids+=("$kcm_pid")
until curl -fsSk "https://127.0.0.1:$kcm_port/healthz" >/dev/null 2>&1; do sleep 0.5; done
kcm_rss=$(settled_rss "$kcm_pid")

per_pod=$(( (inf_rss - empty_rss) * 1024 / count ))
printf '\n%-44s %12s\n' "what" "value"
printf '%-44s %12s\n' "pods cached" "$count"
printf '%-44s %10s KiB\n' "telo-informer RSS, empty cache" "$empty_rss"
printf '%-44s %10s KiB\n' "telo-informer RSS, $count pods" "$inf_rss"
printf '%-44s %10s B\n' "telo-informer RSS per pod" "$per_pod"
printf '%-44s %10s B\n' "store's own estimate per pod" "$((store_bytes / count))"
printf '%-44s %10s KiB\n' "kube-controller-manager (job only) RSS" "$kcm_rss"
printf '%-44s %12s\n' "ratio kcm / telo-informer" "$(awk -v a="$kcm_rss" -v b="$inf_rss" 'BEGIN{printf "%.1fx", a/b}')"

# The figures as JSON, for bench/report/run.sh (TELO_BENCH_OUT: the results directory).
out=${TELO_BENCH_OUT:-${TMPDIR:-/tmp}/telo-bench-cache-memory-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
printf '{"count": %d, "empty_rss_kib": %d, "informer_rss_kib": %d, "store_bytes": %d, "kcm_rss_kib": %d, "date": "%s"}\n' \
	"$count" "$empty_rss" "$inf_rss" "${store_bytes:-0}" "$kcm_rss" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	>"$out/cache-memory.json"
echo "bench: results in $out/cache-memory.json" >&2

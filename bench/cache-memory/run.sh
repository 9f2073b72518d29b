#!/usr/bin/env bash
# Cache memory: the RSS of our informer caching N session-shaped pods (telo-informer with the
# session reconciler's pod projection), beside a second kube-controller-manager running only its
# job controller, which caches the same pods, on the same cluster in the same run.
#
#   bench/cache-memory/run.sh [N]      (default 10000)
#
# The N pods are created once; each of TELO_BENCH_REPEATS (3) repeats then starts a fresh
# informer on an empty namespace, a fresh one on the N pods and a fresh job-only KCM, and reads
# their RSS once it has settled, so the figures come with their spread. Results (cache-memory.json,
# its schema telo-bench-cache-memory/2: every repeat, the medians, the commit and the load average
# before and after; the informers' and the KCM's output) go to TELO_BENCH_OUT, default
# bench/cache-memory/results/<UTC time>-<commit> in the tree, as bench/scale's do.
# Uses the shared cluster: run it under the e2e lock (flock /tmp/telo-e2e.lock ...).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
count=${1:-10000}
repeats=${TELO_BENCH_REPEATS:-3}
cd "$root"
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
out=${TELO_BENCH_OUT:-$root/bench/cache-memory/results/$(date -u +%Y%m%dT%H%M%SZ)-$commit}
mkdir -p "$out"
hack/cluster/up.sh >/dev/null
source hack/cluster/lib.sh
venv=$(hack/install-deps.sh --venv)
ns=bench-cache-$$
ns_empty=bench-cache-empty-$$
kcm_port=${TELO_BENCH_KCM_PORT:-16300}
informer="$root/build/bin/telo-informer"
[ -x "$informer" ] || { echo "bench: build first (make build)" >&2; exit 1; }
echo "bench: results in $out; $(nproc) cores, load $load_start" >&2

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
stop() { # pid: SIGTERM and wait, so the next repeat starts without it
	kill "$1" 2>/dev/null || true
	for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null || true
}
pids=()
cleanup() {
	local rc=$?
	set +eu
	for p in "${pids[@]}"; do stop "$p"; done
	# The pods go at once (grace 0, one collection delete) rather than one by one by the namespace
	# controller, and the bench waits for its namespaces: the next user of the shared cluster
	# starts on a quiet one.
	"$venv/bin/python" bench/cache-memory/pods.py "$kubeconfig" "$ns" delete >/dev/null 2>&1
	kubectl_cmd delete namespace "$ns" "$ns_empty" --wait=false >/dev/null 2>&1
	kubectl_cmd wait --for=delete namespace/"$ns" namespace/"$ns_empty" --timeout=300s >/dev/null 2>&1
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

keep=(--keep metadata.labels --keep metadata.creationTimestamp --keep status.phase
	--keep status.reason --keep status.message --keep status.podIP --keep status.startTime
	--keep 'status.conditions[].type' --keep 'status.conditions[].status'
	--keep 'status.initContainerStatuses[].name' --keep 'status.initContainerStatuses[].state'
	--keep 'status.containerStatuses[].name' --keep 'status.containerStatuses[].state'
	--keep 'status.containerStatuses[].lastState')
start_informer() { # namespace output
	: >"$2" # before the wait for SYNCED reads it (the child's redirection may come later)
	"$informer" --kubeconfig "$kubeconfig" -n "$1" -l app.kubernetes.io/managed-by=telo-operator \
		--quiet "${keep[@]}" pods >"$2" 2>&1 &
	pids+=("$!")
}

kubectl_cmd create namespace "$ns" >/dev/null
kubectl_cmd create namespace "$ns_empty" >/dev/null
echo "bench: creating $count pods in $ns on the kwok nodes ..." >&2
start=$SECONDS
"$venv/bin/python" bench/cache-memory/pods.py "$kubeconfig" "$ns" "$count"
until [ "$(kubectl_cmd get pods -n "$ns" --field-selector=status.phase=Running -o name | wc -l)" -ge "$count" ]; do
	sleep 2
done
echo "bench: $count pods Running after $((SECONDS - start))s" >&2

kc="$cluster_dir/kube-controller-manager.kubeconfig"
reps=()
for r in $(seq 1 "$repeats"); do
	# The informer's RSS with nothing to cache, to subtract.
	start_informer "$ns_empty" "$out/informer-empty-$r.out"
	empty_pid=$!
	sleep 2
	empty_rss=$(rss_kib "$empty_pid")
	stop "$empty_pid"

	start_informer "$ns" "$out/informer-$r.out"
	inf_pid=$!
	until grep -q '^SYNCED' "$out/informer-$r.out"; do
		kill -0 "$inf_pid" || { echo "bench: telo-informer died: $out/informer-$r.out" >&2; exit 1; }
		sleep 0.5
	done
	inf_rss=$(settled_rss "$inf_pid")
	kill -USR1 "$inf_pid"
	sleep 0.5
	store_bytes=$(grep '^STATS' "$out/informer-$r.out" | tail -1 | sed 's/.* bytes=\([0-9]*\).*/\1/')
	stop "$inf_pid"

	"$k8s_bin/kube-controller-manager" --kubeconfig="$kc" --authentication-kubeconfig="$kc" \
		--authorization-kubeconfig="$kc" --bind-address=127.0.0.1 --secure-port="$kcm_port" \
		--leader-elect=false --controllers=job-controller --use-service-account-credentials=false \
		>"$out/kcm-$r.log" 2>&1 &
	kcm_pid=$!
	pids+=("$kcm_pid")
	until curl -fsSk "https://127.0.0.1:$kcm_port/healthz" >/dev/null 2>&1; do
		kill -0 "$kcm_pid" || { echo "bench: kube-controller-manager died: $out/kcm-$r.log" >&2; exit 1; }
		sleep 0.5
	done
	kcm_rss=$(settled_rss "$kcm_pid")
	stop "$kcm_pid"
	echo "bench: repeat $r: informer empty $empty_rss KiB, $count pods $inf_rss KiB, store ${store_bytes:-0} B; KCM $kcm_rss KiB; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	reps+=("{\"empty_rss_kib\": $empty_rss, \"informer_rss_kib\": $inf_rss, \"store_bytes\": ${store_bytes:-0}, \"kcm_rss_kib\": $kcm_rss, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}")
done

# The figures as JSON, for bench/report/run.sh; the medians at the top level (the format before
# repeats, which the report still reads).
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
reps_json=$(IFS=,; echo "${reps[*]}")
"$venv/bin/python" - "$out/cache-memory.json" <<EOF
import json, statistics, sys
reps = [$reps_json]
med = {k: statistics.median(r[k] for r in reps)
       for k in ("empty_rss_kib", "informer_rss_kib", "store_bytes", "kcm_rss_kib")}
res = dict({"schema": "telo-bench-cache-memory/2", "count": $count, "commit": "$commit",
            "started": "$started", "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "nproc": $(nproc),
            "load_start": "$load_start", "load_end": "$load_end", "repeats": reps}, **med)
json.dump(res, open(sys.argv[1], "w"), indent=1)
n = res["count"]
rows = [("telo-informer RSS, empty cache (KiB)", lambda r: r["empty_rss_kib"]),
        ("telo-informer RSS, %d pods (KiB)" % n, lambda r: r["informer_rss_kib"]),
        ("telo-informer RSS growth per pod (B)",
         lambda r: (r["informer_rss_kib"] - r["empty_rss_kib"]) * 1024 // n),
        ("store's own estimate per pod (B)", lambda r: r["store_bytes"] // n),
        ("kube-controller-manager (job only) RSS (KiB)", lambda r: r["kcm_rss_kib"]),
        ("kube-controller-manager RSS per pod (B)", lambda r: r["kcm_rss_kib"] * 1024 // n),
        ("ratio kcm / telo-informer RSS", lambda r: round(r["kcm_rss_kib"] / r["informer_rss_kib"], 1))]
print("\n%d pods, telo-operator $commit, $(nproc) cores, load $load_start at the start, "
      "$load_end at the end; %d repeats" % (n, len(reps)))
print("%-46s %10s  %s" % ("what", "median", "min-max"))
for label, f in rows:
    v = [f(r) for r in reps]
    print("%-46s %10s  %s-%s" % (label, statistics.median(v), min(v), max(v)))
EOF
echo "bench: results in $out/cache-memory.json" >&2

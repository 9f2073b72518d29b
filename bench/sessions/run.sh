#!/usr/bin/env bash
# Sessions vs Jobs vs raw pods: N objects created at once on the local cluster, timed with
# watches until every pod exists and until every pod (and every TeloSession) is Running.
#
#   bench/sessions/run.sh [N...]          (default: 100 1000)
#
# Paths, each in its own fresh namespace, interleaved per repeat so drift hits them all alike:
#   sessions            N TeloSessions (bundle ConfigMap, no ports) reconciled by build/bin/
#                       telo-operator run --set namespaces=<ns> (its defaults: 16 workers)
#   raw                 N pods of the session pod's exact shape, created by the client itself
#   jobs-kcm-20/30      N one-pod Jobs of that pod template, run by a kube-controller-manager
#                       with only its job controller, at the client defaults --kube-api-qps=20
#                       --kube-api-burst=30
#   jobs-kcm-1000/2000  the same at --kube-api-qps=1000 --kube-api-burst=2000
# Every path's pods go through kube-scheduler onto two kwok nodes this script adds for itself
# (tainted, so no one else's pods land there, and big enough for N pods of 500m/512Mi).
#
# The cluster's kube-controller-manager is stopped for the whole run (its job controller would
# race ours) and replaced by one with the same flags and every controller but the job
# controller, so namespace deletion, GC etc. keep working for everyone; a job-controller-only
# KCM of the bench runs throughout, so other people's Jobs still run. On exit, even a failed
# one, the bench's processes, namespaces and nodes are removed and hack/cluster/up.sh restarts
# the cluster's KCM.
#
# Environment: TELO_BENCH_REPEATS (3), TELO_BENCH_PATHS ("sessions raw jobs-kcm-20/30
# jobs-kcm-1000/2000"; also sessions-wN: the operator with `workers: N`, and raw-apply: the raw
# pods by server-side apply), TELO_BENCH_OUT (results directory; default
# bench/sessions/results/<UTC time>-<commit>, in the tree, as bench/scale's; run.json there gives
# the commit, the times and the load average before and after), TELO_BENCH_CLIENT_THREADS (32),
# TELO_BENCH_PPROF (seconds of kube-apiserver CPU profile from the first create, per run),
# TELO_BENCH_TIMEOUT (600 s per run), TELO_BENCH_ALLOW_FOREIGN=1 to run beside a telo-operator
# that watches every namespace (it would reconcile the bench's sessions too: figures invalid).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000)
repeats=${TELO_BENCH_REPEATS:-3}
read -r -a paths <<<"${TELO_BENCH_PATHS:-sessions raw jobs-kcm-20/30 jobs-kcm-1000/2000}"
operator="$root/build/bin/telo-operator"
[ -x "$operator" ] || { echo "bench: build first (make build)" >&2; exit 1; }

hack/cluster/up.sh >/dev/null
source hack/cluster/lib.sh
# shellcheck source=../lib.sh
source bench/lib.sh
crd_install
venv=$(hack/install-deps.sh --venv)
py() { "$venv/bin/python" "$root/bench/sessions/bench.py" "$@"; }

id=bs$$
t_start=$SECONDS
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
out=${TELO_BENCH_OUT:-$root/bench/sessions/results/$(date -u +%Y%m%dT%H%M%SZ)-$commit}
mkdir -p "$out"
# Each run's JSON names the build it timed (bench.py reads these).
export TELO_BENCH_COMMIT=$commit
bench_kcm_port=${TELO_BENCH_KCM_PORT:-16310}
sub_kcm_port=${TELO_BENCH_SUB_KCM_PORT:-16311}
op_port=${TELO_BENCH_OPERATOR_PORT:-16312}
log() { echo "bench: [$((SECONDS - t_start))s] $*" >&2; }
log "results in $out; $(nproc) cores, load $load_start"

# Another operator of this cluster watching every namespace would reconcile our sessions as well
# (one with the kubeconfig of another cluster on the machine, bench/scale's say, would not).
foreign=$(for p in $(pgrep -x telo-operator || true); do
	tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | grep -q -- ' run ' || continue
	if tr '\0' ' ' </proc/"$p"/cmdline | grep -q -- '--kubeconfig'; then
		tr '\0' ' ' </proc/"$p"/cmdline | grep -qE -- "--kubeconfig[ =]$kubeconfig( |$)" || continue
	fi
	tr '\0' ' ' </proc/"$p"/cmdline | grep -q -- 'namespaces=' || echo "pid $p: $(tr '\0' ' ' </proc/"$p"/cmdline)"
done)
if [ -n "$foreign" ]; then
	log "a telo-operator watches every namespace and would reconcile the bench's sessions too:"
	echo "$foreign" >&2
	[ "${TELO_BENCH_ALLOW_FOREIGN:-0}" = 1 ] || { log "stop it (or TELO_BENCH_ALLOW_FOREIGN=1)"; exit 1; }
	log "going on anyway (TELO_BENCH_ALLOW_FOREIGN=1): the sessions figures are not clean"
fi

# --- clean-up, armed before anything is created -------------------------------------------
main_kcm_stopped=0
completed=0
bench_kcm_pid="" sub_kcm_pid="" op_pid=""
namespaces=()
nodes=("$id-node-0" "$id-node-1")
cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	log "cleaning up"
	stop_pid "$op_pid"
	for ns in "${namespaces[@]}"; do
		kubectl_cmd get ns "$ns" >/dev/null 2>&1 || continue
		py clear "$kubeconfig" "$ns" 2>/dev/null
		kubectl_cmd delete ns "$ns" --wait=false >/dev/null 2>&1
	done
	# The job controller must outlive the Jobs' namespaces (their pods' finalizers).
	for ns in "${namespaces[@]}"; do
		kubectl_cmd wait --for=delete ns/"$ns" --timeout=120s >/dev/null 2>&1
	done
	kubectl_cmd delete node "${nodes[@]}" --ignore-not-found >/dev/null 2>&1
	stop_pid "$bench_kcm_pid"
	if [ "$main_kcm_stopped" = 1 ]; then
		hack/cluster/up.sh >/dev/null || log "could not restart the cluster's kube-controller-manager: run hack/cluster/up.sh"
	fi
	stop_pid "$sub_kcm_pid"
	# What the whole bench run was: the figures come with the build and the load they had.
	printf '{"schema": "telo-bench-sessions-run/1", "commit": "%s", "started": "%s", "ended": "%s", "nproc": %d, "load_start": "%s", "load_end": "%s", "sizes": "%s", "repeats": %d, "paths": "%s", "completed": %s, "rc": %d}\n' \
		"$commit" "$started" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$load_start" \
		"$(cut -d' ' -f1-3 /proc/loadavg)" "${sizes[*]}" "$repeats" "${paths[*]}" \
		"$([ "$completed" = 1 ] && echo true || echo false)" "$rc" >"$out/run.json"
	log "results in $out (load $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) now)"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the bench's nodes ------------------------------------------------------------------------
bench_nodes_up "$id" 2000 4Ti 5000 "$out/nodes.yaml" "${nodes[@]}"

# --- kube-controller-managers -----------------------------------------------------------------
kc="$cluster_dir/kube-controller-manager.kubeconfig"
swap_main_kcm() { bench_swap_main_kcm "$out/kcm-substitute.log"; }
# Job controllers other than ours: the cluster's KCM restarted by whoever ran hack/cluster/up.sh
# meanwhile (e2e runs do: stopped again), or someone's own KCM (reported).
check_job_controllers() { # label
	local p
	if [ -n "$(component_pid kube-controller-manager)" ]; then
		log "someone restarted the cluster's KCM during the bench; stopping it again"
		echo "$1: the cluster's KCM was restarted by someone, stopped again" >>"$out/interference.txt"
		swap_main_kcm
	fi
	for p in $(pgrep -f kube-controller-manager || true); do
		[ "$p" = "$bench_kcm_pid" ] || [ "$p" = "$sub_kcm_pid" ] && continue
		[ "$(basename "$(tr '\0' '\n' </proc/"$p"/cmdline 2>/dev/null | head -1)")" = kube-controller-manager ] || continue
		tr '\0' ' ' </proc/"$p"/cmdline | grep -q -- '-job-controller' && continue
		# Only KCMs of this cluster (its kubeconfig), not those of another cluster on the machine.
		tr '\0' ' ' </proc/"$p"/cmdline | grep -qF -- "--kubeconfig=$cluster_dir/" || continue
		log "another kube-controller-manager with a job controller runs (pid $p): it acts on our Jobs too"
		echo "$1: another KCM with a job controller ran (pid $p)" >>"$out/interference.txt"
	done
}
start_bench_kcm() { # qps burst
	stop_pid "$bench_kcm_pid"
	"$k8s_bin/kube-controller-manager" --kubeconfig="$kc" --authentication-kubeconfig="$kc" \
		--authorization-kubeconfig="$kc" --bind-address=127.0.0.1 --secure-port="$bench_kcm_port" \
		--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
		--leader-elect=false --controllers=job-controller --use-service-account-credentials=true \
		--kube-api-qps="$1" --kube-api-burst="$2" >"$out/kcm-job-$1-$2.log" 2>&1 &
	bench_kcm_pid=$!
	bench_kcm_qps="$1/$2"
	until curl -fsSk "https://127.0.0.1:$bench_kcm_port/healthz" >/dev/null 2>&1; do
		kill -0 "$bench_kcm_pid" || { log "bench KCM died: $out/kcm-job-$1-$2.log"; exit 1; }
		sleep 0.3
	done
}
swap_main_kcm
start_bench_kcm 20 30

# --- one run ----------------------------------------------------------------------------------
cpu_pids() {
	local s="" c p
	for c in kube-apiserver etcd kube-scheduler kwok; do
		p=$(component_pid "$c")
		[ -n "$p" ] && s+="$c=$p,"
	done
	echo "${s}$1"
}
bundle_cm() { # ns: the sample's bundle ConfigMap, in every path's namespace alike
	sed -n '/^apiVersion: v1$/,/^---$/p' crds/samples/hello.yaml | grep -v '^---$' |
		kubectl_cmd apply -n "$1" -f - >/dev/null
}
new_ns() { # name
	namespaces+=("$1")
	kubectl_cmd create namespace "$1" >/dev/null
	bundle_cm "$1"
}
finish_ns() { # ns: delete and wait, so the next run starts on a quiet cluster
	py clear "$kubeconfig" "$1" 2>/dev/null || true
	kubectl_cmd delete ns "$1" --wait=false >/dev/null
	kubectl_cmd wait --for=delete ns/"$1" --timeout=300s >/dev/null ||
		log "namespace $1 still there after 300 s"
}
start_operator() { # ns [workers]
	cat >"$out/operator-$1.yaml" <<EOF
namespaces: [$1]
${2:+workers: $2}
nodeSelector: {bench.telo.run/node: "$id"}
tolerations: [{key: bench.telo.run/node, operator: Equal, value: "$id", effect: NoSchedule}]
# The bench times throughput; a slow run should be measured to its end, not failed at 120 s.
startDeadlineSeconds: 900
# kwok's pod IPs are fake and would route off this machine: probe only the real node's pods.
reachability: {podCIDRs: [${TELO_REAL_POD_CIDR:-10.85.0.0/24}]}
EOF
	"$operator" run --kubeconfig "$kubeconfig" --config "$out/operator-$1.yaml" \
		--http-bind-address "127.0.0.1:$op_port" --log-level warn >"$out/operator-$1.log" 2>&1 &
	op_pid=$!
	until curl -fs "http://127.0.0.1:$op_port/readyz" >/dev/null 2>&1; do
		kill -0 "$op_pid" || { log "telo-operator died: $out/operator-$1.log"; exit 1; }
		sleep 0.2
	done
}

# The session pod's shape, from one session the operator makes: every path creates that pod.
warm=$id-warm
new_ns "$warm"
start_operator "$warm"
TELO_BENCH_LABEL=warm-up py run "$kubeconfig" sessions "$warm" 1 - "$out/warm-up.json"
py template "$kubeconfig" "$warm" telo-run-b-00000 "$out/pod-template.json"
stop_pid "$op_pid"
op_pid=""
finish_ns "$warm"

run_path() { # path n repeat
	local path=$1 n=$2 r=$3 ns kind pid_extra="" res
	ns="$id-$(echo "$path" | tr -c 'a-z0-9\n' '-' | sed 's/-*$//')-$n-$r"
	res="$out/$n-$(echo "$path" | tr '/' '_')-$r.json"
	new_ns "$ns"
	case "$path" in
	sessions | sessions-w*)
		kind=sessions
		start_operator "$ns" "$(case "$path" in sessions-w*) echo "${path#sessions-w}" ;; esac)"
		pid_extra="telo-operator=$op_pid"
		;;
	raw | raw-apply) kind=$path ;;
	jobs-kcm-*)
		kind=jobs
		local want=${path#jobs-kcm-}
		[ "$bench_kcm_qps" = "$want" ] || start_bench_kcm "${want%/*}" "${want#*/}"
		check_job_controllers "$path N=$n #$r"
		pid_extra="kcm-job=$bench_kcm_pid"
		;;
	esac
	local api_pid
	api_pid=$(component_pid kube-apiserver)
	TELO_BENCH_PIDS=$(cpu_pids "$pid_extra") TELO_BENCH_LABEL=$path \
		py run "$kubeconfig" "$kind" "$ns" "$n" "$out/pod-template.json" "$res" || true
	if [ "$(component_pid kube-apiserver)" != "$api_pid" ]; then
		log "the apiserver was restarted during $path N=$n #$r (someone else's test): run not counted"
		echo "$path N=$n #$r: the apiserver was restarted during the run (not counted)" >>"$out/interference.txt"
		"$venv/bin/python" -c 'import json,sys; r=json.load(open(sys.argv[1])); r["error"]="the apiserver restarted during the run"; json.dump(r,open(sys.argv[1],"w"),indent=1)' "$res" || true
	fi
	[ "$kind" != jobs ] || check_job_controllers "$path N=$n #$r (found after the run)"
	case "$kind" in
	sessions)
		curl -fs "http://127.0.0.1:$op_port/metrics" >"$out/$n-$path-$r.metrics" || true
		stop_pid "$op_pid"
		op_pid=""
		;;
	jobs)
		curl -fsSk "https://127.0.0.1:$bench_kcm_port/metrics" >"$out/$n-$(echo "$path" | tr '/' '_')-$r.metrics" || true
		;;
	esac
	finish_ns "$ns"
}

start=$SECONDS
for n in "${sizes[@]}"; do
	for r in $(seq 1 "$repeats"); do
		for path in "${paths[@]}"; do
			run_path "$path" "$n" "$r"
		done
	done
done
log "all runs took $((SECONDS - start)) s"
completed=1

echo
echo "telo-operator $commit, kube 1.34, kwok; $(nproc) cores; medians of $repeats; load $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
py summary "$out"/[0-9]*.json | tee "$out/summary.txt"
[ ! -s "$out/interference.txt" ] || { echo; echo "interference:"; cat "$out/interference.txt"; }

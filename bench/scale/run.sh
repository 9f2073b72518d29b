#!/usr/bin/env bash
# Cost as work grows: TeloSessions against one-pod Jobs run by a job-only kube-controller-manager
# (1000/2000 QPS), at N = 100, 1,000, 3,000 and 10,000, on kwok nodes added for the run.
#
#   TELO_CLUSTER_DIR=/tmp/scale-cluster TELO_*_PORT=... bench/scale/run.sh [N...]
#
# Per run (one path at one N), each in its own fresh namespace, with a fresh controller process:
#   - time to all Running (bench/sessions/bench.py run: watches from before the first create);
#   - the controller's RSS (peak = VmHWM, and at the end) and CPU seconds, and the apiserver's and
#     etcd's RSS at the end;
#   - API requests per object from the audit log (every client, and the controller's own);
#   - sessions only: the operator restarted on the N Running sessions: exec to /readyz 200
#     (caches synced) beside a plain `kubectl get telosessions,pods -A -o json` of the same
#     objects, the first reconcile of every session, the restart's writes (audit log: 0 expected),
#     then a resync of the N unchanged sessions (--resync-period set short for the new process):
#     its CPU seconds (/proc/PID/stat) and writes;
#   - the load average before and after.
# One JSON per run in $TELO_SCALE_OUT (default bench/scale/results/<UTC time>-<commit>), schema in
# bench/scale/README.md; summary.txt is the table of medians.
#
# It stops the cluster's kube-controller-manager for the run (as bench/sessions does, so only our
# job controller acts on Jobs), so it refuses to run on the default (shared) cluster directory:
# start a cluster of your own (README.md in this directory) and point TELO_CLUSTER_DIR and the
# TELO_*_PORT variables at it, or set TELO_SCALE_ALLOW_SHARED=1.
#
# Environment: TELO_SCALE_REPEATS (3: runs per path for N below TELO_SCALE_SINGLE_FROM),
# TELO_SCALE_SINGLE_FROM (3000: from this N on one run per path), TELO_SCALE_PATHS ("sessions
# jobs-kcm-1000/2000"; also sessions-b: the operator binary TELO_SCALE_OPERATOR_B, for a before/after
# in the same run; raw: the same pods created by the bench itself, no controller: the floor), TELO_SCALE_RESTART (1; 0 skips the restart and resync phases), TELO_SCALE_RESYNC (seconds; default 30 + N/100), TELO_SCALE_OPERATOR
# (binary; default build/bin/telo-operator, copied into the results first so a rebuild during the
# run changes nothing), TELO_SCALE_OUT, TELO_BENCH_KCM_PORT/TELO_BENCH_SUB_KCM_PORT/
# TELO_BENCH_OPERATOR_PORT (26310-26312).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000 3000 10000)
repeats=${TELO_SCALE_REPEATS:-3}
single_from=${TELO_SCALE_SINGLE_FROM:-3000}
read -r -a paths <<<"${TELO_SCALE_PATHS:-sessions jobs-kcm-1000/2000}"
if [ -z "${TELO_CLUSTER_DIR:-}" ] && [ "${TELO_SCALE_ALLOW_SHARED:-0}" != 1 ]; then
	echo "bench/scale: set TELO_CLUSTER_DIR (and every TELO_*_PORT) to a cluster of your own" >&2
	exit 1
fi
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
out=${TELO_SCALE_OUT:-$root/bench/scale/results/$(date -u +%Y%m%dT%H%M%SZ)-$commit}
mkdir -p "$out/bin" "$out/logs"
cp "${TELO_SCALE_OPERATOR:-$root/build/bin/telo-operator}" "$out/bin/telo-operator"
operator="$out/bin/telo-operator"
if [ -n "${TELO_SCALE_OPERATOR_B:-}" ]; then
	cp "$TELO_SCALE_OPERATOR_B" "$out/bin/telo-operator-b"
fi

hack/cluster/up.sh >/dev/null
source hack/cluster/lib.sh
# shellcheck source=../lib.sh
source bench/lib.sh
crd_install
venv=$(hack/install-deps.sh --venv)
py() { "$venv/bin/python" "$root/bench/sessions/bench.py" "$@"; }
sc() { "$venv/bin/python" "$root/bench/scale/scale.py" "$@"; }

id=sc$$
t_start=$SECONDS
bench_kcm_port=${TELO_BENCH_KCM_PORT:-26310}
sub_kcm_port=${TELO_BENCH_SUB_KCM_PORT:-26311}
op_port=${TELO_BENCH_OPERATOR_PORT:-26312}
log() { echo "scale: [$((SECONDS - t_start))s] $*" >&2; }
log "results in $out; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# Another operator of this cluster watching every namespace would reconcile our sessions too.
for p in $(pgrep -x telo-operator || true); do
	c=$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null) || continue
	[[ $c == *"$kubeconfig"* ]] || continue
	log "a telo-operator of this cluster runs (pid $p) and may reconcile the bench's sessions: stop it"
	exit 1
done

# --- clean-up, armed before anything is created ---------------------------------------------
main_kcm_stopped=0
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
	for ns in "${namespaces[@]}"; do
		kubectl_cmd wait --for=delete ns/"$ns" --timeout=300s >/dev/null 2>&1
	done
	kubectl_cmd delete node "${nodes[@]}" --ignore-not-found >/dev/null 2>&1
	stop_pid "$bench_kcm_pid"
	if [ "$main_kcm_stopped" = 1 ]; then
		hack/cluster/up.sh >/dev/null || log "could not restart the cluster's kube-controller-manager: run hack/cluster/up.sh"
	fi
	stop_pid "$sub_kcm_pid"
	log "results in $out"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the bench's nodes: 2 x 6,000 pods of 500m/512Mi -----------------------------------------
bench_nodes_up "$id" 4000 8Ti 6000 "$out/nodes.yaml" "${nodes[@]}"

# --- kube-controller-managers (as bench/sessions/run.sh) -------------------------------------
kc="$cluster_dir/kube-controller-manager.kubeconfig"
swap_main_kcm() { bench_swap_main_kcm "$out/logs/kcm-substitute.log"; }
start_bench_kcm() { # qps burst: a fresh job-only KCM, so its RSS peak is this run's
	stop_pid "$bench_kcm_pid"
	"$k8s_bin/kube-controller-manager" --kubeconfig="$kc" --authentication-kubeconfig="$kc" \
		--authorization-kubeconfig="$kc" --bind-address=127.0.0.1 --secure-port="$bench_kcm_port" \
		--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
		--leader-elect=false --controllers=job-controller --use-service-account-credentials=true \
		--kube-api-qps="$1" --kube-api-burst="$2" >>"$out/logs/kcm-job-$1-$2.log" 2>&1 &
	bench_kcm_pid=$!
	until curl -fsSk "https://127.0.0.1:$bench_kcm_port/healthz" >/dev/null 2>&1; do
		kill -0 "$bench_kcm_pid" || { log "bench KCM died: $out/logs/kcm-job-$1-$2.log"; exit 1; }
		sleep 0.3
	done
}
swap_main_kcm
start_bench_kcm 1000 2000

# --- one run -----------------------------------------------------------------------------------
cpu_pids() {
	local s="" c p
	for c in kube-apiserver etcd kube-scheduler kwok; do
		p=$(component_pid "$c")
		[ -n "$p" ] && s+="$c=$p,"
	done
	echo "${s}$1"
}
bundle_cm() {
	sed -n '/^apiVersion: v1$/,/^---$/p' crds/samples/hello.yaml | grep -v '^---$' |
		kubectl_cmd apply -n "$1" -f - >/dev/null
}
new_ns() {
	namespaces+=("$1")
	kubectl_cmd create namespace "$1" >/dev/null
	bundle_cm "$1"
}
finish_ns() {
	py clear "$kubeconfig" "$1" 2>/dev/null || true
	kubectl_cmd delete ns "$1" --wait=false >/dev/null
	kubectl_cmd wait --for=delete ns/"$1" --timeout=600s >/dev/null ||
		log "namespace $1 still there after 600 s"
}
operator_cmd() { # ns [binary]: the operator's command line (as an array in op_cmd)
	cat >"$out/operator-$1.yaml" <<EOC
namespaces: [$1]
nodeSelector: {bench.telo.run/node: "$id"}
tolerations: [{key: bench.telo.run/node, operator: Equal, value: "$id", effect: NoSchedule}]
startDeadlineSeconds: 1800
reachability: {podCIDRs: [${TELO_REAL_POD_CIDR:-10.85.0.0/24}]}
EOC
	op_cmd=("${2:-$operator}" run --kubeconfig "$kubeconfig" --config "$out/operator-$1.yaml"
		--http-bind-address "127.0.0.1:$op_port" --log-level warn)
}
start_operator() { # ns [binary]
	operator_cmd "$1" "${2:-}"
	"${op_cmd[@]}" >>"$out/logs/operator-$1.log" 2>&1 &
	op_pid=$!
	until curl -fs "http://127.0.0.1:$op_port/readyz" >/dev/null 2>&1; do
		kill -0 "$op_pid" || { log "telo-operator died: $out/logs/operator-$1.log"; exit 1; }
		sleep 0.2
	done
}

# The session pod's shape, from one session the operator makes: the Jobs' pod template.
warm=$id-warm
new_ns "$warm"
start_operator "$warm"
TELO_BENCH_LABEL=warm-up py run "$kubeconfig" sessions "$warm" 1 - "$out/warm-up.json"
py template "$kubeconfig" "$warm" telo-run-b-00000 "$out/pod-template.json"
stop_pid "$op_pid"
op_pid=""
finish_ns "$warm"

run_path() { # path n repeat
	local path=$1 n=$2 r=$3 ns kind ctl bin="" agent ctl_pid res t_from t_to load0 load1 restart_json=""
	ns="$id-$(echo "$path" | tr -c 'a-z0-9\n' '-' | sed 's/-*$//')-$n-$r"
	res="$out/$n-$(echo "$path" | tr '/' '_')-$r.json"
	new_ns "$ns"
	case "$path" in
	sessions | sessions-b)
		kind=sessions ctl=telo-operator agent=telo-operator bin=$operator
		[ "$path" = sessions ] || bin=$out/bin/telo-operator-b
		start_operator "$ns" "$bin"
		ctl_pid=$op_pid
		;;
	jobs-kcm-*)
		kind=jobs ctl=kcm-job agent=kube-controller-manager
		local want=${path#jobs-kcm-}
		start_bench_kcm "${want%/*}" "${want#*/}"
		ctl_pid=$bench_kcm_pid
		;;
	raw)
		# The floor every path pays: the bench's own pod creates, no controller.
		kind=raw ctl="" agent=none
		;;
	*) log "unknown path $path"; exit 1 ;;
	esac
	local api_pid
	api_pid=$(component_pid kube-apiserver)
	load0=$(sc loadavg)
	t_from=$(sc now)
	TELO_BENCH_TIMEOUT=$((600 + n / 5)) TELO_BENCH_PIDS=$(cpu_pids "${ctl:+$ctl=$ctl_pid}") TELO_BENCH_LABEL=$path \
		py run "$kubeconfig" "$kind" "$ns" "$n" "$out/pod-template.json" "$res" || true
	load1=$(sc loadavg)
	# Status writes and Events that follow Running by a moment belong to the burst.
	sleep 5
	t_to=$(sc now)
	local pids="${ctl:+controller=$ctl_pid,}kube-apiserver=$api_pid,etcd=$(component_pid etcd)"
	local procs_json
	procs_json=$(sc proc ${pids//,/ })
	if [ "$kind" = sessions ]; then
		curl -fs "http://127.0.0.1:$op_port/metrics" >"$out/logs/$n-$path-$r.metrics" || true
	elif [ "$kind" = jobs ]; then
		curl -fsSk "https://127.0.0.1:$bench_kcm_port/metrics" >"$out/logs/$n-$(echo "$path" | tr '/' '_')-$r.metrics" || true
	fi
	# The controller's figures are taken now, before the restart phase (finalize reads the
	# process again: it is still the one that ran the burst, for Jobs the KCM still runs; for
	# sessions the operator is stopped below, so take them from procs_json).
	echo "$procs_json" >"$out/logs/$n-$(echo "$path" | tr '/' '_')-$r.procs.json"
	if [ "$kind" = sessions ]; then
		stop_pid "$op_pid"
		op_pid=""
	fi
	if [ "$kind" = sessions ] && [ "${TELO_SCALE_RESTART:-1}" = 1 ]; then
		operator_cmd "$ns" "$bin"
		restart_json="$out/logs/$n-$path-$r.restart.json"
		sc restart "$kubeconfig" "$ns" "$n" "$restart_json" "$log_dir" "$k8s_bin/kubectl" "$op_port" \
			"${TELO_SCALE_RESYNC:-$((30 + n / 100))}" "$out/logs/operator-$ns.log" -- "${op_cmd[@]}" || true
	fi
	sc finalize "$res" log_dir="$log_dir" ns="$ns" n="$n" from="$t_from" to="$t_to" agent="$agent" \
		controller="${ctl:-none}" procs="$out/logs/$n-$(echo "$path" | tr '/' '_')-$r.procs.json" \
		load_before="$load0" load_after="$load1" restart="$restart_json" commit="$commit" binary="$bin"
	if [ "$(component_pid kube-apiserver)" != "$api_pid" ]; then
		log "the apiserver was restarted during $path N=$n #$r: run not counted"
		sc augment "$res" error '"the apiserver restarted during the run"'
	fi
	# A job controller left running would make the Jobs' pods again while the namespace is
	# emptied (minutes at 3,000); the next Jobs run starts a fresh one anyway.
	if [ "$kind" = jobs ]; then
		stop_pid "$bench_kcm_pid"
		bench_kcm_pid=""
	fi
	finish_ns "$ns"
}

start=$SECONDS
for n in "${sizes[@]}"; do
	reps=$repeats
	[ "$n" -lt "$single_from" ] || reps=1
	for r in $(seq 1 "$reps"); do
		for path in "${paths[@]}"; do
			run_path "$path" "$n" "$r"
		done
	done
done
log "all runs took $((SECONDS - start)) s"
sc summary "$out"/[0-9]*.json | tee "$out/summary.txt"

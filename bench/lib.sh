# shellcheck shell=bash
# What bench/sessions, bench/scale and bench/limits share (sourced by their run.sh).

# stop_pid PID: SIGTERM, then SIGKILL after 10 s. Nothing for an empty or dead PID.
stop_pid() {
	local p=$1
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
	kill -TERM "$p" 2>/dev/null || true
	for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$p" 2>/dev/null || true
}

# bench_swap_main_kcm LOG: only one job controller may act on a bench's Jobs, so the cluster's
# kube-controller-manager is replaced by the same command with every controller but the job
# controller, on port $sub_kcm_port, its output in LOG; waits until it is healthy. Sets
# main_kcm_stopped=1 (the caller's cleanup restarts the cluster's with hack/cluster/up.sh) and
# sub_kcm_pid (the caller stops it). Nothing when the cluster has no KCM running; a substitute
# already running is kept.
bench_swap_main_kcm() {
	local logfile=$1 pid args=()
	pid=$(component_pid kube-controller-manager)
	[ -n "$pid" ] || return 0
	while IFS= read -r -d '' a; do
		case "$a" in
		--controllers=*) a="--controllers=*,-job-controller" ;;
		--secure-port=*) a="--secure-port=$sub_kcm_port" ;;
		esac
		args+=("$a")
	done </proc/"$pid"/cmdline
	hack/cluster/down.sh kube-controller-manager >/dev/null
	main_kcm_stopped=1
	if [ -z "$sub_kcm_pid" ]; then
		"${args[@]}" >"$logfile" 2>&1 &
		sub_kcm_pid=$!
		until curl -fsSk "https://127.0.0.1:$sub_kcm_port/healthz" >/dev/null 2>&1; do
			kill -0 "$sub_kcm_pid" || { log "substitute KCM died: $logfile"; exit 1; }
			sleep 0.3
		done
	fi
}

# The kwok nodes a bench adds for its own pods: tainted bench.telo.run/node=ID, so only the
# bench's pods, which tolerate it, land there, and labelled with it for their nodeSelector.

# bench_nodes_up ID CPU MEMORY PODS FILE NAME...: writes the Node objects to FILE, applies them
# (kubectl_cmd, hack/cluster/lib.sh) and waits until kwok has them Ready.
bench_nodes_up() {
	local id=$1 file=$5
	bench_nodes_yaml "$1" "$2" "$3" "$4" "${@:6}" >"$file"
	kubectl_cmd apply -f "$file" >/dev/null
	kubectl_cmd wait --for=condition=Ready node -l bench.telo.run/node="$id" --timeout=60s >/dev/null
}

# bench_nodes_yaml ID CPU MEMORY PODS NAME...: the Node objects, as YAML on stdout.
bench_nodes_yaml() {
	local id=$1 cpu=$2 memory=$3 pods=$4 n
	shift 4
	for n in "$@"; do
		cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok-bench, bench.telo.run/node: "$id", kubernetes.io/hostname: "$n",
           kubernetes.io/os: linux, kubernetes.io/arch: amd64}
spec:
  taints: [{key: bench.telo.run/node, value: "$id", effect: NoSchedule}]
status:
  allocatable: {cpu: "$cpu", memory: $memory, pods: "$pods", ephemeral-storage: 100Ti}
  capacity: {cpu: "$cpu", memory: $memory, pods: "$pods", ephemeral-storage: 100Ti}
  nodeInfo: {architecture: amd64, kubeletVersion: fake, kubeProxyVersion: fake, operatingSystem: linux}
---
NODE
	done
}

#!/usr/bin/env bash
# Stops the local cluster's processes started by up.sh, by PID, in reverse start order, and throws
# away etcd's data so the next up.sh starts a fresh cluster. With the real node (real-node.sh): the
# kubelet stops first, every pod sandbox and container is removed through the CRI while containerd
# still runs, then containerd and the registry stop and every mount, network interface and cgroup
# the node made is removed (its image caches are kept).
#
#   hack/cluster/down.sh                 stop everything
#   hack/cluster/down.sh kube-apiserver  stop only the named components (up.sh restarts them,
#                                        keeping the cluster's data)
#   hack/cluster/down.sh --real-node     stop and clean up only the real node
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=real-node.sh
source "$(dirname "$0")/real-node.sh"

stop() { # name
	local pid i
	pid=$(component_pid "$1")
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		# Graceful first: the apiserver and etcd finish in-flight requests within a few seconds.
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "down: $1 (pid $pid) ignored SIGTERM for 10s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		echo "down: stopped $1 (pid $pid)" >&2
	fi
	rm -f "$pid_dir/$1.pid"
	# Its queueing rules go with it: left alone they would drop the pods' new connections.
	[ "$1" != netpol ] || netpol_cleanup
}

if [ "${1:-}" = "--real-node" ]; then
	# Only the real node: its pods and containers, containerd, the registry and everything they
	# left on the machine; the control plane and kwok keep running, the Node object is deleted.
	stop kubelet
	real_node_drain
	stop containerd
	stop registry
	stop netpol
	real_node_cleanup
	if [ -n "$(component_pid kube-apiserver)" ]; then
		kubectl_cmd delete node "$real_node_name" --ignore-not-found --wait=false >/dev/null 2>&1 || true
	fi
	exit 0
fi

if [ $# -gt 0 ]; then
	for name in "$@"; do
		case " ${components[*]} " in
		*" $name "*) stop "$name" ;;
		*) echo "down: unknown component '$name' (known: ${components[*]})" >&2; exit 2 ;;
		esac
	done
	exit 0
fi

# What `make run` (hack/run.sh) started beside the cluster, one operator and gateway per demo
# namespace: they would otherwise go on retrying a cluster that is gone and hold their ports.
for pidfile in "$pid_dir"/telo-operator*.pid "$pid_dir"/telo-gateway*.pid; do
	[ -f "$pidfile" ] || continue
	pid=$(cat "$pidfile")
	# The pid file may outlive its process (a reboot): only a process of ours is stopped.
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmdline=""
	case "$cmdline" in
	*telo-operator* | *telo-gateway*)
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		echo "down: stopped $(basename "$pidfile" .pid) of make run (pid $pid)" >&2
		;;
	esac
	rm -f "$pidfile"
done
for ((i = ${#components[@]} - 1; i >= 0; i--)); do
	if [ "${components[$i]}" = containerd ]; then
		real_node_drain
	fi
	stop "${components[$i]}"
done
if [ -d "$real_dir" ]; then
	real_node_cleanup
fi
rm -rf "$etcd_data"
rm -f "$cluster_dir/minimal" # up.sh's note of what a minimal start left out

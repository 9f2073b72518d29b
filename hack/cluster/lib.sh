# Shared settings of the local cluster scripts (sourced by up.sh, down.sh and status.sh).
# Every setting can be overridden from the environment; the defaults keep clear of the ports a
# real cluster on this machine would use.

cluster_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster_dir="${TELO_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/cluster}"
kubeconfig="$cluster_dir/kubeconfig"
pid_dir="$cluster_dir/pids"
log_dir="$cluster_dir/logs"
pki="$cluster_dir/pki"
# etcd's data lives on tmpfs when there is one: it is thrown away by down.sh anyway, and fsync on a
# slow disk is what makes a local apiserver crawl.
if [ -z "${TELO_ETCD_DATA_DIR:-}" ]; then
	if [ -d /dev/shm ] && [ -w /dev/shm ]; then
		etcd_data="/dev/shm/telo-operator-etcd-$(id -u)-$(echo "$cluster_dir" | cksum | cut -d' ' -f1)"
	else
		etcd_data="$cluster_dir/etcd-data"
	fi
else
	etcd_data="$TELO_ETCD_DATA_DIR"
fi

etcd_port="${TELO_ETCD_PORT:-23790}"
etcd_peer_port="${TELO_ETCD_PEER_PORT:-23800}"
apiserver_port="${TELO_APISERVER_PORT:-16443}"
kcm_port="${TELO_KCM_PORT:-16257}"
scheduler_port="${TELO_SCHEDULER_PORT:-16259}"
kwok_port="${TELO_KWOK_PORT:-16247}"
kwok_nodes="${TELO_KWOK_NODES:-2}"

k8s_bin=$("$cluster_root/hack/build-tools.sh" --print-dir k8s)
etcd_bin=$("$cluster_root/hack/build-tools.sh" --print-dir etcd)
kwok_bin=$("$cluster_root/hack/build-tools.sh" --print-dir kwok)

# Components in start order; down.sh stops them in reverse.
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

component_pid() { # name -> pid of a live process we started, or nothing
	local f="$pid_dir/$1.pid" pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	# The pid file may be stale after a reboot: check the process is still the binary we started.
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$1"; then
		echo "$pid"
	fi
}

kubectl_cmd() {
	"$k8s_bin/kubectl" --kubeconfig="$kubeconfig" "$@"
}

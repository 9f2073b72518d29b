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

# --- the real node (TELO_REAL_NODE=1): containerd + runc + CNI bridge + kubelet -----------------
# Everything it owns lives under $real_dir; see hack/cluster/README.md ("The real node").
real_dir="$cluster_dir/real-node"
real_node_name="${TELO_REAL_NODE_NAME:-telo-real-0}"
real_node_ip="${TELO_REAL_NODE_IP:-10.88.0.1}"     # a /32 on the bridge below
real_pod_cidr="${TELO_REAL_POD_CIDR:-10.85.0.0/24}" # kwok's pods use 10.244.0.0/16
real_bridge_if="${TELO_REAL_BRIDGE:-telo-br0}"
real_cgroup="${TELO_REAL_CGROUP:-telo-real}" # cgroup (v1, every hierarchy) holding the pods
kubelet_port="${TELO_KUBELET_PORT:-10250}"
kubelet_healthz_port="${TELO_KUBELET_HEALTHZ_PORT:-10248}"
registry_port="${TELO_REGISTRY_PORT:-5000}"
containerd_sock="$real_dir/containerd/containerd.sock"
# The NetworkPolicy enforcer (telo-netpol, real-node.sh): its iptables chain, nftables table and
# nfqueue number are per bridge, so two real nodes on one machine keep their verdicts apart. The
# queue number is derived from the bridge's name unless TELO_NETPOL_QUEUE sets it.
netpol_chain="TELO-NETPOL-$real_bridge_if"
netpol_table="telo-netpol-$real_bridge_if"
netpol_queue="${TELO_NETPOL_QUEUE:-$(($(printf '%s' "$real_bridge_if" | cksum | cut -d' ' -f1) % 60000 + 1000))}"
# netpol first, so down.sh stops it last: policies hold until the pods are gone.
real_components=(netpol registry containerd kubelet)
# The real node's components are managed when asked for, or when a previous up.sh started them
# (so that down.sh and status.sh see them without the variable).
real_node_enabled() {
	[ "${TELO_REAL_NODE:-0}" = 1 ] || [ -f "$pid_dir/containerd.pid" ] || [ -f "$pid_dir/kubelet.pid" ] ||
		[ -f "$pid_dir/registry.pid" ] || [ -f "$pid_dir/netpol.pid" ]
}
if real_node_enabled; then
	components+=("${real_components[@]}")
fi

# --- the build registry (TELO_BUILD_REGISTRY=1): a registry with htpasswd Basic auth ---------
# For image builds on a kwok-only cluster: the operator's tag check and the e2e tests' pushes.
# Credentials (user telo, a random password made once) are in $build_registry_dir/dockerconfig.json.
build_registry_dir="$cluster_dir/build-registry"
# Beside a real node (whose plain registry owns TELO_REGISTRY_PORT) it takes the next port.
if real_node_enabled; then
	build_registry_port="${TELO_BUILD_REGISTRY_PORT:-$((registry_port + 1))}"
else
	build_registry_port="${TELO_BUILD_REGISTRY_PORT:-$registry_port}"
fi
# registry_config ROOT PORT [HTPASSWD]: docker-registry's config on stdout, storing in ROOT,
# listening on 127.0.0.1:PORT, with htpasswd Basic auth when HTPASSWD names the file.
registry_config() {
	cat <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $1
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$2
EOF
	if [ -n "${3:-}" ]; then
		printf 'auth:\n  htpasswd:\n    realm: telo-registry\n    path: %s\n' "$3"
	fi
}
build_registry_enabled() {
	[ "${TELO_BUILD_REGISTRY:-0}" = 1 ] || [ -f "$pid_dir/build-registry.pid" ]
}
if build_registry_enabled; then
	components+=(build-registry)
fi
crictl_cmd() {
	"$("$cluster_root/hack/build-tools.sh" --print-dir cri-tools)/crictl" \
		--config /dev/null --runtime-endpoint "unix://$containerd_sock" --image-endpoint "unix://$containerd_sock" \
		--timeout 20s "$@"
}
ctr_cmd() {
	ctr --address "$containerd_sock" --namespace k8s.io "$@"
}

component_pid() { # name -> pid of a live process we started, or nothing
	local f="$pid_dir/$1.pid" pid cmdline
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	# The pid file may be stale after a reboot: check the process is still the binary we started.
	# Not `tr | grep -q`: under pipefail, grep -q quitting early could fail tr with SIGPIPE, and
	# a live component (long command lines: the kubelet's, telo-netpol's) read as one that died.
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
	[[ $cmdline == *"$1"* ]] && echo "$pid"
	return 0
}

kubectl_cmd() {
	"$k8s_bin/kubectl" --kubeconfig="$kubeconfig" "$@"
}

# Installs or updates the TeloSession CRD and waits until the API serves it. Polled: `kubectl
# wait --for=condition=Established` exits at once while a new CRD's conditions are still null.
crd_install() {
	kubectl_cmd apply --server-side --force-conflicts -f "$cluster_root/crds/telo.run_telosessions.yaml" >/dev/null ||
		return 1
	local established _
	for _ in $(seq 120); do
		established=$(kubectl_cmd get crd/telosessions.telo.run \
			-o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)
		[ "$established" = True ] && return 0
		sleep 0.5
	done
	echo "the TeloSession CRD was not Established within 60 s" >&2
	return 1
}

# The real node (TELO_REAL_NODE=1): a local docker-registry, containerd (CRI, overlayfs, runc),
# the CNI bridge and a kubelet registered as $real_node_name. Sourced by up.sh (which defines
# fail, wait_for and launch) and down.sh. Everything lives under $real_dir, except what the
# kernel keeps globally: the bridge $real_bridge_if (plus one veth per pod), a cgroup named
# $real_cgroup in every v1 hierarchy, the kernel tunables the kubelet sets (saved and restored),
# and /var/log/containers symlinks. down.sh removes all of it.
# shellcheck shell=bash

real_gateway() { # first address of the pod CIDR: the bridge's address and the pods' gateway
	local net=${real_pod_cidr%/*}
	echo "${net%.*}.$((${net##*.} + 1))"
}

# Kernel tunables the kubelet rewrites at start-up (setupKernelTunables): saved before its first
# start, restored by down.sh.
real_sysctls=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# --- up ---------------------------------------------------------------------------------------
# Why this machine cannot run the real node (one line: the component it concerns, a space, the
# reason), or nothing when it can. hack/run.sh asks it to choose between the real node and kwok.
real_node_host_problem() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "kubelet the real node needs root (containerd, runc, network interfaces, cgroups)"
		return
	fi
	local missing=() b
	for b in containerd containerd-shim-runc-v2 ctr runc docker-registry umoci skopeo ip iptables; do
		command -v "$b" >/dev/null || missing+=("$b")
	done
	for b in bridge host-local loopback portmap; do
		[ -x "/usr/lib/cni/$b" ] || missing+=("/usr/lib/cni/$b")
	done
	# The images' rootfs (hack/images/build.sh): busybox-static.
	[ -x "${TELO_BUSYBOX:-/bin/busybox}" ] || missing+=("${TELO_BUSYBOX:-/bin/busybox}")
	if [ ${#missing[@]} -ne 0 ]; then
		echo "containerd missing on this machine: ${missing[*]}; run TELO_REAL_NODE=1 hack/install-deps.sh"
		return
	fi
	grep -qw overlay /proc/filesystems || echo "containerd the kernel has no overlay filesystem"
}

real_node_check_host() {
	local problem
	problem=$(real_node_host_problem)
	[ -z "$problem" ] || fail "${problem%% *}" "${problem#* }"
	if [ "${minimal:-0}" = 1 ]; then
		"$cluster_root/hack/build-tools.sh" --for-run # the kubelet; crictl only serves tests and down.sh
	else
		"$cluster_root/hack/build-tools.sh" kubelet crictl
	fi
}

ensure_real_pki() {
	local n="kubelet-$real_node_name"
	if [ ! -f "$pki/$n.crt" ]; then
		sign "$n" "/O=system:nodes/CN=system:node:$real_node_name"
	fi
	if [ ! -f "$pki/$n-serving.crt" ]; then
		sign "$n-serving" "/CN=$real_node_name" \
			"subjectAltName=IP:$real_node_ip,IP:127.0.0.1,DNS:$real_node_name
extendedKeyUsage=serverAuth"
	fi
	chmod 600 "$pki"/*.key
}

ensure_real_network() {
	local gw
	gw=$(real_gateway)
	# The pods' bridge, made here with the gateway address so that the bridge CNI plugin runs
	# with isGateway=false: with isGateway=true it would turn on net.ipv4.ip_forward, and this
	# machine must not route pod traffic anywhere else.
	if ! ip link show "$real_bridge_if" >/dev/null 2>&1; then
		ip link add "$real_bridge_if" type bridge || fail containerd "cannot create the bridge $real_bridge_if"
	fi
	ip addr replace "$gw/${real_pod_cidr#*/}" dev "$real_bridge_if"
	# The node's address: a /32 on the same bridge (this kernel has no dummy driver). It is a
	# local address of this machine, so the apiserver reaches the kubelet, and pods reach the
	# node through their gateway, without a packet leaving the machine.
	ip addr replace "$real_node_ip/32" dev "$real_bridge_if"
	ip link set "$real_bridge_if" up
	if [ "$(cat /proc/sys/net/ipv4/ip_forward)" != 0 ]; then
		echo "up: warning: net.ipv4.ip_forward is on; pods on the real node could reach other hosts" >&2
	fi
}

# The kubernetes Service for the real node's pods: there is no kube-proxy, and the apiserver
# listens on 127.0.0.1 only, so a pod (the operator's, in-cluster) could not reach it. This does
# for that one Service what kube-proxy would: its ClusterIP:443, for packets coming in from the
# pods' bridge, is DNATed to the apiserver's address. route_localnet on the bridge (and only
# there) lets the kernel route to and from 127.0.0.1 for those packets; like kube-proxy
# (CVE-2020-8558) we drop every other packet from the bridge to 127.0.0.0/8, so pods reach no
# other loopback service (etcd, the kubelet's healthz). The apiserver's certificate names the
# ClusterIP, so in-cluster clients verify it as usual.
# One chain per bridge (a name of at most 15 characters), so a second cluster's real node neither
# flushes nor DNATs to the wrong apiserver for the first one.
real_apiserver_chain="TELO-APISERVER-$real_bridge_if"
ensure_real_apiserver_route() {
	local ip
	ip=$(kubectl_cmd get service kubernetes -n default -o jsonpath='{.spec.clusterIP}') && [ -n "$ip" ] ||
		fail kubelet "cannot read the kubernetes Service's ClusterIP"
	command -v iptables >/dev/null || fail kubelet "iptables is missing; run TELO_REAL_NODE=1 hack/install-deps.sh"
	echo 1 >"/proc/sys/net/ipv4/conf/$real_bridge_if/route_localnet"
	local t
	for t in nat filter; do
		iptables -t $t -N $real_apiserver_chain 2>/dev/null || iptables -t $t -F $real_apiserver_chain
	done
	iptables -t nat -A $real_apiserver_chain -d "$ip/32" -p tcp --dport 443 \
		-j DNAT --to-destination "127.0.0.1:$apiserver_port"
	iptables -t filter -A $real_apiserver_chain -d 127.0.0.0/8 -m conntrack ! --ctstate DNAT -j DROP
	iptables -t nat -C PREROUTING -i "$real_bridge_if" -j $real_apiserver_chain 2>/dev/null ||
		iptables -t nat -A PREROUTING -i "$real_bridge_if" -j $real_apiserver_chain
	iptables -t filter -C INPUT -i "$real_bridge_if" -j $real_apiserver_chain 2>/dev/null ||
		iptables -t filter -I INPUT -i "$real_bridge_if" -j $real_apiserver_chain
}

real_apiserver_route_cleanup() {
	command -v iptables >/dev/null || return 0
	iptables -t nat -D PREROUTING -i "$real_bridge_if" -j $real_apiserver_chain 2>/dev/null || true
	iptables -t filter -D INPUT -i "$real_bridge_if" -j $real_apiserver_chain 2>/dev/null || true
	local t
	for t in nat filter; do
		iptables -t $t -F $real_apiserver_chain 2>/dev/null && iptables -t $t -X $real_apiserver_chain &&
			echo "down: removed the $t chain $real_apiserver_chain" >&2
	done
	return 0
}

# --- NetworkPolicy enforcement (telo-netpol) ---------------------------------------------------
# telo-netpol (hack/tools/kube-network-policies: our command around the controller library of
# sigs.k8s.io/kube-network-policies) judges in user space the first packet of every connection to
# or from a pod of this node against the NetworkPolicies that select either end; the kernel hands
# it those packets through nfqueue $netpol_queue and applies its verdict. Bridged pod-to-pod
# packets reach the IP hooks through br_netfilter.
# The library loads its own queueing rules as an nftables table, with the nft `queue` expression;
# this kernel is built without it (CONFIG_NFT_QUEUE unset, no modules), so that table fails to
# load (the enforcer logs "syncing nftables rules" with "no such file or directory") and the
# equivalent rules are made here with iptables' NFQUEUE target instead (nf_tables compat), in
# the chain $netpol_chain from mangle POSTROUTING, where the library hooks too:
#   - packets of processes running as root on this machine pass (the kubelet's probes; the
#     library does the same), and so do packets of established connections;
#   - every other packet from or to the pod CIDR goes to the queue. The library queues only the
#     pods some policy selects; queueing the whole CIDR gives the same verdicts (a pod no policy
#     selects is allowed), at the cost of a round trip through user space per new connection.
# No --queue-bypass: while no enforcer listens, new connections of the node's pods are dropped
# (fail closed). The chain is made only once the enforcer listens, and down.sh removes it with
# the enforcer. What it does not see, as upstream does not: a pod's packets to this machine's
# own addresses (INPUT, not POSTROUTING): the node address, the gateway and the apiserver route.
netpol_disabled_file() { echo "$real_dir/netpol.disabled"; }

# Why this host cannot enforce NetworkPolicies, or nothing.
netpol_host_problem() {
	[ -r /proc/net/netfilter/nfnetlink_queue ] || { echo "the kernel has no nfnetlink_queue"; return; }
	[ -r /proc/sys/net/bridge/bridge-nf-call-iptables ] ||
		{ echo "the kernel has no br_netfilter (bridged pod-to-pod packets bypass iptables)"; return; }
	[ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)" = 1 ] ||
		{ echo "net.bridge.bridge-nf-call-iptables is 0 (bridged pod-to-pod packets bypass iptables)"; return; }
	command -v iptables >/dev/null || { echo "iptables is missing"; return; }
	iptables -t mangle -S POSTROUTING >/dev/null 2>&1 || { echo "iptables has no mangle table here"; return; }
}

# The netlink port bound to nfqueue $netpol_queue (usually the binding process's pid), or nothing.
netpol_queue_owner() {
	awk -v q="$netpol_queue" '$1 == q { print $2 }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null
}

netpol_listening() {
	[ -n "$(component_pid netpol)" ] && [ -n "$(netpol_queue_owner)" ]
}

ensure_netpol_identity() {
	local n="netpol-$real_node_name"
	# Least privilege: it reads pods, namespaces and NetworkPolicies, and may record events.
	[ -f "$pki/$n.crt" ] || sign "$n" "/O=telo:netpol/CN=telo-netpol:$real_node_name"
	chmod 600 "$pki"/*.key
	write_kubeconfig "$real_dir/netpol.kubeconfig" "$n"
	kubectl_cmd apply -f - >/dev/null 2>>"$log_dir/kubectl.log" <<EOF ||
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: telo:netpol
rules:
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: telo:netpol
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "telo:netpol"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "telo:netpol"}
EOF
		fail netpol "cannot create its ClusterRole and binding (see $log_dir/kubectl.log)"
}

ensure_netpol_rules() {
	local q=(--queue-num "$netpol_queue")
	iptables -t mangle -N "$netpol_chain" 2>/dev/null || iptables -t mangle -F "$netpol_chain"
	iptables -t mangle -A "$netpol_chain" -m owner --uid-owner 0 -j RETURN
	iptables -t mangle -A "$netpol_chain" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
	iptables -t mangle -A "$netpol_chain" -s "$real_pod_cidr" -j NFQUEUE "${q[@]}"
	iptables -t mangle -A "$netpol_chain" -d "$real_pod_cidr" -j NFQUEUE "${q[@]}"
	iptables -t mangle -C POSTROUTING -j "$netpol_chain" 2>/dev/null ||
		iptables -t mangle -A POSTROUTING -j "$netpol_chain"
}

netpol_cleanup() {
	if command -v iptables >/dev/null; then
		iptables -t mangle -D POSTROUTING -j "$netpol_chain" 2>/dev/null || true
		iptables -t mangle -F "$netpol_chain" 2>/dev/null && iptables -t mangle -X "$netpol_chain" &&
			echo "down: removed the mangle chain $netpol_chain" >&2
	fi
	# The library's own nftables table, on a kernel that has the nft queue expression, when the
	# enforcer was killed before it could remove it.
	local bin
	bin="$("$cluster_root/hack/build-tools.sh" --print-dir netpol)/telo-netpol"
	[ ! -x "$bin" ] || "$bin" --cleanup --table-name "$netpol_table" 2>/dev/null || true
	return 0
}

start_netpol() {
	local problem owner
	problem=$(netpol_host_problem)
	if [ -n "$problem" ]; then
		echo "up: WARNING: NetworkPolicies will NOT be enforced on $real_node_name: $problem" >&2
		echo "$problem" >"$(netpol_disabled_file)"
		return 0
	fi
	rm -f "$(netpol_disabled_file)"
	"$cluster_root/hack/build-tools.sh" netpol
	if [ -z "$(component_pid netpol)" ]; then
		owner=$(netpol_queue_owner)
		[ -z "$owner" ] || fail netpol "nfqueue $netpol_queue is already bound by process $owner ($(tr '\0' ' ' \
			</proc/"$owner"/cmdline 2>/dev/null | cut -c1-160)): another real node's enforcer? Set TELO_NETPOL_QUEUE to a free number"
	fi
	ensure_netpol_identity
	launch netpol "$("$cluster_root/hack/build-tools.sh" --print-dir netpol)/telo-netpol" \
		--kubeconfig="$real_dir/netpol.kubeconfig" --node-name="$real_node_name" \
		--table-name="$netpol_table" --nfqueue-id="$netpol_queue" --v=1 || true
	# Listening: the queue is bound (nobody had it before the launch) while the process lives.
	wait_for netpol 60 netpol_listening
	ensure_netpol_rules
}

ensure_real_cgroups() {
	# The pods' cgroup root (kubelet cgroupRoot): one directory per v1 hierarchy, so down.sh can
	# find and remove everything the pods left.
	local h
	for h in /sys/fs/cgroup/*/; do
		h=${h%/}
		[ -f "$h/cgroup.procs" ] && [ ! -f "$h/cgroup.controllers" ] || continue # v1 only
		mkdir -p "$h/$real_cgroup"
		if [ -f "$h/cpuset.cpus" ]; then
			[ -n "$(cat "$h/$real_cgroup/cpuset.cpus")" ] || cat "$h/cpuset.cpus" >"$h/$real_cgroup/cpuset.cpus"
			[ -n "$(cat "$h/$real_cgroup/cpuset.mems")" ] || cat "$h/cpuset.mems" >"$h/$real_cgroup/cpuset.mems"
		fi
	done
}

save_real_sysctls() {
	local f="$real_dir/sysctl.saved" k
	[ -f "$f" ] && return 0
	for k in "${real_sysctls[@]}"; do
		echo "$k $(cat "/proc/sys/$k")"
	done >"$f.tmp"
	mv "$f.tmp" "$f"
}

# The runc containerd runs: runc itself, or, when root lacks CAP_SYS_RESOURCE and so cannot set
# the negative oom_score_adj the kubelet asks for, runc-oom-clamp (see that script).
real_runc() {
	local eff
	eff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
	if [ $((0x$eff >> 24 & 1)) -eq 1 ]; then
		command -v runc
	else
		echo "$cluster_root/hack/cluster/runc-oom-clamp"
	fi
}

# put file: writes stdin to file only when the content changed, atomically (containerd watches
# the CNI directory, and up.sh runs concurrently from test fixtures).
put() {
	local tmp="$1.tmp.$$"
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
	else
		mv -f "$tmp" "$1"
	fi
}

write_real_config() {
	local c="$real_dir/containerd" gw pause_ref
	gw=$(real_gateway)
	pause_ref=$("$cluster_root/hack/images/build.sh" --ref pause)
	mkdir -p "$c/root" "$c/state" "$c/runc" "$c/certs.d/127.0.0.1:$registry_port" "$real_dir/cni/net.d" \
		"$real_dir/cni/ipam" "$real_dir/kubelet" "$real_dir/pod-logs" "$real_dir/registry"

	registry_config "$real_dir/registry" "$registry_port" | put "$real_dir/registry.yml"

	put "$c/config.toml" <<EOF
# containerd for the telo-operator real node (hack/cluster/real-node.sh). Own root, state,
# socket; no TCP listener but the CRI streaming server on 127.0.0.1 (random port).
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$containerd_sock"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_ref"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(real_runc)"
        Root = "$c/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$real_dir/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$c/certs.d"
EOF
	# The local registry is plain HTTP on loopback.
	put "$c/certs.d/127.0.0.1:$registry_port/hosts.toml" <<EOF
server = "http://127.0.0.1:$registry_port"

[host."http://127.0.0.1:$registry_port"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF

	# CNI: the network is named after the node's cgroup (telo-real by default) because libcni
	# names its result cache files after it, and down.sh removes only this node's entries there.
	# The bridge made by ensure_real_network (isGateway false, no masquerading: pod traffic
	# can reach this host and the other pods, nothing else), host-local IPAM with its state here.
	put "$real_dir/cni/net.d/10-telo-real.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$real_cgroup",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$real_bridge_if",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$real_dir/cni/ipam",
        "ranges": [[{"subnet": "$real_pod_cidr", "gateway": "$gw"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "$gw"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

	write_kubeconfig "$real_dir/kubelet.kubeconfig" "kubelet-$real_node_name"
	put "$real_dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Serving: on the node address only; the apiserver reaches it by InternalIP.
address: $real_node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz_port
tlsCertFile: $pki/kubelet-$real_node_name-serving.crt
tlsPrivateKeyFile: $pki/kubelet-$real_node_name-serving.key
authentication:
  anonymous:
    enabled: false
  x509:
    clientCAFile: $pki/ca.crt
  webhook:
    enabled: true
authorization:
  mode: Webhook
# This machine: cgroup v1 (hybrid), no systemd, no swap accounting.
cgroupDriver: cgroupfs
cgroupRoot: /$real_cgroup
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$containerd_sock
imageServiceEndpoint: unix://$containerd_sock
podLogsDir: $real_dir/pod-logs
# No static pods, no iptables chains (there is no kube-proxy), no DNS: pods get an empty
# resolv.conf rather than this machine's resolver.
makeIPTablesUtilChains: false
resolvConf: ""
clusterDomain: cluster.local
registerNode: true
registerWithTaints:
- key: telo.run/node
  value: real
  effect: NoSchedule
maxPods: 50
podPidsLimit: 4096
serializeImagePulls: false
shutdownGracePeriod: 0s
containerLogMaxSize: 10Mi
containerLogMaxFiles: 2
# A shared development machine: only evict for real exhaustion.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  nodefs.inodesFree: 2%
  imagefs.available: 2%
imageGCHighThresholdPercent: 95
imageGCLowThresholdPercent: 90
nodeStatusUpdateFrequency: 10s
EOF
}

start_registry() {
	launch registry docker-registry serve "$real_dir/registry.yml" || return 0
	wait_for registry 30 curl -fsS "http://127.0.0.1:$registry_port/v2/"
}

# containerd's CRI plugin is serving: asked through crictl when it is built, else (a minimal
# start, which does not build it) through containerd's own plugin list.
cri_ready() {
	if [ -x "$("$cluster_root/hack/build-tools.sh" --print-dir cri-tools)/crictl" ]; then
		crictl_cmd info
	else
		ctr --address "$containerd_sock" plugins ls | awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" { ok = ($NF == "ok") } END { exit !ok }'
	fi
}

start_containerd() {
	launch containerd containerd --config "$real_dir/containerd/config.toml" || return 0
	wait_for containerd 60 ctr --address "$containerd_sock" version
	wait_for containerd 60 cri_ready
}

start_kubelet() {
	launch kubelet "$k8s_bin/kubelet" --config="$real_dir/kubelet.yaml" \
		--kubeconfig="$real_dir/kubelet.kubeconfig" --root-dir="$real_dir/kubelet" \
		--cert-dir="$real_dir/kubelet/pki" --hostname-override="$real_node_name" \
		--node-ip="$real_node_ip" --node-labels="telo.run/node=real" --v=2 || return 0
	wait_for kubelet 60 curl -fsS "http://127.0.0.1:$kubelet_healthz_port/healthz"
}

real_node_up() {
	local t0=$SECONDS
	real_node_check_host
	mkdir -p "$real_dir"
	# Marks this cluster dir as the owner of the machine-wide state below (interfaces, cgroups,
	# tunables): down.sh of another cluster dir leaves it alone.
	echo "$real_bridge_if $real_cgroup" >"$real_dir/host-state"
	# The kubelet makes /var/log/containers (a fixed path) when missing: remember to remove it.
	[ -d /var/log/containers ] || [ -f "$real_dir/var-log-containers.made" ] ||
		touch "$real_dir/var-log-containers.made"
	ensure_real_pki
	write_real_config
	ensure_real_network
	ensure_real_apiserver_route
	# make run applies no NetworkPolicy (they come with the Helm chart): the enforcer serves the
	# e2e suite, whose up.sh starts it.
	[ "${minimal:-0}" = 1 ] || start_netpol
	ensure_real_cgroups
	start_registry
	start_containerd
	"$cluster_root/hack/images/build.sh" >>"$log_dir/images.log" 2>&1 || {
		tail -n 20 "$log_dir/images.log" >&2
		fail containerd "building or importing the node's images failed (hack/images/build.sh; log $log_dir/images.log)"
	}
	save_real_sysctls
	start_kubelet
	wait_for kubelet 120 kubectl_cmd wait --for=condition=Ready "node/$real_node_name" --timeout=2s
	echo "up: real node $real_node_name Ready in $((SECONDS - t0))s" >&2
}

# --- down -------------------------------------------------------------------------------------
# Stops and removes every pod sandbox and container through the CRI (so CNI DEL releases the
# addresses and veths), while containerd is still up. Run after the kubelet stopped.
real_node_drain() {
	[ -S "$containerd_sock" ] && [ -n "$(component_pid containerd)" ] || return 0
	local ids id
	# Without crictl (a minimal start does not build it) the loops below over containerd's own
	# containers remove the sandboxes too, and real_node_cleanup the veths and addresses that
	# CNI DEL would have released.
	ids=$(crictl_cmd pods -q 2>/dev/null || true)
	for id in $ids; do
		crictl_cmd stopp "$id" >/dev/null 2>&1 || echo "down: crictl stopp $id failed" >&2
		crictl_cmd rmp -f "$id" >/dev/null 2>&1 || echo "down: crictl rmp $id failed" >&2
	done
	# Containers not in a sandbox (ctr run by hand, say) and tasks left behind.
	for id in $(ctr_cmd tasks ls -q 2>/dev/null || true); do
		ctr_cmd tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		ctr_cmd tasks delete -f "$id" >/dev/null 2>&1 || true
	done
	for id in $(ctr_cmd containers ls -q 2>/dev/null || true); do
		ctr_cmd containers delete "$id" >/dev/null 2>&1 || echo "down: ctr containers delete $id failed" >&2
	done
	[ -z "$ids" ] || echo "down: removed $(echo "$ids" | wc -w) pod sandbox(es) from containerd" >&2
}

# After containerd stopped: shims, mounts, interfaces, cgroups, tunables, files outside $real_dir.
real_node_cleanup() {
	local pid p m link h k v cmdline n=0
	[ -f "$real_dir/host-state" ] || return 0
	# containerd-shim-runc-v2 processes of our containerd (they outlive it by design); matched by
	# our socket path in their command line, killed by PID.
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		# Read whole, then matched: `tr | grep -q` can lose a match to SIGPIPE under pipefail.
		cmdline=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		if [[ $cmdline =~ containerd-shim.*-address\ $containerd_sock ]]; then
			kill -KILL "$pid" 2>/dev/null && echo "down: killed leftover shim $pid" >&2
		fi
	done
	# Mounts under the node's directory, deepest first (overlay rootfs, shm, netns, secrets, and
	# the kubelet's rshared bind mount of its own root dir).
	for _ in 1 2 3; do
		m=$(awk -v d="$real_dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
		[ -n "$m" ] || break
		while IFS= read -r p; do
			umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || echo "down: cannot unmount $p" >&2
			n=$((n + 1))
		done <<<"$m"
	done
	[ $n -eq 0 ] || echo "down: unmounted $n mount(s) under $real_dir" >&2
	# Interfaces: the pods' veths still on the bridge, then the bridge.
	for link in $(ip -o link show master "$real_bridge_if" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
		ip link delete "$link" 2>/dev/null && echo "down: deleted veth $link" >&2
	done
	real_apiserver_route_cleanup
	netpol_cleanup
	rm -f "$(netpol_disabled_file)"
	if ip link show "$real_bridge_if" >/dev/null 2>&1; then
		ip link delete "$real_bridge_if" && echo "down: deleted interface $real_bridge_if" >&2
	fi
	# cgroups: the pods' tree in every v1 hierarchy, deepest first.
	for h in /sys/fs/cgroup/*/"$real_cgroup"; do
		[ -d "$h" ] || continue
		find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || echo "down: some cgroups under $h remain" >&2
	done
	# Kernel tunables the kubelet changed.
	if [ -f "$real_dir/sysctl.saved" ]; then
		while read -r k v; do
			[ "$(cat "/proc/sys/$k")" = "$v" ] || echo "$v" >"/proc/sys/$k"
		done <"$real_dir/sysctl.saved"
		rm -f "$real_dir/sysctl.saved"
	fi
	# Outside $real_dir: the kubelet's /var/log/containers links into our pod logs, libcni's
	# result cache for our network.
	for p in /var/log/containers/*.log; do
		[ -L "$p" ] && case "$(readlink "$p")" in "$real_dir"/*) rm -f "$p" ;; esac
	done
	if [ -f "$real_dir/var-log-containers.made" ]; then
		rmdir /var/log/containers 2>/dev/null || true # only when empty
		rm -f "$real_dir/var-log-containers.made"
	fi
	rm -f /var/lib/cni/results/"$real_cgroup"-* 2>/dev/null || true
	rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true # only when empty
	# Per-run state; images (containerd content, registry, OCI layouts) are kept as a cache.
	rm -rf "$real_dir/kubelet" "$real_dir/containerd/state" "$real_dir/containerd/runc" \
		"$real_dir/cni/ipam" "$real_dir/pod-logs"
	rm -f "$real_dir/host-state"
}

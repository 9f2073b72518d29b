#!/usr/bin/env bash
# Starts a local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver (RBAC, Pod Security
# admission, OwnerReferencesPermissionEnforcement, audit log), kube-controller-manager with all
# controllers, kube-scheduler, and kwok managing fake nodes. Idempotent: components already running
# are reused, missing ones are started, so `down.sh kube-apiserver && up.sh` restarts one piece.
# Builds the binaries first if the cache lacks them (hack/build-tools.sh).
# TELO_REAL_NODE=1 adds a real node (registry, containerd, kubelet): see real-node.sh.
# TELO_APISERVER_PROFILING=1 serves the apiserver's /debug/pprof (bench/sessions TELO_BENCH_PPROF).
# TELO_CLUSTER_MINIMAL=1 (with TELO_REAL_NODE=1; what `make run` asks for) starts only what a
# session on the real node needs, so that a first `make run` builds less: no kwok (nor its fake
# nodes), no NetworkPolicy enforcer, and etcdctl and crictl are not built. It leaves the file
# $cluster_dir/minimal saying so; the next up.sh without the variable (the e2e suite's, make
# test's, cluster-up's) builds and starts what was left out, the real node's part included.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=real-node.sh
source "$(dirname "$0")/real-node.sh"

minimal=0
if [ "${TELO_CLUSTER_MINIMAL:-0}" = 1 ]; then
	if [ "${TELO_REAL_NODE:-0}" != 1 ]; then
		echo "up: TELO_CLUSTER_MINIMAL=1 leaves kwok out, so it needs the real node (TELO_REAL_NODE=1)" >&2
		exit 2
	fi
	minimal=1
fi
minimal_file="$cluster_dir/minimal"

if [ $minimal = 1 ]; then
	"$cluster_root/hack/build-tools.sh" --for-run
else
	"$cluster_root/hack/build-tools.sh"
fi

mkdir -p "$cluster_dir" "$pid_dir" "$log_dir" "$pki" "$etcd_data"
start_time=$SECONDS

fail() { # component message [show-log]
	echo "up: $1 failed to start: $2" >&2
	local log="$log_dir/$1.log"
	# Only this attempt's lines: the log keeps earlier runs, which would mislead here.
	if [ "${3:-1}" = 1 ] && [ -f "$log" ]; then
		echo "up: last lines of $log (this attempt):" >&2
		awk '/^--- .* starting: /{n=0} {line[n++]=$0} END{for(i=(n>30?n-30:0);i<n;i++) print line[i]}' "$log" >&2
	fi
	echo "up: stop what did start with hack/cluster/down.sh" >&2
	exit 1
}

# wait_for component seconds command...: polls the command until it succeeds; fails with the
# component's log tail when the process died or the time ran out.
wait_for() {
	local name=$1 seconds=$2
	shift 2
	local deadline=$((SECONDS + seconds))
	until "$@" >/dev/null 2>&1; do
		[ -n "$(component_pid "$name")" ] || fail "$name" "the process exited"
		[ $SECONDS -lt $deadline ] || fail "$name" "not healthy after ${seconds}s ($*)"
		sleep 0.2
	done
}

# launch name command...: starts a component in its own session, logs to logs/<name>.log.
launch() {
	local name=$1
	shift
	if [ -n "$(component_pid "$name")" ]; then
		return 1
	fi
	local port holder
	port=$(port_of "$name")
	if [ -n "$port" ]; then
		holder=$(ss -Htlnp 2>/dev/null | awk -v p=":$port" 'substr($4, length($4) - length(p) + 1) == p && !found++ { print ($6 != "" ? $6 : "a process this user cannot see") }')
		[ -z "$holder" ] ||
			fail "$name" "port $port is taken by another process ($holder; set TELO_*_PORT to move it)" 0
	fi
	echo "--- $(date -u +%FT%TZ) starting: $*" >>"$log_dir/$name.log"
	# Only stdin, stdout and stderr go to the component: a descriptor inherited from the caller
	# (the e2e lock, when up.sh runs under `flock /tmp/telo-e2e.lock`) would otherwise stay held
	# for the component's whole life and block every later e2e run.
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -le 2 ] || eval "exec $fd>&-" 2>/dev/null || true
		done
		exec setsid "$@" >>"$log_dir/$name.log" 2>&1 </dev/null
	) &
	local pid=$! i
	echo "$pid" >"$pid_dir/$name.pid"
	# The subshell closes descriptors before its exec, and until then its command line is this
	# script's: component_pid (which checks the command line) would read that moment as a dead
	# component (a make test run's kube-scheduler "failed to start: the process exited" while
	# it ran). Wait for the exec, or the end.
	for i in $(seq 1 100); do
		[[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"$name"* ]] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	return 0
}

port_of() {
	case "$1" in
	etcd) echo "$etcd_port" ;;
	kube-apiserver) echo "$apiserver_port" ;;
	kube-controller-manager) echo "$kcm_port" ;;
	kube-scheduler) echo "$scheduler_port" ;;
	kwok) echo "$kwok_port" ;;
	build-registry) echo "$build_registry_port" ;;
	registry) echo "$registry_port" ;;
	kubelet) echo "$kubelet_port" ;;
	esac
}

# --- PKI: one CA signs the serving certificate and every client certificate. -------------------
sign() { # name subject [extensions]
	openssl req -new -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" \
		-out "$pki/$1.csr" 2>/dev/null
	openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
		-CAcreateserial -days 3650 -out "$pki/$1.crt" ${3:+-extfile <(printf '%s' "$3")} 2>/dev/null
	rm -f "$pki/$1.csr"
}

ensure_pki() {
	[ -f "$pki/ca.crt" ] && [ -f "$pki/admin.crt" ] && return 0
	local o="-loglevel error" # keep openssl quiet; errors still go to stderr
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=telo-local-ca" \
		-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	sign apiserver "/CN=kube-apiserver" \
		"subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	sign admin "/O=system:masters/CN=telo-admin"
	sign kube-controller-manager "/CN=system:kube-controller-manager"
	sign kube-scheduler "/CN=system:kube-scheduler"
	sign kwok "/O=system:masters/CN=kwok"
	sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	: "$o"
	# A static token user too, so clients' token authentication is tested against a real server.
	printf '%s,telo-token-admin,uid-token-admin,"system:masters"\n' \
		"$(openssl rand -hex 24)" >"$pki/tokens.csv"
	chmod 600 "$pki"/*.key "$pki/tokens.csv"
}

write_kubeconfig() { # file user
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: telo-local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: telo-local
  context:
    cluster: telo-local
    user: $2
current-context: telo-local
EOF
	chmod 600 "$1"
}

ensure_config() {
	write_kubeconfig "$kubeconfig" admin
	for c in kube-controller-manager kube-scheduler kwok; do
		write_kubeconfig "$cluster_dir/$c.kubeconfig" "$c"
	done
	cat >"$cluster_dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF
	cat >"$cluster_dir/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $cluster_dir/kube-scheduler.kubeconfig
leaderElection:
  leaderElect: false
EOF
	# kwok's stages come from its module, which a minimal start neither builds nor fetches.
	[ $minimal = 1 ] || write_kwok_config
}

# kwok's stages: the upstream ones from the pinned module (so they track the version we build),
# with pod-ready taught to leave pods alone that our ImagePullBackOff stage owns.
write_kwok_config() {
	local stages
	stages=$(cd "$cluster_root/hack/tools/kwok" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
	[ -d "$stages" ] || fail kwok "kwok's stages not found in the module cache ($stages); run hack/build-tools.sh"
	local out="$cluster_dir/kwok.yaml"
	{
		cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.244.0.1/16
  nodeIP: 127.0.0.1
  # Set explicitly: kwok 0.8 leaves them at zero when a configuration file is given.
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  nodeLeaseDurationSeconds: 40
  podsOnNodeSyncParallelism: 2
  enablePodsOnNodeSyncListPager: true
  # The kubelet API's containerLogs (kubectl logs), served from the ClusterLogs below.
  enableDebuggingHandlers: true
EOF
		for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
			pod/fast/pod-complete.yaml \
			pod/chaos/pod-container-running-failed.yaml pod/chaos/pod-init-container-running-failed.yaml \
			node/chaos/node-not-ready.yaml; do
			echo "---"
			cat "$stages/$f"
		done
		echo "---"
		awk '
			{ print }
			/^    matchExpressions:/ && !done {
				print "    - key: '"'"'.metadata.labels[\"sim.telo.run/image-pull\"]'"'"'"
				print "      operator: '"'"'DoesNotExist'"'"'"
				done = 1
			}' "$stages/pod/fast/pod-ready.yaml"
		for f in "$cluster_root"/hack/cluster/kwok/*.yaml; do
			echo "---"
			cat "$f"
		done
		# What `kubectl logs` shows of a build pod's builder (kaniko) and context containers:
		# tests write the lines a failing build would print into this file (CRI log format).
		cat <<EOF
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: build-logs
spec:
  logs:
  - containers: [kaniko, context]
    logsFile: $cluster_dir/kwok-logs/build.log
EOF
	} >"$out"
	mkdir -p "$cluster_dir/kwok-logs"
	touch "$cluster_dir/kwok-logs/build.log"
}

# --- components -------------------------------------------------------------------------------
# The build registry (TELO_BUILD_REGISTRY=1): Debian's docker-registry with htpasswd Basic auth,
# data kept across restarts in $build_registry_dir/data.
start_build_registry() {
	local d="$build_registry_dir"
	# lib.sh picks the port after the real node's registry (no auth); a chosen one must differ.
	if real_node_enabled && [ "$build_registry_port" = "$registry_port" ]; then
		fail build-registry "the real node's registry uses port $registry_port: set another TELO_BUILD_REGISTRY_PORT"
	fi
	mkdir -p "$d/data"
	if [ ! -s "$d/password" ]; then
		(umask 077 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$d/password")
	fi
	local password auth
	password=$(cat "$d/password")
	htpasswd -Bbc "$d/htpasswd" telo "$password" >/dev/null 2>&1 ||
		fail build-registry "htpasswd failed (apt-get install apache2-utils)"
	auth=$(printf 'telo:%s' "$password" | base64 -w0)
	(umask 077 && printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$build_registry_port" "$auth" \
		>"$d/dockerconfig.json")
	registry_config "$d/data" "$build_registry_port" "$d/htpasswd" >"$d/config.yml"
	launch build-registry docker-registry serve "$d/config.yml" || return 0
	wait_for build-registry 30 curl -fsS -u "telo:$password" "http://127.0.0.1:$build_registry_port/v2/"
}

start_etcd() {
	launch etcd "$etcd_bin/etcd" --name=telo-local --data-dir="$etcd_data" \
		--listen-client-urls="http://127.0.0.1:$etcd_port" \
		--advertise-client-urls="http://127.0.0.1:$etcd_port" \
		--listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
		--initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
		--initial-cluster="telo-local=http://127.0.0.1:$etcd_peer_port" \
		--unsafe-no-fsync=true --quota-backend-bytes=4294967296 --log-level=warn || return 0
	wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"
}

start_apiserver() {
	launch kube-apiserver "$k8s_bin/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$etcd_port" \
		--bind-address=127.0.0.1 --secure-port="$apiserver_port" --advertise-address=127.0.0.1 \
		--endpoint-reconciler-type=none \
		--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
		--client-ca-file="$pki/ca.crt" --token-auth-file="$pki/tokens.csv" \
		--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$pki/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP \
		--service-cluster-ip-range=10.96.0.0/16 \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction \
		--audit-policy-file="$cluster_dir/audit-policy.yaml" \
		--audit-log-path="$log_dir/audit.log" --audit-log-maxsize=100 --audit-log-maxbackup=2 \
		--watch-cache-sizes=configmaps#0 \
		--profiling="$([ "${TELO_APISERVER_PROFILING:-0}" = 1 ] && echo true || echo false)" || return 0
	apiserver_started=1
	wait_for kube-apiserver 90 curl -fsS --cacert "$pki/ca.crt" "https://127.0.0.1:$apiserver_port/readyz"
}

start_controller_manager() {
	restart_if_stale kube-controller-manager
	local kc="$cluster_dir/kube-controller-manager.kubeconfig"
	launch kube-controller-manager "$k8s_bin/kube-controller-manager" --kubeconfig="$kc" \
		--authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 --secure-port="$kcm_port" \
		--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
		--leader-elect=false --controllers='*' --use-service-account-credentials=true \
		--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
		--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
		--kube-api-qps=50 --kube-api-burst=100 || return 0
	wait_for kube-controller-manager 60 curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
}

# A component that outlived the API server it watched is restarted with it, so that it lists and
# watches afresh. client-go's reflectors back off after every failed watch, up to tens of seconds,
# so after the suite's four API server restarts in a row a component could take minutes to see a
# new object:
# - kwok 0.8 kept heartbeating its nodes but never saw a node created afterwards (make test,
#   2026-12-02: a node made after test_kube_client's restart stayed NotReady);
# - kube-scheduler 1.34 bound no pod for two minutes (make test, 2026-12-03: between its last
#   list and its next pod watch the audit log has nothing of it);
# - the real node's kubelet, after the scheduler was restarted, did not start a pod bound to it
#   within 60 s (make test, 2026-12-03: its pod watch failed at once at 17:57:36 and its next list
#   came at 17:58:22, after the test had given up);
# - kube-controller-manager, whose informers are the same.
# A restarted kubelet leaves its containers running.
restart_if_stale() { # component
	[ "${apiserver_started:-0}" = 1 ] && [ -n "$(component_pid "$1")" ] || return 0
	echo "up: kube-apiserver was restarted: restarting $1 so that it watches afresh" >&2
	"$(dirname "$0")/down.sh" "$1"
}

start_scheduler() {
	restart_if_stale kube-scheduler
	local kc="$cluster_dir/kube-scheduler.kubeconfig"
	launch kube-scheduler "$k8s_bin/kube-scheduler" --config="$cluster_dir/scheduler.yaml" \
		--authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 --secure-port="$scheduler_port" \
		--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics || return 0
	wait_for kube-scheduler 60 curl -fsSk "https://127.0.0.1:$scheduler_port/healthz"
}

start_kwok() {
	restart_if_stale kwok
	launch kwok "$kwok_bin/kwok" --kubeconfig="$cluster_dir/kwok.kubeconfig" \
		--config="$cluster_dir/kwok.yaml" \
		--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
		--node-name=localhost --node-ip=127.0.0.1 --node-port="$kwok_port" \
		--server-address="127.0.0.1:$kwok_port" || return 0
	wait_for kwok 60 curl -fsSk "https://127.0.0.1:$kwok_port/healthz"
}

ensure_nodes() {
	local i
	for ((i = 0; i < kwok_nodes; i++)); do
		cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    telo.run/node: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "10000", ephemeral-storage: 1Ti}
  capacity: {cpu: "32", memory: 256Gi, pods: "10000", ephemeral-storage: 1Ti}
  nodeInfo:
    architecture: amd64
    kubeletVersion: fake
    kubeProxyVersion: fake
    operatingSystem: linux
---
EOF
	done >"$cluster_dir/nodes.yaml"
	kubectl_cmd apply -f "$cluster_dir/nodes.yaml" >/dev/null 2>>"$log_dir/kubectl.log" ||
		fail kwok "could not create the fake nodes (see $log_dir/kubectl.log)"
	wait_for kwok 60 kubectl_cmd wait --for=condition=Ready node -l type=kwok --timeout=2s
}

ensure_pki
ensure_config
start_etcd
start_apiserver
start_controller_manager
start_scheduler
if [ $minimal = 0 ]; then
	start_kwok
	ensure_nodes
fi
if [ "${apiserver_started:-0}" = 1 ] && [ -n "$(component_pid kubelet)" ]; then
	restart_if_stale kubelet
	start_kubelet
	wait_for kubelet 120 kubectl_cmd wait --for=condition=Ready "node/$real_node_name" --timeout=2s
fi
# Pods can only be created once the serviceaccount controller made the default ServiceAccount.
wait_for kube-controller-manager 60 kubectl_cmd get serviceaccount default -n default
if [ "${TELO_BUILD_REGISTRY:-0}" = 1 ]; then
	start_build_registry
fi
# The real node only when asked for: a kwok-only up.sh leaves a running one as it is, unless a
# minimal start (below) left its NetworkPolicy enforcer out: then it completes it.
if [ "${TELO_REAL_NODE:-0}" = 1 ]; then
	real_node_up
elif [ -f "$minimal_file" ] && [ -n "$(component_pid kubelet)" ]; then
	echo "up: completing the real node that a minimal start (make run) left without its NetworkPolicy enforcer" >&2
	real_node_up
fi
if [ $minimal = 1 ]; then
	left_out=()
	[ -n "$(component_pid kwok)" ] || left_out+=("kwok and its fake nodes")
	[ -n "$(component_pid netpol)" ] || left_out+=("the NetworkPolicy enforcer (telo-netpol)")
	if [ ${#left_out[@]} -gt 0 ]; then
		left=$(printf '%s; ' "${left_out[@]}")
		printf 'A minimal start (TELO_CLUSTER_MINIMAL=1, make run) left out: %s.\n' "${left%; }" >"$minimal_file"
		echo "hack/cluster/up.sh without TELO_CLUSTER_MINIMAL (the e2e suite's) starts them." >>"$minimal_file"
		echo "up: minimal cluster: $(head -n 1 "$minimal_file")" >&2
	fi
else
	rm -f "$minimal_file"
fi

echo "up: cluster ready in $((SECONDS - start_time))s; logs in $log_dir" >&2
echo "export KUBECONFIG=$kubeconfig"
echo "alias kubectl=$k8s_bin/kubectl"

#!/usr/bin/env bash
# make run: start the local cluster (building its binaries on first use), install the CRD, run
# the gateway and the operator in the background, apply a sample session, wait until it is Ready,
# fetch its app's HTTP answer through its Service and print it, and print the one command that
# attaches to its terminal.
#
# Where the session runs: on the local real node (containerd, runc, a kubelet: pods run for
# real) when this machine can run one (root and the packages, hack/cluster/real-node.sh; as root,
# missing packages are installed first, as make test does), else on kwok's simulated nodes, with
# the reason in one line. TELO_REAL_NODE=1 insists on the real node
# (failing when it cannot start), TELO_REAL_NODE=0 uses kwok. A kwok run never stops a real node
# that is already up (hack/cluster/up.sh leaves it alone).
# On the real node the cluster is started minimal (TELO_CLUSTER_MINIMAL=1 hack/cluster/up.sh):
# etcd, the API server, the controller-manager, the scheduler and the real node, without kwok and
# the NetworkPolicy enforcer, whose builds a first run then skips; the e2e suite's up.sh (make
# test, hack/e2e.sh, make cluster-up) starts them later. A cluster already running is reused.
# The real node runs the stand-in CLI image telo-session-test (hack/images/), because the real
# Telo image cannot be fetched there, and so the sample crds/samples/hello-standin.yaml; on kwok
# the sample is crds/samples/hello.yaml (the one for clusters with the real Telo image).
#
# Environment: TELO_DEMO_NAMESPACE (telo-demo), TELO_OPERATOR_HTTP_PORT (18080),
# TELO_GATEWAY_PORT (18081), TELO_RUN_WATCH_NAMESPACES (the operator's `namespaces`; empty, the
# default: every namespace), TELO_BASE_DOMAIN, TELO_REAL_POD_CIDR, and hack/cluster/lib.sh's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
cd "$root"
build_bin=$(cd "$build/bin" && pwd) # absolute: the attach command printed below works anywhere
t0=$SECONDS
# shellcheck source=cluster/lib.sh
source hack/cluster/lib.sh
# shellcheck source=cluster/real-node.sh
source hack/cluster/real-node.sh

step() { printf '\n=== %s\n' "$*"; }

# --- the real node or kwok ------------------------------------------------------------------
why_kwok=""
case "${TELO_REAL_NODE:-}" in
0) why_kwok="TELO_REAL_NODE=0 is set" ;;
1) ;; # up.sh fails with the reason when the machine cannot
*)
	problem=$(real_node_host_problem)
	# As root with packages missing: install them, as make test does (a fresh machine).
	if [[ $problem == "containerd missing on this machine"* ]]; then
		echo "run: the real node's packages are missing; installing them (TELO_REAL_NODE=1 hack/install-deps.sh)"
		if TELO_REAL_NODE=1 hack/install-deps.sh --no-venv; then
			problem=$(real_node_host_problem)
		else
			problem="containerd installing its packages failed (TELO_REAL_NODE=1 hack/install-deps.sh, above)"
		fi
	fi
	[ -z "$problem" ] || why_kwok=${problem#* }
	;;
esac
step "cluster"
if [ -z "$why_kwok" ]; then
	echo "the session runs on the real node $real_node_name (pods run for real: containerd, runc, a kubelet)"
	# Only what the sample needs (no kwok, no NetworkPolicy enforcer: a cold first run builds
	# less); the e2e suite's up.sh adds the rest. A cluster already running is left as it is.
	TELO_CLUSTER_MINIMAL=1 TELO_REAL_NODE=1 hack/cluster/up.sh >/dev/null
else
	echo "the session runs on kwok's simulated nodes (nothing runs behind them), not the real node: $why_kwok"
	# TELO_REAL_NODE unset: a real node already running is left as it is.
	env -u TELO_REAL_NODE hack/cluster/up.sh >/dev/null
fi
echo "cluster up ($((SECONDS - t0)) s so far); kubeconfig $kubeconfig"

# A namespace other than the default one gets processes of its own (pid and log files), so a
# second `make run` (hack/run.sh, e.g. the e2e test) leaves the first one's alone.
demo_ns=${TELO_DEMO_NAMESPACE:-telo-demo}
suffix=""
[ "$demo_ns" = telo-demo ] || suffix="-$demo_ns"
operator_log="$log_dir/telo-operator$suffix.log"
operator_pid="$pid_dir/telo-operator$suffix.pid"
metrics_port=${TELO_OPERATOR_HTTP_PORT:-18080}
gateway_log="$log_dir/telo-gateway$suffix.log"
gateway_pid="$pid_dir/telo-gateway$suffix.pid"
gateway_port=${TELO_GATEWAY_PORT:-18081}

step "CRD"
crd_install || exit 1
echo "telosessions.telo.run established"

# A previous `make run` left a process running: replace it with this build.
stop_previous() { # pidfile
	if [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; then
		kill -TERM "$(cat "$1")"
		for _ in $(seq 1 100); do kill -0 "$(cat "$1")" 2>/dev/null || break; sleep 0.1; done
	fi
}

# start NAME PIDFILE LOG PORT PORT_VARIABLE COMMAND...: starts COMMAND in the background (its
# log appended to LOG) and waits until it answers /readyz on PORT; fails with the log's tail.
start() {
	local name=$1 pidfile=$2 log=$3 port=$4 port_var=$5
	shift 5
	stop_previous "$pidfile"
	echo "--- $(date -u +%FT%TZ) starting" >>"$log"
	# Only stdin, stdout and stderr go to the process: a descriptor inherited from the caller
	# (the e2e lock, under `flock /tmp/telo-e2e.lock make run`) would stay held for its life.
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -le 2 ] || eval "exec $fd>&-" 2>/dev/null || true
		done
		exec setsid "$@" >>"$log" 2>&1 </dev/null
	) &
	echo $! >"$pidfile"
	for _ in $(seq 1 300); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$(cat "$pidfile")" 2>/dev/null || break
		sleep 0.1
	done
	echo "run: $name did not come up (is port $port taken? set $port_var); last lines of $log:" >&2
	tail -n 20 "$log" >&2
	exit 1
}

step "gateway"
start telo-gateway "$gateway_pid" "$gateway_log" "$gateway_port" TELO_GATEWAY_PORT \
	"$build_bin/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$gateway_port"
echo "telo-gateway running (pid $(cat "$gateway_pid"), log $gateway_log, attach http://127.0.0.1:$gateway_port/v1/namespaces/NS/telosessions/NAME/attach)"

# The operator's settings. On the real node: session pods go there (its label and taint), with
# the images hack/images/build.sh made for it (up.sh imported them into its containerd).
sets=(--set "ingress.baseDomain=${TELO_BASE_DOMAIN:-sessions.localtest.me}"
	--set "gatewayUrl=http://127.0.0.1:$gateway_port"
	--set "reachability.podCIDRs=${TELO_REAL_POD_CIDR:-10.85.0.0/24}")
[ -z "${TELO_RUN_WATCH_NAMESPACES:-}" ] || sets+=(--set "namespaces=$TELO_RUN_WATCH_NAMESPACES")
if [ -z "$why_kwok" ]; then
	standin=$(hack/images/build.sh --ref telo-session-test)
	sets+=(--set "nodeSelector=telo.run/node=real"
		--set 'tolerations=[{"key":"telo.run/node","operator":"Equal","value":"real","effect":"NoSchedule"}]'
		--set "images.init=$(hack/images/build.sh --ref telo-init)"
		--set "images.default=$standin"
		--set startDeadlineSeconds=90)
	sample=hello-standin
	wait_s=120
else
	sample=hello
	wait_s=60
fi

step "operator"
start telo-operator "$operator_pid" "$operator_log" "$metrics_port" TELO_OPERATOR_HTTP_PORT \
	"$build_bin/telo-operator" run --kubeconfig "$kubeconfig" \
	--http-bind-address "127.0.0.1:$metrics_port" "${sets[@]}"
echo "telo-operator running (pid $(cat "$operator_pid"), log $operator_log, metrics http://127.0.0.1:$metrics_port/metrics)"

step "sample session"
# The resource by its full name (telosessions.telo.run): a CRD of another group with the same kind
# would make `telosession` ambiguous for kubectl.
kubectl_cmd get namespace "$demo_ns" >/dev/null 2>&1 || kubectl_cmd create namespace "$demo_ns" >/dev/null
# Session pods are hardened to Pod Security `restricted`: the namespace enforces it.
kubectl_cmd label namespace "$demo_ns" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
kubectl_cmd apply -n "$demo_ns" -f "crds/samples/$sample.yaml"
if ! kubectl_cmd wait -n "$demo_ns" --for=condition=Ready "telosessions.telo.run/$sample" --timeout="${wait_s}s" >/dev/null; then
	echo "run: the sample did not become Ready within ${wait_s}s; its status and the operator's log:" >&2
	kubectl_cmd get telosessions.telo.run "$sample" -n "$demo_ns" -o yaml >&2
	tail -n 20 "$operator_log" >&2
	exit 1
fi
kubectl_cmd get telosessions.telo.run -n "$demo_ns" -o wide

k="$k8s_bin/kubectl --kubeconfig $kubeconfig"
if [ -n "$why_kwok" ]; then
	cat <<EOF

Ready in $((SECONDS - t0)) s. The session runs on kwok's simulated nodes ($why_kwok): its pod is
reported Running with no container behind it, so nothing answers on its port and there is no
terminal to attach to. As root with the real node's packages (TELO_REAL_NODE=1
hack/install-deps.sh), make run starts the real node and shows the app's answer and its terminal.
  $k describe telosessions.telo.run $sample -n $demo_ns
  $k delete telosessions.telo.run $sample -n $demo_ns     # clean up
Stop everything: make cluster-down (the operator: kill \$(cat $operator_pid); the gateway:
kill \$(cat $gateway_pid))
EOF
	exit 0
fi

# --- the app's answer, through the API server's proxy to the session's Service ---------------
# (There is no kube-proxy on the local cluster, so a ClusterIP routes nowhere from this
# machine; the API server's service proxy goes to the Service's endpoint, the pod.)
step "the app's answer"
pod=$(kubectl_cmd get telosessions.telo.run "$sample" -n "$demo_ns" -o jsonpath='{.status.podName}')
svc=$(kubectl_cmd get service -n "$demo_ns" -l "telo.run/session=$sample" -o jsonpath='{.items[0].metadata.name}')
port=$(kubectl_cmd get service "$svc" -n "$demo_ns" -o jsonpath='{.spec.ports[0].name}')
path="/api/v1/namespaces/$demo_ns/services/$svc:$port/proxy/hello"
echo "\$ kubectl get --raw $path"
answer=""
for _ in $(seq 1 50); do # the Service's endpoints follow the pod's readiness
	answer=$(kubectl_cmd get --raw "$path" 2>&1) && break
	answer="run: no answer through the Service $svc: $answer"
	sleep 0.2
done
echo "$answer"
case "$answer" in "run: no answer"*) exit 1 ;; esac

attach=$(printf 'PATH=%q:%q:"$PATH" KUBECONFIG=%q kubectl telo attach %q -n %q' \
	"$build_bin" "$k8s_bin" "$kubeconfig" "$sample" "$demo_ns")
cat <<EOF

Ready in $((SECONDS - t0)) s. The session runs for real on the node $real_node_name, but its image
is a stand-in: telo-session-test ($standin), a
small shell script standing in for the Telo CLI (hack/images/README.md), because the real Telo
image cannot be fetched here. It serves the text of its sample's \`#! http\` line (above) and
echoes what you type. On a cluster with the real Telo image, apply crds/samples/hello.yaml.

Attach to its terminal (type a line: the stand-in echoes it; detach with ctrl-p ctrl-q):
  $attach

More:
  $k describe telosessions.telo.run $sample -n $demo_ns
  $k logs -n $demo_ns $pod -c session
  $k delete telosessions.telo.run $sample -n $demo_ns     # clean up
Stop everything: make cluster-down (the operator: kill \$(cat $operator_pid); the gateway:
kill \$(cat $gateway_pid))
EOF

#!/usr/bin/env bash
# make run: start the local cluster (building its binaries on first use), install the CRD, run
# the operator in the background, apply the sample session, wait for it to run, and show it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
cd "$root"
hack/cluster/up.sh >/dev/null
# shellcheck source=cluster/lib.sh
source hack/cluster/lib.sh

demo_ns=${TELO_DEMO_NAMESPACE:-telo-demo}
operator_log="$log_dir/telo-operator.log"
operator_pid="$pid_dir/telo-operator.pid"
metrics_port=${TELO_OPERATOR_HTTP_PORT:-18080}
gateway_log="$log_dir/telo-gateway.log"
gateway_pid="$pid_dir/telo-gateway.pid"
gateway_port=${TELO_GATEWAY_PORT:-18081}

step() { printf '\n=== %s\n' "$*"; }

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
	setsid "$@" >>"$log" 2>&1 </dev/null &
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
	"$build/bin/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$gateway_port"
echo "telo-gateway running (pid $(cat "$gateway_pid"), log $gateway_log, attach http://127.0.0.1:$gateway_port/v1/namespaces/NS/telosessions/NAME/attach)"

step "operator"
start telo-operator "$operator_pid" "$operator_log" "$metrics_port" TELO_OPERATOR_HTTP_PORT \
	"$build/bin/telo-operator" run --kubeconfig "$kubeconfig" \
	--http-bind-address "127.0.0.1:$metrics_port" \
	--set "ingress.baseDomain=${TELO_BASE_DOMAIN:-sessions.localtest.me}" \
	--set "gatewayUrl=http://127.0.0.1:$gateway_port" \
	--set "reachability.podCIDRs=${TELO_REAL_POD_CIDR:-10.85.0.0/24}"
echo "telo-operator running (pid $(cat "$operator_pid"), log $operator_log, metrics http://127.0.0.1:$metrics_port/metrics)"

step "sample session"
kubectl_cmd create namespace "$demo_ns" --dry-run=client -o yaml | kubectl_cmd apply -f - >/dev/null
kubectl_cmd apply -n "$demo_ns" -f crds/samples/hello.yaml
if ! kubectl_cmd wait -n "$demo_ns" --for=condition=Ready telosession/hello --timeout=60s >/dev/null; then
	echo "run: the sample did not become Ready; its status and the operator's log:" >&2
	kubectl_cmd get telosession hello -n "$demo_ns" -o yaml >&2
	tail -n 20 "$operator_log" >&2
	exit 1
fi
kubectl_cmd get telosessions -n "$demo_ns" -o wide

cat <<EOF

The cluster, the operator and the sample keep running (the cluster's nodes are kwok's simulated
ones: the session pod is reported Running without a container behind it).
  export KUBECONFIG=$kubeconfig
  $k8s_bin/kubectl describe telosession hello -n $demo_ns
  $k8s_bin/kubectl patch telosession hello -n $demo_ns --type merge -p '{"spec":{"stopped":true}}'   # stop it
  $k8s_bin/kubectl delete telosession hello -n $demo_ns                                               # clean up
Attach: status.attach.url of the session, with the token of Secret status.attach.secretName
(kubectl telo attach hello -n $demo_ns, once the plugin is installed); the session runs on a
kwok node here, so its attach needs the real node (TELO_REAL_NODE=1 make cluster-up).
Stop everything: make cluster-down (the operator: kill \$(cat $operator_pid); the gateway:
kill \$(cat $gateway_pid))
EOF

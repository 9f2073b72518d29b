#!/usr/bin/env bash
# The setup the gateway benches share (sourced by run.sh and hostile.sh from the repository root):
# the binaries, the local cluster's kubeconfig and real-node images, a namespace of the bench's
# own with the CRD installed, its telo-operator (watching only that namespace, gatewayUrl set to
# the bench's gateway) and the sessions' bundle. Each bench starts its own telo-gateway (pids+=).
# Every process in pids is stopped and the namespace removed on exit.

# bench_init NAME DEFAULT_GATEWAY_PORT: sets bin, kubeconfig, refs, kubectl, ns, out, gw_port and
# pids, and installs the cleanup.
bench_init() {
	bin=${TELO_BIN_DIR:-build/bin}
	for b in telo-operator telo-gateway kubectl-telo; do
		[ -x "$bin/$b" ] || { echo "bench: $bin/$b missing (make build)" >&2; exit 1; }
	done
	kubeconfig=${TELO_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/cluster}/kubeconfig
	refs=$(dirname "$kubeconfig")/real-node/images/refs.json
	kubectl="$(hack/build-tools.sh --print-dir k8s)/kubectl --kubeconfig $kubeconfig"
	[ -f "$refs" ] || { echo "bench: no real node (TELO_REAL_NODE=1 hack/cluster/up.sh)" >&2; exit 1; }
	local id="b${1:0:1}$$"
	ns="bench-$1-$id"
	out=${TELO_BENCH_OUT:-${TMPDIR:-/tmp}/telo-bench-$1-$id}
	mkdir -p "$out"
	gw_port=${TELO_BENCH_GATEWAY_PORT:-$2}
	pids=()
	trap bench_cleanup EXIT
}

bench_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	$kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}

bench_image() { # name -> the real node's reference of that image
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$refs" "$1"
}

# The CRD and the bench's namespace (restricted pod security, as the operator requires).
bench_namespace() {
	# shellcheck source=../../hack/cluster/lib.sh
	source hack/cluster/lib.sh
	crd_install
	$kubectl create namespace "$ns" >/dev/null
	$kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted >/dev/null
}

# The bench's telo-operator, its sessions on the real node, their attach through the gateway.
bench_start_operator() {
	"$bin/telo-operator" run --kubeconfig "$kubeconfig" --http-bind-address 127.0.0.1:0 \
		--set "namespaces=$ns" --set nodeSelector=telo.run/node=real \
		--set 'tolerations=[{"key":"telo.run/node","operator":"Equal","value":"real","effect":"NoSchedule"}]' \
		--set "images.init=$(bench_image telo-init)" --set "images.default=$(bench_image telo-session-test)" \
		--set startDeadlineSeconds=90 --set "gatewayUrl=http://127.0.0.1:$gw_port" \
		--set "reachability.podCIDRs=${TELO_REAL_POD_CIDR:-10.85.0.0/24}" \
		>"$out/operator.log" 2>&1 &
	pids+=($!)
}

bench_wait_gateway() {
	for _ in $(seq 1 100); do
		curl -fsS "http://127.0.0.1:$gw_port/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
}

# bench_sessions NAME...: sets app (the bundle: one line of output) and runs a session of it for
# each name, without attaching.
bench_sessions() {
	app="$out/app"
	mkdir -p "$app"
	printf 'print bench session\n' >"$app/telo.yaml"
	for s in "$@"; do
		"$bin/kubectl-telo" --kubeconfig "$kubeconfig" -n "$ns" run "$app" --name "$s" --no-attach
	done
}

# bench_attach_secret NAME: prints the name of session NAME's attach-token Secret. The operator
# makes it only on request (spec.attachToken, since issue 20), so this asks for it and waits until
# the status names it (the status names it once the Secret exists).
bench_attach_secret() {
	$kubectl patch telosessions.telo.run "$1" -n "$ns" --type merge \
		-p '{"spec":{"attachToken":true}}' >/dev/null
	$kubectl wait -n "$ns" "telosessions.telo.run/$1" --timeout=60s \
		--for=jsonpath='{.status.attach.secretName}' >/dev/null
	$kubectl get telosessions.telo.run "$1" -n "$ns" -o jsonpath='{.status.attach.secretName}'
}

# bench_standin DIR PORT --get PATH=FILE...: starts bench/gateway/standin.py (the API server's
# stand-in) on 127.0.0.1:PORT with a certificate of its own (DIR/standin.crt), under the name
# telo-standin (so that bench.py --cpu tells it from bench.py), adds it to pids and writes
# DIR/standin.kubeconfig, which points a gateway at it.
bench_standin() {
	local dir=$1 port=$2
	shift 2
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=standin \
		-addext subjectAltName=IP:127.0.0.1 -keyout "$dir/standin.key" -out "$dir/standin.crt" \
		2>/dev/null
	cat >"$dir/standin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: standin
  cluster: {server: "https://127.0.0.1:$port", certificate-authority: "$dir/standin.crt"}
users:
- name: standin
  user: {token: standin}
contexts:
- name: standin
  context: {cluster: standin, user: standin}
current-context: standin
EOF
	ln -sf "$(python3 -c 'import sys; print(sys.executable)')" "$dir/telo-standin"
	"$dir/telo-standin" bench/gateway/standin.py --port "$port" --cert "$dir/standin.crt" \
		--key "$dir/standin.key" "$@" >"$dir/standin.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 50); do
		grep -q listening "$dir/standin.log" 2>/dev/null && break
		sleep 0.1
	done
}

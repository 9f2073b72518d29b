#!/usr/bin/env bash
# Builds the local cluster's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok; kubelet and crictl on request) from the pinned Go modules under
# hack/tools/, into a cache outside the repository keyed by version. A binary that is already
# in the cache is not rebuilt.
#
#   hack/build-tools.sh            build what the control plane needs
#   hack/build-tools.sh --for-run  build only what `make run`'s cluster on the real node uses
#                                  (TELO_CLUSTER_MINIMAL=1 up.sh): etcd, kube-apiserver,
#                                  kube-controller-manager, kube-scheduler, kubectl, kubelet;
#                                  not etcdctl, kwok, crictl nor telo-netpol (the e2e suite's)
#   hack/build-tools.sh kubelet    also build the kubelet
#   hack/build-tools.sh crictl     also build crictl (cri-tools; the real node's down.sh uses it)
#   hack/build-tools.sh helm       also build helm (the chart's tests)
#   hack/build-tools.sh netpol     also build telo-netpol (the real node's NetworkPolicy enforcer)
#   hack/build-tools.sh gotty      also build gotty (the web terminal bench/gateway compares with)
#   hack/build-tools.sh kaniko     also build kaniko's executor (the image builder; hack/images packs it)
#   hack/build-tools.sh --print-dir k8s|etcd|kwok|cri-tools|helm|netpol|gotty|kaniko   print the cache dir of a tool set
#
# Each build's log is kept next to the binaries (build-<name>.log) with its peak memory; a
# failed build names the binary and the step and prints the tail of its log.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator"

# The pinned versions live in the wrapper modules' go.mod files; read them from there so that a
# version bump is one edit.
mod_version() { # module-dir module-path
	awk -v m="$2" '{ if ($1 == "require") $0 = substr($0, 9) } $1 == m && $2 ~ /^v/ { print $2; exit }' \
		"$tools/$1/go.mod"
}
k8s_version=$(mod_version k8s k8s.io/kubernetes)
etcd_version=$(mod_version etcd go.etcd.io/etcd/server/v3)
kwok_version=$(mod_version kwok sigs.k8s.io/kwok)
cri_tools_version=$(mod_version cri-tools sigs.k8s.io/cri-tools)
helm_version=$(mod_version helm helm.sh/helm/v3)
netpol_version=$(mod_version kube-network-policies sigs.k8s.io/kube-network-policies)
gotty_version=$(mod_version gotty github.com/sorenisanerd/gotty)
kaniko_version=$(mod_version kaniko github.com/GoogleContainerTools/kaniko)
if [ -z "$k8s_version" ] || [ -z "$etcd_version" ] || [ -z "$kwok_version" ] || [ -z "$cri_tools_version" ] ||
	[ -z "$helm_version" ] || [ -z "$netpol_version" ] || [ -z "$gotty_version" ] || [ -z "$kaniko_version" ]; then
	echo "build-tools: cannot read the pinned versions from hack/tools/*/go.mod" >&2
	exit 1
fi
go_version=$(go env GOVERSION)
# telo-netpol is our own main around the pinned library: its cache key also covers our source.
netpol_src=$(cat "$tools/kube-network-policies/main.go" "$tools/kube-network-policies/go.sum" | cksum | cut -d' ' -f1)

bin_dir() { # set -> directory
	case "$1" in
	k8s) echo "$cache/bin/k8s-$k8s_version-$go_version" ;;
	etcd) echo "$cache/bin/etcd-$etcd_version-$go_version" ;;
	kwok) echo "$cache/bin/kwok-$kwok_version-$go_version" ;;
	cri-tools) echo "$cache/bin/cri-tools-$cri_tools_version-$go_version" ;;
	helm) echo "$cache/bin/helm-$helm_version-$go_version" ;;
	netpol) echo "$cache/bin/kube-network-policies-$netpol_version-$netpol_src-$go_version" ;;
	gotty) echo "$cache/bin/gotty-$gotty_version-$go_version" ;;
	kaniko) echo "$cache/bin/kaniko-$kaniko_version-$go_version" ;;
	*) echo "unknown tool set '$1' (want k8s, etcd, kwok, cri-tools, helm, netpol, gotty or kaniko)" >&2; return 2 ;;
	esac
}

if [ "${1:-}" = "--print-dir" ]; then
	bin_dir "${2:?--print-dir needs k8s, etcd, kwok, cri-tools, helm, netpol, gotty or kaniko}"
	exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
# A shared Go build cache keyed by nothing but content: warm builds of a new checkout reuse it.
export GOCACHE="${GOCACHE:-$(go env GOCACHE)}"

# build <set> <name> <package> [ldflags] [module dir under hack/tools, default <set>]
build() {
	local set=$1 name=$2 pkg=$3 ldflags=${4:-} mod=${5:-$1}
	local dir out log
	dir=$(bin_dir "$set")
	out="$dir/$name"
	[ -x "$out" ] && return 0
	mkdir -p "$dir"
	log="$dir/build-$name.log"
	echo "build-tools: building $name ($set) into $dir ..." >&2
	local start=$SECONDS
	if ! (cd "$tools/$mod" && /usr/bin/time -f "peak_rss_kb=%M wall_s=%e" \
		go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") >"$log" 2>&1; then
		echo "build-tools: FAILED to build $name ($pkg in hack/tools/$mod, step: go build); last lines of $log:" >&2
		tail -n 25 "$log" >&2
		rm -f "$out.tmp"
		exit 1
	fi
	mv "$out.tmp" "$out"
	echo "build-tools: built $name in $((SECONDS - start))s ($(tail -n 1 "$log"))" >&2
}

k8s_ldflags() {
	local v=$k8s_version minor
	minor=$(echo "$v" | cut -d. -f2)
	local p=k8s.io/component-base/version c=k8s.io/client-go/pkg/version f
	for f in $p $c; do
		printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
			"$f" "$v" "$f" "$f" "$minor" "$f"
	done
}

# As helm's Makefile: the Kubernetes version `helm template` and `helm lint` assume without a
# cluster is the one of the client-go helm is built with (v0.X -> 1.X).
helm_ldflags() {
	local minor f
	minor=$(mod_version helm k8s.io/client-go | cut -d. -f2)
	printf -- '-X helm.sh/helm/v3/internal/version.version=%s ' "$helm_version"
	for f in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
		printf -- '-X %s.k8sVersionMajor=1 -X %s.k8sVersionMinor=%s ' "$f" "$f" "$minor"
	done
}

if ! command -v go >/dev/null; then
	echo "build-tools: Go is not installed; install Go >= 1.25 (Debian: golang-go from backports) and retry" >&2
	exit 1
fi

for_run=0
if [ "${1:-}" = "--for-run" ]; then
	for_run=1
	shift
fi

# On a cold machine the Kubernetes modules (about 570 MB) are fetched while etcd compiles, not
# after: `go list -deps` only loads the packages, so it downloads what the builds below need and
# compiles nothing. The Go module cache takes concurrent fetches of one module (it locks).
k8s_pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet)
prefetch_pid=""
if [ ! -x "$(bin_dir k8s)/kube-apiserver" ]; then
	(cd "$tools/k8s" && exec go list -deps "${k8s_pkgs[@]}" >/dev/null 2>&1) &
	prefetch_pid=$!
	# Not left running when a build below fails.
	trap 'kill "$prefetch_pid" 2>/dev/null || true' EXIT
fi

build etcd etcd go.etcd.io/etcd/server/v3
[ $for_run = 1 ] || build etcd etcdctl go.etcd.io/etcd/etcdctl/v3
# A failed prefetch is not an error here: the build below fetches again and reports it.
[ -z "$prefetch_pid" ] || wait "$prefetch_pid" || true
lf=$(k8s_ldflags)
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$lf"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$lf"
build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$lf"
build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$lf"
if [ $for_run = 1 ]; then
	build k8s kubelet k8s.io/kubernetes/cmd/kubelet "$lf"
else
	build kwok kwok sigs.k8s.io/kwok/cmd/kwok
fi
for extra in "$@"; do
	case "$extra" in
	kubelet) build k8s kubelet k8s.io/kubernetes/cmd/kubelet "$lf" ;;
	crictl) build cri-tools crictl sigs.k8s.io/cri-tools/cmd/crictl \
		"-X sigs.k8s.io/cri-tools/pkg/version.Version=$cri_tools_version" ;;
	helm) build helm helm helm.sh/helm/v3/cmd/helm "$(helm_ldflags)" ;;
	netpol) build netpol telo-netpol . "" kube-network-policies ;;
	gotty) build gotty gotty github.com/sorenisanerd/gotty "-X main.Version=$gotty_version" ;;
	# As kaniko's Makefile (out/executor): static (CGO_ENABLED=0 above), the version stamped in.
	kaniko) build kaniko executor github.com/GoogleContainerTools/kaniko/cmd/executor \
		"-X github.com/GoogleContainerTools/kaniko/pkg/version.version=$kaniko_version" ;;
	*) echo "build-tools: unknown extra binary '$extra' (known: kubelet, crictl, helm, netpol, gotty, kaniko)" >&2; exit 2 ;;
	esac
done

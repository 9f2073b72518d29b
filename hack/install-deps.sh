#!/usr/bin/env bash
# Installs what building and testing telo-operator needs and is missing: Debian packages (C
# libraries, tools) and a Python virtualenv for the e2e tests under the cache. Idempotent: a
# second run on a ready machine only checks, and prints nothing but the venv path.
#
#   hack/install-deps.sh            check and install
#   hack/install-deps.sh --no-venv  the packages only, not the e2e virtualenv (make run)
#   hack/install-deps.sh --venv     print the virtualenv's directory
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator"
venv="$cache/venv-$(python3 -c 'import sys; print("py%d.%d" % sys.version_info[:2])')"

if [ "${1:-}" = "--venv" ]; then
	echo "$venv"
	exit 0
fi

# One package per line with what needs it, so the next issue adds a line, not a branch.
debs=(
	build-essential    # cc, make
	cmake              # the C build
	pkg-config         # finds the libraries below
	libcurl4-openssl-dev # HTTP/2 transport to the API server (libcurl with nghttp2)
	libjson-c-dev      # JSON
	zlib1g-dev         # pkg/cache/pack.c: the informer cache's compressed objects
	libyaml-dev        # kubeconfig, manifests
	libarchive-dev     # pkg/imagebuild: reads bundles (gzip tar)
	libssl-dev         # sha256, random, TLS
	libev-dev          # the event loop
	libcmocka-dev      # unit tests
	valgrind           # memcheck in make test
	clang-format       # make fmt
	clang-tidy         # make lint
	cppcheck           # make lint
	openssl            # cluster PKI
	curl               # readiness probes in hack/cluster
	iproute2           # ss, for connection checks in e2e
	procps             # ps, pkill
	python3-venv       # e2e virtualenv
	docker-registry    # e2e: a real OCI registry for the image-build registry checks
	apache2-utils      # e2e: htpasswd, Basic auth of that registry
	umoci              # e2e and hack/images: builds OCI images without a daemon
	skopeo             # e2e and hack/images: pushes them into the registry
	lua5.1             # e2e: runs hack/argocd/health.lua (Argo CD's gopher-lua speaks Lua 5.1)
)
# The real node (TELO_REAL_NODE=1, hack/cluster/real-node.sh, hack/images/): only installed when
# asked for, so the kwok-only path stays lean.
if [ "${TELO_REAL_NODE:-0}" = 1 ]; then
	debs+=(
		containerd         # the real node's container runtime (CRI plugin, overlayfs)
		runc               # containerd's OCI runtime
		containernetworking-plugins # CNI bridge, host-local, loopback, portmap
		iptables           # portmap (hostPort), the apiserver route, the NetworkPolicy enforcer's NFQUEUE rules
		busybox-static     # hack/images: the rootfs of the test images
		libc6-dev          # hack/images: the static pause binary (cc -static)
	)
fi

# libFuzzer (hack/fuzz.sh): make test runs every target for a short smoke pass and make fuzz for
# longer, so clang and its sanitizer runtimes are always installed.
debs+=(
	clang-14           # hack/fuzz.sh: -fsanitize=fuzzer
	libclang-rt-14-dev # hack/fuzz.sh: libFuzzer and the ASan/UBSan runtimes for clang
)

missing=()
for entry in "${debs[@]}"; do
	pkg=${entry%% *}
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$pkg")
	fi
done

if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	if ! $sudo apt-get update -qq >/dev/null 2>&1; then
		echo "install-deps: 'apt-get update' failed; check the network or the apt sources" >&2
		exit 1
	fi
	if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/tmp/telo-apt.log 2>&1; then
		echo "install-deps: apt-get install of ${missing[*]} failed; last lines:" >&2
		tail -n 20 /tmp/telo-apt.log >&2
		exit 1
	fi
fi

if ! command -v go >/dev/null; then
	echo "install-deps: Go >= 1.25 is required to build the local cluster (hack/build-tools.sh)" >&2
	exit 1
fi

[ "${1:-}" != "--no-venv" ] || exit 0

# The e2e virtualenv, keyed by the requirements file's content so a change rebuilds it.
req="$root/test/e2e/requirements.txt"
stamp="$venv/.requirements-$(sha256sum "$req" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
	echo "install-deps: creating the e2e virtualenv in $venv" >&2
	python3 -m venv "$venv"
	if ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >/tmp/telo-pip.log 2>&1; then
		echo "install-deps: pip install -r test/e2e/requirements.txt failed; last lines:" >&2
		tail -n 20 /tmp/telo-pip.log >&2
		exit 1
	fi
	rm -f "$venv"/.requirements-*
	touch "$stamp"
fi

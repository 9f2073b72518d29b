#!/usr/bin/env bash
# make test: unit tests (plain, under valgrind, and under ASan+UBSan), a smoke pass of every fuzz
# target, then the e2e suite against the local cluster. A cluster this script had to start is
# stopped again at the end; one that was already running is left as it was.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
asan=${2:-build-asan}
cd "$root"

# Each step says when it started (seconds into the run), so a CI log shows where the time goes.
step() { printf '\n=== %s (at %ds)\n' "$*" "$SECONDS"; }

# Two test binaries at once on two cores (UNIT_JOBS): none shares a port or a file with another.
jobs=${UNIT_JOBS:-2}
step "unit tests"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
step "unit tests under valgrind"
VALGRIND_JOBS=$jobs hack/valgrind-unit.sh "$build"
step "unit tests under ASan+UBSan"
ctest --test-dir "$asan" --output-on-failure -j "$jobs"
# Every libFuzzer target of test/fuzz (clang, ASan+UBSan, built in build-fuzz/) for a short smoke
# pass over its corpus: a crash, a leak, a hang or a failed check is a failed make test, with the
# input in build-fuzz/crash-<target>-*. 10 s each, two at a time on two cores (FUZZ_JOBS), keeps
# the 20 targets near 2 minutes; make fuzz runs them longer (FUZZ_SECONDS).
smoke=${FUZZ_SMOKE_SECONDS:-10}
step "fuzz smoke pass (${smoke}s per target; FUZZ_SMOKE_SECONDS)"
hack/fuzz.sh --build
FUZZ_SECONDS=$smoke hack/fuzz.sh

# The real node (kubelet on containerd and runc, hack/cluster/README.md) runs the session pods
# of test_real_node.py and test_sessions_real_node.py for real. It needs root; as root it is on
# unless TELO_REAL_NODE=0, otherwise those tests are skipped (pytest says why). Exported, so the
# suite's own up.sh calls (after an API server restart, say) keep it too.
real_auto=0
if [ -z "${TELO_REAL_NODE:-}" ]; then
	TELO_REAL_NODE=0
	if [ "$(id -u)" -eq 0 ]; then
		TELO_REAL_NODE=1
		real_auto=1
	else
		echo "test: not root, so no real node: its tests will be skipped (hack/cluster/README.md)"
	fi
fi
export TELO_REAL_NODE

step "cluster binaries"
# Chosen for the user (root, TELO_REAL_NODE unset), a real node that cannot be had here is not a
# failed test run: say so loudly, go on without it, and pytest lists its tests as skipped with why.
# TELO_REAL_NODE=1 makes it fatal.
without_real_node() {
	echo "test: WARNING: the real node could not be $1 (see above); the suite goes on without it" \
		"and its tests are skipped. TELO_REAL_NODE=1 makes this fatal." >&2
	TELO_REAL_NODE=0
	export TELO_REAL_NODE
}
if [ "$TELO_REAL_NODE" = 1 ]; then
	# containerd, runc, CNI plugins, busybox-static
	hack/install-deps.sh || { [ $real_auto = 1 ] && without_real_node installed; } || exit 1
fi
hack/build-tools.sh
source hack/cluster/lib.sh
started_here=0
real_started_here=0
if [ -z "$(component_pid kube-apiserver)" ]; then
	started_here=1
elif [ "$TELO_REAL_NODE" = 1 ] && [ -z "$(component_pid kubelet)" ]; then
	real_started_here=1
fi
cleanup() {
	[ -z "${TELO_KEEP_CLUSTER:-}" ] || return 0
	if [ $started_here -eq 1 ]; then
		step "stopping the cluster this run started (TELO_KEEP_CLUSTER=1 keeps it)"
		hack/cluster/down.sh
	elif [ $real_started_here -eq 1 ]; then
		step "stopping the real node this run started (TELO_KEEP_CLUSTER=1 keeps it)"
		hack/cluster/down.sh --real-node
	fi
}
trap cleanup EXIT
step "local cluster"
if ! hack/cluster/up.sh >/dev/null; then
	[ $real_auto = 1 ] && [ "$TELO_REAL_NODE" = 1 ] || exit 1
	hack/cluster/down.sh --real-node || true
	without_real_node started
	real_started_here=0
	hack/cluster/up.sh >/dev/null
fi
# The operator `make run` leaves running watches every namespace and would reconcile the tests'
# sessions too: stop it (make run starts it again).
if [ -f "$pid_dir/telo-operator.pid" ] && kill -0 "$(cat "$pid_dir/telo-operator.pid")" 2>/dev/null; then
	echo "stopping the operator make run started (pid $(cat "$pid_dir/telo-operator.pid"))"
	kill -TERM "$(cat "$pid_dir/telo-operator.pid")"
fi
# With the real node, the suite's operator and gateway run in-cluster, as users run them: this
# checkout's image (hack/image.sh) as pods on the real node, under config/rbac/'s ServiceAccount
# and the in-cluster config, with no 403 allowed (test/e2e/conftest.py). The ASan pass below runs
# them as local processes, so both ways stay tested.
if [ -z "${TELO_E2E_OPERATOR:-}" ]; then
	TELO_E2E_OPERATOR=process
	[ "$TELO_REAL_NODE" = 1 ] && TELO_E2E_OPERATOR=in-cluster
fi
step "e2e tests (operator and gateway: $TELO_E2E_OPERATOR)"
# The slowest tests are listed so the 45-minute budget can be watched from any CI log.
TELO_E2E_OPERATOR=$TELO_E2E_OPERATOR hack/e2e.sh --durations=25
# The churn suite (issue 21) runs two operator replicas as local processes, SIGKILLs them and
# steals their lease: in-cluster it is skipped, so it runs here on its own (its fast subset).
if [ "$TELO_E2E_OPERATOR" = in-cluster ]; then
	step "churn suite (operator replicas as local processes)"
	TELO_E2E_OPERATOR=process hack/e2e.sh test_churn.py
fi
# The flows that exercise most of the C code again, with the sanitizer build: ASan, UBSan and
# LeakSanitizer turn a memory error or a leak at exit into a failed test.
step "e2e tests with the ASan+UBSan binaries"
TELO_E2E_OPERATOR=process TELO_BIN_DIR="$root/$asan/bin" \
	hack/e2e.sh -m "not disruptive and not slow" \
	-k "kube_client or informer or controller_runtime or operator_metrics or sessions or image_builds or test_gateway or hostile or refused_writes or reachability or test_resume or session_limits"

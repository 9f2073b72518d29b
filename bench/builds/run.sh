#!/usr/bin/env bash
# Image builds on the real node: time from the client's apply to Running for a first build (a
# fresh import set, so a fresh tag), a cache hit (same imports, the image in the registry), and a
# shared in-flight build of 10 sessions (the same fresh imports applied at once: one Job), beside
# the same kaniko run by hand on the same context in the same run (the operator's Job pod
# template as a bare pod), and the operator's overhead over the builder itself, phase by phase.
# What each path is and how it is timed: bench/builds/bench.py's docstring and README.md.
#
#   bench/builds/run.sh      (TELO_BENCH_REPEATS=3, TELO_BENCH_SHARED=10 sessions,
#                             TELO_BENCH_OUT=results file; default
#                             bench/builds/results/builds-<UTC date>-<commit>[-<label>].json,
#                             the logs beside it in a directory of the same name;
#                             TELO_BENCH_OPERATOR=another telo-operator binary (an A/B run),
#                             TELO_BENCH_LABEL=a name for it in the results)
#
# Needs the real node (TELO_REAL_NODE=1 hack/cluster/up.sh, as root); starts the build registry
# (TELO_BUILD_REGISTRY=1 hack/cluster/up.sh), builds the kaniko executor and the images if this
# checkout has not (cached), and runs its own telo-operator from build/bin watching only the
# bench's namespace. On the shared cluster, run it under the e2e lock:
#   flock /tmp/telo-e2e.lock bench/builds/run.sh
# Several runs' results pool into one table: bench/builds/bench.py summary FILE...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
operator=${TELO_BENCH_OPERATOR:-$root/build/bin/telo-operator}
[ -x "$operator" ] || { echo "bench: build first (cmake --build build)" >&2; exit 1; }
label=${TELO_BENCH_LABEL:-}
kubeconfig=${TELO_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/cluster}/kubeconfig
refs_file=$(dirname "$kubeconfig")/real-node/images/refs.json
[ -f "$refs_file" ] || { echo "bench: no real node (TELO_REAL_NODE=1 hack/cluster/up.sh)" >&2; exit 1; }
for t in skopeo docker-registry htpasswd; do
	command -v "$t" >/dev/null || { echo "bench: needs $t" >&2; exit 1; }
done

TELO_BUILD_REGISTRY=1 hack/cluster/up.sh >/dev/null
# shellcheck source=../../hack/cluster/lib.sh
source hack/cluster/lib.sh
crd_install
hack/build-tools.sh kaniko >/dev/null
hack/images/build.sh telo-init telo-session-test kaniko >/dev/null
# This checkout's image references (refs.json holds whatever checkout built last).
refs=$(mktemp)
trap 'rm -f "$refs"' EXIT
{
	printf '{'
	sep=""
	for name in telo-init telo-session-test kaniko; do
		printf '%s"%s": "%s"' "$sep" "$name" "$(hack/images/build.sh --ref "$name")"
		sep=", "
	done
	printf '}\n'
} >"$refs"

commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
out=${TELO_BENCH_OUT:-$root/bench/builds/results/builds-$(date -u +%Y%m%dT%H%M%SZ)-$commit${label:+-$label}.json}
logs=${out%.json}
mkdir -p "$(dirname "$out")" "$logs"
venv=$(hack/install-deps.sh --venv)
echo "bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$venv/bin/python" bench/builds/bench.py run --kubeconfig "$kubeconfig" --operator "$operator" \
	--refs "$refs" --out "$out" --log-dir "$logs" --repeats "${TELO_BENCH_REPEATS:-3}" \
	--shared "${TELO_BENCH_SHARED:-10}" --metrics-port "${TELO_BENCH_OPERATOR_PORT:-16330}" --label "$label" |
	tee "$logs/summary.txt"
rc=${PIPESTATUS[0]}
echo "bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "bench: results in $out (logs: $logs)" >&2
exit "$rc"

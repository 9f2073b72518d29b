#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz/fuzz_<parser>.c) with clang, ASan and UBSan into
# build-fuzz/ and runs each for FUZZ_SECONDS over its corpus, FUZZ_JOBS (one per core) at a time
# (a target's run is single-process). Seeds and the inputs worth keeping are in
# test/fuzz/corpus/<parser>/; what a run finds goes to build-fuzz/corpus/<parser>/ and only
# enters the repository through --merge (minimised: only inputs that add coverage).
#
#   hack/fuzz.sh                    build, then run every target FUZZ_SECONDS (default 60)
#   hack/fuzz.sh TARGET...          only these (names without fuzz_: resize, ws_frame, ...)
#   hack/fuzz.sh --build            build only
#   hack/fuzz.sh --merge TARGET...  fold build-fuzz/corpus/<t> into test/fuzz/corpus/<t>
#
# Exit status: 0 when every run ended without a finding; 1 otherwise, with the crashing input in
# build-fuzz/crash-<target>-* and the run's log in build-fuzz/<target>.log. A finding's input is
# kept in test/fuzz/corpus/<target>/ (and test/fuzz/crashes/) once fixed, with a unit test.
# make test runs every target FUZZ_SMOKE_SECONDS (10); FUZZ_SECONDS=600 make fuzz is the long run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=build-fuzz
seconds=${FUZZ_SECONDS:-60}
cc=${FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
	sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
fi
if [ -z "$cc" ]; then
	echo "fuzz: clang not found; hack/install-deps.sh installs clang-14 and libclang-rt-14-dev" >&2
	exit 1
fi

build() {
	local gen=()
	command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
	cmake -S . -B "$out" "${gen[@]}" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DTELO_FUZZ=ON -DTELO_TESTS=OFF >/dev/null
	# Only the targets (and the library they link): the commands are not fuzzed, and clang's
	# warnings on them must not stop a fuzz run.
	local names=()
	for f in test/fuzz/fuzz_*.c; do names+=(--target "$(basename "$f" .c)"); done
	cmake --build "$out" --parallel "${names[@]}" >/dev/null
}

targets() {
	if [ $# -gt 0 ]; then
		printf '%s\n' "$@"
	else
		for f in test/fuzz/fuzz_*.c; do basename "$f" .c | sed 's/^fuzz_//'; done
	fi
}

if [ "${1:-}" = "--build" ]; then
	build
	exit 0
fi
if [ "${1:-}" = "--merge" ]; then
	shift
	for t in $(targets "$@"); do
		mkdir -p "test/fuzz/corpus/$t" "$out/corpus/$t"
		"$out/fuzz/fuzz_$t" -merge=1 "test/fuzz/corpus/$t" "$out/corpus/$t" >"$out/$t.merge.log" 2>&1
		echo "fuzz: $t: corpus now $(find "test/fuzz/corpus/$t" -type f | wc -l) inputs"
	done
	exit 0
fi

# run_one TARGET: one target's run; prints its line and returns 1 on a finding.
run_one() {
	local t=$1 bin="$out/fuzz/fuzz_$1"
	if [ ! -x "$bin" ]; then
		echo "fuzz: no target fuzz_$t (test/fuzz/fuzz_$t.c)" >&2
		return 1
	fi
	mkdir -p "test/fuzz/corpus/$t" "$out/corpus/$t"
	local log="$out/$t.log" result
	# New inputs go to the first directory (build-fuzz), seeds come from both. -rss_limit_mb
	# bounds a run on a shared machine; leaks are findings too, and so is one input that takes
	# longer than FUZZ_TIMEOUT seconds (a hang would otherwise outlast max_total_time). No
	# target reads stdin.
	# test/fuzz/dict/<target>.dict: the tokens and member names of the format, which the fuzzer
	# cannot discover from coverage inside json-c and libyaml (not instrumented).
	local dict=()
	[ -f "test/fuzz/dict/$t.dict" ] && dict=(-dict="test/fuzz/dict/$t.dict")
	local rc=0
	if "$bin" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=1024 \
		-timeout="${FUZZ_TIMEOUT:-30}" -artifact_prefix="$out/crash-$t-" "${dict[@]}" \
		"$out/corpus/$t" "test/fuzz/corpus/$t" </dev/null >"$log" 2>&1; then
		result=ok
	else
		result="FINDING (see $log and $out/crash-$t-*)"
		rc=1
	fi
	local execs rate last cov ft corp
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	# The last status line: cov (edges), ft (features) and corp (inputs/bytes) of the corpus.
	last=$(grep -E '^#[0-9]+.*(cov|corp):' "$log" | tail -1 || true)
	cov=$(grep -o 'cov: [0-9]*' <<<"$last" | cut -d' ' -f2 || true)
	ft=$(grep -o 'ft: [0-9]*' <<<"$last" | cut -d' ' -f2 || true)
	corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<<"$last" | cut -d' ' -f2 || true)
	echo "fuzz: $t: ${seconds}s, ${execs:-?} executions (${rate:-?} exec/s), cov ${cov:-?}" \
		"ft ${ft:-?}, corpus ${corp:-?} (inputs/size): $result"
	return $rc
}

build
# FUZZ_JOBS targets at a time (default: one per core); each run is one process.
jobs=${FUZZ_JOBS:-$(nproc)}
failed=0
running=0
for t in $(targets "$@"); do
	if [ "$running" -ge "$jobs" ]; then
		wait -n || failed=1
		running=$((running - 1))
	fi
	run_one "$t" &
	running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
	wait -n || failed=1
	running=$((running - 1))
done
exit $failed

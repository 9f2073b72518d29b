#!/usr/bin/env bash
# Runs every unit test binary under valgrind memcheck; any leak or memory error fails.
# Valgrind runs a program on one core, so VALGRIND_JOBS (2) binaries run at once.
set -euo pipefail
build=${1:-build}

# One binary: its log beside it, and on failure the first lines of valgrind's report.
check() {
	local t=$1
	if ! valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect,possible \
		--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
		"$t" >"$t.valgrind.log" 2>&1; then
		# One write for the whole report, so two binaries failing at once do not interleave it.
		# grep -m, not | head: under pipefail head's early exit would end the script (SIGPIPE).
		printf 'valgrind: %s FAILED; see %s.valgrind.log:\n%s\n' "$(basename "$t")" "$t" \
			"$(grep -m 40 -E '==[0-9]+==' "$t.valgrind.log" || true)" >&2
		return 1
	fi
}
export -f check

tests=()
for t in "$build"/test/test_*; do
	[ -x "$t" ] && [ -f "$t" ] && tests+=("$t")
done
# xargs exits 123 when any check failed; every binary still runs.
if printf '%s\0' "${tests[@]}" | xargs -0 -n 1 -P "${VALGRIND_JOBS:-2}" bash -c 'check "$1"' _; then
	echo "valgrind: ${#tests[@]} unit test binaries, no leaks or memory errors"
else
	exit 1
fi

#!/usr/bin/env bash
# Runs every unit test binary under valgrind memcheck; any leak or memory error fails.
set -euo pipefail
build=${1:-build}
status=0
for t in "$build"/test/test_*; do
	[ -x "$t" ] || continue
	if ! valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect,possible \
		--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
		"$t" >"$t.valgrind.log" 2>&1; then
		echo "valgrind: $(basename "$t") FAILED; see $t.valgrind.log:" >&2
		# grep -m, not | head: under pipefail head's early exit would end the script (SIGPIPE).
		grep -m 40 -E '==[0-9]+==' "$t.valgrind.log" >&2 || true
		status=1
	fi
done
[ $status -eq 0 ] && echo "valgrind: $(ls "$build"/test/test_* | grep -vc '\.log$') unit test binaries, no leaks or memory errors"
exit $status

#!/usr/bin/env bash
# Turns the results the benches already wrote into PNG plots (bench/report/README.md).
#
#   bench/report/run.sh [--out DIR] [--sessions DIR]... [--cache-memory FILE]...
#                       [--gateway FILE]... [--scale DIR]... [--builds FILE]... [--fanout FILE]...
#
# Without any of them it plots every bench/scale, bench/builds and bench/gateway fan-out result
# committed in the tree (bench/*/results), and finds the latest results on this machine: the
# benches' default results directories under ${TMPDIR:-/tmp} (telo-bench-sessions-*,
# telo-bench-cache-memory-*, telo-bench-gateway-*) and any other directory there holding a
# samples.json of bench/gateway/bench.py's format (TELO_BENCH_OUT runs). A bench with no results
# is said so and skipped: nothing is plotted that was not measured. The plots (default
# bench/report/plots/) come with SOURCES.md naming every file they were drawn from.
#
# matplotlib runs from a venv of its own (TELO_REPORT_VENV, default
# ~/.cache/telo-operator/report-venv), created on first use from PyPI with the versions pinned in
# bench/report/requirements.txt; the system python's packages are not used.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${TELO_REPORT_VENV:-$HOME/.cache/telo-operator/report-venv}
req="$root/bench/report/requirements.txt"
stamp="$venv/.telo-requirements"

if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$stamp"; then
	echo "report: creating $venv (matplotlib from PyPI, pinned in $req) ..." >&2
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
	cp "$req" "$stamp"
fi
exec "$venv/bin/python" "$root/bench/report/report.py" --root "$root" "$@"

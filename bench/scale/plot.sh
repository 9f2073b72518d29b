#!/usr/bin/env bash
# PNG curves of bench/scale results: bench/scale/plot.sh RESULTS_DIR... (default: every directory
# under bench/scale/results), into bench/scale/plots (TELO_SCALE_PLOTS). matplotlib comes from a
# venv of its own, ~/.cache/telo-operator/venv-plot (created on first use from PyPI).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${TELO_SCALE_PLOT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/telo-operator/venv-plot}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check matplotlib
fi
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=("$root"/bench/scale/results/*/)
files=()
for d in "${dirs[@]}"; do
	for f in "$d"/[0-9]*.json; do [ -e "$f" ] && files+=("$f"); done
done
[ ${#files[@]} -gt 0 ] || { echo "plot: no result files" >&2; exit 1; }
out=${TELO_SCALE_PLOTS:-$root/bench/scale/plots}
"$venv/bin/python" "$root/bench/scale/scale.py" plot "$out" "${files[@]}"
echo "plot: $(ls "$out"/*.png | wc -l) PNGs in $out" >&2

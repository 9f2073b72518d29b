#!/usr/bin/env bash
# The chart carries copies of crds/ and config/rbac/ (its crds/ and files/rbac/), not links: Helm
# warns on every link it follows, and GitOps tools that drop links (Flux's GitRepository) would
# render the chart with no CRD and no RBAC. crds/ and config/rbac/ stay the one source.
#
#   hack/sync-chart.sh          copy them into the chart
#   hack/sync-chart.sh --check  exit 1, naming the files, when the chart's copies differ (make lint)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/charts/telo-operator"
check=0
[ "${1:-}" = "--check" ] && check=1

pairs=()
for f in "$root"/crds/*.yaml; do pairs+=("$f" "$chart/crds/$(basename "$f")"); done
for f in "$root"/config/rbac/*.yaml; do pairs+=("$f" "$chart/files/rbac/$(basename "$f")"); done

stale=()
for ((i = 0; i < ${#pairs[@]}; i += 2)); do
	src=${pairs[i]} dst=${pairs[i + 1]}
	if [ -L "$dst" ] || ! cmp -s "$src" "$dst"; then
		stale+=("${dst#"$root"/}")
		[ $check = 1 ] || { mkdir -p "$(dirname "$dst")" && rm -f "$dst" && cp "$src" "$dst"; }
	fi
done
# A file the chart has that its source no longer has.
for dst in "$chart"/crds/*.yaml "$chart"/files/rbac/*.yaml; do
	[ -e "$dst" ] || continue
	case $dst in
	"$chart"/crds/*) src="$root/crds/$(basename "$dst")" ;;
	*) src="$root/config/rbac/$(basename "$dst")" ;;
	esac
	if [ ! -e "$src" ]; then
		stale+=("${dst#"$root"/} (no source)")
		[ $check = 1 ] || rm -f "$dst"
	fi
done
if [ $check = 1 ] && [ ${#stale[@]} -gt 0 ]; then
	echo "sync-chart: the chart's copies differ from crds/ and config/rbac/: ${stale[*]}; run hack/sync-chart.sh" >&2
	exit 1
fi
[ $check = 1 ] || [ ${#stale[@]} -eq 0 ] || echo "sync-chart: updated ${stale[*]}"

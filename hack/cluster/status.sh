#!/usr/bin/env bash
# Shows the local cluster's components: pid, RSS and health, then the nodes.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
printf '%-25s %-8s %-10s\n' COMPONENT PID RSS_MIB
for c in "${components[@]}"; do
	pid=$(component_pid "$c")
	if [ -n "$pid" ]; then
		printf '%-25s %-8s %-10s\n' "$c" "$pid" "$(($(ps -o rss= -p "$pid") / 1024))"
	else
		printf '%-25s %-8s %-10s\n' "$c" "-" "not running"
	fi
done
if [ -n "$(component_pid kube-apiserver)" ]; then
	echo
	kubectl_cmd get nodes -o wide
fi

#!/usr/bin/env bash
# Puts a telo-gateway on the bench's port, or none (bench/gateway/run.sh runs it through
# bench.py --before, untimed, before each attach):
#
#   gw-switch.sh STATE_DIR PORT off
#   gw-switch.sh STATE_DIR PORT BIN_DIR KUBECONFIG [GATEWAY FLAG...]
#
# Stops the gateway it started last (STATE_DIR/gw.pid) and waits for it to exit, then starts
# BIN_DIR/telo-gateway with KUBECONFIG on 127.0.0.1:PORT and waits for /readyz. A fresh gateway
# holds no upstream: the path timed next has only the streams the bench gives it.
set -euo pipefail
state=$1 port=$2 what=$3
if [ -f "$state/gw.pid" ]; then
	pid=$(cat "$state/gw.pid")
	rm -f "$state/gw.pid"
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
fi
[ "$what" = off ] && exit 0
kubeconfig=$4
shift 4
"$what/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$port" "$@" \
	>>"$state/gateway.log" 2>&1 &
echo $! >"$state/gw.pid"
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && exit 0
	sleep 0.05
done
echo "gw-switch: $what/telo-gateway not ready on port $port" >&2
exit 1

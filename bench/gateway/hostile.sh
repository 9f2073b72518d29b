#!/usr/bin/env bash
# The gateway under 2,000 hostile connections (issue 15, finding 4): a legitimate client's
# keystroke round trip, quiet and under the load, and the gateway's RSS, over
# TELO_BENCH_RUNS (3) runs of TELO_BENCH_KEYSTROKES (200) keystrokes each way. The load
# (bench/gateway/hostile.py): TELO_BENCH_IDLE (800) connections that never send a head,
# TELO_BENCH_AUTH (800) clients attached with the session's token that never read and ping,
# TELO_BENCH_UNAUTH (400) slots asking again and again with random tokens; all on loopback
# (127.0.1-3.x source addresses). Goals: RSS under 64 MiB, the p50 round trip under 2x quiet.
#
# Two sessions of the real node (the legitimate client's and the attacker's own) (TELO_REAL_NODE=1 hack/cluster/up.sh), its own telo-operator
# (watching only its namespace) and telo-gateway (RLIMIT_NOFILE 8192, --max-pending 4096 and
# --max-clients-per-session 1024, --max-clients-per-namespace 4096 so that it holds every hostile
# connection rather than refusing
# them: the worst case for its memory); removed on exit. Hold the e2e lock while it runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/gateway/lib.sh
bench_init hostile 16330
bench_namespace
(
	ulimit -n 8192
	exec "$bin/telo-gateway" --kubeconfig "$kubeconfig" --bind-address "127.0.0.1:$gw_port" \
		--max-pending 4096 --max-clients-per-session 1024 --max-clients-per-namespace 4096 \
		--log-level warn
) >"$out/gateway.log" 2>&1 &
gw_pid=$!
pids+=($gw_pid)
bench_start_operator
bench_wait_gateway
# bench: the legitimate client's session; attacker: the hostile tenant's own session, which its
# authenticated non-readers attach to (its token is theirs to use).
bench_sessions bench attacker
attach() { # session -> "url token"
	local url secret token
	url=$($kubectl get ts "$1" -n "$ns" -o jsonpath='{.status.attach.url}')
	secret=$(bench_attach_secret "$1")
	token=$($kubectl get secret "$secret" -n "$ns" -o jsonpath='{.data.token}' | base64 -d)
	[ -n "$url" ] && [ -n "$token" ] || { echo "bench: no status.attach on $1" >&2; exit 1; }
	echo "${url/http:/ws:} $token"
}
read -r url token < <(attach bench)
read -r attack_url attack_token < <(attach attacker)
echo "bench: session $ns/bench, gateway $url (pid $gw_pid), attacker's session $ns/attacker" >&2

echo "bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/result.txt" >&2
python3 bench/gateway/hostile.py --url "$url" --token "$token" --pid "$gw_pid" \
	--attack-url "$attack_url" --attack-token "$attack_token" \
	--runs "${TELO_BENCH_RUNS:-3}" --keystrokes "${TELO_BENCH_KEYSTROKES:-200}" \
	--idle "${TELO_BENCH_IDLE:-800}" --auth "${TELO_BENCH_AUTH:-800}" \
	--unauth "${TELO_BENCH_UNAUTH:-400}" | tee -a "$out/result.txt"
echo "bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/result.txt" >&2
curl -fsS "http://127.0.0.1:$gw_port/metrics" | grep -E '^telo_gateway_(limited|refusals|admission|pending|clients )' \
	>>"$out/result.txt" || true
echo "bench: results in $out" >&2

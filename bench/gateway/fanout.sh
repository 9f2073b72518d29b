#!/usr/bin/env bash
# Many clients on one gateway (issue 20): RSS per idle attached client, keystroke p50/p99 quiet
# and with a crowd attached, and 200 viewers of one session receiving a 10 MB burst (slowest
# over fastest). bench/gateway/fanout.py's docstring says how each figure is taken.
#
# The upstream is bench/gateway/standin.py (the API server's stand-in): 100 real pods do not fit
# beside the rest on this 2-core machine, and the stand-in keeps the API server, kubelet and
# runtime out of what is measured, which is the gateway's own cost. One real session of the real
# node (TELO_REAL_NODE=1 hack/cluster/up.sh) is run to take the objects the gateway reads as the
# cluster writes them; the stand-in serves TELO_BENCH_SESSIONS (100) copies of them, renamed
# (bench-0..) with their own uid, plus `solo` and `fan`. The script holds the e2e lock
# (/tmp/telo-e2e.lock) only while it uses the cluster: the measured part is on loopback alone.
#
#   TELO_BENCH_SESSIONS (100), TELO_BENCH_PER_SESSION (10), TELO_BENCH_VIEWERS (200),
#   TELO_BENCH_FLOOD (10000000), TELO_BENCH_RUNS (3), TELO_BENCH_KEYSTROKES (2000),
#   TELO_BENCH_RING (the gateway's --ring-bytes; its default when empty)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/gateway/lib.sh
bench_init fanout 16340
exec 9>/tmp/telo-e2e.lock
flock 9
bench_namespace
bench_start_operator
bench_sessions bench
$kubectl wait -n "$ns" telosessions.telo.run/bench --for=jsonpath='{.status.phase}'=Running --timeout=120s >/dev/null
sessions=${TELO_BENCH_SESSIONS:-100}
secret=$(bench_attach_secret bench)
pod=$($kubectl get telosessions.telo.run bench -n "$ns" -o jsonpath='{.status.podName}')
token=$($kubectl get secret "$secret" -n "$ns" -o jsonpath='{.data.token}' | base64 -d)
$kubectl get --raw "/apis/telo.run/v1alpha1/namespaces/$ns/telosessions/bench" >"$out/session.json"
$kubectl get --raw "/api/v1/namespaces/$ns/secrets/$secret" >"$out/secret.json"
$kubectl get --raw "/api/v1/namespaces/$ns/pods/$pod" >"$out/pod.json"
# Done with the cluster: the operator and the session go, and so does the lock.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
pids=()
$kubectl delete namespace "$ns" --wait=false >/dev/null
flock -u 9
exec 9>&-
# The copies: the same status (pod, Secret), their own name and uid, so the gateway holds one
# upstream per copy.
gets=(--get "/api/v1/namespaces/$ns/secrets/$secret=$out/secret.json"
	--get "/api/v1/namespaces/$ns/pods/$pod=$out/pod.json")
names=$(python3 - "$out" "$sessions" <<'PY'
import json, sys, uuid
out, n = sys.argv[1], int(sys.argv[2])
session = json.load(open(out + "/session.json"))
for name in ["bench-%d" % i for i in range(n)] + ["solo", "fan"]:
    session["metadata"]["name"] = name
    session["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, out + "/" + name))
    with open("%s/session-%s.json" % (out, name), "w") as f:
        json.dump(session, f)
    print(name)
PY
)
for name in $names; do
	gets+=(--get "/apis/telo.run/v1alpha1/namespaces/$ns/telosessions/$name=$out/session-$name.json")
done
bench_standin "$out" "${TELO_BENCH_STANDIN_PORT:-16342}" "${gets[@]}"
ring=()
[ -n "${TELO_BENCH_RING:-}" ] && ring=(--ring-bytes "$TELO_BENCH_RING")
# TELO_BENCH_GATEWAY_FLAGS: more flags for both gateways (e.g. --reauth-seconds 3600).
read -r -a ring_more <<<"${TELO_BENCH_GATEWAY_FLAGS:-}"
ring+=("${ring_more[@]}")
# Each run gets a fresh gateway: memory a process freed stays in its RSS, so only a fresh one
# shows what the clients cost.
ulimit -n 16384
switch="bench/gateway/gw-switch.sh $out $gw_port"
# The peer: a second gateway on the next port that only the timed terminal uses.
mkdir -p "$out/peer"
peer="bench/gateway/gw-switch.sh $out/peer $((gw_port + 1))"
trap '$switch off; $peer off; bench_cleanup' EXIT
runs=()
for run in $(seq 1 "${TELO_BENCH_RUNS:-3}"); do
	$peer "$bin" "$out/standin.kubeconfig" --log-level warn "${ring[@]}"
	$switch "$bin" "$out/standin.kubeconfig" --max-clients 8192 --max-clients-per-session 1024 \
		--max-clients-per-namespace 8192 --max-sessions-per-namespace 128 \
		--max-pending-per-ip 1024 --admission-rate 5000 --admission-burst 10000 \
		--admission-rate-per-ip 5000 --admission-burst-per-ip 10000 --log-level warn "${ring[@]}"
	python3 bench/gateway/fanout.py --port "$gw_port" --ns "$ns" --token "$token" \
		--pid "$(cat "$out/gw.pid")" --peer-port $((gw_port + 1)) --run "$run" \
		--sessions "$sessions" --per-session "${TELO_BENCH_PER_SESSION:-10}" \
		--viewers "${TELO_BENCH_VIEWERS:-200}" --flood "${TELO_BENCH_FLOOD:-10000000}" \
		--keystrokes "${TELO_BENCH_KEYSTROKES:-2000}" --json "$out/fanout-$run.json"
	runs+=("$out/fanout-$run.json")
done
python3 bench/gateway/fanout.py --summarize "${runs[@]}" --json "$out/fanout.json"
echo "bench: results in $out/fanout.json; gateway log $out/gateway.log" >&2

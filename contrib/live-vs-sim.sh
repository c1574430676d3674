#!/bin/sh
# live-vs-sim.sh: the live scheduler and the simulator agree. A generated
# trace is run twice on the same predictor (Llama-3 8B on one A100): by
# medha-sched --sim in virtual time, and live, replayed through medha-sched
# -l driving one sim worker (which sleeps each batch's predicted time).
# Every request must end with exactly one record; the per-request TTFTs
# are compared and the median relative difference printed (goal: under
# 10%). SPEED (default 1) compresses time in the live run: arrivals and
# batch times are divided by it and the live TTFTs multiplied back.
#
# usage: contrib/live-vs-sim.sh [BINDIR]   (N requests at QPS: $N 200, $QPS 4)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/bin}
n=${N:-200}
qps=${QPS:-4}
speed=${SPEED:-1}
tmp=$(mktemp -d)
addr=ipc://$tmp/r.sock
pids=
trap 'kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$bin/medha-trace" gen -n "$n" -q "$qps" -l 0 -s 3 --short-max 4096 \
    >"$tmp/trace.jsonl"
"$bin/medha-sched" --sim a100 -m llama3-8b "$tmp/trace.jsonl" >"$tmp/sim.jsonl"
"$bin/medha-sched" -l "$addr" 2>"$tmp/sched.log" &
pids="$pids $!"
"$bin/medha-worker" -s "$addr" --backend sim --gpu a100 -m llama3-8b \
    --speed "$speed" 2>"$tmp/worker.log" &
pids="$pids $!"
"$bin/medha-trace" replay -a "$addr" --speed "$speed" "$tmp/trace.jsonl" \
    >"$tmp/live.jsonl"
python3 - "$tmp/sim.jsonl" "$tmp/live.jsonl" "$speed" <<'PY'
import json, statistics, sys
sim = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    sim[r["id"]] = r
live = [json.loads(l) for l in open(sys.argv[2])]
speed = float(sys.argv[3])
ids = [r["id"] for r in live]
assert len(ids) == len(set(ids)), "a request with two records"
assert set(ids) == set(sim), "requests without a record"
assert all(r["status"] == "ok" for r in live), "a request did not complete"
d = sorted(abs(r["ttft"] * speed - sim[r["id"]]["ttft"]) / sim[r["id"]]["ttft"]
           for r in live)
print("%d requests, one record each; TTFT median: simulated %.3f s, live %.3f s"
      % (len(live), statistics.median(r["ttft"] for r in sim.values()),
         speed * statistics.median(r["ttft"] for r in live)))
print("per-request TTFT, live against simulated: median difference %.1f%%, "
      "p90 %.1f%% (goal: median under 10%%)"
      % (100 * statistics.median(d), 100 * d[int(0.9 * (len(d) - 1))]))
PY

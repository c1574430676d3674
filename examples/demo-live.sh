#!/usr/bin/env bash
# demo-live.sh: the live half of `make demo`. Starts a replica
# (examples/serve.sh single: medha-sched and one cpu medha-worker on
# SmolLM2-135M-Instruct), replays a short generated trace of real text
# prompts through it (examples/prompts.txt, Poisson arrivals), prints the
# first line of each answer and the report, and stops the replica.
#
# usage: examples/demo-live.sh [BINDIR]   (N requests: $DEMO_N, default 12)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/bin}
n=${DEMO_N:-12}
tmp=$(mktemp -d)
export MEDHA_BIN=$bin MEDHA_ADDR=ipc://$tmp/demo.sock MEDHA_LOG=$tmp/logs
bash "$top/examples/serve.sh" single 2>"$tmp/serve.err" &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$tmp"' EXIT
until grep -qx ready "$tmp/serve.err"; do
	kill -0 $serve 2>/dev/null || { cat "$tmp/serve.err"; exit 1; }
	sleep 0.2
done
echo "demo: replica ready at $MEDHA_ADDR; replaying $n requests (1 a second)" >&2
"$bin/medha-trace" gen -n "$n" -q 1 -l 0 -s 1 --max-tokens 48 \
    --prompts "$top/examples/prompts.txt" >"$tmp/trace.jsonl"
"$bin/medha-trace" replay -a "$MEDHA_ADDR" --text "$tmp/trace.jsonl" \
    >"$tmp/records.jsonl"
python3 - "$tmp/trace.jsonl" "$tmp/records.jsonl" <<'PY'
import json, sys
prompt = {json.loads(l)["id"]: json.loads(l)["prompt"] for l in open(sys.argv[1])}
recs = sorted((json.loads(l) for l in open(sys.argv[2])), key=lambda r: int(r["id"]))
for r in recs:
    first = " ".join((r.get("text") or "").split())[:60]
    print("%3s %-40.40s -> %s (%d tokens, %s)" % (r["id"], prompt[r["id"]],
          first, r["output_tokens"], r.get("finish_reason") or r["status"]))
PY
"$bin/medha-trace" report "$tmp/records.jsonl"
cp "$tmp/records.jsonl" "${DEMO_RECORDS:-live-records.jsonl}"

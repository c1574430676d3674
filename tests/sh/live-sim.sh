#!/bin/sh
# live-sim.sh: a live replica with a sim worker (examples/serve.sh sim)
# ends every request of a 300-request trace (short and long prompts, some
# too long for its memory) with exactly one record, at 20x speed. The
# TTFT comparison with medha-sched --sim is contrib/live-vs-sim.sh (a
# benchmark: it depends on timing).
. "$(dirname "$0")/lib.sh"
addr=ipc://$tmp/r.sock
serve_start sim 30 MEDHA_ADDR="$addr" MEDHA_LOG="$tmp/logs" \
    MEDHA_WORKER_OPTS="--speed 20"
"$bin/medha-trace" gen -n 300 -q 10 -l 0.02 --long-max 3000000 -s 7 \
    >"$tmp/trace.jsonl"
"$bin/medha-trace" replay -a "$addr" --speed 20 "$tmp/trace.jsonl" \
    >"$tmp/live.jsonl"
python3 - "$tmp/trace.jsonl" "$tmp/live.jsonl" <<'PY'
import json, sys
trace = [json.loads(l) for l in open(sys.argv[1])]
live = [json.loads(l) for l in open(sys.argv[2])]
ids = [str(r["id"]) for r in live]
assert len(ids) == len(set(ids)), "a request with two records"
assert set(ids) == set(str(t["id"]) for t in trace), "requests lost"
st = {}
for r in live:
    st[r["status"]] = st.get(r["status"], 0) + 1
    if r["status"] == "ok":
        t = next(x for x in trace if str(x["id"]) == str(r["id"]))
        assert r["output_tokens"] == t["max_tokens"], r
        assert r["prompt_tokens"] == t["prompt_tokens"], r
print("%d requests, one record each: %s" % (len(live), st))
PY

#!/bin/sh
# preempt-long.sh: the Medha paper's promise to long requests under
# memory on demand (issue 35, acceptance 3), in the simulator. A mixed
# trace (5% prompts of 128K-200K tokens) with large caps (the context,
# 262144, less each prompt) on a KV pool too small for it (40000 blocks
# of 16 tokens): --reserve est preempts short requests, yet never one
# whose prompt has --preempt-below tokens or more (the records'
# "preemptions"), every request ends in one record, "ok", and the -v
# summary counts the records' preemptions.
. "$(dirname "$0")/lib.sh"

"$bin/medha-trace" gen -n 300 -q 30 -l 0.05 -s 2 --long-max 200000 \
    --max-tokens-policy context --context 262144 >"$tmp/trace"
"$bin/medha-sched" -v --sim h100 -m llama3-8b --tp 8 --spp 2 \
    --reserve est --preempt-below 131072 --kv-blocks 40000 \
    "$tmp/trace" >"$tmp/rec" 2>"$tmp/err" ||
    { cat "$tmp/err"; echo "medha-sched failed"; exit 1; }
python3 - "$tmp/trace" "$tmp/rec" "$tmp/err" <<'PY'
import json, re, sys
trace = [json.loads(l) for l in open(sys.argv[1])]
recs = [json.loads(l) for l in open(sys.argv[2])]
err = open(sys.argv[3]).read()
assert sorted(r["id"] for r in recs) == sorted(t["id"] for t in trace), \
    "not one record per request"
bad = [r["id"] for r in recs if r["status"] != "ok"]
assert not bad, "requests not ok: %s" % bad
longs = [r for r in recs if r["prompt_tokens"] >= 131072]
assert len(longs) >= 5, "only %d long requests in the trace" % len(longs)
hit = [(r["id"], r["prompt_tokens"]) for r in longs if r.get("preemptions")]
assert not hit, "long requests preempted: %s" % hit
n = sum(r.get("preemptions", 0) for r in recs)
assert n > 0, "no preemption: the pool is no pressure"
m = re.search(r"reserve est, (\d+) preemptions", err)
assert m and int(m.group(1)) == n, \
    "summary says %s, records %d" % (m and m.group(1), n)
print("%d preemptions of %d short requests, none of %d long" % (
    n, sum(1 for r in recs if r.get("preemptions")), len(longs)))
PY

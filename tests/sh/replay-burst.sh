#!/bin/sh
# replay-burst.sh: medha-trace replay sends requests due at the same time
# together, not each after the answer to the one before: against
# tests/tools/slow_sched, a scheduler that holds every SUBMIT 100 ms
# before it accepts it, eight requests of arrival 0 must all reach it
# within 50 ms (one after another they would take 700 ms), and each gets
# its one record.
. "$(dirname "$0")/lib.sh"
addr=ipc://$tmp/s.sock
"$tools/slow_sched" "$addr" 8 100 >"$tmp/spread" 2>"$tmp/sched.err" &
sched=$!
for i in 0 1 2 3 4 5 6 7; do
	echo "{\"id\": \"r$i\", \"arrival\": 0, \"prompt_tokens\": 4, \"max_tokens\": 1}"
done >"$tmp/trace.jsonl"
"$bin/medha-trace" replay -a "$addr" "$tmp/trace.jsonl" >"$tmp/out.jsonl"
wait "$sched" || { cat "$tmp/sched.err"; exit 1; }
python3 - "$tmp/spread" "$tmp/out.jsonl" <<'PY'
import json, sys
spread = float(open(sys.argv[1]).read().split()[1])
out = [json.loads(l) for l in open(sys.argv[2])]
assert sorted(r["id"] for r in out) == ["r%d" % i for i in range(8)], out
assert all(r["status"] == "ok" for r in out), out
assert spread < 50, "8 SUBMITs due at once reached the scheduler over %.1f ms" % spread
print("8 requests due at once: SUBMITs within %.1f ms, one record each" % spread)
PY

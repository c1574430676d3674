#!/bin/sh
# progress-live.sh: the prefill progress guarantee on the live replica
# (medha-sched -l and a cpu medha-worker, SmolLM2; medha-sched(1)).
# Three requests (64-token prompts) decode 400 tokens each (ignore_eos)
# under a 1 ms batch-time target, which their decodes alone fill on any
# CPU, so no prefill chunk fits beside them by the target; a short
# request (a 24-token prompt: its first chunk is its whole prompt and
# gives its first token) arrives while they decode. It must get its
# first token within two batches of arriving: its TTFT at most twice
# the longest gap between the long requests' tokens (the batch in flight
# when it came, then the batch with its chunk) plus 50 ms for the trip
# from the replay, and it must finish before any of them; the router's
# /metrics counts the batches that ran over the target so
# (medha_progress_batches_total). Without the guarantee it waited for
# them to end (4.6 s here; 46.7 s with longer prompts on a loaded CPU).
# The forced target, not the machine's speed, makes the case, so that a
# loaded 2-core machine runs it as well as an idle one. Needs
# contrib/fetch-refs.sh (the real model).
. "$(dirname "$0")/lib.sh"
need_model
addr=ipc://$tmp/r.sock

python3 - "$tmp/trace.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
ids = lambda n: [rng.randrange(100, 40000) for _ in range(n)]
reqs = [{"id": "long%d" % i, "arrival": 0, "prompt_ids": ids(64),
         "max_tokens": 400, "ignore_eos": True} for i in range(3)]
reqs.append({"id": "short", "arrival": 4, "prompt_ids": ids(24),
             "max_tokens": 4, "ignore_eos": True})
with open(sys.argv[1], "w") as f:
    for r in reqs:
        f.write(json.dumps(r) + "\n")
PY

port=$(free_port)
serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
    MEDHA_HTTP="127.0.0.1:$port" MEDHA_LOG="$tmp/logs" \
    MEDHA_SCHED_OPTS="--target-batch-time 0.001"
"$bin/medha-trace" replay -a "$addr" --token-ids "$tmp/trace.jsonl" \
    >"$tmp/rec.jsonl"
# the batches that ran over the target so, counted (the router's STATUS
# of the replica is 0.1 s old at most)
sleep 0.5
python3 - "$port" <<'PY' >"$tmp/progress"
import sys, urllib.request
m = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1],
                           timeout=10).read().decode()
print([int(l.split()[-1]) for l in m.splitlines()
       if l.startswith("medha_progress_batches_total{")][0])
PY
serve_stop
[ "$(cat "$tmp/progress")" -ge 1 ] ||
    { echo "medha_progress_batches_total: $(cat "$tmp/progress")"; exit 1; }
echo "progress-live: $(cat "$tmp/progress") batches over the target"

python3 - "$tmp/rec.jsonl" <<'PY'
import json, sys
rec = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
assert len(rec) == 4 and all(r["status"] == "ok" for r in rec.values()), rec
longs = [rec["long%d" % i] for i in range(3)]
s = rec["short"]
gap = max(r["tpot_max"] for r in longs)
bound = 2 * gap + 0.05
print("progress-live: short request's TTFT %.3f s, bound %.3f s (longest "
      "gap %.3f s); long requests end at %.2f s, the short one at %.2f s"
      % (s["ttft"], bound, gap, min(r["finish"] for r in longs),
         s["finish"]))
# it came while all three decoded
assert all(r["first_token"] < s["arrival"] for r in longs), \
    ([r["first_token"] for r in longs], s["arrival"])
assert s["ttft"] <= bound, (s["ttft"], bound)
assert s["finish"] < min(r["finish"] for r in longs), s
assert s["output_tokens"] == 4 and all(r["output_tokens"] == 400
                                       for r in longs), (s, longs)
PY
echo ok

#!/bin/sh
# sched-sim.sh: the simulator end to end: one record per request for every
# policy and chunking, zstd in and out, a batch log that follows its
# format, rejected requests reported, not dropped, output that does
# not depend on the input's compression, and sarathi: fcfs's records with
# one stage, a fixed budget only. A trace's output_tokens below its
# min_tokens ends the request at min_tokens (its end of generation
# cannot be drawn before).
. "$(dirname "$0")/lib.sh"
ms=$bin/medha-sched
mt=$bin/medha-trace

"$mt" gen -q 2 -n 300 -l 0.05 -s 9 > "$tmp/trace"
"$mt" gen -q 2 -n 300 -l 0.05 -s 9 -o "$tmp/trace.zst"
ids=$(python3 -c 'import json,sys; print(" ".join(sorted(str(json.loads(l)["id"]) for l in open(sys.argv[1]))))' "$tmp/trace")

for pc in "fcfs 512" "fcfs 2048" "edf adaptive" "lrs adaptive" "medha adaptive" "sarathi 512"; do
	set -- $pc
	"$ms" --sim a100 -m llama3-8b --tp 8 --spp 2 -p "$1" -c "$2" \
	    "$tmp/trace" > "$tmp/rec"
	got=$(python3 -c 'import json,sys; print(" ".join(sorted(str(json.loads(l)["id"]) for l in open(sys.argv[1]))))' "$tmp/rec")
	[ "$got" = "$ids" ] || { echo "$pc: records do not match requests"; exit 1; }
	python3 - "$tmp/rec" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert r["status"] == "ok", r
    assert r["first_token"] >= r["arrival"] and r["finish"] >= r["first_token"], r
PY
done

# sarathi: with one stage, fcfs with the same budget, record for record;
# 512 tokens unless told; never adaptive
"$ms" --sim a100 -m llama3-8b --tp 8 -p fcfs -c 512 "$tmp/trace" > "$tmp/f1"
"$ms" --sim a100 -m llama3-8b --tp 8 -p sarathi "$tmp/trace" > "$tmp/s1"
cmp "$tmp/f1" "$tmp/s1"
st=0
"$ms" --sim a100 -m llama3-8b -p sarathi -c adaptive "$tmp/trace" \
    > /dev/null 2> "$tmp/err" || st=$?
[ "$st" -eq 2 ] && grep -q 'sarathi takes a fixed token budget' "$tmp/err" ||
    { echo "sarathi -c adaptive: status $st"; cat "$tmp/err"; exit 1; }

# zstd in gives the same records; zstd out decompresses to them
"$ms" --sim h100 -m llama3-70b --tp 8 --spp 4 --kvp 2 --kvp-max-tokens 131072 \
    "$tmp/trace" > "$tmp/a"
"$ms" --sim h100 -m llama3-70b --tp 8 --spp 4 --kvp 2 --kvp-max-tokens 131072 \
    -o "$tmp/b.zst" < "$tmp/trace.zst"
zstd -dcq "$tmp/b.zst" > "$tmp/b"
cmp "$tmp/a" "$tmp/b"

# batch log: "time latency decodes id:chunk:kv ..." with chunks adding up
"$ms" --sim a100 -m llama3-8b --tp 8 --spp 2 -b "$tmp/log" "$tmp/trace" > /dev/null
python3 - "$tmp/log" "$tmp/trace" <<'PY'
import json, sys
done = {}
last = -1.0
for l in open(sys.argv[1]):
    f = l.split()
    t, lat, nd = float(f[0]), float(f[1]), int(f[2])
    assert t >= last and lat > 0 and nd >= 0, l
    last = t
    for item in f[3:]:
        rid, chunk, kv = item.rsplit(":", 2)
        assert int(kv) == done.get(rid, 0), (l, rid)
        done[rid] = done.get(rid, 0) + int(chunk)
want = {str(json.loads(l)["id"]): json.loads(l)["prompt_tokens"] for l in open(sys.argv[2])}
assert done == want, "prefill chunks do not add up to the prompts"
PY

# too long for the replica's KV memory: a rejected record, a warning
printf '{"id":"a","arrival":0,"prompt_tokens":100,"max_tokens":4}\n{"id":"b","arrival":0.1,"prompt_tokens":900000,"max_tokens":4}\n' |
    "$ms" --sim a100 -m llama3-8b --tp 8 --kv-blocks 1000 > "$tmp/rej" 2> "$tmp/err"
grep -q '"id": "b".*"status": "rejected"' "$tmp/rej"
grep -q '"id": "a".*"status": "ok"' "$tmp/rej"
grep -q 'request b' "$tmp/err"

# h200: 141 GB hold a 600K-token request's KV (79 GB) beside Llama-3 8B
# on one GPU, where the h100's 80 GB cannot; a profile measured on the
# GPU (medha-prof --backend cuda) times its batches, as a cpu one does
printf '{"id":"big","arrival":0,"prompt_tokens":600000,"max_tokens":2}\n' > "$tmp/big"
"$ms" --sim h100 -m llama3-8b "$tmp/big" > "$tmp/h100" 2> /dev/null
"$ms" --sim H200 -m llama3-8b "$tmp/big" > "$tmp/h200"
grep -q '"status": "rejected"' "$tmp/h100"
grep -q '"status": "ok"' "$tmp/h200"
printf '# medha-profile v1 model=llama3-8b gpu=h200 tp=1 backend=cuda\nop,tokens,kv,time_us\nlinear,1,0,40\nlinear,8192,0,4000\n' > "$tmp/prof.csv"
printf '{"id":"a","arrival":0,"prompt_tokens":4096,"max_tokens":2}\n' > "$tmp/one"
"$ms" --sim h200 -m llama3-8b -c 4096 "$tmp/one" > "$tmp/an"
"$ms" --sim h200 -m llama3-8b -c 4096 --profile "$tmp/prof.csv" "$tmp/one" > "$tmp/pr"
ttft() { python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(r["first_token"]-r["arrival"])' "$1"; }
python3 -c 'import sys; a, p = float(sys.argv[1]), float(sys.argv[2]); assert p < a, (a, p)' \
    "$(ttft "$tmp/an")" "$(ttft "$tmp/pr")"
st=0
"$ms" --sim b200 -m llama3-8b "$tmp/one" > /dev/null 2> "$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q 'a100, h100, h200' "$tmp/err"
# min_tokens: output_tokens 5 ends a request at 10 with min_tokens 10
printf '{"id":"m","arrival":0,"prompt_tokens":50,"max_tokens":20,"output_tokens":5,"min_tokens":10}\n{"id":"n","arrival":0,"prompt_tokens":50,"max_tokens":20,"output_tokens":5}\n' > "$tmp/min"
"$ms" --sim h100 -m llama3-8b "$tmp/min" > "$tmp/minrec"
python3 - "$tmp/minrec" <<'PY'
import json, sys
r = {x["id"]: x for x in map(json.loads, open(sys.argv[1]))}
assert r["m"]["output_tokens"] == 10 and r["m"]["finish_reason"] == "stop", r
assert r["n"]["output_tokens"] == 5, r
PY

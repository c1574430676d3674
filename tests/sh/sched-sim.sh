#!/bin/sh
# sched-sim.sh: the simulator end to end: one record per request for every
# policy and chunking, zstd in and out, a batch log that follows its
# format, rejected requests reported, not dropped, output that does
# not depend on the input's compression, and sarathi: fcfs's records with
# one stage, a fixed budget only.
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

#!/bin/sh
# prefix-sim.sh: prefix caching in simulation, end to end.
#  - medha-trace gen's shared-prefix workloads: deterministic; the stream
#    of first turns is the trace gen writes without the flags; every
#    turn's prompt is its segments, the conversation so far; system
#    prompts are shared by the fraction asked; questions about one
#    document name it and arrive within -t;
#  - medha-sched --sim: the questions about a 1M-token document on
#    Llama-3 8B, 16 H100 (tp 8, spp 2): after the first, median TTFT under
#    1 s with the cache, not without; --no-prefix-cache records say no
#    cached tokens; the long-context decodes keep their TPOT SLO;
#  - memory pressure: distinct prefixes 10x the KV pool, every request
#    ok, evictions counted (-v);
#  - medha-trace report's prefix cache table and JSON.
. "$(dirname "$0")/lib.sh"

gen="$bin/medha-trace gen"
$gen -n 200 -l 0 -s 5 >"$tmp/base"
$gen -n 200 -l 0 -s 5 --turns 4 --system-prompts 5 --system-fraction 0.5 \
    --think 20 >"$tmp/chat"
$gen -n 200 -l 0 -s 5 --turns 4 --system-prompts 5 --system-fraction 0.5 \
    --think 20 >"$tmp/chat2"
cmp -s "$tmp/chat" "$tmp/chat2" || { echo "same seed, different traces"; exit 1; }
$gen --doc-tokens 1000000 --questions 32 -t 600 -s 2 >"$tmp/doc"
python3 - "$tmp/base" "$tmp/chat" "$tmp/doc" <<'PY'
import json, sys
base = [json.loads(l) for l in open(sys.argv[1])]
chat = [json.loads(l) for l in open(sys.argv[2])]
doc = [json.loads(l) for l in open(sys.argv[3])]
assert [r["id"] for r in chat] == list(range(len(chat))), "ids"
first = {}
for r in chat:
    segs = r["prefix"]
    names = [s[0] for s in segs]
    conv = [n for n in names if n.startswith("c")]
    assert conv[-1].endswith(".u%d" % ((len(conv) + 1) // 2)), names
    assert sum(s[1] for s in segs) == r["prompt_tokens"], r
    if len(conv) == 1:
        first[int(conv[0][1:].split(".")[0])] = r
# the first turns are the base stream, a system prompt put before some
assert len(first) == len(base), (len(first), len(base))
sys_n = 0
for i, b in enumerate(base):
    f = first[i]
    own = f["prompt_tokens"] - (1000 if f["prefix"][0][0].startswith("sys") else 0)
    sys_n += f["prefix"][0][0].startswith("sys")
    assert own == b["prompt_tokens"] and f["arrival"] == b["arrival"], (f, b)
    assert f["max_tokens"] == b["max_tokens"], (f, b)
assert 0.35 < sys_n / len(base) < 0.65, sys_n
assert len(chat) > 2 * len(base), len(chat)
# a turn's prompt starts with the previous turn's
by = {}
for r in chat:
    c = [s for s in r["prefix"] if s[0].startswith("c")][0][0].split(".")[0]
    prev = by.get(c)
    if prev is not None:
        assert r["prefix"][:len(prev["prefix"])] == prev["prefix"], (prev, r)
        assert r["arrival"] >= prev["arrival"]
    by[c] = r
assert len(doc) == 32
for r in doc:
    assert r["prefix"] == [["doc", 1000000]], r
    assert 1000000 < r["prompt_tokens"] <= 1008192 and 0 <= r["arrival"] < 600
PY

# usage errors
for args in "--doc-tokens 10 -n 3" "--turns 2 --base $tmp/base" \
    "--doc-tokens 10 --turns 2" "--turns 0"; do
	st=0
	$gen $args >/dev/null 2>&1 || st=$?
	[ "$st" = 2 ] || { echo "gen $args: status $st"; exit 1; }
done

# 32 questions about a 1M-token document over 10 minutes
sim="$bin/medha-sched --sim h100 -m llama3-8b --tp 8 --spp 2"
$sim -v "$tmp/doc" >"$tmp/on" 2>"$tmp/on.err"
$sim --no-prefix-cache "$tmp/doc" >"$tmp/off"
grep -q 'prefix cache: 31 of 32 admissions hit' "$tmp/on.err" ||
    { cat "$tmp/on.err"; exit 1; }
python3 - "$tmp/on" "$tmp/off" <<'PY'
import json, statistics, sys
on = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["arrival"])
off = sorted((json.loads(l) for l in open(sys.argv[2])), key=lambda r: r["arrival"])
assert all(r["status"] == "ok" for r in on + off)
assert all("cached_tokens" not in r for r in off)
assert "cached_tokens" not in on[0]
assert sum(r.get("cached_tokens", 0) for r in on) >= 25 * 1000000
med_on = statistics.median(r["ttft"] for r in on[1:])
med_off = statistics.median(r["ttft"] for r in off[1:])
assert med_on < 1, med_on
assert med_off > 10, med_off
# the long-context decodes hold their TPOT SLO
assert all(r["tpot_mean"] <= r["tpot_slo"] for r in on if r["output_tokens"] > 1)
PY
"$bin/medha-trace" report "$tmp/on" >"$tmp/rep"
awk '$1 == "all" && NF == 6 { ok = $5 == 31 } END { exit !ok }' "$tmp/rep" ||
    { cat "$tmp/rep"; echo "report: no hits line"; exit 1; }
"$bin/medha-trace" report "$tmp/off" | grep -q hit_rate &&
    { echo "report: a cache table without cached tokens"; exit 1; }
"$bin/medha-trace" report --json "$tmp/on" | python3 -c '
import json, sys
p = json.load(sys.stdin)["all"]["prefix_cache"]
assert p["hits"] == 31 and abs(p["hit_rate"] - 31 / 32) < 1e-9, p'

# memory pressure: 3000 requests on 2000 system prompts of 2000 tokens
# against a pool of 15000 blocks of 16 (240K tokens)
$gen -n 3000 -q 20 -l 0 -s 9 --system-prompts 2000 --system-tokens 2000 \
    >"$tmp/press"
$sim -v --kv-blocks 15000 "$tmp/press" >"$tmp/press.out" 2>"$tmp/press.err"
python3 - "$tmp/press.out" "$tmp/press.err" "$tmp/press" <<'PY'
import json, re, sys
trace = [json.loads(l) for l in open(sys.argv[3])]
distinct = len({r["prefix"][0][0] for r in trace}) * 2000
assert distinct >= 10 * 15000 * 16, distinct
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 3000 and all(r["status"] == "ok" for r in recs)
err = open(sys.argv[2]).read()
m = re.search(r"prefix cache: (\d+) of (\d+) admissions hit, (\d+) tokens; "
              r"(\d+) blocks cached, (\d+) evicted", err)
assert m, err
hits, q, tok, cached, evicted = map(int, m.groups())
# (a preempted request asks again when it is admitted again)
assert q >= 3000 and hits > 0 and evicted > 0, m.groups()
PY
echo ok

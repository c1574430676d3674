#!/bin/sh
# prefix-live.sh: prefix caching on the live replica (medha-sched -l and a
# cpu medha-worker, SmolLM2): 64 greedy requests of token ids sharing four
# system prompts and the turns of sixteen conversations, arriving 40 ms
# apart so that many run at once, give exactly the tokens they give with
# --no-prefix-cache, and the cache served some of their prompts (records'
# cached_tokens): on one worker, and on the topologies of
# MEDHA_PREFIX_TOPOS (default "kvp2"; "tp2 spp2 kvp2" for all of
# examples/serve.sh's). Then 16 questions after a shared 2000-token
# prefix, one a second: each after the first takes the whole prefix from
# the cache (the second waits for the first's prefill rather than
# computing it twice), and their median TTFT is at most 15% of the
# first's. Needs contrib/fetch-refs.sh (the real model).
. "$(dirname "$0")/lib.sh"
need_model
addr=ipc://$tmp/r.sock

python3 - "$tmp/trace.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
ids = lambda n: [rng.randrange(100, 40000) for _ in range(n)]
sys_p = [ids(n) for n in (37, 100, 161, 250)]
convs = [(sys_p[c % 4], []) for c in range(16)]
reqs = []
for turn in range(4):
    for c, (sp, hist) in enumerate(convs):
        user = ids(rng.randrange(5, 60))
        prompt = sp + hist + user
        reqs.append({"id": "c%d.t%d" % (c, turn), "prompt_ids": prompt,
                     "max_tokens": 6, "ignore_eos": True})
        hist += user + ids(6)  # the reply, as the client quotes it
for i, r in enumerate(reqs):
    r["arrival"] = 0.04 * i
with open(sys.argv[1], "w") as f:
    for r in reqs:
        f.write(json.dumps(r) + "\n")
PY

run() { # TOPO NAME SCHED_OPTS: the trace through a fresh topology
	if [ "$1" = single ]; then
		serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
		    MEDHA_LOG="$tmp/logs.$2" MEDHA_SCHED_OPTS="$3"
		a=$addr
	else
		a=ipc://$tmp/router.sock
		serve_start "$1" 90 MEDHA_ROUTER="$a" MEDHA_MODEL="$model" \
		    MEDHA_LOG="$tmp/logs.$1.$2" MEDHA_SCHED_OPTS="$3"
	fi
	"$bin/medha-trace" replay -a "$a" --token-ids "$tmp/trace.jsonl" \
	    >"$tmp/$1.$2.jsonl"
	serve_stop
}
for topo in single ${MEDHA_PREFIX_TOPOS-kvp2}; do
run "$topo" on ""
run "$topo" off --no-prefix-cache
python3 - "$tmp/$topo.on.jsonl" "$tmp/$topo.off.jsonl" "$topo" <<'PY'
import json, sys
on = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
off = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
assert len(on) == 64 and set(on) == set(off), (len(on), len(off))
for k in on:
    assert on[k]["status"] == "ok" and off[k]["status"] == "ok", (on[k], off[k])
    assert on[k]["token_ids"] == off[k]["token_ids"], (k, on[k], off[k])
    assert "cached_tokens" not in off[k], off[k]
hits = [r for r in on.values() if r.get("cached_tokens", 0) > 0]
assert len(hits) >= 32, len(hits)
print("prefix-live %s: %d of 64 hit, %d prompt tokens cached, tokens "
      "as without" % (sys.argv[3], len(hits),
      sum(r["cached_tokens"] for r in hits)), file=sys.stderr)
PY
done

python3 - "$tmp/doc.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
doc = [rng.randrange(100, 40000) for _ in range(2000)]
with open(sys.argv[1], "w") as f:
    for i in range(16):
        q = [rng.randrange(100, 40000) for _ in range(20)]
        f.write(json.dumps({"id": "q%d" % i, "arrival": float(i),
            "prompt_ids": doc + q, "max_tokens": 8,
            "ignore_eos": True}) + "\n")
PY
serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
    MEDHA_LOG="$tmp/logs.doc"
"$bin/medha-trace" replay -a "$addr" "$tmp/doc.jsonl" >"$tmp/doc.out"
serve_stop
python3 - "$tmp/doc.out" <<'PY'
import json, statistics, sys
r = sorted(map(json.loads, open(sys.argv[1])), key=lambda x: x["arrival"])
assert all(x["status"] == "ok" for x in r) and len(r) == 16
assert [x.get("cached_tokens", 0) for x in r] == [0] + [2000] * 15, r
first, rest = r[0]["ttft"], statistics.median(x["ttft"] for x in r[1:])
print("prefix-live: first TTFT %.3f s, median of the other 15 %.3f s "
      "(%.1f%%)" % (first, rest, 100 * rest / first), file=sys.stderr)
assert rest <= 0.15 * first, (first, rest)
PY
echo ok

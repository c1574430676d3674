#!/bin/sh
# moe-metrics.sh: the operator's view of a mixture of experts (issue 41,
# item 6): the router's /metrics counts the tokens routed to each expert
# (medha_expert_tokens_total, from the workers' RESULTs through the
# replica's STATUS) and their imbalance (medha_expert_load_imbalance).
# A random qwen3moe (tests/ref/arch_model.py: 3 layers, all routed, 16
# experts, top-4) serves four greedy requests of P prompt tokens and N
# output tokens each; every token run (P + N - 1 a request: the last
# one sampled is never fed) chooses 4 experts on each of the 3 layers,
# so the counts sum to 12 (P + N - 1) over the requests, exactly, on one
# worker, on tp2 (both ranks route every token: one counts) and on spp2
# (each stage counts its layers). The workers run no step ahead
# (--no-lookahead), which would count a step the scheduler never asks
# for; distinct random prompts, so no prefix is cached. Needs the cache
# (SmolLM2's tokenizer, the venv with numpy and gguf); skips without it.
. "$(dirname "$0")/lib.sh"
need_model "$smollm2"
need_py numpy gguf

"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp" qwen3moe
python3 - "$tmp/trace.jsonl" <<'PY'
import json, random, sys
rng = random.Random(11)
with open(sys.argv[1], "w") as f:
    for i, (p, n) in enumerate([(5, 3), (40, 7), (17, 1), (90, 12)]):
        f.write(json.dumps({"id": "r%d" % i, "arrival": 0.01 * i,
                            "prompt_ids": [rng.randrange(100, 250)
                                           for _ in range(p)],
                            "max_tokens": n, "ignore_eos": True}) + "\n")
PY

for t in single tp2 spp2; do
	port=$(free_port)
	serve_start $t 90 MEDHA_MODEL="$tmp/qwen3moe.gguf" \
	    MEDHA_ADDR="ipc://$tmp/$t.sock" MEDHA_ROUTER="ipc://$tmp/r-$t.sock" \
	    MEDHA_HTTP="127.0.0.1:$port" MEDHA_LOG="$tmp/logs-$t" \
	    MEDHA_WORKER_OPTS="--no-lookahead"
	"$bin/medha-trace" replay -a "ipc://$tmp/r-$t.sock" --token-ids \
	    "$tmp/trace.jsonl" >"$tmp/rec-$t.jsonl"
	# the router's STATUS of the replica is 0.1 s old at most
	sleep 0.5
	python3 - "$port" "$tmp/rec-$t.jsonl" $t <<'PY'
import json, sys, urllib.request
port, recs, topo = sys.argv[1:]
m = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port,
                           timeout=10).read().decode()
cnt = {}
imb = None
for l in m.splitlines():
    if l.startswith("medha_expert_tokens_total{"):
        e = int(l.split('expert="')[1].split('"')[0])
        cnt[e] = int(l.split()[-1])
    elif l.startswith("medha_expert_load_imbalance{"):
        imb = float(l.split()[-1])
recs = [json.loads(l) for l in open(recs)]
assert len(recs) == 4 and all(r["status"] == "ok" for r in recs), recs
run = sum(r["prompt_tokens"] + r["output_tokens"] - 1 for r in recs)
want = run * 4 * 3
assert sorted(cnt) == list(range(16)), cnt
assert sum(cnt.values()) == want, (topo, sum(cnt.values()), want, cnt)
mean = sum(cnt.values()) / 16
assert imb is not None and abs(imb - max(cnt.values()) / mean) < 1e-4, \
    (imb, cnt)
print("moe-metrics: %s: %d tokens run, %d routed (4 x 3 each), "
      "imbalance %.3f" % (topo, run, want, imb))
PY
	serve_stop
done
echo "moe-metrics: ok"

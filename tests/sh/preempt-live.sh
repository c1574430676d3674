#!/bin/sh
# preempt-live.sh: memory on demand on the live replica (medha-sched -l
# and a cpu medha-worker, SmolLM2, the f32 KV cache but where said;
# medha-sched(1),
# "Memory"):
#  - forced preemptions: 12 requests of token ids (prompts of 40 to 100
#    tokens, 96 tokens each; 6 greedy, 6 sampled with a seed, whose
#    resumed samplers go on where they were: medha-proto(7) "skip") at
#    once on a worker of 32 KV blocks
#    (512 tokens; the 12 need 2300 by the end): every request completes,
#    its tokens exactly those of its run alone (without preemption: the
#    twelve at once on a replica of --reserve max, since a request's
#    tokens do not depend on its batch), with the prefix cache (a preempted
#    request takes its KV back from it) and without (it recomputes all);
#    the records count preemptions, some of them at least 1, sampled
#    ones among them; the same on the f16 KV cache (with the cache),
#    against alone runs on f16: exactly their tokens too, since a
#    query attends to the cache's K/V whatever chunk it comes in, its
#    own rounded to f16 as well, so a recomputed token's K/V is the
#    bytes its decode wrote (and some of f16's alone runs differ from
#    f32's: 9 of the 12 here); the same (with the cache; the sampled requests'
#    tokens unchecked: their logits are not bit-equal to the single
#    worker's) on the topologies of MEDHA_PREEMPT_TOPOS (default
#    "kvp2", pieces of 128 tokens so that requests grow onto a second
#    group; "tp2 spp2 kvp2" for all of examples/serve.sh's), whose
#    workers each free or keep a preempted request's part;
#  - min_tokens under forced preemptions: 12 chat prompts (the template
#    by hand, 40 to 100 tokens) that SmolLM2 answers in a few tokens,
#    with min_tokens 60 and max_tokens 96, on 16 blocks: each gives at
#    least 60 tokens, exactly those of its run alone, some preempted
#    and some ending before 96;
#  - acceptance: 12 greedy chat requests without max_tokens (short
#    questions, answered in 17 to 99 tokens) through the HTTP front
#    door, all at once, on a worker of 2048 blocks: the running gauge of
#    /metrics reaches 12 (by the reservation of before, each would hold
#    the rest of the 8192-token context and four would run), and each
#    answer is that of the same request alone (the twelve at once on a
#    replica of --reserve max: four at a time, none preempted);
#    medha_preemptions_total is there.
# Needs contrib/fetch-refs.sh (the real model).
. "$(dirname "$0")/lib.sh"
need_model
addr=ipc://$tmp/r.sock

python3 - "$tmp/trace.jsonl" <<'PY'
import json, random, sys
rng = random.Random(35)
reqs = []
for i in range(12):
    n = rng.randrange(40, 101)
    r = {"id": "p%d" % i, "arrival": 0.0,
         "prompt_ids": [rng.randrange(100, 40000) for _ in range(n)],
         "max_tokens": 96, "ignore_eos": True}
    if i % 2:  # sampled, seeded: resumed, its generator goes on
        r.update(temperature=0.9, top_p=0.95, seed=1000 + i)
    reqs.append(r)
with open(sys.argv[1], "w") as f:
    for r in reqs:
        f.write(json.dumps(r) + "\n")
# min_tokens: chat prompts (the template by hand) that SmolLM2 answers
# in a few tokens, asked for 60 at least: each goes on past its end of
# generation to 60, then stops at its next one
words = "red blue green river stone cloud apple tiger music paper".split()
qs = ["Name a color.", "Say hello.", "Name a fruit.", "Name an animal.",
      "Say goodbye.", "Name a planet."]
with open(sys.argv[1] + ".min", "w") as f:
    for i in range(12):
        note = " ".join(rng.choice(words) for _ in range(rng.randrange(30, 80)))
        r = {"id": "m%d" % i, "arrival": 0.0, "max_tokens": 96,
             "min_tokens": 60,
             "prompt": "<|im_start|>user\nNotes: %s.\n%s<|im_end|>\n"
                       "<|im_start|>assistant\n" % (note, qs[i % 6])}
        f.write(json.dumps(r) + "\n")
PY

# alone: the requests without preemption, all memory reserved (the
# twelve at once: a request's tokens do not depend on its batch, as
# topo.sh checks against medha-worker -p, so this is each one's run
# alone, in one replay rather than twelve); the twelve of token ids, the
# twelve of min_tokens, and the first on the f16 KV cache, on three
# replicas at once (lib.sh's topo_replay_all)
topo_add alone single "$model" "$tmp/trace.jsonl" MEDHA_ROUTER= \
    "MEDHA_SCHED_OPTS=--reserve max"
topo_add malone single "$model" "$tmp/trace.jsonl.min" MEDHA_ROUTER= \
    "MEDHA_SCHED_OPTS=--reserve max"
topo_add alone16 single "$model" "$tmp/trace.jsonl" MEDHA_ROUTER= \
    "MEDHA_SCHED_OPTS=--reserve max" "MEDHA_WORKER_OPTS=--kv f16"
topo_replay_all
for n in alone malone alone16; do
	mv "$tmp/out-$n.jsonl" "$tmp/$n.jsonl"
done

run() { # TOPO NAME SCHED_OPTS [KV]: the 12 at once on 32 blocks a worker
	# (KV: the cpu worker's cache, f32 or f16; alone runs of the same)
	kv=${4:-f32}
	alone=$tmp/alone.jsonl
	[ "$kv" = f32 ] || alone=$tmp/alone16.jsonl
	if [ "$1" = single ]; then
		serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
		    MEDHA_LOG="$tmp/logs.$2" MEDHA_SCHED_OPTS="$3" \
		    MEDHA_WORKER_OPTS="--kv-blocks 32 --kv $kv"
		a=$addr
	else # pieces of 128 tokens: a request grows onto a second group
		a=ipc://$tmp/router.sock
		serve_start "$1" 90 MEDHA_ROUTER="$a" MEDHA_MODEL="$model" \
		    MEDHA_LOG="$tmp/logs.$1.$2" MEDHA_SCHED_OPTS="$3" \
		    MEDHA_KVP_MAX_TOKENS=128 MEDHA_WORKER_OPTS="--kv-blocks 32"
	fi
	"$bin/medha-trace" replay -a "$a" --token-ids "$tmp/trace.jsonl" \
	    >"$tmp/$1.$2.jsonl"
	serve_stop
	python3 - "$tmp/$1.$2.jsonl" "$alone" "$1 $2" <<'PY'
import json, sys
got = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
alone = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
single = sys.argv[3].startswith("single ")
assert len(got) == 12 and set(got) == set(alone), (len(got), len(alone))
for k, r in got.items():
    assert r["status"] == "ok" and alone[k]["status"] == "ok", (r, alone[k])
    assert "preemptions" not in alone[k], alone[k]
    assert len(r["token_ids"]) == 96, r
    # another layout's logits are not bit-equal to single's (KVP merges
    # partial attention): a sampled draw near a boundary may differ
    # even unpreempted; greedy ones keep their argmax
    if single or int(k[1:]) % 2 == 0:
        assert r["token_ids"] == alone[k]["token_ids"], (k, r, alone[k])
pre = [r.get("preemptions", 0) for r in got.values()]
assert sum(pre) > 0, pre
# the odd ones sample (temperature 0.9, seeded): some resumed too
sam = [got["p%d" % i].get("preemptions", 0) for i in range(1, 12, 2)]
assert sum(sam) > 0 or not single, sam
print("preempt-live %s: %d preemptions of %d requests (%d sampled), tokens "
      "as alone" % (sys.argv[3], sum(pre), sum(p > 0 for p in pre),
                    sum(p > 0 for p in sam)), file=sys.stderr)
PY
}
run single cache ""
run single nocache --no-prefix-cache
run single cache16 "" f16
python3 - "$tmp/alone.jsonl" "$tmp/alone16.jsonl" <<'PY'
import json, sys
a, b = ({r["id"]: r["token_ids"] for r in map(json.loads, open(p))}
        for p in sys.argv[1:3])
n = sum(a[k] != b[k] for k in a)
assert n > 0, "f16 gave f32's tokens: was the worker's cache f16?"
print("preempt-live f16: %d of 12 requests alone give other tokens than "
      "on f32" % n, file=sys.stderr)
PY

# min_tokens under preemption: a preempted request's new sampler bans
# the end of generation for what is left of min_tokens only, so its
# tokens are those of its run alone (counting again from 0, or not at
# all, would move where it ends: each fails here on 16 blocks, not
# always on 32)
serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
    MEDHA_LOG="$tmp/logs.min" MEDHA_WORKER_OPTS="--kv-blocks 16"
"$bin/medha-trace" replay -a "$addr" --token-ids "$tmp/trace.jsonl.min" \
    >"$tmp/min.jsonl"
serve_stop
python3 - "$tmp/min.jsonl" "$tmp/malone.jsonl" <<'PY'
import json, sys
got = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
alone = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
assert len(got) == 12 and set(got) == set(alone), (len(got), len(alone))
for k, r in got.items():
    assert r["status"] == "ok" and alone[k]["status"] == "ok", (r, alone[k])
    assert len(r["token_ids"]) >= 60, r
    assert r["token_ids"] == alone[k]["token_ids"], (k, r, alone[k])
n = [len(r["token_ids"]) for r in got.values()]
pre = [r.get("preemptions", 0) for r in got.values()]
assert sum(pre) > 0, pre
assert min(n) < 96, n # some ended by themselves past min_tokens
print("preempt-live min_tokens: %d preemptions, %s tokens, as alone"
      % (sum(pre), sorted(n)), file=sys.stderr)
PY
for topo in ${MEDHA_PREEMPT_TOPOS-kvp2}; do
	run "$topo" cache ""
done

# acceptance 1: chat requests without max_tokens, 2048 blocks
cat >"$tmp/chat.py" <<'PY'
import json, sys, threading, time, urllib.request
port, mode = int(sys.argv[1]), sys.argv[2]
# questions SmolLM2 answers greedily in 17 to 99 tokens, then stops
qs = ["Name a color.", "Say hello.", "Name a fruit.", "Name an animal.",
      "What is 3 plus 5?", "Say goodbye.", "Name a planet.",
      "Name a day of the week.", "Name a month.", "Name a number.",
      "Name a flower.", "What is 6 times 7?"]
url = "http://127.0.0.1:%d" % port
out = [None] * 12

def ask(i):
    body = json.dumps({"messages": [{"role": "user", "content":
        qs[i]}],
        "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    out[i] = json.load(urllib.request.urlopen(req, timeout=600))

def metrics():
    v = {}
    for l in urllib.request.urlopen(url + "/metrics",
            timeout=10).read().decode().splitlines():
        if l.startswith("medha_") and not l.startswith("#"):
            v[l.split("{")[0].split()[0]] = float(l.split()[-1])
    return v

# all twelve at once (alone too: on a replica of --reserve max, which
# runs four at a time and preempts none)
most = 0
th = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
for t in th:
    t.start()
while any(t.is_alive() for t in th):
    most = max(most, metrics().get("medha_requests_running", 0))
    time.sleep(0.05)
for t in th:
    t.join()
if mode == "all":
    assert "medha_preemptions_total" in metrics()
for o in out:
    assert o is not None and o["choices"][0]["finish_reason"] == "stop", o
print(json.dumps({"most": most, "text": [o["choices"][0]["message"]["content"]
                  for o in out],
                  "tokens": [o["usage"]["completion_tokens"] for o in out]}))
PY
chat() { # NAME MODE SCHED_OPTS
	port=$(free_port)
	serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
	    MEDHA_HTTP="127.0.0.1:$port" MEDHA_LOG="$tmp/logs.$1" \
	    MEDHA_SCHED_OPTS="$3" MEDHA_WORKER_OPTS="--kv-blocks 2048"
	python3 "$tmp/chat.py" "$port" "$2" >"$tmp/$1.json"
	serve_stop
}
chat chat-alone alone "--reserve max"
chat chat-all all ""
python3 - "$tmp/chat-alone.json" "$tmp/chat-all.json" <<'PY'
import json, sys
alone, both = (json.load(open(p)) for p in sys.argv[1:3])
assert both["text"] == alone["text"], (alone, both)
assert both["most"] == 12, both["most"]
print("preempt-live chat: 12 running at once, outputs of %s tokens as "
      "alone" % both["tokens"], file=sys.stderr)
PY
echo ok

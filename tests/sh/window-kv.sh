#!/bin/sh
# window-kv.sh: sliding-window memory on the cpu backend (issue 36 item
# 4, acceptance 4), on random GGUFs of tests/ref/arch_model.py:
#  - one-shot (medha-worker -p, whose window layers always give back what
#    their window no longer sees): the most KV blocks held for a prompt
#    of about 4000 tokens in chunks of 64, by the worker's own count (-v),
#    is within 10% above the per-layer-type formula (global layers x N +
#    window layers x min(N, W + chunk)) / layers for the gemma3 case (7
#    layers, 6 with a window of 24), gemma2 (4 layers, 2 with 20) and
#    llama-swa (3 layers, all with 24), under all layers x N; the
#    tokens are those of chunks of 23 and of one piece;
#  - live (medha-sched -l, one medha-worker, chunks of 64): three
#    requests of 2000 prompt ids and 8 greedy tokens at once on 40
#    blocks, 126 each by full-attention accounting: without --window-kv
#    each is rejected with that count; with it all three are admitted
#    and complete, each with the tokens of the same request on a worker
#    of ample memory without --window-kv (the KV of every position);
#  - prefix cache with --window-kv: requests sharing a prompt, or its
#    beginning, one after another: each the tokens of a run without the
#    cache; a hit where the owner's window layers still hold the match's
#    last window (the same prompt again), none where they gave it back
#    (a shorter shared beginning, an owner that decoded past its
#    window), and no fork refused by the worker;
#  - preemption with --window-kv (prefix cache on: a preempted request
#    forks what its window layers still hold, or computes again): eight requests of 40 to 120 prompt ids and
#    400 greedy tokens at once on 16 blocks (each reserves 11 at its end,
#    33 by all layers), some preempted, every one the tokens of its run
#    on ample memory;
#  - topologies with --window-kv (kvp3 with pieces of 160 positions, so
#    that a window of 24 lies inside the last piece or spans two, spp2,
#    tp2): topo-arch.sh's sixteen requests, each the tokens of
#    medha-worker -p alone.
# Needs the cache's venv (gguf, numpy) and SmolLM2's tokenizer; skips
# without them.
. "$(dirname "$0")/lib.sh"
need_model "$smollm2"
need_py numpy gguf

"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp" \
    gemma3 gemma2 llama-swa gemma3-tp

# ---- one-shot: blocks held against the formula ----
python3 -c 'print("hello world the quick brown fox " * 650)' >"$tmp/prompt"
oneshot() { # MODEL CHUNK: tokens to $tmp/out.MODEL.CHUNK, log to .err
	"$bin/medha-worker" -m "$tmp/$1.gguf" -f "$tmp/prompt" -n 16 \
	    --ignore-eos --tokens -t 2 -c "$2" -v >"$tmp/out.$1.$2" \
	    2>"$tmp/err.$1.$2" || { cat "$tmp/err.$1.$2"; exit 1; }
}
# MODEL GLOBAL WINDOW_LAYERS W
for spec in "gemma3 1 6 24" "gemma2 2 2 20" "llama-swa 0 3 24"; do
	# shellcheck disable=SC2086
	set -- $spec
	for c in 64 23 0; do
		oneshot "$1" $c
	done
	cmp -s "$tmp/out.$1.64" "$tmp/out.$1.23" &&
	    cmp -s "$tmp/out.$1.64" "$tmp/out.$1.0" ||
	    { echo "$1: tokens differ by chunk"; exit 1; }
	python3 - "$tmp/err.$1.64" "$@" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
m = re.search(r"KV: at most (\d+) blocks of 16 positions held "
              r"\((\d+) positions\)", log)
assert m, log
held, n = int(m.group(1)), int(m.group(2))
name, g, w, W = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5])
chunk = 64
formula = (g * n + w * min(n, W + chunk)) / (g + w) / 16
full = -(-n // 16)
print("window-kv %s: %d positions: %d blocks held, formula %.1f (%+.1f%%), "
      "all layers %d" % (name, n, held, formula,
                         100 * (held / formula - 1), full), file=sys.stderr)
assert n > 3500, n
assert formula <= held <= 1.10 * formula, (held, formula)
assert held < full, (held, full)
PY
done

# ---- live: admitted only by window accounting ----
"$py" - "$tmp/trace" <<'PY'
import json, random, sys
rng = random.Random(36)
with open(sys.argv[1], "w") as f:
    for i in range(3):
        ids = [rng.randrange(100, 40000) for _ in range(2000)]
        f.write(json.dumps({"id": "w%d" % i, "arrival": 0,
                            "prompt_ids": ids, "max_tokens": 8,
                            "ignore_eos": True, "temperature": 0}) + "\n")
PY
addr=ipc://$tmp/r.sock
live() { # NAME WORKER_OPTS [TRACE]: on a single replica, chunks of 64
	serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$tmp/gemma3.gguf" \
	    MEDHA_LOG="$tmp/logs.$1" MEDHA_SCHED_OPTS="-c 64" \
	    MEDHA_WORKER_OPTS="$2"
	"$bin/medha-trace" replay -a "$addr" --token-ids "${3:-$tmp/trace}" \
	    >"$tmp/$1.jsonl"
	serve_stop
}
live ample ""
live full "--kv-blocks 40"
live win "--kv-blocks 40 --window-kv"
python3 - "$tmp/ample.jsonl" "$tmp/full.jsonl" "$tmp/win.jsonl" <<'PY'
import json, sys
ample, full, win = ({r["id"]: r for r in map(json.loads, open(p))}
                    for p in sys.argv[1:4])
assert len(ample) == len(full) == len(win) == 3, (ample, full, win)
for k in ample:
    assert ample[k]["status"] == "ok" and len(ample[k]["token_ids"]) == 8, \
        ample[k]
    assert full[k]["status"] == "rejected" and \
        "needs 126 KV blocks" in json.dumps(full[k]), full[k]
    assert win[k]["status"] == "ok", win[k]
    assert win[k]["token_ids"] == ample[k]["token_ids"], (k, win[k], ample[k])
print("window-kv live: 3 requests of 126 blocks each (full attention) on "
      "40: rejected without --window-kv, with it admitted, tokens as on "
      "ample memory", file=sys.stderr)
PY
! grep -q "prefix caching off" "$tmp"/logs.win/* ||
    { echo "prefix caching off with --window-kv on one group"; exit 1; }

# ---- prefix cache: a hit only where the windows still hold it ----
"$py" - "$tmp/trace.px" <<'PY'
import json, random, sys
rng = random.Random(38)
A = [rng.randrange(100, 40000) for _ in range(200)]
B = [rng.randrange(100, 40000) for _ in range(300)]
new = lambda n: [rng.randrange(100, 40000) for _ in range(n)]
reqs = [("a0", 0, A, 4), ("a1", 2, A, 4), ("a2", 4, A[:150] + new(50), 4),
        ("b0", 6, B, 40), ("b1", 9, B, 4), ("a3", 11, A, 4)]
with open(sys.argv[1], "w") as f:
    for rid, t, ids, n in reqs:
        f.write(json.dumps({"id": rid, "arrival": t, "prompt_ids": ids,
                            "max_tokens": n, "ignore_eos": True,
                            "temperature": 0}) + "\n")
PY
serve_px() { # NAME SCHED_OPTS WORKER_OPTS
	serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$tmp/gemma3.gguf" \
	    MEDHA_LOG="$tmp/logs.$1" MEDHA_SCHED_OPTS="-c 64 $2" \
	    MEDHA_WORKER_OPTS="$3"
	"$bin/medha-trace" replay -a "$addr" --token-ids "$tmp/trace.px" \
	    >"$tmp/$1.jsonl"
	serve_stop
}
serve_px px-ref --no-prefix-cache ""
serve_px px-win "" --window-kv
python3 - "$tmp/px-ref.jsonl" "$tmp/px-win.jsonl" <<'PY'
import json, sys
ref, win = ({r["id"]: r for r in map(json.loads, open(p))}
            for p in sys.argv[1:3])
assert len(ref) == len(win) == 6, (ref, win)
for k in ref:
    assert ref[k]["status"] == "ok" and win[k]["status"] == "ok", \
        (ref[k], win[k])
    assert win[k]["token_ids"] == ref[k]["token_ids"], (k, win[k], ref[k])
c = {k: win[k].get("cached_tokens", 0) for k in win}
# a0's window layers hold 176.. of its 200 prompt positions (its last
# query at 203 sees 180..203; blocks of 16): a1 and a3, its prompt again,
# match 199 and fork them; a2's match of 150 needs 127..149, given back,
# and b1's of 299 from b0 (40 tokens decoded) 276..298, given back too
assert c["a1"] == 199 and c["a3"] == 199, c
assert c["a0"] == c["a2"] == c["b0"] == c["b1"] == 0, c
print("window-kv prefix: hits %s, tokens as without the cache" % c,
      file=sys.stderr)
PY
if grep -q "fork of" "$tmp"/logs.px-win/*; then
	echo "a worker refused a fork:"; grep "fork of" "$tmp"/logs.px-win/*
	exit 1
fi

# ---- preemption: the KV computed again ----
"$py" - "$tmp/trace.pre" <<'PY'
import json, random, sys
rng = random.Random(37)
with open(sys.argv[1], "w") as f:
    for i in range(8):
        n = rng.randrange(40, 120)
        f.write(json.dumps({"id": "q%d" % i, "arrival": 0,
            "prompt_ids": [rng.randrange(100, 40000) for _ in range(n)],
            "max_tokens": 400, "ignore_eos": True, "temperature": 0}) + "\n")
PY
live pre-ample "" "$tmp/trace.pre"
live pre-win "--kv-blocks 16 --window-kv" "$tmp/trace.pre"
python3 - "$tmp/pre-ample.jsonl" "$tmp/pre-win.jsonl" <<'PY'
import json, sys
ample, win = ({r["id"]: r for r in map(json.loads, open(p))}
              for p in sys.argv[1:3])
assert len(ample) == len(win) == 8, (ample, win)
for k in ample:
    assert ample[k]["status"] == "ok" and win[k]["status"] == "ok", \
        (ample[k], win[k])
    assert len(win[k]["token_ids"]) == 400, win[k]
    assert win[k]["token_ids"] == ample[k]["token_ids"], k
pre = sum(r.get("preemptions", 0) for r in win.values())
assert pre > 0, "no request preempted"
print("window-kv preemption: %d preemptions of 8 requests on 16 blocks, "
      "tokens as on ample memory" % pre, file=sys.stderr)
PY

# ---- topologies ----
python3 "$top/tests/ref/solo.py" trace "$tmp/trace.jsonl" 16 \
    2 4 6 8 10 11 14 20
topo_compare kvp3 "$tmp/gemma3-tp.gguf" "$tmp/trace.jsonl" \
    MEDHA_KVP_MAX_TOKENS=160 MEDHA_WORKER_OPTS=--window-kv
for t in spp2 tp2; do
	topo_compare $t "$tmp/gemma3-tp.gguf" "$tmp/trace.jsonl" \
	    MEDHA_WORKER_OPTS=--window-kv
done
echo "window-kv: ok"

#!/bin/sh
# window-sim.sh: sliding-window memory in the simulator (issue 36 item
# 4) on random GGUFs of tests/ref/arch_model.py: its gemma3 case (7
# layers, 6 of them with a window of 24 keys) read from the file's
# metadata by -m, against its llama case (3 global layers). On 40 blocks
# of 16 positions, a prompt of 2000 tokens needs 126 blocks over all
# layers: the llama file's request is rejected with that count, the
# gemma3 file's admitted and run (about (1 x 2000 + 6 x (24 + 64)) / 7
# positions, 24 blocks), with the prefix cache on and off; with it, a
# second request sharing its first 1600 tokens hits what the cache could
# keep of them (whole blocks, every layer of each: fewer than 40). Needs the
# cache's venv (gguf, numpy) and SmolLM2's tokenizer; skips without
# them.
. "$(dirname "$0")/lib.sh"
need_model "$smollm2"
need_py numpy gguf

"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp" gemma3 llama
"$py" - "$tmp/trace" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(2):
        ids = list(range(1, 1601)) + [5000 + 1000 * i + k for k in range(400)]
        f.write(json.dumps({"id": "w%d" % i, "arrival": 0.5 * i,
                            "prompt_ids": ids, "prompt_tokens": 2000,
                            "max_tokens": 8}) + "\n")
PY
sim() { # MODEL OUT [options]: the simulator on 40 blocks, fixed chunks
	m=$1 out=$2
	shift 2
	"$bin/medha-sched" --sim h100 -m "$tmp/$m.gguf" --kv-blocks 40 \
	    -p fcfs -c 64 -v "$@" "$tmp/trace" >"$out" 2>"$tmp/err" ||
	    { cat "$tmp/err"; exit 1; }
}
sim llama "$tmp/full"
grep -q '"status": "rejected".*needs 126 KV blocks' "$tmp/full" ||
    { echo "llama: want a rejection for 126 blocks:"; cat "$tmp/full"; exit 1; }
for pc in "" --no-prefix-cache; do
	# shellcheck disable=SC2086
	sim gemma3 "$tmp/win" $pc
	"$py" - "$tmp/win" "$pc" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2, recs
for r in recs:
    assert r["status"] == "ok" and r["output_tokens"] == 8, r
hit = sum(r.get("cached_tokens", 0) for r in recs)
if sys.argv[2] == "":
    # what the cache could keep of the shared 1600: whole blocks, every
    # layer of each, beside the running request, in 40 blocks
    assert 0 < hit < 40 * 16 and hit % 16 == 0, recs
else:
    assert hit == 0, recs
print("gemma3 %s: both ok, %d tokens from the cache" %
      (sys.argv[2] or "--prefix-cache", hit))
PY
done
echo "llama: rejected, 126 blocks over all layers"

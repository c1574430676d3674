#!/bin/sh
# sampler-ref.sh: the samplers' penalties (presence, frequency,
# repetition) and min-p against tests/ref/sampler.py, a Python sampler
# written from model/sample.h's specification, on the real model's
# logits: medha-worker -p writes the logits each token was drawn from
# (--step-logits), and the reference must draw the same token from each,
# greedy and at a temperature (its generator replayed). Needs
# contrib/fetch-refs.sh (the model, and numpy in the cache's Python).
. "$(dirname "$0")/lib.sh"
need_model
need_py numpy
prompt="The capital of France is Paris. The capital of Italy is Rome. The capital of"
ids=$("$bin/medha-worker" -m "$smollm2" -p "$prompt" --tokenize | tr ' ' ,)
# case: temp top_k top_p min_p presence frequency repetition seed
n=0
while read -r temp k p minp pres freq rep seed; do
	"$bin/medha-worker" -m "$smollm2" -p "$prompt" -n 40 -t 2 --tokens \
	    --ignore-eos --temp "$temp" --top-k "$k" --top-p "$p" \
	    --min-p "$minp" --presence-penalty "$pres" \
	    --frequency-penalty "$freq" --repetition-penalty "$rep" \
	    --seed "$seed" --step-logits "$tmp/steps.f32" >"$tmp/out"
	out=$(tr ' ' , <"$tmp/out")
	printf '%s: ' "temp $temp top-k $k top-p $p min-p $minp presence $pres frequency $freq repetition $rep"
	"$py" "$top/tests/ref/sampler.py" "$tmp/steps.f32" 49152 "$ids" "$out" \
	    "$temp" "$k" "$p" "$minp" "$pres" "$freq" "$rep" "$seed"
	n=$((n + 1))
done <<'C'
0 0 1 0 0 0 1.3 1
0 0 1 0 1.5 1.0 1 1
0 0 1 0 -0.5 0.4 1.2 1
0.9 40 1 0.05 0.4 0.2 1.2 7
1.2 0 1 0.1 0 0 1 3
0.8 0 0.9 0.02 1.0 0 1 11
C
# logprobs: the log-softmax of the logits each token was drawn from (the
# model's, before penalties and temperature), and the 5 likeliest, to 1e-4
"$bin/medha-worker" -m "$smollm2" -p "$prompt" -n 24 -t 2 --tokens \
    --ignore-eos --temp 0.8 --seed 5 --repetition-penalty 1.2 \
    --step-logits "$tmp/steps.f32" --logprobs "$tmp/lp.jsonl" \
    --top-logprobs 5 >"$tmp/out"
"$py" - "$tmp/steps.f32" "$tmp/lp.jsonl" "$tmp/out" <<'PY'
import json, sys
import numpy as np
rows = np.fromfile(sys.argv[1], dtype="<f4").reshape(-1, 49152).astype(np.float64)
lps = [json.loads(l) for l in open(sys.argv[2])]
out = [int(x) for x in open(sys.argv[3]).read().split()]
assert len(rows) == len(lps) == len(out) == 24, (len(rows), len(lps), len(out))
worst = 0.0
for row, lp, tok in zip(rows, lps, out):
    m = row.max()
    ls = row - (m + np.log(np.exp(row - m).sum()))
    assert lp["id"] == tok, (lp, tok)
    worst = max(worst, abs(lp["logprob"] - ls[tok]))
    order = sorted(range(len(ls)), key=lambda i: (-ls[i], i))[:5]
    got = [t[0] for t in lp["top"]]
    # the same five (ties within float rounding aside), the same values
    assert got == order or sorted(got) == sorted(order), (got, order)
    for i, v in lp["top"]:
        worst = max(worst, abs(v - ls[i]))
assert worst < 1e-4, worst
print("logprobs of 24 tokens and their top 5 as numpy's log-softmax: worst %.1e" % worst)
PY
echo "sampler-ref: ok ($n cases)"

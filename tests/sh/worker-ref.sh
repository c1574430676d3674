#!/bin/sh
# worker-ref.sh: medha-worker --llama-compat against llama.cpp on the real model,
# SmolLM2-135M-Instruct (Q4_1), 12 prompts: the prompt's token ids are the
# same, greedy generation of 64 tokens is token-identical, and the logits
# after the prompt agree to a relative L2 error under 1e-3. llama.cpp runs
# through tests/ref/llamacpp.py with an f32 KV cache and no flash
# attention; --llama-compat gives its logits bit for bit (rel L2 0). Needs
# the cache that contrib/fetch-refs.sh fills
# (MEDHA_CACHE, default the repository's cache/); skips without it.
. "$(dirname "$0")/lib.sh"
model=$smollm2
ref=$top/tests/ref/llamacpp.py

need_model
need_py numpy xllamacpp

cat > "$tmp/prompts" <<'P'
The capital of France is
Once upon a time, in a small village by the sea,
def fibonacci(n):
The three laws of thermodynamics are
<|im_start|>user
What is the boiling point of water?<|im_end|>
<|im_start|>assistant
1, 2, 3, 5, 8, 13,
In 1969, Neil Armstrong
Explain the difference between TCP and UDP.
Le chat est assis sur
import numpy as np
x = np.
The quick brown fox jumps over the lazy dog. The quick brown fox
Water boils at 100 degrees Celsius and freezes at
P
# one prompt per paragraph: a line that does not start a new prompt is
# joined (the ChatML prompt and the Python one span lines)
"$py" - "$tmp/prompts" "$tmp" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")[:-1]
prompts, cur = [], None
for l in lines:
    if cur is not None and (l.startswith("What is") or l.startswith("<|im_start|>assistant") or l.startswith("x = ")):
        cur += "\n" + l
        continue
    if cur is not None:
        prompts.append(cur)
    cur = l
prompts.append(cur)
if prompts[4].endswith("assistant"):
    prompts[4] += "\n"
assert len(prompts) == 12, len(prompts)
for i, p in enumerate(prompts):
    open("%s/p%02d" % (sys.argv[2], i), "w").write(p)
PY

# medha: each prompt's ids, 64 greedy ids and the logits after it
i=0
jobs=
while [ $i -lt 12 ]; do
	p=$tmp/p$(printf %02d $i)
	"$bin/medha-worker" -m "$model" -f "$p" --tokenize >"$p.ids"
	"$bin/medha-worker" -m "$model" -f "$p" -n 64 --ignore-eos --tokens \
	    -t 2 --llama-compat --logits "$p.ours.f32" >"$p.ours.ids"
	jobs="$jobs $model $p.ids 64 $p.lc"
	i=$((i + 1))
done
# llama.cpp: the same for every prompt, in one process (one thread: the
# numbers are those of any count, llamacpp.py's header)
# shellcheck disable=SC2086 # $jobs: four words a prompt
"$py" "$ref" runs -t 1 --kv f32 --fa off $jobs
"$py" - "$tmp" <<'PY'
import sys
import numpy as np
d, fail = sys.argv[1], 0
for i in range(12):
    p = "%s/p%02d" % (d, i)
    ours = open(p + ".ours.ids").read().split()
    ref = open(p + ".lc.ids").read().split()
    a = np.fromfile(p + ".ours.f32", dtype="<f4").astype(np.float64)
    b = np.fromfile(p + ".lc.f32", dtype="<f4").astype(np.float64)
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    same = ours == ref
    first = next((k for k in range(min(len(ours), len(ref)))
                  if ours[k] != ref[k]), None)
    print("prompt %2d: greedy 64 %s, logits rel L2 %.2e" % (
        i, "identical" if same else "differ at token %s" % first, rel))
    fail += not (same and rel < 1e-3 and len(ours) == 64)
if fail:
    sys.exit("%d of 12 prompts differ from llama.cpp" % fail)
PY

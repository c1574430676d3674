#!/bin/sh
# arch-ref.sh: the model families medha runs (llama, llama with a sliding
# window as Mistral v0.1, qwen2, qwen3, gemma2, gemma3, phi3; YaRN on
# qwen2 and qwen3, linear scaling on gemma3, LongRoPE on phi3) on random
# models written by tests/ref/arch_model.py with the gguf package, of
# several shapes (GQA 1, 2 and 4, head sizes other than dim / heads,
# windows and original contexts shorter than the prompt), after a prompt
# of about 300 tokens (SmolLM2's tokenizer, so more than one attention
# partition of 256 keys):
#  - the f32 reference mode (MEDHA_CPU_REF=1) is within a relative L2 of
#    1e-5 of the float64 forward pass arch_model.py writes for the test;
#  - the default mode's last logits are as close to llama.cpp's (through
#    tests/ref/llamacpp.py, f32 KV, no flash attention) as the llama
#    model's are on the same test (at most twice that distance), and
#    --llama-compat within 1e-6 of them (bit for bit for llama, qwen2,
#    qwen3 and phi3, about 1e-7 for gemma2 and gemma3). llama.cpp
#    ignores a llama file's sliding window, so llama-swa is held to
#    float64 instead (as close as llama's llama.cpp
#    logits are to float64, twice at most);
#  - prefill in chunks of 7 and one token at a time (decodes) gives the
#    same logits bit for bit as one piece (the window's edge moving
#    through chunks and partitions).
# Prints every distance. Needs the cache (the tokenizer of SmolLM2, the
# venv with numpy, gguf and xllamacpp); skips without it.
. "$(dirname "$0")/lib.sh"
need_model "$smollm2"
need_py numpy gguf xllamacpp

am=$top/tests/ref/arch_model.py
lc=$top/tests/ref/llamacpp.py
"$py" - >"$tmp/prompt" <<'PY'
import random
r = random.Random(3)
words = ("river city north farmers traders valley market bridge winter "
         "harvest stone road council ships salt wool festival tower").split()
print(" ".join(r.choice(words) for _ in range(280)))
PY
"$bin/medha-worker" -m "$smollm2" -f "$tmp/prompt" --tokenize >"$tmp/ids"
n=$(wc -w <"$tmp/ids")
[ "$n" -gt 256 ] || { echo "prompt of $n tokens: want over 256"; exit 1; }

cases=$("$py" "$am" cases)
# every model, and its float64 logits after the prompt, in one process
# shellcheck disable=SC2086
"$py" "$am" forward "$smollm2" "$tmp" "$tmp/ids" $cases
for c in $cases; do
	m=$tmp/$c.gguf
	"$bin/medha-worker" -m "$m" -f "$tmp/prompt" --tokenize >"$tmp/ids.$c"
	cmp -s "$tmp/ids" "$tmp/ids.$c" ||
	    { echo "$c: the prompt's ids differ from SmolLM2's"; exit 1; }
	run() { # NAME [ENV] worker options...
		out=$tmp/$c.$1.f32
		shift
		"$@" -m "$m" -f "$tmp/prompt" -n 0 --kv f32 -t 2 \
		    --logits "$out" >/dev/null
	}
	run fast "$bin/medha-worker"
	run c7 "$bin/medha-worker" -c 7
	run c1 "$bin/medha-worker" -c 1
	run ref env MEDHA_CPU_REF=1 "$bin/medha-worker"
	run compat "$bin/medha-worker" --llama-compat
	# shellcheck disable=SC2046
	"$py" "$lc" logits --kv f32 --fa off -o "$tmp/$c.lc.f32" "$m" \
	    $(cat "$tmp/ids")
done

# shellcheck disable=SC2086
"$py" - "$tmp" $cases <<'PY'
import sys
import numpy as np
d, cases = sys.argv[1], sys.argv[2:]


def ld(c, k):
    return np.fromfile("%s/%s.%s.f32" % (d, c, k), "<f4").astype(np.float64)


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


bar_lc = rel(ld("llama", "fast"), ld("llama", "lc"))
f64 = {c: np.fromfile("%s/%s.f64" % (d, c), "<f8") for c in cases}
bar_64 = rel(ld("llama", "lc"), f64["llama"])
bad = 0
for c in cases:
    fast, lc = ld(c, "fast"), ld(c, "lc")
    r64 = rel(ld(c, "ref"), f64[c])
    same = all(np.array_equal(fast, ld(c, k)) for k in ("c7", "c1"))
    line = "%-11s ref-f64 %.2e  fast-llama.cpp %.2e  compat-llama.cpp " \
        "%.2e  fast-f64 %.2e  llama.cpp-f64 %.2e  chunks %s" % (
            c, r64, rel(fast, lc), rel(ld(c, "compat"), lc),
            rel(fast, f64[c]), rel(lc, f64[c]),
            "identical" if same else "DIFFER")
    ok = r64 < 1e-5 and same
    if c == "llama-swa":
        ok = ok and rel(fast, f64[c]) <= 2 * bar_64
    else:
        ok = ok and rel(fast, lc) <= 2 * bar_lc and \
            rel(ld(c, "compat"), lc) < 1e-6
    print(line + ("" if ok else "  FAIL"))
    bad += not ok
print("bars: llama's fast-llama.cpp %.2e, llama.cpp-f64 %.2e" % (bar_lc, bar_64))
sys.exit(1 if bad else 0)
PY

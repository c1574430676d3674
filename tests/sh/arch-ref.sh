#!/bin/sh
# arch-ref.sh: the model families medha runs (llama, llama with a sliding
# window as Mistral v0.1, qwen2, qwen3, gemma2, gemma3, phi3; YaRN on
# qwen2 and qwen3, linear scaling on gemma3, LongRoPE on phi3; the
# mixtures of experts: llama with experts as Mixtral, qwen2moe with a
# gated shared expert, qwen3moe, llama4 with routed and dense layers,
# sigmoid top-1, a shared expert, NoPE and L2 Q/K norms) on random
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
#    through chunks and partitions; the experts' rows grouped in batches
#    of every size);
#  - for the mixtures of experts, greedy generation of 16 tokens equals
#    llama.cpp's with --llama-compat, and in the default mode except at
#    a float64 near-tie (where the two part first, the float64 logits of
#    the two candidates within 0.5: gemma-ref.sh's rule).
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

jobs=
cases=$("$py" "$am" cases)
moe=$("$py" "$am" moe-cases)
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
	case " $(echo $moe) " in
	*" $c "*) ;;
	*) jobs="$jobs $m $tmp/ids 0 $tmp/$c.lc"; continue ;;
	esac
	jobs="$jobs $m $tmp/ids 16 $tmp/$c.lc"
	for mode in fast compat; do
		flag=; [ $mode = compat ] && flag=--llama-compat
		# shellcheck disable=SC2086
		"$bin/medha-worker" -m "$m" -f "$tmp/prompt" -n 16 --ignore-eos \
		    --tokens --kv f32 -t 2 $flag >"$tmp/$c.$mode.ids"
	done
done
# llama.cpp's logits after the prompt for every model, and 16 greedy ids
# for the mixtures, in one process (one thread: the numbers are those of
# any count, tests/ref/llamacpp.py's header)
# shellcheck disable=SC2086 # $jobs: four words a model
"$py" "$lc" runs -t 1 --kv f32 --fa off $jobs

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

# greedy decodes of the mixtures of experts against llama.cpp's
# shellcheck disable=SC2086
"$py" - "$tmp" "$am" $moe <<'PY'
import importlib.util
import sys
d, am, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
spec = importlib.util.spec_from_file_location("arch_model", am)
arch_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(arch_model)


def ids(name):
    return [int(t) for t in open(d + "/" + name).read().split()]


prompt, bad = ids("ids"), 0
for c in cases:
    lc = ids(c + ".lc.ids")
    for mode in ("fast", "compat"):
        ours = ids("%s.%s.ids" % (c, mode))
        k = next((k for k in range(len(lc)) if ours[k:k + 1] != lc[k:k + 1]),
                 None)
        if k is None and len(ours) == len(lc) == 16:
            print("%-9s %-6s greedy 16 identical" % (c, mode))
            continue
        if k is None or mode == "compat":
            print("%-9s %-6s greedy differs at %s (%d tokens, llama.cpp %d)"
                  "  FAIL" % (c, mode, k, len(ours), len(lc)))
            bad += 1
            continue
        meta, T = arch_model.read("%s/%s.gguf" % (d, c))
        g = arch_model.forward(meta, T, prompt + lc[:k])
        a, b = ours[k], lc[k]
        near = abs(g[a] - g[b]) < 0.5
        print("%-9s %-6s greedy parts at %d: medha %d, llama.cpp %d, float64 "
              "%.4f vs %.4f: %s" % (c, mode, k, a, b, g[a], g[b],
                                    "near-tie" if near else "NOT a near-tie  FAIL"))
        bad += not near
sys.exit(1 if bad else 0)
PY

#!/bin/sh
# topo-arch.sh: the multi-worker topologies of examples/serve.sh on the
# other model families (issue 36, acceptance 5), random models written by
# tests/ref/arch_model.py with the gguf package: sixteen greedy requests
# arriving at once through the router (prompts of 3 to 443 tokens), each
# exactly the tokens medha-worker -p gives alone, on (a model's
# topologies serving at once, lib.sh's topo_compare_all)
#  - tp2, spp2, kvp2 and tp2-spp2-kvp2 for qwen2 (Q/K/V biases split with
#    their rows; 6 heads over 3 kv heads, which tp2 splits 2 + 1), qwen3
#    (Q/K norms per head, a head size other than dim / heads) and gemma3
#    (post norms, GELU, window layers with their own RoPE base on five
#    layers in six: of 7 layers, spp2's second stage holds window, global,
#    window, so a stage-local layer index would show);
#  - kvp3 for gemma3 with pieces of 160 positions, so the longest prompts
#    lie on all three groups: a window of 24 keys lies inside the last
#    piece for most queries (the other groups see none of it and merge
#    nothing) and spans two pieces for those just past a boundary;
#  - kvp2 for gemma2 (attention soft-capping under the KVP merge,
#    alternate window layers) and tp2 for phi3 (fused QKV and gate-up,
#    split per rank);
#  - tp2, spp2, kvp2 and tp2-spp2-kvp2 for the mixtures of experts
#    qwen3moe (16 experts, top-4: each rank's rows of every expert, the
#    experts' SwiGLU and down gathered) and llama4 (routed and dense
#    layers in turn, a shared expert, NoPE on the fourth layer: spp2's
#    second stage holds a dense and a routed layer), and tp2 with --ep
#    on both (each rank 8 of qwen3moe's experts whole, or 2 of llama4's:
#    the routed rows' outputs all-gathered; llama4's shared expert and
#    dense layers split as TP splits them);
#  - --ep refused with a reason: by a worker on a model without
#    experts (exit 1), by the cuda backend and one-shot mode (exit 2),
#    and by medha-sched --sim where tp does not divide the experts
#    (qwen2moe's 6 over tp 4: exit 1).
# KVP groups hold 256 positions of a request (MEDHA_KVP_MAX_TOKENS) except
# for kvp3. The gemma models' embeddings are small (arch_model.py's
# "-tp" shapes), so that the residual stream is not the input token's
# and generation does not repeat one token: a window or layer fault
# changes tokens. Needs the cache (SmolLM2's tokenizer, the venv with
# numpy and gguf); skips without it.
. "$(dirname "$0")/lib.sh"
need_model "$smollm2"
need_py numpy gguf

"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp" \
    qwen2-tp qwen3 gemma3-tp gemma2-tp phi3 qwen3moe llama4 qwen2moe
# prompts of up to 443 tokens, four of them past 256, and one of 245
# whose decode crosses it
python3 "$top/tests/ref/solo.py" trace "$tmp/trace.jsonl" 16 \
    2 4 6 8 10 11 14 20

# each model's four topologies at once (lib.sh's topo_compare_all)
for m in qwen2-tp qwen3 gemma3-tp qwen3moe llama4; do
	for t in tp2 spp2 kvp2 tp2-spp2-kvp2; do
		topo_add "$t-$m" $t "$tmp/$m.gguf" "$tmp/trace.jsonl"
	done
	topo_compare_all
done
# --ep refused, saying why
w=$bin/medha-worker
expect_status 1 "$w" -s "ipc://$tmp/none.sock" -m "$smollm2" -t 1 --tp 2 --ep
grep -q 'expert parallelism: the model has no experts' "$tmp/err"
expect_status 2 "$w" -s "ipc://$tmp/none.sock" -m llama3-8b \
    --backend cuda --tp 2 --ep
grep -q "cuda backend splits every expert's rows" "$tmp/err"
expect_status 2 "$w" -m "$tmp/qwen3moe.gguf" -p hi --ep
grep -q 'TP replica' "$tmp/err"
expect_status 1 "$bin/medha-sched" --sim h200 -m "$tmp/qwen2moe.gguf" \
    --tp 4 --ep "$tmp/trace.jsonl"
grep -q '6 experts of .* do not split evenly over tp 4' "$tmp/err"

# and the rest at once
topo_add kvp3 kvp3 "$tmp/gemma3-tp.gguf" "$tmp/trace.jsonl" \
    MEDHA_KVP_MAX_TOKENS=160
for m in qwen3moe llama4; do
	topo_add "ep-$m" tp2 "$tmp/$m.gguf" "$tmp/trace.jsonl" \
	    MEDHA_WORKER_OPTS=--ep
done
topo_add kvp2-gemma2 kvp2 "$tmp/gemma2-tp.gguf" "$tmp/trace.jsonl"
topo_add tp2-phi3 tp2 "$tmp/phi3.gguf" "$tmp/trace.jsonl"
topo_compare_all
for m in qwen3moe llama4; do
	grep -q 'kvp 1, experts split whole)' "$tmp/logs-ep-$m/sched.log" || {
		echo "$m: the replica does not say --ep"
		exit 1
	}
done
echo "topo-arch: ok"

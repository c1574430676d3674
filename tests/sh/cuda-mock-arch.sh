#!/bin/sh
# cuda-mock-arch.sh: the cuda backend's forward pass on the other model
# families (issue 36 item 8), on the host stand-ins of cuda-mock.sh
# (tests/gpu/mock: CUDA, cuBLASLt and the kernels as plain C twins,
# which compute the kernels' contract in f32/f64; the kernels themselves
# are kernels-simt.sh's), against the cpu backend's f32 reference mode.
# Random models written by tests/ref/arch_model.py with the gguf package
# (its CUDA_CASES: head size 64, two kv heads; gemma3-256-cu's 256,
# Gemma's), one per family operator
# set: qwen2 (Q/K/V biases, NEOX, YaRN), qwen3 (Q/K norms, a head size
# twice dim / heads), gemma2 (sqrt(D) embeddings, GELU, post-norms,
# attention and final soft-caps, windows on alternate layers), gemma3
# (Q/K and post-norms, five window layers in six with their own RoPE
# base, linear scaling on the others), phi3 (fused QKV and gate-up,
# LongRoPE) and llama with a window (Mistral v0.1). Each, through
# tests/gpu/backend_cuda_test's families(): a prompt of 100 (past the
# windows of 20 and 24 and the original contexts of 48) and 12 greedy
# steps, the largest |logit difference| and relative L2 to the cpu (under
# 5e-2) and the greedy tokens equal but at the cpu's near-ties; 1024
# tokens in chunks of 32, 256 and 1024 (1e-2); layer ranges and SPP
# stages (the same bits); TP 2 and KVP 2 (pieces of 64 positions, so a
# window spans pieces) against one backend, decode graphs replayed. Then
# a head size the kernels lack (32) is refused at open, naming it. Then
# the mixtures of experts (CUDA_MOE_CASES: the routed FFN, kernels/moe.cu)
# through the same cases. Skips
# without the cuda build or the cache (SmolLM2's tokenizer, the venv).
. "$(dirname "$0")/lib.sh"
cuda_mock_need
need_model "$smollm2"
need_py numpy gguf
cuda_mock_build
fams="qwen2-cu qwen3-cu gemma2-cu gemma3-cu phi3-cu llama-swa-cu
    gemma3-256-cu"
moes=$("$py" "$top/tests/ref/arch_model.py" cuda-moe-cases)
# every model in one run (its reading of SmolLM2's tokenizer is most of
# its time), then the work in two halves side by side (CI has two
# cores): the families (backend_cuda_test, gpu-check.sh's families step)
# and the mixtures of experts (the same, its moe step); each half's
# output is checked below, in the order it was
# shellcheck disable=SC2086 # the case names, one argument each
"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp" $fams llama \
    $moes
# half NAME MODELS PART DIR VAR=VALUE: backend_cuda_test on MODELS
# (families(), quick) into $tmp/NAME and NAME.err, then gpu-check.sh
# --part PART on the models copied into DIR (GPU_PACK's families folder,
# or GPU_MOE: VAR=VALUE says which) into $tmp/NAME.gc; NAME.st and
# NAME.gst their statuses
half() {
	h_paths=
	for f in $2; do
		h_paths="$h_paths $tmp/$f.gguf"
	done
	st=0
	MEDHA_CUDA_TEST_FAMILIES=$h_paths MEDHA_CUDA_TEST_QUICK=1 \
	    LD_LIBRARY_PATH=$mock "$mock/backend_cuda_test" >"$tmp/$1" \
	    2>"$tmp/$1.err" || st=$?
	echo $st >"$tmp/$1.st"
	mkdir -p "$4" "$tmp/$1-out" "$tmp/$1-work"
	for f in $2; do
		cp "$tmp/$f.gguf" "$4/"
	done
	st=0
	env OUT="$tmp/$1-out" work="$tmp/$1-work" "$5" \
	    GPU_TESTS="$mock" MEDHA_CUDA_TEST_QUICK=1 \
	    MEDHA_CUDA_TEST_CASES=numerics CUDA_HOME=/nonexistent \
	    NCCL_LIB="$mock" LD_LIBRARY_PATH="$mock" \
	    bash "$top/contrib/gpu-check.sh" --part "$3" >"$tmp/$1.gc" 2>&1 ||
	    st=$?
	echo $st >"$tmp/$1.gst"
}
half out "$fams" families "$tmp/pack/families" GPU_PACK="$tmp/pack" &
half moe "$moes" moe "$tmp/gpu-moe" GPU_MOE="$tmp/gpu-moe" &
wait
[ "$(cat "$tmp/out.st")" = 0 ] || {
	cat "$tmp/out" "$tmp/out.err"
	exit 1
}
cat "$tmp/out"
grep -q '^ok: 0 failed' "$tmp/out"
for f in $fams; do
	for what in "family $f: max |logit diff|" "$f: 1024 tokens in chunks" \
	    "$f: layers \[0, 1)" "$f: TP 2 against" "$f: KVP 2 against"; do
		grep -q "^ok   $what" "$tmp/out" || {
			echo "cuda-mock-arch: no \"ok $what\" line"
			exit 1
		}
	done
done
# decode steps of these models went through captured graphs too
grep -Eq '^mock: [1-9][0-9]* graphs captured, [1-9][0-9]* replays' "$tmp/out"
# a head size the attention kernels lack: refused at open, named
MEDHA_CUDA_TEST_FAMILIES=$tmp/llama.gguf MEDHA_CUDA_TEST_CASES=numerics \
    LD_LIBRARY_PATH=$mock "$mock/backend_cuda_test" >"$tmp/hd.out" 2>&1 || :
grep -q '^FAIL cuda backend: cuda: llama: a head size (attention.key_length) of 32 is not supported (64, 128 or 256' \
    "$tmp/hd.out" || {
	cat "$tmp/hd.out"
	echo "cuda-mock-arch: head size 32 not refused by name"
	exit 1
}
echo "cuda-mock-arch: head size 32 refused at open, named"
# the mixtures of experts (issue 41 item 3: the routed FFN of
# libcore/cuda/cuda_moe.c, kernels/moe.cu's launchers as the stand-ins'
# twins): Mixtral's normalised softmax top-2 of 8, qwen2moe's gated
# shared expert with routed and dense layers in turn, qwen3moe's top-4 of
# 16 with Q/K norms, llama4's sigmoid top-1 on the input with a shared
# expert, NoPE with its temperature and L2 Q/K norms (routed and dense
# layers in turn), each through the same cases as the families (the
# cpu backend's tokens but at near-ties; a routing near-tie may move a
# step: backend_cuda_test's rule for experts), TP 2 splitting every
# expert's rows; then their decode steps replayed from graphs
[ "$(cat "$tmp/moe.st")" = 0 ] || {
	cat "$tmp/moe" "$tmp/moe.err"
	exit 1
}
cat "$tmp/moe"
grep -q '^ok: 0 failed' "$tmp/moe"
for f in $moes; do
	for what in "family $f: max |logit diff|.* of 13 equal" \
	    "$f: 1024 tokens in chunks.*rel L2 0.000e+00" \
	    "$f: layers \[0, 1).*rel L2 0.000e+00, 0.000e+00" \
	    "$f: TP 2 against" "$f: KVP 2 against"; do
		grep -q "^ok   $what" "$tmp/moe" || {
			echo "cuda-mock-arch: no \"ok $what\" line"
			exit 1
		}
	done
done
grep -Eq '^mock: [1-9][0-9]* graphs captured, [1-9][0-9]* replays' "$tmp/moe"
# contrib/gpu-check.sh's moe step on the stand-ins (its wiring: the models
# from gpu-pack.sh's gpu-moe folder, a row per mixture, the acceptance line;
# the stand-ins have no kernels_test, so no rates)
[ "$(cat "$tmp/moe.gst")" = 0 ] || {
	cat "$tmp/moe.gc"
	exit 1
}
grep '^moe-row: ' "$tmp/moe.gc"
[ "$(grep -c '^moe-row: [^ ]* ok max |logit diff| .* (median .*), greedy [0-9]* of [0-9]* equal' \
    "$tmp/moe.gc")" = 4 ] &&
    grep '^figure: 4 of 4 mixtures as the cpu backend' "$tmp/moe.gc" || {
	cat "$tmp/moe.gc"
	exit 1
}
# contrib/gpu-check.sh's families step on the stand-ins (its wiring: the
# models from the pack's families folder, a table row per family)
[ "$(cat "$tmp/out.gst")" = 0 ] || {
	cat "$tmp/out.gc"
	exit 1
}
grep '^family-row: ' "$tmp/out.gc"
[ "$(grep -c '^family-row: [^ ]* ok max |logit diff| .* greedy [0-9]* of [0-9]* equal' \
    "$tmp/out.gc")" = 7 ] &&
    grep '^figure: 7 of 7 families as the cpu backend' "$tmp/out.gc" || {
	cat "$tmp/out.gc"
	exit 1
}

#!/bin/sh
# arch-refuse.sh: a model whose metadata or tensors ask for what medha
# does not do is refused when it loads, exit 1, with the key or tensor
# named; nothing is ignored in silence. The files are random models of
# tests/ref/arch_model.py with one flaw each: a RoPE scaling type medha
# lacks, an architecture it does not know, a bias tensor missing, a
# sliding window larger than the context, a tensor the model would not
# read, experts without a top-k, and a gating function key (llama.cpp's
# expert_gating_func, which medha does not read: each family's routing is
# its own). The cuda backend, where it is built in, refuses what its
# kernels cannot run by name (exit 1) before it looks for a device: here
# the test mixture's head size of 48 (it runs mixtures of head sizes 64,
# 128 and 256: cuda-mock-arch.sh). A phi3 file's window larger than the
# context is not refused
# but read as no window, as llama.cpp reads it (a real Phi-3.5 says
# 262144 with a context of 131072; llama.cpp drops phi3 windows): the
# file loads and gives the logits of the same model without the key,
# bit for bit. Needs the cache's venv (gguf, numpy) and SmolLM2's
# tokenizer; skips without them.
. "$(dirname "$0")/lib.sh"
need_model "$smollm2"
need_py numpy gguf

"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp" qwen2:scaling \
    qwen2:arch qwen2:bias llama:window qwen2:extra qwen3moe:topk \
    qwen3moe:gating qwen3moe
mkdir "$tmp/phi3"
"$py" "$top/tests/ref/arch_model.py" write "$smollm2" "$tmp/phi3" phi3 \
    phi3:window
check() { # FLAW TEXT: the worker refuses the file, saying TEXT
	expect_status 1 "$bin/medha-worker" -m "$tmp/$1.gguf" -p hi -n 1
	if ! grep -qF "$2" "$tmp/err"; then
		echo "$1: want \"$2\" in:"
		cat "$tmp/err"
		exit 1
	fi
	echo "$1: $(cat "$tmp/err")"
}
check scaling 'metadata qwen2.rope.scaling.type: rope scaling "dynamic" is not supported'
check arch 'general.architecture: "starcoder2" is not supported'
check bias 'tensor blk.1.attn_k.bias is missing'
check window 'llama.attention.sliding_window: a window of 8192 is larger than the context (4096)'
check extra 'tensor blk.0.attn_output.bias: not part of a qwen2 model'
check topk 'missing key qwen3moe.expert_used_count'
check gating 'metadata qwen3moe.expert_gating_func is not supported'
expect_status 1 "$bin/medha-worker" --backend cuda -m "$tmp/qwen3moe.gguf" \
    -p hi -n 1
if grep -qF 'not built into' "$tmp/err"; then
	echo "cuda: not built into this program, not checked"
elif grep -qF 'qwen3moe: a head size (attention.key_length) of 48 is not supported' "$tmp/err"; then
	echo "cuda: $(cat "$tmp/err")"
else
	echo "cuda: want the refusal of head size 48 in:"
	cat "$tmp/err"
	exit 1
fi

for f in phi3 window; do
	"$bin/medha-worker" -m "$tmp/phi3/$f.gguf" -p 'The capital of France is' \
	    -n 4 --tokens --logits "$tmp/phi3/$f.f32" >"$tmp/phi3/$f.ids"
done
cmp -s "$tmp/phi3/phi3.f32" "$tmp/phi3/window.f32" &&
    cmp -s "$tmp/phi3/phi3.ids" "$tmp/phi3/window.ids" ||
    { echo "phi3 with a window of 8192 (context 4096): not phi3's logits"; exit 1; }
echo "phi3 with a window of 8192 (context 4096): loads, phi3's logits bit for bit"

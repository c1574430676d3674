#!/bin/sh
# bench-moe.sh: the CPU backend on a mixture of experts against
# llama.cpp, both measured in this run, at THREADS threads (2; issue 41,
# acceptance 3). The model is random, written by tests/ref/arch_model.py
# (qwen3moe-bench: 8 layers of width 1024, 32 experts of 512 rows, top-4,
# SmolLM2's vocabulary, a context of 16384) and made Q4_K_M by
# contrib/gguf-convert (the experts Q4_K, down Q6_K in llama.cpp's layers,
# the routers f32): about 400 MB. At depths of 1K and 8K, a prefill
# of 512 tokens and 32 decode steps, f16 KV cache on both sides: medha
# through contrib/bench-ctx.c, llama.cpp through
# contrib/bench-ctx-llama.py on llama-cpp-python compiled on this machine
# (bench-cpu.sh ctx builds it). REPS (2) runs of each, interleaved; every
# line printed. Needs contrib/fetch-refs.sh first; the model is kept in
# cache/models. llama-cpp-python's llama.cpp is built with OpenMP, whose
# threads spin at barriers: on a loaded machine a spinning thread whose
# partner lost its core stalls the step (decode 2 to 7 tok/s here at load
# 7, 46 tok/s with OMP_WAIT_POLICY=passive in the same minute), so the
# peer runs with OMP_WAIT_POLICY=passive unless the environment sets it
# (active suits an idle machine).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${MEDHA_CACHE:-$top/cache}
py=$cache/venv/bin/python
threads=${THREADS:-2}
reps=${REPS:-2}
m=$cache/models/qwen3moe-bench.Q4_K_M.gguf
cd "$top"
make -s build/contrib/gguf-convert build/contrib/bench-ctx
if [ ! -s "$m" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	"$py" tests/ref/arch_model.py write \
	    "$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp" qwen3moe-bench
	build/contrib/gguf-convert "$tmp/qwen3moe-bench.gguf" "$m" q4_k_m
fi
"$py" -c 'import llama_cpp' 2>/dev/null ||
	{ echo "bench-moe: no llama-cpp-python (bench-cpu.sh ctx builds it)" >&2; exit 1; }
i=0
while [ $i -lt "$reps" ]; do
	echo "medha:"
	build/contrib/bench-ctx -k f16 -t "$threads" "$m" 1024 8192
	echo "llama.cpp:"
	OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} \
	    "$py" contrib/bench-ctx-llama.py -t "$threads" "$m" 1024 8192
	i=$((i + 1))
done

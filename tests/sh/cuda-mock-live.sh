#!/bin/sh
# cuda-mock-live.sh: the cuda backend's operator side without a GPU: a
# medha-worker linked against the host stand-ins of the CUDA runtime,
# kernels/ and cuBLASLt that tests/sh/cuda-mock.sh uses (tests/gpu/mock/,
# and a device that calls itself an H200), driven as on a lent GPU.
# --backend cuda one-shot (-p through the runner, on the random test
# model with a tokenizer); medha-prof --backend cuda writing a profile
# labelled h200 and checking it; a daemon worker announcing its GPU as
# h200 to the scheduler; then contrib/gpu-check.sh's live parts on it:
# MEDHA_BACKEND=cuda examples/serve.sh single with 16 concurrent requests
# against one-shot runs, and spp2 and kvp2 (two workers, --coll nng)
# against single. What it checks is the wiring (flags, the runner, the
# HELLO, serve.sh, gpu-check.sh), not the numerics, which the stand-ins
# compute on the host. Skips where the build has no cuda backend, or
# without the Python venv that writes the random model.
. "$(dirname "$0")/lib.sh"
lib=$tests/../libmedha.a
objs=$tests/../cmd
[ -f "$lib" ] && ar t "$lib" | grep -q '^backend_cuda\.o$' ||
	skip "no cuda backend in $lib (CUDA=0, or nvcc not found)"
[ -f "$objs/medha-worker/main.o" ] || skip "no $objs/medha-worker/main.o (make first)"
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cublasLt.h" ] || skip "no $cuda/include/cublasLt.h"
need_model
has_py gguf numpy || skip "$py lacks gguf (contrib/fetch-refs.sh)"
"$py" "$top/tests/ref/random_model.py" "$model" "$tmp/random.gguf"

cc=${CC:-cc}
fl="-O2 -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA -isystem $cuda/include \
    -iquote $top/libcore -iquote $top/kernels -I$top/tests"
cat >"$tmp/props.c" <<'EOF'
#include <cuda_runtime_api.h>
#include <string.h>
cudaError_t
cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	(void)d;
	memset(p, 0, sizeof(*p));
	strcpy(p->name, "NVIDIA H200 (host stand-in)");
	return cudaSuccess;
}
EOF
# shellcheck disable=SC2086 # $fl: several flags
$cc $fl -fPIC -shared -o "$tmp/libcublasLt.so.13" \
    "$top/tests/gpu/mock/cublaslt_mock.c" "$lib"
mkdir "$tmp/bin"
# shellcheck disable=SC2086
$cc $fl -o "$tmp/bin/medha-worker" "$objs"/medha-worker/*.o "$objs/common.o" \
    "$tmp/props.c" "$top/tests/gpu/mock/cudart_mock.c" -rdynamic "$lib" \
    -lnng -lmsgpackc -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm -ldl
# shellcheck disable=SC2086
$cc $fl -o "$tmp/bin/medha-prof" "$objs"/medha-prof/*.o "$objs/common.o" \
    "$tmp/props.c" "$top/tests/gpu/mock/cudart_mock.c" -rdynamic "$lib" \
    -lnng -lmsgpackc -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm -ldl
for p in medha-sched medha-router medha-trace; do
	ln -s "$bin/$p" "$tmp/bin/$p"
done
LD_LIBRARY_PATH=$tmp
export LD_LIBRARY_PATH
mw=$tmp/bin/medha-worker

# one-shot on the stand-in GPU, and its refusals
"$mw" --backend cuda -m "$tmp/random.gguf" -p "Once upon a time" -n 8 \
    --tokens >"$tmp/ids" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
[ "$(wc -w <"$tmp/ids")" = 8 ] || { cat "$tmp/ids" "$tmp/err"; exit 1; }
expect_status 2 "$mw" --backend cuda -m llama3-8b -p hi
grep -q 'no tokenizer' "$tmp/err"

# medha-prof --backend cuda: a table labelled with the GPU and bf16 KV
# that --check predicts with (the stand-in's times are not the GPU's)
"$tmp/bin/medha-prof" --backend cuda -m "$tmp/random.gguf" -q --reps 1 \
    --max-context 256 --decode-total 256 -o "$tmp/prof.csv" \
    --check 5 >"$tmp/prof.out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
grep -q '^# medha-profile v1 model=random gpu=h200 tp=1 backend=cuda .*kv=bf16' \
    "$tmp/prof.csv" || { head -3 "$tmp/prof.csv"; exit 1; }
grep -q '^predictor error: median' "$tmp/prof.out"

# a daemon worker says it is an h200 (the scheduler's predictor device)
"$bin/medha-sched" -l "ipc://$tmp/s.sock" -m "$tmp/random.gguf" -v \
    2>"$tmp/sched.log" &
sp=$!
"$mw" -s "ipc://$tmp/s.sock" --backend cuda -m "$tmp/random.gguf" \
    --kv-blocks 64 --max-seqs 4 2>"$tmp/worker.log" &
wp=$!
wait_for "$tmp/sched.log" 'ready' 30 $sp
grep -q 'worker 0 (tp 0, spp 0, kvp 0): cuda backend on h200,' "$tmp/sched.log" ||
    { echo "the scheduler's log names no h200:"; cat "$tmp/sched.log"; exit 1; }
kill -TERM $wp $sp
wait $wp $sp || :

# gpu-check.sh's live parts (a few KV blocks each: the stand-in's
# "device" is this machine's memory), with the stand-in's cuBLASLt, not
# CUDA's, on the library path
mkdir "$tmp/work" "$tmp/gout"
part() {
	env work="$tmp/work" OUT="$tmp/gout" GPU_CHECK_BACKEND=cuda \
	    GPU_MODEL="$tmp/random.gguf" MEDHA_BIN="$tmp/bin" GPU_PACK=/nonexistent \
	    MEDHA_WORKER_OPTS="--kv-blocks 512 --max-seqs 16" \
	    CUDA_HOME=/nonexistent NCCL_LIB="$tmp" timeout 300 \
	    bash "$top/contrib/gpu-check.sh" --part "$1" >"$tmp/$1.log" 2>&1
}
part live_single || :
grep -q '^figure: 16 requests, 0 differ from -p; 8 decodes .*x one' \
    "$tmp/live_single.log" || { cat "$tmp/live_single.log"; exit 1; }
for t in live_spp2 live_kvp2; do
	part $t || { cat "$tmp/$t.log"; exit 1; }
	grep -q '^figure: 16 requests, 0 differ from single' "$tmp/$t.log"
done
sed -n 's/^figure: /cuda-mock-live: /p' "$tmp"/live_*.log

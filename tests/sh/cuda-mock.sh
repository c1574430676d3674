#!/bin/sh
# cuda-mock.sh: the cuda backend's host side (libcore/engine/
# backend_cuda*.c, as built into libmedha.a with CUDA=1) run without a
# GPU: tests/gpu/backend_cuda_test linked against host-memory stand-ins
# for the CUDA runtime and kernels/ (tests/gpu/mock/cudart_mock.c, plain
# C twins of kernels.h) and for cuBLASLt (tests/gpu/mock/
# cublaslt_mock.c, built as the libcublasLt.so.13 the backend loads).
# It checks what the backend itself does: weights and their TP shares,
# block tables and descriptors, layer ranges, the TP all-reduce and the
# KVP merge through host collectives, sampling; the stand-ins compute in
# f32/f64 on the host, so it says nothing about the real kernels or
# cuBLASLt (tests/gpu/kernels_test and backend_cuda_test on a GPU do).
# Decode graphs: a capture records each launch with its arguments (by
# value, as CUDA's does) and a replay runs them, so a graph that reads
# stale arguments gives other logits. Quick mode: a 1K prompt for the
# chunks, no SmolLM2. Skips where the build has no cuda backend.
. "$(dirname "$0")/lib.sh"
lib=$tests/../libmedha.a
[ -f "$lib" ] && ar t "$lib" | grep -q '^backend_cuda\.o$' ||
	skip "no cuda backend in $lib (CUDA=0, or nvcc not found)"
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cublasLt.h" ] || skip "no $cuda/include/cublasLt.h"
cc=${CC:-cc}
fl="-O2 -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA -isystem $cuda/include \
    -iquote $top/libcore -iquote $top/kernels -I$top/tests"
# shellcheck disable=SC2086 # $fl: several flags
$cc $fl -fPIC -shared -o "$tmp/libcublasLt.so.13" \
    "$top/tests/gpu/mock/cublaslt_mock.c" "$lib"
# shellcheck disable=SC2086
$cc $fl -o "$tmp/backend_cuda_test" "$top/tests/gpu/backend_cuda_test.c" \
    "$top/tests/gpu/mock/cudart_mock.c" -rdynamic "$lib" -lcmocka -lnng -lmsgpackc \
    -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm -ldl
MEDHA_CUDA_TEST_QUICK=1 LD_LIBRARY_PATH=$tmp \
    "$tmp/backend_cuda_test" > "$tmp/out" || {
	cat "$tmp/out"
	exit 1
}
cat "$tmp/out"
grep -q '^ok: 0 failed' "$tmp/out"
# decode steps went through captured graphs (the stand-ins replay the
# launches a capture recorded, arguments as captured)
grep -Eq '^mock: [1-9][0-9]* graphs captured, [1-9][0-9]* replays' "$tmp/out"

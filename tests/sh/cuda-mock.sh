#!/bin/sh
# cuda-mock.sh: the cuda backend's host side (libcore/cuda/ and its
# adapter libcore/engine/backend_cuda.c, as built into libmedha.a with
# CUDA=1) run without a GPU: tests/gpu/backend_cuda_test linked (make
# cuda-mock) against host-memory stand-ins
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
cuda_mock_need
cuda_mock_build
# bg NAME [VAR=VALUE...]: backend_cuda_test, quick, in the background
# with the environment given, its output in $tmp/NAME.out and .err and
# its status in $tmp/NAME.st. The runs are independent: side by side
# they take about half the time on CI's two cores
bg() {
	bg_n=$1
	shift
	(st=0
	env "$@" MEDHA_CUDA_TEST_QUICK=1 LD_LIBRARY_PATH=$mock \
	    "$mock/backend_cuda_test" >"$tmp/$bg_n.out" 2>"$tmp/$bg_n.err" ||
	    st=$?
	echo $st >"$tmp/$bg_n.st") &
}
bg all
# cuBLASLt refusing an algorithm at a larger m than it was chosen at, a
# decode step's capture failing, a NaN among the logits (each below)
bg refuse-invalid MEDHA_CUDA_TEST_CASES=chunks MEDHA_LT_MOCK_REFUSE=invalid:128
bg refuse-unsupported MEDHA_CUDA_TEST_CASES=chunks \
    MEDHA_LT_MOCK_REFUSE=unsupported:128
bg capture-fail MEDHA_CUDA_TEST_CASES=numerics MEDHA_MOCK_FAIL_CAPTURE=all
bg nan MEDHA_CUDA_TEST_CASES=chunks MEDHA_LT_MOCK_NAN=512
# and contrib/gpu-check.sh's batch_inv step (last below)
mkdir "$tmp/gout" "$tmp/gwork"
(st=0
env OUT="$tmp/gout" work="$tmp/gwork" GPU_PACK=/nonexistent \
    GPU_TESTS="$mock" MEDHA_CUDA_TEST_QUICK=1 CUDA_HOME=/nonexistent \
    NCCL_LIB="$mock" LD_LIBRARY_PATH="$mock" \
    bash "$top/contrib/gpu-check.sh" --part batch_inv >"$tmp/bi.log" 2>&1 ||
    st=$?
echo $st >"$tmp/bi.st") &
wait
[ "$(cat "$tmp/all.st")" = 0 ] || {
	cat "$tmp/all.out" "$tmp/all.err"
	exit 1
}
mv "$tmp/all.out" "$tmp/out"
mv "$tmp/all.err" "$tmp/err"
cat "$tmp/out"
grep -q '^ok: 0 failed' "$tmp/out"
# decode steps went through captured graphs (the stand-ins replay the
# launches a capture recorded, arguments as captured)
grep -Eq '^mock: [1-9][0-9]* graphs captured, [1-9][0-9]* replays' "$tmp/out"
# the attention's plan made once a forward pass, not once a layer (the
# model has two: at most two calls a plan, and fewer plans than calls)
# shellcheck disable=SC2046 # three numbers, split on purpose
set -- $(sed -n 's/^mock: \([0-9]*\) attention plans, \([0-9]*\) attention calls (\([0-9]*\) made their own)$/\1 \2 \3/p' "$tmp/out")
[ $# = 3 ] && [ "$1" -gt 0 ] && [ "$1" -lt "$2" ] && [ "$2" -le $(($1 * 2)) ] &&
    [ "$3" = 0 ] || {
	echo "cuda-mock: attention plans, calls, calls unplanned: $*"
	exit 1
}
echo "cuda-mock: $1 attention plans for $2 calls"
# no fallback: the algorithms chosen at 128 rows took the 1K prompt's
# 256 and 1024 (the stand-in refuses more rows than an algorithm was
# chosen at unless its reduction is none or in place, as cuBLASLt may)
if grep 'fallback' "$tmp/err"; then
	echo "cuda-mock: a fallback without a refusal asked for"
	exit 1
fi

# bq NAME: the run NAME (bg, above) passed, else its output and fail
bq() {
	[ "$(cat "$tmp/$1.st")" = 0 ] && grep -q '^ok: 0 failed' "$tmp/$1.out" || {
		cat "$tmp/$1.out" "$tmp/$1.err"
		echo "cuda-mock: $1 failed"
		exit 1
	}
}
# cuBLASLt refusing an algorithm at a larger m than it was chosen at,
# with INVALID_VALUE (as for too little workspace) or NOT_SUPPORTED: the
# chunks of 256 and 1024 go through the fallback (an algorithm chosen at
# their m) and give the logits of the chunks of 32 (under the refusal);
# each shape's fallback is said once
for how in invalid:INVALID_VALUE unsupported:NOT_SUPPORTED; do
	bq "refuse-${how%%:*}"
	e=$tmp/refuse-${how%%:*}.err
	grep -q "^ok   gqa: 1024 tokens in chunks of 32 / 256 .*rel L2 0\.000e+00" \
	    "$tmp/refuse-${how%%:*}.out"
	n=$(grep -c "^medha: cuda: fallback: .* refuses [0-9]* with ${how#*:}:" "$e")
	[ "$n" -ge 1 ] && [ -z "$(sort "$e" | uniq -d)" ] || {
		cat "$e"
		echo "cuda-mock: ${how#*:}: $n fallbacks said, or one twice"
		exit 1
	}
	echo "cuda-mock: cuBLASLt refusing with ${how#*:}: $n shapes fell" \
	    "back, the same logits"
done
# a decode step's capture failing (every capture, as told): the steps
# run eagerly with the cpu backend's greedy tokens, the key's failure
# is said once and no capture is tried again for it (one failure for
# the one key of numerics' 24 decode steps)
bq capture-fail
o=$tmp/capture-fail.out
grep -q '^ok   gqa: greedy 24 steps: 0 differ from the cpu backend' "$o"
grep -q '^mock: 0 graphs captured, 0 replays, 1 captures failed$' "$o" || {
	cat "$o" "$tmp/capture-fail.err"
	echo "cuda-mock: a failed capture was tried again"
	exit 1
}
[ "$(grep -c '^medha: cuda: fallback: the decode step of 1 sequences .* not captured' \
    "$tmp/capture-fail.err")" = 1 ]
echo "cuda-mock: a failed capture: 24 decodes eager, the cpu's tokens," \
    "its key not tried again"
# a NaN among the logits (the stand-in's product of the 512 vocabulary
# rows plants one): the forward pass fails with the row, as the cpu
# backend's does; the check is the argmax kernel's (-1 for such a row),
# no scan of the logits on the host
cat "$tmp/nan.err" >>"$tmp/nan.out"
grep -q '^FAIL cuda forward at [0-9]*: logits row 0: a token.s logit is NaN or infinite' \
    "$tmp/nan.out" || {
	cat "$tmp/nan.out"
	echo "cuda-mock: NaN logits not refused"
	exit 1
}
echo "cuda-mock: NaN logits: the forward pass refused them"
# contrib/gpu-check.sh's batch_inv step on the stand-ins (its wiring:
# the mixed batch by default and with MEDHA_CUDA_GEMM=fast, one line of
# the table; the stand-in's products are the same bits either way)
[ "$(cat "$tmp/bi.st")" = 0 ] || {
	cat "$tmp/bi.log"
	exit 1
}
grep '^figure: the same bits in a mixed batch: default 1 of 1 models, MEDHA_CUDA_GEMM=fast 1 of 1$' \
    "$tmp/bi.log" || { cat "$tmp/bi.log"; exit 1; }

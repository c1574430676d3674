#!/bin/sh
# kernels-simt.sh: the CUDA kernels' own device code (kernels/*.cu but
# sample.cu) run on the host, before any GPU runs it: each source is
# compiled as host C++ by g++ with tests/gpu/simt/simt.h force-included
# (the Makefile's simt target: simt.h defines the kernels' launch and
# shared-memory macros the emulator's way), and a SIMT emulator
# (tests/gpu/simt/simt.cc) runs every CUDA thread of a block as a
# coroutine, meeting at __syncthreads and at each warp collective:
# shuffles, and attn_mma.cu's mma.sync m16n8k16, ldmatrix (.trans),
# cp.async and cvt.rn.bf16x2.f32, whose host versions (MEDHA_SIMT)
# follow the PTX ISA's fragment layouts and rounding. tests/gpu/simt/simt_test.c runs the attention
# launcher (plan, simple and mma kernels, split, fold) on small paged
# GQA batches, both KV types, head_dim 64, 128 and 256, and the other
# kernels, against tests/gpu/kernels_test.c's references. Then the
# attention again with the block's threads scheduled in other orders:
# the same errors, or a barrier is missing; and on an H100's 132 SMs
# (other splits). The four runs go side by side (one core each).
# tests/gpu/simt/mutants.sh checks that the emulator
# catches faults planted in the kernels. SIMT_SAN=1 builds it all with
# AddressSanitizer and UBSan (a kernel's read past an allocation, a
# misaligned vector load; about twice as long). Skips where g++ or
# CUDA's headers are absent, or off x86-64 (the coroutine switch).
. "$(dirname "$0")/lib.sh"
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=$(dirname "$tests")/libmedha.a
[ -f "$cuda/include/cuda_bf16.h" ] || skip "no $cuda/include/cuda_bf16.h"
command -v g++ >/dev/null || skip "no g++"
[ "$(uname -m)" = x86_64 ] || skip "the emulator's coroutines are x86-64"
[ -f "$lib" ] || skip "no $lib (make first)"
harness_make simt
st=$(dirname "$lib")/tests/gpu/simt
[ "${SIMT_SAN:-0}" = 0 ] || st=$st-san
st=$st/simt_test
# the four runs side by side (each one thread; on CI's two cores about
# half the time one after another): every case, then the attention's
# with other schedules (SIMT_ORDER rev and warp) and on 132 SMs
"$st" >"$tmp/out" 2>&1 &
p0=$!
SIMT_ORDER=rev "$st" attn >"$tmp/o-rev" 2>&1 &
p1=$!
SIMT_ORDER=warp "$st" attn >"$tmp/o-warp" 2>&1 &
p2=$!
SIMT_SMS=132 "$st" attn >"$tmp/o-132" 2>&1 &
p3=$!
st0=0 st1=0 st2=0 st3=0
wait $p0 || st0=$?
wait $p1 || st1=$?
wait $p2 || st2=$?
wait $p3 || st3=$?
[ $st0 = 0 ] || {
	cat "$tmp/out"
	exit 1
}
cat "$tmp/out"
grep -q '^ok   simt attn .*\[mma+simple\]' "$tmp/out"
# head size 256 (Gemma 2/3): the simple kernel's, on both paths
grep -q '^ok   simt attn mixed hd256 .*\[simple\]' "$tmp/out"
# llama4's chunked attention (rows' chunks starting in other tiles and
# parts, with a window too) and its temperature
grep -q '^ok   simt attn kvp pieces hd64 4/4 bf16 chunk 64 \[mma+simple\]' "$tmp/out"
grep -q '^ok   simt attn gqa chunks hd128 8/2 bf16 chunk 64 window 40 \[simple\]' "$tmp/out"
grep -q '^ok   attn_temp ' "$tmp/out"
# a mixture of experts' kernels (moe.cu): routing, sort, grouped product
for c in mixtral qwen2moe llama4 "qwen3moe decode"; do
	grep -q "^ok   moe $c: grouped product" "$tmp/out"
	grep -q "^ok   moe $c: sort .*faults: 0 " "$tmp/out"
done
grep -Eq '^simt: .* [1-9][0-9]* mma, [1-9][0-9]* ldmatrix' "$tmp/out"
# the bf16 cache's packing by cvt.rn.bf16x2.f32 (the emulator's own
# rounding of it), the mma path's Q and P
grep -Eq '^simt: .* [1-9][0-9]* cvt\.rn\.bf16x2' "$tmp/out"
# other schedules (simt.cc, SIMT_ORDER): the threads in reverse, and
# each warp alone to the next barrier; the same measured errors, or a
# barrier is missing (a race moves them)
grep '^.... simt attn' "$tmp/out" >"$tmp/a"
for x in rev:$st1 warp:$st2; do
	order=${x%%:*}
	[ "${x#*:}" = 0 ] || {
		cat "$tmp/o-$order"
		echo "kernels-simt: failed with SIMT_ORDER=$order"
		exit 1
	}
	grep '^.... simt attn' "$tmp/o-$order" >"$tmp/b"
	cmp -s "$tmp/a" "$tmp/b" || {
		echo "kernels-simt: the attention's errors move with the" \
		    "schedule (SIMT_ORDER=$order):"
		diff "$tmp/a" "$tmp/b"
		exit 1
	}
	echo "SIMT_ORDER=$order: the same attention errors"
done
[ $st3 = 0 ] || {
	cat "$tmp/o-132"
	echo "kernels-simt: failed with SIMT_SMS=132"
	exit 1
}
echo "SIMT_SMS=132: $(tail -1 "$tmp/o-132")"

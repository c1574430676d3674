#!/bin/sh
# kernels-ref.sh: the CPU references of the GPU kernels' test are right
# before any GPU runs them: tests/gpu/kernels_test --self-check compares
# its float64 attention reference with libcore's medha_cpu_attn and
# medha_attn_merge on the same random paged inputs (a mixed batch, KVP
# pieces, one after its queries, a longer context), and checks the bf16
# rounding and the random-weight generator's twin. Needs no GPU (run
# without a device, kernels_test does the same, then skips); skips
# where the program is not built (CUDA=0, or make did not build
# tests/gpu/).
. "$(dirname "$0")/lib.sh"

prog=$tests/gpu/kernels_test
[ -x "$prog" ] || skip "$prog not built (make $prog; needs nvcc)"
"$prog" --quick --self-check >"$tmp/out" 2>&1 || {
	cat "$tmp/out"
	exit 1
}
grep -q '^ok   self-check attn' "$tmp/out" || {
	cat "$tmp/out"
	echo "kernels-ref: no attention self-check ran"
	exit 1
}

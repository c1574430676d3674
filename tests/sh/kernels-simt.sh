#!/bin/sh
# kernels-simt.sh: the CUDA kernels' own device code (kernels/*.cu but
# sample.cu) run on the host, before any GPU runs it: each source is
# compiled as host C++ by g++ with tests/gpu/simt/simt.h (its launches
# "k<<<...>>>(args)" rewritten by sed into simt_launch(k, ...)(args)),
# and a SIMT emulator (tests/gpu/simt/simt.cc) runs every CUDA thread
# of a block as a coroutine, meeting at __syncthreads and at each warp
# collective: shuffles, and attn_mma.cu's mma.sync m16n8k16, ldmatrix
# (.trans) and cp.async, whose host versions (MEDHA_SIMT) follow the
# PTX ISA's fragment layouts. tests/gpu/simt/simt_test.c runs the
# attention launcher (plan, simple and mma kernels, split, fold) on
# small paged GQA batches, both KV types, head_dim 64 and 128, and the
# other kernels, against tests/gpu/kernels_test.c's references. Then
# the attention again with the block's threads scheduled in reverse
# order: the same errors, or a barrier is missing. Skips where g++ or
# CUDA's headers are absent, or off x86-64 (the coroutine switch).
. "$(dirname "$0")/lib.sh"
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=$(dirname "$tests")/libmedha.a
[ -f "$cuda/include/cuda_bf16.h" ] || skip "no $cuda/include/cuda_bf16.h"
command -v g++ >/dev/null || skip "no g++"
[ "$(uname -m)" = x86_64 ] || skip "the emulator's coroutines are x86-64"
[ -f "$lib" ] || skip "no $lib (make first)"
simt=$top/tests/gpu/simt
cxx="g++ -std=c++17 -O1 -g -w -DMEDHA_SIMT -isystem $cuda/include \
    -I$top/kernels -include $simt/simt.h"
objs=
for f in attn attn_mma kv norm rope merge add embed swiglu; do
	sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(/simt_launch(\1, \3)(/' \
	    -e 's/extern __shared__ \(__align__([0-9]*) \)\{0,1\}\([A-Za-z0-9_]*\) \([A-Za-z_][A-Za-z0-9_]*\)\[\];/\2 *\3 = (\2 *)simt_dyn_smem();/' \
	    "$top/kernels/$f.cu" >"$tmp/$f.cc"
	! grep -n '<<<\|extern __shared__' "$tmp/$f.cc" || {
		echo "kernels-simt: a launch or extern shared the sed missed"
		exit 1
	}
	objs="$objs $tmp/$f.o"
done
# two compiles at a time (the CUDA headers make each a few seconds)
for f in attn attn_mma kv norm rope merge add embed swiglu; do
	echo "$f"
done | xargs -P 2 -I % sh -c "$cxx -c -o $tmp/%.o $tmp/%.cc"
g++ -std=c++17 -O2 -g -Wall -isystem "$cuda/include" -I"$top/kernels" \
    -c -o "$tmp/simt.o" "$simt/simt.cc"
${CC:-cc} -O2 -g -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA \
    -isystem "$cuda/include" -iquote "$top/libcore" -iquote "$top/kernels" \
    -I"$top/tests" -c -o "$tmp/simt_test.o" "$simt/simt_test.c"
# shellcheck disable=SC2086 # $objs: one argument a file
g++ -o "$tmp/simt_test" "$tmp/simt_test.o" $objs "$tmp/simt.o" "$lib" \
    -lnng -lmsgpackc -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm
"$tmp/simt_test" >"$tmp/out" 2>&1 || {
	cat "$tmp/out"
	exit 1
}
cat "$tmp/out"
grep -q '^ok   simt attn .*\[mma+simple\]' "$tmp/out"
grep -Eq '^simt: .* [1-9][0-9]* mma, [1-9][0-9]* ldmatrix' "$tmp/out"
# the reverse schedule: the same measured errors (a race moves them)
SIMT_ORDER=rev "$tmp/simt_test" attn >"$tmp/rev" 2>&1 || {
	cat "$tmp/rev"
	exit 1
}
grep '^.... simt attn' "$tmp/out" >"$tmp/a"
grep '^.... simt attn' "$tmp/rev" >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || {
	echo "kernels-simt: the attention's errors move with the schedule:"
	diff "$tmp/a" "$tmp/b"
	exit 1
}
echo "reverse schedule: the same attention errors"

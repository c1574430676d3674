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
# the attention again with the block's threads scheduled in other
# orders: the same errors, or a barrier is missing; and on an H100's
# 132 SMs (other splits). SIMT_SAN=1 builds it all with AddressSanitizer
# and UBSan (a kernel's read past an allocation, a misaligned vector
# load; about twice as long). Skips where g++ or CUDA's headers are
# absent, or off x86-64 (the coroutine switch).
. "$(dirname "$0")/lib.sh"
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=$(dirname "$tests")/libmedha.a
[ -f "$cuda/include/cuda_bf16.h" ] || skip "no $cuda/include/cuda_bf16.h"
command -v g++ >/dev/null || skip "no g++"
[ "$(uname -m)" = x86_64 ] || skip "the emulator's coroutines are x86-64"
[ -f "$lib" ] || skip "no $lib (make first)"
simt=$top/tests/gpu/simt
san=
[ "${SIMT_SAN:-0}" = 0 ] || san="-fsanitize=address,undefined \
    -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cxx="g++ -std=c++17 -O1 -g -w $san -DMEDHA_SIMT -isystem $cuda/include \
    -I$top/kernels -include $simt/simt.h"
objs=
for f in attn attn_mma kv norm rope merge add embed swiglu; do
	sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(/simt_launch(\1, \3)(/' \
	    -e 's/extern __shared__ \(__align__([0-9]*) \)\{0,1\}\([A-Za-z0-9_]*\) \([A-Za-z_][A-Za-z0-9_]*\)\[\];/\2 *\3 = (\2 *)simt_dyn_smem();/' \
	    -e 's/^\([[:space:]]*__shared__ .* \([A-Za-z_][A-Za-z0-9_]*\)\[.*\];\)$/\1 simt_shared_fresh(\2, sizeof(\2));/' \
	    "$top/kernels/$f.cu" >"$tmp/$f.cc"
	! grep -n '<<<\|extern __shared__' "$tmp/$f.cc" || {
		echo "kernels-simt: a launch or extern shared the sed missed"
		exit 1
	}
	! grep -n '__shared__' "$tmp/$f.cc" | grep -v simt_shared_fresh || {
		echo "kernels-simt: a __shared__ declaration the sed missed"
		exit 1
	}
	objs="$objs $tmp/$f.o"
done
# two compiles at a time (the CUDA headers make each a few seconds)
for f in attn attn_mma kv norm rope merge add embed swiglu; do
	echo "$f"
done | xargs -P 2 -I % sh -c "$cxx -c -o $tmp/%.o $tmp/%.cc"
# shellcheck disable=SC2086 # $san: several flags
g++ -std=c++17 -O2 -g -Wall $san -isystem "$cuda/include" \
    -I"$top/kernels" -c -o "$tmp/simt.o" "$simt/simt.cc"
# shellcheck disable=SC2086
${CC:-cc} -O2 -g $san -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA \
    -isystem "$cuda/include" -iquote "$top/libcore" -iquote "$top/kernels" \
    -I"$top/tests" -c -o "$tmp/simt_test.o" "$simt/simt_test.c"
# shellcheck disable=SC2086 # $objs: one argument a file
g++ $san -o "$tmp/simt_test" "$tmp/simt_test.o" $objs "$tmp/simt.o" "$lib" \
    -lnng -lmsgpackc -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm
"$tmp/simt_test" >"$tmp/out" 2>&1 || {
	cat "$tmp/out"
	exit 1
}
cat "$tmp/out"
grep -q '^ok   simt attn .*\[mma+simple\]' "$tmp/out"
grep -Eq '^simt: .* [1-9][0-9]* mma, [1-9][0-9]* ldmatrix' "$tmp/out"
# other schedules (simt.cc, SIMT_ORDER): the threads in reverse, and
# each warp alone to the next barrier; the same measured errors, or a
# barrier is missing (a race moves them)
grep '^.... simt attn' "$tmp/out" >"$tmp/a"
for order in rev warp; do
	SIMT_ORDER=$order "$tmp/simt_test" attn >"$tmp/o" 2>&1 || {
		cat "$tmp/o"
		echo "kernels-simt: failed with SIMT_ORDER=$order"
		exit 1
	}
	grep '^.... simt attn' "$tmp/o" >"$tmp/b"
	cmp -s "$tmp/a" "$tmp/b" || {
		echo "kernels-simt: the attention's errors move with the" \
		    "schedule (SIMT_ORDER=$order):"
		diff "$tmp/a" "$tmp/b"
		exit 1
	}
	echo "SIMT_ORDER=$order: the same attention errors"
done
SIMT_SMS=132 "$tmp/simt_test" attn >"$tmp/o" 2>&1 || {
	cat "$tmp/o"
	echo "kernels-simt: failed with SIMT_SMS=132"
	exit 1
}
echo "SIMT_SMS=132: $(tail -1 "$tmp/o")"

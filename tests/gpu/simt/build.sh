#!/bin/sh
# build.sh OUT [KERNELS]: build OUT/simt_test, the kernels of KERNELS
# (default kernels/) run by the SIMT emulator (simt.h says how). Each
# kernels/NAME.cu but sample.cu goes through sed into OUT/NAME.cc: its
# launches "k<<<g, b, sm, st>>>(args)" become simt_launch(k, g, b, sm,
# st)(args), "extern __shared__ T x[]" a pointer to the block's dynamic
# shared memory, and each static "__shared__ T x[...];" is followed by
# simt_shared_fresh(x, sizeof(x)). A NAME.o is rebuilt only when its
# NAME.cc changed (mutants.sh rebuilds the one file it changed).
# Environment: CUDA_HOME (/usr/local/cuda), LIB (libmedha.a, default
# build/libmedha.a), SIMT_SAN=1 (ASan and UBSan), CC.
set -e
out=$1
top=$(cd "$(dirname "$0")/../../.." && pwd)
src=${2:-$top/kernels}
simt=$top/tests/gpu/simt
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=${LIB:-$top/build/libmedha.a}
san=
[ "${SIMT_SAN:-0}" = 0 ] || san="-fsanitize=address,undefined \
    -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cxx="g++ -std=c++17 -O1 -g -w $san -DMEDHA_SIMT -isystem $cuda/include \
    -I$src -include $simt/simt.h"
names="attn attn_mma kv norm rope merge add embed swiglu"
mkdir -p "$out"
todo=
for f in $names; do
	sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(/simt_launch(\1, \3)(/' \
	    -e 's/extern __shared__ \(__align__([0-9]*) \)\{0,1\}\([A-Za-z0-9_]*\) \([A-Za-z_][A-Za-z0-9_]*\)\[\];/\2 *\3 = (\2 *)simt_dyn_smem();/' \
	    -e 's/^\([[:space:]]*__shared__ .* \([A-Za-z_][A-Za-z0-9_]*\)\[.*\];\)$/\1 simt_shared_fresh(\2, sizeof(\2));/' \
	    "$src/$f.cu" >"$out/$f.new"
	! grep -n '<<<\|extern __shared__' "$out/$f.new" || {
		echo "simt build: a launch or extern shared the sed missed ($f)"
		exit 1
	}
	! grep -n '__shared__' "$out/$f.new" | grep -v simt_shared_fresh || {
		echo "simt build: a __shared__ declaration the sed missed ($f)"
		exit 1
	}
	if [ -f "$out/$f.o" ] && cmp -s "$out/$f.new" "$out/$f.cc"; then
		rm "$out/$f.new"
	else
		mv "$out/$f.new" "$out/$f.cc"
		rm -f "$out/$f.o"
		todo="$todo $f"
	fi
done
# two compiles at a time (the CUDA headers make each a few seconds)
for f in $todo; do
	echo "$f"
done | xargs -P 2 -I % sh -c "$cxx -c -o $out/%.o $out/%.cc"
if [ ! -f "$out/simt.o" ]; then
	# shellcheck disable=SC2086 # $san: several flags
	g++ -std=c++17 -O2 -g -Wall $san -isystem "$cuda/include" -I"$src" \
	    -c -o "$out/simt.o" "$simt/simt.cc"
	# shellcheck disable=SC2086
	${CC:-cc} -O2 -g $san -std=c11 -D_GNU_SOURCE -w -DMEDHA_CUDA \
	    -isystem "$cuda/include" -iquote "$top/libcore" -iquote "$src" \
	    -I"$top/tests" -c -o "$out/simt_test.o" "$simt/simt_test.c"
fi
objs=
for f in $names; do
	objs="$objs $out/$f.o"
done
# shellcheck disable=SC2086 # $objs: one argument a file
g++ $san -o "$out/simt_test" "$out/simt_test.o" $objs "$out/simt.o" "$lib" \
    -lnng -lmsgpackc -ljansson -lzstd -lpcre2-32 -lcrypto -lpthread -lm

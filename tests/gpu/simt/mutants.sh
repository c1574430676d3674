#!/bin/sh
# mutants.sh: the SIMT emulator's own check. Each mutant plants one
# fault in a copy of kernels/ (a fragment register or an ldmatrix
# matrix swapped, .trans dropped, a barrier or a cp.async wait removed,
# a wrong shuffle, an off-by-one mask, a misaligned row, rows without
# the padding that keeps ldmatrix free of bank conflicts, a divergent
# collective; a sliding window's mask off by one or gone, its first tile
# not the window's, the soft-cap dropped; head size 256's columns and
# shared memory layout), builds simt_test with it
# (make simt SIMT_KERNELS=copy SIMT_OUT=folder: only the changed
# kernel is compiled again) and runs the attention cases in the schedule named; the
# run must fail (a FAIL line, or the emulator stopping on a fault).
# About 6 minutes; not part
# of make test (tests/sh/kernels-simt.sh runs the kernels as they are).
#
#	sh tests/gpu/simt/mutants.sh [BUILD]	(build: libmedha.a's)
set -e
top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
cp -r "$top/kernels" "$tmp/k"
missed=0

# mutant NAME FILE ORDER SED: FILE (kernels/FILE.cu) changed by SED
mutant() {
	cp "$top/kernels/$2.cu" "$tmp/k/$2.cu"
	sed -e "$4" "$top/kernels/$2.cu" >"$tmp/k/$2.cu"
	if cmp -s "$top/kernels/$2.cu" "$tmp/k/$2.cu"; then
		echo "mutant $1: the sed changed nothing (the kernel moved?)"
		missed=$((missed + 1))
		return
	fi
	make -s --no-print-directory -C "$top" BUILD="$build" \
	    SIMT_KERNELS="$tmp/k" SIMT_OUT="$tmp/b" simt >/dev/null
	if SIMT_ORDER=$3 "$tmp/b/simt_test" attn >"$tmp/out" 2>&1; then
		echo "MISSED $1 ($3)"
		missed=$((missed + 1))
	else
		echo "caught $1 ($3): $(grep -m1 -E '^FAIL|^simt: block' \
		    "$tmp/out" | cut -c1-110)"
	fi
	cp "$top/kernels/$2.cu" "$tmp/k/$2.cu"
}

m=attn_mma
mutant a-columns $m fwd 's/int c0 = kk \* 16 + 2 \* t4, c1 = c0 + 8;/int c1 = kk * 16 + 2 * t4, c0 = c1 + 8;/'
mutant p-registers $m fwd 's/pa\[1\] = pack2/pa[X] = pack2/; s/pa\[2\] = pack2/pa[1] = pack2/; s/pa\[X\]/pa[2]/'
mutant k-ldmatrix-order $m fwd 's/int key = np \* 16 + (lane \& 7) + (mi >> 1) \* 8;/int key = np * 16 + (lane \& 7) + (mi \& 1) * 8;/; s/int col = kk \* 16 + (mi \& 1) \* 8;/int col = kk * 16 + (mi >> 1) * 8;/'
mutant v-without-trans $m fwd 's/ldsm_x4_t(r, vb_/ldsm_x4(r, vb_/'
mutant quad-max-xor4 $m fwd 's/mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2)/mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 4)/'
mutant quad-sum-xor4 $m fwd 's/l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);/l_b += __shfl_xor_sync(0xffffffffu, l_b, 4);/'
mutant mask-off-by-one $m fwd 's/if (key + 1 >= lim_b)/if (key + 1 > lim_b)/'
mutant no-cp-wait $m fwd '/cp_wait<1>();/d'
mutant last-wait-1 $m fwd 's/cp_wait<0>();/cp_wait<1>();/'
mutant no-sync-after-wait $m warp '0,/^\t\t\t__syncthreads();$/{/^\t\t\t__syncthreads();$/d}'
mutant no-sync-before-refill $m fwd '/__syncthreads(); \/\* buffer buf is refilled next \*\//d'
mutant rows-padded-by-8-bytes $m fwd 's/constexpr int RS = HD + 8; /constexpr int RS = HD + 4; /'
mutant rows-unpadded $m fwd 's/constexpr int RS = HD + 8; /constexpr int RS = HD; /'
mutant divergent-ldmatrix $m fwd 's/if (base < lim_w \&\& base + TILE > low_w) {/if (base < lim_w \&\& base + TILE > low_w \&\& lane < 16) {/'
mutant window-off-by-one $m fwd 's/if (key >= lim_a || key < low_a)/if (key >= lim_a || key <= low_a)/'
mutant window-start-tile $m fwd 's/load(k_beg, 0);/load(it.k_lo, 0);/'
mutant no-softcap $m fwd 's/sc\[j\]\[e\] = attn_cap(\&a, sc\[j\]\[e\]);/;/'
m=attn
mutant simple-no-sync-before-store $m fwd '/__syncthreads(); \/\* the last tile (or qsh) is done \*\//d'
mutant simple-no-sync-after-store $m warp '/^\t\t\tstore();$/{n;d}'
mutant simple-no-sync-between-items $m warp '/__syncthreads(); \/\* qsh is rewritten by the next item \*\//d'
mutant simple-no-window $m fwd 's/ || base + lane < low\[i\])/)/'
mutant simple-no-softcap $m fwd 's/sc\[i\] = attn_cap(\&a, sc\[i\]);//'
mutant simple-shfl-lane $m fwd 's/float p = __shfl_sync(0xffffffffu, sc\[i\],$/float p = __shfl_sync(0xffffffffu, sc[i] + (lane == 31),/'
# head size 256's (8 columns a lane, the tiles in dynamic shared
# memory): a lane's columns read as at 128, V's tile laid over K's padding
mutant simple-256-columns $m fwd 's/&vsh\[kk\]\[lane \* CPL + c4\];/\&vsh[kk][lane * 4 + c4];/'
mutant simple-256-vsh-over-ksh $m fwd 's/^\t    TILE \* (HD + 4));$/\t    TILE * HD);/'
if [ "$missed" -gt 0 ]; then
	echo "mutants: $missed missed"
	exit 1
fi
echo "mutants: all caught"

#!/bin/sh
# gpu-check.sh: the GPU checks' tooling, without a GPU. contrib/gpu-pack.sh
# gathers stripped programs, the libraries they load that a lent machine
# lacks (nng...: ldd's, not the C library's nor CUDA's) and the random
# model; the programs run from the pack on those libraries alone.
# contrib/gpu-check.sh without a GPU says so, writes its table and fails
# within seconds; with one (a stand-in nvidia-smi) and no time left it
# skips every step, the table saying why.
. "$(dirname "$0")/lib.sh"
[ -x "$bin/medha-worker" ] || skip "$bin/medha-worker missing (make first)"

GPU_PACK_OUT=$tmp sh "$top/contrib/gpu-pack.sh" "$bin" "$tests/.." \
    >"$tmp/pack.out" 2>&1 || { cat "$tmp/pack.out"; exit 1; }
grep -q '^gpu-pack: .* MiB' "$tmp/pack.out"
cat "$tmp/pack.out"
# the other families' models, for gpu-check.sh's families step
if has_py numpy gguf && [ -s "$smollm2" ]; then
	[ "$(ls "$tmp"/gpu-pack/families/*.gguf | wc -l)" = 7 ] ||
	    { ls "$tmp/gpu-pack/families"; exit 1; }
	# and the mixtures of experts', for its moe step (beside the pack)
	[ "$(ls "$tmp"/gpu-moe/*.gguf | wc -l)" = 4 ] ||
	    { ls "$tmp/gpu-moe"; exit 1; }
fi
[ -e "$tmp/gpu-libs/libnng.so.1" ] || { ls "$tmp/gpu-libs"; exit 1; }
for l in "$tmp"/gpu-libs/*; do
	case ${l##*/} in libc.so.* | libm.so.* | libcuda* | libstdc++*)
		echo "$l: not to be carried"; exit 1 ;;
	esac
done
# the pack's programs find every library in it and the system's C library
for f in "$tmp"/gpu-pack/bin/*; do
	! LD_LIBRARY_PATH=$tmp/gpu-libs ldd "$f" | grep 'not found'
done
LD_LIBRARY_PATH=$tmp/gpu-libs "$tmp/gpu-pack/bin/medha-worker" -h >/dev/null
grep -q 'gpu-pack/bin/medha-worker' "$tmp/gpu-pack/MANIFEST"
if [ -s "$tmp/gpu-pack/random.gguf" ]; then
	LD_LIBRARY_PATH=$tmp/gpu-libs "$tmp/gpu-pack/bin/medha-worker" \
	    -m "$tmp/gpu-pack/random.gguf" -p "Hello" -n 2 -t 1 >/dev/null
else
	echo "skip: no random.gguf in the pack (contrib/fetch-refs.sh's venv)"
fi

# no GPU: a quick failure that says so, the table written
if nvidia-smi -L >/dev/null 2>&1; then
	echo "skip: a GPU is here: the no-GPU path not checked"
else
	st=0
	OUT=$tmp/out GPU_PACK=$tmp/gpu-pack timeout 60 \
	    bash "$top/contrib/gpu-check.sh" >"$tmp/out.txt" 2>"$tmp/err" || st=$?
	[ "$st" = 1 ] || { echo "gpu-check without a GPU: status $st"; cat "$tmp/err"; exit 1; }
	grep -q 'no GPU here' "$tmp/err"
	grep -q '^gpu  *FAIL(1)  *no GPU' "$tmp/out/summary.txt"
	grep -q '^libs  *ok' "$tmp/out/summary.txt"
	grep -q '^=== gpu: status 1' "$tmp/out/gpu-check.log"
fi

# a stand-in GPU and no time: every step after gpu skipped, and said
mkdir "$tmp/fake"
printf '#!/bin/sh\ncase "$1" in -L) echo "GPU 0: Stand-in";; --query-gpu*) echo "Stand-in, 1 MiB";; esac\n' \
    >"$tmp/fake/nvidia-smi"
chmod +x "$tmp/fake/nvidia-smi"
PATH=$tmp/fake:$PATH OUT=$tmp/out2 GPU_PACK=$tmp/gpu-pack \
    GPU_CHECK_BUDGET=1 bash "$top/contrib/gpu-check.sh" >/dev/null 2>&1
for s in kernels_test backend_cuda_test families moe attn_bench attn_torch e2e_bench \
    bench_hf live_single live_spp2 live_kvp2 prof_check sanitizer; do
	grep -q "^$s  *skip  *out of time" "$tmp/out2/summary.txt" ||
	    { cat "$tmp/out2/summary.txt"; exit 1; }
done
grep -q '^gpu  *ok  *Stand-in' "$tmp/out2/summary.txt"

# the live parts, tried on the cpu backend (GPU_CHECK_BACKEND=cpu): the
# 16 requests as one-shot runs give them, 8 decodes of 32 tokens
# (GPU_CHECK_DECODE; the GPU's are 256) timed against one (the 6x is the
# GPU's: not asked of these cores), spp2 and kvp2 with single's tokens
if [ -s "$tmp/gpu-pack/random.gguf" ]; then
	mkdir -p "$tmp/work" "$tmp/out3"
	part() {
		env work="$tmp/work" OUT="$tmp/out3" GPU_CHECK_BACKEND=cpu \
		    GPU_CHECK_DECODE=32 \
		    GPU_PACK="$tmp/gpu-pack" MEDHA_BIN="$bin" timeout 120 \
		    bash "$top/contrib/gpu-check.sh" --part "$1" >"$tmp/$1.log" 2>&1
	}
	part live_single || :
	grep -q '^figure: 16 requests, 0 differ from -p; 8 decodes .*x one' \
	    "$tmp/live_single.log" || { cat "$tmp/live_single.log"; exit 1; }
	[ -s "$tmp/out3/single.jsonl" ]
	for t in live_spp2 live_kvp2; do
		part $t || { cat "$tmp/$t.log"; exit 1; }
		grep -q '^figure: 16 requests, 0 differ from single' "$tmp/$t.log"
	done
fi

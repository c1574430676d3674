#!/bin/sh
# bench-cpu.sh: the CPU backend against llama.cpp, both measured in this
# run, at THREADS threads (2). Two parts (usage: bench-cpu.sh [types|ctx]
# runs one; no argument, both):
#
# types: SmolLM2-135M-Instruct in Q4_1 (the published file), Q8_0, F16 and
#   the Q4_K_M and Q5_K_M mixes (made from it with contrib/gguf-convert.c,
#   libcore's own GGUF writer; SmolLM2's width of 576 makes most of a mix
#   Q5_0 or Q5_1, with Q4_K or Q5_K, Q6_K and Q8_0 where llama.cpp's mixes
#   put them):
#   prompt processing of 512 tokens in one batch (pp512) and generation
#   of 128 tokens one at a time (tg128), the mean of REPS (3) runs, and
#   their ratio (medha / llama.cpp). llama.cpp is the prebuilt xllamacpp
#   wheel through tests/ref/llamacpp.py (its C API; f16 KV cache, flash
#   attention as it chooses, like llama-bench); medha is
#   contrib/cpu-run.c (f32 KV cache).
#
# ctx: speed at depth. At each context length (SmolLM2 Q4_1: 0, 1K, 4K,
#   ~8K; its Q4_K_M and Q5_K_M mixes: 1K, ~8K; a random model with a long context_length written by
#   tests/ref/random_model.py, 2 layers of 2 query heads over 1 KV head
#   of 64: 16K, 32K, 64K, 128K) a prefill of 512 tokens and 32 decode
#   steps, f16 KV cache on both sides: medha through contrib/bench-ctx.c,
#   llama.cpp through contrib/bench-ctx-llama.py on llama-cpp-python
#   compiled on this machine (-DGGML_NATIVE=ON, or its features but AMX
#   where AMX faults, as in some virtual machines; built once into
#   cache/wheels, about 10 minutes on 2 cores). The last column is the
#   decode's share of the memory-bandwidth floor: the bytes one step
#   must read (every weight, and K and V of every position) over the
#   bandwidth a streaming read of 1 GiB gets in the same run with the
#   same threads (bench-ctx -B), against the time a step took.
#
# Needs contrib/fetch-refs.sh first. (THREADS=2 REPS=3 to change;
# TYPES="Q4_1 q4_k_m" measures only those of the types part)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${MEDHA_CACHE:-$top/cache}
py=$cache/venv/bin/python
q41=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
threads=${THREADS:-2}
reps=${REPS:-3}
part=${1:-all}
case $part in types | ctx | all) ;; *)
	echo "usage: bench-cpu.sh [types|ctx]" >&2; exit 2 ;; esac
[ -s "$q41" ] && [ -x "$py" ] ||
	{ echo "bench-cpu: run contrib/fetch-refs.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$top"
# the programs, as make contrib builds them (-O2 -march=native)
make -s build/contrib/cpu-run build/contrib/gguf-convert \
    build/contrib/bench-ctx
for t in q8_0 f16 q4_k_m q5_k_m; do
	f=$cache/models/SmolLM2-135M-Instruct.$t.gguf
	[ -s "$f" ] || build/contrib/gguf-convert "$q41" "$f" "$t"
done

types() {
mean() { awk '{ s += $1; n++ } END { if (n) printf "%.3f\n", s / n }'; }
printf '%-6s %10s %10s %7s %10s %10s %7s\n' type "pp512" "llama.cpp" ratio \
    "tg128" "llama.cpp" ratio
for t in ${TYPES:-Q4_1 q8_0 f16 q4_k_m q5_k_m}; do
	f=$cache/models/SmolLM2-135M-Instruct.$t.gguf
	pp=$(i=0; while [ $i -lt "$reps" ]; do
		build/contrib/cpu-run -p 512 -n 1 -t "$threads" "$f" 2>&1 >/dev/null |
		    sed -n 's/.*prompt 512 tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p'
		i=$((i + 1)); done | mean)
	tg=$(i=0; while [ $i -lt "$reps" ]; do
		build/contrib/cpu-run -p 1 -n 129 -t "$threads" "$f" 2>&1 >/dev/null |
		    sed -n 's/.*generation 129 tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p'
		i=$((i + 1)); done | mean)
	ref=$("$py" tests/ref/llamacpp.py bench -t "$threads" -r "$reps" "$f")
	lpp=$(echo "$ref" | sed -n 's/.*pp512 \([0-9.]*\) tok\/s.*/\1/p')
	ltg=$(echo "$ref" | sed -n 's/.*tg128 \([0-9.]*\) tok\/s.*/\1/p')
	python3 -c "
pp, lpp, tg, ltg = $pp, $lpp, $tg, $ltg
print('%-6s %10.1f %10.1f %7.2f %10.1f %10.1f %7.2f' % ('$t', pp, lpp, pp / lpp, tg, ltg, tg / ltg))"
done
echo "tokens/s at $threads threads, mean of $reps runs each; ratio = medha / llama.cpp"
}

# ---- ctx: speed at depth against a native llama.cpp ----

# A -DGGML_NATIVE=ON build uses every instruction the CPU names; a
# virtual machine may name AMX and still fault on its tile loads (one
# here did: SIGILL in tileloadd), so the build is tried on the model
# and, when it faults, made again for the CPU's features but AMX.
native_llama() {
	if ! "$py" -c 'import llama_cpp' 2>/dev/null; then
		native_wheel "" ""
	fi
	llama_runs && return 0
	echo "bench-cpu: the native llama.cpp faults on this CPU;" \
	    "building it again without AMX" >&2
	native_wheel noamx "$(noamx_args)"
	llama_runs || { echo "bench-cpu: llama.cpp fails here" >&2; exit 1; }
}

# -march=native turns ggml's AMX code on whatever GGML_AMX_* say, so
# the build without it names this CPU's other features one by one
noamx_args() {
	f=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1)
	a="-DGGML_NATIVE=OFF"
	for x in avx:AVX avx2:AVX2 avx512f:AVX512 avx512vbmi:AVX512_VBMI \
	    avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 \
	    avx_vnni:AVX_VNNI fma:FMA f16c:F16C bmi2:BMI2; do
		case " $f " in *" ${x%%:*} "*) a="$a -DGGML_${x#*:}=ON" ;; esac
	done
	echo "$a"
}

llama_runs() {
	"$py" contrib/bench-ctx-llama.py -t "$threads" "$q41" 0 \
	    >/dev/null 2>&1
}

# native_wheel SUBDIR EXTRA_CMAKE_ARGS: install the wheel built once
# into cache/wheels/SUBDIR
native_wheel() {
	dir=$cache/wheels${1:+/$1}
	whl=$(ls "$dir"/llama_cpp_python-0.3.36-*.whl 2>/dev/null | head -1)
	if [ -z "$whl" ]; then
		echo "bench-cpu: building llama-cpp-python 0.3.36 natively" \
		    "(once, about 10 minutes on 2 cores)" >&2
		mkdir -p "$dir"
		CMAKE_ARGS="-DGGML_NATIVE=ON $2" "$cache/venv/bin/pip" wheel \
		    -q --no-cache-dir --no-deps -w "$dir" \
		    llama-cpp-python==0.3.36
		whl=$(ls "$dir"/llama_cpp_python-0.3.36-*.whl | head -1)
	fi
	"$cache/venv/bin/pip" install -q --force-reinstall --no-deps "$whl"
	"$cache/venv/bin/pip" install -q diskcache jinja2 typing-extensions
}

ctx() {
	native_llama
	long=$cache/models/random-long-131k.gguf
	[ -s "$long" ] ||
		"$py" tests/ref/random_model.py "$q41" "$long" 1 132096 2
	bw=$(build/contrib/bench-ctx -B -t "$threads" "$q41" 0 |
	    sed -n 's/^read \([0-9.]*\) GB.*/\1/p')
	printf '%-22s %6s %9s %9s %6s %8s %8s %6s %7s\n' model depth \
	    prefill llama.cpp ratio decode llama.cpp ratio "floor"
	sm=$cache/models/SmolLM2-135M-Instruct
	for m in "SmolLM2-Q4_1 $q41 0 1024 4096 7648" \
	    "SmolLM2-Q4_K_M $sm.q4_k_m.gguf 1024 7648" \
	    "SmolLM2-Q5_K_M $sm.q5_k_m.gguf 1024 7648" \
	    "random-long $long 16384 32768 65536 131072"; do
		set -- $m
		name=$1 f=$2
		shift 2
		build/contrib/bench-ctx -t "$threads" "$f" "$@" > "$tmp/ours"
		"$py" contrib/bench-ctx-llama.py -t "$threads" "$f" "$@" \
		    > "$tmp/peer"
		paste "$tmp/ours" "$tmp/peer" | awk -v n="$name" -v bw="$bw" '{
			# ours: depth D prefill X tok/s decode Y tok/s bytes/token B
			# peer: depth D prefill X tok/s decode Y tok/s
			floor = $10 * $7 / (bw * 1e9)
			printf "%-22s %6d %9.1f %9.1f %6.2f %8.1f %8.1f %6.2f %6.0f%%\n",
			    n, $2, $4, $14, $4 / $14, $7, $17, $7 / $17, 100 * floor
		}'
	done
	echo "tokens/s at $threads threads, one run; prefill: 512 tokens at that" \
	    "depth; decode: 32 steps after it; ratio = medha / llama.cpp" \
	    "(llama-cpp-python 0.3.36 built natively); floor: the decode's" \
	    "share of the bandwidth floor at $bw GB/s (a streaming read," \
	    "same run)"
}

case $part in
types) types ;;
ctx) ctx ;;
all) types; echo; ctx ;;
esac

#!/bin/sh
# bench-cpu.sh: the CPU backend against llama.cpp on SmolLM2-135M-Instruct
# in Q4_1 (the published file), Q8_0 and F16 (made from it with
# contrib/gguf-convert.c, libcore's own GGUF writer): prompt processing of
# 512 tokens in one batch (pp512) and generation of 128 tokens one at a
# time (tg128), tokens/s at THREADS threads (2), both measured in this
# run, the mean of REPS (3) runs, and their ratio (medha / llama.cpp). llama.cpp
# runs through tests/ref/llamacpp.py (its C API; f16 KV cache, flash
# attention as it chooses, like llama-bench); medha through
# contrib/cpu-run.c (f32 KV cache). Needs contrib/fetch-refs.sh first.
#
# usage: sh contrib/bench-cpu.sh        (THREADS=2 REPS=3 to change)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${MEDHA_CACHE:-$top/cache}
py=$cache/venv/bin/python
q41=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
threads=${THREADS:-2}
reps=${REPS:-3}
[ -s "$q41" ] && [ -x "$py" ] ||
	{ echo "bench-cpu: run contrib/fetch-refs.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$top"
cc=${CC:-cc}
make -s build/libmedha.a
libs="build/libmedha.a -ljansson -lzstd -lpcre2-32 -lm -lpthread"
$cc -std=c11 -D_GNU_SOURCE -O2 -march=native -iquote libcore \
    -o "$tmp/cpu-run" contrib/cpu-run.c $libs
$cc -std=c11 -D_GNU_SOURCE -O2 -iquote libcore -o "$tmp/gguf-convert" \
    contrib/gguf-convert.c $libs
for t in q8_0 f16; do
	f=$cache/models/SmolLM2-135M-Instruct.$t.gguf
	[ -s "$f" ] || "$tmp/gguf-convert" "$q41" "$f" "$t"
done

mean() { awk '{ s += $1; n++ } END { if (n) printf "%.3f\n", s / n }'; }
printf '%-6s %10s %10s %7s %10s %10s %7s\n' type "pp512" "llama.cpp" ratio \
    "tg128" "llama.cpp" ratio
for t in Q4_1 q8_0 f16; do
	f=$cache/models/SmolLM2-135M-Instruct.$t.gguf
	pp=$(i=0; while [ $i -lt "$reps" ]; do
		"$tmp/cpu-run" -p 512 -n 1 -t "$threads" "$f" 2>&1 >/dev/null |
		    sed -n 's/.*prompt 512 tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p'
		i=$((i + 1)); done | mean)
	tg=$(i=0; while [ $i -lt "$reps" ]; do
		"$tmp/cpu-run" -p 1 -n 129 -t "$threads" "$f" 2>&1 >/dev/null |
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

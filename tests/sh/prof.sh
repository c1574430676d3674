#!/bin/sh
# prof.sh: medha-prof on the real model (SmolLM2-135M-Instruct, Q4_1):
# usage errors exit 2 with a reason; a missing or truncated model exits
# 1; a quick profile (every operator, the collectives between threads
# of the process included) is a medha-profile(5) table that medha-sched loads
# and that --check predicts batches with; -o writes whole or not at all;
# --chunks prints the study and draws it. Needs contrib/fetch-refs.sh
# (MEDHA_CACHE, default cache/); the usage checks run without it (and
# then it skips the rest).
. "$(dirname "$0")/lib.sh"
mp=$bin/medha-prof
model=$smollm2

# want CODE ARGS...: medha-prof ARGS exits with CODE, and no sanitizer
# report (lib.sh)
want() {
	code=$1
	shift
	expect_status "$code" "$mp" "$@"
	no_sanitizer_report "$tmp/err"
}
says() {
	grep -q -- "$1" "$tmp/err" || {
		echo "stderr lacks '$1':"
		cat "$tmp/err"
		exit 1
	}
}

want 0 -h
grep -q -- '--chunks' "$tmp/out"
want 2
says 'MODEL is required'
want 2 -m x --bogus
want 2 -m x --backend sim
says 'nothing to measure'
want 2 -m x --backend cuda --kv f32
says 'bf16 or f16'
want 2 -m x --kv bf16
says 'goes with --backend cuda'
want 2 -m x --device 1
says 'goes with --backend cuda'
# cuda where it cannot run (no GPU here, or a build without nvcc): a
# clear reason and a failure
if ! nvidia-smi -L >/dev/null 2>&1; then
	st=0
	"$mp" -m llama3-8b --backend cuda -q >"$tmp/out" 2>"$tmp/err" || st=$?
	case $st in
	1) says 'llama3-8b: cuda: no CUDA device' ;;
	2) says 'cuda: not built into this program' ;;
	*) echo "--backend cuda without a GPU: status $st"; cat "$tmp/err"; exit 1 ;;
	esac
	[ ! -s "$tmp/out" ] || { echo "--backend cuda without a GPU wrote a table"; exit 1; }
fi
want 2 -m x --chunks --prompt 100
says 'power of two'
want 2 -m x --plot x.png
says 'go with --chunks'
want 2 -m x --predictor p.csv
says 'goes with --check'
want 2 -m x --chunks --check 3
want 2 -m x --moe
says '\-\-moe goes with --check'
want 2 -m x --reps 0
want 2 -m x --clock cpu
says 'expected wall or thread'
want 2 -m x --clock thread
says 'goes with --backend cpu and -t 1'
want 2 -m x --clock thread -t 2
says 'goes with --backend cpu and -t 1'
want 2 -m x extra
says 'unexpected argument'
want 1 -m "$tmp/none.gguf" -q
says 'none.gguf'
echo "usage: ok"

[ -f "$model" ] ||
    skip "$model missing (run contrib/fetch-refs.sh); the usage checks passed"
head -c 100000 "$model" >"$tmp/trunc.gguf"
want 1 -m "$tmp/trunc.gguf" -q
says 'trunc.gguf'

# a quick profile: the header, every operator, positive times
want 0 -m "$model" -q -t 2 -o "$tmp/prof.csv"
[ ! -s "$tmp/out" ] && [ ! -e "$tmp/prof.csv.part" ]
sed -n 3p "$tmp/prof.csv" | grep -qx 'op,tokens,kv,time_us'
head -1 "$tmp/prof.csv" | grep -q '^# medha-profile v1 model=SmolLM2-135M-Instruct.Q4_1 gpu=cpu tp=1'
for op in linear:4 lm_head:2 attn_prefill:4 attn_decode:4 spp_send:2 \
    kvp_merge:4; do
	n=$(grep -c "^${op%:*}," "$tmp/prof.csv")
	[ "$n" -eq "${op#*:}" ] || {
		echo "${op%:*}: $n rows, want ${op#*:}"
		cat "$tmp/prof.csv"
		exit 1
	}
done
awk -F, 'NR > 3 && !($4 > 0) { print "not positive: " $0; bad = 1 }
    END { exit bad }' "$tmp/prof.csv"
# to standard output without -o: the same rows; --clock thread says so
want 0 -m "$model" -q -t 1 --reps 1
[ "$(grep -c '^[a-z]' "$tmp/out")" -eq 21 ]
! head -1 "$tmp/out" | grep -q clock=
want 0 -m "$model" -q -t 1 --reps 1 --clock thread
[ "$(grep -c '^[a-z]' "$tmp/out")" -eq 21 ]
head -1 "$tmp/out" | grep -q ' kv=f32 clock=thread$'
# -o into a directory that does not exist: nothing written
want 1 -m "$model" -q -o "$tmp/no/such/prof.csv"
says 'no/such/prof.csv.part'

# the scheduler loads it (simulating the model on a GPU with its table)
printf '{"id":"a","arrival":0,"prompt_tokens":300,"max_tokens":4}\n' |
    "$bin/medha-sched" --sim a100 -m "$model" --predictor "$tmp/prof.csv" \
    >"$tmp/rec" 2>"$tmp/err"
grep -q '"status": "ok"' "$tmp/rec" || {
	echo "medha-sched with the profile:"
	cat "$tmp/rec" "$tmp/err"
	exit 1
}
echo "profile: ok"

# --check on the profile just written, and on a new one
want 0 -m "$model" -q -t 2 --max-context 512 --check 4 --predictor "$tmp/prof.csv"
grep -Eq '^predictor error: median [0-9.]+%, p90 [0-9.]+%$' "$tmp/out" || {
	echo "--check printed:"
	cat "$tmp/out"
	exit 1
}
want 0 -m "$model" -q -t 2 --max-context 512 --check 3 --reps 1 -v
[ "$(grep -c '%$' "$tmp/out")" -eq 5 ]
echo "check: ok"

# a mixture of experts (a random qwen3moe, tests/ref/arch_model.py: 3
# routed layers): moe_ffn rows beside the linear ones, at the same batch
# sizes; --check --moe times routed FFN batches against them; --moe on a
# dense model exits 1
want 1 -m "$model" -q --check 2 --moe --predictor "$tmp/prof.csv"
says 'no routed layers'
if [ -x "$py" ] && has_py numpy gguf; then
	"$py" "$top/tests/ref/arch_model.py" write "$model" "$tmp" qwen3moe
	want 0 -m "$tmp/qwen3moe.gguf" -q -t 2 --max-context 256 --reps 1 \
	    -o "$tmp/moe.csv"
	[ "$(grep -c '^moe_ffn,' "$tmp/moe.csv")" -ge 2 ] &&
	    [ "$(grep '^moe_ffn,' "$tmp/moe.csv" | cut -d, -f2)" = \
	      "$(grep '^linear,' "$tmp/moe.csv" | cut -d, -f2)" ] ||
	    { echo "moe_ffn rows:"; cat "$tmp/moe.csv"; exit 1; }
	want 0 -m "$tmp/qwen3moe.gguf" -q -t 2 --max-context 256 --check 3 \
	    --moe --predictor "$tmp/moe.csv" -v
	grep -q '^3 routed FFN batches (1 to 256 tokens): ' "$tmp/out" &&
	    grep -Eq '^predictor error: median [0-9.]+%, p90 [0-9.]+%$' \
	    "$tmp/out" && [ "$(grep -c '%$' "$tmp/out")" -eq 5 ] ||
	    { echo "--check --moe printed:"; cat "$tmp/out"; exit 1; }
	# each batch's experts a layer ran (the mean over its draws kept: 4 to
	# 16, at most 4 a token) and E (1 - (1 - k/E)^T) of top-4 of 16
	awk '/%$/ && NF == 7 && $1 ~ /^[0-9]+$/ {
		n++; t = $2; lo = 4; hi = 4 * t < 16 ? 4 * t : 16
		g = 16 * (1 - (12 / 16) ^ t)
		if ($3 < lo - 1e-9 || $3 > hi + 1e-9 || ($4 - g) ^ 2 > 1e-4) {
			print "batch line: " $0; bad = 1 }
	} END { exit bad || n != 3 }' "$tmp/out" ||
	    { echo "--check --moe -v:"; cat "$tmp/out"; exit 1; }
	# in the profile's run its batches are measured in its sweeps; one
	# token runs its 4 experts in each of the 3 routed layers
	want 0 -m "$tmp/qwen3moe.gguf" -q -t 1 --clock thread \
	    --max-context 256 --reps 1 --check 3 --moe -v -o "$tmp/moe2.csv"
	grep -q '^3 routed FFN batches (1 to 256 tokens): ' "$tmp/out" &&
	    grep -q 'moe_ffn 1 tokens: 4.00 experts a layer' "$tmp/err" &&
	    head -1 "$tmp/moe2.csv" | grep -q 'clock=thread$' ||
	    { echo "--check --moe in the profile's run:"; cat "$tmp/out" \
	      "$tmp/err"; exit 1; }
	echo "moe: ok"
fi

# --chunks: the batch times and overheads, and the plot
if command -v gnuplot >/dev/null 2>&1; then
	want 0 -m "$model" -t 2 --chunks --prompt 256 --reps 1 --plot "$tmp/c.png"
	[ -s "$tmp/c.png" ] || { echo "no plot"; exit 1; }
	grep -q "^plot: $tmp/c.png" "$tmp/out"
else
	want 0 -m "$model" -t 2 --chunks --prompt 256 --reps 1
fi
grep -q '^chunk-size study: SmolLM2' "$tmp/out"
# 32, 64, 128 and 256-token chunks; the largest is the baseline
[ "$(grep -Ec '^ +(32|64|128|256) \|' "$tmp/out")" -eq 8 ]
grep -Eq '^ +256 \| +[0-9.]+ +\+0\.0%' "$tmp/out" || {
	cat "$tmp/out"
	exit 1
}
# -q keeps to --max-tokens; a --chunks study beyond the profile's grid
# (a prompt of 512 from chunks of 64 after 256) says it extrapolates
want 0 -m "$model" -q -t 2 --max-tokens 32 --max-context 256 --reps 1 \
    -o "$tmp/small.csv"
awk -F, '$1 == "linear" && $2 > 32 { bad = 1 } END { exit bad }' \
    "$tmp/small.csv" || { echo "-q measured past --max-tokens 32"; exit 1; }
want 0 -m "$model" -t 2 --chunks --prompt 512 --reps 1 \
    --predictor "$tmp/small.csv"
grep -q "small.csv measured chunks of up to 64 tokens (linear 32) after up to 256 cached; this study predicts chunks of up to 512 after up to 480, extrapolated" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
echo "chunks: ok"

#!/bin/sh
# worker.sh: medha-worker's behaviour on the real model (SmolLM2-135M-
# Instruct, Q4_1): usage errors exit 2; a missing, truncated or foreign
# file and a prompt past the model's context exit 1 with a reason; the
# logits after the prompt do not depend on the prefill chunk size; greedy
# generation is deterministic; --tokens and --logits write what they say;
# --backend cuda exits non-zero with a reason where it cannot open.
# Needs contrib/fetch-refs.sh (MEDHA_CACHE, default cache/); the usage
# checks run without it (and then it skips the rest).
. "$(dirname "$0")/lib.sh"
mw=$bin/medha-worker
model=$smollm2

# want CODE ARGS...: medha-worker ARGS exits with CODE (lib.sh)
want() {
	code=$1
	shift
	expect_status "$code" "$mw" "$@"
}

want 0 -h
grep -q '^usage: medha-worker -s ADDR -m MODEL' "$tmp/out"
grep -q '^       medha-worker -m MODEL (-p PROMPT' "$tmp/out"
want 2 -s ipc:///nonexistent/x -m x.gguf -p hi
grep -q 'no prompt' "$tmp/err"
want 2 -s ipc:///x -m x.gguf --backend gpu
want 1 -s ipc:///x -m "$tmp/none.gguf"
grep -q 'none.gguf' "$tmp/err"
want 1 -s ipc:///x --backend sim --gpu z80 -m llama3-8b
grep -q 'z80' "$tmp/err"
# the cuda backend fails cleanly: 1 with no device (said before the
# model is read) or no such model on a GPU; 2 where it is not built in
st=0
"$mw" -s ipc:///x --backend cuda -m "$tmp/none.gguf" > /dev/null \
    2> "$tmp/err" || st=$?
[ "$st" = 1 ] || [ "$st" = 2 ]
grep -Eq 'cuda: no CUDA device: |none.gguf|cuda: not built' "$tmp/err"
want 2
want 2 -m x.gguf
grep -q 'give the prompt' "$tmp/err"
want 2 -m x.gguf -p hi -f y
want 2 -m x.gguf -p hi --bogus
# getopt's message names the program, not the path it was run by
grep -q "^medha-worker: unrecognized option '--bogus'" "$tmp/err"
want 2 -m x.gguf -p hi --system "Be brief."
grep -q -- '--system needs --chat' "$tmp/err"
want 2 -m x.gguf -p hi -n -1
want 2 -m x.gguf -p hi --temp nan
want 2 -m x.gguf -p hi --kv f8
# the cuda backend's flags: its own go with it, --kv's type with the
# backend; a shape name (random weights, no tokenizer) is no one-shot
# model, and sim computes nothing to run one on
for f in "--mem-util 0.5" "--device 1" "--coll nng"; do
	# shellcheck disable=SC2086
	want 2 -m x.gguf -p hi $f
	grep -q -- "${f% *} goes with --backend cuda" "$tmp/err"
done
want 2 -m x.gguf -p hi --backend cuda --coll mpi
grep -q 'expected nccl or nng' "$tmp/err"
want 2 -m x.gguf -p hi --backend cuda --mem-util 1.5
want 2 -m x.gguf -p hi --backend cuda --mem-util 0
want 2 -m x.gguf -p hi --backend cuda --device -1
want 2 -m x.gguf -p hi --kv bf16
grep -q 'bf16 goes with --backend cuda' "$tmp/err"
want 2 -m x.gguf -p hi --backend cuda --kv f32
grep -q 'bf16 or f16' "$tmp/err"
want 2 -m llama3-8b -p hi --backend cuda
grep -q 'shape name has random weights and no tokenizer' "$tmp/err"
want 2 -m smollm2-135m -p hi --backend sim
want 2 -m "$tmp/none.gguf" -p hi --backend sim
grep -q 'sim computes nothing' "$tmp/err"
# cuda where it cannot run (no GPU here, or a build without nvcc): a
# clear reason and a failure, in both modes, before any scheduler is
# reached; on a GPU, one-shot mode runs
st=0
"$mw" -s "ipc://$tmp/none.sock" --backend cuda -m llama3-8b --max-seqs 2 \
    --mem-util 0.5 >"$tmp/out" 2>"$tmp/err" </dev/null &
pid=$!
for _ in $(seq 100); do
	kill -0 $pid 2>/dev/null || break
	sleep 0.1
done
if kill -0 $pid 2>/dev/null; then
	kill $pid
	echo "skip: a CUDA device is here: --backend cuda refusals not checked"
else
	wait $pid || st=$?
	case $st in
	1) grep -q 'llama3-8b: cuda: no CUDA device' "$tmp/err" ;;
	2) grep -q 'cuda: not built into this program' "$tmp/err" ;;
	*) echo "--backend cuda without a GPU: status $st"; cat "$tmp/err"; exit 1 ;;
	esac || { echo "--backend cuda: status $st"; cat "$tmp/err"; exit 1; }
fi
want 1 -m "$tmp/none.gguf" -p hi
grep -q 'none.gguf' "$tmp/err"
printf 'not a model' > "$tmp/junk.gguf"
want 1 -m "$tmp/junk.gguf" -p hi

[ -s "$model" ] ||
    skip "$model missing (run contrib/fetch-refs.sh); the usage checks passed"

# a worker aimed at no scheduler says so, with the address, without -v
st=0
timeout 8 "$mw" -s "ipc://$tmp/none.sock" -m "$model" -t 1 \
    2>"$tmp/err" || st=$?
[ "$st" = 124 ] || { echo "worker -s with no scheduler: status $st"; exit 1; }
grep -q "no scheduler at ipc://$tmp/none.sock yet" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }

# -p with a temperature and no --seed draws a seed each run, as HTTP does
# for a request without one; --seed repeats a run
run() { "$mw" -m "$model" -p "Once upon a time" -n 24 -t 2 --temp 1.5 "$@"; }
[ "$(run --seed 7)" = "$(run --seed 7)" ]
a=$(run) b=$(run) c=$(run)
if [ "$a" = "$b" ] && [ "$b" = "$c" ]; then
	echo "three runs without --seed gave the same text: $a"
	exit 1
fi
# a long prompt on a terminal shows the prefill's progress; with -v and
# both streams on one pipe, the stats line is a line of its own
python3 -c 'print("word " * 1500)' >"$tmp/long.txt"
if command -v script >/dev/null; then
	script -qc "'$mw' -m '$model' -f '$tmp/long.txt' -n 1 -t 2 -c 256" \
	    /dev/null >"$tmp/tty" </dev/null
	grep -q "prefill: 1501 of 1501 prompt tokens" "$tmp/tty" ||
	    { cat "$tmp/tty"; exit 1; }
else
	echo "skip: no script(1) for a terminal"
fi
"$mw" -m "$model" -p "The capital of France is" -n 8 -t 2 -v 2>&1 |
    tail -n 1 >"$tmp/last"
grep -q '^medha-worker: info: prompt 5 tokens in' "$tmp/last" ||
    { cat "$tmp/last"; exit 1; }

# a write error on stdout is an error (exit 1, with the reason), not
# output silently lost
for args in "-n 30" "-n 0 --tokenize"; do
	st=0
	# shellcheck disable=SC2086
	"$mw" -m "$model" -p hi $args -t 2 >/dev/full 2>"$tmp/err" || st=$?
	[ "$st" = 1 ] || { echo "stdout on /dev/full ($args): status $st"; exit 1; }
	grep -q 'stdout: No space left' "$tmp/err" || { cat "$tmp/err"; exit 1; }
done

# a model file cut short: a clear error, no crash
head -c 5000000 "$model" > "$tmp/cut.gguf"
want 1 -m "$tmp/cut.gguf" -p hi
grep -qi 'end of the file\|truncat\|past the end' "$tmp/err"

# prompt and output past the context of 8192 tokens
want 1 -m "$model" -p hi -n 9000
grep -q 'context' "$tmp/err"

# the same logits whatever the prefill chunk
p="The quick brown fox jumps over the lazy dog, and then it runs far away into the forest where nobody can find it."
for c in 0 1 7 32; do
	want 0 -m "$model" -p "$p" -n 0 -c "$c" -t 2 --logits "$tmp/l$c"
	[ "$(wc -c < "$tmp/l$c")" -eq $((49152 * 4)) ]
done
for c in 1 7 32; do
	cmp "$tmp/l0" "$tmp/l$c" || { echo "chunk $c: logits differ"; exit 1; }
done

# greedy is deterministic; --tokens prints ids, text mode the same text
want 0 -m "$model" -p "The capital of France is" -n 16 --tokens --ignore-eos
cp "$tmp/out" "$tmp/ids1"
want 0 -m "$model" -p "The capital of France is" -n 16 --tokens --ignore-eos -t 1
cmp "$tmp/ids1" "$tmp/out"
[ "$(wc -w < "$tmp/ids1")" -eq 16 ]
want 0 -m "$model" -p "The capital of France is" -n 16 --ignore-eos
grep -q 'Paris' "$tmp/out"

# --tokenize: the prompt's ids (BOS-free for SmolLM2, as llama.cpp)
want 0 -m "$model" -p "The capital of France is" --tokenize
[ "$(cat "$tmp/out")" = "504 3575 282 4649 314" ]

# chat template and a stop at the end of the turn
want 0 -m "$model" --chat -p "What is 2+2?" -n 100
grep -q '4' "$tmp/out"

# a prompt file is read no further than the context could hold (it read
# /dev/zero until memory ran out): an error at once
st=0
timeout 20 "$mw" -m "$model" -f /dev/zero -n 1 >/dev/null 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] || { echo "-f /dev/zero: status $st, want 1"; cat "$tmp/err"; exit 1; }
grep -q "/dev/zero: more than [0-9]* bytes: the model's context holds 8192 tokens" "$tmp/err"

# --chat keeps what follows a NUL byte (it cut the prompt there)
printf 'Say a\000b' >"$tmp/nul.txt"
printf 'Say a' >"$tmp/cut.txt"
want 0 -m "$model" --chat -f "$tmp/nul.txt" --tokenize
cp "$tmp/out" "$tmp/nul.ids"
want 0 -m "$model" --chat -f "$tmp/cut.txt" --tokenize
if cmp -s "$tmp/out" "$tmp/nul.ids"; then
	echo "--chat: the prompt was cut at its NUL byte"
	exit 1
fi
want 0 -m "$model" -f "$tmp/nul.txt" --tokenize
cp "$tmp/out" "$tmp/plain.ids"
# the chat ids hold the plain prompt's
grep -q "$(cat "$tmp/plain.ids")" "$tmp/nul.ids"

# failures end without leaks (make asan: no LeakSanitizer report): an
# empty prompt, a prompt file too long, stdout on /dev/full
want 1 -m "$model" -p "" -n 3
grep -q 'the prompt has no tokens' "$tmp/err"
no_sanitizer_report "$tmp/err"
want 1 -m "$model" -f /dev/zero
no_sanitizer_report "$tmp/err"
st=0
"$mw" -m "$model" -p hi -n 5 >/dev/full 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] || { echo "stdout on /dev/full: status $st, want 1"; cat "$tmp/err"; exit 1; }
grep -q 'stdout: No space left on device' "$tmp/err"
no_sanitizer_report "$tmp/err"
# -v reports the generation's speed as well as the prompt's
want 0 -m "$model" -p "The capital of France is" -n 8 --ignore-eos -v
grep -q 'prompt 5 tokens in [0-9.]* s ([0-9.]* tok/s), generated 8 in [0-9.]* s ([0-9.]* tok/s)' "$tmp/err"
echo "worker: ok"

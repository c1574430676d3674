#!/bin/sh
# trace-limits.sh: counts and times past the limits of medha-trace(5)
# (token counts <= 1000000000, times finite, >= 0 and <= 1e9 s) are
# refused where they are read: medha-sched --sim, medha-trace convert
# (JSON Lines, Azure and Vidur CSV), report and gen exit 1 at once with a
# message naming the file, the line, the field, the value and the
# allowed range; nothing hangs (each command runs under timeout 10) and,
# in a sanitizer build, nothing trips ASan or UBSan.
. "$(dirname "$0")/lib.sh"
n=0
nfail=0

# want STATUS TEXT INPUT COMMAND...: COMMAND, with INPUT (printf %b: \n
# is a newline) in $tmp/in and on its stdin, ends within 10 s with
# STATUS, TEXT (if not empty) in its stderr and no sanitizer report there.
want() {
	code=$1 text=$2 in=$3
	shift 3
	n=$((n + 1))
	printf '%b' "$in" >"$tmp/in"
	st=0
	timeout 10 "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err" || st=$?
	if [ "$st" -eq 124 ]; then
		why="hung: killed after 10 s"
	elif grep -q 'runtime error\|Sanitizer' "$tmp/err"; then
		why="a sanitizer report"
	elif [ "$st" -ne "$code" ]; then
		why="status $st, want $code"
	elif [ -n "$text" ] && ! grep -qF -- "$text" "$tmp/err"; then
		why="stderr lacks: $text"
	else
		return 0
	fi
	nfail=$((nfail + 1))
	echo "FAIL $(basename "$1") $2 $3: $why"
	printf '    input: %b\n' "$in" | head -n 4
	sed 's/^/    stderr: /' "$tmp/err" | head -n 8
}

sim="$bin/medha-sched --sim a100 -m llama3-8b"
tokens='not an integer in [1, 1000000000]'
outs='not an integer in [0, 1000000000]'
times='not a number in [0, 1000000000]'
slo='not a number in (0, 1000000000]'

# ---- JSON Lines traces: medha-sched --sim and medha-trace convert ----
for cmd in "$sim" "$bin/medha-trace convert"; do
	# shellcheck disable=SC2086 # $cmd is a command and its arguments
	set -- $cmd
	want 1 "stdin: line 1: prompt_tokens: $tokens (got 9223372036854775807)" \
	    '{"arrival":0,"prompt_tokens":9223372036854775807,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: max_tokens: $outs (got 9223372036854775000)" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":9223372036854775000}\n' "$@"
	want 1 "stdin: line 1: max_tokens: $outs (got 9223372036854775807)" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":9223372036854775807}\n' "$@"
	want 1 "stdin: line 1: prompt_tokens: $tokens (got 1e+18)" \
	    '{"arrival":0,"prompt_tokens":1e18,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 2: prompt_tokens: $tokens (got 1000000000000000000)" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":1}\n{"arrival":1,"prompt_tokens":1000000000000000000,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: prompt_tokens: $tokens (got 1000000001)" \
	    '{"arrival":0,"prompt_tokens":1000000001,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: prompt_tokens: $tokens (got -5)" \
	    '{"arrival":0,"prompt_tokens":-5,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: max_tokens: $outs (got -9223372036854775807)" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":-9223372036854775807}\n' "$@"
	want 1 "stdin: line 1: not JSON: real number overflow" \
	    '{"arrival":0,"prompt_tokens":1e400,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: not JSON" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":NaN}\n' "$@"
	want 1 "stdin: line 1: prompt_tokens: $tokens (got a string)" \
	    '{"arrival":0,"prompt_tokens":"nan","max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: arrival: $times (got 1e+300)" \
	    '{"arrival":1e300,"prompt_tokens":5,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: arrival: $times (got -1)" \
	    '{"arrival":-1,"prompt_tokens":5,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: arrival: $times (got a string)" \
	    '{"arrival":"Infinity","prompt_tokens":5,"max_tokens":5}\n' "$@"
	want 1 "stdin: line 1: ttft_slo: $slo (got 1e+300)" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":5,"ttft_slo":1e300}\n' "$@"
	want 1 "stdin: line 1: tpot_slo: $slo (got -0.5)" \
	    '{"arrival":0,"prompt_tokens":5,"max_tokens":5,"tpot_slo":-0.5}\n' "$@"
	want 1 "stdin: line 1: prompt_ids[0]: not a token id in [0, 2147483647] (got 4294967296)" \
	    '{"arrival":0,"prompt_ids":[4294967296],"max_tokens":5}\n' "$@"
done

# at the limits: read, and rejected by the scheduler as too long for
# any KV cache (a record, status 0), quickly
# shellcheck disable=SC2086
want 0 'rejected' \
    '{"arrival":1e9,"prompt_tokens":1000000000,"max_tokens":1000000000}\n' $sim
grep -q '"status": "rejected"' "$tmp/out" || {
	nfail=$((nfail + 1)); echo "FAIL: no rejected record at the limits"; }
want 0 '' \
    '{"arrival":1e9,"prompt_tokens":1000000000,"max_tokens":1000000000,"ttft_slo":1e9}\n' \
    "$bin/medha-trace" convert
[ "$(cat "$tmp/out")" = '{"id": 0, "arrival": 1e+09, "prompt_tokens": 1000000000, "max_tokens": 1000000000, "ttft_slo": 1e+09}' ] || {
	nfail=$((nfail + 1)); echo "FAIL: convert at the limits:"; cat "$tmp/out"; }

# ---- Azure and Vidur CSV: convert (a file and stdin) and medha-sched ----
az='TIMESTAMP,ContextTokens,GeneratedTokens\n'
vi='arrived_at,num_prefill_tokens,num_decode_tokens\n'
for cmd in "$bin/medha-trace convert $tmp/in" "$sim"; do
	# shellcheck disable=SC2086
	set -- $cmd
	case $cmd in *"$tmp/in") f=$tmp/in ;; *) f=stdin ;; esac
	want 1 "$f: line 2: ContextTokens: $tokens (got \"9223372036854775807\")" \
	    "${az}2023-11-16 18:15:46.6805900,9223372036854775807,44\n" "$@"
	want 1 "$f: line 3: GeneratedTokens: $outs (got \"9223372036854775000\")" \
	    "${az}2023-11-16 18:15:46,5,4\n2023-11-16 18:15:47,5,9223372036854775000\n" "$@"
	want 1 "$f: line 2: ContextTokens: $tokens (got \"1e18\")" \
	    "${az}2023-11-16 18:15:46,1e18,4\n" "$@"
	want 1 "$f: line 2: GeneratedTokens: $outs (got \"-5\")" \
	    "${az}2023-11-16 18:15:46,5,-5\n" "$@"
	want 1 "$f: line 2: GeneratedTokens: $outs (got \"1e400\")" \
	    "${az}2023-11-16 18:15:46,5,1e400\n" "$@"
	want 1 "$f: line 2: ContextTokens: $tokens (got \"NaN\")" \
	    "${az}2023-11-16 18:15:46,NaN,4\n" "$@"
	want 1 "$f: line 2: TIMESTAMP: not a time like" \
	    "${az}2023-11-16 18:15:46.5e999,5,4\n" "$@"
	want 1 "$f: line 3: TIMESTAMP: \"2099-01-01 00:00:00\" is" \
	    "${az}2023-11-16 18:15:46,5,4\n2099-01-01 00:00:00,5,4\n" "$@"
	want 1 "$f: line 2: num_prefill_tokens: $tokens (got \"9223372036854775807\")" \
	    "${vi}0.5,9223372036854775807,20\n" "$@"
	want 1 "$f: line 2: num_decode_tokens: $outs (got \"9223372036854775000\")" \
	    "${vi}0.5,100,9223372036854775000\n" "$@"
	want 1 "$f: line 2: num_prefill_tokens: $tokens (got \"1e18\")" \
	    "${vi}0.5,1e18,20\n" "$@"
	want 1 "$f: line 2: num_decode_tokens: $outs (got \"-1\")" \
	    "${vi}0.5,100,-1\n" "$@"
	for a in 1e400 1e300 nan NaN inf -inf -1; do
		want 1 "$f: line 2: arrived_at: $times (got \"$a\")" \
		    "${vi}$a,100,20\n" "$@"
	done
done

# scaled past the limit
want 1 'request 0: arrival 1e+10 s after --time-scale, more than 1000000000' \
    '{"arrival":10000,"prompt_tokens":5,"max_tokens":5}\n' \
    "$bin/medha-trace" convert --time-scale 1e6

# ---- records: medha-trace report ----
rec='{"id":1,"arrival":0,"first_token":1,"finish":2,"status":"ok",'
want 1 "stdin: line 1: output_tokens: $outs (got 9223372036854775807)" \
    "${rec}\"prompt_tokens\":5,\"output_tokens\":9223372036854775807}\n${rec}\"prompt_tokens\":5,\"output_tokens\":9223372036854775807}\n" \
    "$bin/medha-trace" report
want 1 "$tmp/in: line 2: prompt_tokens: $outs (got 1e+18)" \
    "${rec}\"prompt_tokens\":5,\"output_tokens\":5}\n${rec}\"prompt_tokens\":1e18,\"output_tokens\":5}\n" \
    "$bin/medha-trace" report "$tmp/in"
want 1 "stdin: line 1: output_tokens: $outs (got -3)" \
    "${rec}\"prompt_tokens\":5,\"output_tokens\":-3}\n" \
    "$bin/medha-trace" report
want 1 "stdin: line 1: not JSON: real number overflow" \
    '{"id":1,"arrival":1e400,"first_token":1,"finish":2,"status":"ok","prompt_tokens":5,"output_tokens":5}\n' \
    "$bin/medha-trace" report

# ---- gen: its flags and what it writes stay within the limits ----
want 2 '--max-tokens 1000000001: not in [1, 1000000000]' '' \
    "$bin/medha-trace" gen -n 1 --max-tokens 1000000001
want 1 'past the limit of 1000000000 s' '' \
    "$bin/medha-trace" gen -n 3 -q 1e-12

if [ "$nfail" -ne 0 ]; then
	echo "$nfail of $n cases failed"
	exit 1
fi
echo "ok: $n cases"

#!/bin/sh
# sched-usage.sh: medha-sched exits 2 on bad usage (unknown flag, value out
# of range, missing --sim or -m, unknown policy), 0 for -h with the usage on
# stdout, and 1 for an unknown GPU or model, an unreadable or malformed
# trace (naming the line), with nothing half-written.
. "$(dirname "$0")/lib.sh"
ms=$bin/medha-sched
printf '{"id":1,"arrival":0,"prompt_tokens":100,"max_tokens":4}\n' > "$tmp/ok"

# want CODE ARGS...: medha-sched ARGS, a one-request trace on its stdin,
# exits with CODE (lib.sh)
want() {
	code=$1
	shift
	stdin=$tmp/ok expect_status "$code" "$ms" "$@"
}

want 0 -h
grep -q '^usage: medha-sched -l ADDR' "$tmp/out"
grep -q '^       medha-sched --sim GPU -m MODEL' "$tmp/out"
want 2 -l ipc:///x --sim a100 -m llama3-8b
grep -q -- '-l ADDR' "$tmp/err"
want 2 -l ipc:///x trace.jsonl
grep -q 'no trace file' "$tmp/err"
want 2 -l ipc:///x --workers 0
want 2 -l nope://x
grep -q 'nope://x' "$tmp/err"
want 1 -l "ipc://$tmp/no/such/dir/s.sock"
grep -q 'cannot listen' "$tmp/err"
want 2 --bogus
grep -q '^usage:' "$tmp/err"
want 2 -m llama3-8b
grep -q 'sim' "$tmp/err"
want 2 --sim a100
grep -q -- '-m MODEL' "$tmp/err"
want 2 --sim a100 -m llama3-8b --tp 0
grep -q -- '--tp' "$tmp/err"
want 2 --sim a100 -m llama3-8b --chunk -5
want 2 --sim a100 -m llama3-8b --chunk 12x
want 2 --sim a100 -m llama3-8b -p sjf
grep -q 'fcfs, edf, lrs or medha' "$tmp/err"
want 2 --sim a100 -m llama3-8b --target-batch-time 0
want 2 --sim a100 -m llama3-8b --kvp 65
want 2 --sim a100 -m llama3-8b --kvp-max-tokens 1000
want 2 --sim a100 -m llama3-8b a b
want 1 --sim v100 -m llama3-8b
grep -q 'unknown GPU v100' "$tmp/err"
want 1 --sim a100 -m llama9-1t
grep -q 'llama9-1t' "$tmp/err"
want 1 --sim a100 -m llama3-8b --spp 33
# tensor parallelism must divide the heads (32 query, 8 KV heads)
want 1 --sim a100 -m llama3-8b --tp 3
grep -q 'tp 3 .*divide the query heads' "$tmp/err"
want 1 --sim a100 -m llama3-8b --tp 1024
want 1 --sim a100 -m llama3-8b --tp 64
want 1 --sim a100 -m llama3-8b "$tmp/missing"
grep -q 'missing' "$tmp/err"
want 1 --sim a100 -m llama3-8b --profile "$tmp/missing"
# the links (--sim only): a bad one named, a good one costs time
want 2 --sim a100 -m llama3-8b --kvp-link 0.01,fast
grep -q -- '--kvp-link: fast: expected a bandwidth' "$tmp/err"
want 2 --sim a100 -m llama3-8b --tp-link -1
grep -q -- '--tp-link: -1: expected LATENCY' "$tmp/err"
want 2 -l ipc:///x --spp-link 0.01
grep -q -- "the --\*-link flags are the simulator's" "$tmp/err"
want 0 --sim a100 -m llama3-8b
t0=$(sed 's/.*"ttft": *\([0-9.e-]*\).*/\1/' "$tmp/out")
want 0 --sim a100 -m llama3-8b --sched-link 0.25 --spp-link 0.5,100mbit \
    --kvp-link 1 --tp-link 1
t1=$(sed 's/.*"ttft": *\([0-9.e-]*\).*/\1/' "$tmp/out")
# tp 1, spp 1, kvp 1: only the scheduler's link, out and back
awk -v a="$t0" -v b="$t1" 'BEGIN { d = b - a; exit !(d > 0.4999 && d < 0.5001) }' ||
    { echo "--sched-link 0.25: ttft $t0 -> $t1, want 0.5 s more"; exit 1; }
# this machine as the device: the heads split unevenly (9 over tp 2)
want 0 --sim cpu -m smollm2-135m --tp 2 --kv-blocks 1000
grep -q '"status": "ok"' "$tmp/out"

# a malformed trace line is named, and nothing is written
printf '{"id":1,"arrival":0,"prompt_tokens":100,"max_tokens":4}\n{"id":2,"arrival":"soon","prompt_tokens":5,"max_tokens":1}\n' > "$tmp/bad"
want 1 --sim a100 -m llama3-8b "$tmp/bad"
grep -q 'line 2' "$tmp/err"
[ ! -s "$tmp/out" ]
printf 'not json at all\n' > "$tmp/bad2"
want 1 --sim a100 -m llama3-8b "$tmp/bad2"
grep -q 'line 1' "$tmp/err"
# a truncated zstd trace
"$bin/medha-trace" gen -n 200 -s 3 -o "$tmp/t.zst"
head -c 300 "$tmp/t.zst" > "$tmp/cut.zst"
want 1 --sim a100 -m llama3-8b "$tmp/cut.zst"
# an empty trace is fine: no records
: > "$tmp/empty"
want 0 --sim a100 -m llama3-8b "$tmp/empty"
[ ! -s "$tmp/out" ]
# failures end without leaks (make asan: no LeakSanitizer report): a
# model that does not fit, records to /dev/full
"$bin/medha-trace" gen -n 50 -s 1 >"$tmp/t50"
want 1 --sim a100 -m llama3-8b --mem-util 0.01 "$tmp/t50"
no_sanitizer_report "$tmp/err"
st=0
"$bin/medha-sched" --sim a100 -m llama3-8b "$tmp/t50" >/dev/full \
    2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] || { echo "records to /dev/full: status $st, want 1"; exit 1; }
grep -q 'writing records to stdout: No space left on device' "$tmp/err"
no_sanitizer_report "$tmp/err"
# errors that say what is wrong and where
want 1 --sim a100 -m llama3-8b --mem-util 0.01 "$tmp/t50"
grep -q 'llama3-8b does not fit on a100 with tp 1 spp 1: 15.0 GiB of weights' "$tmp/err"
want 1 --sim a100 -m llama3-70b "$tmp/t50"
grep -q 'no room for KV' "$tmp/err"
want 1 --sim a100 -m /dev/null "$tmp/t50"
grep -q -- '-m /dev/null: not a regular file, not a GGUF file' "$tmp/err"
want 1 --sim a100 -m "$tmp" "$tmp/t50"
grep -q -- "-m $tmp: a directory, not a GGUF file" "$tmp/err"
want 1 --sim a100 -m nosuch "$tmp/t50"
grep -q -- '-m nosuch: neither a built-in model nor a file' "$tmp/err"
want 1 --sim a100 -m llama3-8b "$tmp"
grep -q "medha-sched: $tmp: Is a directory" "$tmp/err"
want 2 --sim a100 -m llama3-8b "$tmp/t50" "$tmp/t50"
grep -q 'one trace file at most (2 given)' "$tmp/err"
st=0
"$ms" --sim a100 -m llama3-8b <&- >/dev/null 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q 'medha-sched: stdin: Bad file descriptor' "$tmp/err" ||
    { echo "closed stdin: status $st"; cat "$tmp/err"; exit 1; }

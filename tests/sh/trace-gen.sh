#!/bin/sh
# trace-gen.sh: medha-trace gen is deterministic for a seed and differs
# across seeds; -n 2000 -l 0.05 gives about 5% long requests with prompts
# inside their bounds; .zst output is real zstd and report reads it.
. "$(dirname "$0")/lib.sh"

"$bin/medha-trace" gen -n 500 -s 7 >"$tmp/a"
"$bin/medha-trace" gen -n 500 -s 7 >"$tmp/b"
"$bin/medha-trace" gen -n 500 -s 8 >"$tmp/c"
cmp -s "$tmp/a" "$tmp/b" || { echo "same seed, different traces"; exit 1; }
if cmp -s "$tmp/a" "$tmp/c"; then
	echo "different seeds, same trace"
	exit 1
fi
[ "$(wc -l <"$tmp/a")" -eq 500 ] || { echo "-n 500: wrong count"; exit 1; }

"$bin/medha-trace" gen -n 2000 -l 0.05 -s 3 >"$tmp/mix"
python3 - "$tmp/mix" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
assert len(reqs) == 2000, len(reqs)
assert [r["id"] for r in reqs] == list(range(2000)), "ids"
arr = [r["arrival"] for r in reqs]
assert arr[0] > 0 and all(a <= b for a, b in zip(arr, arr[1:])), "arrivals"
long = [r for r in reqs if r["prompt_tokens"] >= 131072]
short = [r for r in reqs if r["prompt_tokens"] < 131072]
frac = len(long) / len(reqs)
assert 0.03 <= frac <= 0.07, "long fraction %g" % frac
for r in long:
    assert 131072 <= r["prompt_tokens"] <= 1048576, r
    assert r["max_tokens"] >= 1, r
for r in short:
    assert 1 <= r["prompt_tokens"] <= 8192, r
    assert 1 <= r["max_tokens"] <= 4096, r
    assert r["prompt_tokens"] + r["max_tokens"] <= 8192, r
for r in reqs:
    assert r["tpot_slo"] == 0.1 and r["ttft_slo"] >= 0.5, r
PY

"$bin/medha-trace" gen -n 300 -l 0 -t 5 >/dev/null 2>&1 && {
	echo "-n with -t accepted"; exit 1; }
"$bin/medha-trace" gen -n 300 -l 0 >"$tmp/short"
python3 -c '
import json, sys
assert all(json.loads(l)["prompt_tokens"] <= 8192 for l in open(sys.argv[1]))
' "$tmp/short"

"$bin/medha-trace" gen -t 60 -q 2 -s 5 -o "$tmp/t.jsonl.zst"
zstd -q -dc "$tmp/t.jsonl.zst" >"$tmp/t.jsonl"
python3 -c '
import json, sys
a = [json.loads(l)["arrival"] for l in open(sys.argv[1])]
assert 60 < len(a) < 200 and a[-1] < 60, (len(a), a[-1])
' "$tmp/t.jsonl"
"$bin/medha-trace" gen -t 60 -q 2 -s 5 | cmp -s - "$tmp/t.jsonl" || {
	echo "compressed and plain output differ"; exit 1; }
"$bin/medha-trace" report "$tmp/t.jsonl.zst" >"$tmp/report" 2>&1 && {
	echo "report took a trace for records"; exit 1; }
grep -q 'line 1: a request of a trace, not a result record' "$tmp/report"

# --prompts: text prompts in turn, --max-tokens caps the output
printf 'first prompt\n\nsecond "quoted"\n' >"$tmp/prompts"
"$bin/medha-trace" gen -n 5 --prompts "$tmp/prompts" --max-tokens 7 \
    >"$tmp/p.jsonl"
python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert [x["prompt"] for x in r] == ["first prompt", "second \"quoted\""] * 2 + ["first prompt"], r
assert all("prompt_tokens" not in x and 0 <= x["max_tokens"] <= 7 for x in r), r
' "$tmp/p.jsonl"
"$bin/medha-trace" gen -n 2 --prompts "$tmp/none" 2>"$tmp/err" && exit 1
grep -q 'none' "$tmp/err"
: >"$tmp/empty"
"$bin/medha-trace" gen -n 2 --prompts "$tmp/empty" 2>"$tmp/err" && exit 1
grep -q 'no prompts' "$tmp/err"
st=0
"$bin/medha-trace" gen --base "$tmp/p.jsonl" --prompts "$tmp/prompts" \
    2>"$tmp/err" || st=$?
[ "$st" = 2 ] || { echo "--base with --prompts: status $st"; exit 1; }
# a long fraction near 1 with --base asked for unboundedly many long
# requests (gigabytes, then exit 1 without a word); 1 mixed in none
for l in 0.999999999999 1; do
	st=0
	timeout 10 "$bin/medha-trace" gen --base "$tmp/p.jsonl" -l $l \
	    >/dev/null 2>"$tmp/err" || st=$?
	[ "$st" = 2 ] || { echo "--base -l $l: status $st"; exit 1; }
	grep -q -- '-l at most 0.99' "$tmp/err" || { cat "$tmp/err"; exit 1; }
done
# a base of text prompts keeps them (it failed without a word)
"$bin/medha-trace" gen --base "$tmp/p.jsonl" -l 0.99 -s 3 >"$tmp/mixed.jsonl"
python3 -c '
import json, sys
base = [json.loads(l) for l in open(sys.argv[1])]
mixed = [json.loads(l) for l in open(sys.argv[2])]
kept = [x["prompt"] for x in mixed if "prompt" in x]
assert kept == [x["prompt"] for x in base], kept
assert len(mixed) > len(base), "-l 0.99 mixed in none"
' "$tmp/p.jsonl" "$tmp/mixed.jsonl"
echo ok

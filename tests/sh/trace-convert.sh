#!/bin/sh
# trace-convert.sh: medha-trace convert reads the Azure CSV (the first 200
# lines of the shared trace: 199 requests, the first at 0), Vidur's CSV
# and zstd input, scales time, and names the line of a bad row.
. "$(dirname "$0")/lib.sh"
azure=$top/../shared/traces/azure-llm-2023-conv.csv

if [ -f "$azure" ]; then
	head -n 200 "$azure" >"$tmp/az.csv"
	"$bin/medha-trace" convert "$tmp/az.csv" >"$tmp/az.jsonl"
	"$bin/medha-trace" convert --time-scale 0.5 -o "$tmp/half.zst" \
	    - <"$tmp/az.csv"
	python3 - "$tmp/az.jsonl" "$tmp/half.zst" <<'PY'
import json, subprocess, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
assert len(reqs) == 199, len(reqs)
assert reqs[0] == {"id": 0, "arrival": 0, "prompt_tokens": 374,
                   "max_tokens": 44}, reqs[0]
assert abs(reqs[1]["arrival"] - 4.314579) < 1e-9, reqs[1]
assert all(r["prompt_tokens"] >= 1 and "ttft_slo" not in r for r in reqs)
half = subprocess.run(["zstd", "-q", "-dc", sys.argv[2]], check=True,
                      capture_output=True, text=True).stdout.splitlines()
half = [json.loads(l) for l in half]
assert len(half) == 199
for a, b in zip(reqs, half):
    assert abs(a["arrival"] * 0.5 - b["arrival"]) < 1e-6, (a, b)
PY
else
	echo "skip: $azure absent"
fi

printf 'arrived_at,num_prefill_tokens,num_decode_tokens,x\n0.5,100,20,a\n' \
    | zstd -q -c | "$bin/medha-trace" convert >"$tmp/v"
[ "$(cat "$tmp/v")" = \
    '{"id": 0, "arrival": 0.5, "prompt_tokens": 100, "max_tokens": 20}' ]

# JSON Lines in, JSON Lines out, SLOs kept
"$bin/medha-trace" gen -n 50 -s 2 >"$tmp/g"
"$bin/medha-trace" convert "$tmp/g" | cmp -s - "$tmp/g" || {
	echo "convert changed a medha trace"; exit 1; }

printf '{"arrival": 1, "prompt_tokens": 5, "max_tokens": 1}\n\n%s\n' \
    '{"arrival": 2, "prompt_tokens": 5, "max_tokens": "many"}' >"$tmp/bad"
st=0
"$bin/medha-trace" convert "$tmp/bad" >/dev/null 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q 'line 3: max_tokens' "$tmp/err" || {
	echo "bad line: status $st"; cat "$tmp/err"; exit 1; }
echo ok

if [ -f "$azure" ]; then
	# gen --base: the base trace's requests all kept, long ones mixed in
	# at about the asked fraction, inside the base's span, ids renumbered
	"$bin/medha-trace" convert --time-scale 4 "$azure" > "$tmp/base.jsonl"
	"$bin/medha-trace" gen --base "$tmp/base.jsonl" -l 0.2 -s 5 > "$tmp/mixed.jsonl"
	python3 - "$tmp/base.jsonl" "$tmp/mixed.jsonl" <<'PY'
import json, sys
base = [json.loads(l) for l in open(sys.argv[1])]
mixed = [json.loads(l) for l in open(sys.argv[2])]
longs = [r for r in mixed if r["prompt_tokens"] >= 131072]
assert len(mixed) - len(longs) == len(base), (len(mixed), len(longs), len(base))
frac = len(longs) / len(mixed)
assert 0.17 < frac < 0.23, frac
arr = [r["arrival"] for r in mixed]
assert arr == sorted(arr)
assert min(arr) == base[0]["arrival"] and max(arr) <= base[-1]["arrival"]
assert [r["id"] for r in mixed] == list(range(len(mixed)))
assert all(r["ttft_slo"] > 0 and r["tpot_slo"] > 0 for r in mixed)
PY
	st=0
	"$bin/medha-trace" gen --base "$tmp/base.jsonl" -q 2 > /dev/null 2>&1 || st=$?
	[ "$st" -eq 2 ]
fi

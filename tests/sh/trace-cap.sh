#!/bin/sh
# trace-cap.sh: the client's cap beside the real length (medha-trace(1),
# "Output lengths"). convert and gen write max_tokens by
# --max-tokens-policy (actual: today's traces; context: the context less
# the prompt; N: a fixed cap, the real length truncated to it) and the
# real length as output_tokens where it is less; actual turns such a
# trace back; a context is tokens or a model's; the simulator stops each
# request at its real length ("stop") and report reads its records; bad
# flags are usage errors (2), a prompt that fills the context an error
# (1) naming the request.
. "$(dirname "$0")/lib.sh"
mt=$bin/medha-trace

cat >"$tmp/az.csv" <<'EOF'
TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:47.0000000,8000,300
2023-11-16 18:15:48.0000000,100,0
2023-11-16 18:15:49.0000000,1000,250
EOF
"$mt" convert "$tmp/az.csv" >"$tmp/actual"
"$mt" convert --max-tokens-policy context --context smollm2-135m \
    "$tmp/az.csv" >"$tmp/ctx"
"$mt" convert --max-tokens-policy context --context 8192 "$tmp/az.csv" |
    cmp -s - "$tmp/ctx" || { echo "--context 8192 != smollm2-135m's"; exit 1; }
"$mt" convert --max-tokens-policy 200 "$tmp/az.csv" >"$tmp/n200"
# back to the real lengths (as the context left them)
"$mt" convert --max-tokens-policy actual "$tmp/ctx" >"$tmp/back"
python3 - "$tmp/actual" "$tmp/ctx" "$tmp/n200" "$tmp/back" <<'PY'
import json, sys
act, ctx, n200, back = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
assert [r["max_tokens"] for r in back] == [44, 192, 0, 250], back
assert all("output_tokens" not in r for r in back), back
assert [r["max_tokens"] for r in act] == [44, 300, 0, 250], act
assert all("output_tokens" not in r for r in act), act
# context 8192: the room after the prompt; a real length past it is cut
assert [r["max_tokens"] for r in ctx] == [7818, 192, 0, 7192], ctx
assert [r.get("output_tokens") for r in ctx] == [44, None, None, 250], ctx
# a fixed cap of 200: 300 truncated to it (no output_tokens: the cap ends it)
assert [r["max_tokens"] for r in n200] == [200, 200, 0, 200], n200
assert [r.get("output_tokens") for r in n200] == [44, None, None, None], n200
PY

# the simulator stops at the real length; report reads the records
"$bin/medha-sched" --sim a100 -m llama3-8b --tp 8 "$tmp/ctx" >"$tmp/rec"
python3 - "$tmp/rec" <<'PY'
import json, sys
rec = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [(rec[i]["output_tokens"], rec[i]["finish_reason"]) for i in range(4)]
assert got == [(44, "stop"), (192, "length"), (0, "length"), (250, "stop")], got
PY
"$mt" report "$tmp/rec" >"$tmp/rep"
grep -q 'requests' "$tmp/rep" || { cat "$tmp/rep"; exit 1; }
# and still tells a trace (output_tokens and all) from records
expect_status 1 "$mt" report "$tmp/ctx"
grep -q 'line 1: a request of a trace, not a result record' "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }

# gen: its drawn lengths as output_tokens under a context of 8192
"$mt" gen -n 40 -l 0 -s 3 >"$tmp/g"
"$mt" gen -n 40 -l 0 -s 3 --max-tokens-policy context --context 8192 \
    >"$tmp/gc"
"$mt" convert "$tmp/gc" | cmp -s - "$tmp/g" ||
    { echo "gen: the context policy changed more than the cap"; exit 1; }
python3 - "$tmp/g" "$tmp/gc" <<'PY'
import json, sys
g, gc = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
for a, b in zip(g, gc):
    assert b["max_tokens"] == 8192 - b["prompt_tokens"], b
    assert b.get("output_tokens", b["max_tokens"]) == a["max_tokens"], (a, b)
assert any("output_tokens" in b for b in gc)
PY

# errors
expect_status 2 "$mt" convert --max-tokens-policy context "$tmp/az.csv"
expect_status 2 "$mt" convert --context 8192 "$tmp/az.csv"
expect_status 2 "$mt" convert --max-tokens-policy some "$tmp/az.csv"
expect_status 2 "$mt" convert --max-tokens-policy context --context nosuch \
    "$tmp/az.csv"
expect_status 2 "$mt" gen -n 2 --max-tokens-policy context --context 8192 \
    --prompts "$tmp/az.csv"
st=0
"$mt" convert --max-tokens-policy context --context 4096 "$tmp/az.csv" \
    >/dev/null 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q 'request 1: its 8000 prompt tokens leave no room' \
    "$tmp/err" || { echo "status $st"; cat "$tmp/err"; exit 1; }
printf '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 9, "output_tokens": 0}\n' |
    "$mt" convert >/dev/null 2>"$tmp/err" && exit 1
grep -q 'line 1: output_tokens' "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo ok

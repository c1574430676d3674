#!/bin/sh
# live-single.sh: the live replica (examples/serve.sh single: medha-sched
# -l and one cpu medha-worker -s) against medha-worker -p, on a random
# model written by the gguf package and on SmolLM2. Sixteen requests
# arrive at once (prompts of 3 to about 550 tokens, so chunked prefills
# share batches with decodes), greedy: each must give exactly the tokens
# medha-worker -p gives for it alone, and every request ends with one
# record. Then the bad cases: a malformed trace line is refused
# by replay with a reason, an empty and a too-long prompt get "rejected"
# records with a reason, a stop string cuts the text (its token is
# neither in token_ids nor in output_tokens), and SIGTERM stops
# every process. The SmolLM2 replica's worker runs with lookahead (its
# default), whose steps run ahead must have been used, and must have
# warmed up before its HELLO; the random model's with --no-lookahead.
# Needs contrib/fetch-refs.sh (the real model).
. "$(dirname "$0")/lib.sh"
need_model
addr=ipc://$tmp/r.sock
echo "live-single: starting examples/serve.sh single" >&2

# sixteen prompts, all arriving at once
python3 "$top/tests/ref/solo.py" trace "$tmp/trace.jsonl" 24 2 4 6 8 10 12 14 25
# start a replica on model $1, check 16 concurrent requests against -p
serve_and_compare() {
	m=$1
	serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$m" \
	    MEDHA_LOG="$tmp/logs" MEDHA_WORKER_OPTS="${2:-}"
	"$bin/medha-trace" replay -a "$addr" --token-ids "$tmp/trace.jsonl" \
	    >"$tmp/out.jsonl"
	python3 "$top/tests/ref/solo.py" check "$tmp/trace.jsonl" \
	    "$tmp/out.jsonl" "$bin/medha-worker" "$m" live
}

# a random model written by the gguf package (not libcore), then SmolLM2
if has_py gguf numpy; then
	"$py" "$top/tests/ref/random_model.py" "$model" "$tmp/random.gguf"
	serve_and_compare "$tmp/random.gguf" --no-lookahead
	serve_stop
else
	echo "skip: the random model needs $py with gguf (contrib/fetch-refs.sh)"
fi
serve_and_compare "$model" -v

# refused and rejected requests still end with one record and a reason
cat >"$tmp/bad.jsonl" <<'EOF'
{"id": "empty", "arrival": 0, "prompt": "", "max_tokens": 4}
{"id": "toolong", "arrival": 0, "prompt_tokens": 9000, "max_tokens": 4}
{"id": "badid", "arrival": 0, "prompt_ids": [1, 99999999], "max_tokens": 4}
{"id": "stop", "arrival": 0, "prompt": "Count: 1, 2, 3,", "max_tokens": 30, "stop": [" 7"]}
EOF
"$bin/medha-trace" replay -a "$addr" --token-ids "$tmp/bad.jsonl" \
    >"$tmp/bad.out"
python3 - "$tmp/bad.out" <<'PY'
import json, sys
out = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert r["id"] not in out
    out[r["id"]] = r
assert set(out) == {"empty", "toolong", "badid", "stop"}, out
for k in ("empty", "toolong", "badid"):
    assert out[k]["status"] == "rejected" and out[k]["reason"], out[k]
assert "context" in out["toolong"]["reason"], out["toolong"]
assert "vocabulary" in out["badid"]["reason"], out["badid"]
s = out["stop"]
assert s["status"] == "ok" and s["finish_reason"] == "stop", s
assert " 7" not in s["text"] and "6" in s["text"], s
# the token that holds the stop string is not output: not in
# token_ids, not counted in output_tokens (medha-trace(5))
assert len(s["token_ids"]) == s["output_tokens"], s
PY

# a malformed line stops replay with the line number
printf '{"id": "x", "arrival": 0, "max_tokens": "many", "prompt": "a"}\n' |
    "$bin/medha-trace" replay -a "$addr" >/dev/null 2>"$tmp/err" && exit 1
grep -q "line 1: max_tokens" "$tmp/err" || { cat "$tmp/err"; exit 1; }

# SIGTERM stops the scheduler and the worker
serve_stop
sleep 0.5
if pgrep -f "medha-sched -l $addr" >/dev/null ||
    pgrep -f "medha-worker -s $addr" >/dev/null; then
	echo "processes left after SIGTERM"
	exit 1
fi
grep -q "stopped:" "$tmp/logs/sched.log"
# the SmolLM2 worker (lookahead, its default) ran decode steps ahead
# during round trips and used them (the tokens above are the same as
# -p's either way)
sed -n 's/.*stopped after [0-9]* batches (\([0-9]*\) of \([0-9]*\) steps.*/\1 \2/p' \
    "$tmp"/logs/sched-worker0.log | tail -n 1 >"$tmp/ahead"
read -r used ran <"$tmp/ahead" || true
if [ -z "$used" ] || [ "$used" -lt 1 ] || [ "$used" -gt "$ran" ]; then
	echo "no step run ahead was used: $(cat "$tmp/ahead")"
	cat "$tmp"/logs/sched-worker0.log
	exit 1
fi
# the worker warmed up before its HELLO (a forward on a sequence of its
# own, freed after: the tokens above are -p's all the same)
if ! grep -q "info: warm-up: a forward of 16 tokens in" \
    "$tmp"/logs/sched-worker0.log; then
	echo "the worker did not warm up"
	cat "$tmp"/logs/sched-worker0.log
	exit 1
fi
echo "live-single: ok ($used of $ran steps run ahead used)"

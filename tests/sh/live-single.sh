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
# First, without the model: serve.sh's MEDHA_BACKEND takes cpu or cuda,
# and cuda where it cannot run (no GPU here, or a build without nvcc)
# stops the topology before "ready" with the worker's reason.
# Needs contrib/fetch-refs.sh (the real model).
. "$(dirname "$0")/lib.sh"
st=0
MEDHA_BACKEND=gpu bash "$top/examples/serve.sh" single 2>"$tmp/err" || st=$?
[ "$st" = 2 ] && grep -q 'MEDHA_BACKEND=gpu: expected cpu or cuda' "$tmp/err" ||
    { echo "MEDHA_BACKEND=gpu: status $st"; cat "$tmp/err"; exit 1; }
if ! nvidia-smi -L >/dev/null 2>&1; then
	st=0
	env MEDHA_BIN="$bin" MEDHA_BACKEND=cuda MEDHA_MODEL=llama3-8b \
	    MEDHA_ADDR="ipc://$tmp/cuda.sock" MEDHA_LOG="$tmp/cuda-logs" \
	    timeout 60 bash "$top/examples/serve.sh" single 2>"$tmp/err" || st=$?
	[ "$st" = 1 ] && grep -q 'cuda: no CUDA device\|cuda: not built' "$tmp/err" ||
	    { echo "MEDHA_BACKEND=cuda without a GPU: status $st"; cat "$tmp/err"; exit 1; }
fi
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
{"id": "zero", "arrival": 0, "prompt": "Hello", "max_tokens": 0}
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
assert set(out) == {"empty", "toolong", "badid", "stop", "zero"}, out
# every record has token_ids under --token-ids, [] when there are none
for r in out.values():
    assert "token_ids" in r and "text" in r, r
# max_tokens 0: a prefill alone, whose token is no output
z = out["zero"]
assert z["status"] == "ok" and z["output_tokens"] == 0, z
assert z["token_ids"] == [] and z["text"] == "", z
for k in ("empty", "toolong", "badid"):
    assert out[k]["status"] == "rejected" and out[k]["reason"], out[k]
assert "context" in out["toolong"]["reason"], out["toolong"]
assert "vocabulary" in out["badid"]["reason"], out["badid"]
s = out["stop"]
assert s["status"] == "ok" and s["finish_reason"] == "stop", s
# the time from arrival to its first batch (medha-trace(5) queue_time)
assert 0 < s["queue_time"] <= s["ttft"], s
assert " 7" not in s["text"] and "6" in s["text"], s
# the token that completed the stop string was generated: in
# token_ids and counted in output_tokens (medha-trace(5))
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

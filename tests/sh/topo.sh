#!/bin/sh
# topo.sh: the multi-worker topologies of examples/serve.sh against the
# single process.
#  1. Each cpu topology (spp2) on a random model written by the gguf
#     package and on SmolLM2: sixteen greedy requests arriving at once
#     through the router (prompts of 3 to about 550 tokens, so chunks of
#     one prompt follow each other through the stages), each exactly the
#     tokens medha-worker -p gives alone.
#  2. sim64 (64 sim workers behind a router): a generated trace replayed
#     fast ends every request with exactly one record, and SIGTERM stops
#     all 66 processes.
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
cache=${MEDHA_CACHE:-$top/cache}
model=${MEDHA_MODEL:-$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
py=${MEDHA_PY:-$cache/venv/bin/python}
tmp=$(mktemp -d)
router=ipc://$tmp/router.sock
serve=
cleanup() {
	[ -n "$serve" ] && kill "$serve" 2>/dev/null && wait "$serve" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# start TOPOLOGY [MODEL]: serve.sh in the background, until "ready"
start() {
	MEDHA_BIN=$bin MEDHA_ROUTER=$router MEDHA_MODEL=${2:-$model} \
	    MEDHA_LOG=$tmp/logs-$1 MEDHA_ADDR=ipc://$tmp/single.sock \
	    bash "$top/examples/serve.sh" "$1" 2>"$tmp/serve.err" &
	serve=$!
	i=0
	until grep -qx ready "$tmp/serve.err"; do
		i=$((i + 1))
		if [ $i -gt 900 ] || ! kill -0 "$serve" 2>/dev/null; then
			echo "serve.sh $1 did not become ready"
			cat "$tmp/serve.err"
			tail -n 5 "$tmp"/logs-"$1"/*.log
			exit 1
		fi
		sleep 0.1
	done
}

stop() {
	kill -TERM "$serve"
	wait "$serve" || true
	serve=
	if pgrep -f "$tmp" >/dev/null; then
		echo "processes left after SIGTERM:"
		pgrep -fa "$tmp"
		exit 1
	fi
}

python3 - "$tmp/trace.jsonl" <<'PY'
import json, sys
base = ["The capital of France is", "Once upon a time",
        "Write a haiku about the sea.", "def fibonacci(n):",
        "List three prime numbers:", "The quick brown fox",
        "In 1969, the first humans", "Water boils at"]
long = ("Medha serves long prompts by splitting them into chunks that "
        "share each batch with the decodes of other requests. ")
prompts = base + [long * k + "In short," for k in (2, 4, 6, 8, 10, 12, 14, 25)]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"id": "p%d" % i, "arrival": 0, "prompt": p,
                            "max_tokens": 16, "temperature": 0}) + "\n")
PY

# compare TOPOLOGY MODEL: 16 requests through the topology against -p
compare() {
	start "$1" "$2"
	"$bin/medha-trace" replay -a "$router" --token-ids "$tmp/trace.jsonl" \
	    >"$tmp/out.jsonl"
	stop
	python3 - "$tmp/trace.jsonl" "$tmp/out.jsonl" "$bin/medha-worker" \
	    "$2" "$1" <<'PY'
import json, subprocess, sys
trace = [json.loads(l) for l in open(sys.argv[1])]
out = [json.loads(l) for l in open(sys.argv[2])]
ids = [r["id"] for r in out]
assert sorted(ids) == sorted(t["id"] for t in trace), ids
bad = 0
for t in trace:
    r = next(o for o in out if o["id"] == t["id"])
    assert r["status"] == "ok", r
    solo = subprocess.run([sys.argv[3], "-m", sys.argv[4], "-p", t["prompt"],
                           "-n", str(t["max_tokens"]), "--tokens", "-t", "2"],
                          capture_output=True, text=True, check=True).stdout
    want = [int(x) for x in solo.split()]
    if r["token_ids"] != want:
        bad += 1
        print("%s (%d prompt tokens): %s %s, alone %s" %
              (t["id"], r["prompt_tokens"], sys.argv[5], r["token_ids"],
               want))
print("%s on %s: %d requests, %d differ from medha-worker -p" %
      (sys.argv[5], sys.argv[4].split("/")[-1], len(trace), bad))
sys.exit(1 if bad else 0)
PY
}

if [ -s "$model" ]; then
	if "$py" -c 'import gguf, numpy' 2>/dev/null; then
		"$py" "$top/tests/ref/random_model.py" "$model" "$tmp/random.gguf"
		compare spp2 "$tmp/random.gguf"
	else
		echo "skip: the random model needs $py with gguf"
	fi
	compare spp2 "$model"
else
	echo "skip: $model missing (run contrib/fetch-refs.sh)"
fi

# ---- 2. sim64 ----
start sim64
"$bin/medha-trace" gen -n 100 -q 50 -l 0 -s 9 --max-tokens 16 \
    >"$tmp/t.jsonl"
"$bin/medha-trace" replay -a "$router" --speed 4 "$tmp/t.jsonl" \
    >"$tmp/sim.jsonl"
stop
python3 - "$tmp/t.jsonl" "$tmp/sim.jsonl" <<'PY'
import collections, json, sys
want = [json.loads(l)["id"] for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
ids = collections.Counter(r["id"] for r in got)
assert sorted(ids) == sorted(want) and max(ids.values()) == 1, ids
print("sim64: %d requests, one record each: %s" %
      (len(want), dict(collections.Counter(r["status"] for r in got))))
PY
echo "topo: ok"

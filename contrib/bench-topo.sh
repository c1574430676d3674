#!/bin/sh
# bench-topo.sh: what SPP and KVP cost over the wire on this machine.
# One prompt of about 2000 tokens on the random test model
# (tests/ref/random_model.py: 4 layers, width 128), greedy, 32 tokens
# out: prefill time (the record's TTFT) and decode time per token (its
# mean TPOT) for the single process (medha-worker -p), a live replica of
# one worker, spp2 (two pipeline stages) and kvp2 (two KVP groups of
# 1024 positions: the prompt's KV spans both), one thread per worker.
# On 2 cores no speed-up is expected: the figures show the protocol's
# overhead. Runs each REPS (3) times and prints the median.
#
# usage: contrib/bench-topo.sh [REPS]
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
cache=${MEDHA_CACHE:-$top/cache}
py=${MEDHA_PY:-$cache/venv/bin/python}
smol=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
reps=${1:-3}
tmp=$(mktemp -d)
serve=
cleanup() {
	[ -n "$serve" ] && kill "$serve" 2>/dev/null && wait "$serve" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
[ -s "$smol" ] || { echo "bench-topo: run contrib/fetch-refs.sh first" >&2; exit 2; }
"$py" "$top/tests/ref/random_model.py" "$smol" "$tmp/random.gguf"
model=$tmp/random.gguf
text=$(python3 -c 'print("Medha serves long prompts by splitting them into chunks that share each batch with the decodes of other requests. " * 90 + "In short,")')
printf '{"id":"b","arrival":0,"prompt":"%s","max_tokens":32,"temperature":0,"ignore_eos":true}\n' "$text" >"$tmp/trace.jsonl"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# the single process: "prompt N tokens in S s ..., generated M in S s"
for i in $(seq "$reps"); do
	"$bin/medha-worker" -m "$model" -p "$text" -n 32 --ignore-eos -t 1 -v \
	    2>&1 >/dev/null | awk '/prompt .* tokens in/ {
		for (i = 1; i <= NF; i++) {
			if ($i == "prompt") n = $(i + 1)
			if ($i == "in" && !p) { p = $(i + 1); continue }
			if ($i == "generated") { g = $(i + 1); d = $(i + 3) }
		}
		printf "%s %s %s\n", n, p, d / g }'
done >"$tmp/solo"
n=$(awk '{print $1; exit}' "$tmp/solo")
pf=$(awk '{print $2}' "$tmp/solo" | median)
dc=$(awk '{print $3}' "$tmp/solo" | median)
printf '# a %s-token prompt, 32 tokens out, random model, 1 thread per worker, median of %s\n' "$n" "$reps"
printf '%-22s %12s %16s\n' topology "prefill (s)" "decode (ms/tok)"
printf '%-22s %12.3f %16.2f\n' "medha-worker -p" "$pf" "$(echo "$dc" | awk '{print $1 * 1e3}')"

# run LABEL TOPOLOGY [VAR=VALUE...]: serve.sh TOPOLOGY, one replay each
run() {
	label=$1
	topo=$2
	shift 2
	for i in $(seq "$reps"); do
		env "$@" MEDHA_BIN="$bin" MEDHA_ROUTER="ipc://$tmp/r.sock" \
		    MEDHA_ADDR="ipc://$tmp/s.sock" MEDHA_MODEL="$model" \
		    MEDHA_THREADS=1 MEDHA_LOG="$tmp/logs" \
		    bash "$top/examples/serve.sh" "$topo" 2>"$tmp/serve.err" &
		serve=$!
		until grep -qx ready "$tmp/serve.err"; do
			kill -0 "$serve" 2>/dev/null || { cat "$tmp/serve.err"; exit 1; }
			sleep 0.1
		done
		"$bin/medha-trace" replay -a "ipc://$tmp/r.sock" "$tmp/trace.jsonl" \
		    >"$tmp/out.jsonl"
		kill "$serve"
		wait "$serve" || true
		serve=
		python3 -c 'import json,sys
r = json.loads(open(sys.argv[1]).readline())
assert r["status"] == "ok", r
print(r["ttft"], r["tpot_mean"])' "$tmp/out.jsonl"
	done >"$tmp/live"
	printf '%-22s %12.3f %16.2f\n' "$label" \
	    "$(awk '{print $1}' "$tmp/live" | median)" \
	    "$(awk '{print $2 * 1e3}' "$tmp/live" | median)"
}
run "live, 1 worker" single
run "spp2 (2 stages)" spp2
run "kvp2 (2 x 1024 pos.)" kvp2 MEDHA_KVP_MAX_TOKENS=1024

#!/bin/sh
# bench-live.sh: what the live replica (examples/serve.sh single:
# medha-sched -l and one cpu medha-worker -s with THREADS threads) gives
# on SmolLM2-135M-Instruct Q4_1. Two questions, answered in one run:
#
#  - Does continuous batching pay? N requests (N = 1, 4, 8, 16; short
#    distinct prompts of a few words, greedy, ignore_eos, max_tokens
#    64, so each decodes exactly 64 tokens) all arrive at once through
#    medha-trace replay. Aggregate decode rate = the sum over requests of
#    (output_tokens - 1), the tokens sampled after each one's first,
#    divided by (latest finish - earliest first token). Goal: 8 at once
#    >= 4x one alone. Two replicas run side by side: one with the
#    scheduler's defaults (policy medha, adaptive chunks, 50 ms target
#    batch time, sized by the cpu roofline it measures at start), one
#    with a fixed budget of 512 tokens per batch (--chunk 512), with
#    which every prefill joins the running decodes at once. The ceiling,
#    measured in the same rounds: the cpu backend alone running batches
#    of N decode tokens (contrib/decode-batch.c, 64 forward calls per N).
#    The peer, where a natively built llama.cpp is in the cache's venv
#    (sh contrib/bench-cpu.sh ctx builds it): the same batches on
#    llama.cpp (contrib/decode-batch-llama.py, its default f16 KV cache).
#  - What does the live path cost one request? Its decode rate on the
#    default replica, (64 - 1) / (finish - first_token), against
#    medha-worker -p on the same prompt (-n 64 --ignore-eos -v: its
#    "generated" time covers the same 63 decode steps). Goal: under 5%.
#    replay submits without a stream (its records carry the output); the
#    same request from a client that streams (replay --stream: a token
#    event to the client every step) shows what streaming costs. The
#    workers run decode steps ahead (each while the step before makes
#    its round trip to the scheduler; medha-worker's default); a third
#    replica, its worker with --no-lookahead, shows what that gives
#    here.
#
# Every round runs medha-worker -p, then N = 1, 4, 8, 16 on each replica
# in turn (a replica sits idle, blocked on its sockets, while the other
# works), then decode-batch and the peer; REPS (3) rounds, so the
# machine's noise falls on every column alike. Medians over rounds are printed, and for
# the single request the best round too (noise on a shared machine only
# ever slows a run down), and the overhead of each round against its own
# -p run, whose median leaves out the machine's drift from round to
# round. decode-batch is make's BUILD/contrib/decode-batch (BUILD:
# build).
#
# usage: sh contrib/bench-live.sh [BINDIR]    (REPS=3 THREADS=2 to change)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-${MEDHA_BIN:-$top/bin}}
cache=${MEDHA_CACHE:-$top/cache}
model=${MEDHA_MODEL:-$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
reps=${REPS:-3}
threads=${THREADS:-2}
[ -s "$model" ] ||
	{ echo "bench-live: $model missing (run contrib/fetch-refs.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
pids=
build=${BUILD:-build}
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# start replica $1 (a name) with scheduler flags $2 (and worker flags
# $3); wait for "ready"
start() {
	: >"$tmp/$1.err"
	MEDHA_BIN=$bin MEDHA_ADDR=ipc://$tmp/$1.sock MEDHA_MODEL=$model \
	    MEDHA_LOG=$tmp/$1.logs MEDHA_THREADS=$threads \
	    MEDHA_SCHED_OPTS=$2 MEDHA_WORKER_OPTS=${3:-} \
	    bash "$top/examples/serve.sh" single \
	    2>"$tmp/$1.err" &
	pids="$pids $!"
	i=0
	until grep -qx ready "$tmp/$1.err"; do
		i=$((i + 1))
		if [ $i -gt 600 ] || ! kill -0 $! 2>/dev/null; then
			echo "bench-live: replica $1 did not become ready" >&2
			cat "$tmp/$1.err" "$tmp/$1.logs"/*.log >&2
			exit 1
		fi
		sleep 0.1
	done
}
(cd "$top" && make -s BUILD="$build" "$build/contrib/decode-batch" &&
    cp "$build/contrib/decode-batch" "$tmp/decode-batch")
py=$cache/venv/bin/python
peer=0
"$py" -c 'import llama_cpp' 2>/dev/null && peer=1
start adaptive "-v"
start fixed "-v --chunk 512"
start plain "-v" --no-lookahead

# sixteen short distinct prompts; trace N holds the first N
python3 - "$tmp" <<'PY'
import json, sys
prompts = [
    "The capital of France is", "Once upon a time",
    "Write a haiku about the sea.", "def fibonacci(n):",
    "List three prime numbers:", "The quick brown fox",
    "In 1969, the first humans", "Water boils at", "My favourite colour is",
    "The best way to learn", "Dear diary,", "How do airplanes fly?",
    "Tell me a joke about cats.", "Roses are red,", "The history of Rome",
    "Explain photosynthesis:",
]
for n in (1, 4, 8, 16):
    with open("%s/trace%d.jsonl" % (sys.argv[1], n), "w") as f:
        for i, p in enumerate(prompts[:n]):
            f.write(json.dumps({"id": "b%d" % i, "arrival": 0, "prompt": p,
                                "max_tokens": 64, "temperature": 0,
                                "ignore_eos": True}) + "\n")
PY
prompt0="The capital of France is"

# replay trace $2 on replica $1 (replay flags $3; row name $4, else $1):
# "live NAME N RATE WALL"
live() {
	"$bin/medha-trace" replay -a "ipc://$tmp/$1.sock" ${3:-} \
	    "$tmp/trace$2.jsonl" >"$tmp/out"
	python3 - "${4:-$1}" "$2" "$tmp/out" <<'PY'
import json, sys
name, n = sys.argv[1], int(sys.argv[2])
out = [json.loads(l) for l in open(sys.argv[3])]
assert len(out) == n and all(r["status"] == "ok" and
                             r["output_tokens"] == 64 for r in out), out
toks = sum(r["output_tokens"] - 1 for r in out)
span = max(r["finish"] for r in out) - min(r["first_token"] for r in out)
wall = max(r["finish"] for r in out) - min(r["arrival"] for r in out)
print("live", name, n, toks / span, wall)
PY
}

echo "bench-live: $reps rounds of medha-worker -p, then N = 1 4 8 16 on" \
    "each replica" >&2
r=0
while [ $r -lt "$reps" ]; do
	"$bin/medha-worker" -m "$model" -p "$prompt0" -n 64 --ignore-eos \
	    -t "$threads" -v 2>&1 >/dev/null |
	    sed -n 's/.*generated \([0-9]*\) in \([0-9.]*\) s.*/oneshot \1 \2/p' \
	    >>"$tmp/rows"
	for n in 1 4 8 16; do
		live adaptive $n >>"$tmp/rows"
		live fixed $n >>"$tmp/rows"
	done
	live adaptive 1 --stream stream >>"$tmp/rows"
	live plain 1 >>"$tmp/rows"
	"$tmp/decode-batch" -t "$threads" "$model" 1 4 8 16 |
	    sed 's/^/backend /' >>"$tmp/rows"
	[ $peer = 0 ] ||
		"$py" "$top/contrib/decode-batch-llama.py" -t "$threads" \
		    "$model" 1 4 8 16 | sed 's/^/peer /' >>"$tmp/rows"
	r=$((r + 1))
done
# the batches each replica ran (its log says so when it stops)
for p in $pids; do kill "$p" && wait "$p" 2>/dev/null || true; done
pids=
for c in adaptive fixed; do
	echo "batches $c $(sed -n 's/.*stopped: \([0-9]*\) requests served, \([0-9]*\) batches.*/\1 \2/p' \
	    "$tmp/$c.logs/sched.log")" >>"$tmp/rows"
	echo "device $c $(sed -n 's/.*info: cpu device: //p' \
	    "$tmp/$c.logs/sched.log")" >>"$tmp/rows"
done

python3 - "$tmp/rows" "$reps" "$threads" <<'PY'
import statistics as st, sys
one, live, nb, dev = [], {}, {}, {}
for l in open(sys.argv[1]):
    f = l.split()
    if f[0] == "device":
        dev[f[1]] = " ".join(f[2:])
        continue
    if f[0] == "oneshot":
        one.append((int(f[1]) - 1) / float(f[2]))
    elif f[0] == "live":
        live.setdefault((f[1], int(f[2])), []).append(float(f[3]))
    elif f[0] in ("backend", "peer"):
        live.setdefault((f[0], int(f[1])), []).append(float(f[2]))
    elif len(f) == 4:
        nb[f[1]] = (int(f[2]), int(f[3]))
med = st.median
cfgs = ("backend", "adaptive", "fixed")
cols = cfgs + (("peer",) if all(("peer", n) in live
                               for n in (1, 4, 8, 16)) else ())
names = ("backend", "adaptive", "fixed 512", "llama.cpp")[:len(cols)]
print("continuous batching: N requests at once, 64 output tokens each; "
      "aggregate decode tok/s")
print(("%4s |" + " %9s %7s |" * len(cols))[:-2] %
      (("N",) + sum(((c, "vs N=1") for c in names), ())))
for n in (1, 4, 8, 16):
    row = "%4d |" % n
    for c in cols:
        rate = med(live[(c, n)])
        row += " %9.1f %6.2fx |" % (rate, rate / med(live[(c, 1)]))
    print(row[:-2])
for c in cfgs:
    if c in nb:
        print("%s: %d batches for %d requests (%.1f output tokens per "
              "batch); cpu device measured at start: %s" % (
                  c, nb[c][1], nb[c][0], nb[c][0] * 64 / nb[c][1],
                  dev.get(c, "?")))
for c in cfgs[1:]:
    r8 = med(live[(c, 8)]) / med(live[(c, 1)])
    print("goal: N=8 >= 4x N=1 (%s): %.2fx, %s" % (
        c, r8, "met" if r8 >= 4 else "missed"))
print("backend: the cpu backend alone, N decode tokens per forward call "
      "(the ceiling);\nadaptive: the replica's defaults; fixed 512: "
      "--chunk 512")
if "peer" in cols:
    print("llama.cpp: the same batches as backend on llama.cpp (native "
          "build, f16 KV), the peer")
else:
    print("llama.cpp: not measured (no native llama-cpp-python in the "
          "cache's venv, which sh contrib/bench-cpu.sh ctx builds, or it "
          "failed)")
print()
print("one request, decode tok/s over its 63 decode steps, %s threads"
      % sys.argv[3])
lv = live[("adaptive", 1)]
print("%-20s %8s %8s   %s" % ("", "median", "best", "each round"))
for name, xs in (("medha-worker -p", one), ("live replica", lv),
                 ("  streaming client", live[("stream", 1)]),
                 ("  --no-lookahead", live[("plain", 1)])):
    print("%-20s %8.1f %8.1f   %s" % (name, med(xs), max(xs),
                                      " ".join("%.1f" % x for x in xs)))
ovm = (1 - med(lv) / med(one)) * 100
ovb = (1 - max(lv) / max(one)) * 100
print("goal: live overhead < 5%%: %.1f%% (medians), %.1f%% (best), %s" % (
    ovm, ovb, "met" if max(ovm, ovb) < 5 else "missed"))
print("with a streaming client: %.1f%% (medians)" % (
    (1 - med(live[("stream", 1)]) / med(one)) * 100))
# each round's replicas run right after its -p: their ratio within a
# round leaves out what the machine's speed does between rounds
for name, xs in (("live replica", lv), ("streaming client",
                                         live[("stream", 1)])):
    pr = [(1 - x / o) * 100 for x, o in zip(xs, one)]
    print("paired, %s: median %.1f%% of the rounds' own -p (%s)" % (
        name, med(pr), " ".join("%.1f" % p for p in pr)))
print("medians of %s interleaved rounds" % sys.argv[2])
PY

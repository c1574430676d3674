#!/bin/sh
# bench-router-cache.sh: cache-aware placement against least-load
# placement (medha-router --cache-balance; issue 27, acceptance 4). Four
# live replicas, each medha-sched -l with one sim worker (Llama-3 8B on
# an A100, batch times divided by SPEED), behind medha-router, serve one
# trace of multi-turn conversations that open with one of 20 system
# prompts (medha-trace gen --system-prompts 20 --turns T), its shared
# segments turned into token ids (each segment's ids a function of its
# name, each request's own ids random), so that the replicas' prefix
# caches and the router see the same tokens. The trace runs twice, on
# fresh replicas: with --cache-balance BALANCE and with --cache-balance
# 0 (least-load placement alone). For each it prints a line
#
#	mode balance requests ok hit_rate req_hit_rate p50_ttft p99_ttft imbalance
#
# hit_rate: prompt tokens whose KV came from a replica's prefix cache
# over prompt tokens (records' cached_tokens; as vLLM's
# prefix_cache_hits / prefix_cache_queries); req_hit_rate: records with
# a cached token over records (every replica soon holds the 20 system
# prompts, so this one is high either way); TTFTs in seconds of the trace's
# time (the live times multiplied by SPEED); imbalance: the most busy
# replica's busy time over the mean (each sim worker's "s busy" at stop).
#
# usage: contrib/bench-router-cache.sh [BINDIR]
#   N conversations (100) starting at QPS (2) a second, TURNS (4) each, THINK (10) s
#   between turns, MAXTOK (64) output tokens at most, SPEED (10),
#   BALANCE (1 s), SEED (1), REPLICAS (4); OUT: keep the records there
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/bin}
n=${N:-100}
qps=${QPS:-2}
turns=${TURNS:-4}
think=${THINK:-10}
maxtok=${MAXTOK:-64}
speed=${SPEED:-10}
balance=${BALANCE:-1}
seed=${SEED:-1}
nrep=${REPLICAS:-4}
tmp=$(mktemp -d)
pids=
trap 'set +e; [ -z "$pids" ] || kill $pids 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

"$bin/medha-trace" gen -n "$n" -q "$qps" -l 0 -s "$seed" \
    --system-prompts 20 --turns "$turns" --think "$think" \
    --max-tokens "$maxtok" >"$tmp/gen.jsonl"
python3 - "$tmp/gen.jsonl" "$tmp/trace.jsonl" "$seed" <<'PY'
import hashlib, json, random, sys
V = 128256  # Llama-3's vocabulary
def seg_ids(name, n):
    rng = random.Random(hashlib.sha256(name.encode()).digest())
    return [rng.randrange(V) for _ in range(n)]
rng = random.Random(int(sys.argv[3]))
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        ids = []
        for name, k in r.pop("prefix", []):
            ids += seg_ids(name, k)
        ids += [rng.randrange(V) for _ in range(r["prompt_tokens"] - len(ids))]
        r["prompt_ids"] = ids[:r["prompt_tokens"]]
        out.write(json.dumps(r) + "\n")
PY

# run MODE BALANCE: the trace through fresh replicas and a router
run() {
	mkdir -p "$tmp/$1"
	rpids= wpids= reps=
	i=0
	while [ $i -lt "$nrep" ]; do
		a=ipc://$tmp/$1-r$i.sock
		"$bin/medha-sched" -l "$a" 2>"$tmp/$1/sched$i.log" &
		rpids="$rpids $!"
		"$bin/medha-worker" -s "$a" --backend sim --gpu a100 \
		    -m llama3-8b --speed "$speed" 2>"$tmp/$1/worker$i.log" &
		wpids="$wpids $!"
		reps="$reps -r $a"
		i=$((i + 1))
	done
	# shellcheck disable=SC2086 # $reps: -r ADDR pairs
	"$bin/medha-router" -l "ipc://$tmp/$1.sock" $reps \
	    --cache-balance "$2" 2>"$tmp/$1/router.log" &
	router=$!
	pids="$pids $rpids $wpids $router"
	i=0
	until [ "$(cat "$tmp/$1/router.log" 2>/dev/null |
	    grep -c ': ready (')" -ge "$nrep" ]; do
		i=$((i + 1))
		[ $i -lt 300 ] || { echo "router not ready" >&2; exit 1; }
		sleep 0.1
	done
	"$bin/medha-trace" replay -a "ipc://$tmp/$1.sock" --speed "$speed" \
	    "$tmp/trace.jsonl" >"$tmp/$1.jsonl" 2>"$tmp/$1/replay.log" ||
	    { tail -n 5 "$tmp/$1/replay.log" >&2; exit 1; }
	kill -TERM $router
	wait $router || :
	# shellcheck disable=SC2086
	kill -TERM $wpids $rpids
	# shellcheck disable=SC2086
	wait $wpids $rpids || :
	pids=
	[ -z "${OUT:-}" ] || { mkdir -p "$OUT"; cp "$tmp/$1.jsonl" "$OUT/"; }
	python3 - "$tmp/$1.jsonl" "$1" "$2" "$speed" "$tmp/$1"/worker*.log <<'PY'
import json, re, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
mode, bal, speed = sys.argv[2], sys.argv[3], float(sys.argv[4])
busy = []
for f in sys.argv[5:]:
    m = re.search(r"stopped after .*, ([0-9.]+) s busy", open(f).read())
    busy.append(float(m[1]) if m else 0.0)
ok = [r for r in recs if r["status"] == "ok"]
ttft = sorted(r["ttft"] * speed for r in ok)
hit = sum(1 for r in recs if r.get("cached_tokens", 0) > 0) / len(recs)
share = sum(r.get("cached_tokens", 0) for r in recs) / \
    max(1, sum(r["prompt_tokens"] for r in recs))
q = lambda p: ttft[min(len(ttft) - 1, int(p * len(ttft)))]
mean = statistics.mean(busy)
print("%s %s %d %d %.3f %.3f %.3f %.3f %.3f" % (mode, bal, len(recs),
      len(ok), share, hit, statistics.median(ttft), q(0.99),
      max(busy) / mean if mean > 0 else 0))
PY
}

echo "mode balance requests ok hit_rate req_hit_rate p50_ttft p99_ttft imbalance"
run cache "$balance"
run least 0

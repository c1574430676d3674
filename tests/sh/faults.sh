#!/bin/sh
# faults.sh: processes of a topology killed with SIGKILL in the middle of
# a replay (examples/serve.sh restarts them), on SmolLM2.
#  1. tp2, spp2, kvp2: a worker is killed while twelve greedy requests
#     run; right after, four more arrive (the router holds them until
#     the replica is whole again). Every request ends with exactly one
#     record (ok, or failed for those that held KV on the lost worker);
#     the four that came during the outage are all ok; the scheduler and
#     the router stay up; once the worker is back, the twelve give
#     exactly the tokens they gave before the fault.
#  2. two-replicas: one replica's scheduler is killed in the middle of a
#     replay, and requests keep arriving while it is down: all ok but
#     those it had started (failed; those it held but had not started
#     go to the other replica); after it restarts and rejoins, the
#     tokens are those of before.
# MEDHA_FAULT_TOPOS (default "tp2 spp2 kvp2 two-replicas") picks. Needs
# contrib/fetch-refs.sh (the real model); skips without it.
. "$(dirname "$0")/lib.sh"
need_model
router=ipc://$tmp/router.sock

# start TOPOLOGY: serve.sh in the background, until "ready"
start() {
	logs=$tmp/logs-$1
	serve_start "$1" 90 MEDHA_ROUTER="$router" MEDHA_MODEL="$model" \
	    MEDHA_LOG="$logs"
}

# stop: serve.sh stops its topology within 15 s of SIGTERM
stop() {
	kill -TERM "$serve"
	i=0
	while kill -0 "$serve" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 150 ]; then
			echo "serve.sh did not stop within 15 s of SIGTERM"
			exit 1
		fi
		sleep 0.1
	done
	wait "$serve" || true
	serve=
}

# trace FILE N SEED: N greedy requests from examples/prompts.txt
trace() {
	"$bin/medha-trace" gen -n "$2" -q 8 -s "$3" --max-tokens 16 \
	    --prompts "$top/examples/prompts.txt" | python3 -c '
import json, sys
for i, l in enumerate(sys.stdin):
    d = json.loads(l)
    d["temperature"] = 0
    d["id"] = "%s-%d" % (sys.argv[1], i)
    print(json.dumps(d))' "$(basename "$1" .jsonl)" >"$1"
}

replay() {
	"$bin/medha-trace" replay -a "$router" --token-ids "$1" >"$2"
}

# check KIND TRACE RECORDS: one record a request; KIND all: every one
# ok; KIND fault: ok or failed
check() {
	python3 - "$@" <<'EOF'
import collections, json, sys
kind, trace, recs = sys.argv[1:4]
want = [json.loads(l)["id"] for l in open(trace)]
got = [json.loads(l) for l in open(recs)]
ids = collections.Counter(r["id"] for r in got)
bad = [i for i in want if ids[i] != 1]
assert not bad and len(got) == len(want), \
    "not one record a request: %s" % bad
st = collections.Counter(r["status"] for r in got)
ok = {"ok"} if kind == "all" else {"ok", "failed"}
assert set(st) <= ok, "%s: %s" % (recs, [(r["id"], r["status"],
    r.get("reason")) for r in got if r["status"] not in ok])
print(" ".join("%s %d" % kv for kv in sorted(st.items())), end="")
EOF
}

# same BEFORE AFTER: the same tokens for every request
same() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
a = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[1])}
b = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[2])}
diff = [i for i in a if a[i]["token_ids"] != b[i]["token_ids"]]
assert not diff, "tokens differ after the fault: %s" % diff
EOF
}

trace "$tmp/main.jsonl" 12 1
trace "$tmp/late.jsonl" 4 2

for topo in ${MEDHA_FAULT_TOPOS:-tp2 spp2 kvp2 two-replicas}; do
	start "$topo"
	replay "$tmp/main.jsonl" "$tmp/before.jsonl"
	check all "$tmp/main.jsonl" "$tmp/before.jsonl" >/dev/null
	if [ "$topo" = two-replicas ]; then
		victim=sched1
		others="sched0 router"
	else
		victim=sched-worker1
		others="sched router"
	fi
	for p in $others; do
		eval "pid_$p=$(cat "$logs/$p.pid")"
	done
	replay "$tmp/main.jsonl" "$tmp/during.jsonl" &
	rp=$!
	sleep 0.8
	kill -KILL "$(cat "$logs/$victim.pid")"
	t0=$(date +%s)
	replay "$tmp/late.jsonl" "$tmp/late-out.jsonl"
	wait $rp
	t1=$(date +%s)
	during=$(check fault "$tmp/main.jsonl" "$tmp/during.jsonl")
	late=$(check all "$tmp/late.jsonl" "$tmp/late-out.jsonl")
	# the others were never restarted
	for p in $others; do
		eval "want=\$pid_$p"
		if ! kill -0 "$want" 2>/dev/null ||
		    [ "$(cat "$logs/$p.pid")" != "$want" ]; then
			echo "$topo: $p went down with $victim"
			cat "$tmp/serve.err"
			exit 1
		fi
	done
	wait_for "$tmp/serve.err" "$victim restarted" 60
	if [ "$topo" = two-replicas ]; then
		# the new sched1 has its worker back (a second "ready:" in
		# its log), and the router has asked it since
		i=0
		until [ "$(grep -c 'ready: ' "$logs/sched1.log")" -ge 2 ]; do
			i=$((i + 1))
			[ $i -gt 600 ] && { echo "$topo: sched1 did not rejoin"; exit 1; }
			sleep 0.1
		done
		sleep 0.5
	fi
	replay "$tmp/main.jsonl" "$tmp/after.jsonl"
	check all "$tmp/main.jsonl" "$tmp/after.jsonl" >/dev/null
	same "$tmp/before.jsonl" "$tmp/after.jsonl"
	moved=$(sed -n 's/.*: \([0-9]*\) requests not started there sent elsewhere/\1/p' \
	    "$logs/router.log" | awk '{n += $1} END {print n + 0}')
	echo "$topo: $victim killed: $during ($moved not started there" \
	    "placed again); 4 arriving meanwhile: $late (records within" \
	    "$((t1 - t0)) s); rejoined, 12 of 12 tokens as before"
	stop
	# under make asan: no sanitizer report from any process
	no_sanitizer_report "$logs"/*.log
done
echo "faults: ok"

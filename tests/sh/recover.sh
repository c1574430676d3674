#!/bin/sh
# recover.sh: a lost worker's requests recomputed (medha-sched
# --recover-timeout), on SmolLM2, tp2 x spp2 x kvp2 over ipc:
#  1. worker 6 stopped (SIGSTOP) for 5 s while sixteen greedy requests
#     run: the replica declares it lost ("silent for too long"), its
#     requests wait and are recomputed once it is back: every request
#     ends ok with the tokens of the run without the fault, no
#     process is restarted, and no token waits 30 s (the survivors drop
#     the void batch at their next heartbeat).
#  2. the same with --recover-timeout 1: the requests that held KV fail
#     with a record naming the lost worker, the others end ok.
#  3. worker 6 killed (SIGKILL) instead, and restarted by serve.sh:
#     every request ends ok with the tokens of the run without the
#     fault, and no other process ended.
# Needs contrib/fetch-refs.sh (the real model); skips without it.
. "$(dirname "$0")/lib.sh"
need_model
router=ipc://$tmp/router.sock

"$bin/medha-trace" gen -n 16 -q 8 -s 1 --max-tokens 16 \
    --prompts "$top/examples/prompts.txt" | python3 -c '
import json, sys
for i, l in enumerate(sys.stdin):
    d = json.loads(l)
    d["temperature"] = 0
    d["id"] = "r-%d" % i
    print(json.dumps(d))' >"$tmp/t.jsonl"

# cut OPTS OUT [kill]: a replay with worker 6 stopped for 5 s in the
# middle (with kill: killed, and restarted by serve.sh)
cut() {
	logs=$tmp/logs$2
	serve_start tp2-spp2-kvp2 120 MEDHA_SCHED_OPTS="$1" \
	    MEDHA_ROUTER="$router" MEDHA_MODEL="$model" MEDHA_LOG="$logs" \
	    MEDHA_RESTART=$([ "${3:-}" = kill ] && echo 1 || echo 0)
	"$bin/medha-trace" replay -a "$router" --token-ids "$tmp/t.jsonl" \
	    >"$tmp/before$2.jsonl"
	"$bin/medha-trace" replay -a "$router" --token-ids "$tmp/t.jsonl" \
	    >"$tmp/cut$2.jsonl" &
	rp=$!
	sleep 0.8
	w=$(cat "$logs/sched-worker6.pid")
	if [ "${3:-}" = kill ]; then
		kill -KILL "$w"
	else
		kill -STOP "$w"
		sleep 5
		kill -CONT "$w"
	fi
	wait $rp
	wait_for "$logs/sched.log" "lost" 1
	serve_stop
}

# check KIND: every request once; all ok with the tokens of before, or
# (KIND fail) some failed naming worker 6
check() {
	python3 - "$1" "$tmp/t.jsonl" "$tmp/before$2.jsonl" \
	    "$tmp/cut$2.jsonl" <<'PY'
import collections, json, sys
kind, trace, before, cut = sys.argv[1:5]
want = [json.loads(l)["id"] for l in open(trace)]
a = {json.loads(l)["id"]: json.loads(l) for l in open(before)}
got = [json.loads(l) for l in open(cut)]
ids = collections.Counter(r["id"] for r in got)
assert sorted(ids) == sorted(want) and set(ids.values()) == {1}, ids
assert all(a[i]["status"] == "ok" for i in want), "before: not all ok"
st = collections.Counter(r["status"] for r in got)
for r in got:
    if r["status"] == "ok":
        assert r["token_ids"] == a[r["id"]]["token_ids"], \
            "%s: tokens differ from the run without the fault" % r["id"]
if kind == "ok":
    assert st == {"ok": len(want)}, [(r["id"], r["status"],
        r.get("reason")) for r in got if r["status"] != "ok"]
    # the longest pause between two tokens: the 5 s stop and the
    # recompute, not a wait for the lost peer (up to 120 s before the
    # heartbeat said the batch was void)
    pause = max(r["tpot_max"] for r in got)
    assert pause < 30, "a pause of %.1f s" % pause
    print("longest pause %.1f s, longest TTFT %.1f s, " % (
        pause, max(r["ttft"] for r in got)), end="")
else:
    bad = [r for r in got if r["status"] != "ok"]
    assert bad and all(r["status"] == "failed" and
        "worker 6 lost" in r.get("reason", "") for r in bad), \
        [(r["id"], r["status"], r.get("reason")) for r in bad]
print(" ".join("%s %d" % kv for kv in sorted(st.items())), end="")
PY
}

cut "" 1
grep -q "requests to be recomputed once it is back" "$tmp/logs1/sched.log" ||
	{ echo "no request was to be recomputed"; cat "$tmp/logs1/sched.log"; exit 1; }
! grep -q "restarted\|ended (" "$tmp/serve.err" ||
	{ echo "a process was restarted"; cat "$tmp/serve.err"; exit 1; }
r=$(check ok 1) || exit 1
echo "worker 6 stopped 5 s: $r, tokens as before"
cut "--recover-timeout 1" 2
r=$(check fail 2) || exit 1
echo "with --recover-timeout 1: $r"
cut "" 3 kill
grep -q "worker6 restarted" "$tmp/serve.err" ||
	{ echo "worker 6 was not restarted"; cat "$tmp/serve.err"; exit 1; }
[ "$(grep -c "ended" "$tmp/serve.err")" = 1 ] ||
	{ echo "another process ended"; cat "$tmp/serve.err"; exit 1; }
grep -q "requests to be recomputed once it is back" "$tmp/logs3/sched.log" ||
	{ echo "no request was to be recomputed"; cat "$tmp/logs3/sched.log"; exit 1; }
r=$(check ok 3) || exit 1
echo "worker 6 killed, restarted by serve.sh: $r, tokens as before"
echo "recover: ok"

#!/bin/sh
# router.sh: medha-router in front of replicas.
#  1. examples/serve.sh two-replicas (two cpu replicas of SmolLM2 behind a
#     router that tokenizes text, -m): sixteen greedy text requests at
#     once (one of 4.6 KB, which the router tokenizes on its tokenizer's
#     thread), each exactly the tokens medha-worker -p gives alone; both
#     replicas serve some; one record each.
#  2. Three sim replicas behind a router, two replays running, one whose
#     client streams (--stream) and one that does not: one scheduler is
#     stopped (SIGSTOP: its heartbeats stop, its connection stays) and
#     another killed (SIGKILL: its connection closes). Every request ends
#     with exactly one record; of the streamed ones, those the lost
#     replicas held are "failed" with the replica named; the others, whose
#     client had seen nothing of them, went to the replica left: all ok.
#     The router keeps answering; once both are back (SIGCONT, and a new
#     scheduler at the same address), requests are served by all three
#     again. SIGTERM stops the router cleanly.
#  3. A router whose one replica is not there yet: requests wait at the
#     router and are served once it starts (all ok); with --hold-timeout
#     1 and no replica they end "rejected" after about a second; with
#     --hold-timeout 0 they are refused at once.
#  4. Two sim replicas, the first one's worker stopped (SIGSTOP), so
#     what that replica accepts cannot start; its scheduler is then
#     killed: the requests it held go to the other replica, all ok.
# Whatever fails, lib.sh's cleanup ends every process started here (the
# replays and stopped processes included).
. "$(dirname "$0")/lib.sh"
pids=

# ---- 1. two cpu replicas: the single process's tokens ----
if [ -s "$model" ]; then
	python3 "$top/tests/ref/solo.py" trace "$tmp/trace.jsonl" 16 2 3 4 5 6 7 8 40
	serve_start two-replicas 60 MEDHA_ROUTER="ipc://$tmp/router.sock" \
	    MEDHA_LOG="$tmp/logs" MEDHA_MODEL="$model" \
	    MEDHA_ROUTER_OPTS="-m $model"
	"$bin/medha-trace" replay -a "ipc://$tmp/router.sock" --token-ids \
	    "$tmp/trace.jsonl" >"$tmp/out.jsonl"
	serve_stop
	python3 "$top/tests/ref/solo.py" check "$tmp/trace.jsonl" \
	    "$tmp/out.jsonl" "$bin/medha-worker" "$model" two-replicas
	python3 - "$tmp/logs" 16 <<'PY'
import re, sys
served = []
for k in (0, 1):
    log = open("%s/sched%d.log" % (sys.argv[1], k)).read()
    served.append(int(re.search(r"stopped: (\d+) requests served", log)[1]))
print("two-replicas: served by the replicas: %s" % served)
assert sum(served) == int(sys.argv[2]) and min(served) > 0, served
PY
else
	echo "skip: $model missing (run contrib/fetch-refs.sh)"
fi

# ---- 2. replicas lost and back ----
mkdir -p "$tmp/logs"
sched() { # sched N: replica N's scheduler, in the background
	"$bin/medha-sched" -l "ipc://$tmp/r$1.sock" 2>>"$tmp/logs/s$1.log" &
}
for n in 0 1 2; do
	sched $n
	eval "s$n=\$!"
	"$bin/medha-worker" -s "ipc://$tmp/r$n.sock" --backend sim --gpu a100 \
	    -m llama3-8b --speed 10 2>>"$tmp/logs/w$n.log" &
	pids="$pids $!"
done
"$bin/medha-router" -l "ipc://$tmp/router.sock" -r "ipc://$tmp/r0.sock" \
    -r "ipc://$tmp/r1.sock" -r "ipc://$tmp/r2.sock" 2>"$tmp/logs/router.log" &
router=$!
pids="$pids $s0 $s1 $s2 $router"
wait_for "$tmp/logs/router.log" 'ready: '
"$bin/medha-trace" gen -n 240 -q 20 -l 0 -s 5 >"$tmp/t.jsonl"
"$bin/medha-trace" gen -n 120 -q 10 -l 0 -s 6 >"$tmp/tq.jsonl"
"$bin/medha-trace" replay -a "ipc://$tmp/router.sock" --speed 2 --stream \
    "$tmp/t.jsonl" >"$tmp/lost.jsonl" &
replay=$!
"$bin/medha-trace" replay -a "ipc://$tmp/router.sock" --speed 2 \
    "$tmp/tq.jsonl" >"$tmp/lostq.jsonl" &
replayq=$!
sleep 2
kill -STOP $s1
kill -KILL $s2
wait_for "$tmp/logs/router.log" "r1.sock: silent"
# the router answers while a replica is down
"$bin/medha-trace" gen -n 5 -q 50 -s 9 |
    "$bin/medha-trace" replay -a "ipc://$tmp/router.sock" >"$tmp/during.jsonl"
wait $replay
wait $replayq
kill -CONT $s1
n2=$(grep -c "r2.sock: ready" "$tmp/logs/router.log")
t2=$(date +%s.%N)
sched 2
s2=$!
pids="$pids $s2"
# the new scheduler ready at the router: a "ready" line after those of
# the first one (waiting for any such line passed at once, on the first
# one's, and the 60 requests below, a second's worth, could all be
# placed before the new one's worker was back: once, none went to it)
i=0
until [ "$(grep -c "r2.sock: ready" "$tmp/logs/router.log")" -gt "$n2" ]; do
	i=$((i + 1))
	[ $i -le 600 ] || { echo "r2 not ready again in 60 s"; cat "$tmp/logs/router.log"; exit 1; }
	sleep 0.1
done
echo "r2 restarted: ready at the router $(awk -v a="$t2" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s later"
sleep 0.5
"$bin/medha-trace" gen -n 60 -q 60 -s 11 |
    "$bin/medha-trace" replay -a "ipc://$tmp/router.sock" >"$tmp/after.jsonl"
kill -TERM $router
wait $router
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open("%s/%s" % (d, name))]
trace = load("t.jsonl")
lost = load("lost.jsonl")
ids = [str(r["id"]) for r in lost]
assert len(ids) == len(set(ids)), "a request with two records"
assert set(ids) == set(str(t["id"]) for t in trace), "requests lost"
st = {}
for r in lost:
    st[r["status"]] = st.get(r["status"], 0) + 1
    if r["status"] == "failed":
        assert "replica ipc://" in r["reason"], r
assert st.get("failed", 0) > 0 and st.get("ok", 0) > 0, st
quiet = load("lostq.jsonl")
assert sorted(str(r["id"]) for r in quiet) == \
    sorted(str(t["id"]) for t in load("tq.jsonl")), "requests lost"
assert all(r["status"] == "ok" for r in quiet), \
    [r for r in quiet if r["status"] != "ok"][:3]
during = load("during.jsonl")
assert len(during) == 5 and all(r["status"] == "ok" for r in during), during
after = load("after.jsonl")
assert len(after) == 60 and all(r["status"] == "ok" for r in after), after
print("lost replicas: streamed %s; not streamed: %d ok; while down: 5 ok; "
      "after: 60 ok" % (st, len(quiet)))
PY
# after the losses every replica served requests again
kill -TERM $pids 2>/dev/null || true
wait 2>/dev/null || true
pids=
for n in 0 1; do
	grep -q "stopped: [1-9]" "$tmp/logs/s$n.log" ||
	    { cat "$tmp/logs/s$n.log"; exit 1; }
done
tail -n 1 "$tmp/logs/s2.log" | grep -q "stopped: [1-9]" ||
    { cat "$tmp/logs/s2.log"; exit 1; }
grep -q "stopped: " "$tmp/logs/router.log"

# ---- 3. held at the router until a replica is ready ----
hold() { # hold SECONDS NAME: a router in front of nothing yet
	"$bin/medha-router" -l "ipc://$tmp/h$2.sock" -r "ipc://$tmp/hr$2.sock" \
	    --hold-timeout "$1" 2>"$tmp/logs/h$2.log" &
	pids="$pids $!"
}
"$bin/medha-trace" gen -n 3 -q 100 -l 0 -s 3 >"$tmp/h.jsonl"
hold 30 a
"$bin/medha-trace" replay -a "ipc://$tmp/ha.sock" --wait 0 "$tmp/h.jsonl" \
    >"$tmp/held.jsonl" &
replay=$!
sleep 1.5
"$bin/medha-sched" -l "ipc://$tmp/hra.sock" 2>>"$tmp/logs/hs.log" &
pids="$pids $!"
"$bin/medha-worker" -s "ipc://$tmp/hra.sock" --backend sim --gpu a100 \
    -m llama3-8b --speed 10 2>>"$tmp/logs/hw.log" &
pids="$pids $!"
wait $replay
hold 1 b
t0=$(date +%s)
"$bin/medha-trace" replay -a "ipc://$tmp/hb.sock" --wait 0 "$tmp/h.jsonl" \
    >"$tmp/timeout.jsonl"
t1=$(date +%s)
hold 0 c
"$bin/medha-trace" replay -a "ipc://$tmp/hc.sock" --wait 0 "$tmp/h.jsonl" \
    >"$tmp/refused.jsonl"
python3 - "$tmp" $((t1 - t0)) <<'PY'
import json, sys
d = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open("%s/%s" % (d, name))]
held = load("held.jsonl")
assert len(held) == 3 and all(r["status"] == "ok" for r in held), held
assert all(r["ttft"] > 1 for r in held), [r["ttft"] for r in held]
out = load("timeout.jsonl")
assert len(out) == 3 and all(r["status"] == "rejected" and
    "no replica ready within 1 s" in r["reason"] for r in out), out
assert int(sys.argv[2]) <= 4, "held for %s s" % sys.argv[2]
ref = load("refused.jsonl")
assert len(ref) == 3 and all(r["status"] == "rejected" and
    "no replica is ready" in r["reason"] for r in ref), ref
print("held until a replica came: 3 ok (ttft %.1f-%.1f s); "
      "--hold-timeout 1: 3 rejected; 0: 3 refused" %
      (min(r["ttft"] for r in held), max(r["ttft"] for r in held)))
PY
# ---- 4. accepted but not started on a lost replica: placed again ----
for n in 0 1; do
	"$bin/medha-sched" -l "ipc://$tmp/m$n.sock" 2>>"$tmp/logs/ms$n.log" &
	eval "ms$n=\$!"
	"$bin/medha-worker" -s "ipc://$tmp/m$n.sock" --backend sim --gpu a100 \
	    -m llama3-8b --speed 10 2>>"$tmp/logs/mw$n.log" &
	eval "mw$n=\$!"
	pids="$pids $! $(eval echo \$ms$n)"
done
"$bin/medha-router" -l "ipc://$tmp/m.sock" -r "ipc://$tmp/m0.sock" \
    -r "ipc://$tmp/m1.sock" 2>"$tmp/logs/m.log" &
mr=$!
pids="$pids $mr"
wait_for "$tmp/logs/m.log" 'm0.sock: ready'
wait_for "$tmp/logs/m.log" 'm1.sock: ready'
kill -STOP $mw0
"$bin/medha-trace" gen -n 6 -q 100 -l 0 -s 4 >"$tmp/m.jsonl"
"$bin/medha-trace" replay -a "ipc://$tmp/m.sock" "$tmp/m.jsonl" \
    >"$tmp/moved.jsonl" &
replay=$!
sleep 1
kill -KILL $ms0
wait $replay
kill -CONT $mw0
python3 - "$tmp" <<'PY'
import json, re, sys
d = sys.argv[1]
out = [json.loads(l) for l in open(d + "/moved.jsonl")]
assert len(out) == 6 and all(r["status"] == "ok" for r in out), out
log = open(d + "/logs/m.log").read()
m = re.search(r"m0.sock: connection lost: (\d+) requests not started there "
              r"sent elsewhere", log)
assert m and int(m[1]) > 0, log
print("replica lost with %s requests accepted, not started: 6 of 6 ok "
      "on the other" % m[1])
PY
for p in $pids; do
	[ "$p" = "$ms0" ] || kill -TERM "$p" 2>/dev/null || true
done
wait 2>/dev/null || true
pids=
# under make asan: no sanitizer report from any process
no_sanitizer_report "$tmp"/logs/*.log
echo "router: ok"

#!/bin/sh
# hosts.sh: medha across hosts: contrib/netns-hosts.sh serve (a router,
# two replicas' schedulers, the eight workers of a tp2-spp2-kvp2 replica
# on four hosts, each host a network namespace, every link tcp off
# loopback with the shared secret) answers a trace of sixteen greedy
# requests on the real model (prompts of 3 to 443 tokens, so that KVP's
# second group and both stages are used) under each fault, one at a
# time, each healed before the next:
#
#   none          the run every other is compared with
#   delay 1 ms    between any two hosts (0.5 ms on each host's link,
#                 tests/tools/netfault), each way
#   delay 10 ms   +- 5 ms of jitter
#   loss 1%, 5%   of the frames between any two hosts
#   rate 100mbit  on host w0's link (the SPP link w0-w1 and the KVP link
#                 w0-w2; tc tbf)
#   delay 10+-5ms, loss 1%   both at once, on a trace of 64 requests
#                 (the sixteen four times over)
#   cut w3 5 s    worker host w3 (ranks 6 and 7) partitioned from every
#                 host for 5 s while the trace runs
#   cut w3 60 s   the same for 60 s: only with MEDHA_HOSTS_LONG=1
#   kill a6       worker rank 6 killed (SIGKILL) while the trace runs,
#                 restarted by netns-hosts.sh (as serve.sh does)
#   cut sb        replica b's host partitioned from the router's for 5 s, while the
#                 trace of 64 runs
#   cut w3 5 s with --recover-timeout 2   a second deployment whose
#                 schedulers give a lost worker's requests 2 s: only
#                 with MEDHA_HOSTS_LONG=1
#
# It asserts: the replay ends (no hang: 180 s at most), every request
# gets exactly one record, each "ok" one has exactly the tokens
# medha-worker -p gives alone, and each other one a reason naming the
# worker or replica lost; under delay, loss and the rate limit every
# request is ok; the delays are there (a tcp round trip between two
# hosts takes at least the delay); a worker cut off (5 s, 60 s) or
# killed loses no request: all ok, its requests recomputed (medha-sched
# --recover-timeout), and no process ended but the one killed; with
# --recover-timeout shorter than the cut, some fail, each naming worker
# 6 or 7 lost; after each partition is healed every replica is ready
# again within 60 s and the trace runs all ok; after the cut of sb the
# router takes replica b back and places requests on it again. It
# prints, for each fault, the time the replay took, the records by
# status, the median TTFT and TPOT of the ok ones, the longest TTFT and
# the longest wait between two tokens (the pause a fault makes), the
# reasons of the others, and the processes that ended (netns-hosts.sh
# restarts them): what medha-sched(1) and medha-worker(1) say each
# fault does to requests in flight. (The trace is the same each time,
# so after the first run its prompts' prefixes are in the schedulers'
# caches.) Skipped where namespaces cannot be made (not root, no
# iproute2).
. "$(dirname "$0")/lib.sh"
need_model
hosts="bash $top/contrib/netns-hosts.sh"
why=$($hosts check 2>&1) || skip "${why#netns-hosts.sh: }"
[ -x "$tools/netfault" ] || skip "no $tools/netfault (make test builds it)"
name=h$$
logs=$tmp/logs

# the hosts go at exit whatever happens: serve's own stop removes them,
# and this removes what a serve killed before it could is left
hosts_cleanup() {
	st=$?
	if [ -n "${serve:-}" ]; then
		kill -TERM "$serve" 2>/dev/null
		i=0
		while [ $i -lt 150 ] && kill -0 "$serve" 2>/dev/null; do
			sleep 0.1
			i=$((i + 1))
		done
	fi
	$hosts down "$name" 2>/dev/null
	(exit $st)
	lib_cleanup
}
trap hosts_cleanup EXIT

python3 "$top/tests/ref/solo.py" trace "$tmp/trace.jsonl" 16 2 4 6 8 10 11 14 20
trace=$tmp/trace.jsonl
# the same sixteen four times over, for the run of 64
python3 - "$trace" >"$tmp/trace64.jsonl" <<'PY'
import json, sys
t = [json.loads(l) for l in open(sys.argv[1])]
for k in range(4):
    for r in t:
        print(json.dumps(dict(r, id="%s-%d" % (r["id"], k))))
PY

# serve_up [OPTS]: the deployment, ready, its schedulers given OPTS and
# -v (a line for each request they end: which replica served what);
# serve_down stops it
serve_up() {
	: >"$tmp/serve.err"
	MEDHA_LOG=$logs MEDHA_BIN=$bin MEDHA_MODEL=$model \
	    MEDHA_SCHED_OPTS="-v ${1:-} ${MEDHA_SCHED_OPTS:-}" \
	    $hosts serve "$name" 2>>"$tmp/serve.err" &
	serve=$!
	wait_for "$tmp/serve.err" '^ready$' 180 "$serve"
}
serve_down() {
	kill -TERM "$serve"
	wait "$serve" || :
	serve=
}
serve_up
export MEDHA_SECRET_FILE="$logs/secret"
addr() { $hosts ip "$name" "$1"; }
router=tcp://$(addr router):7000
ra=tcp://$(addr sa):7001
rb=tcp://$(addr sb):7001

# replay OUT: the trace through the router from the router's host, its
# records in OUT and its seconds in $secs; fail after 180 s (a hang).
# A replay that crashes (today, at times: an nng panic in the client,
# "pthread_mutex_lock: Invalid argument" in nng_ctx_recv, after the
# router refused a message sent before the handshake) is said in a
# "skip:" line, which run.sh shows, and run once more; a second crash
# fails
replay() {
	for try in 1 2; do
		t0=$(date +%s.%N)
		st=0
		timeout 180 $hosts exec "$name" router "$bin/medha-trace" \
		    replay -a "$router" --token-ids "$trace" >"$1" \
		    2>"$tmp/replay.err" || st=$?
		secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
		[ $st = 0 ] && return 0
		if [ $st != 124 ] && [ $try = 1 ]; then
			echo "skip: medha-trace replay under $fault crashed (status $st: $(grep -m 1 . "$tmp/replay.err")); once more"
			continue
		fi
		echo "replay under $fault: status $st (124: a hang)"
		cat "$tmp/replay.err"
		lib_show "$tmp/serve.err"
		exit 1
	done
}

# check OUT [all-ok | fail-w3]: one record per request of $trace; each
# ok one with the tokens of the request alone, each other one with a
# reason that names the worker or replica lost; with all-ok, every one
# ok; with fail-w3, some failed, each naming worker 6 or 7 (host w3)
# lost. Prints the records by status, the median TTFT and TPOT of the
# ok ones, the longest TTFT and wait between two tokens (the pause),
# and the failed ones' reasons
check() {
	python3 - "$top/tests/ref" "$trace" "$1" "$bin/medha-worker" \
	    "$model" "$fault" "$secs" "${2:-}" <<'PY'
import collections, json, os, re, sys
sys.path.insert(0, sys.argv[1])
import solo
trace = [json.loads(l) for l in open(sys.argv[2])]
out = [json.loads(l) for l in open(sys.argv[3])]
fault, secs = sys.argv[6], float(sys.argv[7])
ids = collections.Counter(r["id"] for r in out)
assert sorted(ids) == sorted(t["id"] for t in trace), \
    "%s: records %s" % (fault, dict(ids))
assert max(ids.values()) == 1, "%s: a request with two records" % fault
# one cache of the tokens alone for every trace (the same prompts)
cache_path = os.path.join(os.path.dirname(sys.argv[2]), "alone.json")
cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
by = {r["id"]: r for r in out}
bad = []
for t in trace:
    r = by[t["id"]]
    if r["status"] == "ok":
        want = solo.alone(cache, sys.argv[4], sys.argv[5], t)
        if r["token_ids"] != want:
            bad.append("%s: %s, alone %s" % (t["id"], r["token_ids"], want))
json.dump(cache, open(cache_path, "w"))
st = collections.Counter(r["status"] for r in out)
def median(k):
    v = sorted(r[k] for r in out if r["status"] == "ok")
    return "%.3f s" % v[len(v) // 2] if v else "-"
def longest(k):
    v = [r[k] for r in out if r["status"] == "ok"]
    return "%.1f s" % max(v) if v else "-"
print("%-20s %5.1f s  %-18s ttft %s  tpot %s  longest ttft %s, "
      "between tokens %s" % (
    fault, secs, " ".join("%s %d" % kv for kv in sorted(st.items())),
    median("ttft"), median("tpot_mean"), longest("ttft"),
    longest("tpot_max")))
why = collections.Counter((r["status"], r.get("reason", "?")) for r in out
                          if r["status"] != "ok")
for (s, w), n in why.items():
    print("   %d %s: %s" % (n, s, w))
assert not bad, "%s: tokens differ from the request alone:\n%s" % (
    fault, "\n".join(bad))
for s, w in why:
    assert re.search(r"worker \d+ lost|replica tcp://", w), \
        "%s: a record that does not name what was lost: %s" % (fault, w)
assert sys.argv[8] != "all-ok" or set(st) == {"ok"}, \
    "%s: not all ok: %s" % (fault, dict(st))
if sys.argv[8] == "fail-w3":
    assert st.get("failed", 0) > 0, "%s: none failed: %s" % (fault, dict(st))
    for s, w in why:
        assert s == "failed" and re.search(r"worker [67] lost", w), \
            "%s: %s, not worker 6 or 7 lost: %s" % (fault, s, w)
PY
	# the processes that ended under the fault (restarted)
	grep 'ended\|restarted' "$tmp/serve.err" | sed 's/^/   /' || :
}

# none_ended [NAME]: no process ended under the fault (but NAME, which
# must have been restarted)
none_ended() {
	ended=$(grep 'ended' "$tmp/serve.err" || :)
	[ -z "${1:-}" ] || ended=$(echo "$ended" | grep -v " $1 (pid " || :)
	if [ -n "$ended" ]; then
		echo "$fault: a process ended: $ended"
		exit 1
	fi
	[ -z "${1:-}" ] || grep -q "$1 restarted" "$tmp/serve.err" || {
		echo "$fault: $1 not restarted"
		cat "$tmp/serve.err"
		exit 1
	}
}

# ready_again SECONDS: both replicas ready at the router (its last word
# on each), the schedulers' and workers' processes all there
ready_again() {
	i=0
	until python3 - "$logs/router.log" "$ra" "$rb" <<'PY'
import sys
last = {}
for l in open(sys.argv[1], errors="replace"):
    for a in sys.argv[2:]:
        if "replica %s:" % a in l:
            last[a] = l
sys.exit(0 if all("%s: ready" % a in last.get(a, "") for a in sys.argv[2:])
         else 1)
PY
	do
		i=$((i + 1))
		if [ $i -gt $(($1 * 10)) ]; then
			echo "after $fault: the replicas not ready again in $1 s"
			lib_show "$logs/router.log"
			exit 1
		fi
		sleep 0.1
	done
}

# rtt FROM TO: a tcp round trip from host FROM to host TO, in ms (the
# median of five connects to a closed port: SYN, then RST)
rtt() {
	$hosts exec "$name" "$1" python3 -c '
import socket, sys, time
ts = []
for _ in range(5):
    s = socket.socket()
    t = time.monotonic()
    try:
        s.connect((sys.argv[1], 9))
    except OSError:
        pass
    ts.append((time.monotonic() - t) * 1000)
    s.close()
print("%.2f" % sorted(ts)[2])' "$(addr "$2")"
}

# run FAULT [all-ok | fail-w3] [ENDED]: the trace under FAULT (already
# applied), then checked (check's all-ok, fail-w3); with ENDED, no
# process ended but the one named ENDED ("-": none at all)
run() {
	fault=$1
	replay "$tmp/out.jsonl"
	check "$tmp/out.jsonl" "${2:-}"
	case ${3:-} in
	"") ;;
	-) none_ended ;;
	*) none_ended "$3" ;;
	esac
	# the next fault starts from a fresh account of ended processes
	: >"$tmp/serve.err"
}

# every host's link: shape DELAY JITTER LOSS, or healed
all_hosts=router,sa,sb,w0,w1,w2,w3
shape_all() {
	$hosts shape "$name" $all_hosts "$@"
}
heal_all() {
	$hosts heal "$name" $all_hosts
	# what netfault carried and dropped, all links together
	cat /run/medha-netns/"$name".nf-*.log | awk '
	    /carried/ { c += $5; d += $7 }
	    END { printf "   frames: %d carried, %d dropped (%.2f%%)\n", c, d,
		c + d ? 100 * d / (c + d) : 0 }'
	rm -f /run/medha-netns/"$name".nf-*.log
}

echo "fault                replay  records            medians of the ok ones (16 requests, 16 tokens each)"
: >"$tmp/serve.err"
run none all-ok
base=$(rtt router sa)

shape_all 0.5 0 0
r=$(rtt router sa)
run "delay 1ms" all-ok
heal_all
echo "   tcp round trip router-sa: $r ms ($base ms without)"
awk -v r="$r" 'BEGIN { exit !(r >= 1.5) }' || {
	echo "delay 1 ms: a round trip of $r ms, want at least 1.5"
	exit 1
}

shape_all 5 2.5 0
r=$(rtt router sa)
run "delay 10+-5ms" all-ok
heal_all
echo "   tcp round trip router-sa: $r ms"
awk -v r="$r" 'BEGIN { exit !(r >= 10) }' || {
	echo "delay 10 ms: a round trip of $r ms, want at least 10"
	exit 1
}

shape_all 0 0 0.5
run "loss 1%" all-ok
heal_all
shape_all 0 0 2.5
run "loss 5%" all-ok
heal_all

# the acceptance's: 10 ms of delay with jitter and 1% loss at once, 64
# requests through the router, each once, all ok, the tokens alone
shape_all 5 2.5 0.5
trace=$tmp/trace64.jsonl
run "delay 10+-5ms, loss 1%, 64 requests" all-ok
trace=$tmp/trace.jsonl
heal_all

$hosts rate "$name" w0 100mbit
run "rate 100mbit" all-ok
$hosts heal "$name" w0

# healed: every replica ready again (within 60 s), and the trace all ok
healed() {
	t0=$(date +%s.%N)
	ready_again 60
	echo "   ready again $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after healing"
	replay "$tmp/healed.jsonl"
	fault="  healed"
	check "$tmp/healed.jsonl" all-ok
	# a slow first run after healing: what the workers said meanwhile
	if awk -v s="$secs" 'BEGIN { exit !(s > 30) }'; then
		echo "   slow after healing; the workers' warnings:"
		grep -h 'warning' "$logs"/worker-a*.log | sort | tail -n 20 |
		    sed 's/^/     /'
	fi
	: >"$tmp/serve.err"
}

# cut HOW HOST SECONDS [PEER...]: HOST cut off (from the PEERs)
# $cut_at s after the trace started, for SECONDS, during the replay,
# which is checked with HOW (run's all-ok, fail-w3 or nothing); healed.
# A worker cut off (HOW not empty) ends no process: its requests wait
# for it
cut_at=0.5
cut() {
	how=$1
	h=$2
	s=$3
	shift 3
	(sleep "$cut_at" && $hosts cut "$name" "$h" "$@" && sleep "$s" &&
	    $hosts heal "$name" "$h") &
	cutter=$!
	run "cut $h${1:+ from $*} ${s}s" "$how" ${how:+-}
	wait $cutter
	healed
}

# kill RANK: worker RANK of replica a killed (SIGKILL) 0.5 s after the
# trace started; netns-hosts.sh restarts it: every request ok, nothing
# else ended
kill_worker() {
	(sleep 0.5
	for p in $(ip netns pids "$name-w$(($1 / 2))"); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null |
		    grep -q -- "medha-worker .*--rank $1 " && kill -KILL "$p"
	done
	:) &
	killer=$!
	run "kill a$1 (SIGKILL)" all-ok "worker-a$1"
	wait $killer
	healed
}

cut all-ok w3 5
if [ "${MEDHA_HOSTS_LONG:-0}" = 1 ]; then
	cut all-ok w3 60
else
	echo "skip: the 60 s partition of w3 (MEDHA_HOSTS_LONG=1 runs it)"
fi
kill_worker 6
n0=$(grep -c "replica $rb: ready" "$logs/router.log")
# soon after the start, while replica b holds requests: those it held
# are failed or placed again, none lost. The 64 requests, as the 16
# with their prompts cached take about 2 s, less than setting up the
# cut may take on a loaded machine. Where the cut still found nothing
# held on b (nothing checked): once more, a little later
trace=$tmp/trace64.jsonl
for cut_at in 0.2 0.5 1; do
	lr=$(wc -l <"$logs/router.log")
	cut "" sb 5 router
	tail -n +$((lr + 1)) "$logs/router.log" |
	    grep "replica $rb: .* requests \(failed\|not started\)" |
	    sed 's/^/   router: /' | grep . && break
	[ "$cut_at" != 1 ] || {
		echo "cut sb: replica b held no request when it was cut off"
		exit 1
	}
	echo "   replica b held no request $cut_at s after the start: once more"
done
trace=$tmp/trace.jsonl
cut_at=0.5
n1=$(grep -c "replica $rb: ready" "$logs/router.log")
grep "replica $rb" "$logs/router.log" | tail -n 4 | sed 's/^/   router: /'
[ "$n1" -gt "$n0" ] || {
	echo "cut sb: the router did not take replica b back"
	exit 1
}
# and places requests on it again: the healed run's (healed() ran one)
# among the last replica b ended (-v: a line each)
nb=$(grep -c "request p[0-9]*: ok" "$logs/sched-b.log" || :)
echo "   replica b ended $nb requests ok in all"
lb=$(wc -l <"$logs/sched-b.log")
replay "$tmp/healed.jsonl"
nb=$(tail -n +$((lb + 1)) "$logs/sched-b.log" | grep -c "request p[0-9]*: ok" || :)
echo "   after healing, replica b served $nb of 16 requests"
[ "$nb" -gt 0 ] || {
	echo "cut sb: the router placed no request on replica b after healing"
	exit 1
}

if [ "${MEDHA_HOSTS_LONG:-0}" = 1 ]; then
	# --recover-timeout shorter than the cut: what the lost workers
	# held fails, naming them
	serve_down
	serve_up "--recover-timeout 2"
	cut fail-w3 w3 8
else
	echo "skip: the cut of w3 with --recover-timeout 2 (MEDHA_HOSTS_LONG=1 runs it)"
fi
echo "hosts: ok"

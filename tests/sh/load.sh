#!/bin/sh
# load.sh: a router (--http, --max-queue 1000) in front of a sim replica
# (Llama-3 8B on an A100, batch times divided by 10), loaded twice by
# 500 concurrent HTTP clients (tests/ref/http_load.py: token-id prompts,
# half streamed, 50 of those leaving after their first chunk) and 200
# concurrent nng clients (medha-trace replay, 4 requests each; 20 of them
# killed mid-stream), all at once.
#  - every HTTP client gets a whole answer or a clean refusal (429 with
#    OpenAI's error body); nothing is cut short;
#  - every nng client that stays gets exactly one record a request, ok
#    or rejected ("overloaded");
#  - afterwards nothing is in flight at the router or the replica (the
#    requests of the clients that left were cancelled), and the router's
#    and the scheduler's memory after the second round is within 10%
#    (+ 4 MB) of the first: load does not leave memory behind (under
#    make asan, whose quarantine holds freed memory, LeakSanitizer at the
#    exit checks that instead, and no process may report anything).
# MEDHA_LOAD_HTTP, MEDHA_LOAD_NNG (500, 200) change the counts.
. "$(dirname "$0")/lib.sh"
nh=${MEDHA_LOAD_HTTP:-500}
nn=${MEDHA_LOAD_NNG:-200}
ulimit -n 4096 2>/dev/null || true

port=$(free_port)
"$bin/medha-sched" -l "ipc://$tmp/r.sock" 2>"$tmp/sched.log" &
sched=$!
"$bin/medha-worker" -s "ipc://$tmp/r.sock" --backend sim --gpu a100 \
    -m llama3-8b --speed 10 2>"$tmp/worker.log" &
worker=$!
"$bin/medha-router" -l "ipc://$tmp/router.sock" -r "ipc://$tmp/r.sock" \
    --http "127.0.0.1:$port" --max-queue 1000 2>"$tmp/router.log" &
router=$!
wait_for "$tmp/router.log" "ready: " 30 $router

rss() { # rss PID: resident KB
	awk '/^VmRSS/ {print $2}' "/proc/$1/status"
}

for n in $(seq "$nn"); do
	"$bin/medha-trace" gen -n 4 -q 20 -l 0 -s "$n" --max-tokens 30 \
	    >"$tmp/t$n.jsonl"
done

round() { # round R
	rp=
	for n in $(seq "$nn"); do
		"$bin/medha-trace" replay -a "ipc://$tmp/router.sock" --wait 0 \
		    "$tmp/t$n.jsonl" >"$tmp/o$1-$n.jsonl" 2>/dev/null &
		rp="$rp $!"
	done
	python3 "$top/tests/ref/http_load.py" 127.0.0.1 "$port" "$nh" 50 \
	    >"$tmp/http$1.json" &
	hp=$!
	sleep 1
	# 20 nng clients go away mid-stream
	killed=$(echo $rp | tr ' ' '\n' | head -n 20)
	kill -KILL $killed 2>/dev/null || true
	for p in $rp; do wait "$p" 2>/dev/null || true; done
	wait $hp
	# until nothing is in flight (cancellations take a moment)
	i=0
	until curl -s "http://127.0.0.1:$port/metrics" |
	    grep -q '^medha_requests_in_flight 0$'; do
		i=$((i + 1))
		if [ $i -gt 100 ]; then
			echo "round $1: requests still in flight after 10 s"
			curl -s "http://127.0.0.1:$port/metrics" | grep in_flight
			exit 1
		fi
		sleep 0.1
	done
	python3 - "$tmp" "$1" "$nn" 20 <<'PY'
import collections, json, sys
d, r, nn, killed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
h = json.load(open("%s/http%s.json" % (d, r)))
assert not h["bad"], h["bad"][:5]
assert set(h["refused"]) <= {"429"}, h["refused"]
st = collections.Counter()
for n in range(killed + 1, nn + 1):
    want = [json.loads(l)["id"] for l in open("%s/t%d.jsonl" % (d, n))]
    got = [json.loads(l) for l in open("%s/o%s-%d.jsonl" % (d, r, n))]
    ids = collections.Counter(str(g["id"]) for g in got)
    assert sorted(ids) == sorted(str(w) for w in want) and \
        max(ids.values()) == 1, "client %d: %s" % (n, ids)
    for g in got:
        st[g["status"]] += 1
        if g["status"] != "ok":
            assert g["status"] == "rejected" and "overloaded" in g["reason"], g
print("round %s: http %d ok, %d streamed, %d left, refused %s; nng %s "
      "(%d clients killed)" % (r, h["ok"], h["streamed_ok"], h["left"],
                               dict(h["refused"]), dict(st), killed))
PY
	for p in router sched; do
		eval "rss_$p$1=\$(rss \$$p)"
	done
}

rss_router0=$(rss $router)
rss_sched0=$(rss $sched)
round 1
round 2
for p in router sched; do
	eval "a=\$rss_${p}0 b=\$rss_${p}1 c=\$rss_${p}2"
	echo "$p memory: $((a / 1024)) MB at start, $((b / 1024)) MB after round 1, $((c / 1024)) MB after round 2"
	# ASan keeps freed memory in quarantine: there LeakSanitizer at
	# the exit is the check
	if ! grep -q __asan_init "$bin/medha-$p" &&
	    [ "$c" -gt $((b + b / 10 + 4096)) ]; then
		echo "$p: memory grew from round 1 to round 2"
		exit 1
	fi
done
kill -TERM $router
wait $router
kill -TERM $sched $worker
wait $sched $worker || true
grep -q "stopped:" "$tmp/router.log"
# under make asan: no sanitizer report from any process
no_sanitizer_report "$tmp"/*.log
echo "load: ok"

#!/bin/sh
# sim64-hour.sh [GEN-FLAGS...]: one generated hour of requests replayed
# through examples/serve.sh sim64 (a router, a scheduler, 64 sim workers
# of Llama-3 70B on H100s, tp 8 x spp 8) at $SPEED (100) times real
# time, the workers' batch times divided by the same; checks that every
# request ends with exactly one record and prints the records' statuses,
# the wall time, the batches run and the report.
#
#   sh contrib/sim64-hour.sh                  (gen -t 3600 -q 1 -l 0 -s 1)
#   sh contrib/sim64-hour.sh -q 0.5 --long-max 250000 -s 1
#
# With 66 processes on two cores a batch costs about 10 ms of messages
# (README: "What SPP and KVP cost over the wire"), so a trace with
# million-token prompts (chunks of 64 tokens at that context: 11,000
# batches each) takes hours; the default is the short requests' hour.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
speed=${SPEED:-100}
[ $# -gt 0 ] || set -- -q 1 -l 0 -s 1
tmp=$(mktemp -d)
serve=
cleanup() {
	[ -n "$serve" ] && kill "$serve" 2>/dev/null && wait "$serve" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"$bin/medha-trace" gen -t 3600 "$@" >"$tmp/trace.jsonl"
MEDHA_BIN=$bin MEDHA_ROUTER=ipc://$tmp/router.sock MEDHA_LOG=$tmp/logs \
    MEDHA_SIM_SPEED=$speed bash "$top/examples/serve.sh" sim64 \
    2>"$tmp/serve.err" &
serve=$!
i=0
until grep -qx ready "$tmp/serve.err"; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 "$serve" 2>/dev/null; then
		cat "$tmp/serve.err"
		exit 1
	fi
	sleep 0.1
done
t0=$(date +%s.%N)
"$bin/medha-trace" replay -a "ipc://$tmp/router.sock" --speed "$speed" \
    "$tmp/trace.jsonl" >"$tmp/records.jsonl"
t1=$(date +%s.%N)
kill "$serve"
wait "$serve" || true
serve=
python3 - "$tmp/trace.jsonl" "$tmp/records.jsonl" "$t0" "$t1" <<'PY'
import collections, json, sys
want = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
n = collections.Counter(str(r["id"]) for r in got)
lost = [t["id"] for t in want if n[str(t["id"])] == 0]
twice = [i for i, c in n.items() if c > 1]
print("sim64: %d requests (%d prompt tokens, %d output tokens at most) "
      "replayed in %.0f s: %d records, %d lost, %d with two; %s" %
      (len(want), sum(t["prompt_tokens"] for t in want),
       sum(t["max_tokens"] for t in want),
       float(sys.argv[4]) - float(sys.argv[3]), len(got), len(lost),
       len(twice), dict(collections.Counter(r["status"] for r in got))))
sys.exit(1 if lost or twice else 0)
PY
grep -h 'stopped:.*batches' "$tmp/logs/sched.log" | sed 's/^medha-sched: [a-z]*: /medha-sched /'
"$bin/medha-trace" report "$tmp/records.jsonl"

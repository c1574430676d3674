#!/bin/sh
# replay-pipe.sh: medha-trace replay whose reader goes away
# (`replay | head -1`) on a live replica with a sim worker: it ends at
# once, long before the trace does, cancels the requests it had
# submitted (the scheduler records them "cancelled"), and exits 1 naming
# the write's error (EPIPE), not "Success". A trace whose arrivals go
# backwards is warned about.
. "$(dirname "$0")/lib.sh"
addr=ipc://$tmp/r.sock
serve_start sim 30 MEDHA_ADDR="$addr" MEDHA_LOG="$tmp/logs" \
    MEDHA_SCHED_OPTS="-v"
# one quick request, eight long ones at once, then one a second for a
# minute; the last line goes back in time
{
	echo '{"id": "quick", "arrival": 0, "prompt_tokens": 16, "max_tokens": 1}'
	for i in 1 2 3 4 5 6 7 8; do
		echo "{\"id\": \"long$i\", \"arrival\": 0, \"prompt_tokens\": 64, \"max_tokens\": 4000}"
	done
	for i in $(seq 1 60); do
		echo "{\"id\": \"later$i\", \"arrival\": $i, \"prompt_tokens\": 16, \"max_tokens\": 4}"
	done
} >"$tmp/trace.jsonl"
t0=$(date +%s)
{
	st=0
	"$bin/medha-trace" replay -a "$addr" "$tmp/trace.jsonl" 2>"$tmp/err" ||
	    st=$?
	echo "$st" >"$tmp/st"
} | head -1 >"$tmp/first"
st=$(cat "$tmp/st")
t1=$(date +%s)
cat "$tmp/err"
[ "$st" = 1 ] || { echo "replay | head -1: status $st, want 1"; exit 1; }
grep -q '"id": "quick"' "$tmp/first"
grep -q "stdout: write error: Broken pipe" "$tmp/err"
[ $((t1 - t0)) -le 5 ] || { echo "replay took $((t1 - t0)) s after its reader left"; exit 1; }
# the long requests were cancelled, not left to run
sleep 0.5
n=$(grep -c 'request long[0-9]: cancelled' "$tmp/logs/sched.log" || true)
[ "$n" = 8 ] || { echo "$n of 8 long requests cancelled"; cat "$tmp/logs/sched.log"; exit 1; }

# arrivals that go backwards: sent at once, with a warning
printf '%s\n' '{"id": "a", "arrival": 0.2, "prompt_tokens": 16, "max_tokens": 1}' \
    '{"id": "b", "arrival": 0.1, "prompt_tokens": 16, "max_tokens": 1}' |
    "$bin/medha-trace" replay -a "$addr" >"$tmp/out" 2>"$tmp/err"
grep -q 'request b arrives at 0.1 s, before the one before it (0.2 s)' "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
[ "$(wc -l <"$tmp/out")" = 2 ]
echo "replay-pipe: ok (ended in $((t1 - t0)) s, $n cancelled)"

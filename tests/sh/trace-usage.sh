#!/bin/sh
# trace-usage.sh: medha-trace exits 2 on bad usage (no subcommand, an
# unknown subcommand or flag, a flag value out of range), 0 for -h with
# the usage on stdout, and 1 for an unreadable input.
. "$(dirname "$0")/lib.sh"
mt=$bin/medha-trace

# want CODE ARGS...: medha-trace ARGS exits with CODE (lib.sh)
want() {
	code=$1
	shift
	expect_status "$code" "$mt" "$@"
}

want 2
grep -q '^usage: medha-trace gen' "$tmp/err"
want 0 -h
grep -q '^usage: medha-trace gen' "$tmp/out"
grep -q 'medha-trace report' "$tmp/out"
want 0 --help
want 0 gen -h
grep -q '^usage:' "$tmp/out"
want 2 frobnicate
want 2 -x
want 2 gen --bogus
want 2 gen -q 0
want 2 gen -q -1
want 2 gen -q 2e6
want 2 gen -q fast
want 2 gen -l 1.5
want 2 gen -l -0.1
want 2 gen -n 0
want 2 gen -n 5 -t 5
want 2 gen -t 0
want 2 gen -s -1
want 2 gen --long-min 10 --long-max 5
want 2 gen --short-max 1
want 2 gen --tpot-slo 0
want 2 gen --ttft-mult 0
want 2 gen --ttft-floor -1
want 2 gen extra
want 2 convert --time-scale 0
want 2 convert a b
want 2 report --long-threshold 0
want 2 report --plot
want 1 report "$tmp/does-not-exist"
want 1 convert "$tmp/does-not-exist"
want 0 gen -n 3 -l 0 --long-min 5 --long-max 5
# an address without its scheme says what form an address takes; one
# where nothing listens is said within seconds, not after --wait's 60
# (ipc: two refusals a second apart; tcp: five); one that listens but
# does not answer is named when replay gives up
want 2 replay -a "$tmp/x.sock"
grep -q "x.sock: not an address (ipc://PATH or tcp://HOST:PORT)" "$tmp/err"
t0=$(date +%s)
want 1 replay -a "ipc://$tmp/nope.sock"
grep -q "ipc://$tmp/nope.sock: nothing listens there (No such file or directory)" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
want 1 replay -a "tcp://127.0.0.1:$port"
grep -q "tcp://127.0.0.1:$port: nothing listens there (Connection refused)" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
[ $(($(date +%s) - t0)) -lt 20 ]
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8); time.sleep(30)' \
    "$tmp/mute.sock" &
mute=$!
sleep 0.5
want 1 replay --wait 1 -a "ipc://$tmp/mute.sock"
grep -q "ipc://$tmp/mute.sock: no answer after 1 s" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
# nothing to send (empty input) to an address that does not answer:
# 5 s, not --wait's 60 (issue 39, 9)
t0=$(date +%s)
want 1 replay -a "ipc://$tmp/mute.sock"
grep -q "ipc://$tmp/mute.sock: no answer after 5 s" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
[ $(($(date +%s) - t0)) -lt 10 ]
kill $mute
if [ -w /dev/full ]; then
	want 1 gen -n 10 -o /dev/full
fi
echo ok

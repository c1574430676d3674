#!/bin/sh
# auth.sh: the links' shared secret (--secret-file, $MEDHA_SECRET_FILE;
# medha-proto(7) AUTHENTICATION) on the real programs, with sim workers
# (issue 28 A, D):
#  - without a secret, medha-sched, medha-worker's peer port and
#    medha-router refuse to listen on a tcp address that is not loopback
#    (exit 2, naming --secret-file) unless told --insecure;
#  - a replica of two sim workers (spp 2, their peer messages carrying
#    the MAC) behind a router, every link on tcp with the secret, serves
#    a replay given the secret (the flag, and the environment);
#  - a replay without the secret, or with another, is refused with a
#    reason and gets nothing in; a worker without the secret cannot take
#    rank 0 when the real one is gone: the real one comes back and
#    serves;
#  - a secret file others may read, one too short or blank, or a FIFO
#    (at once, issue 39) is refused.
. "$(dirname "$0")/lib.sh"
umask 077
head -c 48 /dev/urandom | base64 >"$tmp/k"
head -c 48 /dev/urandom | base64 >"$tmp/other"
printf 'short\n' >"$tmp/short"
cp "$tmp/k" "$tmp/open"
chmod 644 "$tmp/open"
p=$(free_port)
q=$(free_port)
sim="--backend sim -m llama3-8b --speed 20"

# refused without a secret on a non-loopback address, taken with one
for cmd in "medha-sched -l tcp://0.0.0.0:$p" \
    "medha-router -l tcp://0.0.0.0:$p -r tcp://127.0.0.1:$q"; do
	expect_status 2 $bin/$cmd
	grep -q -- "--secret-file" "$tmp/err" || { cat "$tmp/err"; exit 1; }
done
expect_status 1 "$bin/medha-worker" -s "tcp://127.0.0.1:$q" $sim --spp 2 \
    --peer "tcp://0.0.0.0:0"
grep -q -- "--secret-file" "$tmp/err" || { cat "$tmp/err"; exit 1; }
expect_status 1 "$bin/medha-sched" -l "tcp://127.0.0.1:$p" \
    --secret-file "$tmp/open"
grep -q "chmod 600" "$tmp/err" || { cat "$tmp/err"; exit 1; }
expect_status 1 "$bin/medha-sched" -l "tcp://127.0.0.1:$p" \
    --secret-file "$tmp/short"
grep -q "not 16 to 4096" "$tmp/err" || { cat "$tmp/err"; exit 1; }
# sixteen newlines and a blank line: long enough, but blank (issue 39, 11)
{ printf '\n%.0s' $(seq 16); printf '   \t  \n'; } >"$tmp/blank"
expect_status 1 "$bin/medha-sched" -l "tcp://127.0.0.1:$p" \
    --secret-file "$tmp/blank"
grep -q "but blanks" "$tmp/err" || { cat "$tmp/err"; exit 1; }
# a FIFO is refused at once, not opened (that would wait for a writer)
mkfifo "$tmp/fifo"
expect_status 1 timeout 5 "$bin/medha-sched" -l "tcp://127.0.0.1:$p" \
    --secret-file "$tmp/fifo"
grep -q "not a regular file" "$tmp/err" || { cat "$tmp/err"; exit 1; }
expect_status 1 timeout 5 "$bin/medha-trace" replay \
    -a "tcp://127.0.0.1:$p" --secret-file "$tmp/fifo" /dev/null
grep -q "not a regular file" "$tmp/err" || { cat "$tmp/err"; exit 1; }

# a replica of two sim workers and a router, all on tcp with the secret
"$bin/medha-sched" -l "tcp://0.0.0.0:$p" --workers 2 \
    --secret-file "$tmp/k" 2>"$tmp/sched.log" &
for r in 0 1; do
	MEDHA_SECRET_FILE=$tmp/k "$bin/medha-worker" -s "tcp://127.0.0.1:$p" \
	    $sim --spp 2 --rank $r --peer "tcp://0.0.0.0:0" \
	    2>"$tmp/w$r.log" &
	[ $r = 0 ] && w0=$!
done
"$bin/medha-router" -l "tcp://0.0.0.0:$q" -r "tcp://127.0.0.1:$p" \
    --secret-file "$tmp/k" 2>"$tmp/router.log" &
wait_for "$tmp/sched.log" "ready:" 30
# short requests, so that a replay takes seconds, not twenty (a 534K
# prompt came with -l 0.05); messages in pieces under a secret are
# coll_test's
"$bin/medha-trace" gen -n 20 -q 20 -s 3 -l 0 --max-tokens 32 \
    >"$tmp/trace.jsonl"
"$bin/medha-trace" replay -a "tcp://127.0.0.1:$q" --secret-file "$tmp/k" \
    "$tmp/trace.jsonl" >"$tmp/out.jsonl"
MEDHA_SECRET_FILE=$tmp/k "$bin/medha-trace" replay -a "tcp://127.0.0.1:$p" \
    "$tmp/trace.jsonl" >>"$tmp/out.jsonl"
[ "$(grep -c '"status": "ok"' "$tmp/out.jsonl")" = 40 ] ||
    { cat "$tmp/out.jsonl"; exit 1; }

# without the secret, or with another: refused, nothing submitted, and
# replay exits at once (issue 39, 9: not after --wait's 60 s)
for a in $p $q; do
	t0=$(date +%s)
	expect_status 1 timeout 20 "$bin/medha-trace" replay \
	    -a "tcp://127.0.0.1:$a" "$tmp/trace.jsonl"
	grep -q "wants the shared secret" "$tmp/err" || { cat "$tmp/err"; exit 1; }
	grep -q "nothing submitted" "$tmp/err" || { cat "$tmp/err"; exit 1; }
	expect_status 1 timeout 20 "$bin/medha-trace" replay \
	    -a "tcp://127.0.0.1:$a" --secret-file "$tmp/other" "$tmp/trace.jsonl"
	grep -q "another secret" "$tmp/err" || { cat "$tmp/err"; exit 1; }
	[ $(($(date +%s) - t0)) -lt 5 ] || { echo "replay refused: slow"; exit 1; }
done
grep -q "40 requests served\|served" "$tmp/sched.log" || :

# rank 0 gone: a worker without the secret cannot take its place
kill -KILL "$w0"
wait_for "$tmp/sched.log" "worker 0 lost" 10
"$bin/medha-worker" -s "tcp://127.0.0.1:$p" $sim --spp 2 --rank 0 \
    --peer "tcp://127.0.0.1:0" 2>"$tmp/stranger.log" &
stranger=$!
sleep 1.5
if grep -q "welcome\|ready: worker" "$tmp/stranger.log"; then
	cat "$tmp/stranger.log"
	exit 1
fi
grep -q "wants the shared secret" "$tmp/stranger.log" ||
    { cat "$tmp/stranger.log"; exit 1; }
kill "$stranger"
MEDHA_SECRET_FILE=$tmp/k "$bin/medha-worker" -s "tcp://127.0.0.1:$p" \
    $sim --spp 2 --rank 0 --peer "tcp://0.0.0.0:0" 2>"$tmp/w0b.log" &
wait_for "$tmp/w0b.log" "ready: worker 0" 30
"$bin/medha-trace" replay -a "tcp://127.0.0.1:$p" --secret-file "$tmp/k" \
    "$tmp/trace.jsonl" >"$tmp/out2.jsonl"
[ "$(grep -c '"status": "ok"' "$tmp/out2.jsonl")" = 20 ] ||
    { cat "$tmp/out2.jsonl"; exit 1; }
no_sanitizer_report "$tmp"/*.log
echo "auth: ok"

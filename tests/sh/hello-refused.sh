#!/bin/sh
# hello-refused.sh: a worker whose HELLO is refused (issue 39, finding
# 8), with sim workers:
#  - without the scheduler's secret, or with another, it backs off (a
#    handful of tries, next to no CPU on either side: it spun before),
#    says why at error level once, and exits 1 after about 10 s saying
#    retrying cannot change it;
#  - of another model than the scheduler's -m: the same; the scheduler
#    says "worker refused" once for all the tries of all such workers;
#  - with --retry-forever it goes on trying.
. "$(dirname "$0")/lib.sh"
umask 077
head -c 48 /dev/urandom | base64 >"$tmp/k"
head -c 48 /dev/urandom | base64 >"$tmp/other"
p=$(free_port)
q=$(free_port)
sim="--backend sim -m llama3-8b"

# cpu PID: its user and system time so far, in clock ticks
cpu() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

"$bin/medha-sched" -l "tcp://127.0.0.1:$p" --secret-file "$tmp/k" \
    2>"$tmp/sched1.log" &
s1=$!
"$bin/medha-sched" -l "tcp://127.0.0.1:$q" -m llama3-70b \
    2>"$tmp/sched2.log" &
wait_for "$tmp/sched1.log" "listening" 20
wait_for "$tmp/sched2.log" "listening" 20
t0=$(date +%s)
"$bin/medha-worker" -s "tcp://127.0.0.1:$p" $sim --secret-file "$tmp/other" \
    2>"$tmp/a.log" &
a=$!
"$bin/medha-worker" -s "tcp://127.0.0.1:$p" $sim 2>"$tmp/b.log" &
b=$!
"$bin/medha-worker" -s "tcp://127.0.0.1:$q" $sim 2>"$tmp/c.log" &
c=$!
"$bin/medha-worker" -s "tcp://127.0.0.1:$q" $sim --retry-forever \
    2>"$tmp/d.log" &
d=$!
(sleep 40; kill $a $b $c 2>/dev/null) & # a worker that never gives up
sleep 5
for w in $a $b; do # backing off: well under a second of CPU in 5 s
	[ "$(cpu $w)" -lt 50 ] || { echo "worker $w: $(cpu $w) ticks"; exit 1; }
done
for w in $a $b $c; do
	st=0
	wait $w || st=$?
	[ $st = 1 ] || { echo "worker $w: status $st"; cat "$tmp"/[abc].log; exit 1; }
done
took=$(($(date +%s) - t0))
[ $took -ge 9 ] && [ $took -le 25 ] || { echo "gave up after $took s"; exit 1; }
for l in a b c; do
	grep -q "retrying cannot change it (--retry-forever would)" "$tmp/$l.log" ||
	    { cat "$tmp/$l.log"; exit 1; }
	tries=$(sed -n 's/.*(\([0-9]*\) tries).*/\1/p' "$tmp/$l.log")
	[ "$tries" -le 12 ] || { echo "$l: $tries tries"; exit 1; }
	# said once at error level before the last line
	[ "$(grep -c ': error: refused by' "$tmp/$l.log")" = 2 ] ||
	    { cat "$tmp/$l.log"; exit 1; }
done
grep -q "another secret" "$tmp/a.log" || { cat "$tmp/a.log"; exit 1; }
grep -q "wants the shared secret" "$tmp/b.log" || { cat "$tmp/b.log"; exit 1; }
grep -q "is not the replica's -m" "$tmp/c.log" || { cat "$tmp/c.log"; exit 1; }
[ "$(grep -c 'worker refused' "$tmp/sched2.log")" = 1 ] ||
    { cat "$tmp/sched2.log"; exit 1; }
[ "$(cpu $s1)" -lt 100 ] || { echo "scheduler: $(cpu $s1) ticks"; exit 1; }
kill -0 $d || { echo "--retry-forever: gone"; cat "$tmp/d.log"; exit 1; }
kill $d
no_sanitizer_report "$tmp"/*.log
echo "hello-refused: ok"

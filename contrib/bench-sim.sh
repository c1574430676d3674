#!/bin/sh
# bench-sim.sh: how long the simulator takes for one hour at 1.75 QPS with
# 5% long requests (Llama-3 8B, tp 8, spp 2, medha + adaptive), on one
# core. Prints the wall time of each of 3 runs and the best.
#
# usage: contrib/bench-sim.sh [BINDIR]
set -e
bin=${1:-$(dirname "$0")/../bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/medha-trace" gen -q 1.75 -l 0.05 -t 3600 -s 1 > "$tmp/trace"
n=$(wc -l < "$tmp/trace")
pin=
command -v taskset >/dev/null 2>&1 && pin="taskset -c 0"
best=
for i in 1 2 3; do
	t0=$(date +%s.%N)
	$pin "$bin/medha-sched" --sim a100 -m llama3-8b --tp 8 --spp 2 \
	    --policy medha --chunk adaptive "$tmp/trace" > "$tmp/rec"
	t1=$(date +%s.%N)
	t=$(echo "$t1 - $t0" | bc -l 2>/dev/null || python3 -c "print($t1 - $t0)")
	printf 'run %d: %.2f s wall for %d requests\n' "$i" "$t" "$n"
	if [ -z "$best" ] || [ "$(python3 -c "print(int($t < $best))")" = 1 ]; then
		best=$t
	fi
done
printf 'simulator, 1.75 QPS x 3600 s, one core: best %.2f s (goal < 10 s)\n' "$best"

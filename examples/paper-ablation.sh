#!/bin/sh
# paper-ablation.sh: the Medha paper's scheduler ablation in simulation.
# Llama-3 8B on 16 A100s (tp 8, spp 2), one-hour traces with 5% long
# requests at 0.25, 0.75, 1.25 and 1.75 QPS, under sarathi (Sarathi-Serve:
# FCFS, a fixed budget of 512 or 2048 tokens, no pipelining of one
# prompt's chunks across stages), fcfs, edf, lrs and medha (adaptive
# chunks). Prints TTFT P50/P90 and TBT (time between tokens, every gap
# of every request pooled) P50/P99 of short and long requests, the
# overall TTFT P50 and how many requests completed. Then the load sweep:
# for each rate, how much of the replica's time the long requests'
# prefills alone need (each prompt's prefill time alone, as the predictor
# gives it, summed, over the trace's length), so that results past 100%
# are read as overload.
#
# usage: examples/paper-ablation.sh [BINDIR]
#        (QPS="0.75" SECONDS_PER_TRACE=600 SEED=1 to change the runs)
set -e
bin=${1:-$(dirname "$0")/../bin}
qpss=${QPS:-"0.25 0.75 1.25 1.75"}
secs=${SECONDS_PER_TRACE:-3600}
seed=${SEED:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

configs="sarathi:512 sarathi:2048 fcfs:adaptive edf:adaptive lrs:adaptive medha:adaptive"

printf '%-5s %-15s | %8s %8s | %8s %8s | %7s %7s | %7s %7s | %8s | %s\n' \
    qps config "sTTFT50" "sTTFT90" "lTTFT50" "lTTFT90" "sTBT50" "sTBT99" \
    "lTBT50" "lTBT99" "TTFT50" done
printf '%-5s %-15s | %17s | %17s | %15s | %15s | %8s |\n' "" "" \
    "short TTFT (s)" "long TTFT (s)" "short TBT (ms)" "long TBT (ms)" "all (s)"
for q in $qpss; do
	"$bin/medha-trace" gen -q "$q" -l 0.05 -t "$secs" -s "$seed" > "$tmp/trace.$q"
	for c in $configs; do
		pol=${c%%:*}
		ch=${c#*:}
		( "$bin/medha-sched" --sim a100 -m llama3-8b --tp 8 --spp 2 \
		    --policy "$pol" --chunk "$ch" "$tmp/trace.$q" > "$tmp/rec.$q.$c"
		  "$bin/medha-trace" report --json "$tmp/rec.$q.$c" > "$tmp/rep.$q.$c" ) &
	done
	wait
	for c in $configs; do
		python3 - "$q" "$c" "$tmp/rep.$q.$c" <<'PY'
import json, sys
q, c, path = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(path))
def g(cls, m, p, scale=1.0):
    v = r[cls][m][p]
    if v is None:
        return "%8s" % "-" if scale == 1 else "%7s" % "-"
    return "%8.3f" % (v * scale) if scale == 1 else "%7.1f" % (v * scale)
print("%-5s %-15s | %s %s | %s %s | %s %s | %s %s | %s | %d/%d" % (
    q, c.replace(":", "+"),
    g("short", "ttft", "p50"), g("short", "ttft", "p90"),
    g("long", "ttft", "p50"), g("long", "ttft", "p90"),
    g("short", "tbt", "p50", 1e3), g("short", "tbt", "p99", 1e3),
    g("long", "tbt", "p50", 1e3), g("long", "tbt", "p99", 1e3),
    g("all", "ttft", "p50"), r["completed"], r["requests"]))
PY
	done
done

echo
echo "load sweep: the long requests' prefills alone (medha, adaptive chunks)"
printf '%-5s | %8s %9s | %14s | %s\n' qps requests long "prefill (s)" \
    "share of the trace"
for q in $qpss; do
	python3 - "$q" "$secs" "$tmp/rec.$q.medha:adaptive" <<'PY'
import json, sys
q, secs, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
n = nl = 0
work = 0.0
for line in open(path):
    r = json.loads(line)
    n += 1
    if r["prompt_tokens"] >= 131072:
        nl += 1
        work += r.get("prefill_alone", 0.0)
print("%-5s | %8d %9d | %14.0f | %5.0f%%%s" % (q, n, nl, work,
    100 * work / secs, "  (overload)" if work > secs else ""))
PY
done

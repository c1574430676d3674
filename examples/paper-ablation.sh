#!/bin/sh
# paper-ablation.sh: the Medha paper's scheduler ablation in simulation.
# Llama-3 8B on 16 A100s (tp 8, spp 2), one-hour traces with 5% long
# requests at 0.25, 0.75, 1.25 and 1.75 QPS, under fcfs + fixed 512,
# fcfs + fixed 2048 (Sarathi), edf, lrs and medha (adaptive chunks).
# Prints TTFT P50/P90 and TPOT P50/P99 of short and long requests, the
# overall TTFT P50 and how many requests completed.
#
# usage: examples/paper-ablation.sh [BINDIR]   (QPS="0.75" SECONDS=600 to shorten)
set -e
bin=${1:-$(dirname "$0")/../bin}
qpss=${QPS:-"0.25 0.75 1.25 1.75"}
secs=${SECONDS_PER_TRACE:-3600}
seed=${SEED:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

configs="fcfs:512 fcfs:2048 edf:adaptive lrs:adaptive medha:adaptive"

printf '%-5s %-15s | %8s %8s | %8s %8s | %7s %7s | %7s %7s | %8s | %s\n' \
    qps config "sTTFT50" "sTTFT90" "lTTFT50" "lTTFT90" "sTPOT50" "sTPOT99" \
    "lTPOT50" "lTPOT99" "TTFT50" done
printf '%-5s %-15s | %17s | %17s | %15s | %15s | %8s |\n' "" "" \
    "short TTFT (s)" "long TTFT (s)" "short TPOT (ms)" "long TPOT (ms)" "all (s)"
for q in $qpss; do
	"$bin/medha-trace" gen -q "$q" -l 0.05 -t "$secs" -s "$seed" > "$tmp/trace.$q"
	for c in $configs; do
		pol=${c%%:*}
		ch=${c#*:}
		( "$bin/medha-sched" --sim a100 -m llama3-8b --tp 8 --spp 2 \
		    --policy "$pol" --chunk "$ch" "$tmp/trace.$q" |
		    "$bin/medha-trace" report --json > "$tmp/rep.$q.$c" ) &
	done
	wait
	for c in $configs; do
		python3 - "$q" "$c" "$tmp/rep.$q.$c" <<'PY'
import json, sys
q, c, path = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(path))
def g(cls, m, p, scale=1.0):
    v = r[cls][m][p]
    return "%8s" % "-" if v is None else "%8.3f" % (v * scale) if scale == 1 else "%7.1f" % (v * scale)
print("%-5s %-15s | %s %s | %s %s | %s %s | %s %s | %s | %d/%d" % (
    q, c.replace(":", "+"),
    g("short", "ttft", "p50"), g("short", "ttft", "p90"),
    g("long", "ttft", "p50"), g("long", "ttft", "p90"),
    g("short", "tpot", "p50", 1e3), g("short", "tpot", "p99", 1e3),
    g("long", "tpot", "p50", 1e3), g("long", "tpot", "p99", 1e3),
    g("all", "ttft", "p50"), r["completed"], r["requests"]))
PY
	done
done

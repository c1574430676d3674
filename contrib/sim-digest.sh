#!/bin/sh
# sim-digest.sh [BIN]: an md5 of medha-sched --sim's records for each
# policy and layout on the traces the tests use (sched-sim.sh's), an
# hour of the paper's workload, and 3000 requests of the Azure
# conversation trace (shared/traces, when it is beside the checkout).
# Two builds that print the same lines simulate the same: a check for
# changes that must not move a record (refactors, speed-ups).
bin=${1:-bin}
top=$(cd "$(dirname "$0")/.." && pwd)
azure=${MEDHA_AZURE:-$top/../shared/traces/azure-llm-2023-conv.csv}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
sim() { # NAME ARGS...: the md5 of the records of one run
	name=$1
	shift
	printf '%s %s\n' "$name" "$("$bin/medha-sched" --sim "$@" 2>/dev/null |
	    md5sum | cut -d' ' -f1)"
}
"$bin/medha-trace" gen -q 2 -n 300 -l 0.05 -s 9 >"$t/trace"
"$bin/medha-trace" gen -q 0.75 -l 0.05 -t 600 -s 1 >"$t/hour"
for pc in "fcfs 512" "fcfs 2048" "edf adaptive" "lrs adaptive" \
    "medha adaptive" "sarathi 512"; do
	set -- $pc
	sim "$1-$2" a100 -m llama3-8b --tp 8 --spp 2 -p "$1" -c "$2" "$t/trace"
done
sim 70b-tp8-spp4-kvp2 h100 -m llama3-70b --tp 8 --spp 4 --kvp 2 \
    --kvp-max-tokens 131072 "$t/trace"
sim gen-600s a100 -m llama3-8b --tp 8 --spp 2 --policy medha \
    --chunk adaptive "$t/hour"
if [ -s "$azure" ]; then
	"$bin/medha-trace" convert "$azure" 2>/dev/null | head -n 3000 >"$t/az"
	for p in medha fcfs; do
		sim "azure-$p" a100 -m llama3-8b --tp 8 -p $p "$t/az"
	done
	sim azure-70b a100 -m llama3-70b --tp 8 --spp 2 --kvp 2 "$t/az"
else
	echo "azure: $azure missing (MEDHA_AZURE names it)"
fi

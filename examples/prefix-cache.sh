#!/bin/sh
# prefix-cache.sh: prefix caching in simulation, with and without the
# cache (medha-sched --no-prefix-cache), Llama-3 8B on 16 H100s (tp 8,
# spp 2), medha policy, adaptive chunks:
#  - doc: 32 questions about one 1M-token document over 10 minutes
#    (medha-trace gen --doc-tokens 1000000 --questions 32 -t 600);
#  - chat: 10 minutes of multi-turn conversations at 2 new ones a second,
#    up to 4 turns each 30 s apart, 10 system prompts of 1000 tokens;
#  - press: memory pressure, 3000 requests on 2000 system prompts of 2000
#    tokens against a KV pool of 15000 blocks (240K tokens).
# For each: requests completed, prompt tokens, those cached, the prefill
# tokens that ran (prompt - cached), TTFT P50/P99 (for doc, the median
# of the questions after the first), TPOT P50 and how many decodes kept
# their TPOT SLO; then the cache's counters (-v).
#
# usage: examples/prefix-cache.sh [BINDIR]
set -e
bin=${1:-$(dirname "$0")/../bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sim="$bin/medha-sched --sim h100 -m llama3-8b --tp 8 --spp 2"

"$bin/medha-trace" gen --doc-tokens 1000000 --questions 32 -t 600 -s 1 \
    >"$tmp/doc"
"$bin/medha-trace" gen -q 2 -l 0 -t 600 -s 3 --turns 4 --think 30 \
    --system-prompts 10 >"$tmp/chat"
"$bin/medha-trace" gen -n 3000 -q 20 -l 0 -s 9 --system-prompts 2000 \
    --system-tokens 2000 >"$tmp/press"

printf '%-6s %-6s %6s %11s %11s %11s %9s %9s %8s %7s\n' trace cache done \
    prompt_tok cached_tok prefilled TTFT50 TTFT99 TPOT50 tpotSLO
for t in doc chat press; do
	extra=
	[ "$t" = press ] && extra="--kv-blocks 15000"
	for c in on off; do
		flag=
		[ "$c" = off ] && flag=--no-prefix-cache
		$sim -v $flag $extra "$tmp/$t" >"$tmp/$t.$c" 2>"$tmp/$t.$c.err"
		python3 - "$tmp/$t.$c" "$t" "$c" <<'PY'
import json, statistics, sys
recs = sorted((json.loads(l) for l in open(sys.argv[1])),
              key=lambda r: r["arrival"])
ok = [r for r in recs if r["status"] == "ok"]
if sys.argv[2] == "doc":
    ok = ok[1:]  # the questions after the first
prompt = sum(r["prompt_tokens"] for r in recs)
cached = sum(r.get("cached_tokens", 0) for r in recs)
ttft = sorted(r["ttft"] for r in ok)
tpot = sorted(r["tpot_mean"] for r in ok if r["output_tokens"] > 1)
kept = sum(1 for r in ok if r["output_tokens"] > 1 and
           r["tpot_mean"] <= r["tpot_slo"])
q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
print("%-6s %-6s %6d %11d %11d %11d %9.3f %9.3f %8.2f %3d/%-3d" % (
    sys.argv[2], sys.argv[3], len([r for r in recs if r["status"] == "ok"]),
    prompt, cached, prompt - cached, statistics.median(ttft),
    q(ttft, 0.99), 1e3 * statistics.median(tpot), kept, len(tpot)))
PY
	done
done
for t in doc chat press; do
	printf '%-6s ' "$t"
	grep 'prefix cache' "$tmp/$t.on.err" | sed 's/.*info: //'
done

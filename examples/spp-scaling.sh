#!/bin/sh
# spp-scaling.sh: TTFT of a single 1M-token prompt (1048576 tokens) for
# Llama-3 8B on A100s, tp 8, with 1, 2, 4, 8 and 16 pipeline stages, and
# the scaling efficiency TTFT(1) / (spp x TTFT(spp)).
#
# usage: examples/spp-scaling.sh [BINDIR]
set -e
bin=${1:-$(dirname "$0")/../bin}
prompt=${PROMPT:-1048576}
printf '%4s %6s %12s %11s\n' spp gpus "TTFT (s)" efficiency
t1=
for spp in 1 2 4 8 16; do
	ttft=$(printf '{"id":"long","arrival":0,"prompt_tokens":%s,"max_tokens":1}\n' "$prompt" |
	    "$bin/medha-sched" --sim a100 -m llama3-8b --tp 8 --spp "$spp" |
	    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["ttft"])')
	[ -n "$t1" ] || t1=$ttft
	python3 -c "import sys; s=$spp; t=$ttft; t1=$t1; print('%4d %6d %12.2f %10.1f%%' % (s, 8*s, t, 100*t1/(s*t)))"
done

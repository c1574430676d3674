#!/usr/bin/env bash
# serve.sh: start a live replica, say "ready" on stderr once it accepts
# requests, and stop every process it started on SIGINT or SIGTERM.
#
# usage: examples/serve.sh TOPOLOGY [--tcp]
#
# Topologies:
#   single  one scheduler and one cpu worker on the real model
#   sim     one scheduler and one sim worker (Llama-3 8B on an A100, no
#           numerics: batches take their predicted time)
#
# Environment:
#   MEDHA_ADDR    where the replica listens (default ipc:///tmp/medha-UID/
#                 TOPOLOGY.sock, or tcp://127.0.0.1:$MEDHA_PORT with --tcp)
#   MEDHA_PORT    the port for --tcp (5555)
#   MEDHA_MODEL   the GGUF for cpu workers (cache/models/SmolLM2-135M-
#                 Instruct.Q4_1.gguf, fetched by contrib/fetch-refs.sh)
#   MEDHA_BIN     the programs (bin/)
#   MEDHA_THREADS threads of a cpu worker (2)
#   MEDHA_SCHED_OPTS, MEDHA_WORKER_OPTS  more flags for each
#   MEDHA_LOG     a directory for the processes' logs (a temporary one)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
topo=${1:-}
tcp=0
[ "${2:-}" = --tcp ] && tcp=1
if [ $# -lt 1 ] || [ $# -gt 2 ] || { [ $# = 2 ] && [ $tcp = 0 ]; }; then
	echo "usage: serve.sh single|sim [--tcp]" >&2
	exit 2
fi
model=${MEDHA_MODEL:-$top/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
threads=${MEDHA_THREADS:-2}
if [ $tcp = 1 ]; then
	addr=${MEDHA_ADDR:-tcp://127.0.0.1:${MEDHA_PORT:-5555}}
else
	mkdir -p "/tmp/medha-$(id -u)"
	addr=${MEDHA_ADDR:-ipc:///tmp/medha-$(id -u)/$topo.sock}
fi
logs=${MEDHA_LOG:-$(mktemp -d)}
mkdir -p "$logs"

pids=()
stop() {
	trap - INT TERM EXIT
	[ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	exit "${1:-0}"
}
trap 'stop 0' INT TERM
trap 'stop 1' EXIT

case $topo in
single)
	[ -s "$model" ] || { echo "serve.sh: $model: no such model (run contrib/fetch-refs.sh or set MEDHA_MODEL)" >&2; exit 1; }
	"$bin/medha-sched" -l "$addr" ${MEDHA_SCHED_OPTS:-} 2>"$logs/sched.log" &
	pids+=($!)
	"$bin/medha-worker" -s "$addr" -m "$model" -t "$threads" \
	    ${MEDHA_WORKER_OPTS:-} 2>"$logs/worker0.log" &
	pids+=($!)
	;;
sim)
	"$bin/medha-sched" -l "$addr" ${MEDHA_SCHED_OPTS:-} 2>"$logs/sched.log" &
	pids+=($!)
	"$bin/medha-worker" -s "$addr" --backend sim --gpu a100 -m llama3-8b \
	    ${MEDHA_WORKER_OPTS:-} 2>"$logs/worker0.log" &
	pids+=($!)
	;;
*)
	echo "serve.sh: $topo: unknown topology (single, sim)" >&2
	exit 2
	;;
esac

echo "serve.sh: $topo at $addr, logs in $logs" >&2
# ready once the scheduler says so; give up if a process dies first
for _ in $(seq 600); do
	grep -q 'ready:' "$logs/sched.log" 2>/dev/null && break
	for p in "${pids[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "serve.sh: a process exited early:" >&2
			tail -n 5 "$logs"/*.log >&2
			stop 1
		fi
	done
	sleep 0.1
done
if ! grep -q 'ready:' "$logs/sched.log"; then
	echo "serve.sh: not ready after 60 s" >&2
	stop 1
fi
echo ready >&2
# wait for a signal (or for a process to end on its own)
while :; do
	for p in "${pids[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "serve.sh: process $p ended; stopping" >&2
			tail -n 5 "$logs"/*.log >&2
			stop 1
		fi
	done
	sleep 0.5 &
	wait $! 2>/dev/null
done

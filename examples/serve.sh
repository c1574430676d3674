#!/usr/bin/env bash
# serve.sh: start a serving topology, say "ready" on stderr once it
# accepts requests, restart any of its processes that ends (a worker
# killed, a scheduler that crashed: the others keep serving, and the
# process rejoins), and stop every process it started on SIGINT or
# SIGTERM. A process that ends within 10 s of its start three times in
# a row, or any that ends before "ready", stops the whole topology
# (exit 1).
#
# usage: examples/serve.sh TOPOLOGY [--tcp]
#
# Topologies:
#   single        one scheduler and one cpu worker on the real model; a
#                 router in front of it when MEDHA_ROUTER or MEDHA_HTTP
#                 is set
#   sim           one scheduler and one sim worker (Llama-3 8B on an A100,
#                 no numerics: batches take their predicted time)
#   two-replicas  a router in front of two replicas, each a scheduler and
#                 one cpu worker (MEDHA_THREADS 1 each by default)
#   tp2           a router in front of one replica of two cpu workers,
#                 each with half of the heads and weight rows (tensor
#                 parallel; MEDHA_THREADS 1 each by default)
#   spp2          a router in front of one replica of two cpu workers, a
#                 pipeline of two stages (MEDHA_THREADS 1 each by default)
#   kvp2          a router in front of one replica of two cpu workers, two
#                 KVP groups: a request's KV past MEDHA_KVP_MAX_TOKENS
#                 (256) positions goes on the other group, and attention
#                 is merged across them (MEDHA_THREADS 1 each by default)
#   kvp3          the same with three KVP groups (a request then spans
#                 some of them, not all)
#   tp2-spp2-kvp2 the three at once: eight cpu workers (MEDHA_THREADS 1)
#   sim64         a router in front of one replica of 64 sim workers
#                 (Llama-3 70B on H100s, tp 8 x spp 8; MEDHA_SIM_SPEED, 10,
#                 divides the batch times)
#
# Environment:
#   MEDHA_ADDR    where single's or sim's scheduler listens (default
#                 ipc://RUNDIR/TOPOLOGY.sock, or
#                 tcp://127.0.0.1:$MEDHA_PORT with --tcp)
#   MEDHA_ROUTER  where the router listens (two-replicas: default
#                 ipc://RUNDIR/TOPOLOGY.sock, or
#                 tcp://127.0.0.1:$MEDHA_PORT with --tcp); its replicas
#                 listen at TOPOLOGY-rN.sock beside it (ports
#                 MEDHA_PORT+1+N)
#   MEDHA_HTTP    HOST:PORT where the router serves the OpenAI-compatible
#                 HTTP API (medha-router --http); a router is given
#                 -m MEDHA_MODEL (but with sim), so that text becomes
#                 token ids there;
#                 with single and no MEDHA_ROUTER, the router listens at
#                 TOPOLOGY-router.sock (port MEDHA_PORT+9)
#   MEDHA_PORT    the first port for --tcp (5555)
#   MEDHA_MODEL   the GGUF for cpu workers (cache/models/SmolLM2-135M-
#                 Instruct.Q4_1.gguf, fetched by contrib/fetch-refs.sh);
#                 for cuda workers also a shape name (llama3-8b: random
#                 weights, no tokenizer: requests send prompt_ids)
#   MEDHA_BACKEND cpu (default) or cuda: the workers of single,
#                 two-replicas, tp2, spp2, kvp2, kvp3 and tp2-spp2-kvp2
#                 run on one NVIDIA GPU, every process of the topology
#                 sharing it (medha-worker --backend cuda); then
#   MEDHA_DEVICE  the CUDA device (0)
#   MEDHA_MEM_UTIL  each worker's share of the GPU's free memory (0.9
#                 divided by the topology's workers)
#   MEDHA_COLL    the collectives of a topology of several workers:
#                 nng (default: NCCL cannot put two ranks on one GPU) or
#                 nccl (one GPU per worker: worker R on device
#                 MEDHA_DEVICE + R, with 0.9 of its memory)
#   MEDHA_READY_TIMEOUT  seconds to wait for "ready" (60; cuda 180)
#   MEDHA_BIN     the programs (bin/)
#   MEDHA_THREADS threads of each cpu worker (single 2; the others 1)
#   MEDHA_KVP_MAX_TOKENS  KV positions of a request per KVP group (kvp2,
#                 kvp3, tp2-spp2-kvp2: 256; a multiple of 16)
#   MEDHA_SCHED_OPTS, MEDHA_WORKER_OPTS, MEDHA_ROUTER_OPTS  more flags
#   MEDHA_LOG     a directory for the processes' logs (a temporary one):
#                 NAME.log (a restarted process appends to it) and
#                 NAME.pid, where NAME is sched (sched0, sched1 for
#                 two-replicas), sched-workerR (rank R) or router
#   MEDHA_RESTART 0: stop the whole topology when any process ends,
#                 instead of restarting it (default 1)
#   MEDHA_SECRET_FILE  the links' shared secret (medha-proto(7)), read by
#                 every program it starts; needed only off loopback
#
# RUNDIR, where the ipc sockets are, is ${TMPDIR:-/tmp}/medha-UID: made
# with mode 0700, and refused
# (exit 1) when it is there already but is not a directory of this
# user's that no one else may enter (another local user who made it
# first could replace the sockets and read the requests).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
topo=${1:-}
tcp=0
[ "${2:-}" = --tcp ] && tcp=1
usage="usage: serve.sh single|sim|two-replicas|tp2|spp2|kvp2|kvp3|tp2-spp2-kvp2|sim64 [--tcp]"
if [ $# -lt 1 ] || [ $# -gt 2 ] || { [ $# = 2 ] && [ $tcp = 0 ]; }; then
	echo "$usage" >&2
	exit 2
fi
model=${MEDHA_MODEL:-$top/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
backend=${MEDHA_BACKEND:-cpu}
case $backend in
cpu | cuda) ;;
*)
	echo "serve.sh: MEDHA_BACKEND=$backend: expected cpu or cuda" >&2
	exit 2
	;;
esac
port=${MEDHA_PORT:-5555}
dir=${TMPDIR:-/tmp}/medha-$(id -u)
# private_dir DIR: DIR made 0700, or refused unless it is a directory
# (not a link) of this user's that only this user may enter
private_dir() {
	local d=$1 owner mode
	mkdir -m 0700 "$d" 2>/dev/null
	if [ -L "$d" ] || [ ! -d "$d" ]; then
		echo "serve.sh: $d: not a directory (a link, or a file): refused" >&2
		exit 1
	fi
	owner=$(stat -c %u "$d")
	mode=$(stat -c %a "$d")
	if [ "$owner" != "$(id -u)" ]; then
		echo "serve.sh: $d: owned by uid $owner, not $(id -u): refused (another user may have made it)" >&2
		exit 1
	fi
	if [ $((8#$mode & 8#077)) != 0 ]; then
		echo "serve.sh: $d: mode $mode: others may enter it: refused (chmod 700 it)" >&2
		exit 1
	fi
}
[ $tcp = 1 ] || private_dir "$dir"
logs=${MEDHA_LOG:-$(mktemp -d)}
mkdir -p "$logs"

# url N: the N-th address of this topology (0: the front door)
url() {
	if [ $tcp = 1 ]; then
		echo "tcp://127.0.0.1:$((port + $1))"
	elif [ "$1" = 0 ]; then
		echo "ipc://$dir/$topo.sock"
	else
		echo "ipc://$dir/$topo-r$(($1 - 1)).sock"
	fi
}

# the processes: pids[i] runs cmds[i] (a quoted command line), its
# stderr appended to $logs/${names[i]}.log; born[i] is when it started,
# quick[i] how many times in a row it ended within 10 s of that
pids=()
cmds=()
names=()
born=()
quick=()
ready_logs=()

# spawn I: start process I (again)
spawn() {
	eval "exec ${cmds[$1]}" 2>>"$logs/${names[$1]}.log" &
	pids[$1]=$!
	born[$1]=$SECONDS
	echo "$!" >"$logs/${names[$1]}.pid"
}

# proc NAME COMMAND...: a new process; sets $last to its index
proc() {
	last=${#cmds[@]}
	names[last]=$1
	shift
	cmds[last]=$(printf '%q ' "$@")
	quick[last]=0
	: >"$logs/${names[last]}.log"
	spawn "$last"
}

stop() {
	trap - INT TERM EXIT
	# the router first, while its replicas still answer: nng 1.5 may
	# block for ever closing a connection whose server went away first
	if [ -n "${router_idx:-}" ]; then
		kill -TERM "${pids[router_idx]}" 2>/dev/null
		wait "${pids[router_idx]}" 2>/dev/null
	fi
	[ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	exit "${1:-0}"
}
trap 'stop 0' INT TERM
trap 'stop 1' EXIT

need_model() {
	[ -s "$model" ] && return
	# cuda runs a shape name (llama3-8b) with random weights
	if [ "$backend" = cuda ]; then
		case $model in */* | *.gguf) ;; *) return ;; esac
	fi
	echo "serve.sh: $model: no such model (run contrib/fetch-refs.sh or set MEDHA_MODEL)" >&2
	exit 1
}

# gpu_flags S N R: the flags of cuda worker R of a replica's N, one of S
# sharing the GPU (MEDHA_BACKEND=cuda), into the array bflags: with nng,
# they share MEDHA_DEVICE, each its part of the memory; with nccl,
# worker R has device MEDHA_DEVICE + R to itself (NCCL puts one rank on
# a GPU)
gpu_flags() {
	local dev=${MEDHA_DEVICE:-0} share
	bflags=()
	[ "$backend" = cuda ] || return 0
	share=$(awk -v n="$1" 'BEGIN { printf "%.3f", 0.9 / n }')
	if [ "$2" -gt 1 ] && [ "${MEDHA_COLL:-nng}" = nccl ]; then
		dev=$((dev + $3))
		share=0.9
	fi
	bflags=(--backend cuda --device "$dev" --mem-util
	    "${MEDHA_MEM_UTIL:-$share}")
	[ "$2" -gt 1 ] && bflags+=(--coll "${MEDHA_COLL:-nng}")
	return 0
}

# replica NAME ADDR cpu|sim THREADS [TP SPP KVP [SCHED_FLAGS...]]: a
# scheduler and its tp * spp * kvp workers (logs NAME.log,
# NAME-workerR.log); cpu is MEDHA_BACKEND's, of which the topology has
# $gpu_workers on the GPU
replica() {
	local name=$1 addr=$2 kind=$3 threads=$4 tp=${5:-1} spp=${6:-1}
	local kvp=${7:-1} n r bflags
	shift 7 2>/dev/null || shift $#
	n=$((tp * spp * kvp))
	# the scheduler reads the model itself (-m): it opens no file a
	# worker names
	[ "$kind" = cpu ] && set -- -m "$model" "$@"
	proc "$name" "$bin/medha-sched" -l "$addr" --workers $n "$@" \
	    ${MEDHA_SCHED_OPTS:-}
	ready_logs+=("$logs/$name.log")
	for ((r = 0; r < n; r++)); do
		gpu_flags "${gpu_workers:-$n}" "$n" "$r"
		if [ "$kind" = cpu ]; then
			proc "$name-worker$r" "$bin/medha-worker" -s "$addr" \
			    -m "$model" -t "$threads" \
			    --tp $tp --spp $spp --kvp $kvp --rank $r \
			    "${bflags[@]}" ${MEDHA_WORKER_OPTS:-}
		else
			proc "$name-worker$r" "$bin/medha-worker" -s "$addr" \
			    --backend sim --gpu "${MEDHA_SIM_GPU:-a100}" \
			    -m "${MEDHA_SIM_MODEL:-llama3-8b}" \
			    --tp $tp --spp $spp --kvp $kvp --rank $r \
			    ${MEDHA_WORKER_OPTS:-}
		fi
	done
}

# router ADDR REPLICA_ADDR...
router() {
	local a=$1 r=()
	shift
	for x in "$@"; do r+=(-r "$x"); done
	# the model's tokenizer: text becomes token ids at the router, once
	[ "$topo" != sim ] && [ -s "$model" ] && r+=(-m "$model")
	[ -z "${MEDHA_HTTP:-}" ] || r+=(--http "$MEDHA_HTTP")
	proc router "$bin/medha-router" -l "$a" "${r[@]}" \
	    ${MEDHA_ROUTER_OPTS:-}
	router_idx=$last
	ready_logs+=("$logs/router.log")
}

case $topo in
single | sim)
	addr=${MEDHA_ADDR:-$(url 0)}
	kind=cpu
	[ $topo = sim ] && kind=sim
	[ $kind = cpu ] && need_model
	replica sched "$addr" $kind "${MEDHA_THREADS:-2}"
	where=$addr
	if [ -n "${MEDHA_ROUTER:-}${MEDHA_HTTP:-}" ]; then
		if [ $tcp = 1 ]; then
			front=${MEDHA_ROUTER:-tcp://127.0.0.1:$((port + 9))}
		else
			front=${MEDHA_ROUTER:-ipc://$dir/$topo-router.sock}
		fi
		router "$front" "$addr"
		where="$front (router) -> $addr"
	fi
	;;
tp2 | spp2 | kvp2 | kvp3 | tp2-spp2-kvp2)
	# one replica of cpu workers, the layout read from the name
	need_model
	tp=1 spp=1 kvp=1 kflags=()
	case $topo in *tp2*) tp=2 ;; esac
	case $topo in *spp2*) spp=2 ;; esac
	case $topo in *kvp[23]*)
		kvp=${topo##*kvp}
		kflags=(--kvp-max-tokens "${MEDHA_KVP_MAX_TOKENS:-256}")
		;;
	esac
	front=${MEDHA_ROUTER:-$(url 0)}
	replica sched "$(url 1)" cpu "${MEDHA_THREADS:-1}" $tp $spp $kvp \
	    "${kflags[@]}"
	router "$front" "$(url 1)"
	where="$front (router) -> $(url 1): tp $tp x spp $spp x kvp $kvp"
	;;
sim64)
	front=${MEDHA_ROUTER:-$(url 0)}
	MEDHA_SIM_GPU=${MEDHA_SIM_GPU:-h100} MEDHA_SIM_MODEL=${MEDHA_SIM_MODEL:-llama3-70b} \
	    MEDHA_WORKER_OPTS="--speed ${MEDHA_SIM_SPEED:-10} ${MEDHA_WORKER_OPTS:-}" \
	    replica sched "$(url 1)" sim 1 8 8 1
	router "$front" "$(url 1)"
	where="$front (router) -> $(url 1): 64 sim workers, tp 8 x spp 8"
	;;
two-replicas)
	need_model
	gpu_workers=2
	front=${MEDHA_ROUTER:-$(url 0)}
	replica sched0 "$(url 1)" cpu "${MEDHA_THREADS:-1}"
	replica sched1 "$(url 2)" cpu "${MEDHA_THREADS:-1}"
	router "$front" "$(url 1)" "$(url 2)"
	where="$front (router) -> $(url 1) $(url 2)"
	;;
*)
	echo "serve.sh: $topo: unknown topology" >&2
	echo "$usage" >&2
	exit 2
	;;
esac

[ -n "${MEDHA_HTTP:-}" ] && where="$where, HTTP at http://$MEDHA_HTTP"
[ "$backend" = cuda ] && case $topo in sim*) ;; *) where="$where, on the GPU" ;; esac
echo "serve.sh: $topo at $where, logs in $logs" >&2
# ready once every scheduler and the router say so; give up if a
# process dies first
all_ready() {
	for l in "${ready_logs[@]}"; do
		grep -q 'ready:' "$l" 2>/dev/null || return 1
	done
}
ready_s=${MEDHA_READY_TIMEOUT:-60}
[ "$backend" = cuda ] && ready_s=${MEDHA_READY_TIMEOUT:-180}
for _ in $(seq $((ready_s * 10))); do
	all_ready && break
	for p in "${pids[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "serve.sh: a process exited early:" >&2
			tail -n 5 "$logs"/*.log >&2
			stop 1
		fi
	done
	sleep 0.1
done
if ! all_ready; then
	echo "serve.sh: not ready after $ready_s s" >&2
	stop 1
fi
echo ready >&2
# wait for a signal; restart a process that ends on its own
while :; do
	for i in "${!pids[@]}"; do
		p=${pids[i]}
		kill -0 "$p" 2>/dev/null && continue
		wait "$p" 2>/dev/null
		st=$?
		[ $st -gt 128 ] && st="signal $((st - 128))" || st="status $st"
		echo "serve.sh: ${names[i]} (pid $p) ended ($st)" >&2
		if [ "${MEDHA_RESTART:-1}" = 0 ]; then
			tail -n 5 "$logs"/*.log >&2
			stop 1
		fi
		if [ $((SECONDS - born[i])) -lt 10 ]; then
			quick[i]=$((quick[i] + 1))
		else
			quick[i]=0
		fi
		if [ "${quick[i]}" -ge 3 ]; then
			echo "serve.sh: ${names[i]} ended 3 times within 10 s of its start; stopping" >&2
			tail -n 5 "$logs/${names[i]}.log" >&2
			stop 1
		fi
		spawn "$i"
		echo "serve.sh: ${names[i]} restarted (pid ${pids[i]})" >&2
	done
	sleep 0.5 &
	wait $! 2>/dev/null
done

#!/usr/bin/env bash
# netns-hosts.sh: medha across hosts on one Linux machine. Each host is a
# network namespace with one Ethernet port (eth0, 10.77.0.N/24), all
# joined by a bridge in a switch namespace (NAME-net), so that every link
# is a real tcp connection off loopback (the shared secret is required,
# medha-proto(7)) that can be slowed, made lossy, limited or cut:
#
#   netns-hosts.sh check             can namespaces be made here? (exit 1
#                                    with the reason if not)
#   netns-hosts.sh serve [NAME]      the deployment below, in the
#                                    foreground; "ready" on stderr once it
#                                    answers; SIGTERM or SIGINT stops every
#                                    process and removes the hosts
#   netns-hosts.sh up NAME HOST...   hosts alone (no programs)
#   netns-hosts.sh down NAME         remove NAME's hosts, ending what
#                                    runs on them and their fault programs
#   netns-hosts.sh clean             remove the hosts of runs whose owner
#                                    is gone (a killed earlier run)
#   netns-hosts.sh exec NAME HOST CMD...   run CMD on HOST
#   netns-hosts.sh ip NAME HOST      HOST's address
#   netns-hosts.sh shape NAME HOST DELAY JITTER LOSS
#                                    HOST's link (HOST,HOST...: each
#                                    one's) adds DELAY +- JITTER ms
#                                    each way and drops LOSS percent of the
#                                    frames (tests/tools/netfault between
#                                    the host's port and the bridge; the
#                                    kernel has no netem here)
#   netns-hosts.sh cut NAME HOST [PEER...]   a partition: HOST's link
#                                    drops everything (or only what goes
#                                    to or comes from the PEERs)
#   netns-hosts.sh rate NAME HOST RATE  HOST's link limited to RATE
#                                    (tc tbf, each way: 100mbit)
#   netns-hosts.sh heal NAME HOST    HOST's link as it was (HOST,HOST...:
#                                    each one's)
#
# serve's deployment (ports from MEDHA_PORT, 7000): host router runs
# medha-router (port +0) in front of two replicas, host sa's scheduler
# (port +1) with eight workers of tp 2 x spp 2 x kvp 2 on hosts w0 to w3
# (two TP ranks on each host, a pipeline stage and a KVP group per host:
# w0 stage 0 group 0, w1 stage 1 group 0, w2 stage 0 group 1, w3 stage 1
# group 1; SPP links w0-w1 and w2-w3, KVP links w0-w2 and w1-w3), and host
# sb's scheduler with one worker beside it. It prints the addresses:
#
#   netns-hosts.sh: NAME: router tcp://10.77.0.10:7000 (on host router), ...
#
# Clients run on a host (exec NAME router medha-trace replay -a ...).
#
# Environment (serve): MEDHA_BIN (bin/), MEDHA_MODEL (the cache's
# SmolLM2), MEDHA_LOG (a directory for NAME.log of each process: router,
# sched-a, sched-b, worker-aR, worker-b; a temporary one), MEDHA_PORT,
# MEDHA_SECRET_FILE (else one is made in the log directory),
# MEDHA_KVP_MAX_TOKENS (256), MEDHA_THREADS (1 per worker),
# MEDHA_SCHED_OPTS, MEDHA_WORKER_OPTS, MEDHA_ROUTER_OPTS (more flags),
# MEDHA_READY_TIMEOUT (seconds, 120), MEDHA_RESTART (0: a process that
# ends is not restarted; default 1, as serve.sh). MEDHA_NETFAULT: the netfault
# program (build/tests/tools/netfault: make test, or make
# build/tests/tools/netfault, builds it).
#
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 (ip, tc) and
# /dev/net/tun. State (the owner's pid, the hosts, the fault programs)
# is kept in /run/medha-netns. Exit status: 0, 1 on error, 2 on bad usage.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
state=/run/medha-netns
subnet=10.77.0
netfault=${MEDHA_NETFAULT:-$top/build/tests/tools/netfault}

die() {
	echo "netns-hosts.sh: $*" >&2
	exit 1
}
usage() {
	sed -n '/^#   netns-hosts.sh check/,/^# serve.s deployment/{/^# serve/d;s/^#//;p}' "$0" >&2
	exit 2
}

# ns NAME HOST: the namespace of HOST
ns() { echo "$1-$2"; }

# host_ip NAME HOST: HOST's address, or fail
host_ip() {
	local h a
	[ -f "$state/$1.hosts" ] || die "$1: no such hosts (up or serve first)"
	while read -r h a; do
		[ "$h" = "$2" ] && { echo "$a"; return 0; }
	done <"$state/$1.hosts"
	die "$1: no host $2"
}

# check: namespaces, a bridge, veths, a tap and tbf can be made here
check() {
	local t=mhchk$$ ok=1 why
	[ "$(id -u)" = 0 ] || die "not root: namespaces need CAP_SYS_ADMIN"
	command -v ip >/dev/null || die "no ip (iproute2)"
	command -v tc >/dev/null || die "no tc (iproute2)"
	[ -c /dev/net/tun ] || die "no /dev/net/tun"
	why=$( {
		ip netns add $t &&
		    ip -n $t link add br0 type bridge &&
		    ip -n $t link add va type veth peer name vb &&
		    ip -n $t tuntap add mode tap name t0 &&
		    ip -n $t link set va up && ip -n $t link set vb up &&
		    ip netns exec $t tc qdisc add dev va root tbf rate 100mbit \
		    burst 32kb latency 100ms
	} 2>&1) || ok=0
	ip netns del $t 2>/dev/null
	[ $ok = 1 ] || die "cannot make network namespaces here: $why"
}

# down NAME: stop NAME's fault programs, remove its namespaces
down() {
	local f p n nss
	for f in "$state/$1".nf-*.pid; do
		[ -f "$f" ] || continue
		p=$(cat "$f")
		kill -TERM "$p" 2>/dev/null
		rm -f "$f"
	done
	# what still runs on the hosts (a run killed before it stopped its
	# programs): SIGTERM, SIGKILL after 5 s
	nss=$(ip netns list | awk -v p="$1-" 'index($1, p) == 1 { print $1 }')
	for n in $nss; do
		# shellcheck disable=SC2046 # a pid a word
		kill -TERM $(ip netns pids "$n") 2>/dev/null
	done
	for _ in $(seq 50); do
		p=
		for n in $nss; do p=$p$(ip netns pids "$n"); done
		[ -z "$p" ] && break
		sleep 0.1
	done
	for n in $nss; do
		# shellcheck disable=SC2046
		kill -KILL $(ip netns pids "$n") 2>/dev/null
		ip netns del "$n" 2>/dev/null
	done
	rm -f "$state/$1.hosts" "$state/$1.owner" "$state/$1".nf-*.log
}

# proc_id PID: PID and its start time (so that a later process given
# the same pid is not taken for it); nothing for a zombie or none
proc_id() {
	local st
	st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 0
	set -- "$1" $st
	[ "$2" = Z ] || echo "$1 ${21}"
}

# clean: down every NAME whose owner process is gone
clean() {
	local f o name
	for f in "$state"/*.owner; do
		[ -f "$f" ] || continue
		o=$(cat "$f")
		name=$(basename "$f" .owner)
		[ "$(proc_id "${o%% *}")" = "$o" ] && continue
		echo "netns-hosts.sh: $name: its owner (pid ${o%% *}) is gone: removed" >&2
		down "$name"
	done
}

# up NAME OWNER HOST...: the switch NAME-net (bridge br0) and a namespace
# per HOST, its eth0 at 10.77.0.(10 + index) joined to br0 by port p-HOST
up() {
	local name=$1 owner=$2 i=10 h n
	shift 2
	case $name in *[!a-z0-9]* | "") die "$name: a name of [a-z0-9] (at most 8)" ;; esac
	[ ${#name} -le 8 ] || die "$name: at most 8 characters"
	mkdir -p "$state"
	[ -f "$state/$name.hosts" ] && die "$name: up already (down $name first)"
	proc_id "$owner" >"$state/$name.owner"
	: >"$state/$name.hosts"
	n=$(ns "$name" net)
	ip netns add "$n" || die "$name: cannot make $n"
	ip -n "$n" link set lo up
	ip -n "$n" link add br0 type bridge
	ip -n "$n" link set br0 up
	for h in "$@"; do
		case $h in *[!a-z0-9]* | "" | net) die "$h: a host name of [a-z0-9], not net" ;; esac
		[ ${#h} -le 10 ] || die "$h: at most 10 characters"
		ip netns add "$(ns "$name" "$h")" || die "$name: cannot make host $h"
		ip -n "$n" link add "p-$h" type veth peer name eth0 \
		    netns "$(ns "$name" "$h")"
		ip -n "$n" link set "p-$h" master br0 up
		ip -n "$(ns "$name" "$h")" link set lo up
		ip -n "$(ns "$name" "$h")" addr add "$subnet.$i/24" dev eth0
		ip -n "$(ns "$name" "$h")" link set eth0 up
		echo "$h $subnet.$i" >>"$state/$name.hosts"
		i=$((i + 1))
	done
}

# heal NAME HOST: HOST's port back on br0, its fault program stopped,
# its taps and tbf gone
heal() {
	local n p pidf
	n=$(ns "$1" net)
	host_ip "$1" "$2" >/dev/null
	ip -n "$n" link set "p-$2" master br0 2>/dev/null
	pidf=$state/$1.nf-$2.pid
	if [ -f "$pidf" ]; then
		p=$(cat "$pidf")
		kill -TERM "$p" 2>/dev/null
		# until it has ended: a zombie has (its parent, the shape
		# that started it, is gone; whoever inherits it may reap it
		# only seconds later: kill -0 would wait for that)
		for _ in $(seq 50); do
			[ -n "$(proc_id "$p")" ] || break
			sleep 0.1
		done
		rm -f "$pidf"
	fi
	ip -n "$n" link del "ta-$2" 2>/dev/null
	ip -n "$n" link del "tb-$2" 2>/dev/null
	ip -n "$n" link del "b-$2" 2>/dev/null
	ip netns exec "$n" tc qdisc del dev "p-$2" root 2>/dev/null
	ip netns exec "$(ns "$1" "$2")" tc qdisc del dev eth0 root 2>/dev/null
	return 0
}

# netfault_on NAME HOST FLAGS...: HOST's port moved off br0 onto a bridge
# of its own (b-HOST) with tap ta-HOST; netfault FLAGS carries frames
# between ta-HOST and tb-HOST, a port of br0
netfault_on() {
	local name=$1 h=$2 n p
	shift 2
	n=$(ns "$name" net)
	[ -x "$netfault" ] || die "no $netfault (make build/tests/tools/netfault)"
	heal "$name" "$h"
	ip -n "$n" link add "b-$h" type bridge
	ip -n "$n" tuntap add mode tap name "ta-$h"
	ip -n "$n" tuntap add mode tap name "tb-$h"
	ip netns exec "$n" "$netfault" "$@" "ta-$h" "tb-$h" \
	    2>>"$state/$name.nf-$h.log" &
	p=$!
	echo $p >"$state/$name.nf-$h.pid"
	# the taps have a carrier once netfault holds them
	for _ in $(seq 50); do
		ip -n "$n" link show "ta-$h" | grep -q NO-CARRIER || break
		kill -0 $p 2>/dev/null || die "netfault for $h ended: $(tail -n 1 "$state/$name.nf-$h.log")"
		sleep 0.1
	done
	ip -n "$n" link set "ta-$h" master "b-$h" up
	ip -n "$n" link set "tb-$h" master br0 up
	ip -n "$n" link set "b-$h" up
	# the move is the fault's start: nothing crossed netfault before it
	ip -n "$n" link set "p-$h" master "b-$h"
}

# serve NAME: the deployment; stops and removes everything on exit
serve() {
	local name=$1 bin=${MEDHA_BIN:-$top/bin} port=${MEDHA_PORT:-7000}
	local model=${MEDHA_MODEL:-$top/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
	local logs=${MEDHA_LOG:-} secret=${MEDHA_SECRET_FILE:-} r h
	local t=${MEDHA_THREADS:-1} ra rr rb i
	pids=() names=() cmds=()
	[ -s "$model" ] || die "$model: no such model (run contrib/fetch-refs.sh or set MEDHA_MODEL)"
	[ -n "$logs" ] || logs=$(mktemp -d)
	mkdir -p "$logs"
	if [ -z "$secret" ]; then
		secret=$logs/secret
		(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret")
	fi
	export MEDHA_SECRET_FILE=$secret
	# from here on, whatever happens, the processes and hosts go
	trap 'serve_stop 1' EXIT
	trap 'serve_stop 0' INT TERM HUP
	up "$name" $$ router sa sb w0 w1 w2 w3 || exit 1
	ra=tcp://$(host_ip "$name" router):$port
	rr=tcp://$(host_ip "$name" sa):$((port + 1))
	rb=tcp://$(host_ip "$name" sb):$((port + 1))
	# start HOST NAME CMD...: CMD on HOST, its stderr appended to
	# $logs/NAME.log; spawn I (re)starts process I
	start() {
		local h=$1 nm=$2
		shift 2
		names+=("$nm")
		cmds+=("$(printf '%q ' ip netns exec "$(ns "$name" "$h")" "$@")")
		: >"$logs/$nm.log"
		spawn $((${#names[@]} - 1))
	}
	spawn() {
		eval "exec ${cmds[$1]}" 2>>"$logs/${names[$1]}.log" &
		pids[$1]=$!
	}
	start sa sched-a "$bin/medha-sched" -l "$rr" --workers 8 -m "$model" \
	    --kvp-max-tokens "${MEDHA_KVP_MAX_TOKENS:-256}" ${MEDHA_SCHED_OPTS:-}
	start sb sched-b "$bin/medha-sched" -l "$rb" --workers 1 -m "$model" \
	    ${MEDHA_SCHED_OPTS:-}
	for r in 0 1 2 3 4 5 6 7; do
		h=w$((r / 2))
		start "$h" "worker-a$r" "$bin/medha-worker" -s "$rr" -m "$model" \
		    -t "$t" --tp 2 --spp 2 --kvp 2 --rank $r \
		    --peer "tcp://$(host_ip "$name" "$h"):0" ${MEDHA_WORKER_OPTS:-}
	done
	start sb worker-b "$bin/medha-worker" -s "$rb" -m "$model" -t "$t" \
	    ${MEDHA_WORKER_OPTS:-}
	start router router "$bin/medha-router" -l "$ra" -r "$rr" -r "$rb" \
	    ${MEDHA_ROUTER_OPTS:-}
	router_idx=$((${#pids[@]} - 1))
	echo "netns-hosts.sh: $name: router $ra (on host router), replicas $rr (tp 2 x spp 2 x kvp 2 on w0-w3) and $rb (one worker), secret $secret, logs in $logs" >&2
	for _ in $(seq $((${MEDHA_READY_TIMEOUT:-120} * 10))); do
		grep -q "ready" "$logs/router.log" 2>/dev/null && grep -q 'ready:' "$logs/sched-a.log" &&
		    grep -q 'ready:' "$logs/sched-b.log" &&
		    grep -q "$rr: ready" "$logs/router.log" &&
		    grep -q "$rb: ready" "$logs/router.log" && break
		for i in "${!pids[@]}"; do
			kill -0 "${pids[i]}" 2>/dev/null ||
			    die "${names[i]} ended before ready: $(tail -n 3 "$logs/${names[i]}.log")"
		done
		sleep 0.1
	done
	grep -q "$rb: ready" "$logs/router.log" ||
	    die "not ready after ${MEDHA_READY_TIMEOUT:-120} s (logs in $logs)"
	echo ready >&2
	# a process that ends is said, and restarted unless MEDHA_RESTART is
	# 0 (as examples/serve.sh does)
	local st
	while :; do
		for i in "${!pids[@]}"; do
			[ -z "${pids[i]}" ] && continue
			kill -0 "${pids[i]}" 2>/dev/null && continue
			wait "${pids[i]}" 2>/dev/null
			st=$?
			echo "netns-hosts.sh: ${names[i]} (pid ${pids[i]}) ended (status $st)" >&2
			if [ "${MEDHA_RESTART:-1}" = 0 ]; then
				pids[i]=
				continue
			fi
			spawn "$i"
			echo "netns-hosts.sh: ${names[i]} restarted (pid ${pids[i]})" >&2
		done
		sleep 0.5 &
		wait $! 2>/dev/null
	done
}

# serve_stop STATUS: the router first (while its replicas answer), then
# every other process (SIGKILL after 10 s), then the hosts
serve_stop() {
	local p
	trap - EXIT INT TERM HUP
	[ -n "${router_idx:-}" ] && kill -TERM "${pids[router_idx]}" 2>/dev/null
	# shellcheck disable=SC2068 # a pid a word; ended ones are empty
	[ ${#pids[@]} -gt 0 ] && kill -TERM ${pids[@]} 2>/dev/null
	for _ in $(seq 100); do
		p=0
		# shellcheck disable=SC2068
		for x in ${pids[@]}; do kill -0 "$x" 2>/dev/null && p=1; done
		[ $p = 0 ] && break
		sleep 0.1
	done
	# shellcheck disable=SC2068
	[ ${#pids[@]} -gt 0 ] && kill -KILL ${pids[@]} 2>/dev/null
	wait 2>/dev/null
	down "$name"
	exit "$1"
}

cmd=${1:-}
[ $# -ge 1 ] && shift
case $cmd in
check)
	[ $# = 0 ] || usage
	check
	;;
clean)
	[ $# = 0 ] || usage
	clean
	;;
serve)
	[ $# -le 1 ] || usage
	[ "$(id -u)" = 0 ] || die "not root: namespaces need CAP_SYS_ADMIN"
	clean
	name=${1:-mh$$}
	serve "$name"
	;;
up)
	[ $# -ge 2 ] || usage
	clean
	name=$1
	shift
	# the hosts outlive this command: their owner is the caller
	up "$name" $PPID "$@" || { down "$name"; exit 1; }
	cat "$state/$name.hosts"
	;;
down)
	[ $# = 1 ] || usage
	down "$1"
	;;
exec)
	[ $# -ge 3 ] || usage
	host_ip "$1" "$2" >/dev/null
	n=$(ns "$1" "$2")
	shift 2
	exec ip netns exec "$n" "$@"
	;;
ip)
	[ $# = 2 ] || usage
	host_ip "$1" "$2"
	;;
shape)
	[ $# = 5 ] || usage
	for h in ${2//,/ }; do
		netfault_on "$1" "$h" -d "$3" -j "$4" -l "$5" -s $$
	done
	;;
cut)
	[ $# -ge 2 ] || usage
	name=$1 h=$2
	shift 2
	if [ $# = 0 ]; then
		netfault_on "$name" "$h" -l 100
	else
		x=()
		for p in "$@"; do x+=(-x "$(host_ip "$name" "$p")"); done
		netfault_on "$name" "$h" "${x[@]}"
	fi
	;;
rate)
	[ $# = 3 ] || usage
	heal "$1" "$2"
	# each way: the host's egress and the switch's toward it
	ip netns exec "$(ns "$1" "$2")" tc qdisc add dev eth0 root tbf \
	    rate "$3" burst 64kb latency 200ms || exit 1
	ip netns exec "$(ns "$1" net)" tc qdisc add dev "p-$2" root tbf \
	    rate "$3" burst 64kb latency 200ms || exit 1
	;;
heal)
	[ $# = 2 ] || usage
	for h in ${2//,/ }; do
		heal "$1" "$h"
	done
	;;
*)
	usage
	;;
esac

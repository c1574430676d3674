# shellcheck shell=sh disable=SC2034 # the paths are for the tests
# lib.sh: what the shell tests share. A test sources it first:
#
#	. "$(dirname "$0")/lib.sh"
#
# and then has set -e, a fresh temporary directory $tmp, and a cleanup at
# exit (pass, failure or signal) that ends every process the test started
# (its descendants, and whatever runs with $tmp in its command line, for
# those a killed parent left behind), then removes $tmp. A test therefore
# need not track what it started to clean up after a failed assertion;
# it still stops its processes itself where the stopping is under test.
#
# Paths (environment variables override them; tests/run.sh sets the
# first two):
#	bin      the programs (MEDHA_BIN, default bin/)
#	tests    the unit-test programs (MEDHA_TESTS, default build/tests/)
#	tools    the helper programs of tests/tools/ ($tests/tools)
#	contrib  contrib's built programs (MEDHA_CONTRIB, default
#	         $tests/../contrib, where make contrib puts them)
#	top      the repository
#	cache    what contrib/fetch-refs.sh fills (MEDHA_CACHE, default cache/)
#	smollm2  the real model, SmolLM2-135M-Instruct Q4_1, in the cache
#	model    the model of the live tests (MEDHA_MODEL, default $smollm2)
#	py       the cache's Python with the references (MEDHA_PY)
#
# Skips: a test that cannot run (no model, no Python package, no tool)
# calls skip REASON: it prints "skip: REASON" and exits 77, which
# tests/run.sh counts as a skip. A part that cannot run, in a test that
# goes on, prints a "skip: REASON" line and carries on (run.sh shows it
# under the test's result).
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
tests=${MEDHA_TESTS:-$top/build/tests}
tools=$tests/tools
contrib=${MEDHA_CONTRIB:-$tests/../contrib}
cache=${MEDHA_CACHE:-$top/cache}
smollm2=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
model=${MEDHA_MODEL:-$smollm2}
py=${MEDHA_PY:-$cache/venv/bin/python}
# the references' numpy products are of a few hundred tokens at most: one
# BLAS thread (OpenBLAS's threads spin, and on a busy 2-core machine two
# of them take four times as long as one)
OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS
tmp=$(mktemp -d)

# ---- cleanup ----

# lib_procs: the processes this test started, one pid a line: the
# descendants of this shell, and those with $tmp in their command line
# (orphans whose parent was killed). It lists the subshell it runs in
# too, gone by the time anyone signals it.
lib_procs() {
	ps -e -o pid=,ppid= | awk -v root=$$ '
	    { parent[$1] = $2 }
	    END {
		for (p in parent) {
			q = parent[p]
			while (q != root && q in parent && q > 1)
				q = parent[q]
			if (q == root)
				print p
		}
	    }'
	pgrep -f -- "$tmp" || :
}

# lib_cleanup: at exit, SIGTERM (and SIGCONT, for the stopped) to every
# process the test started; SIGKILL to those left after 5 s; then $tmp
# goes. The exit status is the test's.
lib_cleanup() {
	lib_st=$?
	set +e
	trap - EXIT HUP INT TERM
	lib_pids=$(lib_procs | sort -u)
	# shellcheck disable=SC2086 # $lib_pids: one argument a pid
	if [ -n "$lib_pids" ]; then
		kill -CONT $lib_pids 2>/dev/null
		kill -TERM $lib_pids 2>/dev/null
		lib_i=0
		while [ $lib_i -lt 50 ] && kill -0 $lib_pids 2>/dev/null; do
			sleep 0.1
			lib_i=$((lib_i + 1))
		done
		# what is left, or was started meanwhile (serve.sh restarts)
		lib_pids=$(lib_procs | sort -u)
		[ -z "$lib_pids" ] || kill -KILL $lib_pids 2>/dev/null
	fi
	wait 2>/dev/null
	rm -rf "$tmp"
	exit $lib_st
}
trap lib_cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- skips ----

# skip REASON: this test cannot run; say why, and exit 77 (a skip)
skip() {
	echo "skip: $*"
	exit 77
}

# need_model [FILE]: skip without FILE (default $model)
need_model() {
	[ -s "${1:-$model}" ] ||
	    skip "${1:-$model} missing (run contrib/fetch-refs.sh)"
}

# has_py MODULE...: the cache's Python is there and imports every MODULE
has_py() {
	[ -x "$py" ] || return 1
	"$py" -c "import $(echo "$*" | sed 's/ /, /g')" 2>/dev/null
}

# need_py MODULE...: skip unless has_py MODULE...
need_py() {
	[ -x "$py" ] || skip "no $py (run contrib/fetch-refs.sh)"
	has_py "$@" ||
	    skip "$* missing in $py (run contrib/fetch-refs.sh)"
}

# ---- processes ----

# free_port: a TCP port free on 127.0.0.1 now
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for FILE PATTERN [SECONDS [PID]]: until FILE has a line matching
# PATTERN (grep); fail after SECONDS (60), or once PID has ended,
# showing FILE and the logs under $tmp
wait_for() {
	lib_i=0
	lib_n=$((${3:-60} * 10))
	until grep -q -- "$2" "$1" 2>/dev/null; do
		lib_i=$((lib_i + 1))
		if [ $lib_i -gt $lib_n ]; then
			echo "no \"$2\" in $1 after ${3:-60} s"
			lib_show "$1"
			exit 1
		fi
		if [ -n "$4" ] && ! kill -0 "$4" 2>/dev/null; then
			echo "no \"$2\" in $1: pid $4 ended"
			lib_show "$1"
			exit 1
		fi
		sleep 0.1
	done
}

# lib_show FILE: FILE, and the last lines of the logs under $tmp
lib_show() {
	cat "$1" 2>/dev/null
	for lib_f in "$tmp"/*.log "$tmp"/logs*/*.log; do
		if [ ! -f "$lib_f" ] || [ "$lib_f" = "$1" ]; then
			continue
		fi
		echo "--- $lib_f:"
		tail -n 20 "$lib_f"
	done
}

# serve_start TOPOLOGY SECONDS [VAR=VALUE...]: examples/serve.sh
# TOPOLOGY in the background with MEDHA_BIN=$bin, TMPDIR=$tmp (its
# private run directory, medha-UID, in the test's) and the VARs, its
# stderr in $tmp/serve.err and its pid in $serve, until it says "ready"
# (fail after SECONDS, or if it ends first)
serve_start() {
	lib_topo=$1
	lib_secs=$2
	shift 2
	# emptied here, not by the redirection below: that one happens in
	# the child, maybe after wait_for has read a previous run's "ready"
	: >"$tmp/serve.err"
	env MEDHA_BIN="$bin" TMPDIR="$tmp" "$@" bash "$top/examples/serve.sh" "$lib_topo" \
	    2>>"$tmp/serve.err" &
	serve=$!
	wait_for "$tmp/serve.err" '^ready$' "$lib_secs" "$serve"
}

# serve_stop: SIGTERM to serve.sh, and wait until it has stopped its
# topology
serve_stop() {
	kill -TERM "$serve"
	wait "$serve" || true
	serve=
}

# topo_start TOPOLOGY [MODEL [VAR=VALUE...]]: serve_start TOPOLOGY (a
# router at $tmp/router.sock in front) on MODEL (default $model), its
# logs in $tmp/logs-TOPOLOGY
topo_start() {
	lib_topo=$1
	lib_m=${2:-$model}
	shift
	[ $# -gt 0 ] && shift
	serve_start "$lib_topo" 90 MEDHA_ROUTER="ipc://$tmp/router.sock" \
	    MEDHA_MODEL="$lib_m" MEDHA_LOG="$tmp/logs-$lib_topo" \
	    MEDHA_ADDR="ipc://$tmp/single.sock" "$@"
}

# topo_stop: SIGTERM stops serve.sh and every process of its topology;
# fail if any is left
topo_stop() {
	serve_stop
	if pgrep -f "$tmp" >/dev/null; then
		echo "processes left after SIGTERM:"
		pgrep -fa "$tmp"
		exit 1
	fi
}

# topo_compare TOPOLOGY MODEL TRACE [VAR=VALUE...]: TRACE's requests
# (tests/ref/solo.py trace) through the topology on MODEL, each exactly
# the tokens medha-worker -p gives alone (solo.py check; fail if not)
topo_compare() {
	lib_topo=$1
	lib_m=$2
	lib_t=$3
	shift 3
	topo_start "$lib_topo" "$lib_m" "$@"
	"$bin/medha-trace" replay -a "ipc://$tmp/router.sock" --token-ids \
	    "$lib_t" >"$tmp/out.jsonl"
	topo_stop
	python3 "$top/tests/ref/solo.py" check "$lib_t" "$tmp/out.jsonl" \
	    "$bin/medha-worker" "$lib_m" "$lib_topo"
}

# topo_add NAME TOPOLOGY MODEL TRACE [VAR=VALUE...]: what topo_compare
# checks, gathered: TOPOLOGY (examples/serve.sh) on MODEL started in the
# background, with the VARs, until it says "ready" (90 s; one at a time:
# a dozen workers loading at once on two loaded cores have had their
# HELLOs time out, and the replica then lost them), and left running:
# its run directory under $tmp/NAME, its router at
# $tmp/NAME/router.sock (for single with MEDHA_ROUTER= among the VARs,
# none: its scheduler at $tmp/NAME/single.sock), its logs in
# $tmp/logs-NAME, serve.sh's stderr in $tmp/serve-NAME.err.
# topo_replay_all or topo_compare_all then takes every one added since
# the last. NAME: a file name, unique among them
topo_add() {
	lib_n=$1 lib_topo=$2 lib_m=$3 lib_t=$4
	shift 4
	mkdir "$tmp/$lib_n"
	env MEDHA_BIN="$bin" TMPDIR="$tmp/$lib_n" \
	    MEDHA_ROUTER="ipc://$tmp/$lib_n/router.sock" MEDHA_MODEL="$lib_m" \
	    MEDHA_LOG="$tmp/logs-$lib_n" \
	    MEDHA_ADDR="ipc://$tmp/$lib_n/single.sock" \
	    "$@" bash "$top/examples/serve.sh" "$lib_topo" \
	    2>"$tmp/serve-$lib_n.err" &
	echo "$lib_n $! $lib_topo $lib_m $lib_t" >>"$tmp/added"
	wait_for "$tmp/serve-$lib_n.err" '^ready$' 90 $!
}

# topo_replay_all: each topology of topo_add given its TRACE (replayed
# with --token-ids), all at once, its records in $tmp/out-NAME.jsonl;
# then all stopped by SIGTERM (fail if any process is left). They share
# the cores, which moves when a batch runs, not what it computes: a
# request's tokens do not depend on its batch (topo_compare_all checks
# it). Where a check depends on speed (how many requests find a prefix
# cached, or are preempted), give its topology the machine alone
topo_replay_all() {
	lib_pids=
	lib_r=
	while read -r lib_n lib_p lib_topo lib_m lib_t; do
		lib_pids="$lib_pids $lib_p"
		lib_a=$tmp/$lib_n/router.sock
		[ -S "$lib_a" ] || lib_a=$tmp/$lib_n/single.sock
		"$bin/medha-trace" replay -a "ipc://$lib_a" --token-ids \
		    "$lib_t" </dev/null >"$tmp/out-$lib_n.jsonl" &
		lib_r="$lib_r $!"
	done <"$tmp/added"
	for lib_p in $lib_r; do
		wait "$lib_p"
	done
	# shellcheck disable=SC2086 # a pid a word
	kill -TERM $lib_pids
	for lib_p in $lib_pids; do
		wait "$lib_p" || :
	done
	if pgrep -f "$tmp" >/dev/null; then
		echo "processes left after SIGTERM:"
		pgrep -fa "$tmp"
		exit 1
	fi
	mv "$tmp/added" "$tmp/replayed"
}

# topo_compare_all: topo_replay_all, then each request of each topology
# exactly the tokens medha-worker -p gives alone (solo.py check; fail
# if not)
topo_compare_all() {
	topo_replay_all
	lib_bad=0
	while read -r lib_n lib_p lib_topo lib_m lib_t; do
		python3 "$top/tests/ref/solo.py" check "$lib_t" \
		    "$tmp/out-$lib_n.jsonl" "$bin/medha-worker" "$lib_m" \
		    "$lib_topo" || lib_bad=1
	done <"$tmp/replayed"
	[ $lib_bad = 0 ]
}

# ---- checks ----

# no_sanitizer_report FILE...: none of the FILEs (logs, stderr) holds an
# AddressSanitizer, LeakSanitizer or UBSan report (make asan); else show
# them and fail
# harness_make TARGET...: make TARGET (the GPU test harness: simt,
# cuda-mock) into this build ($tests/..), quietly; its output shown if
# it fails, and the test with it
harness_make() {
	make -s --no-print-directory -C "$top" BUILD="$(dirname "$tests")" \
	    "$@" >"$tmp/make.log" 2>&1 || {
		cat "$tmp/make.log"
		echo "make $*: failed"
		exit 1
	}
}

# cuda_mock_need: skip unless libmedha.a has the cuda backend and the
# CUDA headers are there (sets lib and cuda)
cuda_mock_need() {
	lib=$tests/../libmedha.a
	[ -f "$lib" ] && ar t "$lib" | grep -q '^backend_cuda\.o$' ||
		skip "no cuda backend in $lib (CUDA=0, or nvcc not found)"
	cuda=${CUDA_HOME:-/usr/local/cuda}
	[ -f "$cuda/include/cublasLt.h" ] ||
		skip "no $cuda/include/cublasLt.h"
}

# cuda_mock_build: make cuda-mock (after cuda_mock_need); mock is the
# folder of its programs and libraries (backend_cuda_test,
# libcublasLt.so.13, libnccl.so.2, bin/medha-worker, bin/medha-prof):
# run them with LD_LIBRARY_PATH=$mock
cuda_mock_build() {
	harness_make cuda-mock
	mock=$(cd "$tests/.." && pwd)/tests/gpu/mock
}

no_sanitizer_report() {
	if grep -l 'Sanitizer\|runtime error' "$@"; then
		grep -h -A12 'Sanitizer\|runtime error' "$@" | head -60
		exit 1
	fi
}

# expect_status CODE CMD...: CMD, its stdin from $stdin (default
# /dev/null), exits with CODE; its stdout is left in $tmp/out and its
# stderr in $tmp/err; else say so (naming the program by its base name)
# and fail
expect_status() {
	lib_code=$1
	shift
	lib_st=0
	"$@" <"${stdin:-/dev/null}" >"$tmp/out" 2>"$tmp/err" || lib_st=$?
	if [ "$lib_st" -ne "$lib_code" ]; then
		lib_prog=$(basename "$1")
		shift
		echo "$lib_prog $*: status $lib_st, want $lib_code"
		cat "$tmp/err"
		exit 1
	fi
}

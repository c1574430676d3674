#!/bin/sh
# man-examples.sh: the examples of every man page (man/*.1, *.5, *.7,
# their EXAMPLES sections), run as written. Each literal block becomes
# one script (mdoc's \e a backslash; in a block of "$ " lines, those are
# the commands and the rest their output), run from a directory where
# the file names the pages use exist (the model as
# SmolLM2-135M-Instruct.Q4_1.gguf, model.gguf and cache/models/..., a
# trace.jsonl of text prompts, examples/), with bin/ first in PATH.
# What cannot run as written here is changed only where it must be and
# says so: /tmp/ becomes the test's own directory (two jobs on one
# machine would share /tmp's sockets), port 8000 a free port.
#
# How each block is run is in the table below, by PAGE.N (N from 1 in
# the order of the page):
#   run S       the block, which must exit 0 within S seconds
#   serve S     a block that starts servers (its commands end in &, or
#               never end): it must not fail within S seconds, then it is
#               stopped
#   gpu         needs a CUDA device: marked, not run here
#   slow WHY    takes minutes (a profile of every batch shape): marked,
#               run by the target named
#   data CMD    a file format or a transcript: the block is given to CMD
#               as $f, which must exit 0 (JSON Lines the page wraps for
#               its width are joined by $jsonl first)
# A block with no row fails the test, so that a new example is not left
# out. Skips without the model.
. "$(dirname "$0")/lib.sh"
need_model
ex=$tmp/ex
w=$tmp/w
mkdir -p "$ex" "$w/cache/models"
export MEDHA_BIN="$bin" # examples/serve.sh's programs
ln -s "$model" "$w/SmolLM2-135M-Instruct.Q4_1.gguf"
ln -s "$model" "$w/model.gguf"
ln -s "$model" "$w/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ln -s "$top/examples" "$w/examples"
azure=$top/../shared/traces/azure-llm-2023-conv.csv
[ -f "$azure" ] || azure=/work/shared/traces/azure-llm-2023-conv.csv
[ -f "$azure" ] && ln -s "$azure" "$w/azure-llm-2023-conv.csv"
# a trace for live replicas (the text) and the simulator (the counts)
printf '%s\n' '{"id": "a", "arrival": 0, "prompt": "The capital of France is", "prompt_tokens": 6, "max_tokens": 8, "temperature": 0}' \
    '{"id": "b", "arrival": 0.2, "prompt": "1, 2, 3,", "prompt_tokens": 7, "max_tokens": 8}' >"$w/trace.jsonl"

# jsonl: JSON objects one after another, each on its own line
jsonl=$tmp/jsonl.py
cat >"$jsonl" <<'PY'
import json, sys
s, d, i = open(sys.argv[1]).read(), json.JSONDecoder(), 0
while True:
    while i < len(s) and s[i].isspace():
        i += 1
    if i >= len(s):
        break
    o, i = d.raw_decode(s, i)
    print(json.dumps(o))
PY

# every EXAMPLES block into $ex/PAGE.N
for m in "$top"/man/*.[157]; do
	awk -v out="$ex/$(basename "$m")" '
	    /^\.Sh EXAMPLES/ { e = 1; next }
	    /^\.Sh / { e = 0 }
	    e && /^\.Bd -literal/ { n++; b = 1; f = out "." n; dollar = 0; next }
	    e && /^\.Ed/ { b = 0; next }
	    b {
		gsub(/\\e/, "\\")
		if (substr($0, 1, 2) == "$ ") { dollar = 1; cont = 0 }
		if (!dollar) { print > f; next }
		if (substr($0, 1, 2) == "$ ") {
			print substr($0, 3) > f
			cont = /\\$/
		} else if (cont) {
			print > f
			cont = /\\$/
		}
		# else: the output shown after a command
	    }' "$m"
done

# PAGE.N how
table='
medha-prof.1.1 slow make bench-predictor
medha-prof.1.2 slow no test (a profile and check of a mixture of experts, the model of contrib/bench-moe.sh, on one thread)
medha-prof.1.3 slow make bench-predictor (it serves with the profile the first makes)
medha-prof.1.4 gpu
medha-prof.1.5 slow no test (a profile of each chunk size, on two threads)
medha-profile.5.1 data medha-trace gen -q 2 -n 20 -s 1 | medha-sched --sim a100 -m llama3-8b --tp 8 --profile $f >/dev/null
medha-proto.7.1 data python3 "$top/tests/ref/proto_transcript.py" $f
medha-proto.7.2 data python3 "$top/tests/ref/proto_transcript.py" $f
medha-proto.7.3 data python3 "$top/tests/ref/proto_transcript.py" --hex $f
medha-router.1.1 run 120
medha-router.1.2 serve 20
medha-router.1.3 run 120
medha-router.1.4 data MEDHA_HTTP=127.0.0.1:8000 examples/serve.sh single 2>serve.err & s=$!; up; "$py" $f; st=$?; kill $s; wait $s; exit $st
medha-sched.1.1 run 120
medha-sched.1.2 run 60
medha-sched.1.3 run 120
medha-sched.1.4 run 120
medha-trace.1.1 run 120
medha-trace.1.2 run 300
medha-trace.1.3 run 300
medha-trace.1.4 slow no test (a replay in real time of 120 s of requests, at 0.5 QPS, to a serve.sh single)
medha-trace.5.1 data python3 $jsonl $f | medha-sched --sim a100 -m llama3-8b >/dev/null
medha-trace.5.2 data sed -n "1,/^$/p" $f | medha-trace convert | tr -d " " >got; sed "1,/^$/d" $f | tr -d " " | diff - got
medha-trace.5.3 data sed -n "1,/^$/p" $f | medha-trace convert | tr -d " " >got; sed "1,/^$/d" $f | tr -d " " | diff - got
medha-trace.5.4 data python3 $jsonl $f | medha-trace report
medha-worker.1.1 run 60
medha-worker.1.2 run 60
medha-worker.1.3 run 60
medha-worker.1.4 serve 10
medha-worker.1.5 gpu
'
# left: a process this test started is still alive (lib_procs lists the
# subshell and the pipeline it runs in too: they are gone by the time
# kill -0 asks, so only what a block left running counts), or a serve.sh
# of a block's (orphaned when its block's shell was killed, it names no
# path of $tmp, but its environment does) still stopping its topology:
# it removes its sockets' directory last, which the next block may use
left() {
	for p in $(lib_procs); do
		[ "$p" != "$$" ] && kill -0 "$p" 2>/dev/null && return 0
	done
	for p in $(pgrep -f examples/serve.sh); do
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
		    grep -qxF "TMPDIR=$tmp" && return 0
	done
	return 1
}
bad=0
ran=0
# man-examples.sh PAGE.N ...: those blocks alone
for f in "$ex"/*; do
	name=$(basename "$f")
	case $name in *.sh | *.out) continue ;; esac
	if [ $# -gt 0 ] && ! echo " $* " | grep -q " $name "; then
		continue
	fi
	port=$(free_port)
	how=$(echo "$table" | sed -n "s/^$name //p")
	kind=${how%% *}
	arg=${how#* }
	# /tmp/ -> the test's, port 8000 -> a free one, uid 1000 -> ours
	sed -e "s|/tmp/|$tmp/|g" -e "s|:8000|:$port|g" \
	    -e "s|medha-1000|medha-$(id -u)|g" "$f" >"$f.sh"
	arg=$(echo "$arg" | sed -e "s|:8000|:$port|g")
	st=0
	case $kind in
	run)
		# a server started with & is waited for by what follows
		(cd "$w" && PATH=$bin:$PATH TMPDIR=$tmp timeout "$arg" sh "$f.sh") \
		    >"$f.out" 2>&1 || st=$?
		;;
	serve)
		(cd "$w" && PATH=$bin:$PATH TMPDIR=$tmp exec sh "$f.sh") \
		    >"$f.out" 2>&1 &
		pid=$!
		sleep "$arg"
		# ended by then: its status counts; else it still serves
		kill -0 "$pid" 2>/dev/null || wait "$pid" || st=$?
		;;
	data)
		# up: until serve.sh (2>serve.err) says ready, 120 s at most
		(cd "$w" && PATH=$bin:$PATH TMPDIR=$tmp py=$py f=$f.sh top=$top jsonl=$jsonl \
		    timeout 300 sh -c 'up() { i=0; until grep -q "^ready$" serve.err; do i=$((i + 1)); [ $i -lt 600 ] || return 1; sleep 0.2; done; }; '"$arg") >"$f.out" 2>&1 || st=$?
		;;
	gpu)
		echo "gpu  $name: needs a CUDA device, not run here"
		continue
		;;
	slow)
		echo "slow $name: minutes; run by: $arg"
		continue
		;;
	*)
		echo "FAIL $name: no row in the table: how is it run?"
		cat "$f"
		bad=$((bad + 1))
		continue
		;;
	esac
	# stop what a block left running (its servers), and wait until
	# they are gone: the next block may take the same sockets
	i=0
	while left && [ $i -lt 100 ]; do
		for p in $(lib_procs); do
			[ "$p" = "$$" ] || kill "$p" 2>/dev/null || true
		done
		sleep 0.3
		i=$((i + 1))
	done
	ran=$((ran + 1))
	if [ $st -ne 0 ]; then
		echo "FAIL $name ($kind $arg): status $st"
		sed 's/^/    /' "$f.sh"
		tr '\r' '\n' <"$f.out" | tail -n 15 | sed 's/^/  > /'
		bad=$((bad + 1))
	else
		echo "ok   $name ($kind)"
	fi
done
echo "man-examples: $ran run, $bad failed"
[ $bad -eq 0 ]

#!/bin/sh
# run.sh [--unit] TESTDIR BINDIR: run every unit-test program (cmocka, TAP
# output) in TESTDIR and, without --unit, every shell test in tests/sh,
# then print "N passed, N failed, N skipped"; the exit status is non-zero
# only when something failed. tests/README says how tests are organised.
#
# Each result is a line with the test's duration in seconds:
#
#	ok   NAME (P) S s            P cases passed (cmocka), or the script did
#	FAIL NAME (P passed, F failed) S s, then the test's output, indented
#	skip NAME[/CASE]: REASON     skipped, and why
#
# Skips: a cmocka case that calls skip() (TAP "ok N # SKIP" or, as
# cmocka 1.1 writes it, "not ok N # SKIP NAME") is a skip; its reason is
# the "skip: REASON" line the case printed before (testutil.h's
# skip_why()). A program that prints the TAP plan "1..0 # SKIP REASON"
# skipped as a whole (hostile_test without the programs). A shell test
# skips by exiting 77 after a "skip: REASON" line (tests/sh/lib.sh's
# skip(), as automake's test driver reads status 77); a shell test that
# passes but skipped a part prints "skip: REASON" lines, shown under its
# "ok" line. A unit-test program that dies without reporting counts as
# one failure. On a terminal, the test running now is shown (some take
# minutes).
#
# --unit leaves out the shell tests, the GPU tests and the unit-test
# programs listed in $slow (make test runs them), so that make unit takes
# seconds.
#
# GPU tests (tests/gpu/*_test.c, built into TESTDIR/gpu with CUDA=1) are
# programs that print "ok"/"FAIL" lines and exit 0 when all passed; one
# that finds no CUDA device prints "skip: no CUDA device (...)" and exits
# 77: it is counted as skipped, and a line before the summary says how
# many GPU tests were skipped and why ("N GPU tests skipped: no CUDA
# device"), or that they were not built (MEDHA_CUDA=0, which the
# Makefile sets when it builds without nvcc or with CUDA=0). --gpu runs
# the GPU tests alone, with their output, and a skip is a failure (make
# test-gpu: there must be a GPU).
unit=0
gpu=0
if [ "$1" = --unit ]; then
	unit=1
	shift
elif [ "$1" = --gpu ]; then
	gpu=1
	shift
fi
tdir=$1
bindir=$2
here=$(cd "$(dirname "$0")" && pwd)
# absolute paths (as given where they do not exist: the tests say so)
MEDHA_BIN=$(cd "$bindir" 2>/dev/null && pwd || echo "$bindir")
MEDHA_TESTS=$(cd "$tdir" 2>/dev/null && pwd || echo "$tdir")
export MEDHA_BIN MEDHA_TESTS
# unit-test programs that take several times longer than the others
# (tests/README has the durations): make unit leaves them to make test
slow="sched_events_test"
pass=0
fail=0
nskip=0
log=$(mktemp)
res=$(mktemp)
trap 'rm -f "$log" "$res"' EXIT
tty=0
[ -t 1 ] && tty=1
# running NAME: on a terminal, say what runs until its result replaces it
running() {
	[ "$tty" = 1 ] && printf '...  %s\r' "$1"
}
now() {
	date +%s.%N
}
# took START: seconds since START, one decimal
took() {
	awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}

# tap LOG NAME: the counts "PASSED FAILED SKIPPED" of a TAP log on the
# first line, then a "skip NAME[/CASE]: REASON" line for each skip
tap() {
	awk -v name="$2" '
	function why() { return reason != "" ? reason : "no reason given" }
	/^skip: / { reason = substr($0, 7); next }
	/^1\.\.0 *# *SKIP/ {
		sub(/^1\.\.0 *# *SKIP */, "")
		if ($0 != "")
			reason = $0
		s++
		out[++n] = "skip " name ": " why()
		next
	}
	/^(not )?ok [0-9]+.*# *SKIP/ {
		c = $0
		sub(/.*# *SKIP */, "", c)
		s++
		out[++n] = "skip " name (c != "" ? "/" c : "") ": " why()
		reason = ""
		next
	}
	/^ok / { p++; reason = ""; next }
	/^not ok / { f++; reason = ""; next }
	END {
		print p + 0, f + 0, s + 0
		for (i = 1; i <= n; i++)
			print out[i]
	}' "$1"
}

for t in "$tdir"/*_test; do
	[ "$gpu" = 0 ] && [ -x "$t" ] || continue
	name=$(basename "$t")
	if [ "$unit" = 1 ]; then
		case " $slow " in *" $name "*)
			echo "--   $name: slow, left to make test"
			continue
			;;
		esac
	fi
	running "$name"
	t0=$(now)
	CMOCKA_MESSAGE_OUTPUT=TAP "$t" >"$log" 2>&1
	rc=$?
	s=$(took "$t0")
	tap "$log" "$name" >"$res"
	read -r p f k <"$res"
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
	fi
	pass=$((pass + p))
	fail=$((fail + f))
	nskip=$((nskip + k))
	if [ "$f" -ne 0 ]; then
		echo "FAIL $name ($p passed, $f failed) $s s"
		sed 's/^/    /' "$log"
	elif [ "$p" -eq 0 ] && [ "$k" -ne 0 ]; then
		: # skipped as a whole: the skip line says so
	else
		echo "ok   $name ($p) $s s"
	fi
	sed 1d "$res"
done

# the GPU tests: skipped as a whole without a device (status 77)
ngpu=0
gskip=0
gwhy=
gpath=
for t in "$tdir"/gpu/*_test; do
	[ "$unit" = 0 ] && [ -x "$t" ] || continue
	name=gpu/$(basename "$t")
	ngpu=$((ngpu + 1))
	# where cuBLASLt and NCCL are (contrib/gpu-env.sh), found once
	[ -n "$gpath" ] ||
	    gpath=$(. "$here/../contrib/gpu-env.sh" && echo "$LD_LIBRARY_PATH:")
	running "$name"
	t0=$(now)
	LD_LIBRARY_PATH=${gpath%:} "$t" >"$log" 2>&1
	rc=$?
	s=$(took "$t0")
	if [ "$rc" = 77 ] && [ "$gpu" = 0 ]; then
		nskip=$((nskip + 1))
		gskip=$((gskip + 1))
		gwhy=$(sed -n 's/^skip: //p' "$log" | tail -n 1)
		echo "skip $name: ${gwhy:-no reason given}"
	elif [ "$rc" = 0 ]; then
		pass=$((pass + 1))
		echo "ok   $name $s s"
		[ "$gpu" = 0 ] || sed 's/^/    /' "$log"
	else
		fail=$((fail + 1))
		echo "FAIL $name (status $rc) $s s"
		sed 's/^/    /' "$log"
	fi
done
# what became of the GPU tests, said again before the summary
gline=
if [ "$unit" = 0 ]; then
	nsrc=$(ls "$here"/gpu/*_test.c 2>/dev/null | wc -l)
	if [ "$gskip" -gt 0 ]; then
		# "no CUDA device (...)" without what the program added
		gline="$gskip GPU tests skipped: ${gwhy%% (*}"
	elif [ "$ngpu" -lt "$nsrc" ] && [ "${MEDHA_CUDA:-1}" = 0 ]; then
		gline="$nsrc GPU tests not built (CUDA=0: no nvcc, or turned off)"
	elif [ "$ngpu" -lt "$nsrc" ]; then
		gline="$((nsrc - ngpu)) of $nsrc GPU tests not built (make build/tests/gpu/NAME)"
		[ "$gpu" = 0 ] || fail=$((fail + nsrc - ngpu))
	fi
fi

for s in "$here"/sh/*.sh; do
	[ "$unit" = 0 ] && [ "$gpu" = 0 ] && [ -f "$s" ] || continue
	name=$(basename "$s" .sh)
	[ "$name" != lib ] || continue # what the tests source
	running "sh/$name"
	t0=$(now)
	sh "$s" >"$log" 2>&1
	rc=$?
	secs=$(took "$t0")
	case $rc in
	0)
		pass=$((pass + 1))
		echo "ok   sh/$name $secs s"
		# parts it could not run
		sed -n 's/^skip: /     part skipped: /p' "$log"
		;;
	77)
		nskip=$((nskip + 1))
		why=$(sed -n 's/^skip: //p' "$log" | tail -n 1)
		[ -n "$why" ] || why=$(tail -n 1 "$log")
		echo "skip sh/$name: ${why:-no reason given}"
		;;
	*)
		fail=$((fail + 1))
		echo "FAIL sh/$name (status $rc) $secs s"
		sed 's/^/    /' "$log"
		;;
	esac
done

[ -z "$gline" ] || echo "$gline"
echo "$pass passed, $fail failed, $nskip skipped"
[ "$fail" -eq 0 ]

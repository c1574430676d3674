#!/bin/sh
# run.sh [--unit] TESTDIR BINDIR: run every unit-test program (cmocka, TAP
# output) and, without --unit, every shell test in tests/sh, then print
# "N passed, N failed". A unit-test program that dies without reporting
# counts as one failure. On a terminal, the test running now is shown
# (some take minutes).
unit=0
if [ "$1" = --unit ]; then
	unit=1
	shift
fi
tdir=$1
bindir=$2
here=$(cd "$(dirname "$0")" && pwd)
MEDHA_BIN=$(cd "$bindir" 2>/dev/null && pwd)
MEDHA_TESTS=$(cd "$tdir" 2>/dev/null && pwd)
export MEDHA_BIN MEDHA_TESTS
pass=0
fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
tty=0
[ -t 1 ] && tty=1
# running NAME: on a terminal, say what runs until its result replaces it
running() {
	[ "$tty" = 1 ] && printf '...  %s\r' "$1"
}

for t in "$tdir"/*_test; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	running "$name"
	CMOCKA_MESSAGE_OUTPUT=TAP "$t" >"$log" 2>&1
	rc=$?
	p=$(grep -c '^ok ' "$log")
	f=$(grep -c '^not ok ' "$log")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
	fi
	pass=$((pass + p))
	fail=$((fail + f))
	if [ "$f" -ne 0 ]; then
		echo "FAIL $name ($p passed, $f failed)"
		sed 's/^/    /' "$log"
	else
		echo "ok   $name ($p)"
	fi
done

for s in "$here"/sh/*.sh; do
	[ "$unit" = 0 ] && [ -f "$s" ] || continue
	name=$(basename "$s" .sh)
	running "sh/$name"
	if sh "$s" >"$log" 2>&1; then
		pass=$((pass + 1))
		echo "ok   sh/$name"
	else
		fail=$((fail + 1))
		echo "FAIL sh/$name"
		sed 's/^/    /' "$log"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

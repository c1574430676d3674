#!/bin/sh
# sizes.sh: the house's sizes (doc/DESIGN.md, "Rules"): no libcore or
# cmd file over 1000 lines, no cmd file over 600 (cmd/ is flags and
# wiring), no function over 150 lines. A function that must stay longer
# (a hand-scheduled kernel) says why on a line of its own,
# "sizes.sh: long because ...", inside it.
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
bad=0
for f in libcore/*.[ch] libcore/*/*.[ch] libcore/*/*/*.[ch] cmd/*.[ch] cmd/*/*.[ch]; do
	[ -f "$f" ] || continue
	n=$(wc -l <"$f")
	max=1000
	case $f in cmd/*) max=600 ;; esac
	if [ "$n" -gt "$max" ]; then
		echo "$f: $n lines (at most $max)"
		bad=1
	fi
	# a function: from a line "{" at column 0 to the next "}" there
	awk -v f="$f" '
	/^\{$/ { start = NR; ok = 0; name = prev; next }
	start && /sizes\.sh: long because/ { ok = 1 }
	start && /^\}/ {
		if (NR - start > 150 && !ok)
			printf "%s:%d: %s: %d lines (at most 150)\n", f, start,
			    name, NR - start
		start = 0
	}
	/^[A-Za-z_][A-Za-z0-9_]*\(/ { prev = $0 }
	' "$f" >"${TMPDIR:-/tmp}/sizes.$$"
	if [ -s "${TMPDIR:-/tmp}/sizes.$$" ]; then
		cat "${TMPDIR:-/tmp}/sizes.$$"
		bad=1
	fi
	rm -f "${TMPDIR:-/tmp}/sizes.$$"
done
[ "$bad" = 0 ]

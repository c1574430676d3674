#!/bin/sh
# help.sh: -h and --help of medha-sched, medha-worker and medha-router exit
# 0 with nothing on stderr and print, on stdout, the synopsis (the same
# lines a usage error prints on stderr) and then every option with a
# description on its line, no line of them wider than 80 columns. "Every
# option" is taken mechanically: the long options of the program's struct
# option table (cmd/PROG/main.c) and of its man page's option list
# (man/PROG.1, the .It Fl lines), and the letters of its getopt_long
# option string. A usage error still prints only the synopsis.
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
	echo "$prog: $*"
	exit 1
}

for prog in medha-sched medha-worker medha-router; do
	src=$top/cmd/$prog/main.c
	man=$top/man/$prog.1
	[ -f "$src" ] && [ -f "$man" ] || fail "no $src or $man"

	# the long options the program accepts, and those its man page lists
	sed -n '/struct option/,/{NULL, 0, NULL, 0}/p' "$src" |
	    sed -n 's/^[[:space:]]*{"\([a-z0-9-]*\)",.*_argument.*/\1/p' \
	    >"$tmp/long.src"
	grep '^\.It Fl' "$man" | tr ' ' '\n' |
	    sed -n 's/^-\([a-z][a-z0-9-]*[a-z0-9]\)$/\1/p' >"$tmp/long.man"
	[ "$(wc -l <"$tmp/long.src")" -ge 5 ] ||
	    fail "found $(wc -l <"$tmp/long.src") long options in $src"
	[ "$(wc -l <"$tmp/long.man")" -ge 5 ] ||
	    fail "found $(wc -l <"$tmp/long.man") long options in $man"
	sort -u "$tmp/long.src" "$tmp/long.man" >"$tmp/long"
	# the short ones: the letters of the getopt_long option string
	shorts=$(sed -n 's/.*getopt_long(argc, argv, "\([^"]*\)".*/\1/p' \
	    "$src" | tr -d ':' | sed 's/./& /g')
	[ -n "$shorts" ] || fail "no getopt_long option string in $src"

	st=0
	"$bin/$prog" -h >"$tmp/out" 2>"$tmp/err" || st=$?
	[ "$st" -eq 0 ] || fail "-h: status $st, want 0"
	[ ! -s "$tmp/err" ] || { cat "$tmp/err"; fail "-h wrote to stderr"; }
	st=0
	"$bin/$prog" --help >"$tmp/out2" 2>"$tmp/err" || st=$?
	[ "$st" -eq 0 ] || fail "--help: status $st, want 0"
	cmp -s "$tmp/out" "$tmp/out2" || fail "--help is not -h"

	# a usage error: status 2 and the synopsis alone, which -h begins with
	st=0
	"$bin/$prog" --no-such-option >"$tmp/eout" 2>"$tmp/err" || st=$?
	[ "$st" -eq 2 ] || fail "--no-such-option: status $st, want 2"
	[ ! -s "$tmp/eout" ] || fail "a usage error wrote to stdout"
	sed -n '/^usage:/,$p' "$tmp/err" >"$tmp/syn"
	[ -s "$tmp/syn" ] || fail "a usage error printed no synopsis"
	if grep -q '^  [^ ]' "$tmp/syn"; then
		cat "$tmp/err"
		fail "a usage error printed the option list"
	fi
	head -n "$(wc -l <"$tmp/syn")" "$tmp/out" | cmp -s - "$tmp/syn" ||
	    fail "-h does not begin with the synopsis of a usage error"

	# the option lines: two spaces, the option column, two or more
	# spaces, a description; split into "option<TAB>description"
	grep '^  [^ ]' "$tmp/out" >"$tmp/lines" ||
	    fail "-h printed no option lines"
	if awk 'length > 80' "$tmp/lines" | grep .; then
		fail "-h: option lines wider than 80 columns"
	fi
	sed -n 's/^  \([^ ][^ ]*\( [^ ][^ ]*\)*\) \{2,\}\([^ ].*\)$/\1	\3/p' \
	    "$tmp/lines" >"$tmp/opts"
	if [ "$(wc -l <"$tmp/opts")" -ne "$(wc -l <"$tmp/lines")" ]; then
		grep -v '  [^ ].*  [^ ]' "$tmp/lines" || :
		fail "-h: option lines without a description"
	fi
	# has OPT: an option line's option column names OPT (a whole word)
	has() {
		cut -f1 "$tmp/opts" | grep -q -e "\(^\|[ ,]\)$1\([ ,]\|\$\)"
	}
	while read -r name; do
		has "--$name" || fail "-h does not describe --$name"
	done <"$tmp/long"
	for c in $shorts; do
		has "-$c" || fail "-h does not describe -$c"
	done
done
echo "help: ok"

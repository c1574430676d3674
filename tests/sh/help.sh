#!/bin/sh
# help.sh: -h and --help of medha-prof, -sched, -worker and -router exit
# 0 with nothing on stderr and print, on stdout, the synopsis (the same
# lines a usage error prints on stderr) and then every option with a
# description on its line, no line of them wider than 80 columns. "Every
# option" is taken mechanically: the long options of the program's struct
# option table (cmd/PROG/main.c) and of its man page's option list
# (man/PROG.1, the .It Fl lines), and the letters of its getopt_long
# option string. A usage error still prints only the synopsis.
#
# medha-trace likewise, per subcommand: "medha-trace SUB -h" prints SUB's
# part of the synopsis and every option of the struct option table in
# trace_SUB() (cmd/medha-trace/*.c) and of SUB's section of the man page
# (.Ss SUB), no line of it wider than 80 columns; "medha-trace -h" prints
# the whole synopsis and a line for every subcommand of main.c's table.
. "$(dirname "$0")/lib.sh"

fail() {
	echo "$prog: $*"
	exit 1
}

# opt_lines: split the option lines of $tmp/out (two spaces, the option
# column, two or more spaces, a description) into "option<TAB>description"
# in $tmp/opts; fail on one without a description or wider than 80 columns
opt_lines() {
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
}

# has OPT: an option line's option column names OPT (a whole word)
has() {
	cut -f1 "$tmp/opts" | grep -q -e "\(^\|[ ,]\)$1\([ ,]\|\$\)"
}

# helps CMD...: CMD -h and CMD --help exit 0, print the same on stdout
# (left in $tmp/out) and nothing on stderr
helps() {
	st=0
	"$@" -h >"$tmp/out" 2>"$tmp/err" || st=$?
	[ "$st" -eq 0 ] || fail "-h: status $st, want 0"
	[ ! -s "$tmp/err" ] || { cat "$tmp/err"; fail "-h wrote to stderr"; }
	st=0
	"$@" --help >"$tmp/out2" 2>"$tmp/err" || st=$?
	[ "$st" -eq 0 ] || fail "--help: status $st, want 0"
	cmp -s "$tmp/out" "$tmp/out2" || fail "--help is not -h"
}

# misused CMD...: CMD exits 2, printing on stderr only a synopsis (left
# in $tmp/syn, from its "usage:" line on) and no option lines
misused() {
	st=0
	"$@" >"$tmp/eout" 2>"$tmp/err" || st=$?
	[ "$st" -eq 2 ] || fail "$*: status $st, want 2"
	[ ! -s "$tmp/eout" ] || fail "a usage error wrote to stdout"
	sed -n '/^usage:/,$p' "$tmp/err" >"$tmp/syn"
	[ -s "$tmp/syn" ] || fail "a usage error printed no synopsis"
	if grep -q '^  [^ ]' "$tmp/syn"; then
		cat "$tmp/err"
		fail "a usage error printed the option list"
	fi
}

for prog in medha-prof medha-sched medha-worker medha-router; do
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

	helps "$bin/$prog"

	# a usage error: status 2 and the synopsis alone, which -h begins with
	misused "$bin/$prog" --no-such-option
	head -n "$(wc -l <"$tmp/syn")" "$tmp/out" | cmp -s - "$tmp/syn" ||
	    fail "-h does not begin with the synopsis of a usage error"

	opt_lines
	while read -r name; do
		has "--$name" || fail "-h does not describe --$name"
	done <"$tmp/long"
	for c in $shorts; do
		has "-$c" || fail "-h does not describe -$c"
	done
done

# medha-trace: the subcommands of main.c's table, {"SUB", "medha-trace SUB",
# trace_SUB}, and each one's option table and option string, in trace_SUB()
trsrc=$top/cmd/medha-trace
man=$top/man/medha-trace.1
prog=medha-trace
subs=$(sed -n \
    's/^[[:space:]]*{"\([a-z]*\)", "medha-trace \1", trace_\1,.*/\1/p' \
    "$trsrc/main.c")
[ "$(echo "$subs" | wc -l)" -ge 4 ] ||
    fail "found subcommands '$subs' in $trsrc/main.c"

# block SUB: SUB's lines of the synopsis on stdin, "usage: " made blanks
block() {
	sed 's/^usage: /       /' | awk -v s="$1" '
	    /^       medha-trace / { on = $2 == s; if (on) print; next }
	    /^           [^ ]/ { if (on) print; next }
	    { on = 0 }'
}

for sub in $subs; do
	prog="medha-trace $sub"
	src=$(grep -l "^trace_$sub(" "$trsrc"/*.c) ||
	    fail "no trace_$sub() in $trsrc"
	sed -n "/^trace_$sub(/,/^}/p" "$src" >"$tmp/fn"
	sed -n '/struct option/,/{NULL, 0, NULL, 0}/p' "$tmp/fn" |
	    sed -n 's/^[[:space:]]*{"\([a-z0-9-]*\)",.*_argument.*/\1/p' \
	    >"$tmp/long.src"
	sed -n "/^\.Ss $sub\$/,/^\.S[sh] /p" "$man" | grep '^\.It Fl' |
	    tr ' ' '\n' |
	    sed -n 's/^-\([a-z][a-z0-9-]*[a-z0-9]\)$/\1/p' >"$tmp/long.man"
	[ "$(wc -l <"$tmp/long.src")" -ge 2 ] ||
	    fail "found $(wc -l <"$tmp/long.src") long options in $src"
	[ "$(wc -l <"$tmp/long.man")" -ge 2 ] ||
	    fail "found $(wc -l <"$tmp/long.man") long options in $man"
	sort -u "$tmp/long.src" "$tmp/long.man" >"$tmp/long"
	shorts=$(sed -n 's/.*getopt_long(argc, argv, "\([^"]*\)".*/\1/p' \
	    "$tmp/fn" | tr -d ':' | sed 's/./& /g')
	[ -n "$shorts" ] || fail "no getopt_long option string in $src"

	helps "$bin/medha-trace" "$sub"
	if awk 'length > 80' "$tmp/out" | grep .; then
		fail "-h: lines wider than 80 columns"
	fi
	# -h begins with SUB's synopsis, that of a usage error, and no other
	sed '/^$/,$d' "$tmp/out" >"$tmp/hsyn"
	grep -q "^usage: medha-trace $sub " "$tmp/hsyn" ||
	    fail "-h does not begin with 'usage: medha-trace $sub'"
	misused "$bin/medha-trace" "$sub" --no-such-option
	block "$sub" <"$tmp/syn" >"$tmp/want"
	[ -s "$tmp/want" ] || fail "a usage error has no synopsis of $sub"
	block "$sub" <"$tmp/hsyn" >"$tmp/got"
	sed 's/^usage: /       /' "$tmp/hsyn" | cmp -s - "$tmp/got" ||
	    fail "-h prints more than the synopsis of $sub"
	cmp -s "$tmp/got" "$tmp/want" || {
		diff "$tmp/want" "$tmp/got" || :
		fail "-h's synopsis is not that of a usage error"
	}

	opt_lines
	while read -r name; do
		has "--$name" || fail "-h does not describe --$name"
	done <"$tmp/long"
	for c in $shorts; do
		has "-$c" || fail "-h does not describe -$c"
	done
done

# medha-trace -h: the synopsis of a usage error, then a line for each
# subcommand and where its options are
prog=medha-trace
helps "$bin/medha-trace"
if awk 'length > 80' "$tmp/out" | grep .; then
	fail "-h: lines wider than 80 columns"
fi
misused "$bin/medha-trace"
head -n "$(wc -l <"$tmp/syn")" "$tmp/out" | cmp -s - "$tmp/syn" ||
    fail "-h does not begin with the synopsis of a usage error"
misused "$bin/medha-trace" --no-such-option
opt_lines
for sub in $subs; do
	has "$sub" || fail "-h does not describe $sub"
done
grep -q 'medha-trace SUBCOMMAND -h' "$tmp/out" ||
    fail "-h does not say 'medha-trace SUBCOMMAND -h'"
echo "help: ok"

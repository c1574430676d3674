#!/bin/sh
# layers.sh: libcore's rooms include only rooms below them. The layers,
# lowest first (doc/DESIGN.md, "Rooms"):
#   base (libcore/*.h) -> model, io -> template -> tok -> sched, cpu,
#   cuda -> engine -> net -> serve
# cmd/ sits above all of them. A room may include its own headers and
# any lower layer's; an include of a room in the same or a higher layer
# is a cycle waiting to happen and fails this test. A sub-room (a
# directory in a room: serve/worker) is in its room's layer and may
# include its room's own headers (what its siblings share) too, but not
# a sibling's, and its room may not include it.
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top/libcore"
rank() {
	case $1 in
	.) echo 0 ;;
	model | io) echo 1 ;;
	template) echo 2 ;;
	tok) echo 3 ;;
	sched | cpu | cuda) echo 4 ;;
	engine) echo 5 ;;
	net) echo 6 ;;
	serve) echo 7 ;;
	*) echo unknown ;;
	esac
}
bad=0
for f in *.[ch] */*.[ch] */*/*.[ch]; do
	[ -f "$f" ] || continue
	from=$(dirname "$f")
	rf=$(rank "${from%%/*}")
	if [ "$rf" = unknown ]; then
		echo "libcore/$f: room $from has no layer in tests/sh/layers.sh"
		bad=1
		continue
	fi
	for inc in $(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
		case $inc in
		*/*) to=$(dirname "$inc") ;;
		*) [ -f "$from/$inc" ] && continue; to=. ;;
		esac
		[ "$to" = "$from" ] && continue
		case $from/ in "$to"/*) continue ;; esac # its room's own
		rt=$(rank "${to%%/*}")
		if [ "$rt" = unknown ] || [ "$rt" -ge "$rf" ]; then
			echo "libcore/$f includes $inc: $from (layer $rf) may not include $to (layer $rt)"
			bad=1
		fi
	done
done
[ "$bad" = 0 ]

#!/bin/sh
# serve-rundir.sh: examples/serve.sh keeps its ipc sockets in a private
# directory, ${TMPDIR:-/tmp}/medha-UID: it makes it with mode 0700, and
# refuses one that is there already but that others may enter, that is
# a link, or (as root) that another user owns: a local user who made
# /tmp/medha-UID first replaced the socket and read the operator's
# SUBMITs (issue 28 E). Then a sim topology starts in the directory it
# made.
. "$(dirname "$0")/lib.sh"
run=$tmp/run
mkdir -m 0755 "$run"
d=$run/medha-$(id -u)
serve() {
	env TMPDIR="$run" MEDHA_BIN="$bin" MEDHA_LOG="$tmp/logs" \
	    bash "$top/examples/serve.sh" sim 2>"$tmp/err" &
	serve=$!
}
refused() {
	serve
	if wait "$serve"; then
		echo "serve.sh took $d ($1)"
		exit 1
	fi
	serve=
	grep -q "$1" "$tmp/err" || { cat "$tmp/err"; exit 1; }
}
mkdir -m 0777 "$d"
chmod 0777 "$d"
refused "others may enter it"
rmdir "$d"
mkdir -m 0700 "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$d"
refused "not a directory"
rm "$d"
if [ "$(id -u)" = 0 ]; then
	mkdir -m 0700 "$d"
	chown 65534 "$d"
	refused "owned by uid 65534"
	rmdir "$d"
fi
# none there: made private, and the topology serves from it
serve_start sim 60 TMPDIR="$run" MEDHA_LOG="$tmp/logs"
[ "$(stat -c %a "$d")" = 700 ] || { stat "$d"; exit 1; }
[ -S "$d/sim.sock" ] || { ls -la "$d"; exit 1; }
serve_stop
echo "serve-rundir: ok"

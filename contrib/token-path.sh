#!/bin/sh
# token-path.sh: follow streamed tokens from the worker to the HTTP
# client and print, per process, each thread that hands a token on and
# each msgpack encode or decode of the message that carries it (doc/
# DESIGN.md, "Threads and encodes of a streamed token"). A cpu worker,
# a replica and a router with --http, over ipc:// sockets in a
# temporary directory, each run under gdb with a breakpoint at each
# hand-off that prints the time, its label and its thread; then one
# streamed completion of TOKENS tokens (default 3). Prints the
# breakpoints hit during the completion, in time order.
#
#	sh contrib/token-path.sh
#
# Needs gdb (with Python), curl, the cached SmolLM2 (or MEDHA_MODEL)
# and the programs in BIN (default bin/).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$top/bin}
model=${MEDHA_MODEL:-$top/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
ntok=${TOKENS:-3}
command -v gdb >/dev/null || { echo "token-path: no gdb" >&2; exit 1; }
command -v curl >/dev/null || { echo "token-path: no curl" >&2; exit 1; }
[ -s "$model" ] || { echo "token-path: no model $model" >&2; exit 1; }
d=$(mktemp -d)
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	sleep 1
	for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$d"
}
trap cleanup EXIT INT TERM
cat >"$d/trace.py" <<'PY'
import gdb, os, time
gdb.execute("set pagination off")
gdb.execute("set print thread-events off")
gdb.execute("handle SIGPIPE nostop noprint pass")
class BP(gdb.Breakpoint):
    def __init__(self, spec, label, cond):
        super().__init__(spec, internal=True)
        self.label, self.cond = label, cond
    def stop(self):
        if self.cond and not bool(gdb.parse_and_eval(self.cond)):
            return False
        t = gdb.selected_thread()
        print("TRACE %.6f %-8s %-44s thread %d (%s)" % (time.time(),
            os.environ["WHO"], self.label, t.ptid[1], t.name), flush=True)
        return False
for spec in os.environ["BPS"].split(";"):
    p = spec.split("|")
    BP(p[0], p[1], p[2] if len(p) > 2 else None)
PY
# run WHO BPS PROGRAM ARGS...: PROGRAM under gdb, its trace in $d/WHO
run() {
	who=$1 bps=$2
	shift 2
	WHO=$who BPS=$bps gdb -q -batch -x "$d/trace.py" -ex run --args \
	    "$@" >"$d/$who" 2>"$d/$who.log" &
	pids="$pids $!"
}
# where to break: functions, or a line where one is inlined
cd "$top"
at() { # FILE PATTERN: FILE:LINE of the first line matching PATTERN
	echo "$1:$(grep -n "$2" "$1" | head -1 | cut -d: -f1)"
}
ev='m->type == MEDHA_MSG_EVENTS && m->events.n > 0'
run replica "$(at libcore/serve/front.c 'switch (m.type) {')|decode RESULT|m.type == MEDHA_MSG_RESULT && m.result.n_tokens > 0;rep_on_token|land it (detokenized, stop strings)|;medha_msg_encode|encode EVENTS|$ev" \
    "$bin/medha-sched" -m "$model" -l "ipc://$d/r.sock"
run worker "medha_msg_encode|encode RESULT|m->type == MEDHA_MSG_RESULT && m->result.n_tokens > 0" \
    "$bin/medha-worker" -s "ipc://$d/r.sock" -m "$model"
hp=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run router "libcore/net/pcli.c:finish|decode EVENTS (a protocol client)|rep != 0 && rep->type == MEDHA_MSG_EVENTS && rep->events.n > 0;medha_clients_push|relay (to the client, or handed over)|;medha_msg_encode|encode EVENTS|$ev;$(at libcore/serve/http/up.c 'int i = choice_of(r, ev->handle);')|front door: the event taken|;http_put_chunk|front door: SSE chunk queued|" \
    "$bin/medha-router" -l "ipc://$d/q.sock" -r "ipc://$d/r.sock" \
    --http "127.0.0.1:$hp"
i=0
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/health")" = 200 ]; do
	i=$((i + 1))
	[ $i -lt 180 ] || { echo "token-path: not ready" >&2; exit 1; }
	sleep 1
done
sleep 2
t0=$(date +%s.%N)
curl -sS -N "http://127.0.0.1:$hp/v1/completions" -d "{\"prompt\": [1, 2, 3], \"max_tokens\": $ntok, \"ignore_eos\": true, \"stream\": true}" >"$d/out"
sleep 1
grep -c '"text"' "$d/out" | sed 's/^/chunks with text: /'
cat "$d/worker" "$d/replica" "$d/router" | grep '^TRACE' |
    awk -v t0="$t0" '$2 > t0' | sort -k2,2n | cut -d' ' -f3-

#!/bin/sh
# bench-sched.sh: the live scheduler's own costs (contrib/bench-sched.c):
# the scheduler core's decision per iteration with 1000 requests active
# (fcfs and medha; goal under 50 us), and the dispatch round trip of a
# RESULT answered by a BATCH over ipc:// and tcp://127.0.0.1 (goals
# under 100 us and 200 us), beside bare nng carrying the same bytes.
# Builds the program (make's BUILD/contrib/bench-sched; BUILD: build) and
# prints its tables; extra arguments go to it (-i ITERS -n ACTIVE -r
# CALLS).
#
# usage: sh contrib/bench-sched.sh [-i ITERS] [-n ACTIVE] [-r CALLS]
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
cd "$top"
make -s BUILD="$build" "$build/contrib/bench-sched"
"$build/contrib/bench-sched" "$@"

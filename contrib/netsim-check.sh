#!/usr/bin/env bash
# netsim-check.sh [DELAY_MS]: the simulator's network cost against a
# measured replica. contrib/netns-hosts.sh serve puts a tp 2 x spp 2 x
# kvp 2 replica of cpu workers on four hosts (network namespaces, every
# link tcp); a trace of eight requests (prompts of 12 to 48 tokens, 16
# tokens out each, EOS ignored; a request's KV at most 32 tokens a KVP
# group, so that all but the shortest come to span both groups, and
# their batches exchange partial attention at every layer) is replayed
# to it with the links as they are and with DELAY_MS (10) between any
# two hosts (DELAY_MS / 2 on each host's link: netns-hosts.sh shape).
# medha-sched --sim cpu then simulates each run (the same requests at
# the times they reached the scheduler, the same profile, policy, chunk
# and KVP split as the live scheduler: fcfs and a fixed chunk of 64, so
# that the batches do not hang on the predictor's speed), the second
# with --spp-link, --kvp-link and --sched-link of DELAY_MS. It prints
# the mean TTFT and TPOT over the requests, measured and predicted, and
# the error of each:
#
#   case                 measured ttft tpot   predicted ttft tpot  error ttft tpot
#   0 ms, raw             1.018 s   0.267 s    0.418 s   0.077 s    -58.9%  -71.0%
#   0 ms, fit             1.018 s   0.267 s    1.018 s   0.267 s     +0.0%   +0.0%
#   10 ms, raw            1.095 s   0.621 s    0.706 s   0.396 s    -35.5%  -36.3%
#   10 ms, predicted      1.095 s   0.621 s    1.305 s   0.577 s    +19.1%   -7.1%
#   fit without delay: k 1.71, --tp-link 1.12 ms
#   10 ms links: within (limit 20%)
#
# The profile is of one cpu worker on one thread (medha-prof -q -t 1,
# made here unless MEDHA_PROFILE names one). The eight workers share
# this machine's cores (and whatever else runs on it), so compute runs
# k times slower than profiled, and each TP all-gather between the two
# ranks on a host (loopback tcp, four a layer) waits for a peer that is
# not running: both are fitted on the run without delay (the profile's
# every time times k, a --tp-link latency), and the run with delay is
# then predicted with them and DELAY_MS's links, nothing fitted to it.
# "raw" is the prediction at k = 1 without a TP link. On shared cores
# the delay also idles workers, which speeds the others up: what the
# simulator, a machine a worker, does not model.
#
# Environment: MEDHA_BIN (bin/), MEDHA_MODEL (the cache's SmolLM2
# Q4_1), MEDHA_PROFILE, MEDHA_NETSIM_RUNS (runs of each case, in turn
# after one that warms the workers, their means averaged: 3),
# MEDHA_NETSIM_LIMIT (percent, 20), MEDHA_NETSIM_OUT (a directory to
# keep the traces, records and logs in). Needs what netns-hosts.sh needs (root, iproute2,
# /dev/net/tun) and build/tests/tools/netfault.
#
# Exit status: 0 when both errors of the run with delay are within the
# limit, 1 when not or on an error (namespaces that cannot be made
# among them, with the reason), 2 on bad usage.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${MEDHA_BIN:-$top/bin}
model=${MEDHA_MODEL:-$top/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
runs=${MEDHA_NETSIM_RUNS:-3}
limit=${MEDHA_NETSIM_LIMIT:-20}
hosts="bash $top/contrib/netns-hosts.sh"
delay=${1:-10}
chunk=64   # both schedulers' fixed chunk (fcfs)
kvpmax=32  # tokens of a request per KVP group, both schedulers

die() {
	echo "netsim-check.sh: $*" >&2
	exit 1
}
[ $# -le 1 ] || { echo "usage: netsim-check.sh [DELAY_MS]" >&2; exit 2; }
case $delay in
'' | *[!0-9.]* | *.*.*) echo "netsim-check.sh: $delay: a delay in ms" >&2; exit 2 ;;
esac
case $runs in
'' | *[!0-9]* | 0) echo "netsim-check.sh: MEDHA_NETSIM_RUNS=$runs: a count" >&2; exit 2 ;;
esac
[ -s "$model" ] || die "$model: no such model (contrib/fetch-refs.sh)"
why=$($hosts check 2>&1) || die "${why#netns-hosts.sh: }"

work=${MEDHA_NETSIM_OUT:-}
if [ -z "$work" ]; then
	work=$(mktemp -d)
	keep=0
else
	mkdir -p "$work" || exit 1
	keep=1
fi
name=ns$$
serve=
cleanup() {
	st=$?
	if [ -n "$serve" ]; then
		kill -TERM "$serve" 2>/dev/null
		for _ in $(seq 150); do
			kill -0 "$serve" 2>/dev/null || break
			sleep 0.1
		done
	fi
	$hosts down "$name" 2>/dev/null
	[ $keep = 1 ] || rm -rf "$work"
	exit $st
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

python3 - "$work/trace.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, p in enumerate([12, 18, 24, 30, 36, 40, 44, 48]):
        f.write(json.dumps({"id": "n%d" % i, "arrival": 0,
                            "prompt_tokens": p, "max_tokens": 16,
                            "output_tokens": 16, "ignore_eos": True,
                            "temperature": 0}) + "\n")
PY

profile=${MEDHA_PROFILE:-}
if [ -z "$profile" ]; then
	profile=$work/profile.csv
	"$bin/medha-prof" -m "$model" -q -t 1 --kv f32 --max-tokens 1024 \
	    --max-context 1024 -o "$profile" 2>"$work/prof.err" ||
	    die "medha-prof: $(tail -n 1 "$work/prof.err")"
fi

: >"$work/serve.err"
MEDHA_LOG=$work/logs MEDHA_BIN=$bin MEDHA_MODEL=$model MEDHA_RESTART=0 \
    MEDHA_KVP_MAX_TOKENS=$kvpmax \
    MEDHA_SCHED_OPTS="--predictor $profile -p fcfs -c $chunk" \
    $hosts serve "$name" 2>"$work/serve.err" &
serve=$!
for _ in $(seq 1800); do
	grep -q '^ready$' "$work/serve.err" && break
	kill -0 $serve 2>/dev/null || die "serve ended: $(tail -n 3 "$work/serve.err")"
	sleep 0.1
done
grep -q '^ready$' "$work/serve.err" || die "not ready in 180 s"
export MEDHA_SECRET_FILE=$work/logs/secret
replica=tcp://$($hosts ip "$name" sa):7001
blocks=$(grep -o '[0-9]* KV blocks of' "$work/logs/sched-a.log" | head -n 1 |
    cut -d' ' -f1)
[ -n "$blocks" ] || die "no KV block count in the scheduler's log"

# replay OUT: the trace to replica a from the router's host, its
# records in OUT
replay() {
	timeout 300 $hosts exec "$name" router "$bin/medha-trace" replay \
	    -a "$replica" "$work/trace.jsonl" >"$1" 2>"$work/replay.err" ||
	    die "replay: $(tail -n 2 "$work/replay.err")"
}
# a run to warm the workers, then the two cases in turn, $runs times,
# so that both see the same load from whatever else runs here
all=router,sa,sb,w0,w1,w2,w3
replay "$work/warm.jsonl"
half=$(awk -v d="$delay" 'BEGIN { print d / 2 }')
for i in $(seq "$runs"); do
	replay "$work/live0-$i.jsonl"
	$hosts shape "$name" $all "$half" 0 0 || die "shape failed"
	replay "$work/live1-$i.jsonl"
	$hosts heal "$name" $all
done

# the simulations and the table (python: the records are JSON)
python3 - "$bin/medha-sched" "$model" "$profile" "$work" "$blocks" \
    "$chunk" "$kvpmax" "$delay" "$limit" "$runs" <<'PY'
import json, math, os, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor
sched, model, profile, work, blocks, chunk, kvpmax = sys.argv[1:8]
delay, limit = float(sys.argv[8]) / 1e3, float(sys.argv[9])
runs = sys.argv[10]

def records(path):
    return [json.loads(l) for l in open(path)]

def means(recs):
    assert all(r["status"] == "ok" for r in recs), \
        [r for r in recs if r["status"] != "ok"]
    n = len(recs)
    return (sum(r["ttft"] for r in recs) / n,
            sum(r["tpot_mean"] for r in recs) / n)

def as_arrived(recs, path):
    """The trace with each request at the time it reached the scheduler,
    in the order it did"""
    t0 = min(r["arrival"] for r in recs)
    at = {r["id"]: r["arrival"] - t0 for r in recs}
    trace = [json.loads(l) for l in open(work + "/trace.jsonl")]
    with open(path, "w") as f:
        for t in sorted(trace, key=lambda t: at[t["id"]]):
            t["arrival"] = round(at[t["id"]], 9)
            f.write(json.dumps(t) + "\n")

def scaled(k):
    fd, path = tempfile.mkstemp(".csv", "profile-k", work)
    with os.fdopen(fd, "w") as f:
        for l in open(profile):
            if l.startswith("#") or l.startswith("op,"):
                f.write(l)
                continue
            op, tok, kv, us = l.strip().split(",")
            f.write("%s,%s,%s,%.3f\n" % (op, tok, kv, float(us) * k))
    return path

def sim1(trace, k, tp, links):
    prof = scaled(k)
    cmd = [sched, "--sim", "cpu", "-m", model, "--tp", "2", "--spp", "2",
           "--kvp", "2", "--kvp-max-tokens", kvpmax, "--kv-blocks", blocks,
           "--no-prefix-cache", "-p", "fcfs", "-c", chunk,
           "--profile", prof, "--tp-link", "%.6f" % tp, trace]
    if links:
        cmd += ["--spp-link", str(delay), "--kvp-link", str(delay),
                "--sched-link", str(delay)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    os.remove(prof)
    return means([json.loads(l) for l in out.stdout.splitlines()])

def pmap(f, xs):
    """[f(x) for x in xs], at once (each a medha-sched --sim process)"""
    with ThreadPoolExecutor(len(xs)) as ex:
        return list(ex.map(f, xs))

def sim(traces, k, tp, links):
    """The means over the runs of a case, each simulated as it came"""
    ps = pmap(lambda t: sim1(t, k, tp, links), traces)
    return [sum(p[m] for p in ps) / len(ps) for m in (0, 1)]

# each case: the means over its runs, and each run simulated with the
# requests in the order and at the times they came (the order of
# requests sent together varies from run to run)
runs = int(runs)
live = [[records(work + "/live%d-%d.jsonl" % (i, j)) for j in
         range(1, runs + 1)] for i in (0, 1)]
meas = [[sum(means(r)[m] for r in live[i]) / runs for m in (0, 1)]
        for i in (0, 1)]
trace = [[], []]
for i in (0, 1):
    for j, r in enumerate(live[i]):
        trace[i].append(work + "/sim%d-%d.jsonl" % (i, j + 1))
        as_arrived(r, trace[i][-1])

# k and the TP latency l: Newton's method on the TTFT and the TPOT of
# the run without delay (nearly linear in both), the derivatives by
# differences; l kept >= 0, and where it stays 0 (the TPOT fitted by k
# alone overshoots) k alone by a golden-section search over log k from
# 1/4 to 16, for the least sum of the two log errors
def at(x):
    return sim(trace[0], x[0], x[1] / 1e3, False)

def bad(p):
    return abs(math.log(p[0] / meas[0][0])) + abs(math.log(p[1] / meas[0][1]))

x, p = [1.0, 0.0], None
p = at(x)
for _ in range(4):
    if bad(p) < 0.01:
        break
    h = [0.25, 0.5]
    ys = [[x[0] + h[0], x[1]], [x[0], x[1] + h[1]]]
    J = [[(q[i] - p[i]) / h[j] for i in (0, 1)]
         for j, q in enumerate(pmap(at, ys))]
    det = J[0][0] * J[1][1] - J[1][0] * J[0][1]
    if abs(det) < 1e-12:
        break
    r = [meas[0][0] - p[0], meas[0][1] - p[1]]
    dx = [(r[0] * J[1][1] - r[1] * J[1][0]) / det,
          (r[1] * J[0][0] - r[0] * J[0][1]) / det]
    x = [max(0.05, x[0] + dx[0]), max(0.0, x[1] + dx[1])]
    p = at(x)
if x[1] == 0:
    lo, hi, g = math.log(0.25), math.log(16), (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = bad(at([math.exp(a), 0])), bad(at([math.exp(b), 0]))
    for _ in range(10):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = bad(at([math.exp(a), 0]))
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = bad(at([math.exp(b), 0]))
    x = [math.exp((lo + hi) / 2), 0.0]
k, tp = round(x[0], 3), round(x[1] / 1e3, 6)

def err(p, m):
    return 100 * (p - m) / m

print("%-20s %-20s %-20s %s" % ("case", "measured ttft tpot",
      "predicted ttft tpot", "error ttft tpot"))
cases = [("0 ms, raw", 0, 1, 0, False), ("0 ms, fit", 0, k, tp, False),
         ("%g ms, raw" % (delay * 1e3), 1, 1, 0, True),
         ("%g ms, predicted" % (delay * 1e3), 1, k, tp, True)]
rows = [(c[0], meas[c[1]], p) for c, p in
        zip(cases, pmap(lambda c: sim(trace[c[1]], *c[2:]), cases))]
for name, m, p in rows:
    print("%-20s %6.3f s %7.3f s   %6.3f s %7.3f s   %+6.1f%% %+6.1f%%" % (
        name, m[0], m[1], p[0], p[1], err(p[0], m[0]), err(p[1], m[1])))
print("fit without delay: k %.2f, --tp-link %.2f ms" % (k, tp * 1e3))
m, p = rows[-1][1], rows[-1][2]
ok = abs(err(p[0], m[0])) <= limit and abs(err(p[1], m[1])) <= limit
print("%g ms links: %s (limit %g%%)" % (delay * 1e3,
      "within" if ok else "NOT within", limit))
sys.exit(0 if ok else 1)
PY

#!/bin/sh
# trace-report.sh: medha-trace report --json on hand-written records gives
# the percentiles, SLO attainment and throughput worked out by hand, TBT
# percentiles from the records' gap histograms (a stall that per-request
# means hide shows in p99) and TTFT over prefill_alone; records without
# those fields give nulls and '-'; zstd records read the same; --plot
# writes a PNG; a bad line exits 1 naming it.
. "$(dirname "$0")/lib.sh"

# Gaps (man/medha-trace.5: bucket b holds [1e-6 1.05^(b-1), 1e-6 1.05^b)
# s): 0 has ten of 0.1 s (bucket 236); 1 nine of 0.1 s and a stall of
# 1.1 s (286); 3 keeps none (an older writer); L 0.4 s (265) and 0.6 s
# (273). prefill_alone makes TTFT / prefill 2, 4, 6, -, -, 2.5.
cat >"$tmp/rec" <<'J'
{"id": 0, "arrival": 0, "first_token": 1, "finish": 2, "prompt_tokens": 100, "output_tokens": 11, "ttft": 1, "tpot_mean": 0.1, "tpot_max": 0.1, "ttft_slo": 2.5, "tpot_slo": 0.3, "status": "ok", "prefill_alone": 0.5, "tbt": [[236, 10]]}
{"id": 1, "arrival": 1, "first_token": 3, "finish": 5, "prompt_tokens": 100, "output_tokens": 11, "ttft": 2, "tpot_mean": 0.2, "tpot_max": 1.1, "ttft_slo": 2.5, "tpot_slo": 0.3, "status": "ok", "prefill_alone": 0.5, "tbt": [[236, 9], [286, 1]]}

{"id": 2, "arrival": 2, "first_token": 5, "finish": 5, "prompt_tokens": 100, "output_tokens": 1, "ttft": 3, "tpot_mean": 0, "tpot_max": 0, "ttft_slo": 2.5, "tpot_slo": 0.3, "status": "ok", "prefill_alone": 0.5}
{"id": 3, "arrival": 3, "first_token": 7, "finish": 11, "prompt_tokens": 100, "output_tokens": 11, "ttft": 4, "tpot_mean": 0.4, "tpot_max": 0.4, "ttft_slo": 2.5, "tpot_slo": 0.3, "status": "ok"}
{"id": 4, "arrival": 4, "first_token": 0, "finish": 0, "prompt_tokens": 100, "output_tokens": 0, "ttft": 0, "tpot_mean": 0, "tpot_max": 0, "ttft_slo": 2.5, "tpot_slo": 0.3, "status": "failed"}
{"id": "L", "arrival": 0, "first_token": 10, "finish": 11, "prompt_tokens": 200000, "output_tokens": 3, "ttft": 10, "tpot_mean": 0.5, "tpot_max": 0.6, "ttft_slo": 20, "tpot_slo": 0.1, "status": "ok", "prefill_alone": 4, "tbt": [[265, 1], [273, 1]]}
J

check() {
	python3 - "$1" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
def v(b):  # what bucket b stands for: its geometric middle
    return 1e-6 * 1.05 ** (b - 0.5)
want = {
    "requests": 6, "completed": 5,
    "all": {"requests": 6, "completed": 5,
            "ttft": {"p50": 3, "p90": 7.6, "p99": 9.76},
            "tpot": {"p50": 0.3, "p90": 0.47, "p99": 0.497},
            "e2e": {"p50": 4, "p90": 9.8, "p99": 10.88},
            "tbt": {"p50": v(236), "p90": v(265), "p99": v(286), "max": 1.1},
            "ttft_norm": {"p50": 3.25, "p90": 5.4, "p99": 5.94},
            "slo_attainment": 2 / 6,
            "throughput_rps": 5 / 11, "throughput_tps": 37 / 11},
    "short": {"requests": 5, "completed": 4,
              "ttft": {"p50": 2.5, "p90": 3.7, "p99": 3.97},
              "tpot": {"p50": 0.2, "p90": 0.36, "p99": 0.396},
              "e2e": {"p50": 3.5, "p90": 6.8, "p99": 7.88},
              "tbt": {"p50": v(236), "p90": v(236), "p99": v(286),
                      "max": 1.1},
              "ttft_norm": {"p50": 4, "p90": 5.6, "p99": 5.96},
              "slo_attainment": 0.4,
              "throughput_rps": 4 / 11, "throughput_tps": 34 / 11},
    "long": {"requests": 1, "completed": 1,
             "ttft": {"p50": 10, "p90": 10, "p99": 10},
             "tpot": {"p50": 0.5, "p90": 0.5, "p99": 0.5},
             "e2e": {"p50": 11, "p90": 11, "p99": 11},
             "tbt": {"p50": v(265), "p90": v(273), "p99": v(273),
                     "max": 0.6},
             "ttft_norm": {"p50": 2.5, "p90": 2.5, "p99": 2.5},
             "slo_attainment": 0,
             "throughput_rps": 1 / 11, "throughput_tps": 3 / 11},
}
def same(w, g, path):
    if isinstance(w, dict):
        assert isinstance(g, dict) and set(w) == set(g), (path, g)
        for k in w:
            same(w[k], g[k], path + "." + k)
    else:
        assert abs(w - g) <= 1e-8 * max(1, abs(w)), (path, w, g)
same(want, doc, "")
# each within a bucket's ratio of the gap it stands for: the short
# class's p99 is the 1.1 s stall, which its TPOT p99 (0.396 s) hides
for got, gap in ((doc["all"]["tbt"]["p50"], 0.1),
                 (doc["short"]["tbt"]["p99"], 1.1),
                 (doc["long"]["tbt"]["p50"], 0.4)):
    assert gap / 1.05 <= got <= gap * 1.05, (got, gap)
PY
}

"$bin/medha-trace" report --json "$tmp/rec" >"$tmp/out"
[ "$(wc -l <"$tmp/out")" -eq 1 ] || { echo "not one line"; exit 1; }
check "$tmp/out"
zstd -q -c "$tmp/rec" >"$tmp/rec.zst"
head -n 3 "$tmp/rec" >"$tmp/part1"
tail -n +4 "$tmp/rec" | zstd -q -c >"$tmp/part2.zst"
"$bin/medha-trace" report --json - <"$tmp/rec.zst" >"$tmp/out2"
check "$tmp/out2"
"$bin/medha-trace" report --json "$tmp/part1" "$tmp/part2.zst" >"$tmp/out3"
check "$tmp/out3"

# the table: one row per class, within 100 columns: TTFT, TPOT, SLO,
# throughput
"$bin/medha-trace" report "$tmp/rec" >"$tmp/table"
grep -q '^short *5 *4 *2\.500 *3\.700 *3\.970 *200\.00 *360\.00 *396\.00 *40\.0% *0\.364 *3\.1$' "$tmp/table" ||
    { echo "table: short"; cat "$tmp/table"; exit 1; }
awk 'length > 100 { print "over 100 columns: " $0; bad = 1 } END { exit bad }' \
    "$tmp/table"
# --wide: every column; TBT (ms) and TTFT / prefill after tok/s
"$bin/medha-trace" report --wide "$tmp/rec" >"$tmp/table"
grep -q '^short *5 *4 *2\.500 *3\.700 *3\.970 *200\.00' "$tmp/table"
grep -q 'tok/s   tbt_p50   tbt_p90   tbt_p99   tbt_max ttftn_p50 ttftn_p90 ttftn_p99$' \
    "$tmp/table" || { echo "table: no TBT columns"; cat "$tmp/table"; exit 1; }
grep -q '^short .* 97\.74  *97\.74  *1120\.84  *1100\.00  *4\.00  *5\.60  *5\.96$' \
    "$tmp/table" || { echo "table: TBT of short"; cat "$tmp/table"; exit 1; }
# a class without requests has no row (it had one of zeros)
for w in "" --wide; do
	# shellcheck disable=SC2086
	"$bin/medha-trace" report $w "$tmp/part1" >"$tmp/table"
	grep -q '^short ' "$tmp/table" && ! grep -q '^long ' "$tmp/table" ||
	    { echo "table $w: an empty class"; cat "$tmp/table"; exit 1; }
done
# nor in the prefix cache's table (records with cached_tokens)
sed 's/"prompt_tokens": *\([0-9]*\)/"prompt_tokens": \1, "cached_tokens": 1/' \
    "$tmp/part1" >"$tmp/part1c"
"$bin/medha-trace" report "$tmp/part1c" >"$tmp/table"
grep -q '^class prompt_tokens cached_tokens' "$tmp/table" &&
    ! grep -q '^long ' "$tmp/table" ||
    { echo "cache table: an empty class"; cat "$tmp/table"; exit 1; }

# records without gaps or prefill_alone (older ones): null and '-', not 0
grep -v -e tbt -e prefill_alone "$tmp/rec" >"$tmp/old"
"$bin/medha-trace" report --json "$tmp/old" >"$tmp/oldj"
python3 - "$tmp/oldj" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for c in ("all", "short", "long"):
    assert doc[c]["tbt"] == {"p50": None, "p90": None, "p99": None,
                             "max": None}, (c, doc[c]["tbt"])
    assert doc[c]["ttft_norm"] == {"p50": None, "p90": None,
                                   "p99": None}, (c, doc[c]["ttft_norm"])
assert doc["all"]["ttft"]["p50"] == 4, doc["all"]["ttft"]
PY
"$bin/medha-trace" report --wide "$tmp/old" >"$tmp/oldt"
grep -q '^all .*  -  *-  *-  *-  *-  *-  *-$' "$tmp/oldt" ||
    { echo "old records: not '-'"; cat "$tmp/oldt"; exit 1; }

# no records: an error (it printed a table of zeros), exit 1
st=0
"$bin/medha-trace" report --json </dev/null >"$tmp/empty" 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q 'no records in the input' "$tmp/err" &&
    [ ! -s "$tmp/empty" ] || { echo "no records: status $st"; exit 1; }
# a trace instead of records: say so (it said "status: missing")
st=0
"$bin/medha-trace" gen -n 3 -s 1 | "$bin/medha-trace" report \
    >/dev/null 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q 'line 1: a request of a trace, not a result record: run the trace through medha-sched --sim' "$tmp/err" ||
    { echo "a trace to report: status $st"; cat "$tmp/err"; exit 1; }

# a line that is no record
sed '3s/.*/{"id": 9, "arrival": "soon"}/' "$tmp/rec" >"$tmp/bad"
if "$bin/medha-trace" report "$tmp/bad" >/dev/null 2>"$tmp/err"; then
	echo "bad record accepted"
	exit 1
else
	[ $? -eq 1 ] || { echo "bad record: wrong status"; exit 1; }
fi
grep -q 'line 3: ' "$tmp/err" || { cat "$tmp/err"; exit 1; }
# a histogram out of order, or with more gaps than tokens
for tbt in '[[236, 5], [236, 1]]:tbt[1]: bucket 236 not above the one before (236)' \
    '[[236, 11]]:tbt: 11 gaps, more than output_tokens - 1 (10)' \
    '[[474, 1]]:tbt[0]: bucket: not an integer in [0, 473] (got 474)'; do
	sed "1s/\"tbt\": \[\[236, 10\]\]/\"tbt\": ${tbt%%:*}/" "$tmp/rec" >"$tmp/bad"
	st=0
	"$bin/medha-trace" report "$tmp/bad" >/dev/null 2>"$tmp/err" || st=$?
	[ "$st" -eq 1 ] && grep -qF "line 1: ${tbt#*:}" "$tmp/err" || {
		echo "bad tbt ${tbt%%:*}: status $st"; cat "$tmp/err"; exit 1; }
done

# the plot
if command -v gnuplot >/dev/null 2>&1; then
	"$bin/medha-trace" report --plot "$tmp/cdf.png" "$tmp/rec" >/dev/null
	"$bin/medha-trace" report --plot "$tmp/titled.png" \
	    --title "fcfs, 1 QPS, 'quoted'" "$tmp/rec" >/dev/null
	[ -s "$tmp/titled.png" ] || { echo "--title: no plot"; exit 1; }
	[ "$(od -An -tx1 -N8 "$tmp/cdf.png" | tr -d ' \n')" = \
	    89504e470d0a1a0a ] || { echo "not a PNG"; exit 1; }
	"$bin/medha-trace" report --plot "$tmp/none.png" </dev/null \
	    >/dev/null 2>&1 && { echo "no records: exit 0"; exit 1; }
	[ ! -e "$tmp/none.png" ] || { echo "no records: a plot"; exit 1; }
	# the SLOs drawn (dashed, each curve's colour; the median where
	# requests differ), the key below the curves: gnuplot's script,
	# as a gnuplot first on the PATH keeps it
	mkdir "$tmp/gp"
	printf '#!/bin/sh\ntee "%s" | PATH="%s" gnuplot\n' "$tmp/gp/script" \
	    "$PATH" >"$tmp/gp/gnuplot"
	chmod +x "$tmp/gp/gnuplot"
	PATH="$tmp/gp:$PATH" "$bin/medha-trace" report --plot "$tmp/slo.png" \
	    "$tmp/rec" >/dev/null
	[ -s "$tmp/slo.png" ]
	grep -q "set arrow from 2.5, graph 0 to 2.5, graph 1 nohead dt 2 lw 2 lc rgb '#1f77b4'" "$tmp/gp/script" &&
	    grep -q "set arrow from 20, graph 0 to 20, graph 1 .*'#d62728'" "$tmp/gp/script" &&
	    grep -q "set arrow from 300, graph 0 .*'#1f77b4'" "$tmp/gp/script" &&
	    grep -q "title 'short (n=4), SLO 2.5, dashed'" "$tmp/gp/script" &&
	    grep -q "set key below" "$tmp/gp/script" ||
	    { echo "plot: no SLO lines"; cat "$tmp/gp/script"; exit 1; }
	# a full disk: gnuplot says nothing, the copy fails: exit 1
	st=0
	"$bin/medha-trace" report --plot /dev/full "$tmp/rec" >/dev/null \
	    2>"$tmp/err" || st=$?
	[ "$st" -eq 1 ] &&
	    grep -q '/dev/full: write error: No space left on device' "$tmp/err" &&
	    [ -c /dev/full ] ||
	    { echo "plot on a full disk: status $st"; cat "$tmp/err"; exit 1; }
else
	echo "skip: no gnuplot"
fi
# without gnuplot: error, exit 1, no picture
mt=$(cd "$bin" && pwd)/medha-trace
st=0
PATH=/nonexistent "$mt" report --plot "$tmp/x.png" "$tmp/rec" \
    >/dev/null 2>"$tmp/err" || st=$?
[ "$st" -eq 1 ] && grep -q gnuplot "$tmp/err" && [ ! -e "$tmp/x.png" ] || {
	echo "missing gnuplot: status $st"; cat "$tmp/err"; exit 1; }
# times out of order are an error with the line, not a negative TTFT
for rec in \
    '{"id":1,"arrival":10,"first_token":5,"finish":12,"prompt_tokens":3,"output_tokens":2,"status":"ok"}' \
    '{"id":1,"arrival":1,"first_token":5,"finish":2,"prompt_tokens":3,"output_tokens":2,"status":"ok"}'; do
	st=0
	printf '%s\n' "$rec" | "$bin/medha-trace" report >/dev/null \
	    2>"$tmp/err" || st=$?
	[ "$st" -eq 1 ] && grep -q 'line 1: .* is before ' "$tmp/err" || {
		echo "out-of-order times: status $st"; cat "$tmp/err"; exit 1; }
done
echo ok

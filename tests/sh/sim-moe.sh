#!/bin/sh
# sim-moe.sh: the simulator plans the mixtures of experts by name
# (issue 41, acceptance 5):
#  - a request of ten million tokens on llama4-scout (h200, tp 8, spp 4,
#    kvp 4) completes, its TTFT and TPOT printed, with 45000 KV blocks of
#    16 positions per KVP group: 2.88M positions over the four groups, so
#    it fits only because the 36 chunked layers of 48 hold their chunk
#    of 8192 and a prefill chunk (medha_kvplace_window's formula), not the
#    whole context;
#  - mixtral-8x7b, qwen3-30b-a3b and qwen3-235b-a22b serve a trace of
#    60 short requests on h100 with tp 8, every request ok;
#  - with --ep (issue 41 item 4) qwen3-30b-a3b serves it too, its info
#    line saying 16 of 128 experts a GPU and 4096 bytes a token from
#    each of 8, its decode steps dearer than TP's (the same expert
#    bytes read, and an all-gather a routed layer); --ep on a
#    model without experts is refused (exit 1).
# (The predictor's MoE arithmetic itself: pred_test's test_moe_shapes.)
. "$(dirname "$0")/lib.sh"
ms=$bin/medha-sched

echo '{"id": 0, "arrival": 0.0, "prompt_tokens": 10000000, "max_tokens": 64, "ttft_slo": 3600, "tpot_slo": 0.1}' >"$tmp/10m"
"$ms" --sim h200 -m llama4-scout --tp 8 --spp 4 --kvp 4 --kv-blocks 45000 \
    "$tmp/10m" >"$tmp/rec"
python3 - "$tmp/rec" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 1 and r[0]["status"] == "ok", r
r = r[0]
assert r["output_tokens"] == 64 and r["ttft"] > 0 and r["tpot_mean"] > 0, r
# four groups of 45000 blocks hold 2.88M positions of every layer
assert 4 * 45000 * 16 < r["prompt_tokens"]
print("llama4-scout, 10M tokens: TTFT %.1f s, TPOT %.2f ms" % (
    r["ttft"], 1e3 * r["tpot_mean"]))
PY

"$bin/medha-trace" gen -q 2 -n 60 -l 0 -s 4 >"$tmp/trace"
for m in mixtral-8x7b qwen3-30b-a3b qwen3-235b-a22b; do
	"$ms" --sim h100 -m $m --tp 8 "$tmp/trace" >"$tmp/$m.rec"
	python3 - "$tmp/$m.rec" $m <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 60 and all(x["status"] == "ok" for x in r), sys.argv[2]
print("%s: 60 requests ok, mean TTFT %.3f s, mean TPOT %.2f ms" % (
    sys.argv[2], sum(x["ttft"] for x in r) / 60,
    1e3 * sum(x["tpot_mean"] for x in r) / 60))
PY
done

m=qwen3-30b-a3b
"$ms" -v --sim h100 -m $m --tp 8 --ep "$tmp/trace" >"$tmp/ep.rec" \
    2>"$tmp/ep.err"
grep -q "expert parallelism: 16 of $m's 128 experts whole a worker; a routed layer all-gathers 32768 bytes a token (4096 from each of 8 workers)" \
    "$tmp/ep.err" || { cat "$tmp/ep.err"; exit 1; }
python3 - "$tmp/$m.rec" "$tmp/ep.rec" <<'PY'
import json, sys
tp, ep = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
assert len(ep) == 60 and all(x["status"] == "ok" for x in ep)
t = [sum(x["tpot_mean"] for x in r) / 60 for r in (tp, ep)]
assert t[1] > t[0], t
print("qwen3-30b-a3b --ep: 60 requests ok, mean TPOT %.2f ms (TP %.2f)" % (
    1e3 * t[1], 1e3 * t[0]))
PY
expect_status 1 "$ms" --sim h100 -m llama3-8b --tp 8 --ep "$tmp/trace"
grep -q 'expert parallelism: llama3-8b has no experts' "$tmp/err"

#!/bin/sh
# topo.sh: the multi-worker topologies of examples/serve.sh against the
# single process.
#  1. Each cpu topology (tp2, spp2, kvp2, tp2-spp2-kvp2; kvp3 on the
#     random model only, where a request's pieces lie on two of the three
#     groups and the third merges nothing with them) on a random
#     model written by the gguf package (4 heads over 2 kv heads) and on
#     SmolLM2 (9 over 3, which tp2 splits 2 + 1), each model's
#     topologies serving at once: sixteen greedy requests arriving at
#     once through the router (prompts of 3 to about 550 tokens, so chunks of
#     one prompt follow each other through the stages; for KVP, with 256
#     positions per group, up to 443 tokens, so that prompts spill onto
#     the second group and one decode crosses over), each exactly the
#     tokens medha-worker -p gives alone (with the fast int8 paths: TP
#     is bit-exact by construction, and the KVP merge's last-bit
#     differences have not flipped a token here); then
#     tests/tools/topo_dist prints how far tp2's and kvp2's logits are
#     from the single process's (relative L2; where greedy tokens part,
#     the top-2 gap there) and fails if tokens part with f32 activations
#     (the random model in both modes; SmolLM2 with int8 only: f32 is
#     slow there).
#  2. sim64 (64 sim workers behind a router): after a client went away
#     in the middle of a long prompt, a generated trace replayed fast
#     ends every request with exactly one record, all ok, and SIGTERM
#     stops all 66 processes.
. "$(dirname "$0")/lib.sh"
router=ipc://$tmp/router.sock

python3 "$top/tests/ref/solo.py" trace "$tmp/trace.jsonl" 16 2 4 6 8 10 12 14 25
# for KVP (two groups of 256 positions): prompts of up to 443 tokens,
# four of them past 256, and one of 245 whose decode crosses it
python3 "$top/tests/ref/solo.py" trace "$tmp/trace-kvp.jsonl" 16 2 4 6 8 10 11 14 20

# compare LABEL MODEL TOPOLOGY...: 16 requests through each topology
# against -p, the topologies running at once (lib.sh's topo_compare_all)
compare() {
	l=$1 m=$2
	shift 2
	for t in "$@"; do
		tr=$tmp/trace.jsonl
		case $t in *kvp*) tr=$tmp/trace-kvp.jsonl ;; esac
		topo_add "$t-$l" "$t" "$m" "$tr"
	done
	topo_compare_all
}

# dist MODE MODEL: how far tp2's and kvp2's logits are from the single
# process's on the KVP trace (tests/tools/topo_dist: in one process, with
# the daemon's arithmetic; it fails if tokens part with f32 activations,
# which are several times slower than the int8 paths on SmolLM2)
dist() {
	python3 "$top/tests/ref/solo.py" ids "$tmp/trace-kvp.jsonl" \
	    "$bin/medha-worker" "$2" "$tmp/kvp.ids"
	"$tools/topo_dist" -m "$1" "$2" "$tmp/kvp.ids" 256 >"$tmp/dist.txt" || {
		cat "$tmp/dist.txt"
		exit 1
	}
	echo "on ${2##*/}:"
	grep -v ' request ' "$tmp/dist.txt" | sed 's/^/  /'
}

if [ -s "$model" ]; then
	if has_py gguf numpy; then
		"$py" "$top/tests/ref/random_model.py" "$model" "$tmp/random.gguf"
		compare random "$tmp/random.gguf" tp2 spp2 kvp2 kvp3 tp2-spp2-kvp2
		dist both "$tmp/random.gguf"
	else
		echo "skip: the random model needs $py with gguf"
	fi
	compare model "$model" tp2 spp2 kvp2 tp2-spp2-kvp2
	dist int8 "$model"
else
	echo "skip: $model missing (run contrib/fetch-refs.sh)"
fi

# ---- 2. sim64 ----
topo_start sim64
# a client that goes away while the chunks of its million-token prompt
# run through the stages: the frees of its sequence must not reach a
# stage before the batches that still hold its chunks
# (another client's long decode runs meanwhile and must end ok)
echo '{"id": "stays", "arrival": 0, "prompt_tokens": 900, "max_tokens": 400}' \
    >"$tmp/stays.jsonl"
echo '{"id": "gone", "arrival": 0, "prompt_tokens": 1000000, "max_tokens": 4}' \
    >"$tmp/gone.jsonl"
"$bin/medha-trace" replay -a "$router" "$tmp/stays.jsonl" >"$tmp/stays.out" &
stays=$!
sleep 0.3
timeout 1 "$bin/medha-trace" replay -a "$router" "$tmp/gone.jsonl" \
    >/dev/null 2>&1 || true
wait $stays
grep -q '"status": "ok"' "$tmp/stays.out" || {
	echo "a request failed when another client went away:"
	cat "$tmp/stays.out"
	exit 1
}
"$bin/medha-trace" gen -n 100 -q 50 -l 0 -s 9 --max-tokens 16 \
    >"$tmp/t.jsonl"
"$bin/medha-trace" replay -a "$router" --speed 4 "$tmp/t.jsonl" \
    >"$tmp/sim.jsonl"
topo_stop
python3 - "$tmp/t.jsonl" "$tmp/sim.jsonl" <<'PY'
import collections, json, sys
want = [json.loads(l)["id"] for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
ids = collections.Counter(r["id"] for r in got)
assert sorted(ids) == sorted(want) and max(ids.values()) == 1, ids
bad = [r for r in got if r["status"] != "ok"]
assert not bad, bad[:3]
print("sim64: %d requests, one record each: %s" %
      (len(want), dict(collections.Counter(r["status"] for r in got))))
PY
echo "topo: ok"

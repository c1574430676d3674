#!/usr/bin/env bash
# gpu-check.sh: every check of the cuda backend (issue 26) that needs a
# GPU, in one run of a few minutes on a lent machine, with the programs
# built here (it builds nothing there). On this machine first:
#
#	make -j2 && make gpu-pack	(contrib/gpu-pack.sh: build/gpu-pack,
#					build/gpu-libs)
#
# then, with the device tool (15 minutes of device time in all), the
# SmolLM2 pieces first if backend_cuda_test is to check on it, and the
# mixtures of experts' models for the moe step (build/gpu-moe; short
# runs: contrib/gpu-pack.sh), then:
#
#	run(command="bash contrib/gpu-check.sh",
#	    carry=["build/gpu-pack", "build/gpu-libs"], timeout_s=540)
#
# Steps, each with its own time limit, in this order (GPU_CHECK_STEPS,
# a list of their names, runs only those after libs and gpu; a rerun's
# way to the steps skipped for time):
#   libs              ldd of every program: what is missing; where
#                     cuBLASLt and NCCL are (contrib/gpu-env.sh)
#   gpu               nvidia-smi; without a GPU the script stops here
#                     (exit 1, within seconds)
#   kernels_test      every kernel against its cpu twin
#   attn_plan         the attention plan's time alone (attn_bench -p; made
#                     once a forward pass, issue 42 item 5)
#   backend_cuda_test the backend against the cpu backend and float64
#   families          the other model families (qwen2, qwen3, gemma2,
#                     gemma3, phi3, llama with a window, gemma3 at head
#                     size 256; random models in
#                     build/gpu-pack/families) against the cpu backend:
#                     a row each, max |logit diff| and greedy tokens equal
#   moe               the mixtures of experts (issue 41: Mixtral's top-2
#                     of 8, qwen2moe's gated shared expert with dense
#                     layers between, qwen3moe's top-4 of 16, llama4's
#                     top-1 with NoPE and L2 Q/K norms; random
#                     models in build/gpu-moe, GPU_MOE, carried by a run
#                     before this one: gpu-pack.sh) as families is, a
#                     row each; then kernels_test --moe-bench: the routed
#                     FFN's kernels at Qwen3-30B-A3B's shape, batches of
#                     1 to 256, the experts touched, weight GB/s and
#                     TFLOP/s. Acceptance: "figure: 4 of 4 mixtures as
#                     the cpu backend" (the rates are to read)
#   batch_inv         backend_cuda_test's mixed batch against each
#                     sequence alone, by default and MEDHA_CUDA_GEMM=fast:
#                     the same bits or not (cuBLASLt does not promise it;
#                     issue 42 item 7, medha-worker(1) MEDHA_CUDA_GEMM)
#   sanitizer         compute-sanitizer (memcheck) on kernels_test --quick
#   attn_bench        the attention kernels' rates, then PyTorch's SDPA
#   attn_torch        on the same shapes (contrib/bench-attn-torch.py)
#   e2e_bench         a random Llama-3-8B in bf16: 8K prefill and greedy
#   bench_hf          decode of one sequence, then Hugging Face
#                     transformers on the same (contrib/bench-hf.py)
#   live_single       MEDHA_BACKEND=cuda examples/serve.sh single on the
#                     random test model: 16 concurrent greedy requests,
#                     each with the tokens of a one-shot medha-worker
#                     --backend cuda -p; then 8 concurrent decodes
#                     against one: tokens a second, at least 6x
#                     (GPU_CHECK_DECODE, 256 output tokens each: the
#                     tests on stand-ins, which check its wiring, ask
#                     fewer)
#   live_spp2         serve.sh spp2 and kvp2 (two worker processes on the
#   live_kvp2         GPU, --coll nng; KVP pieces of 512 positions, so the
#                     longer prompts span both groups): the 16 requests'
#                     tokens against single's (kvp2: a difference is
#                     reported, for a look at float64 near-ties)
#   prof_check        medha-prof --backend cuda -m llama3-8b --check 100:
#                     median error under 5%, p90 under 15%
#   racecheck         sanitizer's with racecheck
#   attn_simple       attn_bench -q on the fallback attention kernel
#                     (MEDHA_K_ATTN=simple)
#   lt_fallback       the cuBLASLt fallbacks the steps before took (an
#                     algorithm refusing a row count: "medha: cuda:
#                     fallback: ..." in their output and the live logs)
#   graph_fallback    decode captures that failed and ran eagerly (NCCL
#                     connecting inside a capture needs two GPUs: tp2 on
#                     NCCL is tests/sh/cuda-mock-live.sh's, on stand-ins)
# Before gpu: smollm2, SmolLM2 for backend_cuda_test's cases on it
# (MEDHA_CACHE): the cache's, or the pieces gpu-pack.sh made
# (build/gpu-smollm2-N, carried by runs of their own before this one),
# put together and checked by md5.
# A step after gpu is given what is left of GPU_CHECK_BUDGET (440 s; with
# the first steps the whole stays under 8 minutes) up to its own limit,
# and skipped when less than a third of that is left.
#
# Logs go to $OUT (the device tool's output folder; ./gpu-out here), as
# few files as the tool brings back: gpu-check.log (every step's output,
# appended as it ends), summary.txt (the table, rewritten after each
# step), prof-cuda.csv (the measured profile), single.jsonl (the live
# records). The table: step, result (ok, FAIL, TIMEOUT, skip), figure: a
# program's last "figure: ..." line, else its count of "ok"/"FAIL" lines,
# else its last line. Exit status 0 when no step failed.
#
# Programs: build/gpu-pack/bin and build/gpu-pack/tests/gpu when there,
# else bin/ and build/tests/gpu (MEDHA_BIN, GPU_TESTS); the live model
# build/gpu-pack/random.gguf (GPU_MODEL).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
self=$top/contrib/gpu-check.sh

# ---- the parts that run under timeout (bash gpu-check.sh --part F) ----

# serve_up TOPO: examples/serve.sh TOPO on the GPU in the background
# ($serve), its front door $front; 0 once it says ready
serve_up() {
	local topo=$1 r=()
	front=ipc://$work/$topo.sock
	[ "$topo" = single ] || r=(MEDHA_ROUTER="$front")
	env MEDHA_BIN="$bin" MEDHA_BACKEND="$backend" MEDHA_MODEL="$model" \
	    MEDHA_ADDR="$front" "${r[@]}" MEDHA_LOG="$work/$topo-logs" \
	    MEDHA_KVP_MAX_TOKENS="${MEDHA_KVP_MAX_TOKENS:-512}" \
	    MEDHA_RESTART=0 bash "$top/examples/serve.sh" "$topo" \
	    2>"$work/$topo.err" &
	serve=$!
	for _ in $(seq 1800); do
		grep -q '^ready$' "$work/$topo.err" && return 0
		kill -0 "$serve" 2>/dev/null || break
		sleep 0.1
	done
	echo "serve.sh $topo did not become ready:"
	cat "$work/$topo.err"
	tail -n 20 "$work/$topo-logs"/*.log
	serve_down
	return 1
}

serve_down() {
	kill -TERM "$serve" 2>/dev/null
	wait "$serve" 2>/dev/null
}

need_model() {
	[ -s "$model" ] && return 0
	echo "skip: $model missing (contrib/gpu-pack.sh makes it)"
	exit 77
}

# 16 concurrent greedy requests against one-shot runs, then the decode
# speedup of 8 concurrent requests over one
live_single() {
	local st=0 differ
	need_model
	serve_up single || return 1
	python3 "$top/tests/ref/solo.py" trace "$work/trace.jsonl" 24 \
	    2 4 6 8 10 12 14 25
	if ! "$bin/medha-trace" replay -a "$front" --token-ids \
	    "$work/trace.jsonl" >"$work/single.jsonl"; then
		serve_down
		return 1
	fi
	cp "$work/single.jsonl" "$OUT/single.jsonl"
	MEDHA_SOLO_OPTS="--backend $backend" python3 "$top/tests/ref/solo.py" \
	    check "$work/trace.jsonl" "$work/single.jsonl" \
	    "$bin/medha-worker" "$model" "live-$backend" | tee "$work/solo.out"
	[ "${PIPESTATUS[0]}" = 0 ] || st=1
	differ=$(sed -n 's/.* \([0-9]*\) differ from.*/\1/p' "$work/solo.out")
	python3 - "$work" "${GPU_CHECK_DECODE:-256}" <<'PY'
import json, sys
w, nd = sys.argv[1], int(sys.argv[2])
base = ["The capital of France is", "Once upon a time",
        "Write a haiku about the sea.", "def fibonacci(n):",
        "List three prime numbers:", "The quick brown fox",
        "In 1969, the first humans", "Water boils at"]
for n in (1, 8):
    with open("%s/dec%d.jsonl" % (w, n), "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": "d%d" % i, "arrival": 0,
                                "prompt": base[i], "max_tokens": nd,
                                "temperature": 0, "ignore_eos": True}) + "\n")
PY
	for n in 1 8; do
		"$bin/medha-trace" replay -a "$front" "$work/dec$n.jsonl" \
		    >"$work/dec$n.out" || st=1
	done
	serve_down
	python3 - "$work" "${differ:-?}" <<'PY' || st=1
import json, sys
w, differ = sys.argv[1], sys.argv[2]
def recs(n):
    return [json.loads(l) for l in open("%s/dec%d.out" % (w, n))]
one = recs(1)[0]
r1 = (one["output_tokens"] - 1) / (one["finish"] - one["first_token"])
rs = recs(8)
assert len(rs) == 8 and all(r["status"] == "ok" for r in rs), rs
t = max(r["finish"] for r in rs) - min(r["first_token"] for r in rs)
r8 = sum(r["output_tokens"] - 1 for r in rs) / t
print("decode: one request %.0f tok/s; 8 at once %.0f tok/s in all: %.2fx"
      % (r1, r8, r8 / r1))
print("figure: 16 requests, %s differ from -p; 8 decodes %.1fx one's "
      "tok/s (%.0f, %.0f)" % (differ, r8 / r1, r1, r8))
sys.exit(0 if r8 / r1 >= 6 else 1)
PY
	return $st
}

# live_topo TOPO: the 16 requests on TOPO against single's records
live_topo() {
	local topo=$1
	need_model
	if [ ! -s "$work/single.jsonl" ]; then
		echo "no records of live_single to compare with"
		return 1
	fi
	serve_up "$topo" || return 1
	"$bin/medha-trace" replay -a "$front" --token-ids \
	    "$work/trace.jsonl" >"$work/$topo.jsonl"
	local st=$?
	serve_down
	[ $st = 0 ] || return 1
	python3 - "$work/single.jsonl" "$work/$topo.jsonl" "$topo" <<'PY'
import json, sys
a = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
b = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
bad = [i for i in sorted(a)
       if a[i].get("token_ids") != b[i].get("token_ids")]
for i in bad:
    if "token_ids" not in b[i]:
        print("%s: %s %s: %s" % (i, sys.argv[3], b[i]["status"],
                                 b[i].get("reason", "")))
        continue
    x, y = a[i]["token_ids"], b[i]["token_ids"]
    k = next((j for j in range(min(len(x), len(y))) if x[j] != y[j]),
             min(len(x), len(y)))
    print("%s: first differs at output token %d: single %s, %s %s" %
          (i, k, x[k:k + 4], sys.argv[3], y[k:k + 4]))
print("figure: %d requests, %d differ from single" % (len(a), len(bad)))
sys.exit(1 if bad else 0)
PY
}

live_spp2() { live_topo spp2; }
live_kvp2() { live_topo kvp2; }
# not a step (one GPU holds no two NCCL ranks): tests/sh/cuda-mock-live.sh
# runs it on the stand-ins with MEDHA_COLL nng and nccl
live_tp2() { live_topo tp2; }

prof_check() {
	# shellcheck disable=SC2086 # GPU_PROF_OPTS: more flags (tests)
	"$bin/medha-prof" --backend "$backend" -m "${GPU_PROF_MODEL:-llama3-8b}" \
	    -o "$OUT/prof-$backend.csv" --check 100 ${GPU_PROF_OPTS:-} |
	    tee "$work/prof.out"
	[ "${PIPESTATUS[0]}" = 0 ] || return 1
	python3 - "$work/prof.out" <<'PY'
import re, sys
m = re.search(r"median ([0-9.]+)%, p90 ([0-9.]+)%", open(sys.argv[1]).read())
assert m, "no error summary"
med, p90 = float(m.group(1)), float(m.group(2))
print("figure: predicted vs measured: median %.1f%%, p90 %.1f%%" % (med, p90))
sys.exit(0 if med < 5 and p90 < 15 else 1)
PY
}

# sanitize TOOL: compute-sanitizer --tool TOOL on kernels_test --quick
sanitize() {
	local cs
	prog "$gtests/kernels_test"
	cs=$(command -v compute-sanitizer || echo "$cuda/bin/compute-sanitizer")
	prog "$cs"
	"$cs" --tool "$1" --error-exitcode 3 "$gtests/kernels_test" --quick
}
sanitizer() { sanitize memcheck; }
racecheck() { sanitize racecheck; }
# the attention's fallback kernel alone (kernels/README)
attn_simple() {
	prog "$gtests/attn_bench" && MEDHA_K_ATTN=simple "$gtests/attn_bench" -q
}

# backend_cuda_test's mixed batch by default and with fast GEMMs
batch_inv() {
	local m ds dn fs fn
	prog "$gtests/backend_cuda_test"
	for m in default fast; do
		[ $m = default ] || export MEDHA_CUDA_GEMM=fast
		MEDHA_CUDA_TEST_CASES=mixed "$gtests/backend_cuda_test" |
		    tee "$work/bi-$m.out"
		[ "${PIPESTATUS[0]}" = 0 ] || return 1
	done
	ds=$(grep -c '(the same bits: batch-invariant)' "$work/bi-default.out")
	dn=$(grep -c '(NOT batch-invariant)' "$work/bi-default.out")
	fs=$(grep -c '(the same bits: batch-invariant)' "$work/bi-fast.out")
	fn=$(grep -c '(NOT batch-invariant)' "$work/bi-fast.out")
	echo "figure: the same bits in a mixed batch: default $ds of" \
	    "$((ds + dn)) models, MEDHA_CUDA_GEMM=fast $fs of $((fs + fn))"
	# the default's promise as measured: every model's mixed batch
	[ "$dn" = 0 ]
}

# the other model families (issue 36 item 8): backend_cuda_test on a
# random model of each (build/gpu-pack/families: gpu-pack.sh writes them
# with tests/ref/arch_model.py's CUDA_CASES) against the cpu backend's
# f32 reference mode: logits, greedy tokens, chunks, layer ranges, TP 2
# and KVP 2. A "family-row:" line per model, which the driver makes a
# row of the table: its largest |logit difference| from the cpu and its
# greedy tokens equal
families() {
	local st n ok
	prog "$gtests/backend_cuda_test"
	if ! ls "$pack"/families/*.gguf >/dev/null 2>&1; then
		echo "skip: no $pack/families (contrib/gpu-pack.sh writes them)"
		exit 77
	fi
	MEDHA_CUDA_TEST_FAMILIES="$(echo "$pack"/families/*.gguf)" \
	    "$gtests/backend_cuda_test" | tee "$work/fam.out"
	st=${PIPESTATUS[0]}
	sed -n 's/^\(ok\|FAIL\) *family \([^:]*\): max |logit diff| vs cpu \([^,]*\), worst rel L2 \([^;]*\); greedy [0-9]* steps after [0-9]*: \([0-9]* of [0-9]*\) equal (\([0-9]*\) near-ties)$/family-row: \2 \1 max |logit diff| \3, rel L2 \4, greedy \5 equal (\6 near-ties)/p' \
	    "$work/fam.out"
	n=$(grep -c '^\(ok\|FAIL\) *family ' "$work/fam.out")
	ok=$(grep -c '^ok *family ' "$work/fam.out")
	echo "figure: $ok of $n families as the cpu backend; $(grep -c '^ok  ' \
	    "$work/fam.out") ok, $(grep -c '^FAIL ' "$work/fam.out") FAIL in all"
	return "$st"
}

# the mixtures of experts (issue 41 item 3): families' check on
# build/gpu-moe (CUDA_MOE_CASES), a "moe-row:" line each (the
# backend_cuda_test rule for experts: the median step within 5e-2, at
# most a quarter of the steps past it, greedy tokens equal but at
# near-ties), then the
# kernels' rates (kernels_test --moe-bench; left out where that program
# is not there, as on the stand-ins)
moe() {
	local st n ok
	local dir=${GPU_MOE:-$top/build/gpu-moe}
	prog "$gtests/backend_cuda_test"
	if ! ls "$dir"/*.gguf >/dev/null 2>&1; then
		echo "skip: no $dir (contrib/gpu-pack.sh writes it, a run" \
		    "carries it before this one)"
		exit 77
	fi
	MEDHA_CUDA_TEST_FAMILIES="$(echo "$dir"/*.gguf)" \
	    "$gtests/backend_cuda_test" | tee "$work/moe.out"
	st=${PIPESTATUS[0]}
	sed -n 's/^\(ok\|FAIL\) *family \([^:]*\): max |logit diff| vs cpu \([^,]*\), worst rel L2 \([^,]*\), median \([^ ]*\) .*; greedy [0-9]* steps after [0-9]*: \([0-9]* of [0-9]*\) equal (\([0-9]*\) near-ties)$/moe-row: \2 \1 max |logit diff| \3, rel L2 \4 (median \5), greedy \6 equal (\7 near-ties)/p' \
	    "$work/moe.out"
	n=$(grep -c '^\(ok\|FAIL\) *family ' "$work/moe.out")
	ok=$(grep -c '^ok *family ' "$work/moe.out")
	if [ -f "$gtests/kernels_test" ]; then
		"$gtests/kernels_test" --moe-bench || st=1
	else
		echo "skip: kernels_test missing: no rates"
	fi
	echo "figure: $ok of $n mixtures as the cpu backend; $(grep -c '^ok  ' \
	    "$work/moe.out") ok, $(grep -c '^FAIL ' "$work/moe.out") FAIL in all"
	return "$st"
}

# fallbacks PATTERN: the "medha: cuda: fallback:" lines matching PATTERN
# in the steps' output so far and the live workers' logs
fallbacks() {
	cat "$OUT/gpu-check.log" "$work"/*-logs/*.log 2>/dev/null |
	    grep "^medha: cuda: fallback: .*$1" | sort | uniq -c | sort -rn
}
lt_fallback() {
	local n i u
	fallbacks 'refuses' | tee "$work/lt.out"
	n=$(awk '{ n += $1 } END { print n + 0 }' "$work/lt.out")
	i=$(grep -c 'INVALID_VALUE' "$work/lt.out")
	u=$(grep -c 'NOT_SUPPORTED' "$work/lt.out")
	echo "figure: cuBLASLt fallbacks: $n said ($i shapes INVALID_VALUE," \
	    "$u NOT_SUPPORTED)"
}
graph_fallback() {
	local n
	fallbacks 'captur' | tee "$work/gf.out"
	n=$(awk '{ n += $1 } END { print n + 0 }' "$work/gf.out")
	echo "figure: decode captures failed (run eagerly): $n; NCCL in a" \
	    "capture: cuda-mock-live.sh (one GPU holds no two ranks)"
}

# programs a step runs (missing: the step is skipped)
prog() {
	[ -f "$1" ] && return 0
	echo "skip: ${1##*/} missing (not built, or not written yet)"
	exit 77
}
kernels_test() { prog "$gtests/kernels_test" && "$gtests/kernels_test"; }
backend_cuda_test() {
	prog "$gtests/backend_cuda_test" && "$gtests/backend_cuda_test"
}
attn_bench() { prog "$gtests/attn_bench" && "$gtests/attn_bench"; }
attn_plan() { prog "$gtests/attn_bench" && "$gtests/attn_bench" -p; }
e2e_bench() { prog "$gtests/e2e_bench" && "$gtests/e2e_bench"; }
# Python with the library path it came with (PyTorch brings its CUDA)
attn_torch() {
	prog "$top/contrib/bench-attn-torch.py"
	LD_LIBRARY_PATH=$gpu_env_orig_ld python3 \
	    "$top/contrib/bench-attn-torch.py"
}
bench_hf() {
	LD_LIBRARY_PATH=$gpu_env_orig_ld python3 "$top/contrib/bench-hf.py"
}

libs() {
	local n=0 m f
	for f in "$bin"/medha-* "$gtests"/*; do
		[ -f "$f" ] || continue
		m=$(ldd "$f" 2>&1 | grep 'not found')
		if [ -n "$m" ]; then
			echo "$f:"
			echo "$m"
			n=$((n + 1))
		fi
	done
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	ls "$cuda"/lib64/libcublasLt.so* 2>/dev/null || echo "no cuBLASLt in $cuda/lib64"
	echo "NCCL: ${gpu_env_nccl:-not found (the backend then has no NCCL: --coll nng)}"
	[ -n "$gpu_env_nccl" ] && ls "$gpu_env_nccl"
	if [ "$n" -gt 0 ]; then
		echo "figure: $n programs miss libraries (make gpu-pack here)"
		return 1
	fi
	echo "figure: nothing missing; NCCL in ${gpu_env_nccl:-no directory found}"
}

gpu() {
	if ! command -v nvidia-smi >/dev/null 2>&1; then
		echo "figure: no GPU: no nvidia-smi"
		return 1
	fi
	if ! nvidia-smi -L 2>&1 | grep -q '^GPU'; then
		nvidia-smi -L 2>&1
		echo "figure: no GPU: nvidia-smi lists none"
		return 1
	fi
	nvidia-smi
	echo "figure: $(nvidia-smi --query-gpu=name,memory.total,driver_version \
	    --format=csv,noheader | head -n 1)"
}

# ---- the driver ----

setup() {
	OUT=${OUT:-$top/gpu-out}
	pack=${GPU_PACK:-$top/build/gpu-pack}
	if [ -d "$pack/bin" ]; then
		bin=${MEDHA_BIN:-$pack/bin}
		gtests=${GPU_TESTS:-$pack/tests/gpu}
	else
		bin=${MEDHA_BIN:-$top/bin}
		gtests=${GPU_TESTS:-$top/build/tests/gpu}
	fi
	model=${GPU_MODEL:-$pack/random.gguf}
	cuda=${CUDA_HOME:-/usr/local/cuda}
	# the live parts' backend: cpu tries them out where there is no GPU
	# (bash gpu-check.sh --part live_single, with $work and $OUT set)
	backend=${GPU_CHECK_BACKEND:-cuda}
	GPU_LIBS=${GPU_LIBS:-$(dirname "$pack")/gpu-libs}
	export GPU_LIBS
	# shellcheck source=contrib/gpu-env.sh
	. "$top/contrib/gpu-env.sh"
	export OUT bin gtests model cuda backend gpu_env_orig_ld gpu_env_nccl
}

if [ "${1:-}" = --part ]; then
	setup
	"$2"
	exit $?
fi

setup
mkdir -p "$OUT"
work=$(mktemp -d)
export work
trap 'rm -rf "$work"' EXIT
log=$OUT/gpu-check.log
summary=$OUT/summary.txt
: >"$log"
budget=${GPU_CHECK_BUDGET:-440}
t_start=$SECONDS
rows=()
nfail=0

# row STEP RESULT FIGURE: a line of the table, which is rewritten
row() {
	rows+=("$(printf '%-18s %-8s %s' "$1" "$2" "$3")")
	{
		echo "gpu-check on $(hostname) at $(date -u '+%Y-%m-%d %H:%M UTC')," \
		    "$((SECONDS - t_start)) s"
		printf '%-18s %-8s %s\n' step result figure
		printf '%s\n' "${rows[@]}"
	} >"$summary"
}

# figure LOG: what the table says of a step's output
figure() {
	local f ok bad
	f=$(sed -n 's/^figure: //p' "$1" | tail -n 1)
	if [ -z "$f" ]; then
		ok=$(grep -c '^ok' "$1")
		bad=$(grep -c '^FAIL' "$1")
		if [ "$((ok + bad))" -gt 0 ]; then
			f="$ok ok, $bad FAIL"
		else
			# an error's line rather than what followed it
			f=$(grep -E 'skip: |[Ee]rror|not built|no CUDA device|not found|No such|FAIL' \
			    "$1" | tail -n 1)
			[ -n "$f" ] || f=$(grep -v '^[[:space:]]*$' "$1" | tail -n 1)
		fi
	fi
	f=${f#skip: }
	printf '%s' "${f:0:90}"
}

# step NAME LIMIT: bash gpu-check.sh --part NAME under timeout
step() {
	local name=$1 limit=$2 left t0 rc res
	left=$((budget - (SECONDS - t_start)))
	if [ -n "${GPU_CHECK_STEPS:-}" ] && [ "$name" != libs ] &&
	    [ "$name" != gpu ]; then
		case " $GPU_CHECK_STEPS " in *" $name "*) ;; *) return 0 ;; esac
	fi
	# libs and gpu always run: the rest depends on them; the fallback
	# counts take no time and say what the steps before met
	case $name in libs | gpu | *_fallback) left=$limit ;; esac
	if [ "$left" -lt $((limit / 3)) ]; then
		row "$name" skip "out of time ($left s of the budget left)"
		echo "=== $name: skipped, $left s left" >>"$log"
		return 0
	fi
	[ "$limit" -le "$left" ] || limit=$left
	echo "gpu-check: $name (up to $limit s)" >&2
	t0=$SECONDS
	timeout -k 10 "$limit" bash "$self" --part "$name" \
	    >"$work/$name.log" 2>&1
	rc=$?
	case $rc in
	0) res=ok ;;
	77) res=skip ;;
	124 | 137) res=TIMEOUT ;;
	*) res="FAIL($rc)" ;;
	esac
	case $res in ok | skip) ;; *) nfail=$((nfail + 1)) ;; esac
	{
		echo "=== $name: status $rc ($res) after $((SECONDS - t0)) s"
		cat "$work/$name.log"
	} >>"$log"
	row "$name" "$res" "$(figure "$work/$name.log") [$((SECONDS - t0)) s]"
	return $rc
}

# SmolLM2 for backend_cuda_test: the cache's, or put together from the
# pieces gpu-pack.sh made, carried by runs before this one
smollm2() {
	local f=SmolLM2-135M-Instruct.Q4_1.gguf d n=0 sum want=
	if [ -s "${MEDHA_CACHE:-$top/cache}/models/$f" ]; then
		MEDHA_CACHE=${MEDHA_CACHE:-$top/cache}
		row smollm2 ok "in $MEDHA_CACHE"
		return
	fi
	mkdir -p "$work/cache/models"
	for d in "$top"/build/gpu-smollm2-[0-9]; do
		[ -s "$d/part" ] || continue
		n=$((n + 1))
		want=$(cut -d' ' -f2 "$d/md5")
		cat "$d/part" >>"$work/cache/models/$f"
	done
	if [ "$n" = 0 ]; then
		row smollm2 skip "no build/gpu-smollm2-N here: its cases skip"
		return
	fi
	sum=$(md5sum <"$work/cache/models/$f" | cut -d' ' -f1)
	if [ "$sum" != "$want" ]; then
		rm -f "$work/cache/models/$f"
		row smollm2 skip "$n pieces, md5 not the file's: its cases skip"
		return
	fi
	MEDHA_CACHE=$work/cache
	row smollm2 ok "put together from $n pieces"
}

step libs 20
smollm2
export MEDHA_CACHE
if ! step gpu 20; then
	echo "gpu-check: no GPU here: nothing checked (see $summary)" >&2
	cat "$summary"
	exit 1
fi
step kernels_test 75
step attn_plan 20
step backend_cuda_test 75
step families 60
# a row per family (families' family-row lines)
if [ -s "$work/families.log" ]; then
	while read -r _ f res fig; do
		row "  $f" "$res" "$fig"
	done < <(grep '^family-row: ' "$work/families.log")
fi
step moe 60
# a row per mixture (moe's moe-row lines), and its rates
if [ -s "$work/moe.log" ]; then
	while read -r _ f res rest; do
		row "  $f" "$res" "$rest"
	done < <(grep '^moe-row: ' "$work/moe.log")
	while read -r _ n _ rest; do
		row "  moe B=$n" rate "${rest#*: }"
	done < <(grep '^moe-bench: ' "$work/moe.log")
fi
step batch_inv 45
step sanitizer 90
step attn_bench 90
step attn_torch 60
step e2e_bench 90
step bench_hf 90
step live_single 120
step live_spp2 60
step live_kvp2 60
step prof_check 120
step racecheck 90
step attn_simple 45
step lt_fallback 10
step graph_fallback 10
cat "$summary"
[ "$nfail" = 0 ]

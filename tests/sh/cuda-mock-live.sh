#!/bin/sh
# cuda-mock-live.sh: the cuda backend's operator side without a GPU: a
# medha-worker linked (make cuda-mock) against the host stand-ins of the CUDA runtime,
# kernels/ and cuBLASLt that tests/sh/cuda-mock.sh uses (tests/gpu/mock/,
# and a device that calls itself an H200), and of NCCL (tests/gpu/mock/
# nccl_mock.c as libnccl.so.2: TP ranks in separate processes meeting in
# shared memory), driven as on a lent GPU. A qwen2 model of head size
# 32 refused, the head size named. The NCCL stand-in alone
# (three processes); --backend cuda one-shot (-p through the runner, on
# the random test model with a tokenizer); medha-prof --backend cuda
# writing a profile labelled h200 and checking it; a daemon worker
# announcing its GPU as h200 to the scheduler; then contrib/gpu-check.sh's
# live parts on it: MEDHA_BACKEND=cuda examples/serve.sh single with 16
# concurrent requests against one-shot runs, spp2 and kvp2 (two workers,
# --coll nng) against single, and tp2 over --coll nng and --coll nccl
# (the same tokens both ways; NCCL's all-reduces counted, graphs'
# among them); tp2-spp2-kvp2 over NCCL, and tp2 over NCCL with a
# worker killed and restarted, with a peer stuck in NCCL's init and with
# an all-reduce that never connects; last prefix caching (forks, the
# partial block copied on the "device"): a shared-prefix trace with the cache on
# and off.
# What it checks is the wiring (flags, the runner, the HELLO, serve.sh,
# gpu-check.sh, the backend's NCCL set-up and calls), not the numerics,
# which the stand-ins compute on the host. Skips where the build has no
# cuda backend, or without the Python venv that writes the random model.
. "$(dirname "$0")/lib.sh"
cuda_mock_need
need_model
has_py gguf numpy || skip "$py lacks gguf (contrib/fetch-refs.sh)"
# heads of 64, as gpu-pack.sh's (the attention kernels' size); beside
# it (each spends most of its time reading the tokenizer, one core
# each) the qwen2 model refused below
RANDOM_MODEL_HD=64 "$py" "$top/tests/ref/random_model.py" "$model" \
    "$tmp/random.gguf" &
rmp=$!
"$py" "$top/tests/ref/arch_model.py" write "$model" "$tmp" qwen2
wait $rmp

cuda_mock_build
# the programs serve.sh and gpu-check.sh run, in one folder: the two on
# the stand-ins (make cuda-mock) and the others as built
mkdir "$tmp/bin"
for p in medha-worker medha-prof; do
	ln -s "$mock/bin/$p" "$tmp/bin/$p"
done
for p in medha-sched medha-router medha-trace; do
	ln -s "$bin/$p" "$tmp/bin/$p"
done
LD_LIBRARY_PATH=$mock
export LD_LIBRARY_PATH
mw=$tmp/bin/medha-worker

# what the cuda backend cannot run is refused at open, naming it: a
# head size its attention kernels lack (arch_model.py's qwen2: 32; the
# families themselves run: cuda-mock-arch.sh)
expect_status 1 "$mw" --backend cuda -m "$tmp/qwen2.gguf" -p hi -n 1
grep -q "cuda: qwen2: a head size (attention.key_length) of 32 is not supported" "$tmp/err" ||
	{ echo "qwen2 on cuda: want it refused, got:"; cat "$tmp/err"; exit 1; }
echo "ok: qwen2 of head size 32 on cuda refused: $(cat "$tmp/err")"

# the NCCL stand-in itself: three processes sum 300000 floats (two
# rounds of its shared slots) in rank order (((a + b) + c), not a + (b +
# c)); a type other than f32 is refused; a rank alone gives up after
# MEDHA_NCCL_MOCK_TIMEOUT
cat >"$tmp/nccl2.c" <<'EOF'
#include <nccl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#define N 300000
static ncclResult_t (*uid)(ncclUniqueId *);
static ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int);
static ncclResult_t (*ar)(const void *, void *, size_t, ncclDataType_t,
    ncclRedOp_t, ncclComm_t, cudaStream_t);
static ncclResult_t (*destroy)(ncclComm_t);
static float x[N];
static int
rank(ncclUniqueId id, int r)
{
	ncclComm_t c;
	int bad = 0;
	if (init(&c, 3, id, r) != ncclSuccess)
		return 2;
	for (int i = 0; i < N; i++)
		x[i] = r == 0 ? 1e8f + (float)(i % 1000)
		    : r == 1  ? -1e8f : (float)(i % 7) * 0.3f;
	if (ar(x, x, N, ncclFloat32, ncclSum, c, NULL) != ncclSuccess)
		return 3;
	for (int i = 0; i < N; i++)
		bad += x[i] != ((1e8f + (float)(i % 1000)) + -1e8f) +
		    (float)(i % 7) * 0.3f;
	if (ar(x, x, 4, ncclInt32, ncclSum, c, NULL) != ncclInvalidArgument)
		return 4;
	destroy(c);
	return bad ? 5 : 0;
}
int
main(void)
{
	void *dl = dlopen("libnccl.so.2", RTLD_NOW);
	ncclUniqueId id;
	ncclComm_t c;
	int st[2], rc;
	if (dl == NULL)
		return printf("FAIL: %s\n", dlerror()), 1;
	*(void **)&uid = dlsym(dl, "ncclGetUniqueId");
	*(void **)&init = dlsym(dl, "ncclCommInitRank");
	*(void **)&ar = dlsym(dl, "ncclAllReduce");
	*(void **)&destroy = dlsym(dl, "ncclCommDestroy");
	uid(&id);
	for (int r = 1; r < 3; r++)
		if (fork() == 0)
			_exit(rank(id, r));
	rc = rank(id, 0);
	wait(&st[0]);
	wait(&st[1]);
	if (rc != 0 || st[0] != 0 || st[1] != 0)
		return printf("FAIL: rank 0 %d, others' status %d %d\n", rc,
		    st[0], st[1]), 1;
	uid(&id);
	if (init(&c, 2, id, 0) == ncclSuccess)
		return printf("FAIL: a rank alone joined\n"), 1;
	return printf("ok: two ranks summed in order, f32 only, alone gives up\n"), 0;
}
EOF
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -w -isystem "$cuda/include" \
    -o "$tmp/nccl2" "$tmp/nccl2.c" -ldl
if ! MEDHA_NCCL_MOCK_TIMEOUT=1 "$tmp/nccl2" >"$tmp/nccl2.out" 2>&1 ||
    ! grep -q '^ok: ' "$tmp/nccl2.out"; then
	cat "$tmp/nccl2.out"
	exit 1
fi

# one-shot on the stand-in GPU, and its refusals
"$mw" --backend cuda -m "$tmp/random.gguf" -p "Once upon a time" -n 8 \
    --tokens >"$tmp/ids" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
[ "$(wc -w <"$tmp/ids")" = 8 ] || { cat "$tmp/ids" "$tmp/err"; exit 1; }
expect_status 2 "$mw" --backend cuda -m llama3-8b -p hi
grep -q 'no tokenizer' "$tmp/err"

# medha-prof --backend cuda: a table labelled with the GPU and bf16 KV
# that --check predicts with (the stand-in's times are not the GPU's);
# in the background, beside the checks up to gpu-check.sh's live_single
# (which times nothing it asserts), and checked after it
(st=0
"$tmp/bin/medha-prof" --backend cuda -m "$tmp/random.gguf" -q --reps 1 \
    --max-context 256 --decode-total 256 -o "$tmp/prof.csv" \
    --check 5 >"$tmp/prof.out" 2>"$tmp/prof.err" || st=$?
echo $st >"$tmp/prof.st") &
prof=$!

# a daemon worker says it is an h200 (the scheduler's predictor device)
"$bin/medha-sched" -l "ipc://$tmp/s.sock" -m "$tmp/random.gguf" -v \
    2>"$tmp/sched.log" &
sp=$!
"$mw" -s "ipc://$tmp/s.sock" --backend cuda -m "$tmp/random.gguf" \
    --kv-blocks 64 --max-seqs 4 2>"$tmp/worker.log" &
wp=$!
wait_for "$tmp/sched.log" 'ready' 30 $sp
grep -q 'worker 0 (tp 0, spp 0, kvp 0): cuda backend on h200,' "$tmp/sched.log" ||
    { echo "the scheduler's log names no h200:"; cat "$tmp/sched.log"; exit 1; }
kill -TERM $wp $sp
wait $wp $sp || :

# gpu-check.sh's live parts (a few KV blocks each: the stand-in's
# "device" is this machine's memory), with the stand-in's cuBLASLt, not
# CUDA's, on the library path; live_single's decodes timed on 32 tokens
# each, not 256 (its figure's wiring: the speed-up is the GPU's)
mkdir "$tmp/work" "$tmp/gout"
part() {
	env work="$tmp/work" OUT="$tmp/gout" GPU_CHECK_BACKEND=cuda \
	    GPU_CHECK_DECODE=32 \
	    GPU_MODEL="$tmp/random.gguf" MEDHA_BIN="$tmp/bin" GPU_PACK=/nonexistent \
	    MEDHA_WORKER_OPTS="--kv-blocks 512 --max-seqs 16" \
	    CUDA_HOME=/nonexistent NCCL_LIB="$mock" timeout 300 \
	    bash "$top/contrib/gpu-check.sh" --part "$1" >"$tmp/$1.log" 2>&1
}
part live_single || :
grep -q '^figure: 16 requests, 0 differ from -p; 8 decodes .*x one' \
    "$tmp/live_single.log" || { cat "$tmp/live_single.log"; exit 1; }
wait $prof
[ "$(cat "$tmp/prof.st")" = 0 ] || { cat "$tmp/prof.err"; exit 1; }
grep -q '^# medha-profile v1 model=random gpu=h200 tp=1 backend=cuda .*kv=bf16' \
    "$tmp/prof.csv" || { head -3 "$tmp/prof.csv"; exit 1; }
grep -q '^predictor error: median' "$tmp/prof.out"
for t in live_spp2 live_kvp2; do
	part $t || { cat "$tmp/$t.log"; exit 1; }
	grep -q '^figure: 16 requests, 0 differ from single' "$tmp/$t.log"
done
# tp2: two TP ranks, each its own medha-worker on the stand-in GPU, over
# the host collectives and over NCCL (the stand-in libnccl.so.2: shared
# memory between the two processes, sums in rank order): the same
# tokens both ways. Against single a few may differ: a row-parallel
# product's two halves are summed apart and then added, other roundings
# than one sum over the whole row, and the random model has near-ties.
# With NCCL each worker's stand-in counts its all-reduces at exit,
# decode steps' among them replayed from graphs (which --coll nng does
# not capture)
wl=$tmp/work/tp2-logs/sched-worker
for coll in nng nccl; do
	MEDHA_COLL=$coll MEDHA_MOCK_DEVICES=2 part live_tp2 || :
	mv "$tmp/live_tp2.log" "$tmp/live_tp2_$coll.log"
	grep -q '^figure: 16 requests, [0-9]* differ from single' \
	    "$tmp/live_tp2_$coll.log" || { cat "$tmp/live_tp2_$coll.log"; exit 1; }
	cp "$tmp/work/tp2.jsonl" "$tmp/tp2_$coll.jsonl"
	for r in 0 1; do
		if [ $coll = nng ]; then
			if grep 'mock nccl' "$wl$r.log"; then
				echo "tp2 --coll nng called NCCL"
				exit 1
			fi
			continue
		fi
		grep -Eq "^mock nccl: rank $r of 2: [1-9][0-9]* all-reduces \([1-9][0-9]* replayed" \
		    "$wl$r.log" || { cat "$wl$r.log"; exit 1; }
		# each decode key's first step eager: its all-reduces' sizes
		# connected before a capture meets them (the stand-in fails
		# one met first inside a capture, as NCCL's lazy connect can)
		if grep -E 'first met inside a graph capture|medha: cuda: fallback' \
		    "$wl$r.log"; then
			echo "tp2 nccl: a capture met a new all-reduce size"
			exit 1
		fi
		sed -n 's/^mock nccl: /cuda-mock-live: tp2 nccl: /p' "$wl$r.log" |
		    grep 'all-reduces'
	done
done
"$py" - "$tmp/tp2_nng.jsonl" "$tmp/tp2_nccl.jsonl" <<'EOF'
import json, sys
a, b = ({r["id"]: r.get("token_ids") for r in map(json.loads, open(f))}
        for f in sys.argv[1:])
assert len(a) == 16 and all(a.values()), a
bad = [i for i in sorted(a) if a[i] != b.get(i)]
print("cuda-mock-live: tp2: 16 requests, %d differ between --coll nccl "
      "and nng" % len(bad))
sys.exit(1 if bad or sorted(a) != sorted(b) else 0)
EOF
# nccl_up TOPO [VAR=VALUE...]: MEDHA_BACKEND=cuda serve.sh TOPO with
# --coll nccl behind a router, the environment given, logs in $rl
# ($tmp/logs-TOPO$tag); rp NAME: the 16 requests into $tmp/NAME.jsonl, the same
# tokens as the first tp2 run over NCCL
nccl_up() {
	rl=$tmp/logs-$1${tag:-}
	nu_topo=$1
	shift
	bin=$tmp/bin serve_start "$nu_topo" 120 MEDHA_BACKEND=cuda MEDHA_COLL=nccl \
	    MEDHA_MOCK_DEVICES=8 MEDHA_MODEL="$tmp/random.gguf" MEDHA_ROUTER="ipc://$tmp/r.sock" \
	    MEDHA_LOG="$rl" MEDHA_KVP_MAX_TOKENS=512 \
	    MEDHA_WORKER_OPTS="--kv-blocks 512 --max-seqs 16" "$@" >"$tmp/serve.out"
}
rp() {
	"$tmp/bin/medha-trace" replay -a "ipc://$tmp/r.sock" --token-ids \
	    "$tmp/work/trace.jsonl" >"$tmp/$1.jsonl" 2>"$tmp/$1.err" ||
	    { cat "$tmp/$1.err"; exit 1; }
	"$py" - "$tmp/tp2_nccl.jsonl" "$tmp/$1.jsonl" "$1" <<'EOF' ||
import json, sys
a, b = ({r["id"]: r.get("token_ids") for r in map(json.loads, open(f))}
        for f in sys.argv[1:3])
bad = [i for i in sorted(a) if a[i] != b.get(i)]
if bad:
    sys.exit("%s: %d of 16 differ from the first tp2 nccl run: %s"
             % (sys.argv[3], len(bad), bad))
EOF
	    { tail -n 8 "$rl"/sched-worker*.log; exit 1; }
}
# tp2-spp2-kvp2 over NCCL: four TP pairs (two stages by two KVP
# groups), a communicator each, the same tokens as tp2
nccl_up tp2-spp2-kvp2
rp tp2_spp2_kvp2
serve_stop
n=$(grep -c '^mock nccl: rank [01] of 2: [1-9][0-9]* all-reduces' \
    "$rl"/sched-worker*.log | awk -F: '{ n += $2 } END { print n }')
[ "$n" = 8 ] || { echo "tp2-spp2-kvp2: $n of 8 workers ran NCCL"; exit 1; }
echo "cuda-mock-live: tp2-spp2-kvp2 nccl: 16 of 16 tokens as tp2's"
# tp2 over NCCL again, and its worker 1 killed (SIGKILL, between
# requests; serve.sh restarts it): the peer table's new generation gives
# both ranks a new communicator, and the 16 requests give the same
# tokens on it, decode steps from graphs captured anew (not the old
# communicator's)
nccl_up tp2
rp tp2_before
kill -KILL "$(cat "$rl/sched-worker1.pid")"
wait_for "$tmp/serve.err" 'sched-worker1 restarted' 60
rp tp2_after
serve_stop
[ "$(grep -c '^mock nccl: rank 0 of 2 joined' "$rl/sched-worker0.log")" = 2 ] ||
    { cat "$rl/sched-worker0.log"; exit 1; }
echo "cuda-mock-live: tp2 nccl: worker 1 killed and restarted; a new" \
    "communicator, 16 of 16 tokens as before"
# a TP peer stuck in ncclCommInitRank after the id exchange, and an
# all-reduce of a new size that never connects (the NCCL stand-in told
# so by a file, which the first rank to remove it obeys): the other
# rank, or that one, gives up within MEDHA_NCCL_TIMEOUT (3 s here) with
# a message, its communicator aborted (the communicator is made when
# the peer table comes: that worker starts over; an all-reduce fails its
# batch); once the stuck worker is killed and restarted (serve.sh), or
# at the next batch, the 16 requests get tp2's tokens on a new
# communicator.
# hang_log PATTERN: wait until a worker's log of $rl says PATTERN
hang_log() {
	i=0
	until grep -q "$1" "$rl"/sched-worker*.log; do
		i=$((i + 1))
		[ $i -lt 600 ] || { tail -n 8 "$rl"/sched-worker*.log;
		    echo "no \"$1\" in 60 s"; exit 1; }
		sleep 0.1
	done
}
: >"$tmp/hang-init"
tag=-hang-init nccl_up tp2 MEDHA_NCCL_TIMEOUT=3 \
    MEDHA_NCCL_MOCK_HANG_INIT="$tmp/hang-init"
# one request (the peer table, and so the communicator, comes with the
# first work), in the background: it waits for the stuck worker
head -n 1 "$tmp/work/trace.jsonl" >"$tmp/one.jsonl"
timeout 120 "$tmp/bin/medha-trace" replay -a "ipc://$tmp/r.sock" \
    "$tmp/one.jsonl" >/dev/null 2>&1 &
rq=$!
hang_log 'ncclCommInitRank (TP rank [01] of 2): not done after 3 s'
# the seconds from the peer table to giving up, by the worker's clock
secs=$("$py" - "$rl" <<'PY'
import datetime, glob, re, sys
for f in glob.glob(sys.argv[1] + "/sched-worker*.log"):
    t0 = None
    for l in open(f, errors="replace"):
        m = re.match(r"(\S+)Z medha-worker: ", l)
        if not m:
            continue
        t = datetime.datetime.fromisoformat(m.group(1))
        if "peers: generation" in l:
            t0 = t
        elif "ncclCommInitRank" in l and "not done after" in l and t0:
            print(int((t - t0).total_seconds() + 0.999))
            sys.exit(0)
sys.exit("no peer table before the message")
PY
)
[ "$secs" -le 8 ] || { echo "init hang: gave up after $secs s"; exit 1; }
stuck=$(grep -l 'told to hang in ncclCommInitRank' "$rl"/sched-worker*.log |
    sed 's/.*sched-worker\([0-9]*\)\.log$/\1/')
kill -KILL "$(cat "$rl/sched-worker$stuck.pid")"
wait_for "$tmp/serve.err" "sched-worker$stuck restarted" 60
wait "$rq" || :
rp tp2_hang_init
serve_stop
echo "cuda-mock-live: a peer stuck in NCCL's init: its peer gave up after" \
    "$secs s (MEDHA_NCCL_TIMEOUT 3); restarted, 16 of 16 tokens as tp2's"
: >"$tmp/hang-ar"
tag=-hang-ar nccl_up tp2 MEDHA_NCCL_TIMEOUT=3 \
    MEDHA_NCCL_MOCK_HANG_AR="$tmp/hang-ar"
# one request: its first batch's first all-reduce never connects
t0=$(date +%s)
timeout 120 "$tmp/bin/medha-trace" replay -a "ipc://$tmp/r.sock" \
    "$tmp/one.jsonl" >/dev/null 2>&1 || :
hang_log 'batch [0-9]* failed: .*ncclAllReduce (TP rank [01] of 2): not done after 3 s'
secs=$(($(date +%s) - t0))
[ "$secs" -le 15 ] || { echo "all-reduce hang: failed after $secs s"; exit 1; }
rp tp2_hang_ar
serve_stop
[ "$(grep -c '^mock nccl: rank 0 of 2 joined' "$rl/sched-worker0.log")" = 2 ] ||
    { cat "$rl/sched-worker0.log"; exit 1; }
echo "cuda-mock-live: an all-reduce that never connects: the batch failed" \
    "after $secs s; a new communicator, 16 of 16 tokens as tp2's"
# prefix caching on the cuda backend (forks sharing full blocks, the
# partial block copied on the "device", trims): 24 greedy requests on 3
# system prompts and the turns of 6 conversations, 40 ms apart, through
# serve.sh single with the cache on and off give the same tokens, and
# the cache served some of their prompts
"$py" - "$tmp/prefix.jsonl" <<'EOF'
import json, random, sys
rng = random.Random(5)
ids = lambda n: [rng.randrange(100, 40000) for _ in range(n)]
sys_p = [ids(n) for n in (37, 100, 161)]
convs = [(sys_p[c % 3], []) for c in range(6)]
with open(sys.argv[1], "w") as f:
    for turn in range(4):
        for c, (sp, hist) in enumerate(convs):
            user = ids(rng.randrange(5, 40))
            f.write(json.dumps({"id": "c%d.t%d" % (c, turn),
                "prompt_ids": sp + hist + user, "max_tokens": 6,
                "ignore_eos": True, "arrival": 0.04 * (6 * turn + c)}) + "\n")
            hist += user + ids(6)
EOF
for cache in on off; do
	o=
	[ $cache = off ] && o=--no-prefix-cache
	bin=$tmp/bin serve_start single 120 MEDHA_BACKEND=cuda \
	    MEDHA_MODEL="$tmp/random.gguf" MEDHA_ADDR="ipc://$tmp/p.sock" \
	    MEDHA_LOG="$tmp/logs-prefix-$cache" MEDHA_SCHED_OPTS="$o" \
	    MEDHA_WORKER_OPTS="--kv-blocks 512 --max-seqs 16" >/dev/null
	"$tmp/bin/medha-trace" replay -a "ipc://$tmp/p.sock" --token-ids \
	    "$tmp/prefix.jsonl" >"$tmp/prefix-$cache.jsonl"
	serve_stop
done
"$py" - "$tmp/prefix-on.jsonl" "$tmp/prefix-off.jsonl" <<'EOF'
import json, sys
on, off = ({r["id"]: r for r in map(json.loads, open(f))}
           for f in sys.argv[1:3])
assert len(on) == 24 and set(on) == set(off), (len(on), len(off))
for k in on:
    assert on[k]["status"] == "ok" and off[k]["status"] == "ok", (on[k], off[k])
    assert on[k]["token_ids"] == off[k]["token_ids"], (k, on[k], off[k])
hits = [r for r in on.values() if r.get("cached_tokens", 0) > 0]
assert len(hits) >= 12, len(hits)
print("cuda-mock-live: prefix cache: %d of 24 hit, %d prompt tokens "
      "cached, tokens as without"
      % (len(hits), sum(r["cached_tokens"] for r in hits)))
EOF
for f in "$tmp"/live_*.log; do
	t=${f##*/live_}
	sed -n -e "s/^figure: /cuda-mock-live: ${t%.log}: /p" \
	    -e "s/^\(p[0-9]*: first differs\)/cuda-mock-live: ${t%.log}: \1/p" "$f"
done

#!/bin/sh
# prefix-live.sh: prefix caching on the live replica (medha-sched -l and a
# cpu medha-worker, SmolLM2): 64 greedy requests of token ids sharing four
# system prompts and the turns of sixteen conversations, arriving 40 ms
# apart so that many run at once, give exactly the tokens they give with
# --no-prefix-cache, and the cache served some of their prompts (records'
# cached_tokens): on one worker, and on the topologies of
# MEDHA_PREFIX_TOPOS (default "kvp2"; "tp2 spp2 kvp2" for all of
# examples/serve.sh's). Then 16 questions after a shared 2000-token
# prefix, two a second: each after the first takes the whole prefix from
# the cache (the second waits for the first's prefill rather than
# computing it twice); then the 15 again, once the cache holds the
# prefix, two a second: their median TTFT is at most 15% of the first's
# (not the first 15's: on a loaded machine the first prefill outlasts
# their arrivals, and they wait behind it). Then the KV blocks in use while all 16 decode: the same
# questions streamed through the HTTP front door (MEDHA_HTTP), each now
# asking 1000 tokens (ignore_eos) so that the first still decodes when
# the 16th has its first token; /metrics' medha_kv_blocks_used, sampled
# every 0.1 s from 0.3 s after that first token (the router's STATUS is
# 0.1 s old at most) until the streams are closed 1.5 s later, is at
# most one prefix (125 blocks of 16) plus each question's 20 tokens and
# 1000 outputs (64 blocks each: 1149; with --reserve max the scheduler
# reserves a request's prompt and max_tokens whole at admission, so it
# is exactly that), and
# more than the questions' 1024 alone (the shared prefix is counted).
# The replica runs fixed 256-token batches (--chunk 256): with adaptive
# ones its batch-time target on a small CPU is filled by three decodes
# at 2000 positions, and a question then gets only the progress
# guarantee's 32 tokens a batch (before it, none until a decode ended:
# doc/RESULTS.md), so the 16 would not decode at once. With
# MEDHA_PREFIX_BLOCKS_OFF=1 the same with --no-prefix-cache too (about
# 100 s on 2 cores): 16 x 189 blocks, each question holding the whole
# prefix. Needs contrib/fetch-refs.sh (the real model).
. "$(dirname "$0")/lib.sh"
need_model
addr=ipc://$tmp/r.sock

python3 - "$tmp/trace.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
ids = lambda n: [rng.randrange(100, 40000) for _ in range(n)]
sys_p = [ids(n) for n in (37, 100, 161, 250)]
convs = [(sys_p[c % 4], []) for c in range(16)]
reqs = []
for turn in range(4):
    for c, (sp, hist) in enumerate(convs):
        user = ids(rng.randrange(5, 60))
        prompt = sp + hist + user
        reqs.append({"id": "c%d.t%d" % (c, turn), "prompt_ids": prompt,
                     "max_tokens": 6, "ignore_eos": True})
        hist += user + ids(6)  # the reply, as the client quotes it
for i, r in enumerate(reqs):
    r["arrival"] = 0.04 * i
with open(sys.argv[1], "w") as f:
    for r in reqs:
        f.write(json.dumps(r) + "\n")
PY

run() { # TOPO NAME SCHED_OPTS: the trace through a fresh topology
	if [ "$1" = single ]; then
		serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
		    MEDHA_LOG="$tmp/logs.$2" MEDHA_SCHED_OPTS="$3"
		a=$addr
	else
		a=ipc://$tmp/router.sock
		serve_start "$1" 90 MEDHA_ROUTER="$a" MEDHA_MODEL="$model" \
		    MEDHA_LOG="$tmp/logs.$1.$2" MEDHA_SCHED_OPTS="$3"
	fi
	"$bin/medha-trace" replay -a "$a" --token-ids "$tmp/trace.jsonl" \
	    >"$tmp/$1.$2.jsonl"
	serve_stop
}
for topo in single ${MEDHA_PREFIX_TOPOS-kvp2}; do
run "$topo" on ""
run "$topo" off --no-prefix-cache
python3 - "$tmp/$topo.on.jsonl" "$tmp/$topo.off.jsonl" "$topo" <<'PY'
import json, sys
on = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
off = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
assert len(on) == 64 and set(on) == set(off), (len(on), len(off))
for k in on:
    assert on[k]["status"] == "ok" and off[k]["status"] == "ok", (on[k], off[k])
    assert on[k]["token_ids"] == off[k]["token_ids"], (k, on[k], off[k])
    assert "cached_tokens" not in off[k], off[k]
hits = [r for r in on.values() if r.get("cached_tokens", 0) > 0]
assert len(hits) >= 32, (sys.argv[3], len(hits))
print("prefix-live %s: %d of 64 hit, %d prompt tokens cached, tokens "
      "as without" % (sys.argv[3], len(hits),
      sum(r["cached_tokens"] for r in hits)), file=sys.stderr)
PY
done

python3 - "$tmp/doc.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
doc = [rng.randrange(100, 40000) for _ in range(2000)]
with open(sys.argv[1], "w") as f:
    for i in range(16):
        q = [rng.randrange(100, 40000) for _ in range(20)]
        f.write(json.dumps({"id": "q%d" % i, "arrival": 0.5 * i,
            "prompt_ids": doc + q, "max_tokens": 8,
            "ignore_eos": True}) + "\n")
PY
serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
    MEDHA_LOG="$tmp/logs.doc"
"$bin/medha-trace" replay -a "$addr" "$tmp/doc.jsonl" >"$tmp/doc.out"
python3 - "$tmp/doc.jsonl" >"$tmp/again.jsonl" <<'PY'
import json, sys
for i, l in enumerate(open(sys.argv[1]).readlines()[1:]):
    r = json.loads(l)
    r["id"] = "again-" + r["id"]
    r["arrival"] = 0.5 * i
    print(json.dumps(r))
PY
"$bin/medha-trace" replay -a "$addr" "$tmp/again.jsonl" >"$tmp/again.out"
serve_stop
python3 - "$tmp/doc.out" "$tmp/again.out" <<'PY'
import json, statistics, sys
r = sorted(map(json.loads, open(sys.argv[1])), key=lambda x: x["arrival"])
assert all(x["status"] == "ok" for x in r) and len(r) == 16
assert [x.get("cached_tokens", 0) for x in r] == [0] + [2000] * 15, r
a = list(map(json.loads, open(sys.argv[2])))
assert all(x["status"] == "ok" for x in a) and len(a) == 15
assert all(x.get("cached_tokens", 0) >= 2000 for x in a), a  # (2019: their
# questions too, cached the first time)
first, rest = r[0]["ttft"], statistics.median(x["ttft"] for x in a)
print("prefix-live: first TTFT %.3f s, median of the 15 again %.3f s "
      "(%.1f%%; of the first 15 %.3f s)" % (first, rest, 100 * rest / first,
      statistics.median(x["ttft"] for x in r[1:])), file=sys.stderr)
assert rest <= 0.15 * first, (first, rest)
PY

# blocks.py QUESTIONS PORT MAX_TOKENS: the questions streamed at their
# arrival times, /metrics sampled; prints the peak of
# medha_kv_blocks_used while all of them decode
cat >"$tmp/blocks.py" <<'PY'
import json, socket, sys, threading, time, urllib.request
port, T = int(sys.argv[2]), int(sys.argv[3])
qs = [json.loads(l) for l in open(sys.argv[1])]
n = len(qs)
first, ended, socks = [None] * n, [None] * n, [None] * n
stop = threading.Event()

def ask(i, at):
    time.sleep(max(0, at - time.time()))
    body = json.dumps({"prompt": qs[i]["prompt_ids"], "max_tokens": T,
        "ignore_eos": True, "stream": True, "temperature": 0}).encode()
    try:
        s = socks[i] = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: medha\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body)
        f = s.makefile("rb")
        line = f.readline()
        assert b" 200 " in line, (i, line)
        for line in f:
            if first[i] is None and b"data: {" in line:
                first[i] = time.time()
            if b"data: [DONE]" in line:
                break
    except OSError:  # closed by the main thread
        pass
    finally:  # (an end before that one stops the sampling)
        if not stop.is_set():
            ended[i] = time.time()

def metrics():
    v = {}
    for l in urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
            timeout=10).read().decode().splitlines():
        if l.startswith("medha_") and "{replica=" in l:
            v[l.split("{")[0]] = int(l.split()[-1])
    return v["medha_kv_blocks_used"], v["medha_replica_requests"]

t0 = time.time() + 0.5
th = [threading.Thread(target=ask, args=(i, t0 + q["arrival"]))
      for i, q in enumerate(qs)]
for t in th:
    t.start()
samples = []  # (time, blocks used, requests on the replica)
while time.time() < t0 + 300 and not any(ended):
    samples.append((time.time(),) + metrics())
    if all(first) and samples[-1][0] > max(first) + 1.5:
        break
    time.sleep(0.1)
stop.set()
for s in socks:  # the requests cancelled: their clients went away
    try:
        s.shutdown(socket.SHUT_RDWR)
    except (AttributeError, OSError):
        pass
for t in th:
    t.join()
assert all(first), ("not all started", first)
assert not any(ended), ("ended before the 16th decoded: max_tokens %d "
    "too few on this machine" % T, [e and e - t0 for e in ended])
w = [s for s in samples if s[0] >= max(first) + 0.3]
assert len(w) >= 3 and all(s[2] == n for s in w), w
print(max(s[1] for s in w), len(w), round(max(first) - t0, 1))
PY
blocks() { # NAME SCHED_OPTS: blocks.py on a fresh replica into blocks.NAME
	port=$(free_port)
	serve_start single 60 MEDHA_ADDR="$addr" MEDHA_MODEL="$model" \
	    MEDHA_HTTP="127.0.0.1:$port" MEDHA_LOG="$tmp/logs.blocks.$1" \
	    MEDHA_SCHED_OPTS="--chunk 256 --reserve max $2" \
	    MEDHA_WORKER_OPTS="--kv-blocks 4096"
	python3 "$tmp/blocks.py" "$tmp/doc.jsonl" "$port" 1000 \
	    >"$tmp/blocks.$1"
	serve_stop
	read -r peak nsamp last <"$tmp/blocks.$1"
	echo "prefix-live: KV blocks in use while all 16 decode ($1," \
	    "$nsamp samples from $last s): $peak" >&2
}
# one prefix, and per question 20 + 1000 tokens from a block boundary
prefix=125 each=$(((20 + 1000 + 15) / 16))
blocks on ""
[ "$peak" -le $((prefix + 16 * each)) ] && [ "$peak" -gt $((16 * each)) ] ||
    { echo "$peak blocks: want (16 x $each, $prefix + 16 x $each]"; exit 1; }
if [ "${MEDHA_PREFIX_BLOCKS_OFF:-0}" = 1 ]; then
	blocks off --no-prefix-cache
	[ "$peak" -ge $((16 * (prefix + each))) ] ||
	    { echo "$peak blocks without the cache"; exit 1; }
fi
echo ok

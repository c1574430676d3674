#!/bin/sh
# http.sh: the router's OpenAI-compatible HTTP front door (medha-router
# --http), on examples/serve.sh single with MEDHA_HTTP on a free loopback
# port (one cpu replica of SmolLM2 behind the router).
#  1. curl: /health, /v1/models, a completion whole and streamed (SSE,
#     usage chunk, [DONE]), a chat completion; bad JSON 400, a wrong
#     type 400, an unsupported field 400, an unknown model 404, an
#     unknown route 404, a wrong method 405, a huge body 413, each with
#     OpenAI's error body; a client that leaves mid-stream has its
#     request cancelled; /metrics counters move; usage's
#     prompt_tokens_details.cached_tokens; n choices (greedy ones equal
#     n = 1's, seeded ones differ and repeat, streamed with their index,
#     the prompt's KV shared, a stream left cancels every choice);
#     whole answers (n = 16) whose client hangs up at once cancelled
#     within a second.
#  2. The openai Python package (cache/venv): completions and chat,
#     streamed and not, greedy, one prompt of 4.5 KB (tokenized on the
#     front door's tokenizer thread): the text must be exactly what
#     medha-worker -p (--chat) gives alone.
#  3. Hostile clients on raw sockets (tests/ref/http_hostile.py): invalid
#     UTF-8, bodies that are not JSON or nested 100,000 deep, bad
#     Content-Lengths, bytes that are not HTTP, a 64 KB header line,
#     slowloris connections (half-sent headers and bodies) and a stream
#     nobody reads: clear 4xx answers, everyone else served meanwhile,
#     half-sent bodies let go, a completion served at the end.
#  4. SIGTERM stops every process.
# Skips without the model (contrib/fetch-refs.sh) or curl; part 2 skips
# without the openai package.
. "$(dirname "$0")/lib.sh"
need_model
command -v curl >/dev/null || skip "no curl (contrib/install-deps.sh)"
port=$(free_port)
base=http://127.0.0.1:$port
serve_start single 60 MEDHA_MODEL="$model" MEDHA_ADDR="ipc://$tmp/r.sock" \
    MEDHA_ROUTER="ipc://$tmp/router.sock" MEDHA_HTTP="127.0.0.1:$port" \
    MEDHA_LOG="$tmp/logs" MEDHA_ROUTER_OPTS="-v --http-keepalive 1"
grep -q "http: listening at http://127.0.0.1:$port" "$tmp/logs/router.log"

# ---- 1. curl ----
# req NAME ARGS...: the body into $tmp/NAME, the status into $tmp/NAME.code
req() {
	n=$1
	shift
	curl -sS -o "$tmp/$n" -w '%{http_code}' "$@" >"$tmp/$n.code"
}
req metrics0 "$base/metrics"
req health "$base/health"
req models "$base/v1/models"
req cmpl -H 'Content-Type: application/json' "$base/v1/completions" \
    -d '{"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}'
req sse -N "$base/v1/completions" -d '{"prompt": "The capital of France is",
    "max_tokens": 8, "temperature": 0, "stream": true,
    "stream_options": {"include_usage": true}}'
req chat "$base/v1/chat/completions" -d '{"messages": [{"role": "user",
    "content": "What is 2+2?"}], "max_tokens": 12, "temperature": 0}'
req badjson "$base/v1/completions" -d '{"prompt": "x",'
req badtype "$base/v1/completions" -d '{"prompt": "x", "max_tokens": "many"}'
req zero "$base/v1/completions" -d '{"prompt": "Hello", "max_tokens": 0}'
req nocontent "$base/v1/chat/completions" -d '{"messages": [{"role": "user"}]}'
req oov "$base/v1/completions" -d '{"prompt": [1, 99999999], "max_tokens": 2}'
req unsup "$base/v1/completions" -d '{"prompt": "x", "best_of": 2}'
req bign "$base/v1/completions" -d '{"prompt": "x", "n": 17}'
req badmodel "$base/v1/completions" -d '{"prompt": "x", "model": "gpt-9"}'
req noroute "$base/v1/nothing"
req method -D "$tmp/method.hdr" -X DELETE "$base/v1/completions"
req method2 -D "$tmp/method2.hdr" -X POST "$base/metrics"
grep -qi '^Allow: POST' "$tmp/method.hdr"
grep -qi '^Allow: GET' "$tmp/method2.hdr"
head -c 2000000 /dev/zero | tr '\0' a >"$tmp/big"
req huge "$base/v1/completions" --data-binary "@$tmp/big"
# a stream the client leaves after a second: cancelled upstream
curl -sN -m 1 "$base/v1/completions" -d '{"prompt": "Once upon a time",
    "max_tokens": 4000, "ignore_eos": true, "stream": true}' \
    >"$tmp/left" 2>/dev/null || true
# likewise with two choices: both cancelled
curl -sN -m 1 "$base/v1/completions" -d '{"prompt": "Once upon a time",
    "max_tokens": 4000, "ignore_eos": true, "stream": true, "n": 2}' \
    >"$tmp/left2" 2>/dev/null || true
sleep 1
req metrics1 "$base/metrics"
# n choices: one prompt never seen before, its KV computed once
# (over two KV blocks of 16: a choice waits for a block another computes)
np='"prompt": "Choices share this prompt. The seven wonders of the ancient world were the Great Pyramid of Giza, the Hanging Gardens of Babylon, the Statue of Zeus at Olympia, the Temple of Artemis at Ephesus, the Mausoleum at Halicarnassus, the Colossus of Rhodes and the Lighthouse of Alexandria. Of these, the only one standing today is"'
req n3 "$base/v1/completions" -d "{$np, \"max_tokens\": 8, \"temperature\": 0, \"n\": 3}"
req metricsn "$base/metrics"
req n1 "$base/v1/completions" -d "{$np, \"max_tokens\": 8, \"temperature\": 0}"
req ns1 "$base/v1/completions" -d "{$np, \"max_tokens\": 12, \"temperature\": 0.8, \"seed\": 42, \"n\": 3}"
req ns2 "$base/v1/completions" -d "{$np, \"max_tokens\": 12, \"temperature\": 0.8, \"seed\": 42, \"n\": 3}"
req nsse -N "$base/v1/completions" -d "{$np, \"max_tokens\": 8, \"temperature\": 0, \"n\": 3,
    \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
req nchat "$base/v1/chat/completions" -d '{"messages": [{"role": "user",
    "content": "What is 2+2?"}], "max_tokens": 12, "temperature": 0, "n": 2}'
python3 - "$tmp" "$model" <<'PY'
import json, os, sys
d = sys.argv[1]
mid = os.path.basename(sys.argv[2])
def got(name):
    return int(open("%s/%s.code" % (d, name)).read()), open("%s/%s" % (d, name)).read()
def err(name, status, code=None):
    s, body = got(name)
    assert s == status, (name, s, body)
    e = json.loads(body)["error"]
    assert e["message"] and e["type"], (name, e)
    if code:
        assert e["code"] == code, (name, e)
    print("%s: %d %s" % (name, s, e["message"]))
s, h = got("health")
assert s == 200 and json.loads(h)["status"] == "ok", h
s, m = got("models")
assert s == 200 and [x["id"] for x in json.loads(m)["data"]] == [mid], m
assert json.loads(m)["data"][0]["max_model_len"] == 8192, m
s, c = got("cmpl")
c = json.loads(c)
assert s == 200 and c["object"] == "text_completion", c
assert c["id"].startswith("cmpl-") and c["model"] == mid, c
assert c["choices"][0]["finish_reason"] in ("length", "stop"), c
u = c["usage"]
assert u["completion_tokens"] <= 8 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
s, sse = got("sse")
assert s == 200
events = [e[6:] for e in sse.split("\n\n") if e]
assert all(e.startswith("data: ") is False for e in events)
assert events[-1] == "[DONE]", events[-3:]
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[-1]["choices"] == [], chunks[-1]
cu = dict(chunks[-1]["usage"], prompt_tokens_details=None)
assert cu == dict(u, prompt_tokens_details=None), (chunks[-1], u)
text = "".join(ch["choices"][0]["text"] for ch in chunks[:-1])
assert text == c["choices"][0]["text"], (text, c)
assert chunks[-2]["choices"][0]["finish_reason"] == c["choices"][0]["finish_reason"]
s, ch = got("chat")
ch = json.loads(ch)
assert s == 200 and ch["object"] == "chat.completion", ch
assert ch["choices"][0]["message"]["role"] == "assistant", ch
assert ch["choices"][0]["message"]["content"], ch
err("badjson", 400)
err("badtype", 400)
err("zero", 400)
err("nocontent", 400)
err("oov", 400)
e = json.loads(got("oov")[1])["error"]
assert e["param"] == "prompt" and "prompt_ids" not in e["message"], e
err("unsup", 400, "unsupported")
err("badmodel", 404, "model_not_found")
err("noroute", 404, "not_found")
err("method", 405)
err("huge", 413)
def metrics(name):
    out = {}
    for l in open("%s/%s" % (d, name)):
        if l.startswith("#") or not l.strip():
            continue
        k, v = l.rsplit(" ", 1)
        out[k] = float(v)
    return out
m0, m1 = metrics("metrics0"), metrics("metrics1")
ml = 'model_name="%s"' % mid
ok = 'medha_requests_total{%s,status="ok"}' % ml
cn = 'medha_requests_total{%s,status="cancelled"}' % ml
assert m1[ok] >= m0[ok] + 3, (m0[ok], m1[ok])
assert m1[cn] >= m0[cn] + 3, (m0[cn], m1[cn])
assert m1["medha_generation_tokens_total{%s}" % ml] > m0["medha_generation_tokens_total{%s}" % ml]
assert m1["medha_time_to_first_token_seconds_count{%s}" % ml] >= 3
# vLLM's: end-to-end latency, counts by finish reason, the model's name
assert m1["medha_e2e_request_latency_seconds_count{%s}" % ml] >= 3, m1
assert m1["medha_request_queue_time_seconds_count{%s}" % ml] >= 3, m1
fin = sum(m1['medha_requests_finished_total{%s,finish_reason="%s"}' % (ml, f)]
          for f in ("stop", "length"))
assert fin == m1[ok], (fin, m1[ok])
assert m1["medha_requests_in_flight"] == 0 and m1["medha_http_streams"] == 0, m1
assert m1['medha_http_responses_total{code="400"}'] >= 3
assert any(k.startswith("medha_kv_blocks{") and v > 0 for k, v in m1.items())
# the second "The capital of France is" found the first's KV cached
pc = lambda n: "medha_prefix_cache_%s_total{%s}" % (n, ml)
assert m1[pc("hits")] > m0[pc("hits")], m1
assert m1[pc("hit_requests")] >= 1, m1
# OpenAI's usage.prompt_tokens_details.cached_tokens: the streamed
# completion repeated the whole one's prompt, whose KV was cached
cu = chunks[-1]["usage"]
assert 0 < cu["prompt_tokens_details"]["cached_tokens"] <= cu["prompt_tokens"], cu
assert c["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0, c
assert ch["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0, ch
assert m1[pc("queries")] == m1["medha_prompt_tokens_total{%s}" % ml]
err("bign", 400)
# n = 3 at temperature 0: three choices equal to n = 1's text
s, n3 = got("n3")
n3 = json.loads(n3)
s1, n1 = got("n1")
n1 = json.loads(n1)
assert s == 200 and s1 == 200, (n3, n1)
assert [x["index"] for x in n3["choices"]] == [0, 1, 2], n3
assert all(x["text"] == n1["choices"][0]["text"] for x in n3["choices"]), (n3, n1)
u3, u1 = n3["usage"], n1["usage"]
# the prompt counted once, the completions summed
assert u3["prompt_tokens"] == u1["prompt_tokens"], (u3, u1)
assert u3["completion_tokens"] == 3 * u1["completion_tokens"], (u3, u1)
assert u3["total_tokens"] == u3["prompt_tokens"] + u3["completion_tokens"], u3
assert u1["prompt_tokens_details"]["cached_tokens"] > 0, u1
# the prompt's KV shared: two of the three choices found it cached
mn = metrics("metricsn")
hr = lambda m: m[pc("hit_requests")]
assert hr(mn) >= hr(m1) + 2, (hr(m1), hr(mn))
# temperature 0.8 with a seed: choices differ, and repeat across runs
a, b = json.loads(got("ns1")[1]), json.loads(got("ns2")[1])
ta, tb = [x["text"] for x in a["choices"]], [x["text"] for x in b["choices"]]
assert ta == tb, (ta, tb)
assert len(set(ta)) > 1, ta
# streamed: each chunk names its choice; each choice's text the whole one's
s, sse = got("nsse")
chunks = [json.loads(e[6:]) for e in sse.split("\n\n") if e and e != "data: [DONE]"]
assert sse.rstrip().endswith("data: [DONE]"), sse[-200:]
texts, fins = ["", "", ""], [None] * 3
for c in chunks[:-1]:
    x = c["choices"][0]
    texts[x["index"]] += x["text"]
    if x["finish_reason"]:
        fins[x["index"]] = x["finish_reason"]
assert texts == [n1["choices"][0]["text"]] * 3, texts
assert None not in fins, fins
su = chunks[-1]["usage"]
assert chunks[-1]["choices"] == [] and su["completion_tokens"] == u3["completion_tokens"], su
assert su["prompt_tokens_details"]["cached_tokens"] > 0, su
s, nc = got("nchat")
nc = json.loads(nc)
assert s == 200 and [x["index"] for x in nc["choices"]] == [0, 1], nc
assert nc["choices"][0]["message"] == nc["choices"][1]["message"] == ch["choices"][0]["message"], (nc, ch)
print("n: ok; temperature 0.8, seed 42: %r" % ta)
print("curl: ok; %d requests ok, %d cancelled" % (m1[ok], m1[cn]))
PY

# ---- 2. the openai package against medha-worker -p ----
if "$py" -c 'import openai' 2>/dev/null; then
	"$py" - "$base/v1" "$bin/medha-worker" "$model" <<'PY'
import subprocess, sys
import openai
c = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0)
worker, model = sys.argv[2], sys.argv[3]
mid = c.models.list().data[0].id
def alone(prompt, n, chat):
    out = subprocess.run([worker, "-m", model, "-p", prompt, "-n", str(n),
                          "-t", "2"] + (["--chat"] if chat else []),
                         capture_output=True, text=True, check=True).stdout
    assert out.endswith("\n")
    return out[:-1]
cases = [("The capital of France is", 16, False), ("def fibonacci(n):", 16, False),
         ("What is 2+2?", 16, True), ("Write a haiku about the sea.", 16, True),
         # over 4 KiB: the front door tokenizes it on its tokenizer's thread
         ("Medha serves long prompts in chunks. " * 120 + "In short,", 8, False)]
bad = 0
for prompt, n, chat in cases:
    want = alone(prompt, n, chat)
    if chat:
        msgs = [{"role": "user", "content": prompt}]
        r = c.chat.completions.create(model=mid, messages=msgs, max_tokens=n, temperature=0)
        whole = r.choices[0].message.content
        s = c.chat.completions.create(model=mid, messages=msgs, max_tokens=n,
                                      temperature=0, stream=True)
        streamed = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
    else:
        r = c.completions.create(model=mid, prompt=prompt, max_tokens=n, temperature=0)
        whole = r.choices[0].text
        s = c.completions.create(model=mid, prompt=prompt, max_tokens=n,
                                 temperature=0, stream=True)
        streamed = "".join(ch.choices[0].text for ch in s if ch.choices)
    ok = whole == want and streamed == want
    bad += not ok
    print("%s %s%r: %s" % ("ok  " if ok else "FAIL", "chat " if chat else "", prompt[:60],
                            "" if ok else "http %r, stream %r, alone %r" % (whole, streamed, want)))
r = c.completions.create(model=mid, prompt=cases[0][0], max_tokens=16,
                         temperature=0, n=2)
want = alone(cases[0][0], 16, False)
assert [x.text for x in r.choices] == [want, want], (r.choices, want)
assert r.usage.prompt_tokens_details.cached_tokens > 0, r.usage
try:
    c.completions.create(model=mid, prompt="x", max_tokens=100000)
    bad += 1
except openai.BadRequestError as e:
    assert e.body["code"] == "context_length_exceeded", e.body
print("openai %s: %d of %d cases differ from medha-worker -p" % (openai.__version__, bad, len(cases)))
sys.exit(1 if bad else 0)
PY
else
	echo "skip: the openai package is not in $py (contrib/fetch-refs.sh)"
fi

# ---- 1d. the penalties and min-p live: as medha-worker -p gives them ----
pen='"presence_penalty": 0.8, "frequency_penalty": 0.4, "repetition_penalty": 1.3, "min_p": 0.05'
req pen "$base/v1/completions" -d "{\"prompt\": \"The capital of France is\",
    \"max_tokens\": 24, \"temperature\": 0, \"ignore_eos\": true, $pen}"
"$bin/medha-worker" -m "$model" -p "The capital of France is" -n 24 -t 2 \
    --ignore-eos --presence-penalty 0.8 --frequency-penalty 0.4 \
    --repetition-penalty 1.3 --min-p 0.05 >"$tmp/pen.alone"
"$bin/medha-worker" -m "$model" -p "The capital of France is" -n 24 -t 2 \
    --ignore-eos >"$tmp/plain.alone"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
assert open(d + "/pen.code").read() == "200", open(d + "/pen").read()
got = json.loads(open(d + "/pen").read())["choices"][0]["text"]
want = open(d + "/pen.alone").read()[:-1]
plain = open(d + "/plain.alone").read()[:-1]
assert got == want, (got, want)
assert got != plain, "the penalties changed nothing"
print("penalties live: as medha-worker -p gives them: %r" % got)
PY

# ---- 1e. logprobs: OpenAI's shapes, as medha-worker -p gives them ----
"$bin/medha-worker" -m "$model" -p "The capital of France is" -n 6 -t 2 \
    --tokens --logprobs "$tmp/lp.alone" --top-logprobs 3 >/dev/null
req lpc "$base/v1/completions" -d '{"prompt": "The capital of France is",
    "max_tokens": 6, "temperature": 0, "logprobs": 3}'
req lps -N "$base/v1/completions" -d '{"prompt": "The capital of France is",
    "max_tokens": 6, "temperature": 0, "logprobs": 3, "stream": true}'
req lpchat "$base/v1/chat/completions" -d '{"messages": [{"role": "user",
    "content": "Hi"}], "max_tokens": 4, "temperature": 0, "logprobs": true,
    "top_logprobs": 2}'
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
alone = [json.loads(l) for l in open(d + "/lp.alone")]
c = json.loads(open(d + "/lpc").read())
lp = c["choices"][0]["logprobs"]
assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, lp
n = len(lp["tokens"])
assert n == c["usage"]["completion_tokens"] == len(alone), (n, c["usage"])
assert "".join(lp["tokens"]) == c["choices"][0]["text"], lp["tokens"]
worst = 0.0
for i in range(n):
    worst = max(worst, abs(lp["token_logprobs"][i] - alone[i]["logprob"]))
    top = lp["top_logprobs"][i]
    assert len(top) == 3, top
    for (tid, v), got in zip(alone[i]["top"], sorted(top.values(), reverse=True)):
        worst = max(worst, abs(v - got))
assert worst < 1e-4, worst
assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
# streamed: the same tokens and values, chunk by chunk
ev = [json.loads(e[6:]) for e in open(d + "/lps").read().split("\n\n")
      if e.startswith("data: {")]
st = [x for e in ev for x in (e["choices"][0]["logprobs"] or {}).get("token_logprobs", [])]
assert len(st) == n and max(abs(a - b) for a, b in zip(st, lp["token_logprobs"])) < 1e-6, st
ch = json.loads(open(d + "/lpchat").read())["choices"][0]["logprobs"]["content"]
assert ch and all(set(x) == {"token", "logprob", "bytes", "top_logprobs"} for x in ch), ch
assert all(len(x["top_logprobs"]) == 2 and x["logprob"] <= 0 for x in ch), ch
assert all(bytes(x["bytes"]).decode("utf-8", "replace") for x in ch)
print("logprobs: completions, streamed and chat in OpenAI's shapes; %d tokens as medha-worker -p's within %.1e" % (n, worst))
PY

# ---- 1a. the logs: one format (RFC 3339 time, program, level), normal
# events at info, an access line per HTTP request at info ----
ts='^20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9][0-9][0-9]Z'
for l in router:medha-router sched:medha-sched sched-worker0:medha-worker; do
	f=$tmp/logs/${l%%:*}.log
	grep -v "$ts ${l#*:}: \(error\|warning\|info\|debug\): " "$f" |
	    grep . && { echo "${l%%:*}.log: lines not in the log format"; exit 1; }
	grep -q "$ts ${l#*:}: info: .*ready" "$f" ||
	    { echo "${l%%:*}.log: no info ready"; cat "$f"; exit 1; }
done
! grep -q 'warning: \(ready\|http: listening\)' "$tmp"/logs/*.log
grep -q "$ts medha-router: info: http: listening at" "$tmp/logs/router.log"
grep -q 'info: http: POST /v1/completions 200 cmpl-[^,]*, 6 tokens in, [0-9]* out, ok, [0-9.]* s$' "$tmp/logs/router.log" &&
    grep -q 'info: http: POST /v1/completions 200 .*, streamed$' "$tmp/logs/router.log" &&
    grep -q 'info: http: POST /v1/chat/completions 200 chatcmpl-' "$tmp/logs/router.log" &&
    grep -q 'info: http: DELETE /v1/completions 405$' "$tmp/logs/router.log" &&
    grep -q 'info: http: GET /health 200$' "$tmp/logs/router.log" &&
    grep -q 'info: http: POST /v1/completions 400$' "$tmp/logs/router.log" ||
    { echo "router.log: access lines"; cat "$tmp/logs/router.log"; exit 1; }
echo "logs: ok"

# ---- 1b. a stream to an HTTP/1.0 client: no chunked coding ----
python3 - 127.0.0.1 "$port" <<'PY'
import json, socket, sys
b = json.dumps({"prompt": "The capital of France is", "max_tokens": 4,
                "temperature": 0, "stream": True}).encode()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json"
          b"\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
got = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
head, _, body = got.partition(b"\r\n\r\n")
assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0], head
assert b"chunked" not in head.lower(), head
assert body.startswith(b"data: {"), body[:80]
assert body.endswith(b"data: [DONE]\n\n"), body[-80:]
print("http/1.0 stream: ok, %d bytes, not chunked" % len(body))
PY

# ---- 1c. a stream's headers come when it is accepted, not with its first
# token; comments keep it alive meanwhile ----
python3 - 127.0.0.1 "$port" <<'PY'
import json, socket, sys, time
b = json.dumps({"prompt": "word " * 1500, "max_tokens": 2, "temperature": 0,
                "stream": True}).encode()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
t0 = time.time()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
got, head_at, data_at = b"", None, None
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
    if head_at is None and b"\r\n\r\n" in got:
        head_at = time.time() - t0
    if data_at is None and b"data: {" in got:
        data_at = time.time() - t0
head, _, body = got.partition(b"\r\n\r\n")
assert b" 200 " in head.split(b"\r\n")[0], head
assert head_at is not None and data_at is not None, got[:200]
assert head_at < 2.0, (head_at, data_at)
if data_at - head_at > 2.5:
    assert b": keep-alive" in body, body[:300]
assert body.rstrip().endswith(b"[DONE]") or b"data: [DONE]" in body, body[-200:]
print("stream: headers after %.2f s, first token after %.2f s, %d keep-alive comments"
      % (head_at, data_at, body.count(b": keep-alive")))
PY

# ---- 1d. whole answers whose client hangs up: cancelled within a second
# (a watch read on the connection); a long one still answered whole, with
# Connection: close ----
python3 - 127.0.0.1 "$port" <<'PY'
import json, socket, sys, time, urllib.request
host, port = sys.argv[1], int(sys.argv[2])
def metrics():
    t = urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=10).read().decode()
    out = {}
    for l in t.splitlines():
        if l and not l.startswith("#"):
            k, v = l.rsplit(" ", 1)
            out[k.split("{")[0] + ("{cancelled}" if 'status="cancelled"' in k else "")] = float(v)
    return out
def post(d):
    b = json.dumps(d).encode()
    s = socket.create_connection((host, port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    return s
c0 = metrics()["medha_requests_total{cancelled}"]
for i in range(4):
    post({"prompt": "Once upon a time %d" % i, "n": 16, "max_tokens": 8000,
          "ignore_eos": True}).close()
t0 = time.time()
seen, dt = 0, None
while time.time() - t0 < 10:
    m = metrics()
    seen = max(seen, m["medha_requests_in_flight"])
    if m["medha_requests_total{cancelled}"] >= c0 + 64 and m["medha_requests_in_flight"] == 0:
        dt = time.time() - t0
        break
    time.sleep(0.05)
assert dt is not None, ("still in flight after 10 s", m["medha_requests_in_flight"], m["medha_requests_total{cancelled}"] - c0)
assert dt < 1.0, ("cancelled after %.2f s" % dt)
s = post({"prompt": "Once upon a time", "n": 2, "max_tokens": 48, "ignore_eos": True, "temperature": 0})
got = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
head, _, body = got.partition(b"\r\n\r\n")
assert b" 200 " in head.split(b"\r\n")[0], head
assert b"connection: close" in head.lower(), head
r = json.loads(body)
assert [c["index"] for c in r["choices"]] == [0, 1], r
assert r["usage"]["completion_tokens"] == 96, r["usage"]
print("hangup: 64 choices cancelled, in flight 0 after %.2f s (peak seen %d); "
      "a long answer whole with Connection: close" % (dt, seen))
PY

# ---- 3. hostile clients ----
python3 "$top/tests/ref/http_hostile.py" 127.0.0.1 "$port"

# ---- 4. SIGTERM stops every process ----
serve_stop
sleep 0.5
if pgrep -f "medha-router -l ipc://$tmp/router.sock" >/dev/null ||
    pgrep -f "medha-sched -l ipc://$tmp/r.sock" >/dev/null; then
	echo "processes left after SIGTERM"
	exit 1
fi
grep -q "stopped:" "$tmp/logs/router.log"
# under make asan: no sanitizer report from any process
no_sanitizer_report "$tmp"/logs/*.log
echo "http: ok"

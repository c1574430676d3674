#!/bin/sh
# http-text.sh: the HTTP front door's text and token accounting, through
# the openai Python package (cache/venv), on examples/serve.sh single
# (one cpu replica of SmolLM2 behind medha-router --http).
#  1. Non-English text streamed: completions and chat for Japanese,
#     Russian, emoji and mixed prompts, greedy: the joined stream equals
#     the whole answer, every chunk is valid UTF-8 and holds no U+FFFD
#     the whole answer lacks (a character split across tokens waits for
#     its last byte), and logprobs name every token (OpenAI's
#     "bytes:\xe6..." where a token is not whole characters), their
#     bytes joined are the text's and text_offset is the character
#     where each token's first byte is; streamed logprobs the same.
#     A second router on the same replica without -m (no tokenizer: the
#     names come from the bytes the replica sends with each logprob)
#     answers the same logprobs, tokens, top_logprobs' names and
#     text_offset, whole and streamed, "bytes:" names among them.
#  2. Stop strings that end inside a token, span tokens, or sit in the
#     first token: the text ends before the stop string, and
#     usage.completion_tokens and logprobs count every token generated,
#     the one that completed the stop string included (vLLM's), whole
#     and streamed.
#  3. max_tokens that reaches the context: 400 context_length_exceeded
#     with the prompt's and max_tokens' counts (text and ids).
#  4. What vLLM clients send: a list of prompts (texts or token ids,
#     n choices each), a seed of 2^64 - 1, min_tokens (an answer that
#     ends early goes on to min_tokens, greedy and sampled; no stop
#     string before; more than max_tokens refused), stop_token_ids,
#     HEAD /health, and data: [DONE] after a stream's error event (its
#     worker killed).
#  5. The router's log at its default level: an access line per HTTP
#     request, no warning for a routine start, a replica unreachable for
#     30 s said (a second router, whose replica never comes), flag
#     errors without a time stamp.
# Skips without the model or the openai package.
. "$(dirname "$0")/lib.sh"
need_model
need_py openai
port=$(free_port)
bport=$(free_port)
# a router whose replica is never there: said unreachable after 30 s
"$bin/medha-router" -l "ipc://$tmp/lone.sock" -r "ipc://$tmp/nobody.sock" \
    --insecure 2>"$tmp/lone.log" &
lone=$!
# (--recover-timeout 0: the stream whose worker is killed below fails,
# not recomputed)
serve_start single 60 MEDHA_MODEL="$model" MEDHA_ADDR="ipc://$tmp/r.sock" \
    MEDHA_ROUTER="ipc://$tmp/router.sock" MEDHA_HTTP="127.0.0.1:$port" \
    MEDHA_LOG="$tmp/logs" MEDHA_SCHED_OPTS="--recover-timeout 0"

"$py" - "http://127.0.0.1:$port/v1" "$tmp/listid" <<'PY'
import json, sys, urllib.request
import openai
base = sys.argv[1]
c = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
mid = c.models.list().data[0].id

def tok_bytes(t):
    if t.startswith("bytes:"):
        h = t[6:]
        assert len(h) % 4 == 0 and all(h[i:i + 2] == "\\x" for i in range(0, len(h), 4)), t
        return bytes(int(h[i + 2:i + 4], 16) for i in range(0, len(h), 4))
    return t.encode()

def raw_chunks(path, body):
    """the SSE data lines of a stream, as bytes: each must be strict UTF-8"""
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    out = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r.read().split(b"\n"):
            if line.startswith(b"data: {"):
                line.decode("utf-8")  # strict: raises on a bad byte
                out.append(json.loads(line[6:]))
    return out

def as_text(got):
    # a text cut inside a character (max_tokens) ends with a U+FFFD
    # for each of its bytes
    whole = len(got)
    while whole > 0 and whole > len(got) - 4 and got[whole - 1] >= 0x80:
        try:
            got[:whole].decode()
            break
        except UnicodeDecodeError:
            whole -= 1
    return got[:whole] + "\ufffd".encode() * (len(got) - whole)

def check_lp(text, tokens, offsets, what):
    b = text.encode()
    got = b"".join(tok_bytes(t) for t in tokens)
    assert as_text(got) == b, (what, got, b)
    at = 0
    for i, t in enumerate(tokens):
        want = len(b[:at].decode("utf-8", "ignore"))
        assert offsets[i] == want, (what, i, t, offsets, want)
        if not t.startswith("bytes:"):
            assert text[offsets[i]:].startswith(t) or b[at:at + 1] >= b"\x80", (what, i, t)
        at += len(tok_bytes(t))
    return sum(t.startswith("bytes:") for t in tokens)

cases = ["東京、大阪、京都、", "日本語で答えてください:富士山は", "Привет! Как дела? Расскажи о Москве.",
         "I love pizza 🍕, sushi 🍣 and", "Translate: 猫 = cat, 犬 = dog, Собака ="]
split = 0
for p in cases:
    # completions: whole, streamed through openai, streamed raw
    w = c.completions.create(model=mid, prompt=p, max_tokens=24, temperature=0,
                             logprobs=1)
    whole = w.choices[0].text
    lp = w.choices[0].logprobs
    split += check_lp(whole, lp.tokens, lp.text_offset, p)
    assert len(lp.tokens) == w.usage.completion_tokens, (p, w.usage)
    s = c.completions.create(model=mid, prompt=p, max_tokens=24, temperature=0,
                             stream=True)
    parts = [ch.choices[0].text for ch in s if ch.choices]
    assert "".join(parts) == whole, (p, parts, whole)
    assert all("\ufffd" not in x for x in parts) or "\ufffd" in whole, parts
    raw = raw_chunks("/completions", {"prompt": p, "max_tokens": 24,
                                      "temperature": 0, "stream": True,
                                      "logprobs": 1})
    rt = [x["choices"][0]["text"] for x in raw]
    assert "".join(rt) == whole, (p, rt, whole)
    stoks = [t for x in raw for t in (x["choices"][0]["logprobs"] or {}).get("tokens", [])]
    soffs = [o for x in raw for o in (x["choices"][0]["logprobs"] or {}).get("text_offset", [])]
    assert stoks == lp.tokens and soffs == lp.text_offset, (p, stoks, soffs, lp)
    # chat: whole and streamed, logprobs' bytes the content's
    msgs = [{"role": "user", "content": p}]
    w = c.chat.completions.create(model=mid, messages=msgs, max_tokens=24,
                                  temperature=0, logprobs=True)
    whole = w.choices[0].message.content
    content = w.choices[0].logprobs.content
    assert as_text(b"".join(bytes(x.bytes) for x in content)) == whole.encode(), (p, content)
    assert all(tok_bytes(x.token) == bytes(x.bytes) for x in content), content
    s = c.chat.completions.create(model=mid, messages=msgs, max_tokens=24,
                                  temperature=0, stream=True)
    parts = [ch.choices[0].delta.content or "" for ch in s if ch.choices]
    assert "".join(parts) == whole, (p, parts, whole)
    assert all("\ufffd" not in x for x in parts) or "\ufffd" in whole, parts
    raw = raw_chunks("/chat/completions", {"messages": msgs, "max_tokens": 24,
                                           "temperature": 0, "stream": True})
    assert "".join(x["choices"][0]["delta"].get("content") or "" for x in raw) == whole
    print("ok %r: chat %r" % (p, whole[:30]))
# the case the issue gave: characters split across tokens were streamed
assert split > 0, "no token was part of a character: the test tests nothing"
print("utf-8: %d tokens in bytes form" % split)
open(sys.argv[2] + ".cases", "w").write(json.dumps(cases))

# ---- 2. stop strings ----
p = "The days of the week are Monday, Tuesday,"
w = c.completions.create(model=mid, prompt=p, max_tokens=12, temperature=0,
                         logprobs=1)
full = w.choices[0].text
toks = w.choices[0].logprobs.tokens
assert w.choices[0].finish_reason == "length", w
ends = []  # where each token's bytes end in the text
for t in toks:
    ends.append((ends[-1] if ends else 0) + len(tok_bytes(t)))
print("unstopped: %r, tokens %r" % (full, toks))
def pick():
    # a stop ending inside a token: token k's first two characters
    k = next(i for i in range(1, len(toks)) if len(toks[i].strip()) >= 3)
    inside = toks[k].lstrip()[:2]
    # spanning tokens: the end of token k - 1 to the start of token k + 1
    j = next(i for i in range(1, len(toks) - 1) if len(toks[i]) >= 1 and toks[i - 1] and toks[i + 1])
    span = toks[j - 1][-1:] + toks[j] + toks[j + 1][:1]
    # the first token: its text
    first = toks[0]
    return [("inside", inside), ("span", span), ("first", first)]
for name, stop in pick():
    b, sb = full.encode(), stop.encode()
    at = b.find(sb)
    assert at >= 0, (name, stop)
    n = next(i for i, e in enumerate(ends) if e >= at + len(sb)) + 1
    want = b[:at].decode()
    r = c.completions.create(model=mid, prompt=p, max_tokens=12, temperature=0,
                             logprobs=1, stop=[stop])
    x = r.choices[0]
    assert x.text == want and x.finish_reason == "stop", (name, stop, x, want)
    assert r.usage.completion_tokens == n, (name, stop, r.usage, n)
    assert x.logprobs.tokens == toks[:n], (name, x.logprobs.tokens, toks[:n])
    s = list(c.completions.create(model=mid, prompt=p, max_tokens=12,
                                  temperature=0, logprobs=1, stop=[stop],
                                  stream=True,
                                  stream_options={"include_usage": True}))
    st = "".join(ch.choices[0].text for ch in s if ch.choices)
    stoks = [t for ch in s if ch.choices and ch.choices[0].logprobs
             for t in ch.choices[0].logprobs.tokens]
    assert st == want and stoks == toks[:n], (name, st, stoks)
    assert s[-1].usage.completion_tokens == n, (name, s[-1].usage)
    print("stop %s %r: %r, %d tokens" % (name, stop, x.text, n))

# ---- 3. max_tokens that reaches the context: the counts, the code ----
ctx = 8192
for mt in (9000, 8192, 8180):
    try:
        c.completions.create(model=mid, prompt="word " * 30, max_tokens=mt)
        assert False, mt
    except openai.BadRequestError as e:
        b = e.body
        assert b["code"] == "context_length_exceeded", b
        assert b["message"].endswith(" prompt + %d output tokens exceed the model's context of %d" % (mt, ctx)), b
for mt in (9000, 8190):
    try:
        c.completions.create(model=mid, prompt=[1] * 3, max_tokens=mt)
        assert False, mt
    except openai.BadRequestError as e:
        assert e.body["message"] == "3 prompt + %d output tokens exceed the model's context of %d" % (mt, ctx), e.body
        assert e.body["code"] == "context_length_exceeded", e.body
        said = e.body["message"]
print("context: %r" % said)

# ---- 4. what vLLM clients send ----
# a list of prompts (texts, or token id arrays): n choices each, in
# order, each as the prompt alone answers it; usage sums the prompts
ps = ["The capital of France is", "1, 2, 3,", "def add(a, b):"]
alone = [c.completions.create(model=mid, prompt=q, max_tokens=6, temperature=0)
         for q in ps]
r = c.completions.create(model=mid, prompt=ps, max_tokens=6, temperature=0, n=2)
open(sys.argv[2], "w").write(r.id)
assert [x.index for x in r.choices] == list(range(6)), r
assert [x.text for x in r.choices] == [a.choices[0].text for a in alone for _ in (0, 1)], (r, alone)
assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone), r.usage
assert r.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone), r.usage
s = c.completions.create(model=mid, prompt=ps, max_tokens=6, temperature=0,
                         stream=True)
texts = ["", "", ""]
for ch in s:
    for x in ch.choices:
        texts[x.index] += x.text
assert texts == [a.choices[0].text for a in alone], texts
r = c.completions.create(model=mid, prompt=[[1, 2, 3], [4, 5]], max_tokens=2)
assert len(r.choices) == 2 and r.usage.prompt_tokens == 5, r
# a seed up to 2^64 - 1, repeatable
big = [c.completions.create(model=mid, prompt=ps[0], max_tokens=8, temperature=0.9,
                            seed=2**64 - 1).choices[0].text for _ in (0, 1)]
assert big[0] == big[1], big
# min_tokens (vLLM's): a greedy answer that ends early (the end of
# generation after k tokens) goes on to min_tokens, the same answer
# first (the end is kept out, the rest of the row is as it was); sampled
# alike; a stop string before min_tokens tokens is not applied (vLLM);
# more than max_tokens, or than a chat's default max_tokens, is refused
c.completions.create(model=mid, prompt=ps[0], max_tokens=2, extra_body={"min_tokens": 0})
msg = [{"role": "user", "content": "Say only the word yes."}]
a = c.chat.completions.create(model=mid, messages=msg, max_tokens=64, temperature=0)
k = a.usage.completion_tokens
assert a.choices[0].finish_reason == "stop" and k < 30, a
m = c.chat.completions.create(model=mid, messages=msg, max_tokens=64, temperature=0,
                              extra_body={"min_tokens": k + 10})
assert m.usage.completion_tokens >= k + 10, (k, m)
assert m.choices[0].message.content.startswith(a.choices[0].message.content), (a, m)
n, t = m.usage.completion_tokens, m.choices[0].message.content
for seed in (1, 2, 3):
    m = c.chat.completions.create(model=mid, messages=msg, max_tokens=40, temperature=1,
                                  seed=seed, extra_body={"min_tokens": 30})
    assert m.usage.completion_tokens >= 30, m
w = "The days of the week are Monday, Tuesday,"
a = c.completions.create(model=mid, prompt=w, max_tokens=16, temperature=0, stop=",")
m = c.completions.create(model=mid, prompt=w, max_tokens=16, temperature=0, stop=",",
                         extra_body={"min_tokens": 4})
assert m.choices[0].text.startswith(a.choices[0].text + ","), (a, m)
assert m.usage.completion_tokens > 4 and m.choices[0].finish_reason == "stop", m
for body, kind in (({"max_tokens": 2, "min_tokens": 3}, c.completions),
                   ({"min_tokens": 10 ** 6}, c.chat.completions)):
    try:
        if kind is c.completions:
            c.completions.create(model=mid, prompt=ps[0], extra_body=body)
        else:
            c.chat.completions.create(model=mid, messages=msg, extra_body=body)
        assert False, body
    except openai.BadRequestError as e:
        assert e.body["param"] == "min_tokens" and "max_tokens" in e.body["message"], e.body
print("min_tokens %d: %d tokens, %r" % (k + 10, n, t))
print("list of prompts, seed 2^64 - 1 (%r), min_tokens: ok" % big[0])
PY

# ---- 1b. a front door without a tokenizer names tokens alike ----
# a router on the same replica without -m: the logprobs' names are made
# from the bytes the replica sends with them, never from a tokenizer
"$bin/medha-router" -l "ipc://$tmp/bare.sock" -r "ipc://$tmp/r.sock" \
    --http "127.0.0.1:$bport" 2>"$tmp/bare.log" &
bare=$!
wait_for "$tmp/bare.log" "replica .*: ready" 60 "$bare"
"$py" - "http://127.0.0.1:$port/v1" "http://127.0.0.1:$bport/v1" \
    "$tmp/listid.cases" <<'PY'
import json, sys, urllib.request
import openai
base, bare = sys.argv[1], sys.argv[2]
cases = json.loads(open(sys.argv[3]).read())
cm = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
cb = openai.OpenAI(base_url=bare, api_key="none", max_retries=0)
mids = [x.models.list().data[0].id for x in (cm, cb)]
assert mids[0] == mids[1], mids

def lp_of(c, mid, p):
    w = c.completions.create(model=mid, prompt=p, max_tokens=24,
                             temperature=0, logprobs=5)
    lp = w.choices[0].logprobs
    return w.choices[0].text, lp.tokens, [sorted(t) for t in lp.top_logprobs], \
        lp.text_offset, lp.token_logprobs

def streamed(b, p):
    body = {"prompt": p, "max_tokens": 24, "temperature": 0,
            "stream": True, "logprobs": 5}
    req = urllib.request.Request(b + "/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    toks, tops, offs = [], [], []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r.read().split(b"\n"):
            if line.startswith(b"data: {"):
                x = json.loads(line[6:])["choices"][0]["logprobs"] or {}
                toks += x.get("tokens", [])
                tops += [sorted(t) for t in x.get("top_logprobs", [])]
                offs += x.get("text_offset", [])
    return toks, tops, offs

named = 0
for p in cases:
    a, b = lp_of(cm, mids[0], p), lp_of(cb, mids[1], p)
    assert a[:4] == b[:4], (p, a, b)
    assert max(abs(x - y) for x, y in zip(a[4], b[4])) < 1e-4, (p, a[4], b[4])
    names = a[1] + [t for top in a[2] for t in top]
    assert not any(t.startswith("token_id:") for t in names), (p, names)
    named += sum(t.startswith("bytes:") for t in names)
    sa, sb = streamed(base, p), streamed(bare, p)
    assert sa == sb and sa == tuple(a[1:4]), (p, sa, sb)
assert named > 0, "no name in bytes form: the test tests nothing"
print("no tokenizer at the front door: the same logprobs, %d names in bytes form" % named)
PY

# stop_token_ids: the output ends at the id, which (as EOS) is not
# output; the ids from medha-worker -p --tokens
p="The days of the week are Monday, Tuesday,"
ids=$("$bin/medha-worker" -m "$model" -p "$p" -n 2 -t 2 --tokens)
"$py" - "http://127.0.0.1:$port/v1" "$p" $ids <<'PY'
import sys
import openai
c = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0)
mid = c.models.list().data[0].id
p, first, second = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
w = c.completions.create(model=mid, prompt=p, max_tokens=2, temperature=0)
r = c.completions.create(model=mid, prompt=p, max_tokens=8, temperature=0,
                         extra_body={"stop_token_ids": [second]})
x = r.choices[0]
assert x.finish_reason == "stop" and r.usage.completion_tokens == 1, r
assert w.choices[0].text.startswith(x.text) and x.text, (w, r)
r = c.completions.create(model=mid, prompt=p, max_tokens=8, temperature=0,
                         extra_body={"stop_token_ids": [first]})
assert r.choices[0].text == "" and r.usage.completion_tokens == 0, r
print("stop_token_ids [%d]: %r" % (second, x.text))
PY

# HEAD /health: GET's status and headers, no body (the connection
# serves a GET after it); after an error event, data: [DONE]
python3 - 127.0.0.1 "$port" <<'PY'
import http.client, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=30)
c.request("HEAD", "/health")
r = c.getresponse()
assert r.status == 200 and r.read() == b"", r.status
assert r.getheader("Content-Type") == "application/json", r.getheaders()
c.request("GET", "/health")
r = c.getresponse()
assert r.status == 200 and b'"status"' in r.read()
c.request("HEAD", "/v1/models")
r = c.getresponse()
assert r.status == 200 and r.read() == b""
print("HEAD /health: ok")
PY

# a stream whose worker dies after its first token: OpenAI's error event,
# then data: [DONE], as vLLM ends it (last: the replica is gone)
wpid=$(pgrep -f "medha-worker.*$tmp" | head -n 1)
[ -n "$wpid" ]
python3 - 127.0.0.1 "$port" "$wpid" <<'PY'
import json, os, signal, socket, sys
b = json.dumps({"prompt": "Once upon a time", "max_tokens": 4000,
                "ignore_eos": True, "stream": True}).encode()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
got, killed = b"", False
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
    if not killed and b"data: {" in got:
        os.kill(int(sys.argv[3]), signal.SIGKILL)
        killed = True
events = [e for e in got.partition(b"\r\n\r\n")[2].split(b"\n\n") if e.startswith(b"data: ")]
assert events[-1] == b"data: [DONE]", events[-3:]
err = json.loads(events[-2][6:])
assert "error" in err and err["error"]["message"], events[-2]
print("error event, then [DONE]: %r" % err["error"]["message"])
PY

# ---- 5. the logs an operator reads, at the default level: one access
# line per HTTP request (a completion's with its tokens and time, a
# refusal's with its status), a routine start without a warning, a
# replica unreachable for 30 s said, flag errors without a time ----
rl=$tmp/logs/router.log
id=$(cat "$tmp/listid")
[ "$(grep -c "info: http: POST /v1/completions 200 $id, [0-9]* tokens in, [0-9]* out, ok, [0-9.]* s$" "$rl")" = 1 ] &&
    grep -q 'info: http: POST /v1/chat/completions 200 chatcmpl-[^,]*, [0-9]* tokens in, [0-9]* out, ok, [0-9.]* s, streamed$' "$rl" &&
    grep -q 'info: http: POST /v1/completions 400$' "$rl" &&
    grep -q 'info: http: HEAD /health 200$' "$rl" &&
    grep -q 'info: http: POST /v1/completions 200 cmpl-.*, request failed: worker 0 lost.*, streamed$' "$rl" &&
    grep -q 'info: replica .*: ready' "$rl" ||
    { echo "router.log: access lines"; cat "$rl"; exit 1; }
if sed -n '1,/ready: /p' "$rl" | grep warning; then
	echo "router.log: a routine start warned"
	exit 1
fi
wait_for "$tmp/lone.log" "warning: replica ipc://$tmp/nobody.sock: unreachable for 3[0-9] s" 40 "$lone"
expect_status 2 "$bin/medha-router" -l "ipc://$tmp/x.sock"
grep -q '^medha-router: at least one -r ADDR is required$' "$tmp/err"
expect_status 2 "$bin/medha-router" -l "ipc://$tmp/x.sock" -r "ipc://$tmp/y.sock" \
    --insecure --http nowhere
grep -q '^medha-router: --http nowhere' "$tmp/err"
echo "logs: ok"

kill "$bare"
serve_stop
kill "$lone"
no_sanitizer_report "$tmp"/logs/*.log "$tmp/lone.log" "$tmp/bare.log"
echo "http-text: ok"

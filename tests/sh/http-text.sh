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
#  2. Stop strings that end inside a token, span tokens, or sit in the
#     first token: the text ends before the stop string, and
#     usage.completion_tokens and logprobs count every token generated,
#     the one that completed the stop string included (vLLM's), whole
#     and streamed.
# Skips without the model or the openai package.
. "$(dirname "$0")/lib.sh"
need_model
need_py openai
port=$(free_port)
serve_start single 60 MEDHA_MODEL="$model" MEDHA_ADDR="ipc://$tmp/r.sock" \
    MEDHA_ROUTER="ipc://$tmp/router.sock" MEDHA_HTTP="127.0.0.1:$port" \
    MEDHA_LOG="$tmp/logs" MEDHA_ROUTER_OPTS="-v"

"$py" - "http://127.0.0.1:$port/v1" <<'PY'
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
PY

serve_stop
no_sanitizer_report "$tmp"/logs/*.log
echo "http-text: ok"

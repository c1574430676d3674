"""proto_transcript.py: medha-proto(7)'s examples checked as written
(tests/sh/man-examples.sh).

  proto_transcript.py FILE         a transcript: lines "-> MSG" (sent) and
                                   "<- MSG" (answered), a message going on
                                   over the lines after it; each MSG must
                                   be JSON, [1, TYPE, ...] with TYPE one the
                                   page defines, and each answer the type
                                   its request is answered with
  proto_transcript.py --hex FILE   the bytes of the SUBMIT the page shows
                                   beside them, decoded here (msgpack's
                                   fixarray, fixmap, fixstr, fixint only)
"""
import json
import sys

# medha-proto(7): requests and what answers them
# (net/proto.h: SUBMIT 1 ACCEPTED 2 POLL 3 EVENTS 4 CANCEL 5 OK 6 STATUS 7
# STATUS_REPLY 8 ERROR 9 HELLO 10 WELCOME 11 READY 12 RESULT 13 BATCH 15
# IDLE 16)
ANSWERS = {1: {2, 9}, 3: {4, 9}, 5: {6, 9}, 7: {8, 9}, 10: {11, 9},
           12: {15, 16, 9}, 13: {15, 16, 9}}


def transcript(path):
    msgs, cur = [], None
    for line in open(path):
        if line.startswith(("-> ", "<- ")):
            if cur:
                msgs.append(cur)
            cur = [line[:2], line[3:]]
        elif cur and line.strip():
            cur[1] += line
    if cur:
        msgs.append(cur)
    assert msgs, "no message"
    want = None
    for d, text in msgs:
        m = json.loads(text)
        assert isinstance(m, list) and m[0] == 1 and isinstance(m[1], int), m
        if d == "->":
            assert m[1] in ANSWERS, ("not a request type", m[1])
            want = ANSWERS[m[1]]
        else:
            assert want is not None and m[1] in want, ("answer", m[1], want)
            want = None
    print("%d messages" % len(msgs))


def unpack(b, i):
    c = b[i]
    if c <= 0x7F:
        return c, i + 1
    if 0x90 <= c <= 0x9F:
        out, i = [], i + 1
        for _ in range(c & 15):
            v, i = unpack(b, i)
            out.append(v)
        return out, i
    if 0x80 <= c <= 0x8F:
        out, i = {}, i + 1
        for _ in range(c & 15):
            k, i = unpack(b, i)
            v, i = unpack(b, i)
            out[k] = v
        return out, i
    if 0xA0 <= c <= 0xBF:
        n = c & 31
        return b[i + 1:i + 1 + n].decode(), i + 1 + n
    raise ValueError("byte %02x: not in this example's subset" % c)


def hexbytes(path):
    b = bytes.fromhex(open(path).read())
    v, i = unpack(b, 0)
    assert i == len(b), (i, len(b))
    want = [1, 1, {"id": "a", "prompt_tokens": 8, "max_tokens": 1}]
    assert v == want, (v, want)
    print(v)


if sys.argv[1] == "--hex":
    hexbytes(sys.argv[2])
else:
    transcript(sys.argv[1])

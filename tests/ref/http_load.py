"""http_load.py HOST PORT N LEAVE: N concurrent HTTP clients of
medha-router --http, each with one completion of a token-id prompt (half
of them streamed); LEAVE of the streamed ones close their connection
after the first chunk. Prints one JSON line of counts:

  {"ok": n, "streamed_ok": n, "left": n, "refused": {"429": n, ...},
   "bad": [...]}

A client is "ok" when it got 200 and a whole answer (a JSON body with a
choice, or a stream ending in [DONE]); "refused" when it got a clean 4xx
or 5xx with OpenAI's error body; anything else is "bad" (a connection
cut without an answer, a stream that stops short, a malformed body).
"""
import asyncio
import json
import random
import sys

host, port, n, leave = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(7)


async def one(i, stream, leaves):
    prompt = [rng.randrange(10, 30000) for _ in range(rng.randrange(4, 200))]
    body = json.dumps({"prompt": prompt, "max_tokens": rng.randrange(4, 40),
                       "temperature": 0, "ignore_eos": True,
                       "stream": stream}).encode()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
    except Exception as e:  # noqa: BLE001
        return ("bad", "connect: %r" % e)
    try:
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 120)
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            rest = await asyncio.wait_for(r.read(), 60)
            try:
                err = json.loads(rest)["error"]
                assert err["message"]
            except Exception:  # noqa: BLE001
                return ("bad", "status %d with body %r" % (status, rest[:200]))
            return ("refused", status)
        if not stream:
            rest = await asyncio.wait_for(r.read(), 120)
            try:
                d = json.loads(rest)
                assert d["choices"][0]["finish_reason"] == "length"
            except Exception:  # noqa: BLE001
                return ("bad", "body %r" % rest[:200])
            return ("ok", None)
        if leaves:
            await asyncio.wait_for(r.readuntil(b"\n\n"), 120)
            return ("left", None)
        rest = await asyncio.wait_for(r.read(), 120)
        # chunked: the last event, then the empty chunk
        if b"data: [DONE]\n\n" not in rest[-64:] or \
                not rest.endswith(b"0\r\n\r\n"):
            return ("bad", "stream ends %r" % rest[-200:])
        return ("streamed_ok", None)
    except Exception as e:  # noqa: BLE001
        return ("bad", "%r" % e)
    finally:
        w.close()


async def main():
    jobs = []
    for i in range(n):
        stream = i % 2 == 1
        jobs.append(one(i, stream, stream and i // 2 < leave))
    res = await asyncio.gather(*jobs)
    out = {"ok": 0, "streamed_ok": 0, "left": 0, "refused": {}, "bad": []}
    for kind, what in res:
        if kind == "refused":
            out["refused"][str(what)] = out["refused"].get(str(what), 0) + 1
        elif kind == "bad":
            out["bad"].append(what)
        else:
            out[kind] += 1
    print(json.dumps(out))


asyncio.run(main())

"""http_hostile.py HOST PORT: hostile clients against medha-router --http.

Raw sockets, so that nothing in between repairs the bytes. Each case must
get a clear 4xx answer (or, where no HTTP answer is possible, a closed
connection), the server must keep answering everyone else meanwhile,
and it must still serve a completion at the end:

  - invalid UTF-8 in a JSON string, a body that is not JSON, JSON nested
    100,000 deep, a non-numeric and a negative Content-Length, a request
    line that is not HTTP, a header line of 64 KB, an unknown route;
  - slowloris: 40 connections that send half their headers and stall,
    and 40 that announce a body and send a tenth of it: /health answers
    within a second while they hang, and the server closes the
    half-sent bodies (its body timeout, 10 s);
  - a client that asks for a long stream and never reads it: others are
    answered meanwhile.
"""
import json
import socket
import sys
import time

host, port = sys.argv[1], int(sys.argv[2])


def conn(timeout=5):
    s = socket.create_connection((host, port), timeout=timeout)
    return s


def ask(raw, timeout=5):
    """Send raw bytes; the status code of the answer, or None if the
    server closed the connection without one."""
    s = conn(timeout)
    try:
        s.sendall(raw)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return None
    finally:
        s.close()
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


def post(path, body, extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def health(timeout=1.0):
    t = time.monotonic()
    s = conn(timeout)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    dt = time.monotonic() - t
    if not data.startswith(b"HTTP/1."):
        return None, dt
    code = int(data.split(b" ", 2)[1])
    if code != 200:
        print("    /health: %r" % data)
    return code, dt


fails = []


def expect(name, got, want):
    ok = got in want
    print("%s %s: %s" % ("ok  " if ok else "FAIL", name, got))
    if not ok:
        fails.append(name)


cmpl = b"/v1/completions"
expect("invalid UTF-8 in a string",
       ask(post(cmpl, b'{"prompt": "\xff\xfe\xc0\xaf", "max_tokens": 1}')),
       {400})
expect("invalid UTF-8 in a key",
       ask(post(cmpl, b'{"pr\xffompt": "x", "max_tokens": 1}')), {400})
expect("not JSON", ask(post(cmpl, bytes(range(256)))), {400})
expect("nested 100000 deep",
       ask(post(cmpl, b"[" * 100000 + b"]" * 100000)), {400, 413})
expect("chat with a number for messages",
       ask(post(b"/v1/chat/completions", b'{"messages": 5}')), {400})
expect("Content-Length not a number",
       ask(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: many\r\n\r\n{}"), {400, 411, None})
expect("Content-Length negative",
       ask(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: -5\r\n\r\n{}"), {400, 411, None})
expect("not HTTP", ask(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 20 +
                       b"\r\n\r\n"), {400, None})
expect("a 64 KB header line",
       ask(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 +
           b"\r\n\r\n"), {200, 400, 413, 431, None})
expect("an unknown route", ask(b"GET /../../etc/passwd HTTP/1.1\r\n"
                               b"Host: x\r\n\r\n"), {400, 404})

# slowloris: half-sent headers and half-sent bodies
heads, bodies = [], []
for i in range(40):
    s = conn(30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
    heads.append(s)
    s = conn(30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 100\r\n\r\n{\"prompt\": ")
    bodies.append(s)
code, dt = health(2)
expect("/health while 80 connections stall (%.3f s)" % dt, code,
       {200})
if dt > 1:
    fails.append("health took %.1f s" % dt)

# a stream nobody reads
lazy = conn(30)
lazy.sendall(post(cmpl, b'{"prompt": "Once upon a time", "max_tokens": 2000,'
                        b' "ignore_eos": true, "stream": true}'))
time.sleep(0.5)
t = time.monotonic()
code = ask(post(cmpl, b'{"prompt": "The capital of France is",'
                      b' "max_tokens": 4, "temperature": 0}'), 30)
expect("a completion beside an unread stream (%.2f s)" %
       (time.monotonic() - t), code, {200})

# the server lets the half-sent bodies go (10 s body timeout)
t = time.monotonic()
closed = 0
for s in bodies:
    s.settimeout(max(0.1, 20 - (time.monotonic() - t)))
    try:
        while s.recv(4096):
            pass
        closed += 1
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed += 1
expect("half-sent bodies closed by the server within 20 s (%d of 40)" %
       closed, closed, {40})
for s in heads + bodies + [lazy]:
    s.close()

code = ask(post(cmpl, b'{"prompt": "The capital of France is",'
                      b' "max_tokens": 4, "temperature": 0}'), 30)
expect("a completion after it all", code, {200})
code, dt = health(2)
expect("/health at the end", code, {200})
print("hostile http: %d of %d cases failed" % (len(fails), 16))
sys.exit(1 if fails else 0)

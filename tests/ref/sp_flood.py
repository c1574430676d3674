"""sp_flood.py: strangers on an nng (SP over TCP) port, for
tests/sh/strangers.sh (issue 39).

    python3 sp_flood.py frames HOST PORT PROTO N MIB
        N connections, each saying the SP greeting of protocol PROTO
        (80: push, 48: req) and then sending one frame of MIB MiB
        without any secret, all at once from threads; prints how many
        connections the server closed before the frame was all sent.

    python3 sp_flood.py hold HOST PORT PROTO N SECONDS [SRC...]
        N connections (from the source addresses SRC in turn, such as
        127.0.0.2) that greet and then say nothing for SECONDS; prints
        how many look open a second in, then at the end (the kernel's
        backlog holds those the server has not accepted: open too).
"""
import socket
import struct
import sys
import threading
import time


def greet(host, port, proto, src=None):
    s = socket.create_connection((host, port), timeout=30,
                                 source_address=(src, 0) if src else None)
    s.sendall(b"\x00SP\x00" + struct.pack(">H", proto) + b"\x00\x00")
    return s


def frames(host, port, proto, n, mib):
    closed = [0]
    lock = threading.Lock()
    chunk = b"\x00" * (1 << 20)

    def one():
        try:
            s = greet(host, port, proto)
            s.sendall(struct.pack(">Q", mib << 20))
            for _ in range(mib):
                s.sendall(chunk)
            s.settimeout(3)
            try:
                if s.recv(1) == b"":
                    raise ConnectionError
            except socket.timeout:
                return
        except (OSError, ConnectionError):
            with lock:
                closed[0] += 1

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(closed[0])


def open_now(ss):
    alive = []
    for s in ss:
        s.setblocking(False)
        try:
            if s.recv(1) != b"":
                alive.append(s)
        except BlockingIOError:
            alive.append(s)
        except OSError:
            pass
    return alive


def hold(host, port, proto, n, secs, srcs):
    ss = []
    for i in range(n):
        try:
            ss.append(greet(host, port, proto,
                            srcs[i % len(srcs)] if srcs else None))
        except OSError:
            pass
    time.sleep(1)
    ss = open_now(ss)
    print(len(ss), flush=True)
    time.sleep(max(secs - 1, 0))
    print(len(open_now(ss)), flush=True)


if __name__ == "__main__":
    what, host, port, proto, n, x = sys.argv[1:7]
    if what == "frames":
        frames(host, int(port), int(proto), int(n), int(x))
    else:
        hold(host, int(port), int(proto), int(n), int(x), sys.argv[7:])

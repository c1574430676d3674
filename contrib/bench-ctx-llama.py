"""bench-ctx-llama.py: llama.cpp's speed at depth, the peer of
contrib/bench-ctx.c in contrib/bench-cpu.sh, through llama-cpp-python (a
build of llama.cpp compiled on this machine). The same protocol and the
same pseudo-random tokens: for each DEPTH (ascending) the context is
filled to DEPTH in batches of 512 (not timed), then a prefill of P tokens
and N one-token decode steps are timed; the next depth continues the same
context. One line per depth:

    depth D  prefill X tok/s  decode Y tok/s

usage: python bench-ctx-llama.py [-t T] [-p P] [-n N] [--fa auto|on|off]
           MODEL DEPTH...
"""
import argparse
import sys
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--fa", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("model")
    ap.add_argument("depth", type=int, nargs="+")
    a = ap.parse_args()
    maxd = max(a.depth)
    kw = dict(model_path=a.model, n_ctx=maxd + a.p + a.n + 16,
              n_threads=a.t, n_threads_batch=a.t, n_batch=512,
              n_ubatch=512, logits_all=False, verbose=False,
              type_k=llama_cpp.GGML_TYPE_F16, type_v=llama_cpp.GGML_TYPE_F16)
    if a.fa != "auto":
        kw["flash_attn"] = a.fa == "on"
    llm = llama_cpp.Llama(**kw)
    vocab = llm.n_vocab()
    tok = [(v * 2654435761) % vocab
           for v in range(maxd + a.p + a.n)]
    pos = 0
    for d in a.depth:
        while pos < d:
            c = min(512, d - pos)
            llm.eval(tok[pos:pos + c])
            pos += c
        t = time.perf_counter()
        llm.eval(tok[pos:pos + a.p])
        pp = a.p / (time.perf_counter() - t)
        pos += a.p
        t = time.perf_counter()
        for _ in range(a.n):
            llm.eval(tok[pos:pos + 1])
            pos += 1
        tg = a.n / (time.perf_counter() - t)
        print("depth %d  prefill %.1f tok/s  decode %.1f tok/s" % (d, pp, tg))
        sys.stdout.flush()


if __name__ == "__main__":
    main()

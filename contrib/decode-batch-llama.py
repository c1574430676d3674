#!/usr/bin/env python3
"""decode-batch-llama.py: contrib/decode-batch.c's measurement on the peer,
llama.cpp (through the llama-cpp-python package's C API bindings), so
that continuous batching's ceiling on this machine is seen beside
another engine's in the same run.

As decode-batch: every sequence gets an 8-token prompt once; then for
each N, 64 calls of llama_decode with N decode tokens, one per sequence
at positions 8, 9, ..., logits for every sequence (what a server samples
from), timed around the calls. Prints one line per N:

	N  tokens/s

usage: decode-batch-llama.py [-t THREADS] [--kv f16|f32] model.gguf N ...

--kv is the KV cache's type (f16 is llama.cpp's default; medha's cpu
backend keeps f32).
"""
import argparse
import ctypes
import sys
import time

import llama_cpp as lc

PROMPT = 8
STEPS = 64
GGML_TYPE = {"f32": 0, "f16": 1}


@lc.llama_log_callback
def QUIET(level, text, data):
    pass


def main():
    ap = argparse.ArgumentParser(
        usage=__doc__.split("\n\n")[-2].strip()[len("usage: "):])
    ap.add_argument("-t", type=int, default=2, dest="threads")
    ap.add_argument("--kv", choices=sorted(GGML_TYPE), default="f16")
    ap.add_argument("model")
    ap.add_argument("ns", nargs="+", type=int)
    a = ap.parse_args()
    if any(n < 1 or n > 64 for n in a.ns):
        ap.error("N must be in 1..64")
    maxn = max(a.ns)

    lc.llama_log_set(QUIET, ctypes.c_void_p())
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        sys.exit("decode-batch-llama: cannot load %s" % a.model)
    cp = lc.llama_context_default_params()
    cp.n_ctx = maxn * (PROMPT + STEPS) + 64
    cp.n_batch = cp.n_ubatch = max(512, maxn * PROMPT)
    cp.n_seq_max = maxn
    cp.n_threads = cp.n_threads_batch = a.threads
    cp.type_k = cp.type_v = GGML_TYPE[a.kv]
    ctx = lc.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("decode-batch-llama: cannot make a context")
    mem = lc.llama_get_memory(ctx)
    batch = lc.llama_batch_init(max(maxn, PROMPT), 0, 1)

    def fill(items):
        # items: (token, pos, seq, logits?)
        for i, (tok, pos, seq, out) in enumerate(items):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = out
        batch.n_tokens = len(items)

    def decode():
        rc = lc.llama_decode(ctx, batch)
        if rc != 0:
            sys.exit("decode-batch-llama: llama_decode returned %d" % rc)

    # the same synthetic tokens as decode-batch
    for i in range(maxn):
        fill([(1000 + 97 * i + 13 * j, j, i, j == PROMPT - 1)
              for j in range(PROMPT)])
        decode()
    for n in a.ns:
        for i in range(maxn):  # decode positions from PROMPT on again
            lc.llama_memory_seq_rm(mem, i, PROMPT, -1)
        t0 = time.perf_counter()
        for step in range(STEPS):
            fill([(2000 + 31 * i + 7 * step, PROMPT + step, i, True)
                  for i in range(n)])
            decode()
        print("%d %.1f" % (n, n * STEPS / (time.perf_counter() - t0)),
              flush=True)
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)


if __name__ == "__main__":
    main()

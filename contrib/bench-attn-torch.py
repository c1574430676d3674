#!/usr/bin/env python3
"""bench-attn-torch.py: PyTorch's scaled_dot_product_attention (the flash
backend where it takes the shape) on the shapes of tests/gpu/attn_bench.c,
printing the same table: case, time, achieved TB/s (the K/V bytes read
once) or TFLOP/s (4 n_q n_heads keys head_dim), share of the ceiling.

K/V are contiguous (PyTorch has no paged cache), bf16, random; several
copies where memory allows, rotated between runs so the L2 never holds
the next run's keys. The chunk cases run without a mask (the chunk sits
at the end of the keys, so causality changes a negligible corner; SDPA's
is_causal would align it to the top-left instead). Warm-up, then CUDA
events around each run, the median.

    python3 contrib/bench-attn-torch.py [-g GEMM_TFLOPS] [-q]
"""
import argparse
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"skip: no torch ({e})")
    sys.exit(77)

VARIANTS = 3


def row(name, us, rate, unit, ceil):
    print(f"{name:<34} {us:10.1f} us {rate:8.2f} {unit:<7} "
          f"{100 * rate / ceil:5.0f}%", flush=True)


def timed(fn, reps_budget_ms=300.0):
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    ms = 0.0
    for i in range(3):
        e0.record()
        fn(i)
        e1.record()
        e1.synchronize()
        ms = e0.elapsed_time(e1)
    reps = min(64, max(5, int(reps_budget_ms / ms) if ms > 0 else 64))
    t = []
    for i in range(reps):
        e0.record()
        fn(i)
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1) * 1e3)
    t.sort()
    return t[len(t) // 2]


def copy_rate():
    n = 1 << 31
    a = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    b = torch.empty_like(a)

    def run(i):
        (b if i % 2 == 0 else a).copy_(a if i % 2 == 0 else b)
    us = timed(run)
    tbs = 2.0 * n / (us * 1e-6) / 1e12
    row("copy d2d 2 GiB (ceiling)", us, tbs, "TB/s", tbs)
    del a, b
    torch.cuda.empty_cache()
    return tbs


BACKEND = None


def sdpa(q, k, v):
    global BACKEND
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tries = [("flash", [SDPBackend.FLASH_ATTENTION]),
             ("any", [SDPBackend.FLASH_ATTENTION,
                      SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])]
    if BACKEND is not None:
        tries = [t for t in tries if t[0] == BACKEND]
    err = None
    for name, b in tries:
        try:
            with sdpa_kernel(b):
                o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            if BACKEND is None:
                BACKEND = name
                print(f"# sdpa backend: {name}", flush=True)
            return o
        except RuntimeError as e:
            err = e
    raise err


def case(name, n_seqs, n_q, kv_len, n_heads, nkv, flop, copy_tbs, gemm):
    hd = 128
    per = 2 * n_seqs * nkv * kv_len * hd * 2
    free, _ = torch.cuda.mem_get_info()
    copies = min(VARIANTS, int(free * 0.8 // per))
    if copies < 1:
        print(f"{name:<34} skipped: {per / 1e9:.1f} GB of K/V, "
              f"{free / 1e9:.1f} GB free", flush=True)
        return
    kvs = []
    for _ in range(copies):
        k = torch.empty(n_seqs, nkv, kv_len, hd, dtype=torch.bfloat16,
                        device="cuda").uniform_(-1, 1)
        v = torch.empty_like(k).uniform_(-1, 1)
        kvs.append((k, v))
    q = torch.empty(n_seqs, n_heads, n_q, hd, dtype=torch.bfloat16,
                    device="cuda").uniform_(-1, 1)

    def run(i):
        k, v = kvs[i % copies]
        sdpa(q, k, v)
    try:
        us = timed(run)
    except (RuntimeError, torch.OutOfMemoryError) as e:
        print(f"{name:<34} failed: {str(e).splitlines()[0]}", flush=True)
        return
    finally:
        pass
    byt = 2.0 * n_seqs * kv_len * nkv * hd * 2
    fl = 4.0 * n_seqs * n_q * n_heads * hd * kv_len
    if flop:
        row(name, us, fl / (us * 1e-6) / 1e12, "TFLOP/s", gemm)
        print(f"{'':<34} {'':>10}    floor (cache read once at the copy "
              f"rate) {byt / (copy_tbs * 1e12) * 1e6:.1f} us", flush=True)
    else:
        row(name, us, byt / (us * 1e-6) / 1e12, "TB/s", copy_tbs)
    del kvs, q
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-g", type=float, default=715.0,
                    help="bf16 GEMM ceiling, TFLOP/s (715: the issue's H200)")
    ap.add_argument("-q", action="store_true", help="the small cases only")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("skip: no CUDA device (torch.cuda.is_available() is False)")
        sys.exit(77)
    p = torch.cuda.get_device_properties(0)
    print(f"bench-attn-torch: {p.name}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 1e9:.0f} GB; torch {torch.__version__}; GEMM "
          f"ceiling {a.g:.0f} TFLOP/s (given)")
    print(f"{'case':<34} {'time':>13} {'rate':>16} {'%ceil':>6}")
    ctb = copy_rate()
    ctx = [32768, 131072, 524288, 1048576]
    for n in (1, 32):
        for c in ctx[:1] if a.q else ctx:
            case(f"decode {n} x {c // 1024}K 32/8", n, 1, c, 32, 8, 0, ctb,
                 a.g)
    case("chunk 32 x 512K 4/1", 1, 32, 524288, 4, 1, 1, ctb, a.g)
    case("chunk 32 x 512K 32/8", 1, 32, 524288, 32, 8, 1, ctb, a.g)
    case("chunk 4096 x 512K 4/1", 1, 4096, 524288, 4, 1, 1, ctb, a.g)
    if not a.q:
        case("chunk 4096 x 512K 32/8", 1, 4096, 524288, 32, 8, 1, ctb, a.g)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""gguf_check.py: check medha's GGUF reader and dequantizers (through
contrib/gguf-dump) against the gguf Python package, llama.cpp's own
reader and dequantizer.

    gguf_check.py GGUF_DUMP MODEL.gguf WORKDIR

1. The real model (SmolLM2: Q4_1, Q8_0, F32): the tensor listing (names,
   types, shapes, file offsets, sizes) and the metadata (keys, types,
   values, the elements of the tokenizer arrays) equal GGUFReader's, and
   every tensor dequantizes to the same float32 bits as
   gguf.quants.dequantize.
2. The types SmolLM2 lacks: a file written with gguf's GGUFWriter holds
   real tensors of SmolLM2 quantized by the gguf package to F32, F16,
   BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1; every 16-bit pattern as F16
   and BF16; and blocks of random bytes with random finite fp16 scales
   in Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL
   and IQ4_XS (the package cannot quantize K-quants or IQ4).
   Same checks, bit for bit.
3. medha's quantizers (gguf-dump -q) produce the same bytes as the gguf
   package's for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and BF16 and numpy's float16 cast, on
   real tensors and on random float32 bit patterns (NaN only compared as
   NaN for F16, where numpy keeps a signalling NaN's bits).

Exits 0 when everything matches, 1 otherwise; prints what it compared.
"""
import subprocess
import sys
from collections import Counter

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

DUMP = None
# the types written as random blocks (the package cannot quantize them all)
RANDOM_TYPES = (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q5_1,
                Q.Q2_K, Q.Q3_K, Q.Q5_K, Q.IQ4_NL, Q.IQ4_XS)
failures = []


def fail(msg):
    failures.append(msg)
    print("MISMATCH: " + msg)


def run(*args, stdin=None):
    p = subprocess.run([DUMP, *args], input=stdin, capture_output=True)
    if p.returncode != 0:
        raise SystemExit("gguf-dump %s: %s" % (" ".join(args),
                                               p.stderr.decode().strip()))
    return p.stdout


def esc(b):
    """gguf-dump's escaping: bytes below 0x20, 0x7f and backslash as \\xHH."""
    return b"".join(b"\\x%02x" % c if c < 0x20 or c == 0x7F or c == 0x5C
                    else bytes([c]) for c in b)


PSEUDO = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}


def scalar_text(vt, v):
    if vt == V.FLOAT32:
        return b"%.9g" % float(v)
    if vt == V.FLOAT64:
        return b"%.17g" % float(v)
    return b"%d" % int(v)


def check_metadata(path, r, arrays):
    lines = run("-k", path).split(b"\n")[:-1]
    fields = [f for f in r.fields.values() if f.name not in PSEUDO]
    if len(lines) != len(fields):
        fail("%s: %d metadata entries, gguf has %d" % (path, len(lines),
                                                        len(fields)))
        return
    for line, f in zip(lines, fields):
        key, typ, val = line.split(b"\t", 2)
        vt = f.types[0]
        if key != esc(f.name.encode()) or typ.decode() != vt.name.lower():
            fail("metadata %s: %s %s, gguf %s %s" % (f.name, key, typ,
                                                     f.name, vt.name))
            continue
        if vt == V.STRING:
            want = esc(bytes(f.parts[f.data[0]]))
        elif vt == V.ARRAY:
            et = f.types[1].name.lower() if len(f.types) > 1 else "?"
            want = b"%s[%d]" % (et.encode(), len(f.data))
            if et == "?":
                val = want
        else:
            want = scalar_text(vt, f.parts[f.data[0]][0])
        if val != want:
            fail("metadata %s: %r, gguf %r" % (f.name, val[:80], want[:80]))
    for key in arrays:
        f = r.fields.get(key)
        if f is None:
            continue
        got = run("-a", key, path).split(b"\n")[:-1]
        et = f.types[1]
        if et == V.STRING:
            want = [esc(bytes(f.parts[i])) for i in f.data]
        else:
            vals = [f.parts[i][0] for i in f.data]
            if et in (V.FLOAT32, V.FLOAT64, V.UINT64, V.INT64):
                want = [b"%.9g" % float(np.float32(v)) for v in vals]
            else:
                want = [b"%d" % int(v) for v in vals]
        if got != want:
            bad = next(i for i in range(min(len(got), len(want)) + 1)
                       if i >= len(got) or i >= len(want) or got[i] != want[i])
            fail("array %s: %d elements, gguf %d; first difference at %d"
                 % (key, len(got), len(want), bad))
    return len(fields)


def check_tensors(path, r):
    """Listing and dequantization of every tensor; returns types seen."""
    lines = run(path).split(b"\n")[:-1]
    if len(lines) != len(r.tensors):
        fail("%s: %d tensors, gguf has %d" % (path, len(lines),
                                               len(r.tensors)))
        return Counter()
    seen = Counter()
    for line, t in zip(lines, r.tensors):
        name, typ, dims, off, nbytes = line.decode().split("\t")
        want = (t.name, t.tensor_type.name.lower(),
                ",".join(str(int(d)) for d in t.shape),
                int(t.data_offset), int(t.n_bytes))
        got = (name, typ.lower(), dims, int(off), int(nbytes))
        if got != want:
            fail("tensor listing: %s, gguf %s" % (got, want))
            continue
        c = np.frombuffer(run("-t", t.name, path), dtype="<f4")
        p = np.ascontiguousarray(
            gguf.quants.dequantize(t.data, t.tensor_type),
            dtype=np.float32).reshape(-1)
        if c.shape != p.shape:
            fail("%s: %d values, gguf %d" % (t.name, c.size, p.size))
        elif not np.array_equal(c.view(np.uint32), p.view(np.uint32)):
            bad = np.flatnonzero(c.view(np.uint32) != p.view(np.uint32))
            fail("%s (%s): %d of %d values differ, first at %d: %r vs %r"
                 % (t.name, typ, bad.size, c.size, bad[0], c[bad[0]],
                    p[bad[0]]))
        else:
            seen[t.tensor_type.name] += 1
    return seen


def finite_halves(rng, n):
    """n random fp16 bit patterns that are not inf or NaN."""
    h = rng.integers(0, 65536, n, dtype=np.uint32).astype(np.uint16)
    bad = (h & 0x7C00) == 0x7C00
    h[bad] &= 0xBFFF  # clear the top exponent bit: finite
    return h


def random_blocks(rng, qtype, rows, ne0):
    """rows x ne0 elements of random bytes with finite fp16 scale fields."""
    bsize, tsize = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * ne0 // bsize
    b = rng.integers(0, 256, (nb, tsize), dtype=np.uint32).astype(np.uint8)
    # where each block's fp16 fields are (byte offsets)
    at = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q4_K: [0, 2],
          Q.Q6_K: [208], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q2_K: [80, 82],
          Q.Q3_K: [108], Q.Q5_K: [0, 2], Q.IQ4_NL: [0],
          Q.IQ4_XS: [0]}[qtype]
    for o in at:
        b[:, o:o + 2] = finite_halves(rng, nb).view(np.uint8).reshape(nb, 2)
    return b.reshape(rows, ne0 // bsize * tsize)


def make_synthetic(r, out):
    """The file of part 2, from the real model's reader r."""
    src = {t.name: t for t in r.tensors}
    w = gguf.GGUFWriter(out, arch="llama")
    w.add_string("general.name", "medha gguf_check")
    w.add_uint32("test.u32", 7)
    w.add_float32("test.f32", -0.1)
    w.add_array("test.strs", ["a", "b\nc", "\\", ""])
    n = 0
    picks = [("blk.0.attn_q.weight", None), ("blk.3.ffn_down.weight", None),
             ("token_embd.weight", 1024), ("blk.0.attn_norm.weight", None)]
    for name, rows in picks:
        x = gguf.quants.dequantize(src[name].data, src[name].tensor_type)
        x = np.ascontiguousarray(x[:rows] if rows else x, dtype=np.float32)
        base = name.replace(".weight", "")
        w.add_tensor(base + ".f32", x)
        w.add_tensor(base + ".f16", x.astype(np.float16))
        for qt in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
            w.add_tensor(base + "." + qt.name.lower(),
                         gguf.quants.quantize(x, qt), raw_dtype=qt)
        n += 8
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    w.add_tensor("special.f16", every.view(np.float16).reshape(256, 256))
    w.add_tensor("special.bf16", every.view(np.uint8).reshape(256, 512),
                 raw_dtype=Q.BF16)
    rng = np.random.default_rng(20250101)
    for qt in RANDOM_TYPES:
        w.add_tensor("random." + qt.name.lower(),
                     random_blocks(rng, qt, 256, 1536), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_quantizers(r):
    """Part 3, on tensors of the real model's reader r."""
    src = {t.name: t for t in r.tensors}
    xs = []
    for name in ("blk.1.attn_k.weight", "blk.2.ffn_up.weight",
                 "output_norm.weight"):
        t = src[name]
        xs.append(np.ascontiguousarray(
            gguf.quants.dequantize(t.data, t.tensor_type),
            dtype=np.float32).reshape(-1))
    rng = np.random.default_rng(7)
    xs.append(rng.standard_normal(1 << 16).astype(np.float32) *
              np.float32(0.02))
    bitsx = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64)
    special = bitsx.astype(np.uint32).view(np.float32)
    n = 0
    for i, x in enumerate(xs + [special]):
        is_special = i == len(xs)
        cases = [("bf16", Q.BF16), ("f16", None)]
        if not is_special:  # the block types: finite input only
            cases += [("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("q4_1", Q.Q4_1),
                      ("q5_0", Q.Q5_0), ("q5_1", Q.Q5_1)]
        for tname, qt in cases:
            got = run("-q", tname, stdin=x.astype("<f4").tobytes())
            if qt is None:
                with np.errstate(over="ignore"):
                    want = x.astype(np.float16).tobytes()
            else:
                want = gguf.quants.quantize(x.reshape(1, -1), qt).tobytes()
            if got == want:
                n += 1
                continue
            if qt is None:  # compare NaN as NaN
                g = np.frombuffer(got, np.float16)
                p = np.frombuffer(want, np.float16)
                same = (g.view(np.uint16) == p.view(np.uint16)) | (
                    np.isnan(g) & np.isnan(p))
                if same.all():
                    n += 1
                    continue
            fail("quantize %s of input %d: bytes differ" % (tname, i))
    return n


def main():
    global DUMP
    if len(sys.argv) != 4:
        raise SystemExit("usage: gguf_check.py GGUF_DUMP MODEL WORKDIR")
    DUMP, model, work = sys.argv[1:]
    r = gguf.GGUFReader(model)
    nkv = check_metadata(model, r, ["tokenizer.ggml.tokens",
                                    "tokenizer.ggml.merges",
                                    "tokenizer.ggml.token_type",
                                    "tokenizer.ggml.scores"])
    seen = check_tensors(model, r)
    print("real model: %s metadata entries, %d tensors bit-exact by type: %s"
          % (nkv, sum(seen.values()), dict(seen)))
    synth = work + "/synthetic.gguf"
    make_synthetic(r, synth)  # one reader of the model: 15 s each
    rs = gguf.GGUFReader(synth)
    check_metadata(synth, rs, ["test.strs"])
    seen = check_tensors(synth, rs)
    print("synthetic file: %d tensors bit-exact by type: %s"
          % (sum(seen.values()), dict(seen)))
    nq = check_quantizers(r)
    print("quantizers: %d inputs x types byte-exact" % nq)
    if failures:
        print("%d mismatches" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

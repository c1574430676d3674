"""The sampler of libcore/model/sample.c, again in Python (numpy), from
its specification in sample.h: penalties (repetition, then frequency and
presence), top-k, top-p, min-p, temperature, and the draw from the
seeded xoshiro256** generator. Given the logits medha-worker drew each
token from (--step-logits), the prompt's ids and the sampler's
parameters, it says which token it would draw at each step: the
worker's must be the same.

    python sampler.py STEPS.f32 VOCAB PROMPT_IDS OUT_IDS temp top_k top_p
        min_p presence frequency repetition seed
(ids comma-separated). Prints one line; exits 1 on a difference.
"""
import math
import sys

import numpy as np

M64 = (1 << 64) - 1


def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng:
    def __init__(self, seed):
        self.s, x = [], seed
        for _ in range(4):
            x, z = splitmix(x)
            self.s.append(z)

    def next(self):
        t = self.s
        r = (rotl((t[1] * 5) & M64, 7) * 9) & M64
        u = (t[1] << 17) & M64
        t[2] ^= t[0]
        t[3] ^= t[1]
        t[1] ^= t[2]
        t[0] ^= t[3]
        t[2] ^= u
        t[3] = rotl(t[3], 45)
        return r

    def uniform(self):
        return np.float32(np.float32(self.next() >> 40) * np.float32(1.0 / 16777216.0))


def penalise(l, seen, count, pres, freq, rep):
    l = l.copy()
    f32 = np.float32
    if rep > 0 and rep != 1:
        r = f32(rep)
        s = seen.astype(bool)
        pos = s & (l > 0)
        neg = s & ~(l > 0)
        l[pos] = l[pos] / r
        l[neg] = l[neg] * r
    c = count > 0
    l[c] = l[c] - (f32(freq) * count[c].astype(np.float32) + f32(pres))
    return l


def candidates(l, temp, top_k, top_p, min_p):
    """ids and float32 probabilities, as medha_sample_candidates."""
    n = len(l)
    order = np.lexsort((np.arange(n), -l.astype(np.float64)))  # logit desc, id asc
    k = top_k if 0 < top_k < n else n
    top = order[:k]
    m = k
    if 0 < top_p < 1:
        mx = float(l[top[0]])
        z = sum(math.exp(float(l[i]) - mx) for i in top)
        cum = 0.0
        for j, i in enumerate(top):
            cum += math.exp(float(l[i]) - mx) / z
            if cum >= float(np.float32(top_p)):
                m = j + 1
                break
    if min_p > 0:
        mp = float(np.float32(min_p))
        while m > 1 and math.exp(float(l[top[m - 1]]) - float(l[top[0]])) < mp:
            m -= 1
    ids = top[:m]
    mx = float(l[ids[0]])
    t = float(np.float32(temp))
    e = [math.exp((float(l[i]) - mx) / t) for i in ids]
    pf = [np.float32(x) for x in e]
    z = sum(e)
    probs = [np.float32(float(p) / z) for p in pf]
    return ids, probs


def main():
    steps, vocab = sys.argv[1], int(sys.argv[2])
    prompt = [int(x) for x in sys.argv[3].split(",") if x]
    out = [int(x) for x in sys.argv[4].split(",") if x]
    temp, top_k, top_p, min_p, pres, freq, rep = (
        float(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]),
        float(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10]),
        float(sys.argv[11]))
    rng = Rng(int(sys.argv[12]))
    rows = np.fromfile(steps, dtype="<f4").reshape(-1, vocab)
    assert len(rows) == len(out), (len(rows), len(out))
    pen = pres != 0 or freq != 0 or (rep > 0 and rep != 1)
    seen = np.zeros(vocab, np.uint8)
    count = np.zeros(vocab, np.int32)
    seen[prompt] = 1
    changed = 0
    for i, row in enumerate(rows):
        l = penalise(row, seen, count, pres, freq, rep) if pen else row
        if temp <= 0:
            got = int(np.argmax(l))  # the first of the largest
        else:
            ids, probs = candidates(l, temp, top_k, top_p, min_p)
            r, cum, got = rng.uniform(), np.float32(0), int(ids[-1])
            for j, p in zip(ids, probs):
                cum = np.float32(cum + p)
                if r < cum:
                    got = int(j)
                    break
        changed += got != int(np.argmax(row))
        if got != out[i]:
            print("step %d: the reference draws %d, the worker %d" % (i, got, out[i]))
            sys.exit(1)
        count[got] += 1
        seen[got] = 1
    print("%d tokens as the reference draws them (%d not the raw argmax)" % (len(out), changed))


main()

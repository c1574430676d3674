"""arch_model.py: random models of the families medha runs (llama with a
sliding window, qwen2, qwen3, gemma2, gemma3, phi3, and the mixtures of
experts: llama with experts as Mixtral, qwen2moe, qwen3moe, llama4),
written with the
`gguf` package (llama.cpp's own writer), and a float64 forward pass of
them written for the test from the families' published definitions
(Hugging Face transformers' modeling files, llama.cpp's graphs), not from
medha's code.

    arch_model.py cases                          the case names, one a line
    arch_model.py moe-cases                      those with experts
    arch_model.py cuda-moe-cases                 those of the cuda backend's
        (write also takes the names of TOPO_CASES, topo-arch.sh's shapes,
        and of CUDA_CASES, the cuda backend's: cuda-mock.sh, gpu-check.sh)
    arch_model.py write TOKENIZER.gguf DIR CASE[:FLAW]...
        random models of each CASE with TOKENIZER's vocabulary, as
        DIR/CASE.gguf; with FLAW, DIR/FLAW.gguf, a model medha must
        refuse: scaling (type "dynamic"), arch (named starcoder2), bias
        (layer 1 without attn_k.bias), window (larger than the context),
        extra (a tensor it does not read, attn_output.bias), topk (no
        expert_used_count), gating (an expert_gating_func key)
    arch_model.py forward TOKENIZER.gguf DIR IDS CASE...
        the same models (the same bytes), and DIR/CASE.f64, the float64
        logits after the ids in the file IDS (the last position), as
        little-endian doubles, computed from the values written

Shapes differ per case: GQA ratios of 1, 2 and 4, head sizes other than
dim / heads, windows shorter than the test's prompts, YaRN and LongRoPE
with original contexts shorter than them. Matrices are Q8_0 (the
embedding F16, norms and biases F32), so that the same file is the
llama.cpp comparison's too.
"""
import sys

import numpy as np
import gguf

Q8 = gguf.GGMLQuantizationType.Q8_0

# name: (arch, layers, dim, heads, kv heads, head dim, ffn, extra keys)
CASES = {
    "llama": ("llama", 3, 128, 4, 2, 32, 256, {}),
    "llama-swa": ("llama", 3, 128, 4, 2, 32, 256, {"window": 24}),
    "qwen2": ("qwen2", 3, 128, 4, 1, 32, 256, {}),
    "qwen2-yarn": ("qwen2", 2, 128, 8, 2, 16, 256,
                   {"yarn": (4.0, 48), "base": 1e6}),
    "qwen3": ("qwen3", 3, 128, 8, 2, 48, 256, {}),
    "qwen3-yarn": ("qwen3", 2, 96, 2, 2, 64, 192,
                   {"yarn": (2.5, 40)}),
    "gemma2": ("gemma2", 4, 128, 4, 2, 64, 256,
               {"window": 20, "attn_cap": 3.0, "final_cap": 4.0}),
    "gemma3": ("gemma3", 7, 128, 4, 1, 32, 256,
               {"window": 24, "linear": 8.0, "base": 1e6}),
    "phi3": ("phi3", 3, 128, 4, 4, 32, 256,
             {"longrope": 48, "attn_factor": 1.19}),
}
# the mixtures of experts ("experts": count, top-k, rows of each;
# "shexp": a shared expert's rows; "moe_step": llama4's interleave),
# in `cases` too: Mixtral's normalised softmax top-2 of 8, qwen2moe's
# unnormalised top-2 of 6 with a gated shared expert, qwen3moe's
# normalised top-4 of 16 with Q/K norms, llama4's sigmoid top-1 of 4
# on the input, a shared expert, routed and dense layers in turn, NoPE
# on its fourth layer and L2 Q/K norms on the others
MOE_CASES = {
    "mixtral": ("llama", 3, 128, 4, 2, 32, 96,
                {"experts": (8, 2, 96)}),
    "qwen2moe": ("qwen2moe", 3, 128, 4, 2, 32, 256,
                 {"experts": (6, 2, 64), "shexp": 160}),
    "qwen3moe": ("qwen3moe", 3, 128, 8, 2, 48, 256,
                 {"experts": (16, 4, 64)}),
    "llama4": ("llama4", 4, 128, 4, 2, 32, 256,
               {"experts": (4, 1, 128), "moe_step": 2}),
}
CASES.update(MOE_CASES)
# a mixture of a few hundred MB for speed (contrib/bench-moe.sh, made Q4_K
# by contrib/gguf-convert), not in `cases`: 8 layers of 32 experts of
# 512 rows, top-4, over a width of 1024
BENCH_CASES = {
    "qwen3moe-bench": ("qwen3moe", 8, 1024, 16, 4, 64, 3072,
                       {"experts": (32, 4, 512), "ctx": 16384}),
}
# shapes for the topology test (topo-arch.sh), not in `cases`: TP needs
# two kv heads at least; qwen2-tp's three split 2 + 1 over two ranks.
# "embd": the embedding's scale; the gemma ones are small, so that the
# layers, not the tied embedding of the input token, choose the next
# token (at 1 / sqrt(D) greedy decoding repeats one token)
TOPO_CASES = {
    "qwen2-tp": ("qwen2", 3, 128, 6, 3, 32, 256, {}),
    "gemma3-tp": ("gemma3", 7, 128, 4, 2, 32, 256,
                  {"window": 24, "linear": 8.0, "base": 1e6, "embd": 0.005}),
    "gemma2-tp": ("gemma2", 4, 128, 4, 2, 64, 256,
                  {"window": 20, "attn_cap": 3.0, "final_cap": 4.0,
                   "embd": 0.005}),
}

# shapes for the cuda backend's checks (tests/sh/cuda-mock.sh,
# contrib/gpu-check.sh), not in `cases`: its attention kernels have head
# sizes 64, 128 and 256 only, and TP wants two kv heads. Each family's
# operators: biases with YaRN (qwen2), Q/K norms on a head size twice
# dim / heads (qwen3), soft-caps and alternate windows (gemma2), five
# window layers in six with their own base and linear scaling on the
# others (gemma3), fused products and LongRoPE (phi3), a window on every
# layer (llama-swa), and gemma3's at Gemma's head size of 256 (the
# attention's simple kernel on every path, the per-head norms and RoPE
# at 256); windows and original contexts shorter than the
# tests' prompts of 100; small embeddings (as the topology shapes', so
# that the layers, not the input token, make the logits: a fault in a
# layer's operator or its TP share shows); a vocabulary of 2048 (files
# of under two megabytes, which travel to a lent GPU:
# contrib/gpu-pack.sh).
CUDA_CASES = {
    "qwen2-cu": ("qwen2", 2, 128, 4, 2, 64, 256,
                 {"yarn": (4.0, 48), "base": 1e6, "embd": 0.005,
                  "vocab": 2048}),
    "qwen3-cu": ("qwen3", 2, 128, 4, 2, 64, 256,
                 {"embd": 0.005, "vocab": 2048}),
    "gemma2-cu": ("gemma2", 4, 128, 2, 2, 64, 256,
                  {"window": 20, "attn_cap": 3.0, "final_cap": 4.0,
                   "embd": 0.005, "vocab": 2048}),
    "gemma3-cu": ("gemma3", 7, 128, 2, 2, 64, 256,
                  {"window": 24, "linear": 8.0, "base": 1e6,
                   "embd": 0.005, "vocab": 2048}),
    "phi3-cu": ("phi3", 2, 128, 2, 2, 64, 256,
                {"longrope": 48, "attn_factor": 1.19, "embd": 0.005,
                 "vocab": 2048}),
    "llama-swa-cu": ("llama", 2, 128, 4, 2, 64, 256,
                     {"window": 24, "embd": 0.005, "vocab": 2048}),
    "gemma3-256-cu": ("gemma3", 7, 64, 2, 2, 256, 128,
                      {"window": 24, "linear": 8.0, "base": 1e6,
                       "embd": 0.005, "vocab": 2048}),
}
# the mixtures of experts at the cuda backend's head size (its routed FFN,
# kernels/moe.cu: cuda-mock-arch.sh, gpu-check.sh's moe step), as
# MOE_CASES: Mixtral's normalised softmax top-2 of 8, qwen2moe's
# unnormalised top-2 of 6 with a gated shared expert and its routed
# layers in turn with dense ones (moe_step), qwen3moe's normalised top-4
# of 16 with Q/K norms, llama4's sigmoid top-1 of 4 on the input with a
# shared expert, routed and dense layers in turn, NoPE and its
# temperature on the fourth layer, L2 Q/K norms on the others (its
# chunks of 8192 longer than the tests' prompts: kernels_test's)
CUDA_MOE_CASES = {
    "mixtral-cu": ("llama", 2, 128, 4, 2, 64, 96,
                   {"experts": (8, 2, 96), "embd": 0.005, "vocab": 2048}),
    "qwen2moe-cu": ("qwen2moe", 3, 128, 4, 2, 64, 256,
                    {"experts": (6, 2, 64), "shexp": 160, "moe_step": 2,
                     "embd": 0.005, "vocab": 2048}),
    "qwen3moe-cu": ("qwen3moe", 2, 128, 4, 2, 64, 256,
                    {"experts": (16, 4, 64), "embd": 0.005,
                     "vocab": 2048}),
    "llama4-cu": ("llama4", 4, 128, 4, 2, 64, 256,
                  {"experts": (4, 1, 128), "moe_step": 2, "embd": 0.005,
                   "vocab": 2048}),
}
CUDA_CASES.update(CUDA_MOE_CASES)


_tok = {}


def tokenizer(src):
    """The tokenizer keys of src (read once, by header(): gguf's reader
    takes some 15 s over a vocabulary's arrays)."""
    if src not in _tok:
        meta = header(src, tokenizer=True)[1]
        _tok[src] = {k: meta["tokenizer.ggml." + k] for k in (
            "tokens", "model", "pre", "token_type", "merges",
            "bos_token_id", "eos_token_id")}
    return _tok[src]


class Writer(gguf.GGUFWriter):
    """gguf's writer, but arrays of strings or of integers packed in one
    step, not item by item (a tokenizer's arrays took a second a model);
    the bytes are those gguf's own packing gives."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        import struct
        V = gguf.GGUFValueType
        if (vtype != V.ARRAY or sub_type is not None or
                self.endianess != gguf.GGUFEndian.LITTLE or
                not isinstance(val, list) or not val or
                type(val[0]) not in (str, int)):
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        et = V.get_type(val[0])
        if not all(type(v) is type(val[0]) for v in val):
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        head = struct.pack("<IQ", et, len(val))
        if add_vtype:
            head = struct.pack("<I", vtype) + head
        if et == V.STRING:
            enc = [v.encode("utf-8") for v in val]
            return head + b"".join(struct.pack("<Q", len(e)) + e
                                   for e in enc)
        return head + struct.pack("<%d%s" % (len(val),
                                             self._simple_value_packing[et]),
                                  *val)


def write(case, src, out, flaw=None, seed=7):
    """Write the model; return its metadata (key: value) and tensors
    (name: float64 array, the file's values), for forward()."""
    arch, L, D, H, KV, HD, F, x = {**CASES, **TOPO_CASES, **CUDA_CASES,
                                **BENCH_CASES}[case]
    x = dict(x)
    if flaw == "window":
        x["window"] = 8192
    rng = np.random.default_rng(seed + sum(map(ord, case)))
    tk = tokenizer(src)
    # "vocab": the first N tokens only, no merges (a model that travels:
    # the cuda cases are read by backend_cuda_test, not tokenized)
    cut = x.get("vocab")
    tokens = tk["tokens"][:cut] if cut else tk["tokens"]
    V = len(tokens)
    w = Writer(out, "starcoder2" if flaw == "arch" else arch)
    w.add_block_count(L)
    w.add_context_length(x.get("ctx", 4096))
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(x.get("base", 10000.0))
    w.add_layer_norm_rms_eps(1e-6)
    if "window" in x:
        w.add_sliding_window(x["window"])
    if "experts" in x:
        w.add_expert_count(x["experts"][0])
        if flaw != "topk":
            w.add_expert_used_count(x["experts"][1])
        if flaw == "gating":
            w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_feed_forward_length(x["experts"][2])
    if "shexp" in x:
        w.add_expert_shared_feed_forward_length(x["shexp"])
    if "moe_step" in x:
        w.add_interleave_moe_layer_step(x["moe_step"])
    if "attn_cap" in x:
        w.add_attn_logit_softcapping(x["attn_cap"])
        w.add_final_logit_softcapping(x["final_cap"])
    if "yarn" in x:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(x["yarn"][0])
        w.add_rope_scaling_orig_ctx_len(x["yarn"][1])
    if flaw == "scaling":
        w.add_string(arch + ".rope.scaling.type", "dynamic")
        w.add_rope_scaling_factor(2.0)
    if "linear" in x:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(x["linear"])
    if "longrope" in x:
        w.add_rope_scaling_orig_ctx_len(x["longrope"])
        w.add_rope_scaling_attn_factors(x["attn_factor"])
    w.add_tokenizer_model(tk["model"])
    w.add_tokenizer_pre(tk["pre"])
    w.add_token_list(tokens)
    w.add_token_types(tk["token_type"][:cut] if cut else tk["token_type"])
    if not cut:
        w.add_token_merges(tk["merges"])
    w.add_bos_token_id(int(tk["bos_token_id"]))
    w.add_eos_token_id(int(tk["eos_token_id"]))
    w.add_add_bos_token(False)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def vec(n, lo, hi):
        return rng.uniform(lo, hi, n).astype(np.float32)

    def q8(name, a):
        w.add_tensor(name, gguf.quants.quantize(a, Q8), raw_dtype=Q8)

    gemma = arch.startswith("gemma")
    # gemma's embedding is scaled by sqrt(D) at the input: keep it small
    w.add_tensor("token_embd.weight",
                 mat(V, D, x.get("embd", 1 / np.sqrt(D) if gemma else 1.0))
                 .astype(np.float16))
    w.add_tensor("output_norm.weight", vec(D, 0.5, 1.5))
    if not gemma:
        q8("output.weight", mat(V, D, 0.5 / np.sqrt(D)))
    if "longrope" in x:
        w.add_tensor("rope_factors_long.weight", vec(HD // 2, 1.0, 8.0))
        w.add_tensor("rope_factors_short.weight", vec(HD // 2, 1.0, 1.5))
    s = 1 / np.sqrt(D)
    for i in range(L):
        p = "blk.%d." % i
        wq, wk, wv = mat(H * HD, D, s), mat(KV * HD, D, s), mat(KV * HD, D, s)
        if arch == "phi3":
            q8(p + "attn_qkv.weight", np.concatenate([wq, wk, wv]))
        else:
            q8(p + "attn_q.weight", wq)
            q8(p + "attn_k.weight", wk)
            q8(p + "attn_v.weight", wv)
        q8(p + "attn_output.weight", mat(D, H * HD, 0.5 / np.sqrt(H * HD)))
        gate, up = mat(F, D, s), mat(F, D, s)
        step = x.get("moe_step", 1)
        if "experts" in x and (i + 1) % step == 0:
            E, _, EF = x["experts"]
            w.add_tensor(p + "ffn_gate_inp.weight", mat(E, D, 2 * s))
            q8(p + "ffn_gate_exps.weight",
               np.stack([mat(EF, D, s) for _ in range(E)]))
            q8(p + "ffn_up_exps.weight",
               np.stack([mat(EF, D, s) for _ in range(E)]))
            q8(p + "ffn_down_exps.weight",
               np.stack([mat(D, EF, 0.5 / np.sqrt(EF)) for _ in range(E)]))
            SF = x.get("shexp", EF if arch == "llama4" else 0)
            if SF:
                q8(p + "ffn_gate_shexp.weight", mat(SF, D, s))
                q8(p + "ffn_up_shexp.weight", mat(SF, D, s))
                q8(p + "ffn_down_shexp.weight", mat(D, SF, 0.5 / np.sqrt(SF)))
            if arch == "qwen2moe":
                w.add_tensor(p + "ffn_gate_inp_shexp.weight", vec(D, -0.2, 0.2))
        elif arch == "phi3":
            q8(p + "ffn_up.weight", np.concatenate([gate, up]))
        else:
            q8(p + "ffn_gate.weight", gate)
            q8(p + "ffn_up.weight", up)
        if p + "ffn_gate_inp.weight" not in w.tensors[0]:
            q8(p + "ffn_down.weight", mat(D, F, 0.5 / np.sqrt(F)))
        if flaw == "extra":
            w.add_tensor(p + "attn_output.bias", vec(D, -0.5, 0.5))
        w.add_tensor(p + "attn_norm.weight", vec(D, 0.5, 1.5))
        w.add_tensor(p + "ffn_norm.weight", vec(D, 0.5, 1.5))
        if arch in ("qwen2", "qwen2moe"):
            w.add_tensor(p + "attn_q.bias", vec(H * HD, -0.5, 0.5))
            if not (flaw == "bias" and i == 1):
                w.add_tensor(p + "attn_k.bias", vec(KV * HD, -0.5, 0.5))
            w.add_tensor(p + "attn_v.bias", vec(KV * HD, -0.5, 0.5))
        if arch in ("qwen3", "gemma3", "qwen3moe"):
            w.add_tensor(p + "attn_q_norm.weight", vec(HD, 0.5, 1.5))
            w.add_tensor(p + "attn_k_norm.weight", vec(HD, 0.5, 1.5))
        if gemma:
            w.add_tensor(p + "post_attention_norm.weight", vec(D, 0.5, 1.5))
            w.add_tensor(p + "post_ffw_norm.weight", vec(D, 0.5, 1.5))
    meta = {k: v.value for k, v in w.kv_data[0].items()}
    tens = {n: np.asarray(gguf.quants.dequantize(t.tensor, t.dtype),
                          dtype=np.float64)
            for n, t in w.tensors[0].items()}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return meta, tens


# ------------------------------------------------------------ float64 pass

def forward(meta, T, ids):
    """float64 logits of the last of ids, for the model write() gave."""
    arch = meta["general.architecture"]

    def key(k, default=None):
        return meta.get(arch + "." + k, default)

    def ten(name):
        return T[name].squeeze() if name in T else None

    L = int(key("block_count"))
    D = int(key("embedding_length"))
    H = int(key("attention.head_count"))
    KV = int(key("attention.head_count_kv", H))
    HD = int(key("attention.key_length", D // H))
    NR = int(key("rope.dimension_count", HD))
    eps = float(key("attention.layer_norm_rms_epsilon"))
    base = float(key("rope.freq_base", 10000.0))
    ctx = int(key("context_length"))
    gemma = arch.startswith("gemma")
    window = int(key("attention.sliding_window", 0))
    if arch == "gemma2" and window == 0:
        window = 4096
    pattern = {"gemma2": 2, "gemma3": 6}.get(arch, 1)
    attn_cap = float(key("attn_logit_softcapping",
                         50.0 if arch == "gemma2" else 0.0))
    final_cap = float(key("final_logit_softcapping",
                          30.0 if arch == "gemma2" else 0.0))
    scaling = key("rope.scaling.type", "none")
    factor = float(key("rope.scaling.factor", 1.0))
    orig = int(key("rope.scaling.original_context_length", ctx))
    attn_factor = float(key("rope.scaling.attn_factor", 1.0))
    neox = arch not in ("llama", "llama4")
    # the experts (llama.cpp's llm_build_moe_ffn)
    n_exp = int(key("expert_count", 0))
    k_used = int(key("expert_used_count", 0))
    l4 = arch == "llama4"
    chunk = 8192 if l4 else 0
    n = len(ids)
    pos = np.arange(n, dtype=np.float64)

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope_angles(kind):
        """(n, NR/2) angles and the cos/sin magnitude."""
        i = np.arange(NR // 2, dtype=np.float64)
        inv = 1.0 / (base ** (2 * i / NR))
        if kind == "local":  # gemma3's window layers: base 10000
            return np.outer(pos, 1.0 / (10000.0 ** (2 * i / NR))), 1.0
        ms = attn_factor
        if scaling == "linear":
            inv = inv / factor
        elif scaling == "yarn":
            # YaRN (the paper; HF's _compute_yarn_parameters): dims past
            # the ramp interpolated, those before it extrapolated
            def corr(rot):
                return NR * np.log(orig / (rot * 2 * np.pi)) / (2 * np.log(base))
            lo = max(0.0, np.floor(corr(32.0)))
            hi = min(NR - 1.0, np.ceil(corr(1.0)))
            ramp = 1 - np.clip((i - lo) / max(0.001, hi - lo), 0, 1)
            inv = inv / factor * (1 - ramp) + inv * ramp
            ms = ms * (1 + 0.1 * np.log(factor))
        if "rope_factors_long.weight" in T:  # LongRoPE (phi3)
            f = ten("rope_factors_long.weight" if ctx > orig
                    else "rope_factors_short.weight")
            inv = inv / f
        return np.outer(pos, inv), ms

    def rope(x, ang, ms):  # x (n, heads, HD)
        c = (np.cos(ang) * ms)[:, None, :]
        s = (np.sin(ang) * ms)[:, None, :]
        x = x.copy()
        if neox:
            a, b = x[..., :NR // 2].copy(), x[..., NR // 2:NR].copy()
            x[..., :NR // 2] = a * c - b * s
            x[..., NR // 2:NR] = a * s + b * c
        else:
            a, b = x[..., 0:NR:2].copy(), x[..., 1:NR:2].copy()
            x[..., 0:NR:2] = a * c - b * s
            x[..., 1:NR:2] = a * s + b * c
        return x

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                      (x + 0.044715 * x ** 3)))

    def silu(x):
        return x / (1 + np.exp(-x))

    def sigm(x):
        return 1 / (1 + np.exp(-x))

    def glu(h, gate, up, down):
        return (silu(h @ gate.T) * (h @ up.T)) @ down.T

    def moe(h, p):
        """the routed FFN of h (n, D) at the layer of prefix p"""
        lg = h @ ten(p + "ffn_gate_inp.weight").T  # (n, E)
        if l4:  # sigmoid, chosen by logit, applied to the input
            pr, score = sigm(lg), lg
        else:
            pr = np.exp(lg - lg.max(axis=1, keepdims=True))
            pr /= pr.sum(axis=1, keepdims=True)
            score = pr
        ge, ue = T[p + "ffn_gate_exps.weight"], T[p + "ffn_up_exps.weight"]
        de = T[p + "ffn_down_exps.weight"]
        out = np.zeros_like(h)
        for t in range(len(h)):
            sel = np.argsort(-score[t], kind="stable")[:k_used]
            wt = pr[t, sel]
            if arch in ("llama", "qwen3moe"):  # normalised
                wt = wt / wt.sum()
            for e, we in zip(sel, wt):
                if l4:
                    out[t] += glu(h[t] * we, ge[e], ue[e], de[e])
                else:
                    out[t] += we * glu(h[t], ge[e], ue[e], de[e])
        if p + "ffn_gate_shexp.weight" in T:
            sh = glu(h, ten(p + "ffn_gate_shexp.weight"),
                     ten(p + "ffn_up_shexp.weight"),
                     ten(p + "ffn_down_shexp.weight"))
            if p + "ffn_gate_inp_shexp.weight" in T:
                sh = sh * sigm(h @ ten(p + "ffn_gate_inp_shexp.weight"))[:, None]
            out += sh
        return out

    emb = ten("token_embd.weight")
    x = emb[ids].copy()
    if gemma:
        x = x * np.sqrt(D)
    if gemma and L == (46 if arch == "gemma2" else 62):
        scale = 1 / np.sqrt(D / H)
    else:
        scale = 1 / np.sqrt(HD)
    for li in range(L):
        p = "blk.%d." % li
        is_win = window > 0 and (pattern == 1 or li % pattern < pattern - 1)
        h = rms(x, ten(p + "attn_norm.weight"))
        if p + "attn_qkv.weight" in T:
            qkv = h @ ten(p + "attn_qkv.weight").T
            q, k, v = np.split(qkv, [H * HD, H * HD + KV * HD], axis=1)
        else:
            q = h @ ten(p + "attn_q.weight").T
            k = h @ ten(p + "attn_k.weight").T
            v = h @ ten(p + "attn_v.weight").T
        if p + "attn_q.bias" in T:
            q = q + ten(p + "attn_q.bias")
            k = k + ten(p + "attn_k.bias")
            v = v + ten(p + "attn_v.bias")
        q = q.reshape(n, H, HD)
        k = k.reshape(n, KV, HD)
        v = v.reshape(n, KV, HD)
        if p + "attn_q_norm.weight" in T:
            q = rms(q, ten(p + "attn_q_norm.weight"))
            k = rms(k, ten(p + "attn_k_norm.weight"))
        local = arch == "gemma3" and is_win
        ang, ms = rope_angles("local" if local else "global")
        nope = l4 and (li + 1) % 4 == 0
        if nope:  # llama4: no RoPE; the attention temperature
            q = q * (np.log(np.floor((pos + 1) / 8192) + 1) * 0.1
                     + 1)[:, None, None]
        else:
            q, k = rope(q, ang, ms), rope(k, ang, ms)
        if l4 and not nope and n_exp != 128:  # L2 norm, no weights
            q, k = rms(q, 1.0), rms(k, 1.0)
        g = H // KV
        qi = np.arange(n)[:, None]
        kj = np.arange(n)[None, :]
        mask = kj <= qi
        if is_win:
            mask &= qi - kj < window
        if chunk and li % 4 < 3:  # llama4's chunked layers
            mask &= kj // chunk == qi // chunk
        att = np.empty((n, H, HD))
        for hh in range(H):
            s = q[:, hh, :] @ k[:, hh // g, :].T * scale
            if attn_cap > 0:
                s = attn_cap * np.tanh(s / attn_cap)
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            att[:, hh, :] = s @ v[:, hh // g, :]
        a = att.reshape(n, H * HD) @ ten(p + "attn_output.weight").T
        if gemma:
            a = rms(a, ten(p + "post_attention_norm.weight"))
        x = x + a
        h = rms(x, ten(p + "ffn_norm.weight"))
        if p + "ffn_gate_inp.weight" in T:
            x = x + moe(h, p)
            continue
        if p + "ffn_gate.weight" in T:
            gt = h @ ten(p + "ffn_gate.weight").T
            up = h @ ten(p + "ffn_up.weight").T
        else:
            gt, up = np.split(h @ ten(p + "ffn_up.weight").T, 2, axis=1)
        f = ((gelu(gt) if gemma else silu(gt)) * up) @ \
            ten(p + "ffn_down.weight").T
        if gemma:
            f = rms(f, ten(p + "post_ffw_norm.weight"))
        x = x + f
    out = ten("output.weight")
    if out is None:
        out = emb
    lg = rms(x[-1], ten("output_norm.weight")) @ out.T
    if final_cap > 0:
        lg = final_cap * np.tanh(lg / final_cap)
    return lg


def header(path, tokenizer=False, types=None):
    """A GGUF file's bytes (mapped), metadata (key: value; the tokenizer's
    keys only if asked), tensor infos (name, dims, type, offset) and the
    offset of the tensor data; with a dict types, each key's value type
    (gguf.GGUFValueType) put there. Parsed here, by the format's
    specification, rather than by gguf's reader, which takes some 15 s
    over a vocabulary's arrays."""
    import struct
    buf = memoryview(np.memmap(path, dtype=np.uint8, mode="r"))
    at = [0]

    def get(fmt):
        v = struct.unpack_from("<" + fmt, buf, at[0])
        at[0] += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = get("Q")
        at[0] += n
        return bytes(buf[at[0] - n:at[0]]).decode("utf-8", "surrogateescape")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f",
              7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = get("I"), get("Q")
            if et in scalar:  # a numeric array in one step
                size = struct.calcsize(scalar[et])
                at[0] += n * size
                return list(struct.unpack_from("<%d%s" % (n, scalar[et]),
                                               buf, at[0] - n * size))
            return [value(et) for _ in range(n)]
        return get(scalar[t])

    if bytes(buf[:4]) != b"GGUF" or get("4xI") != 3:
        raise SystemExit("arch_model.py: %s: not a GGUF version 3 file" % path)
    nt, nkv = get("Q"), get("Q")
    meta = {}
    for _ in range(nkv):
        k, t = string(), get("I")
        v = value(t)
        if tokenizer or not k.startswith("tokenizer."):
            meta[k] = v
            if types is not None:
                types[k] = gguf.GGUFValueType(t)
    infos = []
    for _ in range(nt):
        name = string()
        dims = [get("Q") for _ in range(get("I"))]
        infos.append((name, dims, get("I"), get("Q")))
    align = int(meta.get("general.alignment", 32))
    return buf, meta, infos, (at[0] + align - 1) // align * align


def read(path):
    """A GGUF file's metadata (tokenizer keys left out) and tensors as
    forward() takes them: the header by header(), the tensors dequantized
    by gguf.quants."""
    buf, meta, infos, base = header(path)
    tens = {}
    for name, dims, t, off in infos:
        qt = gguf.GGMLQuantizationType(t)
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        row = dims[0] // bs * ts
        rows = int(np.prod(dims[1:], dtype=np.int64))
        raw = np.frombuffer(buf, np.uint8, rows * row, base + off)
        tens[name] = np.asarray(
            gguf.quants.dequantize(raw.reshape(rows, row), qt),
            dtype=np.float64).reshape(list(reversed(dims)))
    return meta, tens


def main(argv):
    if argv[:1] == ["cases"]:
        print("\n".join(CASES))
    elif argv[:1] == ["moe-cases"]:
        print("\n".join(MOE_CASES))
    elif argv[:1] == ["cuda-moe-cases"]:
        print("\n".join(CUDA_MOE_CASES))
    elif argv[:1] == ["write"] and len(argv) >= 4:
        for c in argv[3:]:
            case, _, flaw = c.partition(":")
            write(case, argv[1], "%s/%s.gguf" % (argv[2], flaw or case),
                  flaw or None)
    elif argv[:1] == ["forward"] and len(argv) >= 5:
        ids = [int(t) for t in open(argv[3]).read().split()]
        for c in argv[4:]:
            meta, tens = write(c, argv[1], "%s/%s.gguf" % (argv[2], c))
            forward(meta, tens, ids).astype("<f8").tofile(
                "%s/%s.f64" % (argv[2], c))
    elif argv[:1] == ["forward-file"] and len(argv) >= 4:
        meta, tens = read(argv[1])
        forward(meta, tens, [int(t) for t in argv[3:]]).astype("<f8") \
            .tofile(argv[2])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])

"""random_model.py: a random Llama model in GGUF, written with the `gguf`
package (llama.cpp's own writer, not libcore's), carrying the tokenizer of
another GGUF (SmolLM2's), so that text prompts work. Small and fast: 4
layers, width 128, 4 query heads over 2 KV heads, FFN 320; Q8_0
matrices, an F16 embedding, F32 norms. Weights are scaled so that
activations stay in range and generation does not collapse at once.

With CTX and LAYERS (contrib/bench-cpu.sh's long-context model): that
context_length, that many layers, and 2 query heads of 64 over one KV
head, so that filling 128K positions is cheap enough to measure.

With RANDOM_MODEL_HD in the environment: heads of that size (64: the
cuda backend's attention kernels have 64, 128 and 256, not width / heads'
32), the Q and output matrices widened to match.

usage: random_model.py TOKENIZER.gguf OUT.gguf [SEED [CTX LAYERS]]
"""
import os
import sys

import numpy as np
import gguf

src, out = sys.argv[1], sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
rng = np.random.default_rng(seed)
r = gguf.GGUFReader(src)

L, D, H, KV, F = 4, 128, 4, 2, 320
CTX = 2048
if len(sys.argv) > 5:
    CTX, L, H, KV = int(sys.argv[4]), int(sys.argv[5]), 2, 1
HD = int(os.environ.get("RANDOM_MODEL_HD", 0)) or D // H


def field(name):
    f = r.fields[name]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", "surrogateescape")
                    for i in f.data]
        return [int(f.parts[i][0]) for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0]


tokens = field("tokenizer.ggml.tokens")
V = len(tokens)
w = gguf.GGUFWriter(out, "llama")
w.add_block_count(L)
w.add_context_length(CTX)
w.add_embedding_length(D)
w.add_feed_forward_length(F)
w.add_head_count(H)
w.add_head_count_kv(KV)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(HD)
if HD != D // H:
    w.add_key_length(HD)
    w.add_value_length(HD)
w.add_tokenizer_model(field("tokenizer.ggml.model"))
w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
w.add_token_list(tokens)
w.add_token_types(field("tokenizer.ggml.token_type"))
w.add_token_merges(field("tokenizer.ggml.merges"))
w.add_bos_token_id(int(field("tokenizer.ggml.bos_token_id")))
w.add_eos_token_id(int(field("tokenizer.ggml.eos_token_id")))
w.add_add_bos_token(bool(field("tokenizer.ggml.add_bos_token")))


def mat(rows, cols, scale):
    return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)


def q8(a):
    q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


w.add_tensor("token_embd.weight", mat(V, D, 1.0).astype(np.float16))
w.add_tensor("output_norm.weight", np.ones(D, np.float32))
w.add_tensor("output.weight",
             gguf.quants.quantize(mat(V, D, 0.5 / np.sqrt(D)),
                                  gguf.GGMLQuantizationType.Q8_0),
             raw_dtype=gguf.GGMLQuantizationType.Q8_0)
for i in range(L):
    p = "blk.%d." % i
    for name, a in ((p + "attn_q.weight", mat(H * HD, D, 1 / np.sqrt(D))),
                    (p + "attn_k.weight", mat(KV * HD, D, 1 / np.sqrt(D))),
                    (p + "attn_v.weight", mat(KV * HD, D, 1 / np.sqrt(D))),
                    (p + "attn_output.weight", mat(D, H * HD, 0.5 / np.sqrt(D))),
                    (p + "ffn_gate.weight", mat(F, D, 1 / np.sqrt(D))),
                    (p + "ffn_up.weight", mat(F, D, 1 / np.sqrt(D))),
                    (p + "ffn_down.weight", mat(D, F, 0.5 / np.sqrt(F)))):
        q8(a)
    w.add_tensor(p + "attn_norm.weight", np.ones(D, np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(D, np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

"""bench-hf.py: the peer of medha's end-to-end GPU benchmark
(tests/gpu/e2e_bench): Hugging Face transformers' LlamaForCausalLM(config)
with random bf16 weights of Llama-3-8B's shape (made on the GPU, seeded),
SDPA attention, on the same shapes in the same run (make bench-gpu,
contrib/gpu-check.sh):

  - prefill: one PROMPT-token sequence (8192), logits of its last position
    only, the median of REPS timed forward passes after a warm-up: tokens
    a second and TFLOP/s (2 x the layers' parameters x tokens, plus the
    causal attention's 2 x tokens^2 x width a layer);
  - decode: greedy, one sequence, eager with the dynamic cache (as the
    issue measured 15.5 tok/s on an H200): N steps after a 16-token
    prompt, tokens a second.

Prints what it ran on, then one "figure:" line each (gpu-check.sh puts
the last in its table).

usage: bench-hf.py [--quick] [--prompt N] [--decode N] [--reps N] [--layers N]
"""
import argparse
import statistics
import sys
import time

import torch


def sync_time():
    torch.cuda.synchronize()
    return time.perf_counter()


def make_model(layers):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096,
                      intermediate_size=14336, num_hidden_layers=layers,
                      num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=131072, rope_theta=500000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(1)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            try:
                m = LlamaForCausalLM._from_config(
                    cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
            except TypeError:  # transformers 4: torch_dtype
                m = LlamaForCausalLM._from_config(
                    cfg, attn_implementation="sdpa",
                    torch_dtype=torch.bfloat16)
    finally:
        torch.set_default_dtype(prev)
    m.eval()
    return cfg, m


def forward(m, ids, **kw):
    # only the last position's logits where the version allows it
    try:
        return m(ids, logits_to_keep=1, **kw)
    except TypeError:
        return m(ids, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="one timed prefill, 32 decode steps")
    ap.add_argument("--prompt", type=int, default=8192)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=32)
    a = ap.parse_args()
    if a.quick:
        a.reps, a.decode = 1, 32
    if not torch.cuda.is_available():
        print("skip: no CUDA device (torch.cuda.is_available() is False)")
        sys.exit(77)
    import transformers
    t0 = time.perf_counter()
    cfg, m = make_model(a.layers)
    made = time.perf_counter() - t0
    dev = torch.cuda.get_device_name(0)
    print("transformers %s, torch %s, %s; Llama-3-8B shape, %d layers, "
          "random bf16 (made in %.1f s), attention %s" %
          (transformers.__version__, torch.__version__, dev, a.layers, made,
           getattr(m.config, "_attn_implementation", "?")))
    D, F, L = cfg.hidden_size, cfg.intermediate_size, a.layers
    kvd = cfg.num_key_value_heads * (D // cfg.num_attention_heads)
    layer_params = D * (D + 2 * kvd) + D * D + 3 * D * F
    g = torch.Generator(device="cuda").manual_seed(2)

    with torch.inference_mode():
        T = a.prompt
        ids = torch.randint(0, cfg.vocab_size, (1, T), device="cuda",
                            generator=g)
        forward(m, ids, use_cache=False)  # warm-up
        times = []
        for _ in range(a.reps):
            t0 = sync_time()
            forward(m, ids, use_cache=False)
            times.append(sync_time() - t0)
        t = statistics.median(times)
        flops = 2 * L * layer_params * T + 2 * L * T * T * D
        print("prefill %d tokens: %.4f s (median of %d), %.0f tok/s, "
              "%.0f TFLOP/s" % (T, t, a.reps, T / t, flops / t / 1e12))
        print("figure: hf prefill %d: %.0f tok/s, %.0f TFLOP/s" %
              (T, T / t, flops / t / 1e12))

        # greedy decode of one sequence, eager, dynamic cache
        ids = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda",
                            generator=g)
        out = m(ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        for _ in range(3):  # warm-up steps
            out = m(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
        t0 = sync_time()
        for _ in range(a.decode):
            out = m(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
        t = sync_time() - t0
        print("decode: %d greedy steps of one sequence in %.3f s, %.1f tok/s"
              % (a.decode, t, a.decode / t))
        print("figure: hf prefill %d %.0f tok/s; decode %.1f tok/s" %
              (a.prompt, a.prompt / statistics.median(times), a.decode / t))


if __name__ == "__main__":
    main()

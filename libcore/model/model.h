/*
 * model.h: a decoder of the Llama family and its relatives (RMSNorm,
 * RoPE, grouped-query attention, a gated MLP or a mixture of experts:
 * llama (Mixtral's experts too), qwen2, qwen3, gemma2, gemma3, phi3,
 * qwen2moe, qwen3moe, llama4) as the backends see it: its hyper-parameters, a
 * description of what its layers do (struct medha_arch) and its weights.
 * The weights are the GGUF file's own tensors, used in place: matrices
 * stay in their stored type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K .. Q6_K, IQ4_NL, IQ4_XS), nothing is copied but the small norm vectors, which are kept as
 * f32. A model is built either from an open GGUF file or, for tests, from
 * any function that finds tensors by their GGUF names.
 *
 * Matrices are ggml-shaped: ne[0] is the row length (the input size) and
 * ne[1] the number of rows (the output size); below, "(rows, cols)".
 *
 *	struct medha_gguf *g;
 *	struct medha_model *m;
 *	char why[256];
 *	if (medha_gguf_open(&g, path, why, sizeof(why)) != 0 ||
 *	    medha_model_load(&m, g, why, sizeof(why)) != 0)
 *		errx(1, "%s: %s", path, why);
 *	printf("%d layers\n", m->c.n_layers);
 *	medha_model_free(m);
 *	medha_gguf_close(g);	(after the model: it points into g)
 */
#ifndef MEDHA_MODEL_H
#define MEDHA_MODEL_H

#include "medha.h"
#include "model/gguf.h"
#include "model/quant.h"

#include <stddef.h>
#include <stdint.h>

/*
 * The architecture as data: what every layer does beyond a plain Llama
 * layer, read from the GGUF metadata of each family (arch.c) and read by
 * the backends' one forward pass. Zero in every field is a Llama layer:
 * pre-norm RMSNorm, no biases, NORM RoPE, q.k / sqrt(head_dim), SwiGLU.
 * One layer, as the cpu backend runs it:
 *
 *	h  = rmsnorm(x) * attn_norm
 *	q, k, v = h Wq, h Wk, h Wv  (+ bq, bk, bv where qkv_bias)
 *	q, k = rmsnorm per head * attn_q_norm, attn_k_norm (where qk_norm)
 *	q, k = RoPE at the token's position (rope_type; the layer's base and
 *	       scaling: medha_layer_rope)
 *	s  = q.k * attn_scale; s = cap tanh(s / cap) (attn_softcap);
 *	     keys the layer's window leaves out are masked (medha_layer_window)
 *	a  = softmax(s) v Wo; a = rmsnorm(a) * post_attention_norm (post_norm)
 *	x  = x + a
 *	h  = rmsnorm(x) * ffn_norm
 *	f  = act(h Wgate) * (h Wup) Wdown (ffn_act); f = rmsnorm(f) *
 *	     post_ffw_norm (post_norm)
 *	x  = x + f
 *
 * and around the layers: x = embedding * embd_scale; logits = rmsnorm(x)
 * Wout, then cap tanh(logits / cap) (final_softcap).
 */
struct medha_model;

enum medha_rope_type {
	MEDHA_ROPE_NORM = 0, /* adjacent pairs (2i, 2i + 1) rotate (llama) */
	MEDHA_ROPE_NEOX = 1, /* halves: (i, i + n_rot / 2) rotate */
};
enum medha_rope_scaling {
	MEDHA_ROPE_SCALING_NONE = 0,
	MEDHA_ROPE_SCALING_LINEAR = 1,   /* positions / factor */
	MEDHA_ROPE_SCALING_YARN = 2,     /* YaRN: ramp, attention factor */
	MEDHA_ROPE_SCALING_LONGROPE = 3, /* per-frequency factors (phi3) */
};
enum medha_ffn_act {
	MEDHA_FFN_SILU = 0, /* silu(gate) * up */
	MEDHA_FFN_GELU = 1, /* gelu_tanh(gate) * up */
};

struct medha_arch {
	char name[16];       /* general.architecture */
	int rope_type;       /* MEDHA_ROPE_* */
	int ffn_act;         /* MEDHA_FFN_* */
	int qkv_bias;        /* attn_q/k/v.bias are added (qwen2) */
	int qk_norm;         /* attn_q_norm, attn_k_norm (head_dim) RMSNorm
	                        each head's q and k before RoPE */
	int post_norm;       /* post_attention_norm, post_ffw_norm (gemma) */
	float embd_scale;    /* embeddings times this (0: 1; gemma sqrt(dim)) */
	float attn_scale;    /* score scale (0: 1 / sqrt(head_dim)) */
	int q_prescale;      /* the scale is applied to q after RoPE, not to
	                        the scores (llama.cpp's order for gemma and
	                        phi3: the same numbers, other roundings) */
	float attn_softcap;  /* scores capped to (-cap, cap) by tanh (0: no) */
	float final_softcap; /* logits likewise (0: no) */
	int swa;             /* sliding window W (0: none): a window layer's
	                        query at p sees keys (p - W, p] */
	int swa_pattern;     /* layer l has the window where l % pattern <
	                        pattern - 1 (gemma2 2, gemma3 6); 0 or 1: every
	                        layer */
	float swa_rope_base; /* RoPE base of window layers (0: rope_theta);
	                        scaling applies only to the others then */
	int rope_scaling;    /* MEDHA_ROPE_SCALING_* */
	float rope_factor;   /* rope.scaling.factor (linear, yarn) */
	int64_t rope_orig_ctx; /* rope.scaling.original_context_length */
	float yarn_ext_factor;  /* YaRN's ramp mix (1 with yarn) */
	float yarn_attn_factor; /* the cos/sin magnitude, before YaRN's own
	                           1 + 0.1 ln(factor) (1) */
	float yarn_beta_fast, yarn_beta_slow; /* the ramp's ends (32, 1) */
	int fused_qkv;       /* attn_qkv (q, k, v rows) split at load (phi3) */
	int fused_gate_up;   /* ffn_up of 2 ffn_dim rows, gate first (phi3) */
	/*
	 * A routed FFN (llama.cpp's llm_build_moe_ffn), on the layers
	 * medha_layer_moe() names: router logits r = h Wgate_inp (n_expert);
	 * p = softmax(r) or sigmoid(r) (moe_gating); the n_expert_used
	 * largest (of r where moe_weight_in, else of p; ties to the lower
	 * index) with weights w_j = p_j, divided by their sum (clamped to at
	 * least 2^-14) where moe_norm_w; f = sum over the chosen, in order
	 * of weight, of w_j FFN_j(h) (moe_weight_in: FFN_j(w_j h)), each
	 * expert's FFN a SwiGLU of expert_ffn_dim; then plus the shared
	 * expert's SwiGLU of shexp_ffn_dim rows, times sigmoid(h . gate_inp_shexp)
	 * where shexp_gate.
	 */
	int n_expert;        /* expert_count (0: a dense FFN everywhere) */
	int n_expert_used;   /* expert_used_count, the top-k */
	int expert_ffn_dim;  /* expert_feed_forward_length */
	int shexp_ffn_dim;   /* the shared expert's rows (0: none) */
	int moe_gating;      /* MEDHA_MOE_* */
	int moe_norm_w;      /* the chosen weights renormalised */
	int moe_weight_in;   /* weights on the expert's input (llama4) */
	int shexp_gate;      /* the shared expert's sigmoid gate (qwen2moe) */
	int moe_step;        /* layer l is routed where (l + 1) % step == 0
	                        (1: every layer; 0 with n_expert: every) */
	/*
	 * Llama 4's attention: chunked layers (those of swa_pattern, as
	 * windows are placed) see only their chunk, keys k with
	 * floor(k / chunk) == floor(p / chunk), k <= p; NoPE layers ((l + 1)
	 * % nope_step == 0) have no RoPE, and their q is scaled by 1 +
	 * attn_temp_scale ln(1 + floor((p + 1) / attn_temp_floor)); the
	 * others' q and k are RMS-normed per head without weights after
	 * RoPE (qk_l2norm).
	 */
	int chunk;             /* chunk size (0: none) */
	int nope_step;         /* 0: RoPE on every layer */
	int qk_l2norm;
	float attn_temp_scale; /* 0: none */
	int attn_temp_floor;
};

enum medha_moe_gating {
	MEDHA_MOE_SOFTMAX = 0,
	MEDHA_MOE_SIGMOID = 1,
};

/* Hyper-parameters; GGUF keys are under the architecture ("llama."). */
struct medha_model_config {
	int n_layers;     /* block_count */
	int dim;          /* embedding_length */
	int n_heads;      /* attention.head_count */
	int n_kv_heads;   /* attention.head_count_kv (n_heads) */
	int head_dim;     /* attention.key_length (dim / n_heads) */
	int n_rot;        /* rope.dimension_count (head_dim); even */
	int ffn_dim;      /* feed_forward_length */
	int vocab;        /* rows of token_embd.weight (0: take from it) */
	int64_t ctx_len;  /* context_length, the trained context (0: unknown) */
	float rope_theta; /* rope.freq_base (10000) */
	float norm_eps;   /* attention.layer_norm_rms_epsilon (1e-5) */
	struct medha_arch a; /* what the layers do (all 0: llama) */
};

/* 0.. where medha knows the architecture's name, else MEDHA_EUNSUP, why. */
int medha_arch_check(const char *arch, char *why, size_t whylen);
/* The architecture's keys into c->a (arch.c; medha_model_config_read). */
int medha_arch_read(const struct medha_gguf *g, const char *arch,
    struct medha_model_config *c, char *why, size_t whylen);

/*
 * Layer l's sliding window W (its query at p sees keys p - W < k <= p), or
 * 0 where it attends to every key before it.
 */
int medha_layer_window(const struct medha_model_config *c, int l);

/*
 * Layer l's RoPE: *table 0 for a layer of the model's RoPE (base, scaling,
 * factors), 1 for a window layer with its own base (gemma3: 10000,
 * unscaled). A backend makes one table of each kind per token.
 */
int medha_layer_rope(const struct medha_model_config *c, int l);

/* Layer l's chunk (llama4's chunked attention: model.h), or 0. */
int medha_layer_chunk(const struct medha_model_config *c, int l);

/*
 * The keys before its own a query of layer l can see at most, W (its
 * window or its chunk: keys p - W < k <= p), or 0 (all): what the KV
 * cache must keep of the layer (kvcache.h's windows).
 */
int medha_layer_span(const struct medha_model_config *c, int l);

/* Whether layer l has RoPE (not a llama4 NoPE layer). */
int medha_layer_has_rope(const struct medha_model_config *c, int l);

/* Whether layer l's FFN is routed to experts (medha_arch). */
int medha_layer_moe(const struct medha_model_config *c, int l);

/*
 * RoPE of one kind (medha_layer_rope): theta_i = pos * base^(-2i / n_rot)
 * / freqs[i], then, as ggml's rope_yarn: theta = freq_scale * theta_i,
 * mixed back toward theta_i by ramp(i) * ext_factor where ext_factor is
 * not 0 (mscale then times 1 + 0.1 ln(1 / freq_scale)); cos and sin
 * times mscale.
 */
struct medha_rope {
	float base;
	float freq_scale;     /* 1 / factor (linear, yarn), else 1 */
	float ext_factor;     /* YaRN (0: none) */
	float mscale;         /* attention factor */
	float corr[2];        /* YaRN's ramp ends, in pair indices */
	const float *freqs;   /* (n_rot / 2) divisors or NULL */
};
void medha_model_rope(const struct medha_model *m, int kind,
    struct medha_rope *r);

struct medha_layer {
	float *attn_norm;                /* (dim) f32, owned */
	const struct medha_tensor *wq;   /* (n_heads * head_dim, dim) */
	const struct medha_tensor *wk;   /* (n_kv_heads * head_dim, dim) */
	const struct medha_tensor *wv;   /* (n_kv_heads * head_dim, dim) */
	const struct medha_tensor *wo;   /* (dim, n_heads * head_dim) */
	float *ffn_norm;                 /* (dim) f32, owned */
	const struct medha_tensor *gate; /* (ffn_dim, dim) */
	const struct medha_tensor *up;   /* (ffn_dim, dim) */
	const struct medha_tensor *down; /* (dim, ffn_dim) */
	/* the other families' (NULL where the architecture has none) */
	float *bq, *bk, *bv;       /* (q rows), (kv rows) biases, owned */
	float *q_norm, *k_norm;    /* (head_dim) f32, owned */
	float *post_attn_norm;     /* (dim) f32, owned */
	float *post_ffn_norm;      /* (dim) f32, owned */
	/* a routed layer's (medha_layer_moe; gate, up, down NULL then, or
	   the shared expert's where it has one) */
	const struct medha_tensor *gate_inp;  /* (n_expert, dim) router */
	const struct medha_tensor *gate_exps; /* (n_expert, expert_ffn_dim,
	                                         dim) 3-D, expert-major */
	const struct medha_tensor *up_exps;   /* likewise */
	const struct medha_tensor *down_exps; /* (n_expert, dim,
	                                         expert_ffn_dim) */
	float *gate_inp_sh;                   /* (dim) f32, owned, or NULL
	                                         (shexp_gate) */
};

struct medha_model {
	struct medha_model_config c;
	const struct medha_tensor *tok_embd; /* (vocab, dim) */
	const struct medha_tensor *output; /* (vocab, dim); tok_embd if tied */
	int tied;                          /* no output.weight in the file */
	float *out_norm;                   /* (dim) f32, owned */
	float *rope_freqs; /* (n_rot / 2) frequency divisors, owned, or NULL
	                      (rope_freqs, or LongRoPE's long or short
	                      factors) */
	struct medha_layer *layer; /* (n_layers) */
	/* (n_layers, 5) views of fused tensors' rows (q, k, v, gate, up),
	   owned, or NULL */
	struct medha_tensor *views;
};

/* Finds a tensor by its GGUF name, or returns NULL. */
typedef const struct medha_tensor *(
    *medha_tensor_find_fn)(void *ctx, const char *name);

/*
 * Read a model's hyper-parameters and architecture (llama, qwen2,
 * qwen3, gemma2, gemma3, phi3) from GGUF metadata into *c (vocab is left
 * 0). Returns 0, MEDHA_EUNSUP (another architecture, a RoPE scaling type
 * or a key's value medha does not do, named in why) or MEDHA_EFORMAT /
 * MEDHA_ENOTFOUND (a key missing or out of range), with a reason in why.
 */
int medha_model_config_read(const struct medha_gguf *g,
    struct medha_model_config *c, char *why, size_t whylen);

/*
 * Build a model of config c from the tensors find(ctx, name) returns:
 * token_embd.weight, output_norm.weight, output.weight (optional: tied to
 * the embedding), rope_freqs.weight (optional), blk.N.attn_norm.weight,
 * attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
 * ffn_down. Each must have the shape c implies and a type the backends
 * multiply with. On success *m is the caller's (medha_model_free()); it
 * points at the tensors, which must outlive it. Returns 0,
 * MEDHA_ENOTFOUND (a tensor missing), MEDHA_EFORMAT (wrong shape, size or
 * type), MEDHA_EINVAL (c out of range), MEDHA_EUNSUP (a tensor type this
 * build cannot use) or MEDHA_ENOMEM, with a reason in why naming the
 * tensor.
 */
int
medha_model_build(struct medha_model **m, const struct medha_model_config *c,
    medha_tensor_find_fn find, void *ctx, char *why, size_t whylen);

/* Config from g's metadata, then medha_model_build() on g's tensors. */
int medha_model_load(struct medha_model **m, const struct medha_gguf *g,
    char *why, size_t whylen);

/* Free the model (not the tensors it points at); m may be NULL. */
void medha_model_free(struct medha_model *m);

/*
 * The model's fingerprint, 64 lowercase hex digits and a NUL into out:
 * for a file, the SHA-256 of all its bytes (its tensors, its tokenizer
 * and the rest, read once: a worker computes it when it starts, the
 * scheduler for its -m); for anything else (a built-in model's name),
 * the SHA-256 of "medha model " and the name. Two workers of one
 * replica must have the same one. Returns 0, MEDHA_EIO or MEDHA_ENOMEM,
 * with why.
 */
int medha_model_fingerprint(const char *model, char out[65], char *why,
    size_t whylen);

/* v = expert e's matrix of exps, a (n_expert, rows, cols) tensor. */
void medha_expert_view(struct medha_tensor *v, const struct medha_tensor *exps,
    int e);

/* Bytes of the weight matrices as stored (what a decode step of a dense
   model reads; every expert's counted). */
size_t medha_model_weight_bytes(const struct medha_model *m);

/* The weight bytes a step reads that runs experts of each routed
   layer's (a decode step of one token: n_expert_used; n_expert or more:
   every expert, medha_model_weight_bytes). */
double medha_model_step_bytes(const struct medha_model *m, double experts);

/*
 * Layers [*lo, *hi) of SPP stage s (0 <= s < spp <= n) over n layers:
 * as even as can be, the earlier stages taking one more where spp does
 * not divide n. Every worker and its scheduler split the same way.
 */
void medha_stage_layers(int n, int spp, int s, int *lo, int *hi);

/*
 * What TP rank r of tp holds: kv heads [kv_lo, kv_hi) and the query
 * heads that read them, [h_lo, h_hi); rows [d_lo, d_hi) of the matrices
 * of dim rows (the output projection, down) and [f_lo, f_hi) of those of
 * ffn_dim rows (gate, up). Each split as medha_stage_layers() splits
 * layers, so rank 0 holds the most of each. Returns 0, or MEDHA_EINVAL
 * where r is not in [0, tp) or tp exceeds the kv heads or MEDHA_TP_MAX.
 */
#define MEDHA_TP_MAX 64 /* TP ranks at most */

struct medha_tp_share {
	int kv_lo, kv_hi, h_lo, h_hi, d_lo, d_hi, f_lo, f_hi;
};
int medha_tp_share(const struct medha_model_config *c, int tp, int r,
    struct medha_tp_share *s);

#endif

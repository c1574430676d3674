/*
 * model.h: a Llama-style decoder (RMSNorm, RoPE, grouped-query attention,
 * SwiGLU) as the backends see it: its hyper-parameters and its weights.
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
};

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
};

struct medha_model {
	struct medha_model_config c;
	const struct medha_tensor *tok_embd; /* (vocab, dim) */
	const struct medha_tensor *output; /* (vocab, dim); tok_embd if tied */
	int tied;                          /* no output.weight in the file */
	float *out_norm;                   /* (dim) f32, owned */
	float *rope_freqs; /* (n_rot / 2) frequency divisors, owned, or NULL */
	struct medha_layer *layer; /* (n_layers) */
};

/* Finds a tensor by its GGUF name, or returns NULL. */
typedef const struct medha_tensor *(
    *medha_tensor_find_fn)(void *ctx, const char *name);

/*
 * Read a llama model's hyper-parameters from GGUF metadata into *c
 * (vocab is left 0). Returns 0, MEDHA_EUNSUP (an architecture other than
 * llama, rope scaling other than none) or MEDHA_EFORMAT / MEDHA_ENOTFOUND
 * (a key missing or out of range), with a reason in why.
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

/* Bytes of the weight matrices as stored (what a decode step reads). */
size_t medha_model_weight_bytes(const struct medha_model *m);

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

/*
 * kernels.h: the CUDA operators of the cuda backend (issue 26), one per
 * kernels/<op>.cu, each reached through a C-callable launcher declared
 * here. This header is the contract between the kernels and their one
 * caller, libcore/engine/backend_cuda.c, and their tests (tests/gpu/):
 * plain C, no CUDA C++ in it.
 *
 * Conventions, for every launcher:
 *  - every pointer is device memory unless its comment says host;
 *  - bf16 and f16 values are stored as uint16_t (their bits); the
 *    residual stream, norms' weights, RoPE and every accumulation are
 *    f32 ("bf16 storage, fp32 accumulation");
 *  - the launch goes on `stream` and returns at once; the return value
 *    is 0 or the cudaError_t of the launch (cudaGetLastError() after
 *    it), so a caller checks every launch; a shape the kernel does not
 *    handle (a head_dim it has no instance for) is cudaErrorInvalidValue
 *    before anything is launched;
 *  - rows are dense (stride = row length) unless a stride is given;
 *  - no launcher allocates: scratch comes from the caller, sized by the
 *    *_workspace() function beside it.
 */
#ifndef MEDHA_KERNELS_H
#define MEDHA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of stored tensors (weights, the KV cache). */
enum medha_k_type {
	MEDHA_K_F32 = 0,
	MEDHA_K_F16 = 1,
	MEDHA_K_BF16 = 2,
};

/* ---- elementwise and rows (kernels/embed.cu, norm.cu, rope.cu,
   swiglu.cu, add.cu) ---- */

/* x[i] (dim f32) = table[ids[i]] (vocab x dim bf16), i < n. ids are
   checked by the caller (below vocab). */
int medha_k_embed(float *x, const uint16_t *table, const int32_t *ids, int n,
    int dim, cudaStream_t stream);

/* y[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w, rows of dim: x f32, w f32,
   y bf16 (the next matrix product's input). */
int medha_k_rmsnorm(uint16_t *y, const float *x, const float *w, int n,
    int dim, float eps, cudaStream_t stream);

/* The same with an f32 output (the final norm before the logits, tests). */
int medha_k_rmsnorm_f32(float *y, const float *x, const float *w, int n,
    int dim, float eps, cudaStream_t stream);

/*
 * RoPE in place, the GGUF llama layout (adjacent pairs (2i, 2i+1)
 * rotate, as medha_cpu_rope): for row t (n rows of row_stride floats),
 * heads h < n_heads at column h * head_dim, pair i < n_rot / 2 turns by
 * pos[t] * theta_base^(-2i / n_rot) / (freqs ? freqs[i] : 1). Angles in
 * f32 from an f64 exponent is allowed (the cpu twin's own order differs
 * by rounding only). pos is (n) int64; freqs (n_rot / 2) or NULL.
 */
int medha_k_rope(float *x, const int64_t *pos, int n, int row_stride,
    int n_heads, int head_dim, int n_rot, float theta_base,
    const float *freqs, cudaStream_t stream);

/*
 * RoPE of the other families (model.h's struct medha_rope, which the cpu
 * backend's table medha_cpu_rope_table_ext computes the same way): the
 * angle of pair i made up as medha_k_rope's (p multiplied up by
 * base^(-2 / n_rot) i times in f32), divided by freqs[i] (rope_freqs,
 * LongRoPE's factors; device, or NULL), then theta = freq_scale * that,
 * mixed back toward the unscaled angle by YaRN's ramp (1 below corr[0],
 * 0 above corr[1], linear between) times ext_factor; cos and sin times
 * mscale (times 1 + 0.1 ln(1 / freq_scale) where ext_factor is not 0).
 * neox: pairs (i, i + n_rot / 2) rotate instead of (2i, 2i + 1).
 */
struct medha_k_rope {
	float base;
	float freq_scale;  /* 1: none */
	float ext_factor;  /* 0: no YaRN ramp */
	float mscale;      /* 1: none */
	float corr[2];     /* the ramp's ends, pair indices */
	const float *freqs; /* (n_rot / 2) divisors, device, or NULL */
	int neox;          /* 1: NEOX halves, 0: adjacent pairs */
};
int medha_k_rope_ext(float *x, const int64_t *pos, int n, int row_stride,
    int n_heads, int head_dim, int n_rot, const struct medha_k_rope *r,
    cudaStream_t stream);

/* RMSNorm of each head in place (qwen3's and gemma3's Q/K norm): head h
   of row t, head_dim f32 at x + t * row_stride + h * head_dim, times w
   (head_dim f32); the arithmetic of medha_k_rmsnorm. */
int medha_k_rmsnorm_heads(float *x, int row_stride, int n, int n_heads,
    int head_dim, const float *w, float eps, cudaStream_t stream);

/* y (n x ffn bf16) = silu(g) * u, g and u (n x ffn) f32 with row
   strides gs, us (the fused gate|up product's halves). */
int medha_k_swiglu(uint16_t *y, const float *g, int gs, const float *u,
    int us, int n, int ffn, cudaStream_t stream);

/* The same with gelu_tanh(g) = g / 2 (1 + tanh(sqrt(2 / pi) (g + 0.044715
   g^3))) (gemma's MLP), in f32 (ggml's CUDA build's formula). */
int medha_k_geglu(uint16_t *y, const float *g, int gs, const float *u,
    int us, int n, int ffn, cudaStream_t stream);

/* x += y, n floats (the residual add after a row-parallel product). */
int medha_k_add(float *x, const float *y, int64_t n, cudaStream_t stream);

/* Row t's columns [0, width) of x (n rows of row_stride floats) += b
   (width f32): qwen2's Q/K/V biases on the fused product. */
int medha_k_bias_add(float *x, int row_stride, int n, const float *b,
    int width, cudaStream_t stream);

/* Llama 4's attention temperature on a NoPE layer's q: row t's columns
   [0, width) of x (n rows of row_stride floats) times 1 + scale
   ln(1 + floor((pos[t] + 1) / floor)), the factor in f64 then rounded
   (cpu.c's, as llama.cpp's llm_graph_input_attn_temp). */
int medha_k_attn_temp(float *x, int row_stride, int n, int width,
    const int64_t *pos, float scale, int floor, cudaStream_t stream);

/* x *= s, n floats (gemma's embeddings times sqrt(dim)). */
int medha_k_scale(float *x, int64_t n, float s, cudaStream_t stream);

/* x = cap tanh(x / cap), n floats (gemma2's final-logit soft-cap, as
   medha_cpu_softcap: x * (1 / cap), tanh, times cap). */
int medha_k_softcap(float *x, int64_t n, float cap, cudaStream_t stream);

/* Convert n f32 to bf16 (round to nearest even) and back. */
int medha_k_f32_to_bf16(uint16_t *y, const float *x, int64_t n,
    cudaStream_t stream);
int medha_k_bf16_to_f32(float *y, const uint16_t *x, int64_t n,
    cudaStream_t stream);

/* n bf16 values from a seeded generator, uniform in [-scale, scale]
   (random weights by shape name): the same seed and offset give the
   same values on any GPU; offset lets one tensor be filled in parts. */
int medha_k_fill_random(uint16_t *y, int64_t n, uint64_t seed,
    uint64_t offset, float scale, cudaStream_t stream);

/* ---- the paged KV cache (kernels/kv.cu) ----
 *
 * One layer's cache is two pools, K and V, each of n_blocks blocks of
 * shape (n_kv_heads, block_size, head_dim) in the cache's element type
 * (f16 or bf16): element (b, h, i, c) at ((b * n_kv_heads + h) *
 * block_size + i) * head_dim + c. A sequence owns a block table
 * (int32, device): its j-th block holds positions base + j*block_size
 * ... (base is 0 but for a KVP piece).
 */
struct medha_k_kv_layer {
	void *k, *v;    /* the pools of this layer */
	int kv_type;    /* MEDHA_K_F16 or MEDHA_K_BF16 */
	int n_kv_heads; /* heads held (a TP rank's share) */
	int head_dim;
	int block_size; /* positions per block: 16 (the handshake's) */
};

/*
 * Per sequence of a batch, in batch order (arrays of n_seqs, device,
 * built on the host and copied once per batch):
 */
struct medha_k_seqs {
	const int32_t *q_start; /* first row of its tokens in the batch */
	const int32_t *n_q;     /* its tokens in the batch (>= 1) */
	const int64_t *pos;     /* the position of its first token */
	const int64_t *kv_base; /* first position its cache holds (KVP
	                           piece; 0 otherwise) */
	const int64_t *kv_len;  /* positions its cache holds after this
	                           batch's append: keys [kv_base, kv_base +
	                           kv_len) are attended */
	const int32_t *table;   /* its block table at table + table_off[s] */
	const int64_t *table_off;
	const int32_t *append;  /* 1: its new tokens' K/V go into its cache
	                           at pos - kv_base (KVP: 0 on the groups
	                           that only attend) */
	int n_seqs;
	int n_tokens;    /* rows of the batch: sum of n_q */
	int max_q;       /* the largest n_q (host copy, for grids) */
	int64_t max_kv;  /* the largest kv_len (host copy, for grids) */
};

/* K and V rows (n_tokens, n_kv_heads * head_dim, f32, strides ks, vs)
   into the cache at each appending sequence's positions. */
int medha_k_kv_append(const struct medha_k_kv_layer *kv,
    const struct medha_k_seqs *s, const float *k, int ks, const float *v,
    int vs, cudaStream_t stream);

/* ---- attention (kernels/attn.cu) ----
 *
 * Causal grouped-query attention of a mixed batch: for each sequence,
 * each of its query rows (position p = pos + i) against the cached keys
 * at positions [kv_base, min(kv_base + kv_len, p + 1)) (and above p -
 * window, where window is set; from p - p % chunk, where chunk is),
 * softmax scaled by `scale` (and capped
 * by softcap). q is (n_tokens, n_heads * head_dim) f32 with row stride
 * qs; query head h reads kv head h / (n_heads / n_kv_heads). out is
 * (n_tokens, n_heads * head_dim) bf16 (the output projection's input)
 * or, when out_f32 is given instead, f32 (tests, the KVP merge). lse,
 * when given, is (n_tokens, n_heads) f32: the natural log of each row's
 * sum of exp(score), -INFINITY for a row with no key (a KVP piece
 * entirely after its position), and out's row is then 0.
 *
 * A sequence with few query rows and a long context is split across
 * its KV length, the parts folded by their log-sum-exps: the split is
 * a function of that sequence's own (n_q, kv_len) and the GPU, never of
 * the rest of the batch, so a sequence's result is the same bits in any
 * batch (the batch-invariance of the default path). The fold needs
 * scratch: medha_k_attn_workspace() bytes for this batch's shape.
 *
 * The plan (each sequence's path, tiles and parts: a function of the
 * batch's descriptors, n_heads and the kv heads, not of the layer) is
 * made in the workspace by each call, or once by medha_k_attn_plan():
 * then the calls that set planned (the same s, n_heads, head_dim and
 * work, the plan's launch before them on the stream) use it as it is.
 */
struct medha_k_attn {
	const struct medha_k_kv_layer *kv;
	const struct medha_k_seqs *s;
	const float *q;
	int qs;          /* q's row stride, floats */
	int n_heads;     /* query heads held */
	float scale;     /* 1 / sqrt(head_dim) */
	uint16_t *out;   /* bf16 out, or NULL */
	float *out_f32;  /* f32 out, or NULL (exactly one of the two) */
	float *lse;      /* optional */
	void *work;      /* medha_k_attn_workspace() bytes */
	size_t work_len;
	int planned;     /* 1: work holds the plan (medha_k_attn_plan) */
	/* the other families' (0: none; left 0 by an initializer that
	   stops before them) */
	float softcap;   /* scores s = q.k * scale become cap tanh(s / cap)
	                    before the softmax (gemma2) */
	int window;      /* a sliding window W: the row at position p sees
	                    keys at positions (p - W, p] only (the plan is
	                    the same: it does not depend on W) */
	int chunk;       /* llama4's chunked attention C: the row at p sees
	                    keys at positions [p - p % C, p] only (with a
	                    window too, the later start of the two) */
};

size_t medha_k_attn_workspace(const struct medha_k_attn *a);
int medha_k_attn_plan(const struct medha_k_attn *a, cudaStream_t stream);
int medha_k_attn(const struct medha_k_attn *a, cudaStream_t stream);

/*
 * The KVP merge (kernels/merge.cu): n_parts partial outputs of the same
 * rows folded into out (n, n_heads * head_dim, bf16) as the softmax over
 * the union of their keys: parts is (n_parts, n, n_heads * head_dim) f32
 * and lses (n_parts, n, n_heads) f32, part-major (part j's output row i
 * at (j * n + i) * n_heads * head_dim); a part whose lse is -INFINITY
 * counts for nothing, a row with no part at all is 0.
 */
int medha_k_attn_merge(uint16_t *out, const float *parts, const float *lses,
    int n_parts, int n, int n_heads, int head_dim, cudaStream_t stream);

/* ---- a mixture of experts' routed FFN (kernels/moe.cu) ----
 *
 * As the cpu backend's cpu/cpu_moe.c (model.h's struct medha_arch says
 * what it computes): the router's logits in f32, each token's top-k
 * experts and weights, the (token, slot) rows sorted by expert on the
 * device (counts, offsets, the permutation and its inverse, and the
 * row tiles each expert's segment makes), the rows gathered in that
 * order, one grouped product over the expert segments (each tile's
 * expert's weights, bf16, read once per tile: once per batch in a
 * decode step), and per token the weighted sum in order of weight.
 * Every launch's shape is a function of the token count and the
 * model's shape alone, the counts staying on the device: a decode
 * step's graph captures them (no host synchronisation).
 */
#define MEDHA_K_MOE_KMAX 32 /* the largest top-k the routing holds */
#define MEDHA_K_MOE_BM 16   /* rows of a tile of the grouped product */

struct medha_k_moe {
	int ne, k;       /* experts, top-k (1..MEDHA_K_MOE_KMAX, <= ne) */
	int sigmoid;     /* gating: 1 sigmoid, 0 softmax */
	int by_logit;    /* the top-k by logit (llama4), else by weight */
	int norm_w;      /* the chosen weights divided by their sum (at
	                    least 2^-14) */
	/* device scratch, the caller's, for n tokens: */
	int32_t *sel;    /* (n, k) each token's experts, by weight */
	float *wt;       /* (n, k) their weights */
	float *gsh;      /* (n) sigmoid of the logits' column ne (qwen2moe's
	                    shared-expert gate), or NULL: none */
	int32_t *row;    /* (n, k) where (t, j) went in the sorted rows */
	int32_t *src;    /* (n * k) the t * k + j of sorted row r */
	int32_t *off;    /* (ne + 1) each expert's first sorted row */
	int32_t *tiles;  /* (medha_k_moe_tiles(), 3) each tile's expert
	                    (-1: unused), first row and end row */
};

/* Tiles of MEDHA_K_MOE_BM rows the sort can make for n tokens: one
   more per expert than the rows need at most. */
int medha_k_moe_tiles(int n, int ne, int k);

/* logits (n, rows) f32 = x (n, dim f32) times w (rows, dim f32)
   transposed, each a dot product in f32 (the router, and qwen2moe's
   shared-expert gate as a last row). */
int medha_k_moe_logits(float *logits, const float *x, const float *w, int n,
    int rows, int dim, cudaStream_t stream);

/* Each token's top-k (m->sel, m->wt, and m->gsh where set) from its
   logits (n rows of stride ls >= ne, + 1 with gsh): softmax (exp(x -
   max), summed in f64, times the f32 reciprocal) or sigmoid; the k
   largest, ties to the lower expert; renormalised where norm_w. */
int medha_k_moe_route(const struct medha_k_moe *m, const float *logits,
    int ls, int n, cudaStream_t stream);

/* The rows sorted by expert: m->off, m->row, m->src and m->tiles from
   m->sel (one block; the order within an expert's segment is any). */
int medha_k_moe_sort(const struct medha_k_moe *m, int n, cudaStream_t stream);

/* xg's sorted row r (dim bf16) = x's row t (stride ldx, bf16) of its
   (t, j), times its weight (rounded to bf16) where scale (llama4's
   weight on the input). */
int medha_k_moe_gather(uint16_t *xg, const uint16_t *x, int ldx, int dim,
    const struct medha_k_moe *m, int n, int scale, cudaStream_t stream);

/*
 * The grouped product: for each tile (its expert e, rows [r0, r1)),
 * y[r] (N f32, stride ldy) = x[r] (K bf16, stride ldx) times W_e
 * transposed, W_e = w + e * we (N, K bf16), f32 sums in K order (a
 * row's result the same bits whatever else the batch holds). ntiles:
 * medha_k_moe_tiles() of the batch.
 */
int medha_k_moe_gemm(float *y, int ldy, const uint16_t *x, int ldx,
    const uint16_t *w, int64_t we, int N, int K, const int32_t *tiles,
    int ntiles, cudaStream_t stream);

/* out[t] (dim f32) = the sum over j < k, in order, of ys[row[t, j]]
   (times wt[t, j] where weighted), plus sh[t] (times gsh[t] where
   set) where sh is given; added to out's values where add. */
int medha_k_moe_sum(float *out, int add, const float *ys, int dim,
    const struct medha_k_moe *m, int n, int weighted, const float *sh,
    cudaStream_t stream);

/* ---- the head (kernels/sample.cu) ---- */

/* Gather rows: y[i] = x[rows[i]] (dim f32), i < n (the rows whose
   logits the batch asks for, before the final norm). */
int medha_k_gather_rows(float *y, const float *x, const int32_t *rows,
    int n, int dim, cudaStream_t stream);

/* Greedy: ids[i] = the index of the largest of logits row i (vocab
   f32), the lowest on ties (medha_sample_greedy); -1 for a row with a
   NaN or an infinity in it (the caller's check of the logits). */
int medha_k_argmax(int32_t *ids, const float *logits, int n, int vocab,
    cudaStream_t stream);

/*
 * Sampling, as the cpu sampler (model/sample.c) for the rows with
 * temp > 0: logits / temp, the top_k largest (0: all), the smallest
 * set by falling probability whose mass reaches top_p (the most likely
 * token always), then the token where the cumulative probability
 * passes u[i] (u drawn on the host from the request's seeded
 * generator, so the GPU and cpu backends draw the same numbers). Rows
 * are (n, vocab) f32; temp, top_p, u (n f32), top_k (n int32). Scratch:
 * medha_k_sample_workspace(n, vocab) bytes.
 */
size_t medha_k_sample_workspace(int n, int vocab);
int medha_k_sample(int32_t *ids, const float *logits, int n, int vocab,
    const float *temp, const int32_t *top_k, const float *top_p,
    const float *u, void *work, size_t work_len, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

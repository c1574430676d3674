/*
 * cpu.h: the CPU backend, the reference every other backend is checked
 * against: the forward pass of a Llama model (model.h) over a batch
 * (batch.h) of any mix of prefill chunks and decodes, with K/V kept in a
 * paged cache (kvcache.h), on a pool of threads.
 *
 * One forward call: embedding rows; then per layer RMSNorm, the Q/K/V
 * projections, RoPE at each token's position (the GGUF llama layout:
 * adjacent pairs rotate), K/V appended to each sequence's blocks,
 * grouped-query attention of each sequence's new tokens against its
 * cached keys and itself (causal), the output projection, RMSNorm and
 * the SwiGLU MLP (or, on a mixture of experts' routed layers, the
 * router, each token's experts and a shared expert: cpu_moe.c, the
 * batch's rows grouped by expert), with residual adds; then the final
 * norm and logits for
 * the rows the batch asks for. A call may also run a range of layers
 * only (a pipeline stage, medha_cpu_forward_layers()): from the hidden
 * states that left the layer before, to the hidden states leaving its
 * last layer, bit-identical to the same layers of a whole pass.
 *
 * Numerics follow llama.cpp's x86 CPU backend: the activations entering
 * a matrix product are rounded to the weight type's partner (Q8_0-style
 * int8 blocks for Q8_0/Q4_0/Q4_1 weights, multiplied with integer dot
 * products, and for the K-quants, Q5_0, Q5_1, IQ4_NL and IQ4_XS where
 * the build has the packed kernel (cpu_mm_packk.c; ggml quantizes the
 * activations for K-quants per 256 instead, so those products are not
 * llama.cpp's bits); f16 or bf16 for F16 or BF16 weights; f32 for F32
 * and, in the llama.cpp and reference modes or builds without AVX2, the
 * K-quants, Q5 and IQ4 types, dequantized a tile at a time), and norms,
 * RoPE and the
 * products do ggml's operations in ggml's order (one-token logits equal
 * llama.cpp's bit for bit without flash attention). Attention orders its
 * float operations its own way (cpu_attn.c). Every token's arithmetic is
 * independent of what else is in the batch and of the thread count, so
 * prefill in chunks of any size gives bit-identical results (with an f32
 * KV cache). A llama.cpp mode (opts.llama_compat) does RoPE, attention
 * and SwiGLU in the order of llama.cpp's prebuilt AVX2 CPU build instead,
 * giving its logits bit for bit (not chunk invariant: llama.cpp's
 * attention order depends on the batch). A reference mode (opts.ref, or
 * MEDHA_CPU_REF=1 in the environment) instead dequantizes every weight
 * to f32 and keeps the activations in f32: slow, for debugging the fast
 * paths.
 *
 *	struct medha_cpu *cpu;
 *	struct medha_cpu_opts o = { .n_threads = 2 };
 *	if (medha_cpu_init(&cpu, model, kv, &o, why, sizeof(why)) != 0)
 *		...;
 *	if (medha_cpu_forward(cpu, &batch, logits, why, sizeof(why)) != 0)
 *		...;
 *	medha_cpu_free(cpu);
 */
#ifndef MEDHA_CPU_H
#define MEDHA_CPU_H

#include "medha.h"
#include "batch.h"
#include "cpu/kvcache.h"
#include "model/model.h"
#include "cpu/threadpool.h"

#include <stddef.h>
#include <stdint.h>

struct medha_cpu_opts {
	int n_threads; /* threads in all, the caller's included (1) */
	int ref;       /* f32 reference numerics (0; MEDHA_CPU_REF=1 sets it) */
	int kv_shards; /* test mode: >1 splits each sequence's keys into that
	                  many position ranges, attends to each range apart
	                  and merges the parts with medha_attn_merge() (1) */
	int llama_compat;       /* RoPE, attention and SwiGLU in the float order
	                           of llama.cpp's AVX2 CPU build without flash
	                           attention, and ggml's lane-wise integer dot
	                           products (no medha_pack), for matching it
	                           bit for bit
	                           (contrib/worker-ref.sh); prefill results then
	                           depend on the chunking; off with kv_shards (0) */
	int layer_lo, layer_hi; /* the layers it runs, [layer_lo, layer_hi)
	                           (0, 0: all); see the KV claim below */
	int tp, tp_rank;        /* tensor parallelism: this backend is rank
	                           tp_rank of tp (1, 0); see TP below */
	int ep;                 /* expert parallelism over the TP ranks: a
	                           rank holds n_expert / tp experts whole
	                           (EP below) (0) */
	int window_drop;        /* a call that claims positions first gives
	                           back the KV blocks of window layers that
	                           none of its queries or later ones sees
	                           (medha_kv_window_drop; a cache with a
	                           table per layer) (0) */
};

/*
 * TP: a backend of rank r of tp holds the share medha_tp_share() gives
 * (model.h): a range of kv heads (its cache has only those) and the
 * query heads that read them, and a range of the rows of every layer
 * matrix: Q, K, V by those heads, the output projection and down by dim
 * rows, gate and up by ffn_dim rows (views into the model's weights: a
 * rank reads only its rows, so a mapped file's other pages are never
 * touched). Shares need not be equal: 3 kv heads go 2 + 1 over tp 2. Four all-gathers per layer put the pieces
 * together: the attention output before the output projection, that
 * projection's output, SwiGLU's output before down, and down's output.
 * Each rank thus multiplies the whole of every product's input by its
 * rows, doing for every (row, token) the operations a single backend
 * does: logits are bit for bit those of tp 1 in every mode, at the cost
 * of gathering about (q_dim + 2 dim + ffn_dim) / tp floats per token and
 * layer from each rank, against 2 dim for Megatron's all-reduces after
 * an output projection and down split by their input columns (partial
 * sums added across ranks change the order of the float sums, so int8
 * activations may round differently). Norms, RoPE
 * tables and the residual stream are computed whole on every rank; the
 * logits only where asked for.
 *
 * EP (opts.ep, a mixture of experts whose n_expert tp divides): rank r
 * holds experts [r E / tp, (r + 1) E / tp) whole (their gate, up and
 * down, all rows: views into the mapped file, so the other experts'
 * pages are never read, and packs of those only) instead of its rows
 * of every expert; the router, the shared expert and the dense layers
 * stay as TP has them. Every rank routes every token (the normed rows
 * are whole on every rank), runs its experts over the rows routed to
 * them, and one all-gather (kind 6) of the experts' unweighted outputs
 * (the batch's rows grouped by expert, so a rank's are one run of
 * rows; every rank sends as many rows as the busiest rank has, the
 * rest padding) gives every rank every (token, expert) output; the
 * weighted sum is then the one process's, in its order (by weight). A
 * (row, expert) product is what one process computes, so logits are
 * bit for bit those of tp 1. Per token and routed layer that moves
 * about k dim floats in all (each rank sends its k dim / tp), against
 * k (expert_ffn_dim + dim) for TP's gathers 4 and 5.
 *
 * The all-gather is the caller's (medha_cpu_set_gather): it is called on
 * every rank with the same (layer, kind) in the same order, kind 0 the
 * attention output, 1 the output projection's, 2 SwiGLU's, 3 down's; all
 * (tp * len bytes) receives rank i's mine at all + i * len, this rank's
 * included; kinds 2 to 6 on a routed layer (cpu_impl.h). It returns
 * 0 or a MEDHA_E* code with a reason in why.
 */
typedef int (*medha_gather_fn)(void *arg, int layer, int kind,
    const void *mine, size_t len, void *all, char *why, size_t whylen);

struct medha_cpu; /* opaque: model, cache, pool, scratch */

/*
 * A backend for model m writing into cache kv (whose layers, kv heads
 * (the TP rank's share: medha_tp_share) and head size must match m). Both must outlive it; it owns neither.
 * opts may be NULL (defaults). On success *cpu is the caller's, for
 * medha_cpu_free(). Returns 0, MEDHA_EINVAL (mismatched cache, bad
 * options; opts.ep on a model without experts, or whose n_expert tp
 * does not divide) or MEDHA_ENOMEM, with a reason in why.
 */
int medha_cpu_init(struct medha_cpu **cpu, const struct medha_model *m,
    struct medha_kvcache *kv, const struct medha_cpu_opts *opts, char *why,
    size_t whylen);
void medha_cpu_free(struct medha_cpu *cpu);

/* The TP all-gather for the calls that follow (required with tp > 1). */
void medha_cpu_set_gather(struct medha_cpu *cpu, medha_gather_fn fn, void *arg);

/*
 * The KVP merge of one layer (a KVP group's backend): out (n_tokens,
 * n_heads, head_dim) and lse (n_tokens, n_heads), this group's
 * attention over the pieces it holds for every token of the batch (its
 * n_heads, the TP rank's), become, for the tokens of every sequence
 * marked merge, the attention over all groups' pieces (medha_attn_merge
 * of the groups' parts, in the same order on every group so that all
 * hold the same bits). Called on the calling thread after attention,
 * at every layer of a batch with a sequence marked merge. 0 or a
 * MEDHA_E* code with why.
 */
typedef int (*medha_merge_fn)(void *arg, int layer, float *out, float *lse,
    int n_tokens, int n_heads, int head_dim, char *why, size_t whylen);

/*
 * KVP for the calls that follow: kv (the caller's, b->n_seqs entries,
 * batch.h) for each call's batch, or NULL (every sequence alone, from
 * position 0); fn is called where kv marks a merge.
 */
void medha_cpu_set_kvp(struct medha_cpu *cpu, const struct medha_batch_kv *kv,
    medha_merge_fn fn, void *arg);

/*
 * Operator times of the last forward call, for profilers: with timing
 * on, the call reads a clock around attention and the KVP merge of
 * every layer and around the final norm and logits (a few dozen clock
 * reads a call): the monotonic clock (WALL) or the calling thread's CPU
 * time (THREAD: a pool of one thread, where the caller does every task,
 * so that a loaded machine's other work is not counted); off (the
 * default), it reads none and the times stay 0.
 */
struct medha_cpu_times {
	double attn;    /* attention, all layers run, s */
	double merge;   /* KVP merge calls, s */
	double head;    /* final norm and logits, s */
	double moe;     /* the routed FFN of every routed layer run (router,
	                   experts, shared expert, weighted sum), s */
	double experts; /* the experts a token chose, summed over the routed
	                   layers run (counted timing or not) */
};
enum { MEDHA_CPU_TIME_OFF, MEDHA_CPU_TIME_WALL, MEDHA_CPU_TIME_THREAD };
void medha_cpu_set_timing(struct medha_cpu *cpu, int how);
struct medha_cpu_times medha_cpu_times(const struct medha_cpu *cpu);

/*
 * A mixture of experts' load (issue 41): out[e] (the caller's, n
 * entries) gets the tokens routed to expert e since the backend opened,
 * summed over the routed layers it ran (a token choosing k experts
 * counts k times a layer; a TP rank counts the whole batch, as every
 * rank routes it). Returns the experts the model has (0 for a dense
 * model or one whose routed layers are not this stage's), filling at
 * most n of them.
 */
int medha_cpu_expert_tokens(const struct medha_cpu *cpu, uint64_t *out, int n);

/*
 * Run batch b. Every sequence must be allocated in the cache, have
 * pos <= its cached length and appear once; its length becomes pos +
 * n_tokens. logits (the caller's) receives medha_batch_logit_rows(b)
 * rows of vocab floats (it may be NULL when that is 0). Returns 0,
 * MEDHA_EINVAL (a malformed batch: token out of range, bad handle,
 * position past the cached length, duplicate sequence), MEDHA_ENOSPACE
 * (no KV blocks left: nothing is changed but blocks reserved for the
 * sequences) or MEDHA_ENOMEM, with a reason in why.
 */
int medha_cpu_forward(struct medha_cpu *cpu, const struct medha_batch *b,
    float *logits, char *why, size_t whylen);

/*
 * Run layers [lo, hi) of batch b, within the backend's layers
 * (opts.layer_lo/hi). h_in (n_tokens, dim), the caller's, is the
 * residual stream entering layer lo: NULL when lo is 0 (the embeddings
 * of b->tokens, which may be NULL otherwise), required when lo > 0. h_out
 * (n_tokens, dim), the caller's, receives the stream leaving layer hi - 1
 * (that layer's output added to its input, in the order the next layer
 * adds it): required when hi < n_layers, NULL when hi is the last.
 * logits, only when hi == n_layers, receives medha_batch_logit_rows(b)
 * rows as medha_cpu_forward() does; NULL skips them.
 *
 * The KV claim: a call starting at the backend's first layer (layer_lo)
 * reserves each sequence's blocks and, once its layers have run, sets
 * its cached length to pos + n_tokens (pos <= the length before); a
 * call starting later finds the positions claimed (pos + n_tokens <= the
 * length) and only writes its layers' K/V. So a batch run as calls
 * [0, k) then [k, n) on one cache sets each length once, a stage's
 * next chunk may be claimed before the later stages ran the previous
 * one, and a backend made for layers [k, n) keeps its own cache's
 * lengths. K/V are written at the global layer index. Results are bit
 * for bit those of one call over the whole range. Returns 0,
 * MEDHA_EINVAL (a malformed batch or range, with h_in, h_out or logits
 * where they do not belong or missing), MEDHA_ENOSPACE or MEDHA_ENOMEM,
 * with a reason in why.
 */
int medha_cpu_forward_layers(struct medha_cpu *cpu, const struct medha_batch *b,
    int lo, int hi, const float *h_in, float *h_out, float *logits, char *why,
    size_t whylen);

/*
 * *flops gets the FLOP/s of y = x W^T for n tokens through w (its first
 * rows, at most 4M weights) with this build's kernels and `threads`
 * threads, as the forward pass runs it (repacked, activations made
 * into the form w multiplies), best of three timings. Returns 0,
 * MEDHA_EINVAL, MEDHA_EUNSUP (a type the backend cannot multiply) or
 * MEDHA_ENOMEM.
 */
int medha_cpu_mm_rate(const struct medha_tensor *w, int n, int threads,
    double *flops);

/* The pool the backend runs on (for callers that time or reuse it). */
struct medha_threadpool *medha_cpu_pool(struct medha_cpu *cpu);

/* ---- kernels, as the forward pass uses them (also for tests) ---- */

/*
 * y (n, rows) = x (n, cols) times W transposed, for a (rows, cols)
 * weight of any supported type, with the forward pass's numerics (ref:
 * the f32 reference). tp may be NULL (one thread). Returns 0,
 * MEDHA_EUNSUP (weight type) or MEDHA_ENOMEM.
 */
int medha_cpu_matmul(struct medha_threadpool *tp, const struct medha_tensor *w,
    const float *x, int n, float *y, int ref);

/*
 * Attention for nq new tokens of one sequence (queries q (nq, n_heads,
 * head_dim), the first at position qpos) against the keys cached for
 * positions [k_lo, k_hi) of layer layer, each query seeing only keys at
 * or before its own position; query head h reads kv head h / (n_heads /
 * n_kv_heads). Scores are q.k / sqrt(head_dim). Writes out (nq, n_heads,
 * head_dim), the softmax-weighted values, and lse (nq, n_heads), the
 * natural log of the sum of exp(score) (a row that sees no key gets 0s
 * and -INFINITY). tp may be NULL. Returns 0, MEDHA_EINVAL or
 * MEDHA_ENOMEM.
 */
int medha_cpu_attn(struct medha_threadpool *tp, const struct medha_kvcache *kv,
    int seq, int layer, int n_heads, const float *q, int nq, int64_t qpos,
    int64_t k_lo, int64_t k_hi, float *out, float *lse);

/*
 * The KVP merge: k partial attention results over disjoint key sets,
 * o[i] (n, d) with lse[i] (n), into the result over their union, out
 * (n, d) and out_lse (n) (either may alias o[0] / lse[0]). Exact online
 * softmax: m = max lse_i, w_i = exp(lse_i - m), out = sum w_i o_i /
 * sum w_i, out_lse = m + log sum w_i; parts with lse -INFINITY weigh
 * nothing.
 */
void medha_attn_merge(int k, const float *const *o, const float *const *lse,
    int n, int d, float *out, float *out_lse);

/* e^x for n floats (dst may be src), the one exp the backend uses. */
void medha_cpu_vexp(const float *src, float *dst, int64_t n);

/* ---- internals of cpu*.c (declared here for the tests as well) ---- */

enum {
	MEDHA_ACT_Q8 = 1,   /* int8 blocks of 32 with scales (and sums) */
	MEDHA_ACT_F16 = 2,  /* rounded through f16 */
	MEDHA_ACT_BF16 = 4, /* rounded through bf16 */
};

/*
 * Activations entering matrix products, with the forms made of them.
 * The Q8 form is kept in tiles of MEDHA_ACT_TILE tokens, block-major
 * within a tile: token t's block b is entry medha_act_blk(a, t, b) of
 * qd, qs and qi and 32 bytes at 32 times that in q, so the tokens a
 * kernel takes together are a fixed stride apart from one pointer (a
 * register tile of eight tokens once kept 32 pointers, more than the
 * registers, and reloaded them from the stack in its inner loop).
 */
#define MEDHA_ACT_TILE 8

struct medha_act {
	const float *x;     /* (n, k) the rows, the caller's */
	int n;              /* rows (tokens) */
	int k;              /* row length */
	int have;           /* MEDHA_ACT_* forms made since medha_act_set */
	int8_t *q;          /* quants, tiled (above) */
	float *qd;          /* block scales, f16-rounded, tiled */
	float *qs;          /* scale * sum of quants, f16-rounded, tiled */
	int32_t *qi;        /* sum of quants, tiled */
	int32_t *qi16;      /* sum of a block's first 16 quants, tiled */
	float *r16;         /* (n, k) x rounded to f16 */
	float *rbf;         /* (n, k) x rounded to bf16 */
	size_t cap;         /* elements room in the arrays above */
	float *scratch;     /* (threads, scratch_per) per-thread scratch */
	size_t scratch_per; /* floats per thread */
	size_t scratch_cap; /* floats allocated */
};

/* token t's block b in the tiled Q8 form */
static inline size_t
medha_act_blk(const struct medha_act *a, int t, int b)
{
	return ((size_t)(t / MEDHA_ACT_TILE) * (size_t)(a->k / MEDHA_QK) +
	           (size_t)b) * MEDHA_ACT_TILE +
	    (size_t)(t % MEDHA_ACT_TILE);
}

/*
 * A Q8_0, Q4_0 or Q4_1 weight repacked for the integer kernel of builds
 * (the K-quants, Q5_0, Q5_1, IQ4_NL and IQ4_XS: the layout of
 * cpu_mm_packk.c, which extends this one)
 * with AVX512-VNNI or AVX2 (with FMA and F16C): rows in groups of eight
 * (the last padded with zero rows), a group's blocks one after another,
 * each block the eight rows' scales (f16; Q4_1: then their mins) and
 * their quants interleaved four bytes at a time (VNNI: Q8_0's made
 * unsigned, + 128), so that one vpdpbusd (AVX2: vpmaddubsw) takes four
 * products of each of the eight rows. Each (row, token) dot
 * product sums a block exactly in int32, then acc = fma(dw * dx,
 * (float)sum, acc) (Q4_1: then acc = fma(m, s, acc)), block by block,
 * whatever the batch and the rows around it.
 */
struct medha_pack {
	int type;             /* the weight's ggml type */
	int rows, k;          /* its shape */
	unsigned char *data;  /* (groups, k / 32, block bytes) */
};

/*
 * Repack w into p (free with medha_pack_free). 0; MEDHA_EUNSUP where
 * the build has no packed kernel or the type none (multiply w itself);
 * MEDHA_ENOMEM.
 */
int medha_pack_make(struct medha_pack *p, const struct medha_tensor *w);
void medha_pack_free(struct medha_pack *p);

/* One product of a batch: y (n, rows) = x W^T. */
struct medha_mm {
	const struct medha_tensor *w; /* (rows, k) */
	float *y;                     /* (n, rows) */
	const struct medha_pack *pk;  /* w repacked, or NULL */
};

/*
 * Point a at x (n, k), forgetting the forms made, and grow its buffers
 * (owned by a; zero a first, free with medha_act_free). 0 or
 * MEDHA_ENOMEM (a is then empty).
 */
int
medha_act_set(struct medha_act *a, const float *x, int n, int k, int n_threads);
void medha_act_free(struct medha_act *a);
/* The form (MEDHA_ACT_*, or 0 for x itself) a weight type multiplies. */
int medha_act_form(int type, int ref);
/* Make the forms in need (MEDHA_ACT_* bits) that a lacks. */
void
medha_act_prepare(struct medha_threadpool *tp, struct medha_act *a, int need);
/*
 * Make the forms in need of rows [t0, t1) alone: a task's share, by the
 * thread that just wrote those rows (they are in its cache); once every
 * row is made, the caller adds need to a->have. The same bits as
 * medha_act_prepare.
 */
void medha_act_make_rows(struct medha_act *a, int need, int t0, int t1);
/* The same for elements [e0, e1) of row t, both multiples of MEDHA_QK. */
void medha_act_make_span(struct medha_act *a, int need, int t, int e0,
    int e1);
/* The forms (MEDHA_ACT_* bits) the products mm[0 .. nmm) take. */
int medha_mm_forms(const struct medha_mm *mm, int nmm, int ref);
/* Up to 7 products sharing the input a, in one parallel region. */
int medha_mm_run(struct medha_threadpool *tp, struct medha_act *a,
    const struct medha_mm *mm, int nmm, int ref);

/* y = x / rms(x) * w, n elements (ggml's order of operations). */
void
medha_cpu_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* cos, sin pairs (n_rot / 2 of each, interleaved) for position pos. */
void medha_cpu_rope_table(float *cs, int64_t pos, int n_rot, float theta_base,
    const float *freqs);
/* Rotate adjacent pairs of the first n_rot elements of each head. */
void
medha_cpu_rope(float *v, int n_heads, int head_dim, int n_rot, const float *cs);
/* The same with the fmas of llama.cpp's build, for llama_compat. */
void medha_cpu_rope_llama(float *v, int n_heads, int head_dim, int n_rot,
    const float *cs);
/* The table of RoPE kind r (model.h, medha_model_rope) at pos. */
void medha_cpu_rope_table_ext(float *cs, int64_t pos, int n_rot,
    const struct medha_rope *r);
/* Rotate pairs as medha_cpu_rope (neox: element i with i + n_rot / 2;
   compat: medha_cpu_rope_llama's fmas). */
void medha_cpu_rope_ext(float *v, int n_heads, int head_dim, int n_rot,
    const float *cs, int neox, int compat);
/* g = gelu_tanh(g) * u over n (table: ggml's f16 table's values). */
void medha_cpu_geglu(float *g, const float *u, int64_t n, int table);
/* x = cap * tanh(x / cap) over n. */
void medha_cpu_softcap(float *x, int64_t n, float cap);
/* g = silu(g) * u = g / (1 + exp(-g)) * u over n elements. */
void medha_cpu_swiglu(float *g, const float *u, int64_t n);
/* The same and e^x with ggml's AVX2 exp (ggml_v_expf), for llama_compat. */
void medha_cpu_swiglu_llama(float *g, const float *u, int64_t n);
void medha_cpu_vexp_llama(const float *src, float *dst, int64_t n);

/* One sequence's part of an attention region (see medha_cpu_attn). */
struct medha_attn_seq {
	int seq;            /* KV cache sequence */
	const float *q;     /* (nq, n_heads, head_dim) */
	int nq;             /* query tokens */
	int64_t qpos;       /* position of the first */
	int64_t k_lo, k_hi; /* key positions [k_lo, k_hi) */
	float *out;         /* (nq, n_heads, head_dim) */
	float *lse;         /* (nq, n_heads) */
	int compat;         /* llama.cpp's order (opts.llama_compat); needs
	                       k_lo 0 */
	/* or NULL: where out is rows act_t0 .. of act (struct medha_act,
	   below), whose forms act_need the task that finishes a query's
	   kv head makes of that head's outputs (medha_act_make_span) */
	struct medha_act *act;
	int act_t0;
	int act_need;
	/* the layer's attention (model.h): a query at p sees keys p - window
	   < k <= p (0: all before it); scores q.k * scale (0: 1 /
	   sqrt(head_dim)), then softcap * tanh(score / softcap) (0: none) */
	int64_t window;
	float scale;
	float softcap;
	/* llama4's chunked attention: a query at p sees keys in its chunk,
	   floor((p + base) / chunk) * chunk - base <= k (0: none); base the
	   position key 0 of the cache stands for (KVP's piece) */
	int64_t chunk;
	int64_t base;
};

/* The first key a query of s at position p may see (its window or
   chunk; 0 where neither leaves keys out). */
static inline int64_t
medha_attn_first_key(const struct medha_attn_seq *s, int64_t p)
{
	int64_t lo = 0, c;

	if (s->window > 0 && lo < p + 1 - s->window)
		lo = p + 1 - s->window;
	if (s->chunk > 0 &&
	    lo < (c = (p + s->base) / s->chunk * s->chunk - s->base))
		lo = c;
	return lo;
}

/* Floats of per-thread scratch attention needs for keys up to nkeys. */
size_t
medha_attn_scratch(const struct medha_kvcache *kv, int n_heads, int64_t nkeys);
/*
 * Attention for ns sequences of one layer in one parallel region;
 * scratch holds medha_attn_scratch() floats per thread. 0 or
 * MEDHA_ENOMEM.
 */
int medha_attn_run(struct medha_threadpool *tp, const struct medha_kvcache *kv,
    int layer, int n_heads, const struct medha_attn_seq *s, int ns,
    float *scratch, size_t scratch_per);

#endif

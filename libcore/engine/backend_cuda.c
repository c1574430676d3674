/*
 * backend_cuda.c: the cuda backend (backend_cuda.h): opening it on a
 * device, its function table, and the forward pass over a range of
 * layers, in the order of the cpu backend (cpu/cpu.c): the embeddings
 * (or the hidden states handed in, uploaded), then per layer RMSNorm,
 * the fused Q/K/V product, RoPE at each token's position, the K/V
 * appended to each sequence's blocks, attention of each sequence's
 * tokens against its cache, the output projection (its residual add
 * fused into the product: beta 1), RMSNorm, the fused gate/up product,
 * SwiGLU, down (its add fused too); then the final norm and the logits
 * of the rows asked for, and the greedy tokens by argmax on the GPU.
 * The other families' operators come from the model's description
 * (model.h's struct medha_arch, read per layer as the cpu backend reads
 * it): the embeddings' scale, Q/K/V biases, Q/K norms per head, RoPE of
 * the layer's kind (NEOX or NORM, scaled: c->rope), the layer's window
 * and the attention's soft-cap (in the attention kernels), post-norms
 * (the product then out of place, normed, added), GELU, and the final
 * soft-cap of the logits.
 * With TP each rank's output projection and down give a partial sum over
 * its heads' and ffn rows' columns, all-reduced (NCCL, or the caller's
 * collectives in host memory) and added; with KVP the attention of
 * merged sequences is merged with the other groups' (backend_cuda_coll.c).
 * A decode step (every sequence one token) is replayed from a CUDA graph
 * where it can be (backend_cuda_graph.c).
 */
#include "engine/backend_cuda_impl.h"

#include "model/gguf.h"
#include "sched/pred.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define K(call, what) CU(call, what)

/* ---- the forward pass ---- */

/* 1 if some sequence of f merges its attention with other groups. */
static int
merging(const struct medha_fwd *f)
{
	if (f->kv == NULL)
		return 0;
	for (int i = 0; i < f->b->n_seqs; i++)
		if (f->kv[i].merge)
			return 1;
	return 0;
}

/* A decode step: every sequence one token, nothing merged. */
int
cuda_is_decode(const struct medha_fwd *f)
{
	return f->b->n_tokens == f->b->n_seqs && !merging(f);
}

/* The attention workspace for this batch's shape (before a capture:
   a graph reads the buffer, so a new one frees the graphs). */
int
cuda_attn_work(struct cuda_be *c, char *why, size_t whylen)
{
	struct medha_k_attn a = {&c->kvl[c->lo], &c->desc.s, c->qkv, c->qkvd,
	    c->nh, 1.0f / sqrtf((float)c->c.head_dim), c->att, NULL, NULL,
	    NULL, 0, 0, 0, 0};
	size_t n = medha_k_attn_workspace(&a), n2;

	a.out = NULL;
	a.out_f32 = c->attf;
	a.lse = c->lse;
	n2 = medha_k_attn_workspace(&a);
	if (n2 > n)
		n = n2;
	if (n <= c->awork_cap)
		return 0;
	cuda_graph_free(c);
	cudaFree(c->awork);
	c->awork = NULL;
	c->awork_cap = 0;
	if (cuda_malloc(&c->awork, n, why, whylen, "attention workspace") != 0)
		return MEDHA_ENOMEM;
	c->awork_cap = n;
	return 0;
}

/* The scale of the attention's scores: the architecture's, or 1 /
   sqrt(head_dim). (Where llama.cpp scales q after RoPE instead, q_prescale,
   the kernels scale the scores: the same numbers, other roundings.) */
static float
attn_scale(const struct medha_model_config *mc)
{
	return mc->a.attn_scale != 0 ? mc->a.attn_scale
	                             : 1.0f / sqrtf((float)mc->head_dim);
}

/*
 * A row-parallel product's output y, summed over the ranks (tp > 1),
 * normed by post (gemma's post-norms; NULL: none) and added to the
 * residual stream.
 */
static int
reduce_add(struct cuda_be *c, int l, int kind, int n, const float *post,
    char *why, size_t whylen)
{
	const size_t len = (size_t)n * c->c.dim;
	int rc;

	if (c->tp > 1 &&
	    (rc = cuda_all_reduce(c, l, kind, c->y, len, why, whylen)) != 0)
		return rc;
	if (post != NULL)
		K(medha_k_rmsnorm_f32(c->y, c->y, post, n, c->c.dim,
		      c->c.norm_eps, c->st),
		    "medha_k_rmsnorm_f32 (post-norm)");
	K(medha_k_add(c->x, c->y, (int64_t)len, c->st), "medha_k_add");
	return 0;
}

/* Q and K of the batch's rows, in c->qkv, as layer l's description says:
   biases, each head's norm, RoPE of the layer's kind. */
static int
qk(struct cuda_be *c, const struct cuda_layer *L, int l, int n, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int64_t *tpos = (const int64_t *)(c->desc.d + c->desc.o_tpos);
	const struct medha_k_rope *r = &c->rope[medha_layer_rope(mc, l)];

	if (L->bqkv != NULL)
		K(medha_k_bias_add(c->qkv, c->qkvd, n, L->bqkv, c->qkvd, c->st),
		    "medha_k_bias_add");
	if (L->qn != NULL) {
		K(medha_k_rmsnorm_heads(c->qkv, c->qkvd, n, c->nh,
		      mc->head_dim, L->qn, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_heads (Q)");
		K(medha_k_rmsnorm_heads(c->qkv + c->qd, c->qkvd, n, c->nkv,
		      mc->head_dim, L->kn, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_heads (K)");
	}
	K(medha_k_rope_ext(c->qkv, tpos, n, c->qkvd, c->nh, mc->head_dim,
	      mc->n_rot, r, c->st),
	    "medha_k_rope_ext (Q)");
	K(medha_k_rope_ext(c->qkv + c->qd, tpos, n, c->qkvd, c->nkv,
	      mc->head_dim, mc->n_rot, r, c->st),
	    "medha_k_rope_ext (K)");
	return 0;
}

/* Layer l over the batch in c->desc. */
static int
layer(struct cuda_be *c, const struct medha_fwd *f, int l, int merge,
    char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct cuda_layer *L = &c->L[l];
	const int n = f->b->n_tokens, d = mc->dim;
	/* the product adds itself into x (beta 1) where nothing comes
	   between: one rank, no post-norm */
	const int one_a = c->tp == 1 && L->post_a == NULL;
	const int one_f = c->tp == 1 && L->post_f == NULL;
	struct medha_k_attn a = {&c->kvl[l], &c->desc.s, c->qkv, c->qkvd,
	    c->nh, attn_scale(mc), merge ? NULL : c->att,
	    merge ? c->attf : NULL, merge ? c->lse : NULL, c->awork,
	    c->awork_cap, 1, /* planned: cuda_run_layers made the plan */
	    mc->a.attn_softcap, medha_layer_window(mc, l)};
	int rc;

	K(medha_k_rmsnorm(c->xn, c->x, L->attn_norm, n, d, mc->norm_eps,
	      c->st),
	    "medha_k_rmsnorm");
	if ((rc = cuda_gemm(c, L->wqkv, c->qkvd, d, c->xn, n, c->qkv, c->qkvd,
	         0, why, whylen)) != 0)
		return rc;
	if ((rc = qk(c, L, l, n, why, whylen)) != 0)
		return rc;
	K(medha_k_kv_append(&c->kvl[l], &c->desc.s, c->qkv + c->qd, c->qkvd,
	      c->qkv + c->qd + c->kvd, c->qkvd, c->st),
	    "medha_k_kv_append");
	if ((rc = cuda_mark(c, 0, why, whylen)) != 0)
		return rc;
	K(medha_k_attn(&a, c->st), "medha_k_attn");
	if ((rc = cuda_mark(c, 0, why, whylen)) != 0)
		return rc;
	if (merge && ((rc = cuda_mark(c, 1, why, whylen)) != 0 ||
	                 (rc = cuda_kvp_merge(c, l, n, why, whylen)) != 0 ||
	                 (rc = cuda_mark(c, 1, why, whylen)) != 0))
		return rc;
	if ((rc = cuda_gemm(c, L->wo, d, c->qd, c->att, n,
	         one_a ? c->x : c->y, d, one_a ? 1 : 0, why, whylen)) != 0)
		return rc;
	if (!one_a &&
	    (rc = reduce_add(c, l, 0, n, L->post_a, why, whylen)) != 0)
		return rc;
	K(medha_k_rmsnorm(c->xn, c->x, L->ffn_norm, n, d, mc->norm_eps,
	      c->st),
	    "medha_k_rmsnorm");
	if ((rc = cuda_gemm(c, L->wgu, 2 * c->ff, d, c->xn, n, c->gu,
	         2 * c->ff, 0, why, whylen)) != 0)
		return rc;
	if (mc->a.ffn_act == MEDHA_FFN_GELU)
		K(medha_k_geglu(c->act, c->gu, 2 * c->ff, c->gu + c->ff,
		      2 * c->ff, n, c->ff, c->st),
		    "medha_k_geglu");
	else
		K(medha_k_swiglu(c->act, c->gu, 2 * c->ff, c->gu + c->ff,
		      2 * c->ff, n, c->ff, c->st),
		    "medha_k_swiglu");
	if ((rc = cuda_gemm(c, L->wdown, d, c->ff, c->act, n,
	         one_f ? c->x : c->y, d, one_f ? 1 : 0, why, whylen)) != 0)
		return rc;
	if (!one_f &&
	    (rc = reduce_add(c, l, 1, n, L->post_f, why, whylen)) != 0)
		return rc;
	return 0;
}

/*
 * The device part of a forward call, the descriptors in place: the
 * embeddings at layer 0 (h_in is uploaded before), the attention's plan
 * (once: every layer's attention uses it), the layers, and with nrows
 * the final norm, the logits and their argmax. Nothing here
 * synchronizes or touches host memory unless a collective or a merge
 * goes through the host, so a decode step can be captured.
 */
int
cuda_run_layers(struct cuda_be *c, const struct medha_fwd *f, int nrows,
    char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int n = f->b->n_tokens, d = mc->dim, merge = merging(f);
	struct medha_k_attn a = {&c->kvl[f->layer_lo], &c->desc.s, c->qkv,
	    c->qkvd, c->nh, 1.0f / sqrtf((float)mc->head_dim), c->att, NULL,
	    NULL, c->awork, c->awork_cap, 0, 0, 0};
	int rc;

	if (f->layer_lo == 0)
		K(medha_k_embed(c->x, c->embd,
		      (const int32_t *)(c->desc.d + c->desc.o_tok), n, d,
		      c->st),
		    "medha_k_embed");
	if (f->layer_lo == 0 && mc->a.embd_scale != 0 &&
	    mc->a.embd_scale != 1)
		K(medha_k_scale(c->x, (int64_t)n * d, mc->a.embd_scale, c->st),
		    "medha_k_scale (embeddings)");
	/* the attention's plan: the batch's, the same for every layer */
	K(medha_k_attn_plan(&a, c->st), "medha_k_attn_plan");
	for (int l = f->layer_lo; l < f->layer_hi; l++) {
		c->cwhy[0] = '\0';
		if ((rc = layer(c, f, l, merge, c->cwhy, sizeof(c->cwhy))) != 0)
			return medha_why(why, whylen, rc, "layer %d: %s", l,
			    c->cwhy);
	}
	if (nrows == 0)
		return 0;
	if ((rc = cuda_mark(c, 2, why, whylen)) != 0)
		return rc;
	K(medha_k_gather_rows(c->hrows, c->x,
	      (const int32_t *)(c->desc.d + c->desc.o_rows), nrows, d, c->st),
	    "medha_k_gather_rows");
	K(medha_k_rmsnorm(c->hn, c->hrows, c->onorm, nrows, d, mc->norm_eps,
	      c->st),
	    "medha_k_rmsnorm (output)");
	if ((rc = cuda_gemm(c, c->out, mc->vocab, d, c->hn, nrows, c->logits,
	         mc->vocab, 0, why, whylen)) != 0)
		return rc;
	if (mc->a.final_softcap != 0)
		K(medha_k_softcap(c->logits, (int64_t)nrows * mc->vocab,
		      mc->a.final_softcap, c->st),
		    "medha_k_softcap (logits)");
	K(medha_k_argmax(c->ids, c->logits, nrows, mc->vocab, c->st),
	    "medha_k_argmax");
	return cuda_mark(c, 2, why, whylen);
}

/* Blocks for every claimed appending sequence, and a block of its own
 * for each it will write that a fork shares (copied on the stream ahead
 * of the batch). */
static int
reserve(struct cuda_be *c, const struct medha_fwd *f, char *why,
    size_t whylen)
{
	for (int i = 0; i < f->b->n_seqs; i++) {
		const struct medha_batch_seq *s = &f->b->seq[i];
		int64_t nk = cuda_keys_of(c, f, i);
		int rc;
		if (f->kv != NULL && !f->kv[i].append)
			continue;
		if ((rc = medha_kvb_reserve(&c->bt, s->seq, nk)) != 0)
			return medha_why(why, whylen, rc,
			    "sequence %d: KV room for %lld positions: %s",
			    s->seq, (long long)nk, medha_strerror(rc));
		if ((rc = medha_kvb_own(&c->bt, s->seq, nk - s->n_tokens,
		         s->n_tokens)) != 0)
			return medha_why(why, whylen, rc,
			    "sequence %d: a block of its own for positions "
			    "%lld..%lld: %s",
			    s->seq, (long long)(nk - s->n_tokens),
			    (long long)nk - 1,
			    rc == MEDHA_EIO ? c->cwhy : medha_strerror(rc));
	}
	return 0;
}

/* The call's inputs on the device and its layers run, eagerly. */
static int
eager(struct cuda_be *c, const struct medha_fwd *f, int nrows, char *why,
    size_t whylen)
{
	int rc;

	if ((rc = cuda_desc_build(c, f, 0, why, whylen)) != 0 ||
	    (rc = cuda_attn_work(c, why, whylen)) != 0)
		return rc;
	if (f->h_in != NULL)
		CU(cudaMemcpyAsync(c->x, f->h_in,
		       sizeof(float) * (size_t)f->b->n_tokens * c->c.dim,
		       cudaMemcpyHostToDevice, c->st),
		    "uploading hidden states");
	return cuda_run_layers(c, f, nrows, why, whylen);
}

static int
cuda_forward(void *impl, const struct medha_fwd *f, char *why, size_t whylen)
{
	struct cuda_be *c = impl;
	const struct medha_batch *b = f->b;
	const int claim = f->layer_lo == c->lo;
	int nrows = 0, rc, done = 0;

	c->f = f;
	c->timing = f->times != NULL;
	c->n_ev = 0;
	/* the calling thread's current device may be another */
	CU(cudaSetDevice(c->dev), "cudaSetDevice");
	if ((rc = cuda_check_batch(c, f, claim, why, whylen)) != 0)
		return rc;
	if (c->tp > 1 && c->nccl == NULL) {
		if (f->comm == NULL)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "TP rank %d of %d: no collectives", c->tpr, c->tp);
		if (c->coll == MEDHA_COLL_NCCL &&
		    (rc = cuda_comm_init(c, f->comm, why, whylen)) != 0)
			return rc;
	}
	if (f->layer_hi == c->c.n_layers &&
	    (f->logits != NULL || f->samplers != NULL))
		nrows = (int)medha_batch_logit_rows(b);
	if (claim && (rc = reserve(c, f, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_grow(c, b->n_tokens, nrows, why, whylen)) != 0)
		return rc;
	if (c->graphs && cuda_is_decode(f) && !c->timing &&
	    (rc = cuda_graph_step(c, f, nrows, &done, why, whylen)) != 0)
		return rc;
	if (!done && (rc = eager(c, f, nrows, why, whylen)) != 0)
		return rc;
	if (f->h_out != NULL)
		CU(cudaMemcpyAsync(f->h_out, c->x,
		       sizeof(float) * (size_t)b->n_tokens * c->c.dim,
		       cudaMemcpyDeviceToHost, c->st),
		    "downloading hidden states");
	SYNC("the forward pass");
	if (c->timing && (rc = cuda_times(c, f->times, why, whylen)) != 0)
		return rc;
	if (claim)
		for (int i = 0; i < b->n_seqs; i++)
			if (f->kv == NULL || f->kv[i].append)
				(void)medha_kvb_set_len(&c->bt,
				    b->seq[i].seq, cuda_keys_of(c, f, i));
	return nrows > 0 ? cuda_head_out(c, f, nrows, why, whylen) : 0;
}

/* ---- the rest of the function table ---- */

static int
cuda_seq_alloc(void *impl, int *seq)
{
	return medha_kvb_seq_alloc(&((struct cuda_be *)impl)->bt, seq);
}

static void
cuda_seq_free(void *impl, int seq)
{
	medha_kvb_seq_free(&((struct cuda_be *)impl)->bt, seq);
}

static int64_t
cuda_seq_len(void *impl, int seq)
{
	return medha_kvb_len(&((struct cuda_be *)impl)->bt, seq);
}

static int64_t
cuda_free_blocks(void *impl)
{
	return ((struct cuda_be *)impl)->bt.nfree;
}

/* The cache was cleared at open and only ever holds finite K/V: a
   profiler's positions need blocks and a length, nothing written. */
static int
cuda_seq_fill(void *impl, int seq, int64_t n)
{
	struct cuda_be *c = impl;
	int rc;

	if (medha_kvb_len(&c->bt, seq) < 0 || n < 0)
		return MEDHA_EINVAL;
	if ((rc = medha_kvb_reserve(&c->bt, seq, n)) != 0)
		return rc;
	return medha_kvb_set_len(&c->bt, seq, n);
}

/* Prefix caching: the tables share dst's full blocks with src and copy
   the partial one on the device (kv_copy, on the stream: the next
   batch, queued after it, reads it). */
static int
cuda_seq_fork(void *impl, int dst, int src, int64_t from, int64_t to)
{
	struct cuda_be *c = impl;

	if (cudaSetDevice(c->dev) != 0)
		return MEDHA_EIO;
	return medha_kvb_fork(&c->bt, dst, src, from, to);
}

static int
cuda_seq_trim(void *impl, int seq, int64_t n)
{
	struct cuda_be *c = impl;
	int64_t len = medha_kvb_len(&c->bt, seq);

	if (len < 0 || n > len)
		return MEDHA_EINVAL;
	return medha_kvb_set_len(&c->bt, seq, n);
}

static void
cuda_idle(void *impl)
{
	(void)impl; /* no threads to put to sleep: the GPU idles itself */
}

static void
cuda_close(void *impl)
{
	struct cuda_be *c = impl;

	if (c == NULL)
		return;
	/* first: an all-reduce left queued by a failed call, its peer gone,
	   would keep the stream from ever finishing */
	/* first: an all-reduce left queued by a failed call, its peer gone,
	   would keep the stream from ever finishing */
	if (c->nccl != NULL)
		cuda_nccl_abort(c);
	if (c->st != NULL)
		cudaStreamSynchronize(c->st);
	cuda_graph_free(c);
	cuda_events_free(c);
	cuda_free_weights(c);
	cuda_kv_free(c);
	cudaFree(c->x), cudaFree(c->qkv), cudaFree(c->y), cudaFree(c->gu);
	cudaFree(c->attf), cudaFree(c->lse), cudaFree(c->xn);
	cudaFree(c->att), cudaFree(c->act), cudaFree(c->hrows);
	cudaFree(c->hn), cudaFree(c->logits), cudaFree(c->ids);
	cudaFree(c->awork), cudaFree(c->ltwork), cudaFree(c->mrgd);
	cudaFree(c->desc.d);
	cudaFreeHost(c->desc.h);
	cudaFreeHost(c->hids);
	cudaFreeHost(c->hb);
	free(c->mrg);
	cuda_lt_close(c);
	cuda_nccl_close(c);
	if (c->st != NULL)
		cudaStreamDestroy(c->st);
	free(c);
}

static const struct medha_backend_ops cuda_ops = {
    .seq_alloc = cuda_seq_alloc,
    .seq_free = cuda_seq_free,
    .forward = cuda_forward,
    .close = cuda_close,
    .seq_len = cuda_seq_len,
    .free_blocks = cuda_free_blocks,
    .idle = cuda_idle,
    .comm_init = cuda_comm_init,
    .seq_fill = cuda_seq_fill,
    .seq_fork = cuda_seq_fork,
    .seq_trim = cuda_seq_trim,
};

/* ---- opening one ---- */

/* The device, or why there is none. */
static int
device(struct cuda_be *c, const struct medha_backend_params *p, char *why,
    size_t whylen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n < 1)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: no CUDA device: %s",
		    e != cudaSuccess ? cudaGetErrorString(e)
		                     : "none found");
	if (p->device < 0 || p->device >= n)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: device %d: there are %d (0 to %d)", p->device, n,
		    n - 1);
	c->dev = p->device;
	CU(cudaSetDevice(c->dev), "cudaSetDevice");
	CU(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking),
	    "cudaStreamCreate");
	return 0;
}

/* Layers, TP share, widths and switches from p and the shape in c->c. */
static int
layout(struct cuda_be *c, const struct medha_backend_params *p, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const char *e;

	c->lo = 0;
	c->hi = mc->n_layers;
	if (p->spp > 1) {
		if (p->spp > mc->n_layers || p->stage < 0 ||
		    p->stage >= p->spp)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "stage %d of %d: the model has %d layers",
			    p->stage, p->spp, mc->n_layers);
		medha_stage_layers(mc->n_layers, p->spp, p->stage, &c->lo,
		    &c->hi);
	}
	c->tp = p->tp > 1 ? p->tp : 1;
	c->tpr = p->tp > 1 ? p->tp_rank : 0;
	if (medha_tp_share(mc, c->tp, c->tpr, &c->sh) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d: the model has %d kv heads (tp may be "
		    "at most that, or %d)",
		    c->tpr, c->tp, mc->n_kv_heads, MEDHA_TP_MAX);
	c->nh = c->sh.h_hi - c->sh.h_lo;
	c->nkv = c->sh.kv_hi - c->sh.kv_lo;
	c->qd = c->nh * mc->head_dim;
	c->kvd = c->nkv * mc->head_dim;
	c->qkvd = c->qd + 2 * c->kvd;
	c->ff = c->sh.f_hi - c->sh.f_lo;
	if (p->kv_type != 0 && p->kv_type != MEDHA_KV_F16 &&
	    p->kv_type != MEDHA_KV_BF16)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: KV type %d: f16 (%d) or bf16 (%d, the default) "
		    "only",
		    p->kv_type, MEDHA_KV_F16, MEDHA_KV_BF16);
	c->kv_type = p->kv_type == MEDHA_KV_F16 ? MEDHA_KV_F16 : MEDHA_KV_BF16;
	c->max_seqs = p->max_seqs > 0 ? p->max_seqs : CUDA_MAX_SEQS;
	c->coll = p->coll;
	e = getenv("MEDHA_CUDA_GEMM");
	c->fast = e != NULL && strcmp(e, "fast") == 0;
	e = getenv("MEDHA_CUDA_GEMM_M");
	c->gemm_m = e != NULL && atoi(e) > 0 ? atoi(e) : 128;
	e = getenv("MEDHA_NCCL_TIMEOUT");
	c->nccl_timeout = e != NULL && atof(e) > 0 ? atof(e) : 120;
	e = getenv("MEDHA_CUDA_GRAPHS");
	c->graphs = !(e != NULL && strcmp(e, "0") == 0);
	if (p->max_seqs < 0 || p->kv_blocks < 0 || p->mem_util < 0 ||
	    p->mem_util > 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: negative sequences (%d) or KV blocks (%lld), or "
		    "mem_util %g outside [0, 1]",
		    p->max_seqs, (long long)p->kv_blocks, p->mem_util);
	return 0;
}

/* KV blocks: p's, or what mem_util of the free memory at open leaves. */
static int
kv_blocks(struct cuda_be *c, const struct medha_backend_params *p,
    size_t free0, int64_t *n, char *why, size_t whylen)
{
	size_t fr, tot, per = cuda_kv_block_bytes(c);
	double util = p->mem_util > 0 ? p->mem_util : 0.9, budget;

	if (p->kv_blocks > 0) {
		*n = p->kv_blocks;
		return 0;
	}
	CU(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
	/* what weights and scratch took since open comes off the share */
	budget = (double)free0 * util - ((double)free0 - (double)fr);
	*n = budget > 0 ? (int64_t)(budget / (double)per) : 0;
	if (*n > INT32_MAX)
		*n = INT32_MAX;
	if (*n < 1)
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "cuda: no room for a KV cache: %.2f GB free at open, "
		    "mem_util %.2f, weights and scratch took %.2f GB",
		    (double)free0 / 1e9, util,
		    ((double)free0 - (double)fr) / 1e9);
	return 0;
}

/*
 * What the cuda backend cannot run of a model, refused naming it (the
 * cpu backend runs every model medha loads): the attention kernels have
 * instances for head sizes 64, 128 and 256 only (256, Gemma 2/3's, on
 * the simple kernel alone: kernels/attn.cu).
 */
static int
runnable(const struct medha_model_config *mc, char *why, size_t whylen)
{
	if (mc->head_dim != 64 && mc->head_dim != 128 && mc->head_dim != 256)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: %s: a head size (attention.key_length) of %d is "
		    "not supported (64, 128 or 256; the cpu backend runs it)",
		    mc->a.name[0] != '\0' ? mc->a.name : "model",
		    mc->head_dim);
	return 0;
}

/* RoPE of each kind (medha_layer_rope) from the model's description, as
   the cpu backend makes its tables (medha_model_rope); m NULL (random
   weights): no frequency factors. */
static void
ropes(struct cuda_be *c, const struct medha_model *m)
{
	struct medha_model shape = {.c = c->c};

	for (int kind = 0; kind < 2; kind++) {
		struct medha_rope r;
		medha_model_rope(m != NULL ? m : &shape, kind, &r);
		c->rope[kind] = (struct medha_k_rope){r.base, r.freq_scale,
		    r.ext_factor, r.mscale, {r.corr[0], r.corr[1]},
		    kind == 0 && r.freqs != NULL ? c->freqs : NULL,
		    c->c.a.rope_type == MEDHA_ROPE_NEOX};
		if (kind == 1 && !(r.base > 0)) /* no window layer's own */
			c->rope[1] = c->rope[0];
	}
}

/* The backend on c (shape in c->c), weights from m or random. */
static int
make(struct medha_backend **be, struct cuda_be *c,
    const struct medha_model *m, const struct medha_backend_params *p,
    char *why, size_t whylen)
{
	struct medha_backend_info in;
	size_t free0, tot;
	int64_t nb = 0;
	int rc;

	if ((rc = device(c, p, why, whylen)) != 0 ||
	    (rc = layout(c, p, why, whylen)) != 0)
		return rc;
	CU(cudaMemGetInfo(&free0, &tot), "cudaMemGetInfo");
	if ((rc = cuda_lt_open(c, why, whylen)) != 0 ||
	    (rc = cuda_malloc(&c->ltwork, CUDA_LT_WORK, why, whylen,
	         "cuBLASLt's workspace")) != 0)
		return rc;
	if (c->tp > 1 && c->coll == MEDHA_COLL_NCCL &&
	    (rc = cuda_nccl_load(c, why, whylen)) != 0)
		return rc;
	rc = m != NULL ? cuda_load_gguf(c, m, why, whylen)
	               : cuda_load_random(c, p->seed, why, whylen);
	ropes(c, m); /* after the load: c->freqs */
	if (rc != 0 || (rc = cuda_grow(c, CUDA_TOKENS, 1, why, whylen)) != 0 ||
	    (rc = kv_blocks(c, p, free0, &nb, why, whylen)) != 0 ||
	    (rc = cuda_kv_init(c, nb, why, whylen)) != 0)
		return rc;
	CU(cudaStreamSynchronize(c->st), "opening");
	in = (struct medha_backend_info){.name = "cuda",
	    .shape = c->c,
	    .layer_lo = c->lo,
	    .layer_hi = c->hi,
	    .block_size = MEDHA_KV_BLOCK,
	    .n_blocks = c->bt.n_blocks,
	    .max_seqs = c->max_seqs,
	    .kv_type = c->kv_type,
	    .tp = c->tp,
	    .tp_rank = c->tpr};
	if ((rc = medha_backend_new(be, &cuda_ops, c, &in)) != 0)
		return medha_why(why, whylen, rc, "out of memory");
	return 0;
}

int
medha_backend_cuda_init(struct medha_backend **be, const struct medha_model *m,
    const struct medha_backend_params *p, char *why, size_t whylen)
{
	struct cuda_be *c;
	int rc;

	*be = NULL;
	if ((rc = runnable(&m->c, why, whylen)) != 0)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->c = m->c;
	if ((rc = make(be, c, m, p, why, whylen)) != 0)
		cuda_close(c);
	return rc;
}

int
medha_backend_cuda_open(struct medha_backend **be,
    const struct medha_backend_params *p, char *why, size_t whylen)
{
	struct medha_gguf *g = NULL;
	struct medha_model *m = NULL;
	struct medha_pred_model pm;
	struct cuda_be *c;
	int rc;

	*be = NULL;
	/* no device: say so before reading a 16 GB file */
	{
		int n = 0;
		cudaError_t e = cudaGetDeviceCount(&n);
		if (e != cudaSuccess || n < 1)
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "cuda: no CUDA device: %s",
			    e != cudaSuccess ? cudaGetErrorString(e)
			                     : "none found");
	}
	if (p->model == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: no model (a GGUF path or a shape name)");
	if (access(p->model, R_OK) == 0) {
		if ((rc = medha_gguf_open(&g, p->model, why, whylen)) != 0 ||
		    (rc = medha_model_load(&m, g, why, whylen)) != 0) {
			medha_gguf_close(g);
			return rc;
		}
		/* the weights are copied to the device: the file goes */
		rc = medha_backend_cuda_init(be, m, p, why, whylen);
		medha_model_free(m);
		medha_gguf_close(g);
		return rc;
	}
	if (medha_model_resolve(p->model, &pm) != 0)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "cuda: model %s: no such file, nor a shape name "
		    "(llama3-8b, llama3-70b, llama3.1-70b, smollm2-135m)",
		    p->model);
	/* a shape of another family (qwen3-32b): as from a file */
	if ((rc = runnable(&pm.c, why, whylen)) != 0)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->c = pm.c;
	if ((rc = make(be, c, NULL, p, why, whylen)) != 0)
		cuda_close(c);
	return rc;
}

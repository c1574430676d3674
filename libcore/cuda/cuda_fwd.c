/*
 * cuda_fwd.c: the cuda room's forward pass (cuda.h): one call over a
 * range of layers, in the order of the cpu backend (cpu/cpu.c): the embeddings
 * (or the hidden states handed in, uploaded), then per layer RMSNorm,
 * the fused Q/K/V product, RoPE at each token's position, the K/V
 * appended to each sequence's blocks, attention of each sequence's
 * tokens against its cache, the output projection (its residual add
 * fused into the product: beta 1), RMSNorm, the fused gate/up product,
 * SwiGLU, down (its add fused too), or in a routed layer the experts
 * (cuda_moe.c); then the final norm and the logits
 * of the rows asked for, and the greedy tokens by argmax on the GPU.
 * The other families' operators come from the model's description
 * (model.h's struct medha_arch, read per layer as the cpu backend reads
 * it): the embeddings' scale, Q/K/V biases, Q/K norms per head, RoPE of
 * the layer's kind (NEOX or NORM, scaled: c->w.rope), the layer's window
 * and the attention's soft-cap (in the attention kernels), llama4's
 * chunks (there too), NoPE layers with their temperature and weightless
 * Q/K norms on the others, post-norms
 * (the product then out of place, normed, added), GELU, and the final
 * soft-cap of the logits.
 * With TP each rank's output projection and down give a partial sum over
 * its heads' and ffn rows' columns, all-reduced (NCCL, or the caller's
 * collectives in host memory) and added; with KVP the attention of
 * merged sequences is merged with the other groups' (cuda_coll.c).
 * A decode step (every sequence one token) is replayed from a CUDA graph
 * where it can be (cuda_graph.c).
 */
#include "cuda/cuda_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the forward pass ---- */

/* 1 if some sequence of f merges its attention with other groups. */
static int
merging(const struct medha_cuda_call *f)
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
cuda_is_decode(const struct medha_cuda_call *f)
{
	return f->b->n_tokens == f->b->n_seqs && !merging(f);
}

/* The attention workspace for this batch's shape (before a capture:
   a graph reads the buffer, so a new one frees the graphs). */
int
cuda_attn_work(struct medha_cuda *c, char *why, size_t whylen)
{
	struct medha_k_attn a = {&c->kv.kvl[c->lo], &c->s.desc.s, c->s.qkv,
	    c->qkvd, c->nh, 1.0f / sqrtf((float)c->c.head_dim), c->s.att, NULL,
	    NULL, NULL, 0, 0, 0, 0, 0};
	size_t n = medha_k_attn_workspace(&a), n2;

	a.out = NULL;
	a.out_f32 = c->s.attf;
	a.lse = c->s.lse;
	n2 = medha_k_attn_workspace(&a);
	if (n2 > n)
		n = n2;
	if (n <= c->s.awork_cap)
		return 0;
	cuda_graph_free(c);
	cudaFree(c->s.awork);
	c->s.awork = NULL;
	c->s.awork_cap = 0;
	if (cuda_malloc(&c->s.awork, n, why, whylen, "attention workspace") !=
	    0)
		return MEDHA_ENOMEM;
	c->s.awork_cap = n;
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
int
cuda_reduce_add(struct medha_cuda *c, int l, int kind, int n,
    const float *post, char *why, size_t whylen)
{
	const size_t len = (size_t)n * c->c.dim;
	int rc = 0;

	if (c->tp > 1)
		rc = cuda_all_reduce(c, l, kind, c->s.y, len, why, whylen);
	if (rc == 0 && post != NULL)
		rc = cuda_ok(medha_k_rmsnorm_f32(c->s.y, c->s.y, post, n,
		                 c->c.dim, c->c.norm_eps, c->st),
		    "medha_k_rmsnorm_f32 (post-norm)", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_add(c->s.x, c->s.y, (int64_t)len, c->st),
		    "medha_k_add", why, whylen);
	return rc;
}

/* Q and K of the batch's rows, in c->s.qkv, as layer l's description
   says: biases, each head's norm, RoPE of the layer's kind; llama4's
   NoPE layer's temperature on q instead, its other layers' norms without
   weights after RoPE (cpu.c's qk_token). */
static int
qk(struct medha_cuda *c, const struct cuda_layer *L, int l, int n, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int64_t *tpos = (const int64_t *)(c->s.desc.d + c->s.desc.o_tpos);
	const struct medha_k_rope *r = &c->w.rope[medha_layer_rope(mc, l)];
	float *q = c->s.qkv, *k = c->s.qkv + c->qd;
	const int rope = medha_layer_has_rope(mc, l);
	int rc = 0;

	if (L->bqkv != NULL)
		rc = cuda_ok(medha_k_bias_add(q, c->qkvd, n, L->bqkv, c->qkvd,
		                 c->st),
		    "medha_k_bias_add", why, whylen);
	if (rc == 0 && L->qn != NULL)
		rc = cuda_ok(medha_k_rmsnorm_heads(q, c->qkvd, n, c->nh,
		                 mc->head_dim, L->qn, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_heads (Q)", why, whylen);
	if (rc == 0 && L->qn != NULL)
		rc = cuda_ok(medha_k_rmsnorm_heads(k, c->qkvd, n, c->nkv,
		                 mc->head_dim, L->kn, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_heads (K)", why, whylen);
	if (rc == 0 && rope)
		rc = cuda_ok(medha_k_rope_ext(q, tpos, n, c->qkvd, c->nh,
		                 mc->head_dim, mc->n_rot, r, c->st),
		    "medha_k_rope_ext (Q)", why, whylen);
	if (rc == 0 && rope)
		rc = cuda_ok(medha_k_rope_ext(k, tpos, n, c->qkvd, c->nkv,
		                 mc->head_dim, mc->n_rot, r, c->st),
		    "medha_k_rope_ext (K)", why, whylen);
	if (rc == 0 && !rope && mc->a.attn_temp_scale != 0)
		rc = cuda_ok(medha_k_attn_temp(q, c->qkvd, n, c->qd, tpos,
		                 mc->a.attn_temp_scale, mc->a.attn_temp_floor,
		                 c->st),
		    "medha_k_attn_temp", why, whylen);
	if (rc == 0 && rope && mc->a.qk_l2norm)
		rc = cuda_ok(medha_k_rmsnorm_heads(q, c->qkvd, n, c->nh,
		                 mc->head_dim, c->w.ones, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_heads (Q, no weights)", why, whylen);
	if (rc == 0 && rope && mc->a.qk_l2norm)
		rc = cuda_ok(medha_k_rmsnorm_heads(k, c->qkvd, n, c->nkv,
		                 mc->head_dim, c->w.ones, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_heads (K, no weights)", why, whylen);
	return rc;
}

/*
 * The attention half of layer l over the batch in c->s.desc: RMSNorm,
 * the fused Q/K/V product, Q and K made (qk), K/V appended, attention
 * (merged with the other KVP groups' where a sequence merges), the
 * output projection into the residual stream (its add fused into the
 * product where nothing comes between: one rank, no post-norm).
 */
static int
attn_half(struct medha_cuda *c, int l, int n, int merge, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct cuda_layer *L = &c->w.L[l];
	const int d = mc->dim, one = c->tp == 1 && L->post_a == NULL;
	struct medha_k_attn a = {&c->kv.kvl[l], &c->s.desc.s, c->s.qkv,
	    c->qkvd, c->nh, attn_scale(mc), merge ? NULL : c->s.att,
	    merge ? c->s.attf : NULL, merge ? c->s.lse : NULL, c->s.awork,
	    c->s.awork_cap, 1, /* planned: cuda_run_layers made the plan */
	    mc->a.attn_softcap, medha_layer_window(mc, l),
	    medha_layer_chunk(mc, l)};
	int rc;

	rc = cuda_ok(medha_k_rmsnorm(c->s.xn, c->s.x, L->attn_norm, n, d,
	                 mc->norm_eps, c->st),
	    "medha_k_rmsnorm", why, whylen);
	if (rc == 0)
		rc = cuda_gemm(c, L->wqkv, c->qkvd, d, c->s.xn, n, c->s.qkv,
		    c->qkvd, 0, why, whylen);
	if (rc == 0)
		rc = qk(c, L, l, n, why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_kv_append(&c->kv.kvl[l], &c->s.desc.s,
		                 c->s.qkv + c->qd, c->qkvd,
		                 c->s.qkv + c->qd + c->kvd, c->qkvd, c->st),
		    "medha_k_kv_append", why, whylen);
	if (rc == 0)
		rc = cuda_mark(c, 0, why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_attn(&a, c->st), "medha_k_attn", why,
		    whylen);
	if (rc == 0)
		rc = cuda_mark(c, 0, why, whylen);
	if (rc == 0 && merge)
		rc = cuda_mark(c, 1, why, whylen);
	if (rc == 0 && merge)
		rc = cuda_kvp_merge(c, l, n, why, whylen);
	if (rc == 0 && merge)
		rc = cuda_mark(c, 1, why, whylen);
	if (rc == 0)
		rc = cuda_gemm(c, L->wo, d, c->qd, c->s.att, n,
		    one ? c->s.x : c->s.y, d, one ? 1 : 0, why, whylen);
	if (rc == 0 && !one)
		rc = cuda_reduce_add(c, l, 0, n, L->post_a, why, whylen);
	return rc;
}

/*
 * The FFN half of layer l: RMSNorm, gate and up in one product, SwiGLU
 * (or GeGLU), down into the residual stream (fused as attn_half's
 * output projection). A routed layer's is cuda_moe.c's instead.
 */
static int
ffn_half(struct medha_cuda *c, int l, int n, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct cuda_layer *L = &c->w.L[l];
	const int d = mc->dim, ff = L->ff;
	const int one = c->tp == 1 && L->post_f == NULL;
	float *g = c->s.gu, *u = c->s.gu + ff;
	int rc;

	rc = cuda_ok(medha_k_rmsnorm(c->s.xn, c->s.x, L->ffn_norm, n, d,
	                 mc->norm_eps, c->st),
	    "medha_k_rmsnorm", why, whylen);
	if (rc == 0)
		rc = cuda_gemm(c, L->wgu, 2 * ff, d, c->s.xn, n, c->s.gu,
		    2 * ff, 0, why, whylen);
	if (rc == 0 && mc->a.ffn_act == MEDHA_FFN_GELU)
		rc = cuda_ok(medha_k_geglu(c->s.act, g, 2 * ff, u, 2 * ff, n,
		                 ff, c->st),
		    "medha_k_geglu", why, whylen);
	else if (rc == 0)
		rc = cuda_ok(medha_k_swiglu(c->s.act, g, 2 * ff, u, 2 * ff, n,
		                 ff, c->st),
		    "medha_k_swiglu", why, whylen);
	if (rc == 0)
		rc = cuda_gemm(c, L->wdown, d, ff, c->s.act, n,
		    one ? c->s.x : c->s.y, d, one ? 1 : 0, why, whylen);
	if (rc == 0 && !one)
		rc = cuda_reduce_add(c, l, 1, n, L->post_f, why, whylen);
	return rc;
}

/* The embeddings of the batch's tokens (scaled where the family says)
   into the residual stream. */
static int
embed(struct medha_cuda *c, int n, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int32_t *tok = (const int32_t *)(c->s.desc.d + c->s.desc.o_tok);
	int rc;

	rc = cuda_ok(medha_k_embed(c->s.x, c->w.embd, tok, n, mc->dim, c->st),
	    "medha_k_embed", why, whylen);
	if (rc == 0 && mc->a.embd_scale != 0 && mc->a.embd_scale != 1)
		rc = cuda_ok(medha_k_scale(c->s.x, (int64_t)n * mc->dim,
		                 mc->a.embd_scale, c->st),
		    "medha_k_scale (embeddings)", why, whylen);
	return rc;
}

/* The head: the final norm of the rows asked for, their logits (soft-
   capped where the family says) and the argmax of each. */
static int
head(struct medha_cuda *c, int nrows, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int32_t *rows = (const int32_t *)(c->s.desc.d + c->s.desc.o_rows);
	const int d = mc->dim, V = mc->vocab;
	int rc;

	rc = cuda_ok(medha_k_gather_rows(c->s.hrows, c->s.x, rows, nrows, d,
	                 c->st),
	    "medha_k_gather_rows", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_rmsnorm(c->s.hn, c->s.hrows, c->w.onorm,
		                 nrows, d, mc->norm_eps, c->st),
		    "medha_k_rmsnorm (output)", why, whylen);
	if (rc == 0)
		rc = cuda_gemm(c, c->w.out, V, d, c->s.hn, nrows, c->s.logits,
		    V, 0, why, whylen);
	if (rc == 0 && mc->a.final_softcap != 0)
		rc = cuda_ok(medha_k_softcap(c->s.logits, (int64_t)nrows * V,
		                 mc->a.final_softcap, c->st),
		    "medha_k_softcap (logits)", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_argmax(c->s.ids, c->s.logits, nrows, V,
		                 c->st),
		    "medha_k_argmax", why, whylen);
	return rc;
}

/*
 * The device part of a forward call, the descriptors in place: the
 * embeddings at layer 0 (h_in is uploaded before), the attention's plan
 * (once: every layer's attention uses it), the layers, and with nrows
 * the head. Nothing here synchronizes or touches host memory unless a
 * collective or a merge goes through the host, so a decode step can be
 * captured.
 */
int
cuda_run_layers(struct medha_cuda *c, const struct medha_cuda_call *f,
    int nrows, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int n = f->b->n_tokens, merge = merging(f);
	struct medha_k_attn a = {&c->kv.kvl[f->layer_lo], &c->s.desc.s,
	    c->s.qkv, c->qkvd, c->nh, 1.0f / sqrtf((float)mc->head_dim),
	    c->s.att, NULL, NULL, c->s.awork, c->s.awork_cap, 0, 0, 0, 0};
	char lw[256];
	int rc = 0;

	if (f->layer_lo == 0)
		rc = embed(c, n, why, whylen);
	/* the attention's plan: the batch's, the same for every layer */
	if (rc == 0)
		rc = cuda_ok(medha_k_attn_plan(&a, c->st), "medha_k_attn_plan",
		    why, whylen);
	for (int l = f->layer_lo; rc == 0 && l < f->layer_hi; l++) {
		lw[0] = '\0';
		if ((rc = attn_half(c, l, n, merge, lw, sizeof(lw))) != 0 ||
		    (rc = medha_layer_moe(mc, l)
		             ? cuda_moe_half(c, l, n, lw, sizeof(lw))
		             : ffn_half(c, l, n, lw, sizeof(lw))) != 0)
			return medha_why(why, whylen, rc, "layer %d: %s", l,
			    lw);
	}
	if (rc != 0 || nrows == 0)
		return rc;
	if ((rc = cuda_mark(c, 2, why, whylen)) != 0 ||
	    (rc = head(c, nrows, why, whylen)) != 0)
		return rc;
	return cuda_mark(c, 2, why, whylen);
}

/* Blocks for every claimed appending sequence, and a block of its own
 * for each it will write that a fork shares (copied on the stream ahead
 * of the batch). */
static int
reserve(struct medha_cuda *c, const struct medha_cuda_call *f, char *why,
    size_t whylen)
{
	for (int i = 0; i < f->b->n_seqs; i++) {
		const struct medha_batch_seq *s = &f->b->seq[i];
		int64_t nk = cuda_keys_of(c, f, i);
		int rc;
		if (f->kv != NULL && !f->kv[i].append)
			continue;
		if ((rc = medha_kvb_reserve(&c->kv.bt, s->seq, nk)) != 0)
			return medha_why(why, whylen, rc,
			    "sequence %d: KV room for %lld positions: %s",
			    s->seq, (long long)nk, medha_strerror(rc));
		if ((rc = medha_kvb_own(&c->kv.bt, s->seq, nk - s->n_tokens,
		         s->n_tokens)) != 0)
			return medha_why(why, whylen, rc,
			    "sequence %d: a block of its own for positions "
			    "%lld..%lld: %s",
			    s->seq, (long long)(nk - s->n_tokens),
			    (long long)nk - 1,
			    rc == MEDHA_EIO
			        ? cudaGetErrorString(cudaGetLastError())
			        : medha_strerror(rc));
	}
	return 0;
}

/* An SPP stage's hidden states (f->h_in, where given) into the residual
   stream, queued on the stream. */
int
cuda_upload_h(struct medha_cuda *c, const struct medha_cuda_call *f,
    char *why, size_t whylen)
{
	if (f->h_in == NULL)
		return 0;
	return cuda_ok(cudaMemcpyAsync(c->s.x, f->h_in,
	                   sizeof(float) * (size_t)f->b->n_tokens * c->c.dim,
	                   cudaMemcpyHostToDevice, c->st),
	    "uploading hidden states", why, whylen);
}

/* The call's inputs on the device and its layers run, eagerly. */
static int
eager(struct medha_cuda *c, const struct medha_cuda_call *f, int nrows,
    char *why, size_t whylen)
{
	int rc;

	if ((rc = cuda_desc_build(c, f, 0, why, whylen)) != 0 ||
	    (rc = cuda_attn_work(c, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_upload_h(c, f, why, whylen)) != 0)
		return rc;
	return cuda_run_layers(c, f, nrows, why, whylen);
}

int
medha_cuda_forward(struct medha_cuda *c, const struct medha_cuda_call *f,
    char *why, size_t whylen)
{
	const struct medha_batch *b = f->b;
	const int claim = f->layer_lo == c->lo;
	int nrows = 0, rc, done = 0;

	c->rt.f = f;
	c->rt.timing = f->times != NULL;
	c->rt.n_ev = 0;
	/* the calling thread's current device may be another */
	if ((rc = cuda_ok(cudaSetDevice(c->dev), "cudaSetDevice", why,
	         whylen)) != 0)
		return rc;
	if ((rc = cuda_check_batch(c, f, claim, why, whylen)) != 0)
		return rc;
	if (c->tp > 1 && c->lib.nccl == NULL) {
		if (f->coll == NULL)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "TP rank %d of %d: no collectives", c->tpr, c->tp);
		if (c->use_nccl &&
		    (rc = medha_cuda_comm_init(c, f->coll, why, whylen)) != 0)
			return rc;
	}
	if (f->layer_hi == c->c.n_layers &&
	    (f->logits != NULL || f->samplers != NULL))
		nrows = (int)medha_batch_logit_rows(b);
	if (claim && (rc = reserve(c, f, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_grow(c, b->n_tokens, nrows, why, whylen)) != 0)
		return rc;
	if (c->rt.graphs && cuda_is_decode(f) && !c->rt.timing &&
	    (rc = cuda_graph_step(c, f, nrows, &done, why, whylen)) != 0)
		return rc;
	if (!done && (rc = eager(c, f, nrows, why, whylen)) != 0)
		return rc;
	if (f->h_out != NULL)
		if ((rc = cuda_ok(cudaMemcpyAsync(f->h_out, c->s.x,
		                      sizeof(float) * (size_t)b->n_tokens *
		                          c->c.dim,
		                      cudaMemcpyDeviceToHost, c->st),
		         "downloading hidden states", why, whylen)) != 0)
			return rc;
	if ((rc = cuda_sync(c, "the forward pass", why, whylen)) != 0)
		return rc;
	if (c->rt.timing && (rc = cuda_times(c, f->times, why, whylen)) != 0)
		return rc;
	if (claim)
		for (int i = 0; i < b->n_seqs; i++)
			if (f->kv == NULL || f->kv[i].append)
				(void)medha_kvb_set_len(&c->kv.bt,
				    b->seq[i].seq, cuda_keys_of(c, f, i));
	return nrows > 0 ? cuda_head_out(c, f, nrows, why, whylen) : 0;
}


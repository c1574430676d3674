/*
 * cuda_moe.c: a mixture of experts' routed FFN on the cuda backend (issue
 * 41), the FFN half of the layers medha_layer_moe() names, computing
 * what the cpu backend's cpu/cpu_moe.c computes (model.h's struct
 * medha_arch): RMSNorm (bf16 for the products, f32 for the router), the
 * router's logits in f32 from f32 weights (a near-tie between two
 * experts is decided as closely as the cpu's), each token's top-k and
 * weights, the (token, slot) rows sorted by expert on the device, the
 * rows gathered in that order (llama4: times their weight), one grouped
 * product over the experts' segments for gate and up, SwiGLU, one for
 * down; the shared expert as a dense FFN (cuBLASLt), its gate (qwen2moe)
 * a last row of the router's; and per token the experts' outputs times
 * their weights, added in order of weight, plus the shared expert's,
 * into the residual stream (kernels/moe.cu has the kernels).
 *
 * Nothing here waits on the host: the counts, offsets and tiles stay on
 * the device and every launch's shape is a function of the batch's
 * token count, so a decode step's graph (cuda_graph.c) holds the routed
 * layers as it holds the dense ones.
 *
 * TP as a dense FFN's: a rank holds its share of every expert's gate
 * and up rows and the same columns of its down (and of the shared
 * expert's), computes the router whole (its x is every rank's), and its
 * weighted sum is a partial sum over its columns, all-reduced and added
 * as the dense down's is. Expert parallelism (--ep, experts whole on
 * each rank) is not here: it is the cpu backend's.
 */
#include "cuda/cuda_impl.h"

#include <stdlib.h>

void
cuda_moe_free(struct medha_cuda *c)
{
	struct cuda_moe_scratch *s = &c->s.moe;

	cudaFree(s->xf), cudaFree(s->lg), cudaFree(s->sel), cudaFree(s->row);
	cudaFree(s->src), cudaFree(s->wt), cudaFree(s->gsh), cudaFree(s->off);
	cudaFree(s->tiles), cudaFree(s->xg), cudaFree(s->egu);
	cudaFree(s->eact), cudaFree(s->ys), cudaFree(s->sh);
	*s = (struct cuda_moe_scratch){0};
}

int
cuda_moe_grow(struct medha_cuda *c, int n_tokens, char *why, size_t whylen)
{
	const struct medha_arch *a = &c->c.a;
	struct cuda_moe_scratch *s = &c->s.moe;
	const size_t T = (size_t)n_tokens, d = (size_t)c->c.dim;
	const size_t nk = T * (size_t)a->n_expert_used, ef = (size_t)c->efw;
	const size_t nt = (size_t)medha_k_moe_tiles(n_tokens, a->n_expert,
	    a->n_expert_used);
	int rc;

	if (a->n_expert == 0 || n_tokens <= s->cap)
		return 0;
	cuda_moe_free(c);
	if ((rc = cuda_malloc((void **)&s->xf, T * d * 4, why, whylen,
	         "the router's input")) != 0 ||
	    (rc = cuda_malloc((void **)&s->lg,
	         T * (size_t)(a->n_expert + 1) * 4, why, whylen,
	         "router logits")) != 0 ||
	    (rc = cuda_malloc((void **)&s->sel, nk * 4, why, whylen,
	         "experts chosen")) != 0 ||
	    (rc = cuda_malloc((void **)&s->row, nk * 4, why, whylen,
	         "sorted rows")) != 0 ||
	    (rc = cuda_malloc((void **)&s->src, nk * 4, why, whylen,
	         "sorted rows")) != 0 ||
	    (rc = cuda_malloc((void **)&s->wt, nk * 4, why, whylen,
	         "expert weights")) != 0 ||
	    (rc = cuda_malloc((void **)&s->gsh, T * 4, why, whylen,
	         "shared expert gate")) != 0 ||
	    (rc = cuda_malloc((void **)&s->off,
	         (size_t)(a->n_expert + 1) * 4, why, whylen,
	         "expert offsets")) != 0 ||
	    (rc = cuda_malloc((void **)&s->tiles, nt * 12, why, whylen,
	         "expert tiles")) != 0 ||
	    (rc = cuda_malloc((void **)&s->xg, nk * d * 2, why, whylen,
	         "expert inputs")) != 0 ||
	    (rc = cuda_malloc((void **)&s->egu, nk * ef * 8, why, whylen,
	         "expert gate and up")) != 0 ||
	    (rc = cuda_malloc((void **)&s->eact, nk * ef * 2, why, whylen,
	         "expert SwiGLU")) != 0 ||
	    (rc = cuda_malloc((void **)&s->ys, nk * d * 4, why, whylen,
	         "expert outputs")) != 0 ||
	    (rc = cuda_malloc((void **)&s->sh, T * d * 4, why, whylen,
	         "shared expert output")) != 0)
		return rc;
	s->cap = n_tokens;
	return 0;
}

/* The shared expert of layer l (a dense SwiGLU FFN on c->s.xn, this
   rank's rows) into s->sh. */
static int
shared(struct medha_cuda *c, const struct cuda_layer *L, int n, char *why,
    size_t whylen)
{
	const int d = c->c.dim, ff = L->ff;
	float *g = c->s.gu, *u = c->s.gu + ff;
	int rc;

	rc = cuda_gemm(c, L->wgu, 2 * ff, d, c->s.xn, n, c->s.gu, 2 * ff, 0,
	    why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_swiglu(c->s.act, g, 2 * ff, u, 2 * ff, n,
		                 ff, c->st),
		    "medha_k_swiglu (shared expert)", why, whylen);
	if (rc == 0)
		rc = cuda_gemm(c, L->wdown, d, ff, c->s.act, n, c->s.moe.sh, d,
		    0, why, whylen);
	return rc;
}

/* The routed FFN half of layer l over the batch's n tokens, into the
   residual stream (ffn_half's place in cuda_fwd.c). */
int
cuda_moe_half(struct medha_cuda *c, int l, int n, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct medha_arch *a = &mc->a;
	const struct cuda_layer *L = &c->w.L[l];
	struct cuda_moe_scratch *s = &c->s.moe;
	const int d = mc->dim, ef = c->efw, ne = a->n_expert;
	const int nk = n * a->n_expert_used;
	const int nt = medha_k_moe_tiles(n, ne, a->n_expert_used);
	const int one = c->tp == 1 && L->post_f == NULL;
	const struct medha_k_moe m = {ne, a->n_expert_used,
	    a->moe_gating == MEDHA_MOE_SIGMOID, a->moe_weight_in,
	    a->moe_norm_w, s->sel, s->wt, L->rrows > ne ? s->gsh : NULL,
	    s->row, s->src, s->off, s->tiles};
	int rc;

	rc = cuda_ok(medha_k_rmsnorm(c->s.xn, c->s.x, L->ffn_norm, n, d,
	                 mc->norm_eps, c->st),
	    "medha_k_rmsnorm", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_rmsnorm_f32(s->xf, c->s.x, L->ffn_norm, n,
		                 d, mc->norm_eps, c->st),
		    "medha_k_rmsnorm_f32 (router)", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_logits(s->lg, s->xf, L->router, n,
		                 L->rrows, d, c->st),
		    "medha_k_moe_logits", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_route(&m, s->lg, L->rrows, n, c->st),
		    "medha_k_moe_route", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_sort(&m, n, c->st), "medha_k_moe_sort",
		    why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_gather(s->xg, c->s.xn, d, d, &m, n,
		                 a->moe_weight_in, c->st),
		    "medha_k_moe_gather", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_gemm(s->egu, 2 * ef, s->xg, d, L->egu,
		                 (int64_t)2 * ef * d, 2 * ef, d, s->tiles, nt,
		                 c->st),
		    "medha_k_moe_gemm (gate, up)", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_swiglu(s->eact, s->egu, 2 * ef,
		                 s->egu + ef, 2 * ef, nk, ef, c->st),
		    "medha_k_swiglu (experts)", why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_gemm(s->ys, d, s->eact, ef, L->edown,
		                 (int64_t)d * ef, d, ef, s->tiles, nt, c->st),
		    "medha_k_moe_gemm (down)", why, whylen);
	if (rc == 0 && L->ff > 0)
		rc = shared(c, L, n, why, whylen);
	if (rc == 0)
		rc = cuda_ok(medha_k_moe_sum(one ? c->s.x : c->s.y, one, s->ys,
		                 d, &m, n, !a->moe_weight_in,
		                 L->ff > 0 ? s->sh : NULL, c->st),
		    "medha_k_moe_sum", why, whylen);
	if (rc == 0 && !one)
		rc = cuda_reduce_add(c, l, 1, n, L->post_f, why, whylen);
	return rc;
}

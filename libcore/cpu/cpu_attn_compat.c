/*
 * cpu_attn_compat.c: attention in llama.cpp's order (opts.llama_compat,
 * attn_query_compat in cpu_attn_impl.h), one query at a time, so that
 * the cpu backend's logits equal those of llama.cpp's prebuilt AVX2 CPU
 * build bit for bit. Plain C, with fmaf where ggml fuses: the lanes of
 * ggml's and tinyBLAS's vectors are arrays here, summed in their trees'
 * order.
 */
#include "cpu/cpu_attn_impl.h"

#include <math.h>
#include <string.h>

/* ---- llama.cpp's order (opts.llama_compat) ---- */

/*
 * llama.cpp's CPU attention without flash attention, as its AVX2 build
 * (the prebuilt one tests/ref/llamacpp.py drives, checked against its
 * intermediate tensors) orders it, per query row and head. Its KV view
 * is padded to n_kv, a multiple of 256 cells; keys past the query's own
 * position are masked (weight 0) there and skipped here.
 *  - KQ = mul_mat(K, Q): each score is ggml_vec_dot_f32 (4 accumulators
 *    of 8 lanes over steps of 32, then ggml's tree; the tail, head_dim %
 *    32, fma'd into the sum), times the scale.
 *  - soft_max: the max, then ggml_v_expf 8 at a time, each group's
 *    horizontal sum (hsum8) added in double; every weight times
 *    (float)(1 / sum).
 *  - KQV = mul_mat(V^T, KQ): with more than one token in the batch,
 *    llamafile's tinyBLAS: per output element 8 lanes, lane j % 8 an fma
 *    chain over keys j, then hsum8; with one token (a decode, or a
 *    one-token chunk), ggml_vec_dot_f32 over the n_kv cells: 32 lanes,
 *    lane j % 32, then ggml's tree.
 * "Tokens in the batch" is this sequence's nq here (llama.cpp counts the
 * whole ubatch: the same for one sequence per batch, as in the worker).
 */

/* tinyBLAS's hsum of 8 lanes */
static inline float
hsum8(const float *l)
{
	float h0 = l[4] + l[0], h1 = l[5] + l[1], h2 = l[6] + l[2],
	      h3 = l[7] + l[3];

	return (h0 + h2) + (h1 + h3);
}

/* ggml_vec_dot_f32's sum of its 4 accumulators of 8 lanes (a[j * 8 + l]) */
static inline float
vec_reduce(const float *a)
{
	float x0[8], t0[4];
	int l;

	for (l = 0; l < 8; l++)
		x0[l] = (a[l] + a[16 + l]) + (a[8 + l] + a[24 + l]);
	for (l = 0; l < 4; l++)
		t0[l] = x0[l] + x0[l + 4];
	return (t0[0] + t0[1]) + (t0[2] + t0[3]);
}

/* ggml_vec_dot_f32 (AVX2) */
static float
dot_vec(const float *x, const float *y, int n)
{
	float a[32] = {0}, sum;
	int np = n & ~31, i, l;

	for (i = 0; i < np; i += 32)
		for (l = 0; l < 32; l++)
			a[l] = fmaf(x[i + l], y[i + l], a[l]);
	sum = vec_reduce(a);
	for (i = np; i < n; i++)
		sum = fmaf(x[i], y[i], sum);
	return sum;
}

void
attn_query_compat(const struct attn_run *r, const struct medha_attn_seq *s,
    int kvh, int qi, float *scr)
{
	const struct medha_kvcache *kv = r->kv;
	const int hd = kv->c.head_dim, G = r->n_heads / kv->c.n_kv_heads;
	const int nh = r->n_heads, f32 = kv->c.type == MEDHA_KV_F32;
	const float scale = s->scale != 0 ? s->scale : 1.0f / sqrtf((float)hd);
	int64_t p = s->qpos + qi, hi = s->k_hi, nk, n8, j, j0;
	float *w = scr, *lane = scr + r->nk_max + 8, *kj = lane + 32 * hd, *o;
	const float *q = s->q + ((size_t)qi * nh + (size_t)kvh * G) * hd;
	const char *run = NULL, *row;
	int g, d, l, one = s->nq == 1, a;
	double sum;
	float m, inv, vj;

	if (hi > p + 1)
		hi = p + 1;
	nk = hi;
	n8 = (nk + 7) & ~(int64_t)7;
	/* a window's keys before it are masked (weight 0), as llama.cpp's */
	j0 = medha_attn_first_key(s, p);
	o = s->out + ((size_t)qi * nh + (size_t)kvh * G) * hd;
	for (g = 0; g < G; g++) {
		const float *qg = q + (size_t)g * hd;
		for (j = 0; j < nk; j++) {
			if (j < j0) { /* (its block may be given back) */
				w[j] = -INFINITY;
				continue;
			}
			if (j % MEDHA_KV_BLOCK == 0 || j == j0)
				run = medha_kv_run(kv, s->seq, r->layer, 0, kvh,
				    j / MEDHA_KV_BLOCK);
			for (d = 0; d < hd; d++) {
				size_t at = (size_t)d * 16 + j % 16;
				kj[d] = f32 ? ((const float *)run)[at]
				            : medha_fp16_to_fp32(
				                  ((const uint16_t *)run)[at]);
			}
			w[j] = dot_vec(kj, qg, hd) * scale;
			if (s->softcap != 0)
				medha_cpu_softcap(w + j, 1, s->softcap);
		}
		m = -INFINITY;
		for (j = 0; j < nk; j++)
			m = w[j] > m ? w[j] : m;
		for (j = nk; j < n8; j++)
			w[j] = -INFINITY;
		sum = 0;
		for (j = 0; j < n8; j += 8) {
			for (l = 0; l < 8; l++)
				w[j + l] -= m;
			medha_cpu_vexp_llama(w + j, w + j, 8);
			sum += (double)hsum8(w + j);
		}
		inv = (float)(1.0 / sum);
		for (j = 0; j < nk; j++)
			w[j] *= inv;
		memset(lane, 0, sizeof(float) * 32 * hd);
		for (j = j0; j < nk; j++) { /* (weight 0 before j0) */
			if (j % MEDHA_KV_BLOCK == 0 || j == j0)
				run = medha_kv_run(kv, s->seq, r->layer, 1, kvh,
				    j / MEDHA_KV_BLOCK);
			row = run +
			    (size_t)(j % MEDHA_KV_BLOCK) * hd * kv->elsize;
			for (d = 0; d < hd; d++) {
				vj = f32 ? ((const float *)row)[d]
				         : medha_fp16_to_fp32(
				               ((const uint16_t *)row)[d]);
				a = d * 32 + (one ? (int)(j & 31) : (int)(j & 7));
				lane[a] = fmaf(vj, w[j], lane[a]);
			}
		}
		for (d = 0; d < hd; d++)
			o[(size_t)g * hd + d] =
			    one ? vec_reduce(lane + d * 32) : hsum8(lane + d * 32);
		s->lse[(size_t)qi * nh + kvh * G + g] = m + logf((float)sum);
	}
}

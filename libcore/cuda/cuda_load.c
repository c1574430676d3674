/*
 * cuda_load.c: the cuda backend's weights on the device, this TP
 * rank's share (medha_tp_share, the cpu backend's) of the layers it runs:
 * from a model (model/model.h: every type the cpu backend reads is
 * dequantized row by row on the host, rounded to bf16 and uploaded), or
 * random bf16 from a seed for a model given by shape name, generated on
 * the GPU (medha_k_fill_random: uniform in [-s, s], s = sqrt(3 / fan_in)
 * so that a product keeps its input's scale; norms 1, biases none). The
 * other families' vectors (biases, Q/K norms, post-norms) are f32 like
 * the norms. A routed layer's experts are each one's share as a dense
 * FFN's, side by side (cuda_impl.h's struct cuda_layer), its router f32.
 *
 * A random tensor is defined whole, element (row, col) of tensor number
 * id being the generator's element id << 40 | row * cols + col, so that
 * every TP rank's share is a piece of the same model and tp 2 computes
 * what tp 1 does.
 */
#include "cuda/cuda_impl.h"

#include "model/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_BYTES ((size_t)32 << 20) /* host staging per upload */

int
cuda_malloc(void **p, size_t n, char *why, size_t whylen, const char *what)
{
	cudaError_t e;

	*p = NULL;
	if ((e = cudaMalloc(p, n > 0 ? n : 1)) != cudaSuccess) {
		*p = NULL;
		return medha_why(why, whylen,
		    e == cudaErrorMemoryAllocation ? MEDHA_ENOMEM : MEDHA_EIO,
		    "cuda: cudaMalloc of %zu bytes for %s: %s", n, what,
		    cudaGetErrorString(e));
	}
	return 0;
}

/* Where a matrix's values come from: a tensor, or the generator. */
struct src {
	const struct medha_tensor *t; /* or NULL: random */
	uint64_t seed, id;            /* random: the tensor's number */
	int64_t cols;                 /* random: the whole tensor's */
	float scale;
};

/*
 * Rows [r0, r1) and columns [c0, c1) of s into dst (r1 - r0 rows of
 * c1 - c0 bf16), on the device.
 */
static int
put(struct medha_cuda *c, uint16_t *dst, const struct src *s, int64_t r0,
    int64_t r1, int64_t c0, int64_t c1, char *why, size_t whylen)
{
	const int64_t w = c1 - c0;
	int64_t r, j, per, rr;
	uint16_t *h;
	float *row;
	int rc;
	size_t rb;

	if (s->t == NULL) {
		uint64_t base = s->id << 40;
		if (c0 == 0 && w == s->cols) {
			if ((rc = cuda_ok(medha_k_fill_random(dst,
			                      (r1 - r0) * w, s->seed,
			                      base + (uint64_t)(r0 * w),
			                      s->scale, c->st),
			         "medha_k_fill_random", why, whylen)) != 0)
				return rc;
			return 0;
		}
		for (r = r0; r < r1; r++)
			if ((rc = cuda_ok(medha_k_fill_random(dst +
			                          (r - r0) * w,
			                      w, s->seed,
			                      base +
			                          (uint64_t)(r * s->cols + c0),
			                      s->scale, c->st),
			         "medha_k_fill_random", why, whylen)) != 0)
				return rc;
		return 0;
	}
	rb = medha_ggml_row_bytes(s->t->type, s->t->ne[0]);
	per = (int64_t)(STAGE_BYTES / ((size_t)w * 2));
	if (per < 1)
		per = 1;
	if (rb == 0 ||
	    (row = malloc(sizeof(float) * (size_t)s->t->ne[0])) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "cuda: loading %s: out of memory", s->t->name);
	/* the pinned staging buffer, kept over the whole load */
	if ((size_t)per * w * 2 > c->s.hb_cap * sizeof(float)) {
		cudaFreeHost(c->s.hb);
		c->s.hb = NULL;
		c->s.hb_cap = 0;
		size_t fl = ((size_t)per * w * 2 + 3) / sizeof(float);
		if (cudaMallocHost((void **)&c->s.hb, fl * sizeof(float)) !=
		    cudaSuccess) {
			free(row);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "cuda: loading %s: no pinned memory", s->t->name);
		}
		c->s.hb_cap = fl;
	}
	h = (uint16_t *)c->s.hb;
	for (r = r0; r < r1; r += per) {
		rr = r1 - r < per ? r1 - r : per;
		/* the last upload reads h: wait before writing it again */
		cudaStreamSynchronize(c->st);
		for (j = 0; j < rr; j++) {
			medha_dequant_row(s->t->type,
			    (const char *)s->t->data + rb * (size_t)(r + j),
			    row, s->t->ne[0]);
			for (int64_t k = 0; k < w; k++)
				h[j * w + k] = medha_fp32_to_bf16(row[c0 + k]);
		}
		if (cudaMemcpyAsync(dst + (r - r0) * w, h, (size_t)(rr * w) * 2,
		        cudaMemcpyHostToDevice, c->st) != cudaSuccess)
			break;
	}
	cudaStreamSynchronize(c->st);
	free(row);
	return cuda_ok(cudaGetLastError(), "uploading weights", why, whylen);
}

/* A device matrix of rows x cols bf16, counted in c->w.wbytes. */
static int
mat(struct medha_cuda *c, uint16_t **p, int64_t rows, int64_t cols, char *why,
    size_t whylen, const char *what)
{
	size_t n = (size_t)rows * (size_t)cols * 2;

	c->w.wbytes += n;
	return cuda_malloc((void **)p, n, why, whylen, what);
}

/* n floats from host v (NULL: ones) into a new device vector. */
static int
vec(struct medha_cuda *c, float **p, const float *v, int n, char *why,
    size_t whylen, const char *what)
{
	float *ones = NULL;
	int rc;

	if ((rc = cuda_malloc((void **)p, sizeof(float) * (size_t)n, why,
	         whylen, what)) != 0)
		return rc;
	if (v == NULL) {
		if ((ones = malloc(sizeof(float) * (size_t)n)) == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		for (int i = 0; i < n; i++)
			ones[i] = 1;
		v = ones;
	}
	/* on the backend's stream (a non-blocking one: cudaMemcpy's
	   legacy stream would not order it before the kernels), waited
	   for before ones goes */
	rc = cudaMemcpyAsync(*p, v, sizeof(float) * (size_t)n,
	    cudaMemcpyHostToDevice, c->st);
	if (rc == cudaSuccess)
		rc = cudaStreamSynchronize(c->st);
	free(ones);
	if ((rc = cuda_ok(rc, "uploading a norm", why, whylen)) != 0)
		return rc;
	c->w.wbytes += sizeof(float) * (size_t)n;
	return 0;
}

/*
 * Layer l's vectors of the other families: Q/K/V biases (this rank's
 * rows, as wqkv's: none for a random model), Q/K norms and post-norms
 * (a random model's are ones), where c's architecture has them.
 */
static int
extras(struct medha_cuda *c, const struct medha_model *m, int l, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct medha_layer *ml = m != NULL ? &m->layer[l] : NULL;
	const struct medha_tp_share *sh = &c->sh;
	const int hd = mc->head_dim;
	struct cuda_layer *L = &c->w.L[l];
	int rc;

	if (ml != NULL && ml->bq != NULL) {
		float *b = malloc(sizeof(float) * (size_t)c->qkvd);
		if (b == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		memcpy(b, ml->bq + (size_t)sh->h_lo * hd,
		    sizeof(float) * (size_t)c->qd);
		memcpy(b + c->qd, ml->bk + (size_t)sh->kv_lo * hd,
		    sizeof(float) * (size_t)c->kvd);
		memcpy(b + c->qd + c->kvd, ml->bv + (size_t)sh->kv_lo * hd,
		    sizeof(float) * (size_t)c->kvd);
		rc = vec(c, &L->bqkv, b, c->qkvd, why, whylen, "attn_qkv bias");
		free(b);
		if (rc != 0)
			return rc;
	}
	if (mc->a.qk_norm &&
	    ((rc = vec(c, &L->qn, ml ? ml->q_norm : NULL, hd, why, whylen,
	          "attn_q_norm")) != 0 ||
	        (rc = vec(c, &L->kn, ml ? ml->k_norm : NULL, hd, why, whylen,
	             "attn_k_norm")) != 0))
		return rc;
	if (mc->a.post_norm &&
	    ((rc = vec(c, &L->post_a, ml ? ml->post_attn_norm : NULL,
	          mc->dim, why, whylen, "post_attention_norm")) != 0 ||
	        (rc = vec(c, &L->post_f, ml ? ml->post_ffn_norm : NULL,
	             mc->dim, why, whylen, "post_ffw_norm")) != 0))
		return rc;
	return 0;
}

/* The sources of layer l's seven matrices (m NULL: random); in a routed
   layer gate, up and down are the shared expert's. */
static void
sources(const struct medha_cuda *c, const struct medha_model *m, int l,
    uint64_t seed, struct src s[7])
{
	const struct medha_model_config *mc = &c->c;
	const int64_t qd = (int64_t)mc->n_heads * mc->head_dim;
	const int64_t kvd = (int64_t)mc->n_kv_heads * mc->head_dim;
	const int64_t cols[7] = {mc->dim, mc->dim, mc->dim, qd, mc->dim,
	    mc->dim,
	    medha_layer_moe(mc, l) ? mc->a.shexp_ffn_dim : mc->ffn_dim};
	const struct medha_layer *L = m != NULL ? &m->layer[l] : NULL;
	const struct medha_tensor *t[7] = {0};

	(void)kvd;
	if (L != NULL) {
		t[0] = L->wq, t[1] = L->wk, t[2] = L->wv, t[3] = L->wo;
		t[4] = L->gate, t[5] = L->up, t[6] = L->down;
	}
	for (int i = 0; i < 7; i++)
		s[i] = (struct src){t[i], seed, (uint64_t)l * 8 + (uint64_t)i,
		    cols[i], sqrtf(3.0f / (float)cols[i])};
}

/*
 * A routed layer's experts (this rank's rows of each one's gate and up,
 * the same columns of its down) and its router (whole, f32; qwen2moe's
 * shared-expert gate as a last row), from m or random: a random expert
 * matrix is tensor number 2^21 + (l n_expert + e) 3 + i, the router
 * 2^22 + l (rounded to bf16 as every random weight).
 */
static int
experts(struct medha_cuda *c, const struct medha_model *m, int l,
    uint64_t seed, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct medha_layer *ml = m != NULL ? &m->layer[l] : NULL;
	const int ne = mc->a.n_expert, ef = c->efw, d = mc->dim;
	const int64_t E = mc->a.expert_ffn_dim;
	struct cuda_layer *L = &c->w.L[l];
	float *h;
	int rc, e, i;

	L->rrows = ne + (mc->a.shexp_gate && mc->a.shexp_ffn_dim > 0);
	if ((rc = mat(c, &L->egu, (int64_t)ne * 2 * ef, d, why, whylen,
	         "ffn_gate_up_exps")) != 0 ||
	    (rc = mat(c, &L->edown, (int64_t)ne * d, ef, why, whylen,
	         "ffn_down_exps")) != 0)
		return rc;
	for (e = 0; e < ne; e++)
		for (i = 0; i < 3; i++) {
			const struct medha_tensor *x = ml == NULL ? NULL
			    : i == 0 ? ml->gate_exps
			    : i == 1 ? ml->up_exps : ml->down_exps;
			struct medha_tensor v;
			const int64_t cols = i < 2 ? d : E;
			struct src sr = {x != NULL ? &v : NULL, seed,
			    (1u << 21) + ((uint64_t)l * ne + e) * 3 + i, cols,
			    sqrtf(3.0f / (float)cols)};
			if (x != NULL)
				medha_expert_view(&v, x, e);
			rc = i < 2 ? put(c, L->egu + ((size_t)e * 2 + i) * ef * d,
			                 &sr, c->elo, c->elo + ef, 0, d, why,
			                 whylen)
			           : put(c, L->edown + (size_t)e * d * ef, &sr, 0,
			                 d, c->elo, c->elo + ef, why, whylen);
			if (rc != 0)
				return rc;
		}
	/* the router: f32 rows on the host, or random bf16 made f32 */
	if ((rc = cuda_malloc((void **)&L->router,
	         sizeof(float) * (size_t)L->rrows * d, why, whylen,
	         "ffn_gate_inp")) != 0)
		return rc;
	c->w.wbytes += sizeof(float) * (size_t)L->rrows * d;
	if (ml == NULL) {
		struct src sr = {NULL, seed, (1u << 22) + (uint64_t)l, d,
		    sqrtf(3.0f / (float)d)};
		uint16_t *b;
		if ((rc = cuda_malloc((void **)&b, (size_t)L->rrows * d * 2,
		         why, whylen, "ffn_gate_inp")) != 0)
			return rc;
		rc = put(c, b, &sr, 0, L->rrows, 0, d, why, whylen);
		if (rc == 0)
			rc = cuda_ok(medha_k_bf16_to_f32(L->router, b,
			                 (int64_t)L->rrows * d, c->st),
			    "medha_k_bf16_to_f32 (router)", why, whylen);
		if (rc == 0)
			rc = cuda_ok(cudaStreamSynchronize(c->st), "the router",
			    why, whylen);
		cudaFree(b);
		return rc;
	}
	if ((h = malloc(sizeof(float) * (size_t)L->rrows * d)) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	for (e = 0; e < ne; e++)
		medha_dequant_row(ml->gate_inp->type,
		    (const char *)ml->gate_inp->data +
		        medha_ggml_row_bytes(ml->gate_inp->type, d) * (size_t)e,
		    h + (size_t)e * d, d);
	if (L->rrows > ne)
		memcpy(h + (size_t)ne * d, ml->gate_inp_sh, sizeof(float) * d);
	rc = cudaMemcpyAsync(L->router, h, sizeof(float) * (size_t)L->rrows * d,
	    cudaMemcpyHostToDevice, c->st);
	if (rc == cudaSuccess)
		rc = cudaStreamSynchronize(c->st);
	free(h);
	return cuda_ok(rc, "uploading the router", why, whylen);
}

/* Layer l's share, from m's tensors or (m NULL) random. */
static int
layer(struct medha_cuda *c, const struct medha_model *m, int l, uint64_t seed,
    char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const struct medha_tp_share *sh = &c->sh;
	const int hd = mc->head_dim, d = mc->dim;
	struct cuda_layer *L = &c->w.L[l];
	const int moe = medha_layer_moe(mc, l);
	/* the FFN's rows, or a routed layer's shared expert's */
	const int f_lo = moe ? c->slo : sh->f_lo;
	struct src s[7];
	int rc;

	L->ff = moe ? c->sfw : c->ff;
	sources(c, m, l, seed, s);
	if ((rc = extras(c, m, l, why, whylen)) != 0)
		return rc;
	if (moe && (rc = experts(c, m, l, seed, why, whylen)) != 0)
		return rc;
	if ((rc = vec(c, &L->attn_norm, m ? m->layer[l].attn_norm : NULL, d,
	         why, whylen, "attn_norm")) != 0 ||
	    (rc = vec(c, &L->ffn_norm, m ? m->layer[l].ffn_norm : NULL, d, why,
	         whylen, "ffn_norm")) != 0 ||
	    (rc = mat(c, &L->wqkv, c->qkvd, d, why, whylen, "attn_qkv")) != 0 ||
	    (rc = mat(c, &L->wo, d, c->qd, why, whylen, "attn_output")) != 0)
		return rc;
	if ((rc = put(c, L->wqkv, &s[0], (int64_t)sh->h_lo * hd,
	         (int64_t)sh->h_hi * hd, 0, d, why, whylen)) != 0 ||
	    (rc = put(c, L->wqkv + (size_t)c->qd * d, &s[1],
	         (int64_t)sh->kv_lo * hd, (int64_t)sh->kv_hi * hd, 0, d, why,
	         whylen)) != 0 ||
	    (rc = put(c, L->wqkv + (size_t)(c->qd + c->kvd) * d, &s[2],
	         (int64_t)sh->kv_lo * hd, (int64_t)sh->kv_hi * hd, 0, d, why,
	         whylen)) != 0 ||
	    (rc = put(c, L->wo, &s[3], 0, d, (int64_t)sh->h_lo * hd,
	         (int64_t)sh->h_hi * hd, why, whylen)) != 0)
		return rc;
	if (L->ff == 0) /* a routed layer without a shared expert */
		return 0;
	if ((rc = mat(c, &L->wgu, 2 * (int64_t)L->ff, d, why, whylen,
	         "ffn_gate_up")) != 0 ||
	    (rc = mat(c, &L->wdown, d, L->ff, why, whylen, "ffn_down")) != 0 ||
	    (rc = put(c, L->wgu, &s[4], f_lo, f_lo + L->ff, 0, d, why,
	         whylen)) != 0 ||
	    (rc = put(c, L->wgu + (size_t)L->ff * d, &s[5], f_lo,
	         f_lo + L->ff, 0, d, why, whylen)) != 0 ||
	    (rc = put(c, L->wdown, &s[6], 0, d, f_lo, f_lo + L->ff, why,
	         whylen)) != 0)
		return rc;
	return 0;
}

/* Everything the layers [lo, hi) and the ends need, from m or random. */
static int
load(struct medha_cuda *c, const struct medha_model *m, uint64_t seed,
    char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const int64_t V = mc->vocab, d = mc->dim;
	struct src e = {m ? m->tok_embd : NULL, seed, 1u << 20, d, 1.0f};
	struct src o = {m ? m->output : NULL, seed, (1u << 20) + 1, d,
	    sqrtf(3.0f / (float)d)};
	char lw[256];
	int rc, l;

	if ((c->w.L = calloc((size_t)mc->n_layers, sizeof(*c->w.L))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if (c->lo == 0 &&
	    ((rc = mat(c, &c->w.embd, V, d, why, whylen, "token_embd")) != 0 ||
	        (rc = put(c, c->w.embd, &e, 0, V, 0, d, why, whylen)) != 0))
		return rc;
	if (c->hi == mc->n_layers &&
	    ((rc = vec(c, &c->w.onorm, m ? m->out_norm : NULL, (int)d, why,
	          whylen, "output_norm")) != 0 ||
	        (rc = mat(c, &c->w.out, V, d, why, whylen, "output")) != 0 ||
	        (rc = put(c, c->w.out, &o, 0, V, 0, d, why, whylen)) != 0))
		return rc;
	if (mc->a.qk_l2norm &&
	    (rc = vec(c, &c->w.ones, NULL, mc->head_dim, why, whylen,
	         "Q/K norms without weights")) != 0)
		return rc;
	if (m != NULL && m->rope_freqs != NULL &&
	    (rc = vec(c, &c->w.freqs, m->rope_freqs, mc->n_rot / 2, why, whylen,
	         "rope_freqs")) != 0)
		return rc;
	for (l = c->lo; l < c->hi; l++)
		if ((rc = layer(c, m, l, seed, lw, sizeof(lw))) != 0)
			return medha_why(why, whylen, rc, "layer %d: %s", l,
			    lw);
	return cuda_ok(cudaStreamSynchronize(c->st), "loading the weights",
	    why, whylen);
}

int
cuda_load_gguf(struct medha_cuda *c, const struct medha_model *m, char *why,
    size_t whylen)
{
	return load(c, m, 0, why, whylen);
}

int
cuda_load_random(struct medha_cuda *c, uint64_t seed, char *why, size_t whylen)
{
	return load(c, NULL, seed != 0 ? seed : 1, why, whylen);
}

void
cuda_free_weights(struct medha_cuda *c)
{
	if (c->w.L != NULL)
		for (int l = 0; l < c->c.n_layers; l++) {
			struct cuda_layer *L = &c->w.L[l];
			cudaFree(L->attn_norm);
			cudaFree(L->ffn_norm);
			cudaFree(L->wqkv);
			cudaFree(L->wo);
			cudaFree(L->wgu);
			cudaFree(L->wdown);
			cudaFree(L->bqkv);
			cudaFree(L->qn);
			cudaFree(L->kn);
			cudaFree(L->post_a);
			cudaFree(L->post_f);
			cudaFree(L->router);
			cudaFree(L->egu);
			cudaFree(L->edown);
		}
	free(c->w.L);
	c->w.L = NULL;
	cudaFree(c->w.embd);
	cudaFree(c->w.out);
	cudaFree(c->w.onorm);
	cudaFree(c->w.freqs);
	cudaFree(c->w.ones);
	c->w.embd = c->w.out = NULL;
	c->w.onorm = c->w.freqs = c->w.ones = NULL;
}

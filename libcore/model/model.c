/*
 * model.c: a Llama model from GGUF metadata and tensors (see model.h).
 * Every tensor is checked before it is used: present, of a type the CPU
 * backend multiplies with, of exactly the shape the hyper-parameters
 * imply, and with as many bytes as that shape needs in that type; the
 * first failure is reported by name ("blk.3.attn_k.weight: shape 64 x 128,
 * expected 64 x 32").
 */
#include "model/model.h"

#include "hmac.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LAYERS_MAX 1024
#define DIM_MAX (1 << 20)

/* ---- hyper-parameters ---- */

static int
get_int(const struct medha_gguf *g, const char *arch, const char *key, int need,
    int64_t lo, int64_t hi, int64_t *v, char *why, size_t whylen)
{
	char k[128];
	uint64_t u;
	int rc;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	if ((rc = medha_gguf_get_u64(g, k, &u)) == MEDHA_ENOTFOUND && !need)
		return 1;
	if (rc == MEDHA_ENOTFOUND)
		return medha_why(why, whylen, rc, "missing key %s", k);
	if (rc != 0)
		return medha_why(why, whylen, rc, "metadata %s: %s", k,
		    medha_strerror(rc));
	if (u < (uint64_t)lo || u > (uint64_t)hi)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "metadata %s: %llu out of range [%lld, %lld]", k,
		    (unsigned long long)u, (long long)lo, (long long)hi);
	*v = (int64_t)u;
	return 0;
}

static int
get_float(const struct medha_gguf *g, const char *arch, const char *key,
    float *v, char *why, size_t whylen)
{
	char k[128];
	double d;
	int rc;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	if ((rc = medha_gguf_get_f64(g, k, &d)) == MEDHA_ENOTFOUND)
		return 0; /* keep the default */
	if (rc != 0)
		return medha_why(why, whylen, rc, "metadata %s: %s", k,
		    medha_strerror(rc));
	if (!(d > 0) || !isfinite(d))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "metadata %s: %g is not a positive number", k, d);
	*v = (float)d;
	return 0;
}

int
medha_model_config_read(const struct medha_gguf *g,
    struct medha_model_config *c, char *why, size_t whylen)
{
	char arch[64];
	int64_t v, kl, vl;
	int rc;

	memset(c, 0, sizeof(*c));
	if ((rc = medha_gguf_get_strbuf(g, "general.architecture", arch,
	         sizeof(arch))) != 0)
		return medha_why(why, whylen, rc,
		    "metadata general.architecture: %s", medha_strerror(rc));
	if ((rc = medha_arch_check(arch, why, whylen)) < 0)
		return rc;
#define INT(key, need, lo, hi, dst)                                    \
	do {                                                           \
		if ((rc = get_int(g, arch, key, need, lo, hi, &v, why, \
		         whylen)) < 0)                                 \
			return rc;                                     \
		if (rc == 0)                                           \
			dst = v;                                       \
	} while (0)
	INT("block_count", 1, 1, LAYERS_MAX, c->n_layers);
	INT("embedding_length", 1, 1, DIM_MAX, c->dim);
	INT("attention.head_count", 1, 1, 4096, c->n_heads);
	c->n_kv_heads = c->n_heads;
	INT("attention.head_count_kv", 0, 1, 4096, c->n_kv_heads);
	INT("feed_forward_length", 1, 1, DIM_MAX, c->ffn_dim);
	c->head_dim = c->dim / c->n_heads;
	kl = vl = c->head_dim;
	INT("attention.key_length", 0, 1, 4096, kl);
	INT("attention.value_length", 0, 1, 4096, vl);
	if (kl != vl)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "key length %lld differs from value length %lld",
		    (long long)kl, (long long)vl);
	c->head_dim = (int)kl;
	c->n_rot = c->head_dim;
	INT("rope.dimension_count", 0, 2, 4096, c->n_rot);
	INT("context_length", 0, 1, INT64_MAX, c->ctx_len);
#undef INT
	c->rope_theta = 10000.0f;
	c->norm_eps = 1e-5f;
	if ((rc = get_float(g, arch, "rope.freq_base", &c->rope_theta, why,
	         whylen)) != 0 ||
	    (rc = get_float(g, arch, "attention.layer_norm_rms_epsilon",
	         &c->norm_eps, why, whylen)) != 0)
		return rc;
	return medha_arch_read(g, arch, c, why, whylen);
}

/* ---- tensors ---- */

/* A type the CPU backend's matmul and embedding lookup handle. */
static int
type_ok(int type)
{
	switch (type) {
	case MEDHA_GGML_F32:
	case MEDHA_GGML_F16:
	case MEDHA_GGML_BF16:
	case MEDHA_GGML_Q8_0:
	case MEDHA_GGML_Q4_0:
	case MEDHA_GGML_Q4_1:
	case MEDHA_GGML_Q5_0:
	case MEDHA_GGML_Q5_1:
	case MEDHA_GGML_Q2_K:
	case MEDHA_GGML_Q3_K:
	case MEDHA_GGML_Q4_K:
	case MEDHA_GGML_Q5_K:
	case MEDHA_GGML_Q6_K:
	case MEDHA_GGML_IQ4_NL:
	case MEDHA_GGML_IQ4_XS: return 1;
	default: return 0;
	}
}

/*
 * The tensor name, checked to be a (rows, cols) matrix (rows == 0: a
 * vector of cols) whose data has the bytes its type needs. Optional
 * tensors that are absent give *t = NULL and 0.
 */
static int
want(const struct medha_tensor **t, medha_tensor_find_fn find, void *ctx,
    const char *name, int64_t rows, int64_t cols, int optional, char *why,
    size_t whylen)
{
	const struct medha_tensor *x;
	int64_t r, i;
	size_t rb;

	*t = NULL;
	if ((x = find(ctx, name)) == NULL) {
		if (optional)
			return 0;
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "tensor %s is missing", name);
	}
	if (!type_ok(x->type))
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "tensor %s: type %s (%d) is not supported", name,
		    medha_ggml_type_name(x->type), x->type);
	r = x->n_dims >= 2 ? x->ne[1] : 1;
	for (i = 2; i < x->n_dims && i < 4; i++)
		if (x->ne[i] != 1)
			r = -1;
	if (x->n_dims < 1 || x->n_dims > 4 || x->ne[0] != cols ||
	    (rows == 0 ? r != 1 : r != rows)) {
		if (rows == 0)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "tensor %s: shape %lld x %lld (%d dims), expected "
			    "a vector of %lld",
			    name, (long long)x->ne[0],
			    (long long)(x->n_dims >= 2 ? x->ne[1] : 1),
			    x->n_dims, (long long)cols);
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tensor %s: shape %lld x %lld (%d dims), expected %lld x "
		    "%lld (row length x rows)",
		    name, (long long)x->ne[0],
		    (long long)(x->n_dims >= 2 ? x->ne[1] : 1), x->n_dims,
		    (long long)cols, (long long)rows);
	}
	if ((rb = medha_ggml_row_bytes(x->type, cols)) == 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tensor %s: row length %lld is not a multiple of the %s "
		    "block (%d)",
		    name, (long long)cols, medha_ggml_type_name(x->type),
		    medha_ggml_block_elems(x->type));
	if (x->data == NULL || x->nbytes / rb < (size_t)(rows ? rows : 1))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tensor %s: %zu bytes of data, %lld rows of %zu bytes "
		    "needed",
		    name, x->nbytes, (long long)(rows ? rows : 1), rb);
	*t = x;
	return 0;
}

/*
 * The experts' tensor name: n (rows, cols) matrices, one after another
 * (ggml's ne = cols, rows, n), with the data they need.
 */
static int
want_exps(const struct medha_tensor **t, medha_tensor_find_fn find, void *ctx,
    const char *name, int64_t rows, int64_t cols, int64_t n, char *why,
    size_t whylen)
{
	const struct medha_tensor *x;
	size_t rb;

	*t = NULL;
	if ((x = find(ctx, name)) == NULL)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "tensor %s is missing", name);
	if (!type_ok(x->type))
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "tensor %s: type %s (%d) is not supported", name,
		    medha_ggml_type_name(x->type), x->type);
	if (x->n_dims < 3 || x->ne[0] != cols || x->ne[1] != rows ||
	    x->ne[2] != n || (x->n_dims == 4 && x->ne[3] != 1))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tensor %s: shape %lld x %lld x %lld (%d dims), expected "
		    "%lld x %lld x %lld (row length x rows x experts)",
		    name, (long long)x->ne[0], (long long)x->ne[1],
		    (long long)(x->n_dims >= 3 ? x->ne[2] : 1), x->n_dims,
		    (long long)cols, (long long)rows, (long long)n);
	if ((rb = medha_ggml_row_bytes(x->type, cols)) == 0 ||
	    x->data == NULL || x->nbytes / rb < (size_t)(rows * n))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tensor %s: %zu bytes of data for %lld rows of %lld",
		    name, x->nbytes, (long long)(rows * n), (long long)cols);
	*t = x;
	return 0;
}

void
medha_expert_view(struct medha_tensor *v, const struct medha_tensor *exps,
    int e)
{
	size_t rb = medha_ggml_row_bytes(exps->type, exps->ne[0]);
	size_t mb = rb * (size_t)exps->ne[1];

	*v = *exps;
	v->n_dims = 2;
	v->ne[2] = v->ne[3] = 1;
	v->data = (const char *)exps->data + mb * (size_t)e;
	v->nbytes = mb;
	v->offset = exps->offset + mb * (size_t)e;
}

/* A vector of n as an owned f32 array. */
static int
want_vec(float **v, medha_tensor_find_fn find, void *ctx, const char *name,
    int64_t n, int optional, char *why, size_t whylen)
{
	const struct medha_tensor *t;
	int rc;

	*v = NULL;
	if ((rc = want(&t, find, ctx, name, 0, n, optional, why, whylen)) != 0)
		return rc;
	if (t == NULL)
		return 0;
	if ((*v = medha_calloc((size_t)n, sizeof(float))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if ((rc = medha_dequant_row(t->type, t->data, *v, n)) != 0)
		return medha_why(why, whylen, rc, "tensor %s: %s", name,
		    medha_strerror(rc));
	return 0;
}

/* v = rows [lo, hi) of the matrix w (a fused tensor's part) */
static const struct medha_tensor *
rows_of(struct medha_tensor *v, const struct medha_tensor *w, int64_t lo,
    int64_t hi)
{
	size_t rb = medha_ggml_row_bytes(w->type, w->ne[0]);

	*v = *w;
	v->ne[1] = hi - lo;
	v->data = (const char *)w->data + rb * (size_t)lo;
	v->nbytes = rb * (size_t)(hi - lo);
	v->offset = w->offset + rb * (size_t)lo;
	return v;
}

/*
 * LongRoPE (phi3): the long factors where the model runs past its
 * original context (its context_length does: medha serves the whole of
 * it; llama.cpp compares its context size), else the short, as the
 * frequency divisors; rope_freqs.weight, where the file has it, wins as
 * in llama.cpp.
 */
static int
longrope(struct medha_model *m, medha_tensor_find_fn find, void *ctx,
    char *why, size_t whylen)
{
	const struct medha_model_config *c = &m->c;
	int has = find(ctx, "rope_factors_long.weight") != NULL ||
	    find(ctx, "rope_factors_short.weight") != NULL;
	int lr = c->a.rope_scaling == MEDHA_ROPE_SCALING_LONGROPE;
	const char *nm;

	if (has && !lr && c->a.rope_scaling != MEDHA_ROPE_SCALING_NONE)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "tensor rope_factors_long.weight with %s.rope.scaling.type "
		    "other than longrope",
		    c->a.name);
	if (!has && !lr)
		return 0;
	if (!has)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "tensor rope_factors_long.weight is missing (longrope "
		    "scaling needs it)");
	m->c.a.rope_scaling = MEDHA_ROPE_SCALING_LONGROPE;
	if (m->rope_freqs != NULL)
		return 0;
	nm = c->a.rope_orig_ctx > 0 && c->ctx_len > c->a.rope_orig_ctx
	    ? "rope_factors_long.weight"
	    : "rope_factors_short.weight";
	return want_vec(&m->rope_freqs, find, ctx, nm, c->n_rot / 2, 0, why,
	    whylen);
}

static int
check_config(const struct medha_model_config *c, char *why, size_t whylen)
{
	if (c->n_layers < 1 || c->n_layers > LAYERS_MAX || c->dim < 1 ||
	    c->dim > DIM_MAX || c->ffn_dim < 1 || c->ffn_dim > DIM_MAX ||
	    c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 1 ||
	    c->head_dim > 4096 || c->vocab < 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "hyper-parameters out of range");
	if (c->n_heads % c->n_kv_heads != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%d heads are not a multiple of %d kv heads", c->n_heads,
		    c->n_kv_heads);
	if (c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2 != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "rope dimension %d: must be even and at most the head "
		    "size %d",
		    c->n_rot, c->head_dim);
	if (!(c->rope_theta > 0) || !(c->norm_eps > 0))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "rope base and norm epsilon must be positive");
	if (c->a.n_expert < 0 || c->a.n_expert > 4096 ||
	    (c->a.n_expert > 0 &&
	        (c->a.n_expert_used < 1 || c->a.n_expert_used > c->a.n_expert ||
	            c->a.expert_ffn_dim < 1 || c->a.expert_ffn_dim > DIM_MAX ||
	            c->a.shexp_ffn_dim < 0 || c->a.shexp_ffn_dim > DIM_MAX)))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "experts out of range (%d, %d used, of %d rows)",
		    c->a.n_expert, c->a.n_expert_used, c->a.expert_ffn_dim);
	return 0;
}

int
medha_model_build(struct medha_model **mp, const struct medha_model_config *c,
    medha_tensor_find_fn find, void *ctx, char *why, size_t whylen)
{
	struct medha_model *m;
	const struct medha_tensor *t;
	struct medha_layer *L;
	char name[96];
	int64_t q, kvd, d, f;
	int i, rc;

	*mp = NULL;
	if ((rc = check_config(c, why, whylen)) != 0)
		return rc;
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	m->c = *c;
	d = c->dim;
	f = c->ffn_dim;
	q = (int64_t)c->n_heads * c->head_dim;
	kvd = (int64_t)c->n_kv_heads * c->head_dim;
	/* the vocabulary is the embedding's row count */
	if ((t = find(ctx, "token_embd.weight")) != NULL && t->n_dims >= 2 &&
	    m->c.vocab == 0 && t->ne[1] > 0 && t->ne[1] <= INT32_MAX)
		m->c.vocab = (int)t->ne[1];
	if (m->c.vocab < 1) {
		rc = medha_why(why, whylen,
		    t == NULL ? MEDHA_ENOTFOUND : MEDHA_EFORMAT,
		    "tensor token_embd.weight is missing or has no rows");
		goto fail;
	}
#define W(dst, nm, rows, cols, opt)                                         \
	do {                                                                \
		if ((rc = want(&(dst), find, ctx, nm, rows, cols, opt, why, \
		         whylen)) != 0)                                     \
			goto fail;                                          \
	} while (0)
#define V(dst, nm, n, opt)                                             \
	do {                                                           \
		if ((rc = want_vec(&(dst), find, ctx, nm, n, opt, why, \
		         whylen)) != 0)                                \
			goto fail;                                     \
	} while (0)
	W(m->tok_embd, "token_embd.weight", m->c.vocab, d, 0);
	W(m->output, "output.weight", m->c.vocab, d, 1);
	if (m->output == NULL) {
		m->output = m->tok_embd;
		m->tied = 1;
	}
	V(m->out_norm, "output_norm.weight", d, 0);
	V(m->rope_freqs, "rope_freqs.weight", c->n_rot / 2, 1);
	if ((rc = longrope(m, find, ctx, why, whylen)) != 0)
		goto fail;
	if ((m->layer = medha_calloc((size_t)c->n_layers, sizeof(*m->layer))) ==
	        NULL ||
	    (m->views = medha_calloc((size_t)c->n_layers * 5,
	         sizeof(*m->views))) == NULL) {
		rc = medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
		goto fail;
	}
	for (i = 0; i < c->n_layers; i++) {
		struct medha_tensor *vw = &m->views[i * 5];
		L = &m->layer[i];
#define NM(s) (snprintf(name, sizeof(name), "blk.%d.%s.weight", i, s), name)
#define NB(s) (snprintf(name, sizeof(name), "blk.%d.%s.bias", i, s), name)
		V(L->attn_norm, NM("attn_norm"), d, 0);
		if (find(ctx, NM("attn_qkv")) != NULL) { /* fused: split */
			W(t, NM("attn_qkv"), q + 2 * kvd, d, 0);
			L->wq = rows_of(&vw[0], t, 0, q);
			L->wk = rows_of(&vw[1], t, q, q + kvd);
			L->wv = rows_of(&vw[2], t, q + kvd, q + 2 * kvd);
		} else {
			W(L->wq, NM("attn_q"), q, d, 0);
			W(L->wk, NM("attn_k"), kvd, d, 0);
			W(L->wv, NM("attn_v"), kvd, d, 0);
		}
		W(L->wo, NM("attn_output"), d, q, 0);
		if (c->a.qkv_bias) {
			V(L->bq, NB("attn_q"), q, 0);
			V(L->bk, NB("attn_k"), kvd, 0);
			V(L->bv, NB("attn_v"), kvd, 0);
		}
		if (c->a.qk_norm) {
			V(L->q_norm, NM("attn_q_norm"), c->head_dim, 0);
			V(L->k_norm, NM("attn_k_norm"), c->head_dim, 0);
		}
		if (c->a.post_norm) {
			V(L->post_attn_norm, NM("post_attention_norm"), d, 0);
			V(L->post_ffn_norm, NM("post_ffw_norm"), d, 0);
		}
		V(L->ffn_norm, NM("ffn_norm"), d, 0);
		if (medha_layer_moe(c, i)) {
			const int64_t ne = c->a.n_expert, ef = c->a.expert_ffn_dim;
			const int64_t sf = c->a.shexp_ffn_dim;
#define X(dst, nm, rows, cols)                                             \
	do {                                                               \
		if ((rc = want_exps(&(dst), find, ctx, NM(nm), rows, cols, \
		         ne, why, whylen)) != 0)                           \
			goto fail;                                         \
	} while (0)
			W(L->gate_inp, NM("ffn_gate_inp"), ne, d, 0);
			X(L->gate_exps, "ffn_gate_exps", ef, d);
			X(L->up_exps, "ffn_up_exps", ef, d);
			X(L->down_exps, "ffn_down_exps", d, ef);
#undef X
			if (sf > 0) {
				W(L->gate, NM("ffn_gate_shexp"), sf, d, 0);
				W(L->up, NM("ffn_up_shexp"), sf, d, 0);
				W(L->down, NM("ffn_down_shexp"), d, sf, 0);
			}
			if (c->a.shexp_gate)
				V(L->gate_inp_sh, NM("ffn_gate_inp_shexp"), d,
				    0);
		} else if (c->a.fused_gate_up) { /* gate rows first, then up */
			W(t, NM("ffn_up"), 2 * f, d, 0);
			L->gate = rows_of(&vw[3], t, 0, f);
			L->up = rows_of(&vw[4], t, f, 2 * f);
		} else {
			W(L->gate, NM("ffn_gate"), f, d, 0);
			W(L->up, NM("ffn_up"), f, d, 0);
		}
		if (!medha_layer_moe(c, i))
			W(L->down, NM("ffn_down"), d, f, 0);
#undef NM
#undef NB
	}
#undef W
#undef V
	*mp = m;
	return 0;
fail:
	medha_model_free(m);
	return rc;
}

/*
 * Whether a tensor of the file is one the model of c reads: a tensor it
 * would leave aside (a bias medha does not add, an MoE router) is refused
 * at load rather than ignored.
 */
static int
tensor_used(const struct medha_model_config *c, const char *name)
{
	static const char *const top[] = {"token_embd.weight",
	    "output_norm.weight", "output.weight", "rope_freqs.weight",
	    "rope_factors_long.weight", "rope_factors_short.weight"};
	static const char *const blk[] = {"attn_norm.weight",
	    "attn_q.weight", "attn_k.weight", "attn_v.weight",
	    "attn_output.weight", "ffn_norm.weight", "ffn_up.weight",
	    "ffn_down.weight"};
	static const char *const moe[] = {"ffn_gate_inp.weight",
	    "ffn_gate_exps.weight", "ffn_up_exps.weight",
	    "ffn_down_exps.weight", "ffn_gate_shexp.weight",
	    "ffn_up_shexp.weight", "ffn_down_shexp.weight",
	    "ffn_gate_inp_shexp.weight"};
	const struct medha_arch *a = &c->a;
	const char *r;
	size_t i;

	for (i = 0; i < sizeof(top) / sizeof(*top); i++)
		if (strcmp(name, top[i]) == 0)
			return 1;
	if (strncmp(name, "blk.", 4) != 0 ||
	    (r = strchr(name + 4, '.')) == NULL)
		return 0;
	r++;
	for (i = 0; i < sizeof(blk) / sizeof(*blk); i++)
		if (strcmp(r, blk[i]) == 0)
			return 1;
	if (a->n_expert > 0)
		for (i = 0; i < sizeof(moe) / sizeof(*moe); i++)
			if (strcmp(r, moe[i]) == 0)
				return i < 4 || (i < 7 && a->shexp_ffn_dim > 0) ||
				    (a->shexp_gate && i == 7);
	return (strcmp(r, "attn_qkv.weight") == 0) ||
	    (!a->fused_gate_up && strcmp(r, "ffn_gate.weight") == 0) ||
	    (a->qkv_bias && (strcmp(r, "attn_q.bias") == 0 ||
	                        strcmp(r, "attn_k.bias") == 0 ||
	                        strcmp(r, "attn_v.bias") == 0)) ||
	    (a->qk_norm && (strcmp(r, "attn_q_norm.weight") == 0 ||
	                       strcmp(r, "attn_k_norm.weight") == 0)) ||
	    (a->post_norm && (strcmp(r, "post_attention_norm.weight") == 0 ||
	                         strcmp(r, "post_ffw_norm.weight") == 0));
}

static const struct medha_tensor *
gguf_find(void *ctx, const char *name)
{
	return medha_gguf_tensor_get(ctx, name);
}

int
medha_model_load(struct medha_model **m, const struct medha_gguf *g, char *why,
    size_t whylen)
{
	struct medha_model_config c;
	uint64_t ntok;
	int rc;

	*m = NULL;
	if ((rc = medha_model_config_read(g, &c, why, whylen)) != 0)
		return rc;
	/* a layer's tensors past block_count: the file is not what its
	   header says (llama.cpp refuses it too), not a smaller model */
	for (uint64_t i = 0;; i++) {
		const struct medha_tensor *t = medha_gguf_tensor_at(g, i);
		char *end;
		long l;

		if (t == NULL)
			break;
		if (!tensor_used(&c, t->name))
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "tensor %s: not part of a %s model as medha runs "
			    "it (refused rather than ignored)",
			    t->name, c.a.name);
		if (strncmp(t->name, "blk.", 4) != 0)
			continue;
		l = strtol(t->name + 4, &end, 10);
		if (end != t->name + 4 && *end == '.' &&
		    (l < 0 || l >= c.n_layers))
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "%s: layer %ld, but block_count is %d", t->name,
			    l, c.n_layers);
	}
	if ((rc = medha_model_build(m, &c, gguf_find, (void *)g, why,
	         whylen)) != 0)
		return rc;
	/* a tokenizer of another size than the embedding: ids past the
	   shorter have no text, or no row; llama.cpp refuses it too */
	if (medha_gguf_arr_len(g, "tokenizer.ggml.tokens", &ntok, NULL) == 0 &&
	    ntok != (uint64_t)(*m)->c.vocab) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "tokenizer.ggml.tokens has %llu tokens, but "
		    "token_embd.weight has %d rows",
		    (unsigned long long)ntok, (*m)->c.vocab);
		medha_model_free(*m);
		*m = NULL;
	}
	return rc;
}

void
medha_model_free(struct medha_model *m)
{
	int i;

	if (m == NULL)
		return;
	if (m->layer != NULL)
		for (i = 0; i < m->c.n_layers; i++) {
			struct medha_layer *L = &m->layer[i];
			free(L->attn_norm);
			free(L->ffn_norm);
			free(L->bq);
			free(L->bk);
			free(L->bv);
			free(L->q_norm);
			free(L->k_norm);
			free(L->post_attn_norm);
			free(L->post_ffn_norm);
			free(L->gate_inp_sh);
		}
	free(m->layer);
	free(m->views);
	free(m->out_norm);
	free(m->rope_freqs);
	free(m);
}

static size_t
tbytes(const struct medha_tensor *t)
{
	if (t == NULL)
		return 0;
	return medha_ggml_row_bytes(t->type, t->ne[0]) *
	    (size_t)(t->n_dims >= 2 ? t->ne[1] : 1) *
	    (size_t)(t->n_dims >= 3 ? t->ne[2] : 1);
}

double
medha_model_step_bytes(const struct medha_model *m, double experts)
{
	const int E = m->c.a.n_expert;
	const double f = E > 0 && experts < E ? experts / E : 1;
	double n = (double)tbytes(m->output);
	int i;

	for (i = 0; i < m->c.n_layers; i++) {
		const struct medha_layer *L = &m->layer[i];
		n += (double)(tbytes(L->wq) + tbytes(L->wk) + tbytes(L->wv) +
		         tbytes(L->wo) + tbytes(L->gate) + tbytes(L->up) +
		         tbytes(L->down) + tbytes(L->gate_inp));
		n += f * (double)(tbytes(L->gate_exps) + tbytes(L->up_exps) +
		             tbytes(L->down_exps));
	}
	return n;
}

size_t
medha_model_weight_bytes(const struct medha_model *m)
{
	return (size_t)medha_model_step_bytes(m, m->c.a.n_expert);
}

void
medha_stage_layers(int n, int spp, int s, int *lo, int *hi)
{
	int q = n / spp, r = n % spp;

	*lo = s * q + (s < r ? s : r);
	*hi = *lo + q + (s < r);
}

int
medha_tp_share(const struct medha_model_config *c, int tp, int r,
    struct medha_tp_share *s)
{
	int g;

	if (tp < 1 || tp > MEDHA_TP_MAX || r < 0 || r >= tp ||
	    c->n_kv_heads < tp ||
	    c->n_heads % c->n_kv_heads != 0 || c->dim < tp || c->ffn_dim < tp)
		return MEDHA_EINVAL;
	g = c->n_heads / c->n_kv_heads;
	medha_stage_layers(c->n_kv_heads, tp, r, &s->kv_lo, &s->kv_hi);
	s->h_lo = s->kv_lo * g;
	s->h_hi = s->kv_hi * g;
	medha_stage_layers(c->dim, tp, r, &s->d_lo, &s->d_hi);
	medha_stage_layers(c->ffn_dim, tp, r, &s->f_lo, &s->f_hi);
	return 0;
}

int
medha_model_fingerprint(const char *model, char out[65], char *why,
    size_t whylen)
{
	struct medha_sha256 *h;
	uint8_t d[MEDHA_SHA256_LEN];
	struct stat st;
	char *buf = NULL;
	ssize_t n = 0;
	int fd = -1, rc;

	if ((rc = medha_sha256_new(&h)) != 0)
		return medha_why(why, whylen, rc, "out of memory");
	if (stat(model, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = medha_sha256_add(h, "medha model ", 12);
		if (rc == 0)
			rc = medha_sha256_add(h, model, strlen(model));
	} else if ((fd = open(model, O_RDONLY | O_CLOEXEC)) < 0 ||
	    (buf = malloc(1 << 20)) == NULL)
		rc = fd < 0 ? MEDHA_EIO : MEDHA_ENOMEM;
	else
		while (rc == 0 && (n = read(fd, buf, 1 << 20)) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			rc = n < 0 ? MEDHA_EIO
			           : medha_sha256_add(h, buf, (size_t)n);
		}
	if (rc == MEDHA_EIO)
		medha_why(why, whylen, rc, "%s: %s", model, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(buf);
	if (rc != 0) {
		medha_sha256_end(h, NULL);
		return rc == MEDHA_EIO ? rc
		                       : medha_why(why, whylen, rc, "out of memory");
	}
	if ((rc = medha_sha256_end(h, d)) != 0)
		return medha_why(why, whylen, rc, "out of memory");
	medha_hex(d, sizeof(d), out);
	return 0;
}

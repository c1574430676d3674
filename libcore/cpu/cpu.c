/*
 * cpu.c: the CPU backend's forward pass (see cpu.h): checks a batch,
 * reserves its KV blocks, and runs a range of layers over every token of
 * the batch at once, each sequence's tokens attending to that sequence's
 * cache, from the token embeddings or from hidden states handed in, to
 * hidden states handed out or to logits. Buffers grow to the largest
 * batch seen and are kept.
 *
 * Per layer there are eight parallel regions: the residual add and norm
 * (row-wise), the Q/K/V products together, attention, the output
 * product, add and norm again, gate and up together, SwiGLU, down. RoPE
 * and the KV writes run on the calling thread in between. A TP rank
 * (cpu.h) multiplies by its rows only and all-gathers four times a layer
 * on the calling thread (after attention, the output projection, SwiGLU
 * and down).
 */
#include "cpu/cpu.h"
#include "cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const struct medha_tensor *
medha_cpu_rows_view(struct medha_tensor *v, const struct medha_tensor *w,
    int lo, int hi)
{
	size_t rb = medha_ggml_row_bytes(w->type, w->ne[0]);

	*v = *w;
	v->ne[1] = hi - lo;
	v->data = (const char *)w->data + rb * (size_t)lo;
	v->nbytes = rb * (size_t)(hi - lo);
	v->offset = w->offset + rb * (size_t)lo;
	return v;
}

int
medha_cpu_init(struct medha_cpu **cp, const struct medha_model *m,
    struct medha_kvcache *kv, const struct medha_cpu_opts *o, char *why,
    size_t whylen)
{
	struct medha_cpu *c;
	const char *e;
	int rc, nt = o != NULL && o->n_threads > 0 ? o->n_threads : 1;
	int tpn = o != NULL && o->tp > 1 ? o->tp : 1;
	int tpr = o != NULL ? o->tp_rank : 0;
	struct medha_tp_share me;

	*cp = NULL;
	if (medha_tp_share(&m->c, tpn, tpr, &me) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d: the rank must be below tp, and tp at "
		    "most the kv heads (%d)",
		    tpr, tpn, m->c.n_kv_heads);
	if (kv->c.n_layers != m->c.n_layers ||
	    kv->c.n_kv_heads != me.kv_hi - me.kv_lo ||
	    kv->c.head_dim != m->c.head_dim)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "KV cache shape (%d layers, %d kv heads of %d) does not "
		    "match the model (%d, %d of %d)",
		    kv->c.n_layers, kv->c.n_kv_heads, kv->c.head_dim,
		    m->c.n_layers, me.kv_hi - me.kv_lo, m->c.head_dim);
	if (m->c.n_heads / m->c.n_kv_heads > 64)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "more than 64 query heads per kv head");
	if (o != NULL && (o->kv_shards < 0 || o->kv_shards > 64))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "kv_shards %d out of range [0, 64]", o->kv_shards);
	if (o != NULL &&
	    (o->layer_lo < 0 || o->layer_hi < 0 ||
	        o->layer_hi > m->c.n_layers ||
	        (o->layer_hi > 0 && o->layer_lo >= o->layer_hi) ||
	        (o->layer_hi == 0 && o->layer_lo != 0)))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layers [%d, %d) out of range for %d layers", o->layer_lo,
		    o->layer_hi, m->c.n_layers);
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->m = m;
	c->kv = kv;
	c->nt = nt;
	c->ref = o != NULL && o->ref;
	if ((e = getenv("MEDHA_CPU_REF")) != NULL && strcmp(e, "1") == 0)
		c->ref = 1;
	c->shards = o != NULL && o->kv_shards > 1 ? o->kv_shards : 1;
	c->compat = o != NULL && o->llama_compat && c->shards == 1;
	c->drop = o != NULL && o->window_drop;
	c->lo = o != NULL ? o->layer_lo : 0;
	c->hi = o != NULL && o->layer_hi > 0 ? o->layer_hi : m->c.n_layers;
	if ((rc = medha_threadpool_init(&c->tp, nt)) != 0) {
		free(c);
		return medha_why(why, whylen, rc, "thread pool of %d: %s", nt,
		    medha_strerror(rc));
	}
	c->tpn = tpn;
	c->tpr = tpr;
	c->ep = o != NULL && o->ep;
	c->nh = me.h_hi - me.h_lo;
	c->nkv = me.kv_hi - me.kv_lo;
	if ((c->seen = calloc((size_t)kv->c.max_seqs, 1)) == NULL ||
	    (c->ones = medha_calloc((size_t)m->c.head_dim, sizeof(float))) ==
	        NULL ||
	    (c->share = calloc((size_t)tpn, sizeof(*c->share))) == NULL ||
	    (c->w = calloc((size_t)m->c.n_layers, sizeof(*c->w))) == NULL ||
	    (c->pk = calloc((size_t)m->c.n_layers * 7 + 1,
	         sizeof(*c->pk))) == NULL ||
	    (tpn > 1 &&
	        (c->view = calloc((size_t)m->c.n_layers * 7,
	             sizeof(*c->view))) == NULL)) {
		medha_cpu_free(c);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	for (int i = 0; i < m->c.head_dim; i++)
		c->ones[i] = 1;
	for (int r = 0; r < tpn; r++)
		medha_tp_share(&m->c, tpn, r, &c->share[r]);
	for (int l = 0; l < m->c.n_layers; l++) {
		const struct medha_layer *L = &m->layer[l];
		const struct medha_tensor *all[7] = {L->wq, L->wk, L->wv,
		    L->wo, L->gate, L->up, L->down};
		/* the rows of each matrix this rank holds */
		const int hd = m->c.head_dim;
		int lo[7] = {me.h_lo * hd,
		    me.kv_lo * hd, me.kv_lo * hd, me.d_lo, me.f_lo, me.f_lo,
		    me.d_lo};
		int hi[7] = {me.h_hi * hd, me.kv_hi * hd, me.kv_hi * hd,
		    me.d_hi, me.f_hi, me.f_hi, me.d_hi};
		if (medha_layer_moe(&m->c, l)) /* the shared expert's rows */
			medha_stage_layers(m->c.a.shexp_ffn_dim, tpn, tpr,
			    &lo[W_GATE], &hi[W_GATE]);
		lo[W_UP] = lo[W_GATE];
		hi[W_UP] = hi[W_GATE];
		for (int i = 0; i < 7; i++) {
			if (all[i] == NULL) /* a routed layer's FFN */
				continue;
			c->w[l][i] = tpn == 1 ? all[i]
			                      : medha_cpu_rows_view(
			                            &c->view[l * 7 + i],
			                            all[i], lo[i], hi[i]);
			if (l >= c->lo && l < c->hi && !c->ref && !c->compat &&
			    (rc = medha_pack_make(&c->pk[l * 7 + i],
			         c->w[l][i])) != 0 &&
			    rc != MEDHA_EUNSUP) {
				medha_cpu_free(c);
				return medha_why(why, whylen, rc,
				    "repacking %s: %s", all[i]->name,
				    medha_strerror(rc));
			}
		}
	}
	if ((rc = medha_cpu_moe_init(c, why, whylen)) != 0) {
		medha_cpu_free(c);
		return rc;
	}
	*cp = c;
	return 0;
}

/* The pack of W[i] of layer l, or NULL. */
static const struct medha_pack *
pack_of(const struct medha_cpu *c, int l, int i)
{
	const struct medha_pack *p = &c->pk[l * 7 + i];

	return p->data != NULL ? p : NULL;
}

void
medha_cpu_set_gather(struct medha_cpu *c, medha_gather_fn fn, void *arg)
{
	c->gather = fn;
	c->garg = arg;
}

void
medha_cpu_set_kvp(struct medha_cpu *c, const struct medha_batch_kv *kv,
    medha_merge_fn fn, void *arg)
{
	c->kvx = kv;
	c->merge = fn;
	c->marg = arg;
}

/* KVP: where entry i's cache sequence starts, and whether it appends. */
static int64_t
base_of(const struct medha_cpu *c, int i)
{
	return c->kvx != NULL ? c->kvx[i].base : 0;
}

static int
appends(const struct medha_cpu *c, int i)
{
	return c->kvx == NULL || c->kvx[i].append;
}

/* Keys entry i attends to in its cache sequence (after its append). */
static int64_t
keys_of(const struct medha_cpu *c, const struct medha_batch *b, int i)
{
	const struct medha_batch_seq *s = &b->seq[i];

	return appends(c, i) ? s->pos - base_of(c, i) + s->n_tokens
	                     : medha_kv_seq_len(c->kv, s->seq);
}

static void
free_bufs(struct medha_cpu *c)
{
	free(c->x);
	free(c->xn);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->lse);
	free(c->g);
	free(c->u);
	free(c->cs);
	free(c->part_o);
	free(c->part_l);
	free(c->yl);
	free(c->gb);
	free(c->tscale);
	c->tscale = NULL;
	c->x = c->xn = c->q = c->k = c->v = c->att = c->lse = NULL;
	c->g = c->u = c->cs = c->part_o = c->part_l = c->yl = c->gb = NULL;
	c->cap = 0;
}

void
medha_cpu_free(struct medha_cpu *c)
{
	if (c == NULL)
		return;
	free_bufs(c);
	free(c->as);
	free(c->ascr);
	free(c->seen);
	free(c->share);
	free(c->w);
	free(c->view);
	if (c->pk != NULL)
		for (int i = 0; i <= c->m->c.n_layers * 7; i++)
			medha_pack_free(&c->pk[i]);
	free(c->pk);
	free(c->ones);
	medha_cpu_moe_free(c);
	medha_act_free(&c->act);
	medha_threadpool_free(c->tp);
	free(c);
}

struct medha_threadpool *
medha_cpu_pool(struct medha_cpu *c)
{
	return c->tp;
}

static int
grow(struct medha_cpu *c, int n, int ns, int64_t nk_max)
{
	const struct medha_model_config *mc = &c->m->c;
	size_t qd = (size_t)mc->n_heads * mc->head_dim;
	size_t kvd = (size_t)mc->n_kv_heads * mc->head_dim;
	size_t d = (size_t)mc->dim, wide = qd > d ? qd : d, per;
	/* a shared expert's rows use g and u too */
	size_t fw = (size_t)(mc->a.shexp_ffn_dim > mc->ffn_dim
	        ? mc->a.shexp_ffn_dim
	        : mc->ffn_dim);

	if (n > c->cap) {
		size_t N = (size_t)n;
		free_bufs(c);
		c->x = medha_calloc(N * d, sizeof(float));
		c->xn = medha_calloc(N * wide, sizeof(float));
		c->q = medha_calloc(N * qd, sizeof(float));
		c->k = medha_calloc(N * kvd, sizeof(float));
		c->v = medha_calloc(N * kvd, sizeof(float));
		c->att = medha_calloc(N * qd, sizeof(float));
		c->lse = medha_calloc(N * mc->n_heads, sizeof(float));
		c->g = medha_calloc(N * fw, sizeof(float));
		c->u = medha_calloc(N * fw, sizeof(float));
		c->tscale = medha_calloc(N, sizeof(float));
		c->cs = medha_calloc(2 * N * mc->n_rot, sizeof(float));
		if (c->tpn > 1) {
			const struct medha_tp_share *s0 = &c->share[0];
			size_t dr = (size_t)(s0->d_hi - s0->d_lo), wmax = dr;
			size_t qr = (size_t)(s0->h_hi - s0->h_lo) * mc->head_dim;
			size_t fr = (size_t)(s0->f_hi - s0->f_lo);
			size_t sr = (size_t)(mc->a.shexp_ffn_dim + c->tpn - 1) /
			    (size_t)c->tpn; /* a shared expert's rows */
			wmax = sr > wmax ? sr : wmax;
			wmax = qr > wmax ? qr : wmax;
			wmax = fr > wmax ? fr : wmax;
			c->yl = medha_calloc(N * dr, sizeof(float));
			c->gb = medha_calloc(N * wmax * c->tpn, sizeof(float));
		}
		if (c->shards > 1) {
			c->part_o =
			    medha_calloc(N * qd * c->shards, sizeof(float));
			c->part_l = medha_calloc(N * mc->n_heads * c->shards,
			    sizeof(float));
		}
		if (c->x == NULL || c->xn == NULL || c->q == NULL ||
		    c->k == NULL || c->v == NULL || c->att == NULL ||
		    c->lse == NULL || c->g == NULL || c->u == NULL ||
		    c->cs == NULL || c->tscale == NULL ||
		    (c->tpn > 1 && (c->yl == NULL || c->gb == NULL)) ||
		    (c->shards > 1 &&
		        (c->part_o == NULL || c->part_l == NULL))) {
			free_bufs(c);
			return MEDHA_ENOMEM;
		}
		c->cap = n;
	}
	if (ns > c->as_cap) {
		free(c->as);
		if ((c->as = medha_calloc((size_t)ns, sizeof(*c->as))) ==
		    NULL) {
			c->as_cap = 0;
			return MEDHA_ENOMEM;
		}
		c->as_cap = ns;
	}
	per = medha_attn_scratch(c->kv, c->nh, nk_max);
	if (per * (size_t)c->nt > c->ascr_cap) {
		free(c->ascr);
		if ((c->ascr = medha_calloc(per * (size_t)c->nt,
		         sizeof(float))) == NULL) {
			c->ascr_cap = 0;
			return MEDHA_ENOMEM;
		}
		c->ascr_cap = per * (size_t)c->nt;
	}
	c->ascr_per = per;
	return 0;
}

/* medha_batch_check_cache()'s view of the cache */
static int64_t
kv_len(const void *kv, int seq)
{
	return medha_kv_seq_len(kv, seq);
}

/*
 * A batch's shape against the cache. A call that claims the positions
 * (it starts at the backend's first layer) may start each sequence
 * anywhere up to its cached length; a later call finds them claimed.
 * With KVP, positions in the cache are counted from the piece's base,
 * and a sequence that only attends must hold only keys before pos.
 * The token ids are checked when they are read (at layer 0).
 */
static int
check_batch(struct medha_cpu *c, const struct medha_batch *b, int claim,
    int embed, char *why, size_t whylen)
{
	int i, rc;

	if (b->n_seqs < 1 || b->n_tokens < 1 || (embed && b->tokens == NULL) ||
	    b->seq == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL, "empty batch");
	if ((rc = medha_batch_check_cache(b, c->kvx, kv_len, c->kv, c->seen,
	         claim, c->lo, why, whylen)) != 0)
		return rc;
	for (i = 0; embed && i < b->n_tokens; i++)
		if (b->tokens[i] < 0 || b->tokens[i] >= c->m->c.vocab)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "token %d at %d is outside the vocabulary (%d)",
			    b->tokens[i], i, c->m->c.vocab);
	return 0;
}

/*
 * Attention of every sequence of the batch at one layer. need: the
 * forms of c->act (pointing at c->att) that the tasks make of the
 * outputs they finish, or 0 (outputs that are merged or gathered after,
 * or a kv head's group of heads that does not fill whole blocks).
 */
static int
attention(struct medha_cpu *c, const struct medha_batch *b, int layer,
    int need)
{
	const struct medha_model_config *mc = &c->m->c;
	const int nh = c->nh;
	const size_t qd = (size_t)nh * mc->head_dim;
	const float *po[64], *pl[64];
	int i, sh, t0, rc;
	int64_t len;

	for (sh = 0; sh < c->shards; sh++) {
		for (i = 0, t0 = 0; i < b->n_seqs;
		     t0 += b->seq[i].n_tokens, i++) {
			struct medha_attn_seq *a = &c->as[i];
			len = keys_of(c, b, i);
			a->seq = b->seq[i].seq;
			a->q = c->q + (size_t)t0 * qd;
			a->nq = b->seq[i].n_tokens;
			a->qpos = b->seq[i].pos - base_of(c, i);
			a->k_lo = len * sh / c->shards;
			a->k_hi = len * (sh + 1) / c->shards;
			a->compat = c->compat;
			a->act = need != 0 ? &c->act : NULL;
			a->act_t0 = t0;
			a->act_need = need;
			a->window = medha_layer_window(mc, layer);
			a->scale = mc->a.q_prescale ? 1.0f : mc->a.attn_scale;
			a->softcap = mc->a.attn_softcap;
			a->chunk = medha_layer_chunk(mc, layer);
			a->base = base_of(c, i);
			if (c->shards == 1) {
				a->out = c->att + (size_t)t0 * qd;
				a->lse = c->lse + (size_t)t0 * nh;
			} else {
				a->out =
				    c->part_o + ((size_t)sh * c->cap + t0) * qd;
				a->lse = c->part_l +
				    ((size_t)sh * c->cap + t0) * nh;
			}
		}
		if ((rc = medha_attn_run(c->tp, c->kv, layer, nh,
		         c->as, b->n_seqs, c->ascr, c->ascr_per)) != 0)
			return rc;
	}
	if (c->shards > 1) {
		for (sh = 0; sh < c->shards; sh++) {
			po[sh] = c->part_o + (size_t)sh * c->cap * qd;
			pl[sh] = c->part_l + (size_t)sh * c->cap * nh;
		}
		medha_attn_merge(c->shards, po, pl, b->n_tokens * nh,
		    mc->head_dim, c->att, c->lse);
	}
	return 0;
}

/*
 * Row-wise work on the batch's tokens, on the pool: x += y (if add),
 * then xn = rmsnorm(x) * w; or the SwiGLU of g and u. Tasks of
 * par_tokens() tokens: PAR_TOKENS, or fewer so that a batch of a few
 * decodes still gives every thread a share (one thread norming eight
 * tokens while the others wait cost 5% of a decode step of eight).
 * Each task then makes the forms (need) the next products take of its
 * rows, c->act pointing at the output already: the rows are in its
 * cache, where a region of its own would read half of them from the
 * other cores' (and wait for one more region).
 */
#define PAR_TOKENS 8

static int
par_tokens(const struct medha_cpu *c, int n)
{
	int per = (n + 2 * c->nt - 1) / (2 * c->nt);

	return per < 1 ? 1 : per > PAR_TOKENS ? PAR_TOKENS : per;
}

enum { ROWS_NORM, ROWS_GLU, ROWS_POST };

struct rows {
	struct medha_cpu *c;
	int n;          /* tokens */
	int per;        /* tokens per task */
	int add;        /* x += xn first */
	const float *w; /* the norm's weights (ROWS_NORM, ROWS_POST) */
	int need;       /* the forms of c->act to make (MEDHA_ACT_*) */
	int op;         /* ROWS_NORM: x += xn (add), xn = rmsnorm(x) w;
	                   ROWS_GLU: g = act(g) u; ROWS_POST: xn =
	                   rmsnorm(xn) w (a post-norm, gemma) */
};

static void
rows_task(void *arg, int i, int thread)
{
	const struct rows *r = arg;
	struct medha_cpu *c = r->c;
	const struct medha_tp_share *me = &c->share[c->tpr];
	const int d = c->m->c.dim, f = me->f_hi - me->f_lo;
	int t, t1 = (i + 1) * r->per < r->n ? (i + 1) * r->per : r->n;
	size_t j;

	(void)thread;
	for (t = i * r->per; t < t1; t++) {
		float *x = c->x + (size_t)t * d, *xn = c->xn + (size_t)t * d;
		if (r->op == ROWS_GLU) {
			medha_cpu_glu(c, c->g + (size_t)t * f,
			    c->u + (size_t)t * f, f);
			continue;
		}
		if (r->op == ROWS_POST) {
			medha_cpu_rmsnorm(xn, xn, r->w, d, c->m->c.norm_eps);
			continue;
		}
		if (r->add)
			for (j = 0; j < (size_t)d; j++)
				x[j] = xn[j] + x[j];
		medha_cpu_rmsnorm(xn, x, r->w, d, c->m->c.norm_eps);
	}
	medha_act_make_rows(&c->act, r->need, i * r->per, t1);
}

void
medha_cpu_glu(const struct medha_cpu *c, float *g, const float *u, int64_t n)
{
	if (c->m->c.a.ffn_act == MEDHA_FFN_GELU)
		medha_cpu_geglu(g, u, n, !c->ref);
	else
		(c->compat ? medha_cpu_swiglu_llama : medha_cpu_swiglu)(g, u,
		    n);
}

static void
rows(struct medha_cpu *c, int n, int add, const float *w, int need, int op)
{
	struct rows r = {c, n, par_tokens(c, n), add, w, need, op};

	medha_threadpool_run(c->tp, (n + r.per - 1) / r.per, rows_task, &r);
	c->act.have |= need;
}

/*
 * RoPE of the batch's queries and keys, and its keys and values into the
 * cache, on the pool: tasks of par_tokens() tokens, each writing the
 * part of every sequence that falls in its tokens (a sequence's cache
 * rows are apart from every other's, and a token's from every other
 * token's).
 */
struct ropekv {
	struct medha_cpu *c;
	const struct medha_batch *b;
	int l;
	int per;
	_Atomic int rc;
};

/* Each head of a token's q and k RMS-normed, times wq and wk. */
static void
head_norms(const struct medha_cpu *c, float *q, float *k, const float *wq,
    const float *wk)
{
	const int hd = c->m->c.head_dim;
	const float eps = c->m->c.norm_eps;

	for (int h = 0; h < c->nh; h++)
		medha_cpu_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, wq,
		    hd, eps);
	for (int h = 0; h < c->nkv; h++)
		medha_cpu_rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, wk,
		    hd, eps);
}

/*
 * Token t's q and k at layer l, as the layer's description says: the
 * biases added (v's too), each head's RMSNorm, then RoPE of the layer's
 * kind and type.
 */
static void
qk_token(struct medha_cpu *c, int l, int t)
{
	const struct medha_model_config *mc = &c->m->c;
	const struct medha_layer *L = &c->m->layer[l];
	const struct medha_tp_share *me = &c->share[c->tpr];
	const int hd = mc->head_dim;
	const size_t qd = (size_t)c->nh * hd, kvd = (size_t)c->nkv * hd;
	float *q = c->q + t * qd, *k = c->k + t * kvd, *v = c->v + t * kvd;
	const float *cs = c->cs +
	    ((size_t)medha_layer_rope(mc, l) * c->cap + (size_t)t) * mc->n_rot;
	const int neox = mc->a.rope_type == MEDHA_ROPE_NEOX;
	size_t j;

	if (L->bq != NULL) {
		const float *bq = L->bq + (size_t)me->h_lo * hd;
		const float *bk = L->bk + (size_t)me->kv_lo * hd;
		const float *bv = L->bv + (size_t)me->kv_lo * hd;
		for (j = 0; j < qd; j++)
			q[j] += bq[j];
		for (j = 0; j < kvd; j++) {
			k[j] += bk[j];
			v[j] += bv[j];
		}
	}
	if (L->q_norm != NULL)
		head_norms(c, q, k, L->q_norm, L->k_norm);
	if (!medha_layer_has_rope(mc, l)) { /* llama4's NoPE layer */
		if (mc->a.attn_temp_scale != 0)
			for (j = 0; j < qd; j++)
				q[j] *= c->tscale[t];
	} else if (!neox) { /* llama's: the functions its tests pin down */
		(c->compat ? medha_cpu_rope_llama
		           : medha_cpu_rope)(q, c->nh, hd, mc->n_rot, cs);
		(c->compat ? medha_cpu_rope_llama
		           : medha_cpu_rope)(k, c->nkv, hd, mc->n_rot, cs);
	} else {
		medha_cpu_rope_ext(q, c->nh, hd, mc->n_rot, cs, 1, c->compat);
		medha_cpu_rope_ext(k, c->nkv, hd, mc->n_rot, cs, 1, c->compat);
	}
	if (mc->a.qk_l2norm && medha_layer_has_rope(mc, l))
		head_norms(c, q, k, c->ones, c->ones);
	if (mc->a.q_prescale) {
		const float s = mc->a.attn_scale != 0 ? mc->a.attn_scale
		                                      : 1.0f / sqrtf((float)hd);
		for (j = 0; j < qd; j++)
			q[j] *= s;
	}
}

static void
ropekv_task(void *arg, int i, int thread)
{
	struct ropekv *r = arg;
	struct medha_cpu *c = r->c;
	const struct medha_batch *b = r->b;
	const struct medha_model_config *mc = &c->m->c;
	const size_t kvd = (size_t)c->nkv * mc->head_dim;
	int t0 = i * r->per, t1 = t0 + r->per, t, j, s0, a, e, rc;

	(void)thread;
	if (t1 > b->n_tokens)
		t1 = b->n_tokens;
	for (t = t0; t < t1; t++)
		qk_token(c, r->l, t);
	for (j = 0, s0 = 0; j < b->n_seqs && s0 < t1;
	     s0 += b->seq[j].n_tokens, j++) {
		a = s0 > t0 ? s0 : t0;
		e = s0 + b->seq[j].n_tokens < t1 ? s0 + b->seq[j].n_tokens : t1;
		if (a >= e || !appends(c, j))
			continue;
		if ((rc = medha_kv_write(c->kv, b->seq[j].seq, r->l,
		         b->seq[j].pos - base_of(c, j) + (a - s0), e - a,
		         c->k + (size_t)a * kvd, c->v + (size_t)a * kvd)) != 0)
			r->rc = rc;
	}
}

static int
rope_kv(struct medha_cpu *c, const struct medha_batch *b, int l)
{
	struct ropekv r = {c, b, l, par_tokens(c, b->n_tokens), 0};

	medha_threadpool_run(c->tp, (b->n_tokens + r.per - 1) / r.per,
	    ropekv_task, &r);
	return r.rc;
}

/*
 * TP: this rank's (n, w) part of an output, mine, gathered from every
 * rank into dst (n, W), rank r's part at columns [lo_r, lo_r + w_r):
 * kind 0, the attention output (heads); 1 and 3, dim rows; 2, ffn_dim
 * rows. Every rank sends n * w_0 floats (rank 0's part is the largest),
 * its own n * w_r first, so mine must have room for that many. dst may
 * be mine.
 */
int
medha_cpu_gather(struct medha_cpu *c, int layer, int kind, const float *mine,
    int n, float *dst, const int *lo, const int *w, float *gb)
{
	const size_t w0 = (size_t)w[0];
	const int W = lo[c->tpn - 1] + w[c->tpn - 1];
	int rc, t, r;

	if ((rc = c->gather(c->garg, layer, kind, mine,
	         (size_t)n * w0 * sizeof(float), gb, c->gwhy,
	         sizeof(c->gwhy))) != 0)
		return rc;
	for (t = 0; t < n; t++)
		for (r = 0; r < c->tpn; r++)
			memcpy(dst + (size_t)t * W + lo[r],
			    gb + (size_t)r * n * w0 + (size_t)t * w[r],
			    sizeof(float) * w[r]);
	return 0;
}

static int
gather(struct medha_cpu *c, int layer, int kind, const float *mine, int n,
    float *dst)
{
	const int hd = c->m->c.head_dim;
	int lo[MEDHA_TP_MAX], w[MEDHA_TP_MAX], r;

	for (r = 0; r < c->tpn; r++) {
		const struct medha_tp_share *s = &c->share[r];
		lo[r] = kind == 0 ? s->h_lo * hd : kind == 2 ? s->f_lo : s->d_lo;
		w[r] = (kind == 0 ? s->h_hi * hd : kind == 2 ? s->f_hi : s->d_hi) -
		    lo[r];
	}
	return medha_cpu_gather(c, layer, kind, mine, n, dst, lo, w, c->gb);
}

/*
 * Layer l over the batch. add: the previous layer's output (in xn) is
 * added into the residual stream x first; 0 where x was just set (the
 * embeddings, or hidden states handed in). With TP the products give
 * this rank's rows, gathered whole before the next step reads them.
 */
static int
layer(struct medha_cpu *c, const struct medha_batch *b, int l, int add)
{
	const struct medha_model_config *mc = &c->m->c;
	const struct medha_layer *L = &c->m->layer[l];
	const struct medha_tensor *const *W = c->w[l];
	const int n = b->n_tokens, d = mc->dim, tpn = c->tpn;
	float *y = tpn > 1 ? c->yl : c->xn; /* an output projection's rows */
	struct medha_mm mm[3];
	double t_op;
	int rc, need;

	/* the residual add of the previous layer's output, then the norm */
	mm[0] = (struct medha_mm){W[W_Q], c->q, pack_of(c, l, W_Q)};
	mm[1] = (struct medha_mm){W[W_K], c->k, pack_of(c, l, W_K)};
	mm[2] = (struct medha_mm){W[W_V], c->v, pack_of(c, l, W_V)};
	if ((rc = medha_act_set(&c->act, c->xn, n, d, c->nt)) != 0)
		return rc;
	rows(c, n, add, L->attn_norm, medha_mm_forms(mm, 3, c->ref), ROWS_NORM);
	if ((rc = medha_mm_run(c->tp, &c->act, mm, 3, c->ref)) != 0)
		return rc;
	if ((rc = rope_kv(c, b, l)) != 0)
		return rc;
	/* the output projection's input: the attention's tasks make its
	   forms, where its output is this process's whole */
	mm[0] = (struct medha_mm){W[W_O], y, pack_of(c, l, W_O)};
	if ((rc = medha_act_set(&c->act, c->att, n, mc->n_heads * mc->head_dim,
	         c->nt)) != 0)
		return rc;
	need = tpn == 1 && c->shards == 1 &&
	        !(c->kvx != NULL && c->nmerge > 0) &&
	        mc->n_heads / mc->n_kv_heads * mc->head_dim % MEDHA_QK == 0
	    ? medha_mm_forms(mm, 1, c->ref)
	    : 0;
	t_op = c->timing ? medha_cpu_clock(c) : 0;
	if ((rc = attention(c, b, l, need)) != 0)
		return rc;
	c->act.have |= need;
	if (c->timing) {
		double t1 = medha_cpu_clock(c);
		c->times.attn += t1 - t_op;
		t_op = t1;
	}
	if (c->kvx != NULL && c->nmerge > 0) {
		if ((rc = c->merge(c->marg, l, c->att, c->lse, n, c->nh,
		         mc->head_dim, c->gwhy, sizeof(c->gwhy))) != 0)
			return rc;
		if (c->timing)
			c->times.merge += medha_cpu_clock(c) - t_op;
	}
	if (tpn > 1 && (rc = gather(c, l, 0, c->att, n, c->att)) != 0)
		return rc;
	if ((rc = medha_mm_run(c->tp, &c->act, mm, 1, c->ref)) != 0)
		return rc;
	if (tpn > 1 && (rc = gather(c, l, 1, y, n, c->xn)) != 0)
		return rc;
	if (L->post_attn_norm != NULL)
		rows(c, n, 0, L->post_attn_norm, 0, ROWS_POST);
	if (medha_layer_moe(mc, l)) { /* routed: cpu_moe.c */
		rows(c, n, 1, L->ffn_norm, 0, ROWS_NORM);
		t_op = c->timing ? medha_cpu_clock(c) : 0;
		if ((rc = medha_cpu_moe_ffn(c, l, n)) != 0)
			return rc;
		if (c->timing)
			c->times.moe += medha_cpu_clock(c) - t_op;
		if (L->post_ffn_norm != NULL)
			rows(c, n, 0, L->post_ffn_norm, 0, ROWS_POST);
		return 0;
	}
	mm[0] = (struct medha_mm){W[W_GATE], c->g,
	    pack_of(c, l, W_GATE)};
	mm[1] = (struct medha_mm){W[W_UP], c->u, pack_of(c, l, W_UP)};
	if ((rc = medha_act_set(&c->act, c->xn, n, d, c->nt)) != 0)
		return rc;
	rows(c, n, 1, L->ffn_norm, medha_mm_forms(mm, 2, c->ref), ROWS_NORM);
	if ((rc = medha_mm_run(c->tp, &c->act, mm, 2, c->ref)) != 0)
		return rc;
	/* its output stays in xn for the next layer's (or the end's) add */
	mm[0] = (struct medha_mm){W[W_DOWN], y, pack_of(c, l, W_DOWN)};
	if ((rc = medha_act_set(&c->act, c->g, n, mc->ffn_dim, c->nt)) != 0)
		return rc;
	/* with TP the SwiGLU gives this rank's part, gathered after */
	rows(c, n, 0, NULL, tpn > 1 ? 0 : medha_mm_forms(mm, 1, c->ref),
	    ROWS_GLU);
	if (tpn > 1 && (rc = gather(c, l, 2, c->g, n, c->g)) != 0)
		return rc;
	if ((rc = medha_mm_run(c->tp, &c->act, mm, 1, c->ref)) != 0)
		return rc;
	if (tpn > 1 && (rc = gather(c, l, 3, y, n, c->xn)) != 0)
		return rc;
	if (L->post_ffn_norm != NULL)
		rows(c, n, 0, L->post_ffn_norm, 0, ROWS_POST);
	return 0;
}

/*
 * Each sequence's keys after this call: with claim, the window blocks
 * no query from the batch's first on sees given back (c->drop), then
 * the room for the positions it appends; *nk_max the most keys of one,
 * c->nmerge the KVP merges. 0 or an error with why.
 */
static int
claim_keys(struct medha_cpu *c, const struct medha_batch *b, int claim,
    int64_t *nk_max, char *why, size_t whylen)
{
	int rc;

	c->nmerge = 0;
	for (int i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *s = &b->seq[i];
		int64_t nk = keys_of(c, b, i);
		/* a cut back (lookahead, a failed call) returns at most to
		   this batch's first query: what it sees stays */
		if (claim && c->drop)
			medha_kv_window_drop(c->kv, s->seq,
			    s->pos - base_of(c, i));
		if (claim && appends(c, i) &&
		    (rc = medha_kv_reserve(c->kv, s->seq, nk)) != 0)
			return medha_why(why, whylen, rc,
			    "sequence %d: KV room for %lld positions: %s",
			    s->seq, (long long)nk, medha_strerror(rc));
		if (nk > *nk_max)
			*nk_max = nk;
		c->nmerge += c->kvx != NULL && c->kvx[i].merge;
	}
	return 0;
}

int
medha_cpu_forward_layers(struct medha_cpu *c, const struct medha_batch *b,
    int lo, int hi, const float *h_in, float *h_out, float *logits, char *why,
    size_t whylen)
{
	const struct medha_model *m = c->m;
	const struct medha_model_config *mc = &m->c;
	const int d = mc->dim, nl = mc->n_layers;
	const struct medha_tensor *te = m->tok_embd;
	size_t rb = medha_ggml_row_bytes(te->type, d), k;
	struct medha_mm mm;
	int64_t nk_max = 0, nrows;
	double t_head;
	int i, t, t0, j, l, rc, claim = lo == c->lo;

	if (lo < c->lo || hi > c->hi || lo >= hi)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layers [%d, %d): not a range within [%d, %d), the "
		    "layers this backend runs",
		    lo, hi, c->lo, c->hi);
	if ((lo > 0) != (h_in != NULL))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    lo > 0 ? "no hidden states to enter layer %d with"
		           : "hidden states handed to layer %d (the "
		             "embedding starts there)",
		    lo);
	if ((hi < nl) != (h_out != NULL))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    hi < nl ? "no room for the hidden states leaving layer %d"
		            : "room for hidden states leaving layer %d, the "
		              "last (it gives logits)",
		    hi - 1);
	if (hi < nl && logits != NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "logits asked for after layer %d of %d", hi - 1, nl);
	if (c->tpn > 1 && c->gather == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d: no all-gather to call", c->tpr, c->tpn);
	if ((rc = check_batch(c, b, claim, lo == 0, why, whylen)) != 0)
		return rc;
	nrows = medha_batch_logit_rows(b);
	memset(&c->times, 0, sizeof(c->times));
	if ((rc = claim_keys(c, b, claim, &nk_max, why, whylen)) != 0)
		return rc;
	if (c->nmerge > 0 && c->merge == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "a KVP merge asked for, and no merge to call");
	if ((rc = grow(c, b->n_tokens, b->n_seqs, nk_max)) != 0)
		return medha_why(why, whylen, rc, "buffers for %d tokens: %s",
		    b->n_tokens, medha_strerror(rc));

	/* the residual stream: the embeddings, or the states handed in */
	if (lo == 0)
		for (t = 0; t < b->n_tokens; t++)
			medha_dequant_row(te->type,
			    (const char *)te->data + rb * b->tokens[t],
			    c->x + (size_t)t * d, d);
	else
		memcpy(c->x, h_in, sizeof(float) * (size_t)b->n_tokens * d);
	if (lo == 0 && mc->a.embd_scale != 0 && mc->a.embd_scale != 1)
		for (k = 0; k < (size_t)b->n_tokens * d; k++)
			c->x[k] *= mc->a.embd_scale;
	for (int kind = 0; kind < 2; kind++) {
		struct medha_rope rp;
		if (kind == 1 && mc->a.swa_rope_base <= 0)
			break;
		medha_model_rope(m, kind, &rp);
		for (i = 0, t = 0; i < b->n_seqs; i++)
			for (j = 0; j < b->seq[i].n_tokens; j++, t++)
				medha_cpu_rope_table_ext(c->cs +
				        ((size_t)kind * c->cap + t) * mc->n_rot,
				    b->seq[i].pos + j, mc->n_rot, &rp);
	}
	/* llama4's attention temperature on NoPE layers, as llama.cpp's
	   llm_graph_input_attn_temp (position offset 1) */
	if (mc->a.attn_temp_scale != 0)
		for (i = 0, t = 0; i < b->n_seqs; i++)
			for (j = 0; j < b->seq[i].n_tokens; j++, t++)
				c->tscale[t] = (float)(log((double)floorf(
				    ((float)(b->seq[i].pos + j) + 1.0f) /
				    (float)mc->a.attn_temp_floor) + 1.0) *
				        (double)mc->a.attn_temp_scale + 1.0);
	for (l = lo; l < hi; l++) {
		c->gwhy[0] = '\0';
		if ((rc = layer(c, b, l, l > lo)) != 0)
			return medha_why(why, whylen, rc, "layer %d: %s", l,
			    c->gwhy[0] != '\0' ? c->gwhy : medha_strerror(rc));
	}
	/*
	 * The last layer's residual add, in the order the next layer would
	 * do it (xn + x), so that a split run is bit-identical to a whole.
	 */
	for (k = 0; k < (size_t)b->n_tokens * d; k++)
		(hi < nl ? h_out : c->x)[k] = c->xn[k] + c->x[k];
	if (claim)
		for (i = 0; i < b->n_seqs; i++)
			if (appends(c, i))
				medha_kv_set_len(c->kv, b->seq[i].seq,
				    keys_of(c, b, i));
	if (hi < nl || nrows == 0 || logits == NULL)
		return 0;

	/* the final norm of the rows asked for, then the logits */
	t_head = c->timing ? medha_cpu_clock(c) : 0;
	for (i = 0, t0 = 0, j = 0; i < b->n_seqs; t0 += b->seq[i].n_tokens, i++)
		for (t = t0; t < t0 + b->seq[i].n_tokens; t++) {
			if (b->seq[i].logits == MEDHA_LOGITS_NONE ||
			    (b->seq[i].logits == MEDHA_LOGITS_LAST &&
			        t != t0 + b->seq[i].n_tokens - 1))
				continue;
			medha_cpu_rmsnorm(c->xn + (size_t)j * d,
			    c->x + (size_t)t * d, m->out_norm, d, mc->norm_eps);
			j++;
		}
	if ((rc = medha_act_set(&c->act, c->xn, (int)nrows, d, c->nt)) != 0)
		return medha_why(why, whylen, rc, "logits: %s",
		    medha_strerror(rc));
	if (!c->out_packed && !c->ref && !c->compat) {
		/* the output's pack, at its first use (only the stage that
		   makes logits needs it) */
		const int o = m->c.n_layers * 7;
		c->out_packed = 1;
		if ((rc = medha_pack_make(&c->pk[o], m->output)) != 0 &&
		    rc != MEDHA_EUNSUP)
			return medha_why(why, whylen, rc, "repacking %s: %s",
			    m->output->name, medha_strerror(rc));
	}
	mm = (struct medha_mm){m->output, logits,
	    pack_of(c, m->c.n_layers, 0)};
	if ((rc = medha_mm_run(c->tp, &c->act, &mm, 1, c->ref)) != 0)
		return medha_why(why, whylen, rc, "logits: %s",
		    medha_strerror(rc));
	/* NaN or infinite logits (weights that overflow, or NaN in the
	   file) would sample token 0 or nothing: an error instead */
	for (size_t r = 0; r < (size_t)nrows; r++) {
		const float *l = logits + r * (size_t)mc->vocab;
		for (int v = 0; v < mc->vocab; v++)
			if (!isfinite(l[v]))
				return medha_why(why, whylen, MEDHA_ERANGE,
				    "logits row %zu: token %d is %g (the "
				    "model's numbers overflow or are NaN)",
				    r, v, (double)l[v]);
	}
	if (mc->a.final_softcap != 0)
		medha_cpu_softcap(logits, nrows * (int64_t)mc->vocab,
		    mc->a.final_softcap);
	if (c->timing)
		c->times.head = medha_cpu_clock(c) - t_head;
	return 0;
}

void
medha_cpu_set_timing(struct medha_cpu *c, int how)
{
	c->timing = how;
}

struct medha_cpu_times
medha_cpu_times(const struct medha_cpu *c)
{
	return c->times;
}

int
medha_cpu_forward(struct medha_cpu *c, const struct medha_batch *b,
    float *logits, char *why, size_t whylen)
{
	if (logits == NULL && b->seq != NULL && b->n_seqs > 0 &&
	    medha_batch_logit_rows(b) > 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no room for %lld rows of logits",
		    (long long)medha_batch_logit_rows(b));
	return medha_cpu_forward_layers(c, b, 0, c->m->c.n_layers, NULL, NULL,
	    logits, why, whylen);
}

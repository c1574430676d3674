/*
 * cpu_moe.c: the routed FFN of a mixture-of-experts layer on the CPU
 * backend (model.h's medha_arch says what it computes, as llama.cpp's
 * llm_build_moe_ffn). The batch's tokens are grouped by expert: the
 * router's logits for every token, each token's top-k, then the rows
 * routed to each expert gathered into one block, so that an expert's
 * gate, up and down matrices are read once per batch (not once per
 * token), through the same products (cpu_mm*.c: the packed integer
 * kernels, the activations quantized row by row) as a dense layer's.
 * A row's arithmetic is thus what a dense FFN of that expert would do
 * to it, whatever else is in the batch: chunked prefill stays bit for
 * bit. Then per token the experts' outputs, times their weights, added
 * in order of weight, plus the shared expert's (dense, on c->g and
 * c->u).
 *
 * Each call counts the rows it routes to each expert (m->tok, what
 * medha_cpu_expert_tokens() gives the operator's metrics).
 *
 * Per routed layer: one region for the router with the shared expert's
 * gate and up, one for its SwiGLU, one for its down; then two regions
 * per expert a token chose (gate and up; down), one for every expert's
 * SwiGLU, one for the weighted sum.
 *
 * TP as a dense layer's (cpu.h): a rank holds its share of every
 * expert's gate and up rows and of down's dim rows (and of the shared
 * expert's), computes the router whole, and all-gathers the SwiGLU
 * outputs and down's outputs, of the shared expert and of all experts
 * at once, so each (row, token) product is the one process's.
 *
 * EP (cpu.h): a rank holds its experts [e0, e1) whole and runs them
 * over their rows (one run of the grouped rows, [off[e0], off[e1])),
 * writing down's outputs straight into its send buffer; one
 * all-gather (kind 6) of every rank's run, each padded to the busiest
 * rank's rows, then puts every rank's rows in place in y, and the
 * weighted sum is the one process's. The shared expert stays TP's.
 */
#include "cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct medha_cpu_moe {
	int ne, k, ef;             /* experts, top-k, rows of an expert */
	/* TP: each rank's first row and rows of an expert's gate and up,
	   of the shared expert's, and of down (dim) */
	int elo[MEDHA_TP_MAX], ew[MEDHA_TP_MAX];
	int slo[MEDHA_TP_MAX], sw[MEDHA_TP_MAX];
	int dlo[MEDHA_TP_MAX], dw[MEDHA_TP_MAX];
	int efw, sfw, dimw;        /* this rank's of each */
	int e0, e1;                /* the experts it runs (EP: its own;
	                              else all) */
	float *gb;                 /* (tp, cap * k, the widest of rank 0's;
	                              EP: dim) what a gather receives
	                              (tp > 1) */
	struct medha_tensor *view; /* (n_layers, ne, 3) each expert's gate,
	                              up and down */
	struct medha_pack *pk;     /* (n_layers, ne, 3) their packs (data
	                              NULL: the tensor itself) */
	struct medha_pack *rpk;    /* (n_layers) the routers' packs */
	struct medha_act act;      /* the forms of one expert's rows */
	int cap;                   /* tokens the buffers below hold */
	float *logit;              /* (cap, ne) router logits */
	int *sel;                  /* (cap, k) chosen experts, by weight */
	float *wt;                 /* (cap, k) their weights */
	int *row;                  /* (cap, k) where (token, slot) is in xg */
	int *cnt, *off;            /* (ne), (ne + 1) rows per expert */
	uint64_t *tok;             /* (ne) tokens routed to each, all layers
	                              and calls (medha_cpu_expert_tokens) */
	float *xg;                 /* (cap * k, dim) the rows, by expert */
	float *g, *u;              /* (cap * k, ef) */
	float *y;                  /* (cap * k, dim) the experts' outputs */
	float *sh;                 /* (cap, dim) the shared expert's */
};

static void
bufs_free(struct medha_cpu_moe *m)
{
	free(m->logit);
	free(m->sel);
	free(m->wt);
	free(m->row);
	free(m->xg);
	free(m->g);
	free(m->u);
	free(m->y);
	free(m->sh);
	free(m->gb);
	m->logit = m->wt = m->xg = m->g = m->u = m->y = m->sh = m->gb = NULL;
	m->sel = m->row = NULL;
	m->cap = 0;
}

void
medha_cpu_moe_free(struct medha_cpu *c)
{
	struct medha_cpu_moe *m = c->moe;

	if (m == NULL)
		return;
	if (m->pk != NULL)
		for (size_t i = 0;
		     i < (size_t)c->m->c.n_layers * (size_t)m->ne * 3; i++)
			medha_pack_free(&m->pk[i]);
	if (m->rpk != NULL)
		for (int l = 0; l < c->m->c.n_layers; l++)
			medha_pack_free(&m->rpk[l]);
	free(m->pk);
	free(m->rpk);
	free(m->view);
	free(m->cnt);
	free(m->off);
	free(m->tok);
	bufs_free(m);
	medha_act_free(&m->act);
	free(m);
	c->moe = NULL;
}

/* p, or NULL where it holds no repacked data */
static const struct medha_pack *
packed(const struct medha_pack *p)
{
	return p->data != NULL ? p : NULL;
}

int
medha_cpu_moe_init(struct medha_cpu *c, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->m->c;
	struct medha_cpu_moe *m;
	size_t nv;
	int l, e, i, rc, any = 0;

	if (c->ep && mc->a.n_expert < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "expert parallelism: the model has no experts");
	if (c->ep && mc->a.n_expert % c->tpn != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "expert parallelism: %d experts do not split evenly "
		    "over tp %d",
		    mc->a.n_expert, c->tpn);
	for (l = c->lo; l < c->hi; l++)
		any |= medha_layer_moe(mc, l);
	if (!any)
		return 0;
	nv = (size_t)mc->n_layers * (size_t)mc->a.n_expert * 3;
	if ((m = c->moe = calloc(1, sizeof(*m))) == NULL ||
	    (m->view = medha_calloc(nv, sizeof(*m->view))) == NULL ||
	    (m->pk = medha_calloc(nv, sizeof(*m->pk))) == NULL ||
	    (m->rpk = medha_calloc((size_t)mc->n_layers, sizeof(*m->rpk))) ==
	        NULL ||
	    (m->cnt = medha_calloc((size_t)mc->a.n_expert, sizeof(int))) ==
	        NULL ||
	    (m->off = medha_calloc((size_t)mc->a.n_expert + 1, sizeof(int))) ==
	        NULL ||
	    (m->tok = medha_calloc((size_t)mc->a.n_expert, sizeof(uint64_t))) ==
	        NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	m->ne = mc->a.n_expert;
	m->k = mc->a.n_expert_used;
	m->ef = mc->a.expert_ffn_dim;
	for (i = 0; i < c->tpn; i++) {
		int a, b;
		medha_stage_layers(m->ef, c->tpn, i, &a, &b);
		m->elo[i] = a;
		m->ew[i] = b - a;
		medha_stage_layers(mc->a.shexp_ffn_dim, c->tpn, i, &a, &b);
		m->slo[i] = a;
		m->sw[i] = b - a;
		m->dlo[i] = c->share[i].d_lo;
		m->dw[i] = c->share[i].d_hi - c->share[i].d_lo;
	}
	m->efw = m->ew[c->tpr];
	m->sfw = m->sw[c->tpr];
	m->dimw = m->dw[c->tpr];
	m->e0 = 0;
	m->e1 = m->ne;
	if (c->ep) { /* its experts whole (tpn divides ne: above) */
		m->e0 = m->ne / c->tpn * c->tpr;
		m->e1 = m->e0 + m->ne / c->tpn;
		m->efw = m->ef;
		m->dimw = mc->dim;
	}
	for (l = c->lo; l < c->hi; l++) {
		const struct medha_layer *L = &c->m->layer[l];
		if (!medha_layer_moe(mc, l))
			continue;
		if (!c->ref && !c->compat &&
		    (rc = medha_pack_make(&m->rpk[l], L->gate_inp)) != 0 &&
		    rc != MEDHA_EUNSUP)
			return medha_why(why, whylen, rc, "repacking %s: %s",
			    L->gate_inp->name, medha_strerror(rc));
		for (e = m->e0; e < m->e1; e++)
			for (i = 0; i < 3; i++) {
				size_t at = ((size_t)l * m->ne + e) * 3 + i;
				const struct medha_tensor *x = i == 0
				    ? L->gate_exps
				    : i == 1 ? L->up_exps
				             : L->down_exps;
				struct medha_tensor whole;
				const int lo = c->ep ? 0
				    : i < 2        ? m->elo[c->tpr]
				                   : m->dlo[c->tpr];
				medha_expert_view(&whole, x, e);
				medha_cpu_rows_view(&m->view[at], &whole, lo,
				    lo + (i < 2 ? m->efw : m->dimw));
				if (c->ref || c->compat)
					continue;
				rc = medha_pack_make(&m->pk[at], &m->view[at]);
				if (rc != 0 && rc != MEDHA_EUNSUP)
					return medha_why(why, whylen, rc,
					    "repacking %s, expert %d: %s",
					    x->name, e, medha_strerror(rc));
			}
	}
	return 0;
}

static int
grow(struct medha_cpu *c, int n)
{
	struct medha_cpu_moe *m = c->moe;
	const size_t d = (size_t)c->m->c.dim, N = (size_t)n;
	const size_t nk = N * (size_t)m->k;

	if (n <= m->cap)
		return 0;
	bufs_free(m);
	m->logit = medha_calloc(N * (size_t)m->ne, sizeof(float));
	m->sel = medha_calloc(nk, sizeof(int));
	m->wt = medha_calloc(nk, sizeof(float));
	m->row = medha_calloc(nk, sizeof(int));
	m->xg = medha_calloc(nk * d, sizeof(float));
	m->g = medha_calloc(nk * (size_t)m->ef, sizeof(float));
	m->u = medha_calloc(nk * (size_t)m->ef, sizeof(float));
	m->y = medha_calloc(nk * d, sizeof(float));
	m->sh = medha_calloc(N * d, sizeof(float));
	if (c->tpn > 1) { /* EP: whole rows of dim */
		size_t w = c->ep ? d : (size_t)m->ew[0];
		w = (size_t)m->dw[0] > w ? (size_t)m->dw[0] : w;
		m->gb = medha_calloc(nk * w * (size_t)c->tpn, sizeof(float));
	}
	if (m->logit == NULL || m->sel == NULL || m->wt == NULL ||
	    m->row == NULL || m->xg == NULL || m->g == NULL || m->u == NULL ||
	    m->y == NULL || m->sh == NULL || (c->tpn > 1 && m->gb == NULL)) {
		bufs_free(m);
		return MEDHA_ENOMEM;
	}
	m->cap = n;
	return 0;
}

/*
 * Token t's experts and weights from its logits, as ggml does them:
 * softmax (exp(x - max) summed in double, times the f32 reciprocal) or
 * sigmoid; the top-k by probability (llama4: by logit), ties to the
 * lower index; renormalised by their sum, clamped to 2^-14 (moe_norm_w).
 */
static void
route(const struct medha_cpu *c, int t)
{
	const struct medha_arch *a = &c->m->c.a;
	struct medha_cpu_moe *m = c->moe;
	const float *x = m->logit + (size_t)t * m->ne;
	float p[4096], mx = -INFINITY;
	int *sel = m->sel + (size_t)t * m->k;
	float *w = m->wt + (size_t)t * m->k;
	double sum = 0;
	int e, j, i;

	if (a->moe_gating == MEDHA_MOE_SIGMOID)
		for (e = 0; e < m->ne; e++)
			p[e] = 1.0f / (1.0f + expf(-x[e]));
	else {
		for (e = 0; e < m->ne; e++)
			mx = x[e] > mx ? x[e] : mx;
		for (e = 0; e < m->ne; e++) {
			p[e] = expf(x[e] - mx);
			sum += (double)p[e];
		}
		const float inv = (float)(1.0 / sum);
		for (e = 0; e < m->ne; e++)
			p[e] *= inv;
	}
	/* the k best by the selection score, kept sorted */
	for (j = 0, e = 0; e < m->ne; e++) {
		const float s = a->moe_weight_in ? x[e] : p[e];
		if (j == m->k && !(s > (a->moe_weight_in ? x[sel[j - 1]]
		                                         : p[sel[j - 1]])))
			continue;
		i = j < m->k ? j++ : m->k - 1;
		while (i > 0 &&
		    s > (a->moe_weight_in ? x[sel[i - 1]] : p[sel[i - 1]])) {
			sel[i] = sel[i - 1];
			i--;
		}
		sel[i] = e;
	}
	for (j = 0; j < m->k; j++)
		w[j] = p[sel[j]];
	if (a->moe_norm_w) {
		double s = 0;
		float f;
		for (j = 0; j < m->k; j++)
			s += (double)w[j];
		f = (float)s;
		f = f < 6.103515625e-5f ? 6.103515625e-5f : f;
		for (j = 0; j < m->k; j++)
			w[j] /= f;
	}
}

/* the pool's share of row-wise work */
struct moe_rows {
	struct medha_cpu *c;
	int l, n, per;
	int op; /* OP_GLU_SH, OP_GLU_EXP, OP_SUM */
	int r0; /* the first row (OP_GLU_EXP: EP's run of rows) */
};
enum { OP_GLU_SH, OP_GLU_EXP, OP_SUM };

static void
moe_rows_task(void *arg, int i, int thread)
{
	const struct moe_rows *r = arg;
	struct medha_cpu *c = r->c;
	struct medha_cpu_moe *m = c->moe;
	const struct medha_layer *L = &c->m->layer[r->l];
	const struct medha_arch *a = &c->m->c.a;
	const int d = c->m->c.dim, sf = m->sfw;
	int t0 = i * r->per, t1 = t0 + r->per < r->n ? t0 + r->per : r->n;

	(void)thread;
	t0 += r->r0;
	t1 += r->r0;
	for (int t = t0; t < t1; t++) {
		if (r->op == OP_GLU_SH) {
			medha_cpu_glu(c, c->g + (size_t)t * sf,
			    c->u + (size_t)t * sf, sf);
			continue;
		}
		if (r->op == OP_GLU_EXP) {
			medha_cpu_glu(c, m->g + (size_t)t * m->efw,
			    m->u + (size_t)t * m->efw, m->efw);
			continue;
		}
		/* OP_SUM: the experts' outputs weighted, in order of weight
		   (ggml: e0 * w0 + e1 * w1, then + e2 * w2 ...), then the
		   shared expert's */
		float *o = c->xn + (size_t)t * d;
		const float *w = m->wt + (size_t)t * m->k;
		const int *rw = m->row + (size_t)t * m->k;
		for (int j = 0; j < m->k; j++) {
			const float *y = m->y + (size_t)rw[j] * d;
			const float wj = a->moe_weight_in ? 1.0f : w[j];
			for (int x = 0; x < d; x++) {
				const float v = a->moe_weight_in ? y[x]
				                                 : y[x] * wj;
				o[x] = j == 0 ? v : o[x] + v;
			}
		}
		if (L->gate != NULL) {
			const float *s = m->sh + (size_t)t * d;
			for (int x = 0; x < d; x++)
				o[x] += s[x];
		}
	}
}

static void
moe_rows(struct medha_cpu *c, int l, int r0, int n, int op)
{
	int per = (n + 4 * c->nt - 1) / (4 * c->nt);
	struct moe_rows r = {c, l, n, per < 1 ? 1 : per, op, r0};

	if (n < 1)
		return;

	medha_threadpool_run(c->tp, (n + r.per - 1) / r.per, moe_rows_task,
	    &r);
}

/* The router's logits and the shared expert's output (in m->sh); with
   TP the rank's rows, gathered after its SwiGLU and its down. */
static int
router_shared(struct medha_cpu *c, int l, int n)
{
	const struct medha_layer *L = &c->m->layer[l];
	const struct medha_tensor *const *W = c->w[l];
	struct medha_cpu_moe *m = c->moe;
	const int d = c->m->c.dim, sf = c->m->c.a.shexp_ffn_dim;
	struct medha_mm mm[3];
	int nmm = 1, rc;

	if ((rc = medha_act_set(&c->act, c->xn, n, d, c->nt)) != 0)
		return rc;
	mm[0] = (struct medha_mm){L->gate_inp, m->logit, packed(&m->rpk[l])};
	if (L->gate != NULL) {
		mm[1] = (struct medha_mm){W[W_GATE], c->g,
		    packed(&c->pk[l * 7 + W_GATE])};
		mm[2] = (struct medha_mm){W[W_UP], c->u,
		    packed(&c->pk[l * 7 + W_UP])};
		nmm = 3;
	}
	if ((rc = medha_mm_run(c->tp, &c->act, mm, nmm, c->ref)) != 0 ||
	    L->gate == NULL)
		return rc;
	moe_rows(c, l, 0, n, OP_GLU_SH);
	if (c->tpn > 1 && (rc = medha_cpu_gather(c, l, 2, c->g, n, c->g,
	                       m->slo, m->sw, c->gb)) != 0)
		return rc;
	if ((rc = medha_act_set(&c->act, c->g, n, sf, c->nt)) != 0)
		return rc;
	mm[0] = (struct medha_mm){W[W_DOWN], c->tpn > 1 ? c->yl : m->sh,
	    packed(&c->pk[l * 7 + W_DOWN])};
	if ((rc = medha_mm_run(c->tp, &c->act, mm, 1, c->ref)) != 0)
		return rc;
	if (c->tpn > 1 && (rc = medha_cpu_gather(c, l, 3, c->yl, n, m->sh,
	                       m->dlo, m->dw, c->gb)) != 0)
		return rc;
	if (L->gate_inp_sh != NULL) /* qwen2moe: silu(s) / s, as llama.cpp */
		for (int t = 0; t < n; t++) {
			const float *x = c->xn + (size_t)t * d;
			float *o = m->sh + (size_t)t * d, s, gs;
			double acc = 0;
			for (int j = 0; j < d; j++)
				acc += (double)x[j] * L->gate_inp_sh[j];
			s = (float)acc;
			gs = s / (1.0f + expf(-s)) / s;
			for (int j = 0; j < d; j++)
				o[j] *= gs;
		}
	return 0;
}

/*
 * EP: every rank's run of down's outputs (in m->xg, from its start)
 * gathered into place in m->y. The grouped rows of rank r's experts
 * are [off[r E / tp], off[(r + 1) E / tp]); every rank sends the
 * busiest rank's count of rows (the routing, hence off, is the same
 * on every rank), so one all-gather of equal parts carries them.
 */
static int
ep_gather(struct medha_cpu *c, int l)
{
	struct medha_cpu_moe *m = c->moe;
	const size_t d = (size_t)c->m->c.dim;
	const int per = m->ne / c->tpn;
	size_t most = 0;
	int r, rc;

	for (r = 0; r < c->tpn; r++) {
		size_t nr = (size_t)(m->off[(r + 1) * per] - m->off[r * per]);
		most = nr > most ? nr : most;
	}
	if ((rc = c->gather(c->garg, l, 6, m->xg, most * d * sizeof(float),
	         m->gb, c->gwhy, sizeof(c->gwhy))) != 0)
		return rc;
	for (r = 0; r < c->tpn; r++) {
		const int r0 = m->off[r * per], r1 = m->off[(r + 1) * per];
		memcpy(m->y + (size_t)r0 * d, m->gb + (size_t)r * most * d,
		    sizeof(float) * (size_t)(r1 - r0) * d);
	}
	return 0;
}

int
medha_cpu_expert_tokens(const struct medha_cpu *c, uint64_t *out, int n)
{
	const struct medha_cpu_moe *m = c->moe;

	if (m == NULL)
		return 0;
	for (int e = 0; e < m->ne && e < n; e++)
		out[e] = m->tok[e];
	return m->ne;
}

int
medha_cpu_moe_ffn(struct medha_cpu *c, int l, int n)
{
	struct medha_cpu_moe *m = c->moe;
	const struct medha_arch *a = &c->m->c.a;
	const int d = c->m->c.dim;
	struct medha_mm mm[2];
	int t, j, e, rc;

	if ((rc = grow(c, n)) != 0 || (rc = router_shared(c, l, n)) != 0)
		return rc;
	/* each token's experts, then its rows grouped by expert */
	memset(m->cnt, 0, sizeof(int) * (size_t)m->ne);
	for (t = 0; t < n; t++) {
		route(c, t);
		for (j = 0; j < m->k; j++)
			m->cnt[m->sel[(size_t)t * m->k + j]]++;
	}
	for (e = 0, m->off[0] = 0; e < m->ne; e++) {
		m->off[e + 1] = m->off[e] + m->cnt[e];
		m->tok[e] += (uint64_t)m->cnt[e];
		m->cnt[e] = 0;
	}
	for (t = 0; t < n; t++)
		for (j = 0; j < m->k; j++) {
			const size_t tj = (size_t)t * m->k + j;
			const int s = m->sel[tj], r = m->off[s] + m->cnt[s]++;
			const float *x = c->xn + (size_t)t * d;
			float *xg = m->xg + (size_t)r * d;
			m->row[tj] = r;
			if (a->moe_weight_in)
				for (int i = 0; i < d; i++)
					xg[i] = x[i] * m->wt[tj];
			else
				memcpy(xg, x, sizeof(float) * (size_t)d);
		}
	/* each expert a token chose (EP: of its own): its gate and up over
	   its rows */
	for (e = m->e0; e < m->e1; e++) {
		const size_t at = ((size_t)l * m->ne + e) * 3;
		const int r0 = m->off[e], nr = m->off[e + 1] - r0;
		if (nr == 0)
			continue;
		c->times.experts++;
		if ((rc = medha_act_set(&m->act, m->xg + (size_t)r0 * d, nr, d,
		         c->nt)) != 0)
			return rc;
		mm[0] = (struct medha_mm){&m->view[at], m->g +
		        (size_t)r0 * m->efw, packed(&m->pk[at])};
		mm[1] = (struct medha_mm){&m->view[at + 1], m->u +
		        (size_t)r0 * m->efw, packed(&m->pk[at + 1])};
		if ((rc = medha_mm_run(c->tp, &m->act, mm, 2, c->ref)) != 0)
			return rc;
	}
	moe_rows(c, l, m->off[m->e0], m->off[m->e1] - m->off[m->e0],
	    OP_GLU_EXP);
	if (c->tpn > 1 && !c->ep &&
	    (rc = medha_cpu_gather(c, l, 4, m->g, n * m->k, m->g, m->elo,
	         m->ew, m->gb)) != 0)
		return rc;
	for (e = m->e0; e < m->e1; e++) {
		const size_t at = ((size_t)l * m->ne + e) * 3 + 2;
		const int r0 = m->off[e], nr = m->off[e + 1] - r0;
		/* EP: down's rows straight into the send buffer (xg, read
		   already), from its start */
		float *y = c->ep && c->tpn > 1
		    ? m->xg + (size_t)(r0 - m->off[m->e0]) * d
		    : m->y + (size_t)r0 * m->dimw;
		if (nr == 0)
			continue;
		if ((rc = medha_act_set(&m->act, m->g + (size_t)r0 * m->ef, nr,
		         m->ef, c->nt)) != 0)
			return rc;
		mm[0] = (struct medha_mm){&m->view[at], y, packed(&m->pk[at])};
		if ((rc = medha_mm_run(c->tp, &m->act, mm, 1, c->ref)) != 0)
			return rc;
	}
	if (c->tpn > 1 && (rc = c->ep ? ep_gather(c, l)
	                              : medha_cpu_gather(c, l, 5, m->y,
	                                    n * m->k, m->y, m->dlo, m->dw,
	                                    m->gb)) != 0)
		return rc;
	moe_rows(c, l, 0, n, OP_SUM);
	return 0;
}

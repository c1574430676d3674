/*
 * cpu_attn.c: attention of new tokens against the paged KV cache, with
 * its log-sum-exp, and the KVP merge of partial results.
 *
 * A query's keys are taken in partitions of ATTN_PART positions, fixed
 * by position (0..255, 256..511, ...). Over one partition (attn_span),
 * the query heads that share a kv head are done together, so each key
 * and value row is read (and, from an f16 cache, converted) once for
 * all of them: scores come 16 keys at a time from the dimension-major K
 * runs of the cache (kvcache.h), two chains of 16-wide multiply-adds per
 * head over the first and second half of the dimensions, then added;
 * then their max, exp and sum, and the weighted values. The partitions'
 * normalized results and log-sum-exps are folded in order (fold), so a
 * query's result depends only on its position and the cached K/V, not
 * on the chunk it came in, the batch or the thread that ran it.
 *
 * Tasks: (sequence, kv head, up to ATTN_QUERIES queries), walking the
 * partitions outside the queries so that a partition is read from
 * memory once for all of them; a decode (at most ATTN_SPLIT_Q queries)
 * whose keys span partitions gets a task per partition instead (three
 * kv heads would keep most threads idle) and a second region folds the
 * parts. opts.llama_compat swaps in llama.cpp's order (attn_query_compat,
 * cpu_attn_compat.c). attn_span and its vector kernels are in
 * cpu_attn_span.c; what the three files share, in cpu_attn_impl.h.
 */
#include "cpu/cpu_attn_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_QUERIES 8 /* queries per task */
#define ATTN_SPLIT_Q 2 /* a sequence of at most this many queries is split
                          across threads by partitions */

/* ---- the region ---- */

size_t
medha_attn_scratch(const struct medha_kvcache *kv, int n_heads, int64_t nkeys)
{
	size_t g = (size_t)(n_heads / kv->c.n_kv_heads);

	size_t hd = (size_t)kv->c.head_dim, part, compat;

	/* a partition's scores and values, a part (attn_queries) */
	part = g * ATTN_PART + 2 * g * hd + g + 16;
	/* the llama_compat order: nkeys + 8 + 33 * head_dim */
	compat = g * (size_t)nkeys + (g + 33) * hd + 72;
	return part > compat ? part : compat;
}

/*
 * Fold the part (po, pl) of keys that come after those of (o, l) into
 * it, G heads of d: m = max, w = exp(l - m) each, o = (wa oa + wb ob) /
 * (wa + wb), l = m + log(wa + wb). A part with no keys changes nothing;
 * first: (o, l) holds nothing yet (the part is copied).
 */
static void
fold(int G, int d, float *o, float *l, const float *po, const float *pl,
    int first)
{
	int g, i;

	for (g = 0; g < G; g++) {
		float m, wa, wb, inv;
		if (first || l[g] == -INFINITY) {
			memcpy(o + g * d, po + g * d, sizeof(float) * d);
			l[g] = pl[g];
			continue;
		}
		if (pl[g] == -INFINITY)
			continue;
		m = l[g] > pl[g] ? l[g] : pl[g];
		wa = expf(l[g] - m);
		wb = expf(pl[g] - m);
		inv = 1.0f / (wa + wb);
		for (i = 0; i < d; i++)
			o[g * d + i] =
			    (wa * o[g * d + i] + wb * po[g * d + i]) * inv;
		l[g] = m + logf(wa + wb);
	}
}

/* the partitions of ATTN_PART keys that query qi of s sees: [*p0, *p1) */
static void
parts_of(const struct medha_attn_seq *s, int qi, int64_t *p0, int64_t *p1)
{
	int64_t lo = s->k_lo > 0 ? s->k_lo : 0, hi = s->k_hi;

	if (hi > s->qpos + qi + 1)
		hi = s->qpos + qi + 1;
	if (lo < medha_attn_first_key(s, s->qpos + qi))
		lo = medha_attn_first_key(s, s->qpos + qi);
	*p0 = lo / ATTN_PART;
	*p1 = hi > lo ? (hi - 1) / ATTN_PART + 1 : *p0 + 1;
}

/* s->out, s->lse of query qi, kv head kvh */
static float *
out_of(const struct attn_run *r, const struct medha_attn_seq *s, int kvh,
    int qi, float **lse)
{
	const int G = r->n_heads / r->kv->c.n_kv_heads;

	*lse = s->lse + (size_t)qi * r->n_heads + (size_t)kvh * G;
	return s->out + ((size_t)qi * r->n_heads + (size_t)kvh * G) *
	    r->kv->c.head_dim;
}

/* the forms s asks for of query qi's outputs of kv head kvh (finished) */
static void
make_forms(const struct attn_run *r, const struct medha_attn_seq *s, int kvh,
    int qi)
{
	const int gd = r->n_heads / r->kv->c.n_kv_heads * r->kv->c.head_dim;

	if (s->act != NULL)
		medha_act_make_span(s->act, s->act_need, s->act_t0 + qi,
		    kvh * gd, (kvh + 1) * gd);
}

/*
 * Queries [q0, q1) of s, kv head kvh: each over its keys a partition of
 * ATTN_PART at a time (partitions fixed by position, so the arithmetic
 * of a query depends only on its position, whatever the chunk, the
 * batch or the threads), the partitions folded in order; the partition
 * loop outside the query loop, so that a partition's keys and values are
 * read from memory once for all the queries of the task.
 */
static void
attn_queries(const struct attn_run *r, const struct medha_attn_seq *s,
    int kvh, int q0, int q1, float *scr)
{
	const int hd = r->kv->c.head_dim, G = r->n_heads / r->kv->c.n_kv_heads;
	float *po = scr + (size_t)G * ATTN_PART + (size_t)G * hd, *pl = po +
	    (size_t)G * hd, *o, *l;
	int64_t p, p0, p1, lo, hi, pa, pb;
	int qi;

	if (s->compat && s->k_lo <= 0) {
		for (qi = q0; qi < q1; qi++) {
			attn_query_compat(r, s, kvh, qi, scr);
			make_forms(r, s, kvh, qi);
		}
		return;
	}
	parts_of(s, q0, &p0, &pb);
	parts_of(s, q1 - 1, &pa, &p1);
	lo = s->k_lo > 0 ? s->k_lo : 0;
	for (p = p0; p < p1; p++)
		for (qi = q0; qi < q1; qi++) {
			parts_of(s, qi, &pa, &pb);
			if (p < pa || p >= pb) /* (a window starts later) */
				continue;
			o = out_of(r, s, kvh, qi, &l);
			hi = (p + 1) * ATTN_PART < s->k_hi ? (p + 1) * ATTN_PART
			                                    : s->k_hi;
			if (pb - pa == 1) { /* one partition: straight out */
				attn_span(r, s, kvh, qi, lo, hi, scr, o, l);
				continue;
			}
			attn_span(r, s, kvh, qi,
			    p * ATTN_PART > lo ? p * ATTN_PART : lo, hi, scr, po,
			    pl);
			fold(G, hd, o, l, po, pl, p == pa);
		}
	for (qi = q0; qi < q1; qi++)
		make_forms(r, s, kvh, qi);
}

/*
 * Tasks: a sequence of few queries (a decode) whose keys span several
 * partitions has a task per (kv head, query, partition), each writing
 * its part (o (G, hd), then lse (G)) to r->part, folded in order by a
 * second region; any other has a task per (kv head, ATTN_QUERIES
 * queries). The same arithmetic either way.
 */
static int
split_parts(const struct medha_attn_seq *s)
{
	int64_t p0, p1;
	if (s->nq < 1 || s->nq > ATTN_SPLIT_Q || (s->compat && s->k_lo <= 0))
		return 0;
	int64_t pa, pb;

	parts_of(s, 0, &p0, &pb);
	parts_of(s, s->nq - 1, &pa, &p1);
	return p1 - p0 > 1 ? (int)(p1 - p0) : 0;
}

/* the sequence whose first task (r->first) is the last <= i */
static int
seq_of(const struct attn_run *r, const int *first, int i)
{
	int lo = 0, hi = r->ns - 1, mid;

	while (lo < hi) {
		mid = (lo + hi + 1) / 2;
		if (first[mid] <= i)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static void
attn_task(void *arg, int i, int thread)
{
	const struct attn_run *r = arg;
	const struct medha_attn_seq *s;
	const int hd = r->kv->c.head_dim, G = r->n_heads / r->kv->c.n_kv_heads;
	int si, local, nch, kvh, c, q1;
	float *scr = r->scratch + r->scratch_per * (size_t)thread;

	si = seq_of(r, r->first, i);
	s = &r->s[si];
	local = i - r->first[si];
	if (r->np[si] > 0) { /* one partition of one query */
		int np = r->np[si], pi = local % np, qi = local / np % s->nq;
		int64_t p0, p1, lo = s->k_lo > 0 ? s->k_lo : 0, p, hi;
		float *po = r->part + r->poff[si] +
		    (size_t)local * G * (hd + 1);
		kvh = local / np / s->nq;
		parts_of(s, 0, &p0, &p1);
		p = p0 + pi;
		hi = (p + 1) * ATTN_PART < s->k_hi ? (p + 1) * ATTN_PART
		                                    : s->k_hi;
		attn_span(r, s, kvh, qi, p * ATTN_PART > lo ? p * ATTN_PART : lo,
		    hi, scr, po, po + (size_t)G * hd);
		return;
	}
	nch = (s->nq + ATTN_QUERIES - 1) / ATTN_QUERIES;
	kvh = local / nch;
	c = local % nch;
	q1 = (c + 1) * ATTN_QUERIES < s->nq ? (c + 1) * ATTN_QUERIES : s->nq;
	attn_queries(r, s, kvh, c * ATTN_QUERIES, q1, scr);
}

/* the second region: fold the parts of (split sequence, kv head, query) */
static void
fold_task(void *arg, int i, int thread)
{
	const struct attn_run *r = arg;
	const int hd = r->kv->c.head_dim, G = r->n_heads / r->kv->c.n_kv_heads;
	int si = seq_of(r, r->ffirst, i), local = i - r->ffirst[si], pi, np;
	const struct medha_attn_seq *s = &r->s[si];
	int qi = local % s->nq, kvh = local / s->nq;
	float *o, *l;

	(void)thread;
	np = r->np[si];
	o = out_of(r, s, kvh, qi, &l);
	for (pi = 0; pi < np; pi++) {
		const float *po = r->part + r->poff[si] +
		    ((size_t)local * np + pi) * G * (hd + 1);
		fold(G, hd, o, l, po, po + (size_t)G * hd, pi == 0);
	}
	make_forms(r, s, kvh, qi);
}

int
medha_attn_run(struct medha_threadpool *tp, const struct medha_kvcache *kv,
    int layer, int n_heads, const struct medha_attn_seq *s, int ns,
    float *scratch, size_t scratch_per)
{
	struct attn_run r;
	const size_t G = (size_t)(n_heads / kv->c.n_kv_heads);
	const size_t per = G * ((size_t)kv->c.head_dim + 1);
	size_t nparts = 0;
	int i, n, nf;

	if (ns <= 0)
		return 0;
	memset(&r, 0, sizeof(r));
	r.first = medha_calloc((size_t)ns + 1, sizeof(int));
	r.ffirst = medha_calloc((size_t)ns + 1, sizeof(int));
	r.np = medha_calloc((size_t)ns, sizeof(int));
	r.poff = medha_calloc((size_t)ns, sizeof(size_t));
	if (r.first == NULL || r.ffirst == NULL || r.np == NULL ||
	    r.poff == NULL)
		goto nomem;
	r.kv = kv;
	r.layer = layer;
	r.n_heads = n_heads;
	r.s = s;
	r.ns = ns;
	r.scratch = scratch;
	r.scratch_per = scratch_per;
	r.nk_max = 0;
	for (i = 0; i < ns; i++) {
		int64_t nk = s[i].k_hi - (s[i].k_lo > 0 ? s[i].k_lo : 0);
		int units = kv->c.n_kv_heads * s[i].nq;
		if (nk > r.nk_max)
			r.nk_max = nk;
		r.np[i] = split_parts(&s[i]);
		r.poff[i] = nparts * per;
		if (r.np[i] > 0) {
			nparts += (size_t)units * r.np[i];
			r.first[i + 1] = r.first[i] + units * r.np[i];
			r.ffirst[i + 1] = r.ffirst[i] + units;
		} else {
			r.first[i + 1] = r.first[i] +
			    kv->c.n_kv_heads *
			        ((s[i].nq + ATTN_QUERIES - 1) / ATTN_QUERIES);
			r.ffirst[i + 1] = r.ffirst[i];
		}
	}
	if (nparts > 0 &&
	    (r.part = malloc(nparts * per * sizeof(float))) == NULL)
		goto nomem;
	n = r.first[ns];
	nf = r.ffirst[ns];
	if (tp != NULL) {
		medha_threadpool_run(tp, n, attn_task, &r);
		medha_threadpool_run(tp, nf, fold_task, &r);
	} else {
		for (i = 0; i < n; i++)
			attn_task(&r, i, 0);
		for (i = 0; i < nf; i++)
			fold_task(&r, i, 0);
	}
	free(r.first);
	free(r.ffirst);
	free(r.np);
	free(r.poff);
	free(r.part);
	return 0;
nomem:
	free(r.first);
	free(r.ffirst);
	free(r.np);
	free(r.poff);
	return MEDHA_ENOMEM;
}

int
medha_cpu_attn(struct medha_threadpool *tp, const struct medha_kvcache *kv,
    int seq, int layer, int n_heads, const float *q, int nq, int64_t qpos,
    int64_t k_lo, int64_t k_hi, float *out, float *lse)
{
	struct medha_attn_seq s = {
	    seq, q, nq, qpos, k_lo, k_hi, out, lse, 0, NULL, 0, 0, 0, 0, 0, 0, 0};
	int64_t len = medha_kv_seq_len(kv, seq);
	size_t per;
	float *scr;
	int nt = tp != NULL ? medha_threadpool_size(tp) : 1, rc;

	if (len < 0 || layer < 0 || layer >= kv->c.n_layers || n_heads < 1 ||
	    n_heads % kv->c.n_kv_heads != 0 ||
	    n_heads / kv->c.n_kv_heads > 64 || nq < 0 || qpos < 0 ||
	    k_hi > len || k_hi > medha_kv_table(kv, seq, layer)->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	if (k_hi < k_lo)
		k_hi = k_lo;
	per = medha_attn_scratch(kv, n_heads, k_hi - (k_lo > 0 ? k_lo : 0));
	if ((scr = medha_calloc(per * (size_t)nt, sizeof(float))) == NULL)
		return MEDHA_ENOMEM;
	rc = medha_attn_run(tp, kv, layer, n_heads, &s, 1, scr, per);
	free(scr);
	return rc;
}

void
medha_attn_merge(int k, const float *const *o, const float *const *lse, int n,
    int d, float *out, float *out_lse)
{
	float m, w, sum, acc;
	int i, r, j;

	for (r = 0; r < n; r++) {
		m = -INFINITY;
		for (i = 0; i < k; i++)
			m = fmaxf(m, lse[i][r]);
		if (m == -INFINITY) {
			for (j = 0; j < d; j++)
				out[(size_t)r * d + j] = 0;
			out_lse[r] = -INFINITY;
			continue;
		}
		sum = 0;
		for (i = 0; i < k; i++)
			sum += lse[i][r] == -INFINITY ? 0 : expf(lse[i][r] - m);
		for (j = 0; j < d; j++) {
			acc = 0;
			for (i = 0; i < k; i++) {
				if (lse[i][r] == -INFINITY)
					continue;
				w = expf(lse[i][r] - m);
				acc += w * o[i][(size_t)r * d + j];
			}
			out[(size_t)r * d + j] = acc / sum;
		}
		out_lse[r] = m + logf(sum);
	}
}

/*
 * worker_batch.c: one BATCH on one worker (serve/worker.h): the items
 * whose KV its KVP group holds a piece of, through its SPP stage's
 * layers, as one forward call of its backend. A stage after the first
 * receives the hidden states from the same TP rank of the stage before;
 * the first TP rank of the last stage in the group of an item's piece 0
 * samples it. The backend does its own arithmetic around the collectives
 * it calls (TP all-gathers, the KVP merge of partial attention), which
 * this file implements over net/coll.h: straight between workers, at
 * the addresses the scheduler hands out with the first batch. Each
 * sequence's KVP piece and the groups it merges with travel in the
 * batch (batch.h struct medha_batch_kv), never in the wire message.
 */
#include "serve/worker_impl.h"

#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether KVP group g holds one of pieces 0..k of item it. */
static int
holds(const struct medha_msg_item *it, int k, int g)
{
	for (int i = 0; i <= k; i++)
		if (it->groups[i] == g)
			return 1;
	return 0;
}

/* The groups holding pieces 0..k of item it, a bit each. */
static uint64_t
groups_of(const struct medha_msg_item *it, int k)
{
	uint64_t m = 0;

	for (int i = 0; i <= k; i++)
		m |= (uint64_t)1 << it->groups[i];
	return m;
}

/*
 * KVP: an item's tokens fall in piece k (a chunk never spans two), and
 * it attends to pieces 0..k, held by groups[0..k]; without groups it is
 * group 0's alone. *piece gets the piece this worker's group holds (-1:
 * none, the item is not run here), *k the item's. 0, or -1 with why for
 * an item that breaks those rules.
 */
static int
item_piece(const struct worker *w, const struct medha_msg_item *it,
    int *piece, int *k, char *why, size_t whylen)
{
	int64_t P = w->kvp_tokens;

	*piece = -1;
	*k = 0;
	if (it->n_groups == 0) {
		*piece = w->lay.rg == 0 ? 0 : -1;
		return 0;
	}
	if (P < 1) {
		snprintf(why, whylen, "KVP groups given, but no piece size");
		return -1;
	}
	*k = (int)(it->pos / P);
	if ((it->pos + it->n_ids - 1) / P != *k || *k >= it->n_groups) {
		snprintf(why, whylen,
		    "request %llx: positions %lld..%lld span pieces of %lld "
		    "or lack a group (%d given)",
		    (unsigned long long)it->handle, (long long)it->pos,
		    (long long)(it->pos + it->n_ids - 1), (long long)P,
		    it->n_groups);
		return -1;
	}
	for (int g = 0; g <= *k; g++) {
		if (it->groups[g] >= w->lay.kvp ||
		    holds(it, g - 1, it->groups[g])) {
			snprintf(why, whylen,
			    "request %llx: piece %d on group %d: not one of "
			    "the %d groups, or one holding another piece",
			    (unsigned long long)it->handle, g, it->groups[g],
			    w->lay.kvp);
			return -1;
		}
		if (it->groups[g] == w->lay.rg)
			*piece = g;
	}
	return 0;
}

/*
 * Prefix caching: q, new, made of the fork's runs that fall in this
 * worker's piece of the item's sequence, from base on (every piece up
 * to the item's is wholly cached but its last): each from the sequence
 * of its source here, which holds the same piece. 0, or -1 with why.
 */
static int
fork_item(struct worker *w, struct wseq *q, const struct medha_msg_item *it,
    int64_t base, char *why, size_t whylen)
{
	int64_t end = w->lay.kvp > 1 && w->kvp_tokens > 0
	    ? base + w->kvp_tokens
	    : INT64_MAX;

	for (int64_t k = 0; k < it->n_forks; k++) {
		const struct medha_msg_fork *f = &it->forks[k];
		int64_t lo = f->from > base ? f->from : base;
		int64_t hi = f->to < end ? f->to : end;
		struct wseq *src;
		int rc;
		if (lo >= hi)
			continue;
		src = wk_find_seq(w, f->src);
		if (src == NULL || src->base != base) {
			snprintf(why, whylen,
			    "request %llx: forks from %llx, which this worker "
			    "does not hold",
			    (unsigned long long)it->handle,
			    (unsigned long long)f->src);
			return -1;
		}
		if ((rc = medha_backend_seq_fork(w->be, q->seq, src->seq,
		         lo - base, hi - base)) != 0) {
			snprintf(why, whylen,
			    "request %llx: fork of %llx's positions %lld..%lld: "
			    "%s",
			    (unsigned long long)it->handle,
			    (unsigned long long)f->src, (long long)lo,
			    (long long)hi, medha_strerror(rc));
			return -1;
		}
	}
	return 0;
}

int
wk_grow_scratch(struct worker *w, size_t ntok, size_t nseq)
{
	if (ntok > w->tok_cap) {
		void *p = medha_reallocarray(w->tok, ntok, sizeof(*w->tok));
		if (p == NULL)
			return MEDHA_ENOMEM;
		w->tok = p;
		w->tok_cap = ntok;
	}
	if (nseq > w->seq_cap) {
		void *a = medha_reallocarray(w->bs, nseq, sizeof(*w->bs));
		if (a != NULL)
			w->bs = a;
		void *b = medha_reallocarray(w->smp, nseq, sizeof(*w->smp));
		if (b != NULL)
			w->smp = b;
		void *c = medha_reallocarray(w->out, nseq, sizeof(*w->out));
		if (c != NULL)
			w->out = c;
		void *d = medha_reallocarray(w->idx, nseq, sizeof(*w->idx));
		if (d != NULL)
			w->idx = d;
		void *e = medha_reallocarray(w->kvx, nseq, sizeof(*w->kvx));
		if (e != NULL)
			w->kvx = e;
		if (a == NULL || b == NULL || c == NULL || d == NULL ||
		    e == NULL)
			return MEDHA_ENOMEM;
		w->seq_cap = nseq;
	}
	return 0;
}

/* How long a collective waits for a peer: a stage before may be
 * running a long batch. */
#define COLL_WAIT 120.0

/* Collective kinds in tags (MEDHA_COLL_TAG): hidden states between
 * stages, KVP partial attention; the backend's TP all-gathers are
 * TAG_TP + its kind (0-3). */
enum { TAG_STAGE = 1, TAG_KVP = 2, TAG_TP = 8 };

/* Host memory only: net/coll.h reaches no device. */
static int
host_only(int mem, char *why, size_t whylen)
{
	return mem == MEDHA_MEM_HOST
	    ? 0
	    : medha_why(why, whylen, MEDHA_EUNSUP,
	          "collectives over nng: host memory only");
}

/* The TP ranks of this worker's stage and group, in rank order. */
static void
tp_group(const struct worker *w, int *group)
{
	for (int i = 0; i < w->lay.tp; i++)
		group[i] = medha_layout_rank(&w->lay, i, w->lay.rs, w->lay.rg);
}

static int
all_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, int mem, char *why, size_t whylen)
{
	const struct call *t = arg;
	int group[MEDHA_TP_MAX], rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	tp_group(t->w, group);
	return medha_coll_all_gather(t->w->coll, group, t->w->lay.tp,
	    MEDHA_COLL_TAG(t->bseq, layer, TAG_TP + kind), mine, len, all,
	    COLL_WAIT, why, whylen);
}

static int
all_reduce(void *arg, int layer, int kind, float *x, size_t n, int mem,
    char *why, size_t whylen)
{
	const struct call *t = arg;
	int group[MEDHA_TP_MAX], rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	tp_group(t->w, group);
	return medha_coll_all_reduce(t->w->coll, group, t->w->lay.tp,
	    MEDHA_COLL_TAG(t->bseq, layer, TAG_TP + kind), x, n, COLL_WAIT,
	    why, whylen);
}

/* KVP: the same TP rank and stage in group g. */
static int
exchange(void *arg, int layer, int g, const void *buf, size_t len,
    void *rbuf, size_t rlen, int mem, char *why, size_t whylen)
{
	const struct call *t = arg;
	const struct worker *w = t->w;
	const uint64_t tag = MEDHA_COLL_TAG(t->bseq, layer, TAG_KVP);
	int peer, rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	if (g < 0 || g >= w->lay.kvp || g == w->lay.rg)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "KVP exchange with group %d of %d", g, w->lay.kvp);
	peer = medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs, g);
	if ((rc = medha_coll_send(w->coll, peer, tag, buf, len, COLL_WAIT, why,
	         whylen)) != 0)
		return rc;
	return medha_coll_recv(w->coll, peer, tag, rbuf, rlen, COLL_WAIT, why,
	    whylen);
}

/* SPP: the stage after (or before) on the same TP rank and group; the
 * tag names the receiving stage. */
static int
send_next(void *arg, const void *buf, size_t len, int mem, char *why,
    size_t whylen)
{
	const struct call *t = arg;
	const struct worker *w = t->w;
	int rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	return medha_coll_send(w->coll,
	    medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs + 1, w->lay.rg),
	    MEDHA_COLL_TAG(t->bseq, w->lay.rs + 1, TAG_STAGE), buf, len,
	    COLL_WAIT, why, whylen);
}

static int
recv_prev(void *arg, void *buf, size_t len, int mem, char *why,
    size_t whylen)
{
	const struct call *t = arg;
	const struct worker *w = t->w;
	int rc;

	if ((rc = host_only(mem, why, whylen)) != 0)
		return rc;
	return medha_coll_recv(w->coll,
	    medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs - 1, w->lay.rg),
	    MEDHA_COLL_TAG(t->bseq, w->lay.rs, TAG_STAGE), buf, len, COLL_WAIT,
	    why, whylen);
}

void
wk_comm(struct worker *w, struct call *c, uint64_t bseq,
    struct medha_comm *cm)
{
	*c = (struct call){w, bseq};
	*cm = (struct medha_comm){all_gather, all_reduce, exchange, send_next,
	    recv_prev, w->lay.tp, w->lay.rt, w->lay.kvp, w->lay.rg, c};
}

/*
 * The sequence of item it (piece `piece` of k + 1, starting at base):
 * the one held, or a new one (forked from cached ones, with a sampler
 * where this worker samples) for a request's first item on this piece.
 * NULL with res->error set when there is none or no room.
 */
static struct wseq *
item_seq(struct worker *w, const struct medha_msg_item *it, int piece, int k,
    int64_t base, int report, struct medha_msg_result *res)
{
	const struct medha_model_config *mc = &w->be->info.shape;
	struct wseq *q = wk_find_seq(w, it->handle);

	if (q != NULL)
		return q;
	if (it->n_forks == 0 && (piece != k || it->pos != base)) {
		snprintf(res->error, sizeof(res->error),
		    "request %llx at position %lld: no such sequence",
		    (unsigned long long)it->handle, (long long)it->pos);
		return NULL;
	}
	struct medha_sampler_params sp =
	    it->has_params ? it->params : medha_sampling_greedy;
	if ((q = wk_new_seq(w, it->handle)) == NULL ||
	    medha_backend_seq_alloc(w->be, &q->seq) != 0) {
		if (q != NULL)
			wk_free_seq(w, q);
		snprintf(res->error, sizeof(res->error),
		    "no room for another sequence (%d held)", w->max_seqs);
		return NULL;
	}
	q->base = base;
	if (it->n_forks > 0 &&
	    fork_item(w, q, it, base, res->error, sizeof(res->error)) != 0) {
		wk_free_seq(w, q);
		return NULL;
	}
	/* only the worker that samples holds a sampler */
	if (report && piece == 0 &&
	    medha_sampler_init(&q->smp, &sp, mc->vocab) != 0) {
		wk_free_seq(w, q);
		snprintf(res->error, sizeof(res->error),
		    "request %llx: bad sampling parameters",
		    (unsigned long long)it->handle);
		return NULL;
	}
	return q;
}

void
wk_run_batch(struct worker *w, const struct medha_msg_batch *b,
    struct medha_msg_result *res)
{
	const struct medha_model_config *mc = &w->be->info.shape;
	int first = w->lay.rs == 0, last = w->lay.rs == w->lay.spp - 1;
	int report = last && w->lay.rt == 0;
	/* a backend that computes nothing (sim): stages only wait for each
	 * other; and every last-stage worker takes the time of the logits */
	int sim = !w->computes;
	struct medha_batch batch;
	struct medha_fwd f;
	struct call tc;
	struct medha_comm comm;
	size_t ntok = 0, nh;
	int64_t i, n = 0, nsample = 0, nmerge = 0;
	int rc, piece, k;

	res->seq = b->seq;
	res->worker_id = w->id;
	for (i = 0; i < b->n_items; i++) {
		if (item_piece(w, &b->items[i], &piece, &k, res->error,
		        sizeof(res->error)) != 0)
			return;
		if (piece >= 0)
			ntok += (size_t)b->items[i].n_ids;
	}
	if (ntok == 0)
		return;
	if (wk_grow_scratch(w, ntok, (size_t)b->n_items) != 0) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		return;
	}
	ntok = 0;
	for (i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		int64_t base;
		int samp;
		struct wseq *q;

		item_piece(w, it, &piece, &k, res->error, sizeof(res->error));
		if (piece < 0)
			continue;
		/* the group of piece 0 takes part in every item of a
		   request: it samples */
		base = (int64_t)piece * w->kvp_tokens;
		samp = it->sample && last && piece == 0;
		if ((q = item_seq(w, it, piece, k, base, report,
		         res)) == NULL)
			return;
		/* the repetition penalty's tokens: the prompt's (a decode's
		   input was drawn, and counted, already: no matter) */
		if (q->smp != NULL)
			medha_sampler_prompt(q->smp, it->ids, it->n_ids);
		memcpy(w->tok + ntok, it->ids,
		    (size_t)it->n_ids * sizeof(int32_t));
		ntok += (size_t)it->n_ids;
		w->bs[n] = (struct medha_batch_seq){.seq = q->seq,
		    .pos = it->pos,
		    .n_tokens = (int32_t)it->n_ids,
		    .logits = samp && (report || sim) ? MEDHA_LOGITS_LAST
		                                      : MEDHA_LOGITS_NONE};
		w->kvx[n] = (struct medha_batch_kv){base, piece == k, k > 0,
		    k > 0 ? groups_of(it, k) : 0};
		nmerge += k > 0;
		w->smp[n] = samp && report ? q->smp : NULL;
		nsample += samp && report;
		w->idx[n++] = (int32_t)i;
	}
	batch = (struct medha_batch){w->tok, (int32_t)ntok, w->bs, (int32_t)n};
	w->ncur = (int)n;
	wk_comm(w, &tc, b->seq, &comm);
	nh = sim ? 0 : ntok * (size_t)mc->dim;
	if ((!first || !last) && nh > w->h_cap) {
		void *p = medha_reallocarray(w->h, nh, sizeof(float));
		if (p == NULL) {
			snprintf(res->error, sizeof(res->error),
			    "out of memory");
			return;
		}
		w->h = p;
		w->h_cap = nh;
	}
	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = w->be->info.layer_lo;
	f.layer_hi = w->be->info.layer_hi;
	if (w->lay.tp > 1 || nmerge > 0)
		f.comm = &comm;
	if (w->lay.kvp > 1)
		f.kv = w->kvx;
	if (!first) {
		f.h_in = sim ? w->tok0 : w->h; /* sim reads nothing */
		if ((rc = recv_prev(&tc, w->h, nh * sizeof(float),
		         MEDHA_MEM_HOST, res->error, sizeof(res->error))) != 0)
			return;
	}
	if (!last)
		f.h_out = sim ? w->tok0 : w->h; /* h_in read before written */
	if (nsample > 0) {
		f.samplers = w->smp;
		f.tokens = w->out;
	}
	rc = medha_backend_forward(w->be, &f, res->error, sizeof(res->error));
	if (rc != 0)
		return;
	if (!last && send_next(&tc, w->h, nh * sizeof(float), MEDHA_MEM_HOST,
	                 res->error, sizeof(res->error)) != 0)
		return;
	if (nsample == 0)
		return;
	if ((res->tokens = medha_calloc((size_t)nsample,
	         sizeof(*res->tokens))) == NULL) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		return;
	}
	for (i = 0; i < n; i++)
		if (w->smp[i] != NULL && w->out[i] >= 0)
			res->tokens[res->n_tokens++] =
			    (struct medha_msg_token){b->items[w->idx[i]].handle,
			        w->out[i], wk_token_lp(w, b->items[w->idx[i]].handle)};
}

struct medha_token_lp *
wk_token_lp(struct worker *w, uint64_t handle)
{
	struct wseq *q = wk_find_seq(w, handle);
	const struct medha_logprob *top;
	struct medha_token_lp *lp;
	float v;
	int n;

	if (q == NULL || q->smp == NULL ||
	    (n = medha_sample_logprobs(q->smp, &v, &top)) < 0 ||
	    (lp = malloc(sizeof(*lp))) == NULL)
		return NULL; /* none asked (or no memory: none given) */
	lp->logprob = v;
	lp->ntop = n;
	memcpy(lp->top, top, (size_t)n * sizeof(*top));
	return lp;
}


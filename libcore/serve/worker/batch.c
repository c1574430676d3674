/*
 * batch.c: one BATCH on one live worker (batch.h): the items whose KV
 * its KVP group holds a piece of, through its SPP stage's layers, as
 * one forward call of its backend. A stage after the first receives the
 * hidden states from the same TP rank of the stage before; the first TP
 * rank of the last stage in the group of an item's piece 0 samples it.
 * The backend calls the collectives (peers.c) for the TP all-gathers
 * and the KVP merge. Each sequence's KVP piece and the groups it merges
 * with travel in the batch (batch.h struct medha_batch_kv), never in
 * the wire message.
 */
#include "serve/worker/batch.h"

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
item_piece(const struct wk_peers *p, const struct medha_msg_item *it,
    int *piece, int *k, char *why, size_t whylen)
{
	int64_t P = p->kvp_tokens;

	*piece = -1;
	*k = 0;
	if (it->n_groups == 0) {
		*piece = p->lay.rg == 0 ? 0 : -1;
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
		if (it->groups[g] >= p->lay.kvp ||
		    holds(it, g - 1, it->groups[g])) {
			snprintf(why, whylen,
			    "request %llx: piece %d on group %d: not one of "
			    "the %d groups, or one holding another piece",
			    (unsigned long long)it->handle, g, it->groups[g],
			    p->lay.kvp);
			return -1;
		}
		if (it->groups[g] == p->lay.rg)
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
fork_item(struct wk_batch *r, struct wseq *q, const struct medha_msg_item *it,
    int64_t base, char *why, size_t whylen)
{
	int64_t end = r->peers->lay.kvp > 1 && r->peers->kvp_tokens > 0
	    ? base + r->peers->kvp_tokens
	    : INT64_MAX;

	for (int64_t k = 0; k < it->n_forks; k++) {
		const struct medha_msg_fork *f = &it->forks[k];
		int64_t lo = f->from > base ? f->from : base;
		int64_t hi = f->to < end ? f->to : end;
		struct wseq *src;
		int rc;
		if (lo >= hi)
			continue;
		src = wk_seqs_find(r->seqs, f->src);
		if (src == NULL || src->base != base) {
			snprintf(why, whylen,
			    "request %llx: forks from %llx, which this worker "
			    "does not hold",
			    (unsigned long long)it->handle,
			    (unsigned long long)f->src);
			return -1;
		}
		if ((rc = medha_backend_seq_fork(r->be, q->seq, src->seq,
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

void
wk_batch_init(struct wk_batch *r, struct medha_backend *be,
    struct wk_seqs *seqs, struct wk_peers *peers)
{
	memset(r, 0, sizeof(*r));
	r->be = be;
	r->seqs = seqs;
	r->peers = peers;
	r->computes = (be->info.caps & MEDHA_BACKEND_COMPUTES) != 0;
}

void
wk_batch_free(struct wk_batch *r)
{
	free(r->tok);
	free(r->bs);
	free(r->smp);
	free(r->out);
	free(r->idx);
	free(r->kvx);
	free(r->h);
}

int
wk_batch_grow(struct wk_batch *r, size_t ntok, size_t nseq)
{
	if (ntok > r->tok_cap) {
		void *p = medha_reallocarray(r->tok, ntok, sizeof(*r->tok));
		if (p == NULL)
			return MEDHA_ENOMEM;
		r->tok = p;
		r->tok_cap = ntok;
	}
	if (nseq > r->seq_cap) {
		void *a = medha_reallocarray(r->bs, nseq, sizeof(*r->bs));
		if (a != NULL)
			r->bs = a;
		void *b = medha_reallocarray(r->smp, nseq, sizeof(*r->smp));
		if (b != NULL)
			r->smp = b;
		void *c = medha_reallocarray(r->out, nseq, sizeof(*r->out));
		if (c != NULL)
			r->out = c;
		void *d = medha_reallocarray(r->idx, nseq, sizeof(*r->idx));
		if (d != NULL)
			r->idx = d;
		void *e = medha_reallocarray(r->kvx, nseq, sizeof(*r->kvx));
		if (e != NULL)
			r->kvx = e;
		if (a == NULL || b == NULL || c == NULL || d == NULL ||
		    e == NULL)
			return MEDHA_ENOMEM;
		r->seq_cap = nseq;
	}
	return 0;
}

/*
 * The sequence of item it (piece `piece` of k + 1, starting at base):
 * the one held, or a new one (forked from cached ones, with a sampler
 * where this worker samples) for a request's first item on this piece.
 * NULL with res->error set when there is none or no room.
 */
static struct wseq *
item_seq(struct wk_batch *r, const struct medha_msg_item *it, int piece, int k,
    int64_t base, int report, struct medha_msg_result *res)
{
	const struct medha_model_config *mc = &r->be->info.shape;
	struct wseq *q = wk_seqs_find(r->seqs, it->handle);

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
	if ((q = wk_seqs_new(r->seqs, it->handle)) == NULL ||
	    medha_backend_seq_alloc(r->be, &q->seq) != 0) {
		if (q != NULL)
			wk_seqs_drop(r->seqs, q);
		snprintf(res->error, sizeof(res->error),
		    "no room for another sequence (%d held)", r->seqs->max);
		return NULL;
	}
	q->base = base;
	if (it->n_forks > 0 &&
	    fork_item(r, q, it, base, res->error, sizeof(res->error)) != 0) {
		wk_seqs_drop(r->seqs, q);
		return NULL;
	}
	/* only the worker that samples holds a sampler */
	if (report && piece == 0 &&
	    medha_sampler_init(&q->smp, &sp, mc->vocab) != 0) {
		wk_seqs_drop(r->seqs, q);
		snprintf(res->error, sizeof(res->error),
		    "request %llx: bad sampling parameters",
		    (unsigned long long)it->handle);
		return NULL;
	}
	return q;
}

void
wk_batch_run(struct wk_batch *r, const struct medha_msg_batch *b,
    struct medha_msg_result *res)
{
	const struct medha_model_config *mc = &r->be->info.shape;
	const struct medha_layout *lay = &r->peers->lay;
	int first = lay->rs == 0, last = lay->rs == lay->spp - 1;
	int report = last && lay->rt == 0;
	/* a backend that computes nothing (sim): stages only wait for each
	 * other; and every last-stage worker takes the time of the logits */
	int sim = !r->computes;
	struct medha_batch batch;
	struct medha_fwd f;
	struct wk_call tc;
	struct medha_comm comm;
	size_t ntok = 0, nh;
	int64_t i, n = 0, nsample = 0, nmerge = 0;
	int rc, piece, k;

	res->seq = b->seq;
	for (i = 0; i < b->n_items; i++) {
		if (item_piece(r->peers, &b->items[i], &piece, &k, res->error,
		        sizeof(res->error)) != 0)
			return;
		if (piece >= 0)
			ntok += (size_t)b->items[i].n_ids;
	}
	if (ntok == 0)
		return;
	if (wk_batch_grow(r, ntok, (size_t)b->n_items) != 0) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		return;
	}
	ntok = 0;
	for (i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		int64_t base;
		int samp;
		struct wseq *q;

		item_piece(r->peers, it, &piece, &k, res->error, sizeof(res->error));
		if (piece < 0)
			continue;
		/* the group of piece 0 takes part in every item of a
		   request: it samples */
		base = (int64_t)piece * r->peers->kvp_tokens;
		samp = it->sample && last && piece == 0;
		if ((q = item_seq(r, it, piece, k, base, report,
		         res)) == NULL)
			return;
		/* the repetition penalty's tokens: the prompt's (a decode's
		   input was drawn, and counted, already: no matter) */
		if (q->smp != NULL)
			medha_sampler_prompt(q->smp, it->ids, it->n_ids);
		memcpy(r->tok + ntok, it->ids,
		    (size_t)it->n_ids * sizeof(int32_t));
		ntok += (size_t)it->n_ids;
		r->bs[n] = (struct medha_batch_seq){.seq = q->seq,
		    .pos = it->pos,
		    .n_tokens = (int32_t)it->n_ids,
		    .logits = samp && (report || sim) ? MEDHA_LOGITS_LAST
		                                      : MEDHA_LOGITS_NONE};
		r->kvx[n] = (struct medha_batch_kv){base, piece == k, k > 0,
		    k > 0 ? groups_of(it, k) : 0};
		nmerge += k > 0;
		r->smp[n] = samp && report ? q->smp : NULL;
		nsample += samp && report;
		r->idx[n++] = (int32_t)i;
	}
	batch = (struct medha_batch){r->tok, (int32_t)ntok, r->bs, (int32_t)n};
	r->n = (int)n;
	wk_peers_comm(r->peers, &tc, b->seq, &comm);
	nh = sim ? 0 : ntok * (size_t)mc->dim;
	if ((!first || !last) && nh > r->h_cap) {
		void *p = medha_reallocarray(r->h, nh, sizeof(float));
		if (p == NULL) {
			snprintf(res->error, sizeof(res->error),
			    "out of memory");
			return;
		}
		r->h = p;
		r->h_cap = nh;
	}
	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = r->be->info.layer_lo;
	f.layer_hi = r->be->info.layer_hi;
	if (lay->tp > 1 || nmerge > 0)
		f.comm = &comm;
	if (lay->kvp > 1)
		f.kv = r->kvx;
	if (!first) {
		f.h_in = sim ? r->tok0 : r->h; /* sim reads nothing */
		if ((rc = wk_peers_recv_prev(&tc, r->h, nh * sizeof(float),
		         MEDHA_MEM_HOST, res->error, sizeof(res->error))) != 0)
			return;
	}
	if (!last)
		f.h_out = sim ? r->tok0 : r->h; /* h_in read before written */
	if (nsample > 0) {
		f.samplers = r->smp;
		f.tokens = r->out;
	}
	rc = medha_backend_forward(r->be, &f, res->error, sizeof(res->error));
	if (rc != 0)
		return;
	if (!last && wk_peers_send_next(&tc, r->h, nh * sizeof(float), MEDHA_MEM_HOST,
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
		if (r->smp[i] != NULL && r->out[i] >= 0)
			res->tokens[res->n_tokens++] =
			    (struct medha_msg_token){b->items[r->idx[i]].handle,
			        r->out[i], wk_seqs_token_lp(r->seqs, b->items[r->idx[i]].handle)};
}

/*
 * worker_batch.c: one BATCH on one worker (serve/worker.h): the items
 * whose KV its KVP group holds a piece of, through its SPP stage's
 * layers, as one forward call of its backend. A stage after the first
 * receives the hidden states from the same TP rank of the stage before;
 * TP ranks all-gather inside the backend (tp_gather), KVP groups merge
 * partial attention (kvp_merge); the first TP rank of the last stage in
 * the group of an item's piece 0 samples it. The collectives (net/coll.h)
 * go straight between workers, at the addresses the scheduler hands out
 * with the first batch. The merge reads only the batch the backend was
 * given (each sequence's piece and the groups it merges with:
 * batch.h), never the wire message. The numerics are the backend's
 * (and medha_attn_merge's for the KVP merge).
 */
#include "serve/worker_impl.h"

#include "cpu/cpu.h" /* medha_attn_merge: the KVP merge */
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

/* One forward call's collectives: the batch the backend was given (the
 * KVP merge reads which groups merge each sequence from kv), its
 * sequence number for the tags. */
struct call {
	struct worker *w;
	uint64_t bseq;
	const struct medha_batch *b;
	const struct medha_batch_kv *kv;
};

static int
tp_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, char *why, size_t whylen)
{
	const struct call *t = arg;
	struct worker *w = t->w;
	int group[MEDHA_TP_MAX];

	for (int i = 0; i < w->lay.tp; i++)
		group[i] = medha_layout_rank(&w->lay, i, w->lay.rs, w->lay.rg);
	return medha_coll_all_gather(w->coll, group, w->lay.tp,
	    MEDHA_COLL_TAG(t->bseq, layer, TAG_TP + kind), mine, len, all,
	    COLL_WAIT, why, whylen);
}

/* Whether KVP group g holds one of pieces 0..k of item it. */

/* Floats of the items of b that groups bit g and (when set) bit h both
 * merge: kv's merged sequences holding both. */
static size_t
pair_floats(const struct medha_batch *b, const struct medha_batch_kv *kv,
    uint64_t both, size_t row)
{
	size_t n = 0;

	for (int32_t e = 0; e < b->n_seqs; e++)
		if (kv[e].merge && (kv[e].groups & both) == both)
			n += (size_t)b->seq[e].n_tokens * row;
	return n;
}

/* Pack the rows of out and lse (every token of b) of the merged
 * sequences that group bit g merges too into p: per sequence, its out
 * rows then its lse rows. */
static void
pack(const struct medha_batch *b, const struct medha_batch_kv *kv,
    uint64_t g, const float *out, const float *lse, size_t ro, size_t rl,
    float *p)
{
	size_t t0 = 0, nt;

	for (int32_t e = 0; e < b->n_seqs; e++, t0 += nt) {
		nt = (size_t)b->seq[e].n_tokens;
		if (!kv[e].merge || !(kv[e].groups & g))
			continue;
		memcpy(p, out + t0 * ro, nt * ro * sizeof(float));
		memcpy(p + nt * ro, lse + t0 * rl, nt * rl * sizeof(float));
		p += nt * (ro + rl);
	}
}

/*
 * The KVP merge of one layer (medha_merge_fn), from the batch given to
 * the backend alone (c->b, c->kv: each merged sequence's groups). To
 * each group it merges some sequence with, this group sends the partial
 * attention of those sequences (out rows, then lse rows, in batch
 * order), and receives theirs alike: both run the same sequences in
 * the same order, so each knows what the other sends. Then each
 * sequence's parts are merged in group order, so every group holds the
 * same bits. One message per pair of groups that share a sequence, per
 * layer.
 */
static int
kvp_merge(void *arg, int layer, float *out, float *lse, int n_tokens,
    int nh, int hd, char *why, size_t whylen)
{
	const struct call *c = arg;
	struct worker *w = c->w;
	const struct medha_batch *b = c->b;
	const struct medha_batch_kv *kv = c->kv;
	const size_t ro = (size_t)nh * hd, rl = (size_t)nh, row = ro + rl;
	const uint64_t me = (uint64_t)1 << w->lay.rg;
	const uint64_t tag = MEDHA_COLL_TAG(c->bseq, layer, TAG_KVP);
	size_t at[MEDHA_PROTO_MAX_GROUPS + 1], cur[MEDHA_PROTO_MAX_GROUPS];
	size_t n[MEDHA_PROTO_MAX_GROUPS], t0, nt;
	int g, rc;

	(void)n_tokens;
	/* at[g]: the parts exchanged with group g (ours: every sequence
	   merged); at[kvp]: a send buffer for the largest pair */
	at[0] = 0;
	for (g = 0; g < w->lay.kvp; g++) {
		n[g] = pair_floats(b, kv, me | (uint64_t)1 << g, row);
		at[g + 1] = at[g] + n[g];
		cur[g] = at[g];
	}
	if (at[w->lay.kvp] * 2 > w->mrg_cap) {
		void *p = medha_reallocarray(w->mrg, at[w->lay.kvp] * 2,
		    sizeof(float));
		if (p == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "KVP merge: out of memory");
		w->mrg = p;
		w->mrg_cap = at[w->lay.kvp] * 2;
	}
	pack(b, kv, me, out, lse, ro, rl, w->mrg + at[w->lay.rg]);
	for (g = 0; g < w->lay.kvp; g++) {
		float *s = w->mrg + at[w->lay.kvp];
		if (g == w->lay.rg || n[g] == 0)
			continue;
		pack(b, kv, (uint64_t)1 << g, out, lse, ro, rl, s);
		if ((rc = medha_coll_send(w->coll,
		         medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs, g),
		         tag, s, n[g] * sizeof(float), COLL_WAIT, why,
		         whylen)) != 0)
			return rc;
	}
	for (g = 0; g < w->lay.kvp; g++) {
		if (g == w->lay.rg || n[g] == 0)
			continue;
		if ((rc = medha_coll_recv(w->coll,
		         medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs, g),
		         tag, w->mrg + at[g], n[g] * sizeof(float), COLL_WAIT,
		         why, whylen)) != 0)
			return rc;
	}
	/* each merged sequence: the parts of its groups, in group order */
	for (int32_t e = 0, t = 0; e < b->n_seqs; e++, t += (int32_t)nt) {
		const float *po[MEDHA_PROTO_MAX_GROUPS], *pl[MEDHA_PROTO_MAX_GROUPS];
		int np = 0;

		nt = (size_t)b->seq[e].n_tokens;
		if (!kv[e].merge)
			continue;
		for (g = 0; g < w->lay.kvp; g++) {
			if (!(kv[e].groups >> g & 1))
				continue;
			po[np] = w->mrg + cur[g];
			pl[np++] = w->mrg + cur[g] + nt * ro;
			cur[g] += nt * row;
		}
		t0 = (size_t)t;
		medha_attn_merge(np, po, pl, (int)(nt * nh), hd, out + t0 * ro,
		    lse + t0 * rl);
	}
	return 0;
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
	struct call tc = {w, b->seq, NULL, NULL};
	struct medha_comm comm = {tp_gather, kvp_merge, &tc};
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
		q = wk_find_seq(w, it->handle);
		if (q == NULL && piece == k && it->pos == base) {
			struct medha_sampler_params sp =
			    it->has_params ? it->params : medha_sampling_greedy;
			if ((q = wk_new_seq(w, it->handle)) == NULL ||
			    medha_backend_seq_alloc(w->be, &q->seq) != 0) {
				if (q != NULL)
					wk_free_seq(w, q);
				snprintf(res->error, sizeof(res->error),
				    "no room for another sequence (%d held)",
				    w->max_seqs);
				return;
			}
			/* only the worker that samples holds a sampler */
			if (report && piece == 0 &&
			    medha_sampler_init(&q->smp, &sp, mc->vocab) != 0) {
				wk_free_seq(w, q);
				snprintf(res->error, sizeof(res->error),
				    "request %llx: bad sampling parameters",
				    (unsigned long long)it->handle);
				return;
			}
		} else if (q == NULL) {
			snprintf(res->error, sizeof(res->error),
			    "request %llx at position %lld: no such sequence",
			    (unsigned long long)it->handle, (long long)it->pos);
			return;
		}
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
	tc.b = &batch;
	tc.kv = w->kvx;
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
		if ((rc = medha_coll_recv(w->coll,
		         medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs - 1,
		             w->lay.rg),
		         MEDHA_COLL_TAG(b->seq, w->lay.rs, TAG_STAGE), w->h,
		         nh * sizeof(float), COLL_WAIT, res->error,
		         sizeof(res->error))) != 0)
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
	if (!last &&
	    medha_coll_send(w->coll,
	        medha_layout_rank(&w->lay, w->lay.rt, w->lay.rs + 1, w->lay.rg),
	        MEDHA_COLL_TAG(b->seq, w->lay.rs + 1, TAG_STAGE), w->h, nh * sizeof(float),
	        COLL_WAIT, res->error, sizeof(res->error)) != 0)
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
			        w->out[i]};
}


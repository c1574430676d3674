/*
 * daemon.c: medha-worker's daemon mode. It dials its scheduler, says
 * HELLO (backend, model, layout, KV block size and count), then asks for
 * work with READY and answers each BATCH with a RESULT of the tokens it
 * sampled, on one req context; a second context sends HEARTBEAT every
 * second while a batch runs, so the scheduler can tell a long batch from
 * a dead worker. Every sequence lives in the backend under the
 * scheduler's request handle until a BATCH or IDLE lists it in frees.
 * If the scheduler goes away (no answer within MEDHA_PROTO_DEAD_MS, or
 * an ERROR), the worker frees every sequence and says HELLO again.
 *
 * In a replica of several workers (tp * spp * kvp), every worker gets
 * every batch and runs its part: its SPP stage's layers on the items
 * whose KV its KVP group holds a piece of. A stage after the first
 * receives the hidden states from the same TP rank of the stage before;
 * TP ranks all-gather inside the backend (tp_gather), KVP groups merge
 * partial attention (kvp_merge); the first TP rank of the last stage in
 * the group of an item's piece 0 samples it. The collectives
 * (net/coll.h) go straight between workers, at the addresses the
 * scheduler hands out with the first batch.
 * Wiring only: the numerics are the backend's (libcore/engine, and
 * medha_attn_merge for the KVP merge).
 *
 * Lookahead (on unless --no-lookahead): a worker alone in its replica
 * (no TP, SPP or KVP peers) on a backend that computes, after a batch
 * whose every item sampled a token here (decodes, last prompt chunks),
 * runs the step the scheduler will most likely send next while its
 * RESULT makes the round trip: the same sequences one position on, fed
 * the tokens just sampled, keeping the logits. The items of the BATCH
 * that comes back that are steps of it (the same handle, position and
 * token) are sampled from those logits, so the round trip overlaps the
 * computation instead of adding to every step; its other items (a new
 * prompt's chunk) run as a batch of their own, and the sequences of the
 * step it leaves out (a request that ended) are cut back to the lengths
 * they had, giving back any KV block the step took (the scheduler's
 * count of blocks stays exact), as are all of them when nothing of it
 * is used (another batch, IDLE, a fault). A sequence's results do not
 * depend on what else is in its batch, so the tokens are the same
 * either way. On the 2-core machine of the README it gave one request
 * 2-14% more decode tokens a second, several at once about as many or
 * more, though the round trip's threads take their cores from the
 * backend's there.
 */
#include "medha-worker.h"

#include "cpu/cpu.h" /* medha_attn_merge: the KVP merge */
#include "engine/backend.h"
#include "model/sample.h"
#include "net/coll.h"
#include "net/link.h"
#include "net/proto.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stopping;

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

/* One sequence the backend holds for a request handle. */
struct wseq {
	uint64_t handle; /* 0: free entry */
	int seq;         /* backend sequence */
	struct medha_sampler *smp;
};

struct worker {
	struct medha_backend *be;
	struct medha_cli *cli;
	int id;
	/* the replica's layout and this worker's place in it */
	int tp, spp, kvp, rank, rt, rs, rg;
	struct medha_coll *coll; /* NULL in a replica of one worker */
	int64_t kvp_tokens;      /* KV positions per piece (peer table) */
	float *h;                /* hidden states between stages */
	float tok0[1];           /* what a sim stage "hands on" */
	size_t h_cap;            /* floats */
	struct wseq *seqs; /* (max_seqs) entries */
	int max_seqs;
	int *spare; /* (max_seqs) stack of free entries */
	int nspare;
	int *index;    /* (index_cap) entry of a handle, -1 empty: an
	                  open-addressing table, so a batch of thousands
	                  of items finds its sequences at once */
	int index_cap; /* a power of two, at least 2 * max_seqs */
	/* a batch's scratch, grown to the largest seen */
	int32_t *tok;
	struct medha_batch_seq *bs;
	struct medha_sampler **smp;
	int32_t *out;
	int32_t *idx; /* (seq_cap) the batch item of each sequence run */
	struct medha_batch_kv *kvx; /* (seq_cap) KVP: each one's piece */
	int32_t *t0;  /* (seq_cap) its first token in the batch */
	float *mrg;   /* (mrg_cap) KVP merge buffers */
	size_t mrg_cap;
	const struct medha_msg_batch *cur; /* the batch being run */
	int ncur;                          /* its sequences run here */
	size_t tok_cap, seq_cap;
	/* lookahead (above): the step after the batch just run */
	int ahead_ok;       /* this worker may look ahead */
	int na;             /* its sequences (0: none to run) */
	int ran;            /* the step was run (its logits kept) */
	uint64_t *a_handle; /* (na) */
	int64_t *a_len;     /* (na) each one's length before the step */
	int32_t *a_tok;     /* (na) the token fed: the one just sampled */
	struct medha_batch_seq *a_bs; /* (na) */
	float *a_lg;                  /* (na, vocab) the step's logits */
	int32_t *a_item;              /* (na) the item it answers, or -1 */
	size_t a_cap;                 /* sequences room */
	struct medha_msg_item *r_items; /* (r_cap) the items not run ahead */
	int32_t *r_map;                 /* (r_cap) each one's item */
	size_t r_cap;
	long long looked, hits;       /* steps run ahead; of them used */
	/* heartbeats */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running, quit;
};

/* The slot of handle h in w->index: its own, or the empty one to take. */
static int
slot_of(const struct worker *w, uint64_t h)
{
	int mask = w->index_cap - 1;
	int i = (int)((h * 0x9e3779b97f4a7c15ULL) >> 32) & mask;

	while (w->index[i] >= 0 && w->seqs[w->index[i]].handle != h)
		i = (i + 1) & mask;
	return i;
}

static struct wseq *
find_seq(struct worker *w, uint64_t h)
{
	int e = w->index[slot_of(w, h)];

	return e >= 0 ? &w->seqs[e] : NULL;
}

/* A free entry under handle h (not held yet), or NULL if all are held. */
static struct wseq *
new_seq(struct worker *w, uint64_t h)
{
	int e;

	if (w->nspare == 0)
		return NULL;
	e = w->spare[--w->nspare];
	w->seqs[e].handle = h;
	w->seqs[e].seq = -1; /* none in the backend yet */
	w->index[slot_of(w, h)] = e;
	return &w->seqs[e];
}

static void
free_seq(struct worker *w, struct wseq *q)
{
	int mask = w->index_cap - 1, i = slot_of(w, q->handle), j, k;

	/* delete by shifting back the entries that probed past slot i */
	w->index[i] = -1;
	for (j = (i + 1) & mask; w->index[j] >= 0; j = (j + 1) & mask) {
		k = slot_of(w, w->seqs[w->index[j]].handle);
		if (k == j)
			continue; /* already where it hashes: stays */
		w->index[i] = w->index[j];
		w->index[j] = -1;
		i = j;
	}
	medha_backend_seq_free(w->be, q->seq);
	medha_sampler_free(q->smp);
	memset(q, 0, sizeof(*q));
	w->spare[w->nspare++] = (int)(q - w->seqs);
}

static void
free_all(struct worker *w)
{
	for (int i = 0; i < w->max_seqs; i++)
		if (w->seqs[i].handle != 0)
			free_seq(w, &w->seqs[i]);
}

static void *
heartbeat_main(void *arg)
{
	struct worker *w = arg;
	struct medha_msg m = {.type = MEDHA_MSG_HEARTBEAT}, rep;
	char why[256];

	pthread_mutex_lock(&w->mu);
	while (!w->quit) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += MEDHA_PROTO_HEARTBEAT_MS / 1000;
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		if (w->quit || !w->running)
			continue;
		m.worker_id = w->id;
		pthread_mutex_unlock(&w->mu);
		if (medha_cli_msg(w->cli, 1, &m, &rep,
		        MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why)) == 0)
			medha_msg_clear(&rep);
		else
			medha_log(MEDHA_LOG_WARN, "heartbeat: %s", why);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static int
grow_scratch(struct worker *w, size_t ntok, size_t nseq)
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
		void *f = medha_reallocarray(w->t0, nseq, sizeof(*w->t0));
		if (f != NULL)
			w->t0 = f;
		if (a == NULL || b == NULL || c == NULL || d == NULL ||
		    e == NULL || f == NULL)
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

/* The TP all-gather among this worker's TP group, for one batch. */
struct tpcall {
	struct worker *w;
	uint64_t bseq;
};

static int
tp_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, char *why, size_t whylen)
{
	const struct tpcall *t = arg;
	struct worker *w = t->w;
	int group[MEDHA_TP_MAX], base = w->rank - w->rt;

	for (int i = 0; i < w->tp; i++)
		group[i] = base + i;
	return medha_coll_all_gather(w->coll, group, w->tp,
	    MEDHA_COLL_TAG(t->bseq, layer, TAG_TP + kind), mine, len, all,
	    COLL_WAIT, why, whylen);
}

/* Whether KVP group g holds one of pieces 0..k of item it. */
static int
holds(const struct medha_msg_item *it, int k, int g)
{
	for (int i = 0; i <= k; i++)
		if (it->groups[i] == g)
			return 1;
	return 0;
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
		*piece = w->rg == 0 ? 0 : -1;
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
		if (it->groups[g] >= w->kvp ||
		    holds(it, g - 1, it->groups[g])) {
			snprintf(why, whylen,
			    "request %llx: piece %d on group %d: not one of "
			    "the %d groups, or one holding another piece",
			    (unsigned long long)it->handle, g, it->groups[g],
			    w->kvp);
			return -1;
		}
		if (it->groups[g] == w->rg)
			*piece = g;
	}
	return 0;
}

/* The piece an item's tokens fall in (its pieces 0..k are entered). */
static int
item_k(const struct worker *w, const struct medha_msg_item *it)
{
	return it->n_groups == 0 ? 0 : (int)(it->pos / w->kvp_tokens);
}

/* Floats group g sends in a KVP merge: its merged items' rows. */
static size_t
kvp_size(const struct worker *w, const struct medha_msg_batch *b, int g,
    size_t row)
{
	size_t n = 0;

	for (int64_t i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		int k = item_k(w, it);
		if (k > 0 && holds(it, k, g))
			n += (size_t)it->n_ids * row;
	}
	return n;
}

/* Whether groups g and h merge some item of b together. */
static int
kvp_shares(const struct worker *w, const struct medha_msg_batch *b, int g,
    int h)
{
	for (int64_t i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		int k = item_k(w, it);
		if (k > 0 && holds(it, k, g) && holds(it, k, h))
			return 1;
	}
	return 0;
}

/*
 * The KVP merge of one layer (medha_merge_fn): this group's partial
 * attention of every item it merges (out rows, then lse rows, items in
 * batch order) goes to each group that merges an item with it; theirs
 * come back alike; then each item's parts are merged in group order, so
 * every group holds the same bits. One message per pair of groups that
 * share an item, per layer.
 */
static int
kvp_merge(void *arg, int layer, float *out, float *lse, int n_tokens,
    int nh, int hd, char *why, size_t whylen)
{
	const struct tpcall *tc = arg;
	struct worker *w = tc->w;
	const struct medha_msg_batch *b = w->cur;
	const size_t ro = (size_t)nh * hd, rl = (size_t)nh, row = ro + rl;
	size_t at[MEDHA_PROTO_MAX_GROUPS], cur[MEDHA_PROTO_MAX_GROUPS];
	size_t need = 0, len;
	const uint64_t tag = MEDHA_COLL_TAG(tc->bseq, layer, TAG_KVP);
	int sh[MEDHA_PROTO_MAX_GROUPS]; /* groups exchanged with, us too */
	int g, e, rc, rank;

	(void)n_tokens;
	for (g = 0; g < w->kvp; g++) {
		at[g] = need;
		cur[g] = 0;
		sh[g] = g == w->rg || kvp_shares(w, b, w->rg, g);
		if (sh[g])
			need += kvp_size(w, b, g, row);
	}
	if (need > w->mrg_cap) {
		void *p = medha_reallocarray(w->mrg, need, sizeof(float));
		if (p == NULL) {
			snprintf(why, whylen, "KVP merge: out of memory");
			return MEDHA_ENOMEM;
		}
		w->mrg = p;
		w->mrg_cap = need;
	}
	/* ours, packed */
	for (e = 0, len = 0; e < w->ncur; e++) {
		size_t nt = (size_t)w->bs[e].n_tokens;
		if (!w->kvx[e].merge)
			continue;
		memcpy(w->mrg + at[w->rg] + len, out + (size_t)w->t0[e] * ro,
		    nt * ro * sizeof(float));
		memcpy(w->mrg + at[w->rg] + len + nt * ro,
		    lse + (size_t)w->t0[e] * rl, nt * rl * sizeof(float));
		len += nt * row;
	}
	for (g = 0; g < w->kvp; g++) {
		if (g == w->rg || !sh[g])
			continue;
		rank = w->rt + w->tp * (w->rs + w->spp * g);
		if ((rc = medha_coll_send(w->coll, rank, tag, w->mrg + at[w->rg],
		         len * sizeof(float), COLL_WAIT, why, whylen)) != 0)
			return rc;
	}
	for (g = 0; g < w->kvp; g++) {
		if (g == w->rg || !sh[g])
			continue;
		rank = w->rt + w->tp * (w->rs + w->spp * g);
		if ((rc = medha_coll_recv(w->coll, rank, tag, w->mrg + at[g],
		         kvp_size(w, b, g, row) * sizeof(float), COLL_WAIT,
		         why, whylen)) != 0)
			return rc;
	}
	/* each merged item: the parts of its groups, in group order */
	for (int64_t i = 0, e = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		const float *po[MEDHA_PROTO_MAX_GROUPS], *pl[MEDHA_PROTO_MAX_GROUPS];
		int k = item_k(w, it), np = 0, here;
		size_t nt = (size_t)it->n_ids;

		if (k == 0)
			continue;
		while (e < w->ncur && w->idx[e] < i)
			e++;
		here = e < w->ncur && w->idx[e] == i;
		for (g = 0; g < w->kvp; g++) {
			if (!holds(it, k, g))
				continue;
			if (here) {
				po[np] = w->mrg + at[g] + cur[g];
				pl[np++] = w->mrg + at[g] + cur[g] + nt * ro;
			}
			if (sh[g])
				cur[g] += nt * row;
		}
		if (here)
			medha_attn_merge(np, po, pl, (int)(nt * nh), hd,
			    out + (size_t)w->t0[e] * ro,
			    lse + (size_t)w->t0[e] * rl);
	}
	return 0;
}

/*
 * Run this worker's part of one BATCH into *res (a RESULT). A request's
 * first item (position 0) opens its sequence and sampler. On failure
 * res->error says why.
 */
static void
run_batch(struct worker *w, const struct medha_msg_batch *b,
    struct medha_msg_result *res)
{
	const struct medha_model_config *mc = &w->be->info.shape;
	int first = w->rs == 0, last = w->rs == w->spp - 1;
	int report = last && w->rt == 0;
	/* sim computes nothing: stages only wait for each other; and every
	 * last-stage worker takes the time of the logits */
	int sim = strcmp(w->be->info.name, "sim") == 0;
	struct medha_batch batch;
	struct medha_fwd f;
	struct tpcall tc = {w, b->seq};
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
	if (grow_scratch(w, ntok, (size_t)b->n_items) != 0) {
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
		q = find_seq(w, it->handle);
		if (q == NULL && piece == k && it->pos == base) {
			struct medha_sampler_params sp =
			    it->has_params ? it->params : medha_sampling_greedy;
			if ((q = new_seq(w, it->handle)) == NULL ||
			    medha_backend_seq_alloc(w->be, &q->seq) != 0) {
				if (q != NULL)
					free_seq(w, q);
				snprintf(res->error, sizeof(res->error),
				    "no room for another sequence (%d held)",
				    w->max_seqs);
				return;
			}
			/* only the worker that samples holds a sampler */
			if (report && piece == 0 &&
			    medha_sampler_init(&q->smp, &sp, mc->vocab) != 0) {
				free_seq(w, q);
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
		w->kvx[n] = (struct medha_batch_kv){base, piece == k, k > 0};
		w->t0[n] = (int32_t)(ntok - (size_t)it->n_ids);
		nmerge += k > 0;
		w->smp[n] = samp && report ? q->smp : NULL;
		nsample += samp && report;
		w->idx[n++] = (int32_t)i;
	}
	batch = (struct medha_batch){w->tok, (int32_t)ntok, w->bs, (int32_t)n};
	w->cur = b;
	w->ncur = (int)n;
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
	if (w->tp > 1 || nmerge > 0)
		f.comm = &comm;
	if (w->kvp > 1)
		f.kv = w->kvx;
	if (!first) {
		f.h_in = sim ? w->tok0 : w->h; /* sim reads nothing */
		if ((rc = medha_coll_recv(w->coll, w->rank - w->tp,
		         MEDHA_COLL_TAG(b->seq, w->rs, TAG_STAGE), w->h,
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
	    medha_coll_send(w->coll, w->rank + w->tp,
	        MEDHA_COLL_TAG(b->seq, w->rs + 1, TAG_STAGE), w->h, nh * sizeof(float),
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

static void
apply_frees(struct worker *w, const struct medha_msg_batch *b)
{
	for (int64_t i = 0; i < b->n_frees; i++) {
		struct wseq *q = find_seq(w, b->frees[i]);
		if (q != NULL)
			free_seq(w, q);
	}
}

/* A batch answered (res): its failure logged, every 1000th counted. */
static void
batch_ran(int *batches, const struct medha_msg_result *res)
{
	if (res->error[0] != '\0')
		medha_log(MEDHA_LOG_ERROR, "batch %llu failed: %s",
		    (unsigned long long)res->seq, res->error);
	if (++*batches % 1000 == 0)
		medha_log(MEDHA_LOG_INFO, "%d batches run", *batches);
}

/* -vv: a batch run from t (its request sent at sent): what it held, how
 * long it ran and how long it took to come */
static void
log_batch(const struct medha_msg_batch *b, double t, double sent)
{
	int64_t tokens = 0;

	for (int64_t i = 0; i < b->n_items; i++)
		tokens += b->items[i].n_ids;
	medha_log(MEDHA_LOG_DEBUG, "batch %llu: %lld items, %lld tokens, "
	    "ran in %.1f ms, came %.0f us after the message before",
	    (unsigned long long)b->seq, (long long)b->n_items,
	    (long long)tokens, (medha_now() - t) * 1e3, (t - sent) * 1e6);
}

/* ---- lookahead (see the top of this file) ---- */

/* Keep the step after the batch just run (w->cur, its n run sequences):
 * every item sampled here, or no step. */
static void
ahead_plan(struct worker *w, const struct medha_msg_batch *b)
{
	const int vocab = w->be->info.shape.vocab;
	int i, n = w->ncur;

	w->na = 0;
	w->ran = 0;
	if (!w->ahead_ok || n < 1 || n != b->n_items)
		return;
	for (i = 0; i < n; i++)
		if (w->smp[i] == NULL || w->out[i] < 0)
			return;
	if ((size_t)n > w->a_cap) {
		void *h = medha_reallocarray(w->a_handle, n, sizeof(*w->a_handle));
		if (h != NULL)
			w->a_handle = h;
		void *l = medha_reallocarray(w->a_len, n, sizeof(*w->a_len));
		if (l != NULL)
			w->a_len = l;
		void *t = medha_reallocarray(w->a_tok, n, sizeof(*w->a_tok));
		if (t != NULL)
			w->a_tok = t;
		void *s = medha_reallocarray(w->a_bs, n, sizeof(*w->a_bs));
		if (s != NULL)
			w->a_bs = s;
		void *g = medha_reallocarray(w->a_lg, (size_t)n * (size_t)vocab,
		    sizeof(*w->a_lg));
		if (g != NULL)
			w->a_lg = g;
		void *m = medha_reallocarray(w->a_item, n, sizeof(*w->a_item));
		if (m != NULL)
			w->a_item = m;
		if (h == NULL || l == NULL || t == NULL || s == NULL ||
		    g == NULL || m == NULL)
			return;
		w->a_cap = (size_t)n;
	}
	for (i = 0; i < n; i++) {
		const struct medha_msg_item *it = &b->items[w->idx[i]];
		w->a_handle[i] = it->handle;
		w->a_tok[i] = w->out[i];
		w->a_len[i] = it->pos + it->n_ids;
		w->a_bs[i] = (struct medha_batch_seq){.seq = w->bs[i].seq,
		    .pos = it->pos + it->n_ids,
		    .n_tokens = 1,
		    .logits = MEDHA_LOGITS_LAST};
	}
	w->na = n;
}

/* Room for n items not run ahead (ahead_use). */
static int
grow_rest(struct worker *w, size_t n)
{
	void *a = medha_reallocarray(w->r_items, n, sizeof(*w->r_items));
	if (a != NULL)
		w->r_items = a;
	void *b = medha_reallocarray(w->r_map, n, sizeof(*w->r_map));
	if (b != NULL)
		w->r_map = b;
	if (a == NULL || b == NULL)
		return MEDHA_ENOMEM;
	w->r_cap = n;
	return 0;
}

/* Cut the step's sequences back to where they were, and forget it. */
static void
ahead_drop(struct worker *w)
{
	for (int i = 0; w->ran && i < w->na; i++) {
		struct wseq *q = find_seq(w, w->a_handle[i]);
		if (q != NULL &&
		    medha_backend_seq_len(w->be, q->seq) > w->a_len[i])
			medha_backend_seq_fill(w->be, q->seq, w->a_len[i]);
	}
	w->na = 0;
	w->ran = 0;
}

/* Run the planned step, logits kept (nothing sampled yet). */
static void
ahead_run(struct worker *w)
{
	struct medha_batch batch = {w->a_tok, w->na, w->a_bs, w->na};
	struct medha_fwd f;
	char why[256];

	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = w->be->info.layer_lo;
	f.layer_hi = w->be->info.layer_hi;
	f.logits = w->a_lg;
	w->looked++;
	w->ran = 1; /* a failed call may have taken blocks: cut back too */
	if (medha_backend_forward(w->be, &f, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_DEBUG, "lookahead of %d: %s", w->na, why);
		ahead_drop(w);
	}
}

/*
 * Which items of b the step run ahead answers: w->a_item[j], the item
 * of sequence j of the step (the same handle, position and token, one
 * id, sampled with the parameters it had), or -1. Returns how many.
 * The batch may leave sequences of the step out (a request that ended)
 * and hold items it did not run (a new prompt's chunk): those run as
 * usual (ahead_use).
 */
static int64_t
ahead_match(struct worker *w, const struct medha_msg_batch *b)
{
	int64_t i, f, nm = 0;
	int j, k, hint = 0;

	if (!w->ran || b->peers != NULL)
		return 0;
	for (j = 0; j < w->na; j++)
		w->a_item[j] = -1;
	for (i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		if (it->n_ids != 1 || !it->sample || it->has_params ||
		    it->n_groups > 1)
			continue;
		/* the batch keeps the step's order, most often */
		for (k = 0, j = -1; k < w->na; k++)
			if (w->a_handle[(hint + k) % w->na] == it->handle) {
				j = (hint + k) % w->na;
				break;
			}
		if (j < 0 || w->a_item[j] >= 0 || it->pos != w->a_len[j] ||
		    it->ids[0] != w->a_tok[j] ||
		    find_seq(w, it->handle) == NULL)
			continue;
		for (f = 0; f < b->n_frees && b->frees[f] != it->handle; f++)
			;
		if (f < b->n_frees)
			continue;
		w->a_item[j] = (int32_t)i;
		hint = j + 1;
		nm++;
	}
	return nm;
}

/*
 * Answer b, nm of whose items the step run ahead answers (ahead_match),
 * into *res: the sequences of the step that b leaves out cut back, the
 * items it did not run run as a batch of their own, the others sampled
 * from the kept logits; then the next step planned from all of them. A
 * sequence's results do not depend on its batch, so the tokens are the
 * same as b's run whole.
 */
static void
ahead_use(struct worker *w, const struct medha_msg_batch *b, int64_t nm,
    struct medha_msg_result *res)
{
	const int vocab = w->be->info.shape.vocab;
	struct medha_msg_batch rest;
	int32_t *tok = NULL;
	int64_t i, k;
	int j, n;

	res->seq = b->seq;
	res->worker_id = w->id;
	for (j = 0; j < w->na; j++) {
		struct wseq *q = find_seq(w, w->a_handle[j]);
		if (w->a_item[j] < 0 && q != NULL &&
		    medha_backend_seq_len(w->be, q->seq) > w->a_len[j])
			medha_backend_seq_fill(w->be, q->seq, w->a_len[j]);
	}
	if (grow_scratch(w, 1, (size_t)b->n_items) != 0 ||
	    (tok = medha_calloc((size_t)b->n_items, sizeof(*tok))) == NULL ||
	    (nm < b->n_items &&
	        (size_t)(b->n_items - nm) > w->r_cap &&
	        grow_rest(w, (size_t)(b->n_items - nm)) != 0)) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		goto drop;
	}
	w->ncur = 0;
	if (nm < b->n_items) {
		/* the items not run ahead: a batch of their own */
		rest = *b;
		rest.items = w->r_items;
		rest.n_frees = 0;
		for (i = 0, k = 0; i < b->n_items; i++) {
			for (j = 0; j < w->na && w->a_item[j] != i; j++)
				;
			if (j == w->na) {
				w->r_items[k] = b->items[i];
				w->r_map[k++] = (int32_t)i;
			}
		}
		rest.n_items = k;
		run_batch(w, &rest, res);
		free(res->tokens);
		res->tokens = NULL;
		res->n_tokens = 0;
		if (res->error[0] != '\0')
			goto drop;
		for (j = 0; j < w->ncur; j++)
			w->idx[j] = w->r_map[w->idx[j]];
	}
	/* the items run ahead, after them: as run_batch leaves its
	   sequences, for ahead_plan */
	for (j = 0; j < w->na; j++) {
		struct wseq *q;
		if (w->a_item[j] < 0)
			continue;
		q = find_seq(w, w->a_handle[j]);
		n = w->ncur++;
		w->bs[n] = w->a_bs[j];
		w->smp[n] = q->smp;
		w->out[n] = medha_sample(q->smp, w->a_lg + (size_t)j * vocab);
		w->idx[n] = w->a_item[j];
	}
	/* the tokens in item order */
	for (i = 0; i < b->n_items; i++)
		tok[i] = -1;
	for (n = 0; n < w->ncur; n++)
		if (w->smp[n] != NULL && w->out[n] >= 0)
			tok[w->idx[n]] = w->out[n];
	if ((res->tokens = medha_calloc((size_t)b->n_items,
	         sizeof(*res->tokens))) == NULL) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		goto drop;
	}
	for (i = 0; i < b->n_items; i++)
		if (tok[i] >= 0)
			res->tokens[res->n_tokens++] =
			    (struct medha_msg_token){b->items[i].handle, tok[i]};
	free(tok);
	w->hits++;
	ahead_plan(w, b);
	return;
drop:
	/* as a failed batch leaves them: the step's sequences cut back */
	free(tok);
	ahead_drop(w);
	w->ncur = 0;
}

/*
 * One forward of WARM_TOKENS tokens on a sequence of its own, freed
 * after, before the worker says HELLO: otherwise the first batch pays
 * for the first touch of the backend's buffers and KV pages (a 5-token
 * prefill measured 64.6 ms as a fresh worker's first batch, 10-12 ms
 * after).
 */
#define WARM_TOKENS 16

static void
warm_up(struct medha_backend *be)
{
	int32_t tok[WARM_TOKENS] = {0};
	struct medha_batch_seq bs = {.pos = 0,
	    .n_tokens = WARM_TOKENS,
	    .logits = MEDHA_LOGITS_LAST};
	struct medha_batch batch = {tok, WARM_TOKENS, &bs, 1};
	struct medha_fwd f;
	float *lg;
	char why[256];
	double t;

	if ((lg = medha_calloc((size_t)be->info.shape.vocab,
	         sizeof(*lg))) == NULL)
		return;
	if (medha_backend_seq_alloc(be, &bs.seq) != 0) {
		free(lg);
		return;
	}
	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = be->info.layer_lo;
	f.layer_hi = be->info.layer_hi;
	f.logits = lg;
	t = medha_now();
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		medha_log(MEDHA_LOG_INFO, "warm-up forward: %s", why);
	else
		medha_log(MEDHA_LOG_INFO, "warm-up: a forward of %d tokens "
		    "in %.1f ms", WARM_TOKENS, (medha_now() - t) * 1e3);
	medha_backend_seq_free(be, bs.seq);
	free(lg);
}

/* The replica's peer table: dial the workers this one sends to. */
static int
take_peers(struct worker *w, const struct medha_msg_peers *p)
{
	const char **urls;
	char why[512];
	int rc;

	if (w->coll == NULL || p->n != w->tp * w->spp * w->kvp) {
		medha_log(MEDHA_LOG_ERROR,
		    "scheduler sent a table of %d workers; this one is "
		    "rank %d of %d: starting over",
		    p->n, w->rank, w->tp * w->spp * w->kvp);
		return -1;
	}
	w->kvp_tokens = p->kvp_tokens;
	if (p->gen == medha_coll_gen(w->coll))
		return 0;
	if ((urls = medha_calloc(p->n, sizeof(*urls))) == NULL)
		return -1;
	for (int i = 0; i < p->n; i++)
		urls[i] = p->urls[i];
	rc = medha_coll_peers(w->coll, p->gen, w->rank, p->n, urls, why,
	    sizeof(why));
	free(urls);
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: starting over", why);
		return -1;
	}
	medha_log(MEDHA_LOG_INFO, "peers: generation %llu, %d workers",
	    (unsigned long long)p->gen, p->n);
	return 0;
}

/* HELLO until WELCOME (or a stop). 0, or 1 when stopping. */
static int
hello(struct worker *w, const struct medha_msg_hello *h)
{
	struct medha_msg m = {.type = MEDHA_MSG_HELLO}, rep;
	char why[512];
	int said = 0;

	m.hello = *h;
	while (!stopping) {
		if (medha_cli_msg(w->cli, 0, &m, &rep,
		        MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why)) != 0) {
			if (!said++)
				medha_log(MEDHA_LOG_INFO,
				    "waiting for the scheduler: %s", why);
			continue;
		}
		if (rep.type == MEDHA_MSG_WELCOME) {
			w->id = rep.worker_id;
			medha_msg_clear(&rep);
			return 0;
		}
		if (rep.type == MEDHA_MSG_ERROR)
			medha_log(MEDHA_LOG_ERROR, "scheduler refused us: %s",
			    rep.error.reason);
		else
			medha_log(MEDHA_LOG_ERROR, "HELLO answered with %s",
			    medha_msg_type_name(rep.type));
		medha_msg_clear(&rep);
		sleep(1);
	}
	return 1;
}

/*
 * Where the other workers reach this one: --peer, or beside the
 * scheduler: ipc://PATH-wRANK.sock for ipc://PATH, tcp://HOST:0 (a free
 * port) for tcp://HOST:PORT.
 */
static void
peer_url(const struct worker_daemon_opts *o, char *url, size_t n)
{
	const char *colon;

	if (o->peer != NULL)
		snprintf(url, n, "%s", o->peer);
	else if (strncmp(o->addr, "tcp://", 6) == 0 &&
	    (colon = strrchr(o->addr, ':')) != NULL && colon > o->addr + 5)
		snprintf(url, n, "%.*s:0", (int)(colon - o->addr), o->addr);
	else {
		size_t len = strlen(o->addr);
		if (len > 5 && strcmp(o->addr + len - 5, ".sock") == 0)
			len -= 5;
		snprintf(url, n, "%.*s-w%d.sock", (int)len, o->addr, o->rank);
	}
}

int
worker_daemon(struct medha_backend *be, const struct worker_daemon_opts *o)
{
	struct worker w;
	struct medha_msg_hello h;
	struct medha_msg out, rep;
	struct sigaction sa;
	pthread_t hb;
	struct medha_tbt rtt = {0}; /* RESULT sent -> next BATCH in */
	char why[512];
	int rc = 0, batches = 0;
	double sent = 0, t_run;
	int64_t nm;

	memset(&w, 0, sizeof(w));
	w.be = be;
	w.tp = o->tp > 0 ? o->tp : 1;
	w.spp = o->spp > 0 ? o->spp : 1;
	w.kvp = o->kvp > 0 ? o->kvp : 1;
	w.rank = o->rank;
	w.rt = w.rank % w.tp;
	w.rs = w.rank / w.tp % w.spp;
	w.rg = w.rank / (w.tp * w.spp);
	w.max_seqs = be->info.max_seqs;
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	for (w.index_cap = 16; w.index_cap < 2 * w.max_seqs;)
		w.index_cap *= 2;
	w.seqs = medha_calloc(w.max_seqs, sizeof(*w.seqs));
	w.spare = medha_calloc(w.max_seqs, sizeof(*w.spare));
	w.index = medha_calloc(w.index_cap, sizeof(*w.index));
	if (w.seqs == NULL || w.spare == NULL || w.index == NULL) {
		fprintf(stderr, "medha-worker: out of memory\n");
		rc = 1;
		goto out;
	}
	for (int i = 0; i < w.index_cap; i++)
		w.index[i] = -1;
	for (w.nspare = 0; w.nspare < w.max_seqs; w.nspare++)
		w.spare[w.nspare] = w.max_seqs - 1 - w.nspare;
	if (medha_cli_open(&w.cli, o->addr, 2, why, sizeof(why)) != 0) {
		fprintf(stderr, "medha-worker: %s\n", why);
		rc = o->addr[0] ? 1 : 2;
		goto out;
	}
	if (w.tp * w.spp * w.kvp > 1) {
		char url[MEDHA_PROTO_URL_MAX];
		peer_url(o, url, sizeof(url));
		if (medha_coll_open(&w.coll, url, why, sizeof(why)) != 0) {
			fprintf(stderr, "medha-worker: --peer: %s\n", why);
			rc = 1;
			goto out;
		}
		medha_coll_stop_on(w.coll, &stopping);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	pthread_create(&hb, NULL, heartbeat_main, &w);
	/* lookahead needs a backend that computes (sim only waits), can
	   cut a sequence back (seq_fill: a bad handle tells EINVAL from
	   EUNSUP) and has no peers to keep in step */
	w.ahead_ok = w.coll == NULL && o->lookahead &&
	    strcmp(be->info.name, "sim") != 0 &&
	    medha_backend_seq_fill(be, -1, 0) != MEDHA_EUNSUP;
	/* alone (a worker with peers would wait for them) and computing */
	if (w.coll == NULL && strcmp(be->info.name, "sim") != 0)
		warm_up(be);

	memset(&h, 0, sizeof(h));
	snprintf(h.backend, sizeof(h.backend), "%s", be->info.name);
	snprintf(h.model, sizeof(h.model), "%s", o->model);
	snprintf(h.gpu, sizeof(h.gpu), "%s", o->gpu);
	h.tp = w.tp;
	h.spp = w.spp;
	h.kvp = w.kvp;
	h.rank_tp = w.rt;
	h.rank_spp = w.rs;
	h.rank_kvp = w.rg;
	if (w.coll != NULL)
		snprintf(h.peer, sizeof(h.peer), "%s", medha_coll_url(w.coll));
	h.layer_lo = be->info.layer_lo;
	h.layer_hi = be->info.layer_hi;
	h.block_size = be->info.block_size;
	h.n_blocks =
	    be->info.n_blocks > INT32_MAX ? INT32_MAX : (int)be->info.n_blocks;
	h.max_seqs = be->info.max_seqs;
	h.vocab = be->info.shape.vocab;
	h.dim = be->info.shape.dim;
	h.pid = (int)getpid();

	while (!stopping) {
		if (hello(&w, &h) != 0)
			break;
		medha_log(MEDHA_LOG_WARN,
		    "ready: worker %d of %s, %s backend, %lld KV blocks of %d",
		    w.id, o->addr, be->info.name, (long long)be->info.n_blocks,
		    be->info.block_size);
		memset(&out, 0, sizeof(out));
		out.type = MEDHA_MSG_READY;
		out.worker_id = w.id;
		w.na = w.ran = 0;
		while (!stopping) {
			sent = medha_now();
			if (w.na > 0) {
				/* the next step runs while the answer comes */
				rc = medha_cli_msg_send(w.cli, 0, &out,
				    MEDHA_PROTO_DEAD_MS / 1e3, why,
				    sizeof(why));
				if (rc == 0) {
					ahead_run(&w);
					rc = medha_cli_msg_wait(w.cli, 0, &rep,
					    why, sizeof(why));
				}
			} else {
				/* the reply may be a while: let the
				   backend's threads give the cores to the
				   scheduler */
				medha_backend_idle(w.be);
				rc = medha_cli_msg(w.cli, 0, &out, &rep,
				    MEDHA_PROTO_DEAD_MS / 1e3, why,
				    sizeof(why));
			}
			if (rc == 0 && rep.type == MEDHA_MSG_BATCH &&
			    out.type == MEDHA_MSG_RESULT)
				(void)medha_tbt_add(&rtt, medha_now() - sent);
			free(out.result.tokens);
			memset(&out, 0, sizeof(out));
			out.type = MEDHA_MSG_READY;
			out.worker_id = w.id;
			if (rc == 0 && rep.type == MEDHA_MSG_BATCH &&
			    (nm = ahead_match(&w, &rep.batch)) > 0) {
				apply_frees(&w, &rep.batch);
				out.type = MEDHA_MSG_RESULT;
				pthread_mutex_lock(&w.mu);
				w.running = 1;
				pthread_mutex_unlock(&w.mu);
				t_run = medha_now();
				ahead_use(&w, &rep.batch, nm, &out.result);
				pthread_mutex_lock(&w.mu);
				w.running = 0;
				pthread_mutex_unlock(&w.mu);
				if (medha_log_level >= MEDHA_LOG_DEBUG)
					log_batch(&rep.batch, t_run, sent);
				batch_ran(&batches, &out.result);
				medha_msg_clear(&rep);
				continue;
			}
			ahead_drop(&w);
			if (rc != 0) {
				medha_log(MEDHA_LOG_WARN,
				    "scheduler lost (%s): freeing every "
				    "sequence",
				    why);
				break;
			}
			if (rep.type == MEDHA_MSG_IDLE) {
				apply_frees(&w, &rep.batch);
			} else if (rep.type == MEDHA_MSG_BATCH) {
				apply_frees(&w, &rep.batch);
				if (rep.batch.peers != NULL &&
				    take_peers(&w, rep.batch.peers) != 0) {
					medha_msg_clear(&rep);
					break;
				}
				out.type = MEDHA_MSG_RESULT;
				out.result.worker_id = w.id;
				pthread_mutex_lock(&w.mu);
				w.running = 1;
				pthread_mutex_unlock(&w.mu);
				t_run = medha_now();
				run_batch(&w, &rep.batch, &out.result);
				pthread_mutex_lock(&w.mu);
				w.running = 0;
				pthread_mutex_unlock(&w.mu);
				if (medha_log_level >= MEDHA_LOG_DEBUG)
					log_batch(&rep.batch, t_run, sent);
				if (out.result.error[0] == '\0')
					ahead_plan(&w, &rep.batch);
				batch_ran(&batches, &out.result);
			} else {
				medha_log(MEDHA_LOG_WARN,
				    "scheduler answered %s%s%s: starting over",
				    medha_msg_type_name(rep.type),
				    rep.type == MEDHA_MSG_ERROR ? ": " : "",
				    rep.type == MEDHA_MSG_ERROR
				        ? rep.error.reason
				        : "");
				medha_msg_clear(&rep);
				break;
			}
			medha_msg_clear(&rep);
		}
		free(out.result.tokens);
		free_all(&w);
	}
	pthread_mutex_lock(&w.mu);
	w.quit = 1;
	pthread_cond_signal(&w.cv);
	pthread_mutex_unlock(&w.mu);
	pthread_join(hb, NULL);
	medha_cli_close(w.cli);
	free_all(&w);
	medha_log(MEDHA_LOG_WARN, "stopped after %d batches (%lld of %lld "
	    "steps run ahead used)", batches, w.hits, w.looked);
	if (medha_tbt_count(&rtt) > 0)
		medha_log(MEDHA_LOG_WARN, "from a result sent to the next batch "
		    "in: median %.0f us, p90 %.0f us over %lld batches",
		    medha_tbt_quantile(&rtt, 0.5) * 1e6,
		    medha_tbt_quantile(&rtt, 0.9) * 1e6,
		    (long long)medha_tbt_count(&rtt));
	medha_tbt_free(&rtt);
	rc = 0; /* a stop on a signal */
out:
	free(w.seqs);
	free(w.spare);
	free(w.index);
	free(w.tok);
	free(w.bs);
	free(w.smp);
	free(w.out);
	free(w.idx);
	free(w.kvx);
	free(w.t0);
	free(w.h);
	free(w.a_handle);
	free(w.a_item);
	free(w.r_items);
	free(w.r_map);
	free(w.a_len);
	free(w.a_tok);
	free(w.a_bs);
	free(w.a_lg);
	/* nng 1.5 may block for ever closing a push socket whose peer went
	 * away first (as all do at a stop): the exit comes within 3 s */
	if (w.coll != NULL) {
		medha_link_exit_by(3, rc != 0);
		medha_coll_close(w.coll);
	}
	return rc;
}

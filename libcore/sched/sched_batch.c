/*
 * sched_batch.c: the scheduler core's batches (sched.h): forming each one
 * (medha_sched_next_batch) and taking its results
 * (medha_sched_batch_done). The batch-latency model composes the
 * predictor's operator times for one batch on a tp x spp x kvp grid;
 * chunks are adaptive (the largest that keeps the batch within its
 * target time) or fixed; a request is admitted, its KV blocks leased
 * (kvplace.c), when its first chunk is packed; prefills go in one of the
 * five orders (least relative slack: slack computed here, every batch),
 * and under medha short prefills share a batch with a long one, found
 * in an index of the short candidates.
 */
#include "sched/sched_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * The loops over every request of an iteration fetch the hot head of the
 * request this many places ahead (and, in medha_sched_batch_done, the
 * histogram bin of the one half as far ahead), so that these loads,
 * mostly misses with a thousand requests, overlap.
 */
#define PF_REQS 8
/* share_batch walks up to this x its short prefills candidates to order
 * them (else it takes them from a heap) */
#define SHORT_WALK_MAX 8

/* ---- batch latency model ---- */

/* The cost a chunking mode budgets: latency (adaptive) or tokens (fixed). */
static double
acc_cost(const struct medha_sched *s, const struct medha_cost *a)
{
	if (s->cfg.chunk > 0)
		return (double)a->n_tokens;
	return medha_cost_latency(a, s->pred, s->kv.kvp).latency;
}

static double
trial_cost(struct medha_sched *s, const struct medha_req *r, int64_t t)
{
	struct medha_cost_undo u;
	double c;
	int64_t kv = r->kv_tokens;

	medha_cost_add(&s->acc, s->pred, &s->kv, &r->kv, t, kv, 0,
	    r->sched_prefill + t == r->spec.prompt_tokens, &u);
	c = acc_cost(s, &s->acc);
	medha_cost_undo(&s->acc, &u);
	return c;
}

/*
 * The most prompt tokens r's next chunk may take: the rest of the
 * prompt, and with KVP no more than is left of its current piece, so
 * that one group appends the whole chunk.
 */
static int64_t
chunk_room(const struct medha_sched *s, const struct medha_req *r)
{
	int64_t rem = r->spec.prompt_tokens - r->sched_prefill, gt, room;

	if (s->kv.kvp > 1) {
		gt = s->kv.group_tokens;
		room = (r->kv_tokens / gt + 1) * gt - r->kv_tokens;
		if (room < rem)
			rem = room;
	}
	return rem;
}

/*
 * Chunk for prefill r against the batch so far, so that the batch cost
 * stays within limit: the whole remainder if it fits, else the largest
 * multiple of 32 (adaptive) or the tokens left in the budget (fixed).
 * 0 if nothing fits.
 */
static int64_t
choose_chunk(struct medha_sched *s, const struct medha_req *r, double limit)
{
	int64_t rem = chunk_room(s, r);
	int64_t lo, hi;

	if (s->cfg.chunk > 0) {
		int64_t room = (int64_t)limit - s->acc.n_tokens;
		return room <= 0 ? 0 : (rem < room ? rem : room);
	}
	if (rem <= s->cfg.max_chunk && trial_cost(s, r, rem) <= limit)
		return rem;
	hi = (rem < s->cfg.max_chunk ? rem : s->cfg.max_chunk) / 32;
	if (hi == 0 || trial_cost(s, r, 32) > limit)
		return 0;
	lo = 1; /* invariant: 32*lo fits, 32*(hi+1) does not (or is too big) */
	while (lo < hi) {
		int64_t mid = lo + (hi - lo + 1) / 2;
		if (trial_cost(s, r, 32 * mid) <= limit)
			lo = mid;
		else
			hi = mid - 1;
	}
	return 32 * lo;
}

/* ---- slack: the prefill time still ahead against the deadline ---- */

/* Predicted prefill time still ahead of r, alone. */
static double
remaining_time(const struct medha_req *r)
{
	int64_t P = r->spec.prompt_tokens, c = r->cached; /* cum[] from c */
	double x =
	    (double)(r->sched_prefill - c) * MEDHA_SLACK_SEGS / (double)(P - c);
	int i = (int)x;
	double done;

	if (i >= MEDHA_SLACK_SEGS)
		return 0;
	done = r->cum[i] + (x - i) * (r->cum[i + 1] - r->cum[i]);
	return r->cum[MEDHA_SLACK_SEGS] - done;
}

double
medha_sched_pending_work(const struct medha_sched *s, int64_t *tokens)
{
	double w = 0;
	int64_t n = 0;

	for (int i = 0; i < s->nactive; i++) {
		const struct medha_req *r = &s->reqs[s->active[i]].pub;
		if (r->state == MEDHA_REQ_DONE)
			continue;
		w += remaining_time(r);
		n += r->spec.prompt_tokens - r->sched_prefill;
	}
	if (tokens != NULL)
		*tokens = n;
	return w;
}

static double
relative_slack(const struct medha_req *r, double now)
{
	return (r->deadline - now - remaining_time(r)) / r->deadline_dur;
}

/* ---- memory: a lease of KV blocks per KVP group (kvplace.c) ---- */

/*
 * The prefill time each piece of r's KV brings its KVP group, in ns (the
 * load balancer's unit): the linear layers and causal attention of the
 * prompt tokens in the piece, and the attention of the prompt's later
 * tokens (queries that every group holding a piece serves) against it.
 * The first r->cached prompt tokens are not prefilled: only attended.
 */
void
sched_piece_work(const struct medha_sched *s, const struct medha_req *r,
    int64_t *work)
{
	const struct medha_pred *p = s->pred;
	int64_t P = r->spec.prompt_tokens, gt = s->kv.group_tokens;
	int64_t m = r->cached;

	for (int i = 0; i < s->kv.kvp; i++) {
		int64_t n = medha_kvplace_in_piece(&s->kv, i, m, P);
		int64_t c = medha_kvplace_in_piece(&s->kv, i, 0, m);
		int64_t end = (int64_t)(i + 1) * gt, after;
		double w = 0, cross = 0;

		work[i] = 0;
		if (n <= 0 && c <= 0)
			continue; /* output tokens only */
		end = end < P ? end : P;
		after = P - (end > m ? end : m);
		if (after > 0) {
			cross = medha_pred_attn_prefill(p, after, n + c) -
			    medha_pred_attn_prefill(p, after, 0);
			cross = cross > 0 ? cross : 0;
		}
		if (n > 0)
			w = medha_pred_linear(p, n) +
			    medha_pred_attn_prefill(p, n, c);
		w = (w + cross) * 1e9;
		work[i] = w < 4e15 ? (int64_t)w : (int64_t)4e15; /* < 2^53 */
	}
}

/*
 * r's TPOT target (medha_req.tpot_long), once its lease is known: for
 * a request whose prompt is preempt_below tokens or more (the scheduler's
 * long requests), long_tpot x the latency of a batch of its first decode
 * alone; 0 for any other, and with long_tpot 0 or fixed chunks.
 */
static double
long_target(const struct medha_sched *s, const struct medha_req *r)
{
	struct medha_cost a;
	int64_t P = r->spec.prompt_tokens;

	if (s->cfg.long_tpot == 0 || s->cfg.chunk > 0 || !sched_long(s, r))
		return 0;
	memset(&a, 0, sizeof(a));
	medha_cost_add(&a, s->pred, &s->kv, &r->kv, 1, P, 1, 0, NULL);
	return s->cfg.long_tpot *
	    medha_cost_latency(&a, s->pred, s->kv.kvp).latency;
}

/*
 * Whether candidate c's prefill waits this batch: it is long itself, its
 * TTFT deadline is still within reach (relative slack above 0), and
 * - a long request decodes (tpot_long): a chunk deep in a long prompt
 *   reads its whole KV, about what a long decode alone costs, so that
 *   even the smallest one would double such a decode's TPOT; it waits
 *   for them instead (and then prefills at full size);
 * - or (est and vllm) another long prompt holds the turn (long_turn)
 *   and c's prefill alone would take more than half of what the holder
 *   still needs. Least relative slack alone interleaves long prompts'
 *   chunks (the one waiting loses slack until it passes the one going),
 *   so that all of them end late, the longest deadline last: a 1M prompt
 *   waited 105 s where reserving every cap, which admits one long prompt
 *   at a time, had it wait 50 (doc/RESULTS.md). One at a time, and the
 *   shortest first where it saves the other at least what it costs the
 *   holder (c's time, against the holder's rest minus c's time).
 */
static int
yields(const struct medha_sched *s, const struct cand *c)
{
	const struct medha_req *r = &s->reqs[c->idx].pub, *h;

	if (c->urgency >= 1 || !sched_long(s, r))
		return 0;
	if (s->nlong > 0)
		return 1;
	if (s->long_pre < 0 || s->long_pre == c->idx)
		return 0;
	h = &s->reqs[s->long_pre].pub;
	return 2 * remaining_time(r) > remaining_time(h);
}

/*
 * Slot idx is a request of the batch being formed: under est and vllm,
 * a long prompt whose prefill has begun (a chunk past its cached prefix)
 * takes the turn (long_pre) if it has the least prefill time left of
 * those. With the slack orders only (lrs, medha: s->long_turns): the
 * others' orders do not interleave (arrival, deadline); and not under
 * max, where each long request reserves its whole output and memory
 * admits them about one at a time: its order is as before.
 */
static void
long_turn(struct medha_sched *s, int idx)
{
	const struct medha_req *r = &s->reqs[idx].pub;

	if (s->long_turns && r->state == MEDHA_REQ_PREFILL &&
	    r->sched_prefill > r->cached &&
	    sched_long(s, r) &&
	    (s->long_pre < 0 ||
	        remaining_time(r) <
	            remaining_time(&s->reqs[s->long_pre].pub)))
		s->long_pre = idx;
}

/*
 * Whether the batch being formed holds long decodes only (s->long_sep:
 * est and vllm with a pipeline, adaptive chunks, long_tpot on): some
 * long decode has its previous token, and the last batch was not such a
 * one (s->long_only, not yet set again), so that no other decode waits
 * more than a batch.
 * Under est the other requests are admitted, and each of their decodes
 * or chunks in a long decode's batch adds to its TPOT (five short decodes
 * made a 5.3 ms decode 7.0); in a batch of its own it decodes at its
 * latency alone, and the batches formed while its token is in flight
 * are bounded by that latency (s->long_lat), so that the next one finds
 * stage 0 free when its token comes back.
 */
static int
long_only(const struct medha_sched *s)
{
	if (!s->long_sep || s->long_only)
		return 0;
	for (int i = 0; i < s->nactive; i++) {
		const struct medha_req *r = &s->reqs[s->active[i]].pub;
		if (r->tpot_long > 0 && !r->busy && r->state == MEDHA_REQ_DECODE)
			return 1;
	}
	return 0;
}

/* Reserve r's KV; it then starts its prefill. 0 or MEDHA_ENOSPACE. */
static int
admit(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	int64_t work[MEDHA_KVP_MAX];
	int rc;

	if (s->cfg.max_seqs > 0 && s->nadmitted >= s->cfg.max_seqs)
		return MEDHA_ENOSPACE;
	if (q->keys != NULL) { /* with the longest cached prefix */
		rc = sched_prefix_admit(s, q);
	} else {
		if (s->kv.kvp > 1)
			sched_piece_work(s, r, work);
		rc = medha_kvplace_admit_work(&s->kv, &r->kv,
		    sched_kv_admit(s, r), r->spec.prompt_tokens,
		    s->kv.kvp > 1 ? work : NULL);
		if (rc == 0 && s->cfg.prefix_cache) /* room it counted free */
			sched_prefix_evict(s);
	}
	if (rc == 0) {
		r->state = MEDHA_REQ_PREFILL;
		r->tpot_long = long_target(s, r);
		r->recover_by = 0; /* recovered */
		s->nadmitted++;
	}
	return rc;
}

/* Fetch the hot head of slot i's request. */
static inline void
prefetch_req(const struct medha_sched *s, int i)
{
	const char *p = (const char *)&s->reqs[i];

	__builtin_prefetch(p);
	__builtin_prefetch(p + 64);
}

/* ---- medha: the index of short candidates ---- */

/*
 * Prefill-prefill batching (share_batch) asks, for each candidate in
 * policy order, about the short prefills behind it: those not packed yet
 * that can finish in one chunk and have less left than it. Asked by
 * scanning, that was every candidate behind each candidate, n^2 / 2
 * visits a batch, and with thousands of requests waiting for memory the
 * scans were the scheduler's whole time. Instead, once a batch, the
 * candidates that can finish in one chunk are sorted by what they have
 * left (srank): a candidate's short prefills are then the unpacked
 * places of a prefix of srank. A union-find link skips packed places;
 * whether there is any short prefill at all is one comparison with the
 * first unpacked place; and a prefix is walked only when its prefills
 * are packed, so each place is walked once. A batch costs O(n log n) in
 * all (sorting, and putting the short prefills that share back in policy
 * order), never n^2.
 */

static int
srank_cmp(const void *a, const void *b)
{
	const struct srank *x = a, *y = b;

	if (x->rem != y->rem)
		return x->rem < y->rem ? -1 : 1;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Restore the min-heap s->pick of n places below place k. */
static void
heap_down(struct medha_sched *s, int n, int k)
{
	int *h = s->pick;

	for (;; s->visits++) {
		int m = k, l = 2 * k + 1, t;
		if (l < n && h[l] < h[m])
			m = l;
		if (l + 1 < n && h[l + 1] < h[m])
			m = l + 1;
		if (m == k)
			return;
		t = h[k];
		h[k] = h[m];
		h[m] = t;
		k = m;
	}
}

/*
 * Index the nc candidates (in policy order, none packed yet). srank is
 * in (rem, pos) order; with many candidates against the most a chunk
 * holds (one), a counting sort on rem gets it in O(nc + one).
 */
static void
short_index(struct medha_sched *s, int nc)
{
	int64_t one = s->cfg.chunk > 0 ? s->cfg.chunk : s->cfg.max_chunk;
	int n = 0, bycount = one <= SHORT_COUNT_MAX * (int64_t)nc;
	int *at = s->count;

	if (bycount) {
		memset(at, 0, (size_t)(one + 1) * sizeof(*at));
		for (int i = 0; i < nc; i++)
			if (s->cands[i].rem <= one)
				at[s->cands[i].rem]++;
		for (int64_t r = 0, sum = 0; r <= one; r++) {
			int c = at[r];
			at[r] = (int)sum;
			sum += c;
		}
	}
	for (int i = 0; i < nc; i++) {
		struct cand *c = &s->cands[i];
		int k = n++;
		if (c->rem > one) {
			n--;
			continue;
		}
		if (bycount)
			k = at[c->rem]++;
		s->srank[k].rem = c->rem;
		s->srank[k].urgency = c->urgency;
		s->srank[k].pos = i;
	}
	if (!bycount && n > 1)
		qsort(s->srank, n, sizeof(*s->srank), srank_cmp);
	for (int k = 0; k < n; k++) {
		s->cands[s->srank[k].pos].rank = k;
		s->nxt[k] = k;
	}
	s->nxt[n] = n;
	s->nshort = n;
	s->first = 0;
	s->visits += (uint64_t)n;
}

/* The first place at or after k not packed yet (nshort if none). */
static int
short_next(struct medha_sched *s, int k)
{
	while (s->nxt[k] != k) {
		s->nxt[k] = s->nxt[s->nxt[k]];
		k = s->nxt[k];
		s->visits++;
	}
	return k;
}

/*
 * Whether a candidate with rem left has a short prefill that counts for
 * its urgency: an unpacked one with less left whose urgency is a number
 * (the scan this replaces never took a NaN as the highest urgency).
 * s->first, the first such place in all of srank, only moves forward.
 */
static int
short_any(struct medha_sched *s, int64_t rem)
{
	int k = short_next(s, s->first);

	while (k < s->nshort && !(s->srank[k].urgency >= 0))
		k = short_next(s, k + 1);
	s->first = k;
	return k < s->nshort && s->srank[k].rem < rem;
}

/* Candidate c is dealt with in this batch: out of the index. */
static void
set_packed(struct medha_sched *s, struct cand *c)
{
	c->packed = 1;
	if (c->rank >= 0) {
		s->nxt[c->rank] = c->rank + 1;
		c->rank = -1;
	}
}

/*
 * Make room for n candidates (and medha's index of them). 0 or
 * MEDHA_ENOMEM.
 */
static int
grow_cands(struct medha_sched *s, int n)
{
	void *p;

	if (s->cands_cap >= n)
		return 0;
	if ((p = medha_reallocarray(s->cands, n, sizeof(*s->cands))) == NULL)
		return MEDHA_ENOMEM;
	s->cands = p;
	if (s->cfg.policy == MEDHA_POLICY_MEDHA) {
		if ((p = medha_reallocarray(s->srank, n, sizeof(*s->srank))) ==
		    NULL)
			return MEDHA_ENOMEM;
		s->srank = p;
		if ((p = medha_reallocarray(s->count,
		         SHORT_COUNT_MAX * (size_t)n + 1, sizeof(*s->count))) ==
		    NULL)
			return MEDHA_ENOMEM;
		s->count = p;
		if ((p = medha_reallocarray(s->nxt, (size_t)n + 1,
		         sizeof(*s->nxt))) == NULL)
			return MEDHA_ENOMEM;
		s->nxt = p;
		if ((p = medha_reallocarray(s->pick, n, sizeof(*s->pick))) ==
		    NULL)
			return MEDHA_ENOMEM;
		s->pick = p;
	}
	s->cands_cap = n;
	return 0;
}

/* ---- forming a batch ---- */

static int
cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->key < y->key)
		return -1;
	if (x->key > y->key)
		return 1;
	if (x->hit != y->hit) /* the longer cached prefix first */
		return x->hit > y->hit ? -1 : 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

static int
push_item(struct medha_sched *s, int idx, int64_t t, int64_t kv, int decode,
    int last)
{
	/* idx: the request's slot; the item carries its handle */
	struct medha_sched_item *it;

	if (s->acc.n_items >= s->items_cap) {
		int ncap = s->items_cap ? 2 * s->items_cap : 256;
		void *n = medha_reallocarray(s->items, ncap, sizeof(*s->items));
		if (n == NULL)
			return MEDHA_ENOMEM;
		s->items = n;
		s->items_cap = ncap;
	}
	it = &s->items[s->acc.n_items];
	it->req = s->reqs[idx].pub.handle;
	it->tokens = t;
	it->kv = kv;
	it->decode = decode;
	it->last = last;
	medha_cost_add(&s->acc, s->pred, &s->kv, &s->reqs[idx].pub.kv, t, kv,
	    decode, last, NULL);
	return 0;
}

/*
 * Pack prefill candidate c within limit; admits it first if it waits for
 * memory. Returns 1 if packed, 0 if not, or a negative error.
 */
static int
pack_prefill(struct medha_sched *s, struct cand *c, double limit, int *npre)
{
	struct req *q = &s->reqs[c->idx];
	struct medha_req *r = &q->pub;
	int64_t t, P = r->spec.prompt_tokens;
	int last, rc;

	set_packed(s, c);
	if (*npre >= s->cfg.max_prefills)
		return 0;
	if (yields(s, c))
		return 0;
	if (r->state == MEDHA_REQ_WAITING && admit(s, q) != 0)
		return 0;
	t = choose_chunk(s, r, limit);
	if (t == 0 && s->acc.n_items == 0) /* alone, it must make progress */
		t = s->cfg.chunk > 0 ? s->cfg.chunk : 32;
	/*
	 * The progress guarantee (medha-sched(1)): adaptive, no prefill in
	 * the batch yet, and its decodes alone leave no room for the
	 * smallest chunk within the batch's limit (not merely within
	 * medha's share of it, which share_batch passes as limit): the
	 * first prefill that can go gets that chunk all the same, so that
	 * no prefill waits for the decodes to end. The batch runs over its
	 * target by the chunk's time, in its predicted latency and counted
	 * (medha_sched_progress).
	 */
	if (t == 0 && s->cfg.chunk == 0 && *npre == 0 &&
	    trial_cost(s, r, chunk_room(s, r) < 32 ? chunk_room(s, r) : 32) >
	        s->limit) {
		t = 32;
		s->prog_base = acc_cost(s, &s->acc);
		s->prog_now = 1;
	}
	/* adaptive, and no decode waits on this batch (one of a long
	   request in flight waits on it too): fill it to the efficient
	   chunk, however long that takes */
	if (s->cfg.chunk == 0 && s->ndec == 0 && s->nlong == 0 &&
	    s->acc.n_tokens + t < s->min_chunk)
		t = (s->min_chunk - s->acc.n_tokens + 31) / 32 * 32;
	if (t > chunk_room(s, r))
		t = chunk_room(s, r);
	if (t == 0)
		return 0;
	last = r->sched_prefill + t == P;
	if ((rc = push_item(s, c->idx, t, r->kv_tokens, 0, last)) != 0)
		return rc;
	medha_kvplace_prefilled(&s->kv, &r->kv, r->sched_prefill,
	    r->sched_prefill + t);
	r->sched_prefill += t;
	r->kv_tokens += t;
	if (q->keys != NULL && (rc = sched_prefix_blocks(s, q)) != 0)
		return rc;
	/* sarathi: the next chunk waits until this one left the last stage */
	if (last || s->cfg.policy == MEDHA_POLICY_SARATHI)
		r->busy = 1;
	(*npre)++;
	return 1;
}

/*
 * Prefill-prefill batching for candidate i: if it cannot finish in this
 * batch and short prefills wait behind it, they are packed first (in
 * policy order) within share = min(share_cap, the most urgent one's
 * urgency) of the budget left, then i takes what remains. A short
 * prefill is one not packed yet that can finish in a single chunk and
 * has less left than i. Returns 1 if i was dealt with (packed or found
 * unadmittable), 0 to pack it the ordinary way, or an error.
 *
 * The short prefills are found in the index: when i's turn comes every
 * candidate before it in policy order has been dealt with (packed), and
 * i is not short against itself, so the index's unpacked candidates with
 * less left than i are exactly the short ones behind i; u is the highest
 * of their urgencies, as one pass over them in any order finds it.
 */
static int
share_batch(struct medha_sched *s, int i, int nc, double limit, int *npre)
{
	struct cand *c = &s->cands[i];
	struct req *q = &s->reqs[c->idx];
	int n = 0, rc;
	double u = -1, base, share, lim;

	if (!short_any(s, c->rem))
		return 0;
	if (yields(s, c)) { /* the short ones take the whole budget */
		set_packed(s, c);
		return 1;
	}
	if (q->pub.state == MEDHA_REQ_WAITING && admit(s, q) != 0) {
		set_packed(s, c);
		return 1;
	}
	if (c->rem <= s->cfg.max_chunk &&
	    trial_cost(s, &q->pub, c->rem) <= limit)
		return 0; /* it finishes here anyway */
	for (int k = short_next(s, 0);
	     k < s->nshort && s->srank[k].rem < c->rem;
	     k = short_next(s, k + 1)) {
		if (s->srank[k].urgency > u)
			u = s->srank[k].urgency;
		s->pick[n++] = s->srank[k].pos;
	}
	s->visits += (uint64_t)n;
	share = u < s->cfg.share_cap ? u : s->cfg.share_cap;
	base = acc_cost(s, &s->acc);
	lim = base + share * (limit - base);
	/*
	 * Pack them in policy order: by walking the candidates behind i when
	 * they are few against the short ones, else through a heap, only
	 * while the batch may take prefills (past that, pack_prefill would
	 * only mark them packed, in any order).
	 */
	if (nc - i - 1 <= SHORT_WALK_MAX * n) {
		for (int k = 0; k < n; k++)
			s->cands[s->pick[k]].packed = 2;
		for (int j = i + 1; j < nc; j++)
			if (s->cands[j].packed == 2 &&
			    (rc = pack_prefill(s, &s->cands[j], lim, npre)) < 0)
				return rc;
		s->visits += (uint64_t)(nc - i - 1);
	} else {
		for (int k = n / 2 - 1; k >= 0; k--)
			heap_down(s, n, k);
		while (n > 0 && *npre < s->cfg.max_prefills) {
			int pos = s->pick[0];
			s->pick[0] = s->pick[--n];
			heap_down(s, n, 0);
			if ((rc = pack_prefill(s, &s->cands[pos], lim, npre)) <
			    0)
				return rc;
		}
		while (n > 0)
			set_packed(s, &s->cands[s->pick[--n]]);
	}
	if ((rc = pack_prefill(s, c, limit, npre)) < 0)
		return rc;
	return 1;
}

int
medha_sched_next_batch(struct medha_sched *s, double now,
    struct medha_sched_batch *b)
{
	int nc = 0, npre = 0, rc;
	double limit = s->cfg.chunk > 0 ? (double)s->cfg.chunk : s->cfg.target;
	double tight = INFINITY; /* the decodes' tightest tpot_slo */
	struct medha_lat l;

	memset(&s->acc, 0, sizeof(s->acc));
	s->prog_now = 0;
	s->nlong = 0;
	s->long_pre = -1;
	b->ops = NULL;
	b->n_ops = 0;
	if ((rc = grow_cands(s, s->nactive)) != 0 ||
	    (rc = sched_grow(s, now)) != 0) /* blocks on demand */
		return rc;
	s->long_only = long_only(s); /* (after grow: a decode it held back
	                                or preempted is not ready) */
	/* (1) every decode that has its previous token; (2) candidates */
	for (int i = 0; i < s->nactive; i++) {
		int idx = s->active[i];
		struct medha_req *r = &s->reqs[idx].pub;
		struct cand *c;

		if (i + PF_REQS < s->nactive)
			prefetch_req(s, s->active[i + PF_REQS]);
		/* a long request's decode, in this batch or in flight: the
		   batch delays its next token either way (with spp > 1 the
		   next batch holds stage 0 when its token comes back) */
		if (r->tpot_long > 0 && r->state == MEDHA_REQ_DECODE) {
			s->nlong++;
			if (r->tpot_long < tight)
				tight = r->tpot_long;
		}
		long_turn(s, idx);
		if (r->busy)
			continue;
		if (s->long_only &&
		    (r->tpot_long == 0 || r->state != MEDHA_REQ_DECODE))
			continue; /* not in a batch of long decodes */
		if (r->state == MEDHA_REQ_DECODE) {
			if ((rc = push_item(s, idx, 1, r->kv_tokens, 1, 0)) !=
			    0)
				return rc;
			r->kv_tokens++;
			r->busy = 1;
			if (r->tpot_slo > 0 && r->tpot_slo < tight)
				tight = r->tpot_slo;
			continue;
		}
		c = &s->cands[nc++];
		c->idx = idx;
		c->rem = r->spec.prompt_tokens - r->sched_prefill;
		c->packed = 0;
		c->rank = -1;
		c->hit = r->cached;
		c->urgency = 1 - relative_slack(r, now);
		c->urgency = c->urgency < 0 ? 0
		    : c->urgency > 1        ? 1
		                            : c->urgency;
		switch (s->cfg.policy) {
		case MEDHA_POLICY_FCFS:
		case MEDHA_POLICY_SARATHI: c->key = r->spec.arrival; break;
		case MEDHA_POLICY_EDF: c->key = r->deadline; break;
		default: c->key = relative_slack(r, now); break;
		}
	}
	b->n_decode = s->ndec = s->acc.n_items;
	/*
	 * Adaptive: the batch is a token of each of its decodes, so their
	 * tightest TPOT SLO bounds it where that is below the target, and
	 * so does the TPOT target of every long request decoding (in the
	 * batch or in flight; tpot_long); but not below twice a 32-token
	 * chunk's time alone, where prefills could not join at all (the
	 * SLO cannot be kept then anyway).
	 */
	if (s->long_sep && s->nlong > 0 && !s->long_only &&
	    s->long_lat < tight)
		tight = s->long_lat;
	if (s->cfg.chunk == 0 && tight < limit)
		limit = tight > s->tpot_floor ? tight
		    : s->tpot_floor < limit   ? s->tpot_floor
		                              : limit;
	s->limit = limit;
	if (nc > 1)
		qsort(s->cands, nc, sizeof(*s->cands), cand_cmp);
	if (s->cfg.policy == MEDHA_POLICY_MEDHA && nc > 0)
		short_index(s, nc);

	/* (3) prefills in policy order; medha lets short ones share */
	for (int i = 0; i < nc; i++) {
		struct cand *c = &s->cands[i];
		s->visits++;
		if (c->packed)
			continue;
		if (s->cfg.policy == MEDHA_POLICY_MEDHA &&
		    (rc = share_batch(s, i, nc, limit, &npre)) != 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		if ((rc = pack_prefill(s, c, limit, &npre)) < 0)
			return rc;
	}
	b->n_items = s->acc.n_items;
	if (s->cfg.prefix_cache || s->npend > 0) /* (preemptions' TRIMs) */
		sched_prefix_batch(s, b);
	if (s->oom) /* an op for the workers was lost */
		return MEDHA_ENOMEM;
	if (s->acc.n_items == 0)
		return 0;

	l = medha_cost_latency(&s->acc, s->pred, s->kv.kvp);
	if (s->long_only)
		s->long_lat = l.latency;
	if (s->prog_now) {
		s->prog.batches++;
		s->prog.extra += l.latency - s->prog_base;
	}
	b->seq = s->seq++;
	b->start = now;
	b->stage_time = l.stage;
	b->last_time = l.last;
	b->latency = l.latency;
	b->n_items = s->acc.n_items;
	b->n_tokens = s->acc.n_tokens;
	b->items = s->items;
	return 1;
}

void
medha_sched_progress(const struct medha_sched *s,
    struct medha_sched_progress *st)
{
	*st = s->prog;
}

int
medha_sched_batch_done(struct medha_sched *s, const struct medha_sched_batch *b,
    const struct medha_sched_result *res, double now)
{
	/* most decodes of a batch had their last token at the same time:
	   their gap's bucket is found once */
	double gap_seen = -1;
	int bucket_seen = 0;

	for (int i = 0; i < b->n_items; i++) {
		const struct medha_sched_item *it = &b->items[i];
		struct req *q = sched_lookup(s, it->req);
		struct medha_req *r;
		int rc, stop = res != NULL && res[i].stop != 0;

		if (i + PF_REQS < b->n_items) {
			uint64_t slot = b->items[i + PF_REQS].req & 0xffffffffu;
			if (slot < (uint64_t)s->reqs_cap)
				prefetch_req(s, (int)slot);
		}
		if (i + PF_REQS / 2 < b->n_items) {
			/* its head was fetched PF_REQS / 2 items ago */
			const struct req *n =
			    sched_lookup(s, b->items[i + PF_REQS / 2].req);
			if (n != NULL && n->pub.tbt.bin != NULL)
				__builtin_prefetch(
				    &n->pub.tbt.bin[n->pub.tbt.last]);
		}

		if (q == NULL) /* cancelled or failed meanwhile */
			continue;
		r = &q->pub;
		if (!it->decode && !it->last) {
			if (s->cfg.policy == MEDHA_POLICY_SARATHI)
				r->busy = 0; /* its next chunk may go */
			continue;
		}
		r->busy = 0;
		if (stop) {
			/* the stopping token is not output */
			if (!it->decode && r->resumed == 0) {
				r->first_token = now;
				r->last_token = now;
			}
			if ((rc = sched_finish(s, q, MEDHA_STATUS_OK,
			         MEDHA_FINISH_STOP, NULL, now)) != 0)
				return rc;
			continue;
		}
		if (it->decode || r->resumed > 0) {
			/* (a preempted request's last chunk: its next token) */
			double gap = now - r->last_token;
			if (gap > r->tpot_max)
				r->tpot_max = gap;
			/* a caller's clock that steps back counts no gap */
			gap = gap > 0 ? gap : 0;
			if (gap != gap_seen) {
				gap_seen = gap;
				bucket_seen = medha_tbt_bucket(gap);
			}
			if ((rc = medha_tbt_add_n(&r->tbt, bucket_seen, 1)) !=
			    0)
				return rc;
			r->decoded++;
			r->last_token = now;
			r->state = MEDHA_REQ_DECODE;
		} else {
			r->state = MEDHA_REQ_DECODE;
			r->first_token = now;
			r->last_token = now;
			if (r->max_tokens > 0)
				r->decoded = 1;
		}
		/* its output's ids, for a preemption to find it cached */
		if (q->keys != NULL && res != NULL &&
		    sched_preemptible(s, r) &&
		    (rc = sched_prefix_out(s, q, res[i].token)) != 0)
			return rc;
		if (r->decoded >= r->max_tokens &&
		    (rc = sched_finish(s, q, MEDHA_STATUS_OK,
		         MEDHA_FINISH_LENGTH, NULL, now)) != 0)
			return rc;
		/* a trace's real length below its cap (req.h; only traces
		   give one): the model stops there by itself, not before
		   min_tokens (its end cannot be drawn before) */
		if (r->state != MEDHA_REQ_DONE && r->spec.output_tokens > 0 &&
		    r->decoded >= r->spec.output_tokens &&
		    r->decoded >= r->spec.sampling.min_tokens &&
		    (rc = sched_finish(s, q, MEDHA_STATUS_OK, MEDHA_FINISH_STOP,
		         NULL, now)) != 0)
			return rc;
	}
	return 0;
}

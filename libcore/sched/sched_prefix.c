/*
 * sched_prefix.c: the scheduler core's prefix caching (prefix.h). A
 * request whose prompt tokens are known (token ids, or a trace's named
 * shared segments) gets 64-bit keys for them at arrival, and the prefix
 * the index holds of them then: its deadline and slack count only the
 * rest. At admission it takes the longest match again (the index may
 * have changed), a reference on each block of it, and KV blocks for the
 * rest, evicting unreferenced cached blocks least recently used first
 * where their room is needed; if the groups its cached blocks pin it to
 * have no room, it gives up the match one KVP piece at a time, down to
 * none, which is exactly the admission it would have had without the
 * cache. As its prompt is handed out its full blocks join the index
 * (until it meets blocks the index has already: it stops there, its own
 * copies kept); when it ends, the block its cacheable tokens end in
 * joins too, and its references go.
 *
 * The workers follow with ops (sched.h, struct medha_kvop): a request
 * that forks takes its cached positions from the sequences of the
 * requests whose blocks they are (their owners), a finished request's
 * sequence is trimmed to the blocks the index holds of it rather than
 * freed, and each eviction trims its owner's sequence further, freeing
 * it with the owner's first block. A worker forks with the request's
 * first item (the live replica sends the FORKs in it), which may come
 * batches after its admission (no room for a chunk in the batch that
 * admitted it): a partial block forked stays held by the request until
 * the batch of that item is formed, so that no eviction (whose TRIM
 * goes before that batch's items) takes it before the worker copies
 * it. Its full blocks are the request's path, held while it lives.
 */
#include "sched/sched_impl.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a of a segment's name */
static uint64_t
name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

void
sched_op(struct medha_sched *s, int op, uint64_t req, uint64_t src,
    int64_t from, int64_t to)
{
	if (s->npend == s->pend_cap) {
		int ncap = s->pend_cap ? 2 * s->pend_cap : 64;
		void *p = medha_reallocarray(s->pend, ncap, sizeof(*s->pend));
		if (p == NULL) {
			s->oom = 1;
			return;
		}
		s->pend = p;
		s->pend_cap = ncap;
	}
	s->pend[s->npend++] = (struct medha_kvop){op, req, src, from, to};
}

void
sched_prefix_batch(struct medha_sched *s, struct medha_sched_batch *b)
{
	b->ops = NULL;
	b->n_ops = 0;
	/* (s->seq is the next batch's number once this one has items) */
	s->px.fresh = s->seq + 1 + (b->n_items > 0);
	for (int i = 0; i < s->npunref; i++)
		medha_prefix_unref1(&s->px, s->punref[i]);
	s->npunref = 0;
	if (s->npend > 0) {
		struct medha_kvop *t = s->ops;
		int cap = s->ops_cap;
		s->ops = s->pend;
		s->ops_cap = s->pend_cap;
		b->ops = s->ops;
		b->n_ops = s->npend;
		s->pend = t;
		s->pend_cap = cap;
		s->npend = 0;
	}
}

/*
 * A worker was lost, every request holding KV failed (their references
 * gone): the index is emptied. The partial blocks held until the batch
 * is formed are let go first (there are none between batches), so that
 * nothing later lets go of a node of the old index.
 */
void
sched_prefix_lost(struct medha_sched *s)
{
	for (int i = 0; i < s->npunref; i++)
		medha_prefix_unref1(&s->px, s->punref[i]);
	s->npunref = 0;
	medha_prefix_clear(&s->px);
}

/* Index node p dropped: its owner's sequence keeps what is before it. */
static void
dropped(void *arg, const struct medha_pnode *p)
{
	struct medha_sched *s = arg;

	sched_op(s, MEDHA_KVOP_TRIM, p->owner, 0, 0,
	    p->depth == p->own_first ? 0 : p->depth * s->cfg.block_size);
}

void
sched_prefix_init(struct medha_sched *s)
{
	s->px.dropped = dropped;
	s->px.arg = s;

}

/*
 * Windows (cfg.window_exact): a worker's window layers give back the
 * blocks no query of a sequence sees any more, the index's blocks
 * among them (medha_kv_window_drop, at each call's first query), and
 * refuse a fork of [from, to) unless the source still holds, in each
 * window layer of window W, the blocks of [max(from, to - W + 1), to)
 * (medha_kv_seq_fork). A match is taken only where every FORK op it
 * makes passes that check, from the last position each owner's
 * sequence may have been queried at (a run of an owner and the partial
 * block after it, its too, are one op, so only the match's end counts
 * there): a live owner's from what it was
 * handed (a step in flight and a worker's lookahead one more), an
 * ended one's (win_hi) as it ended. Otherwise it is no match: the
 * request computes its prompt, as without the cache.
 */

/* The last position the workers may have queried q's sequence at. */
static int64_t
query_hi(const struct req *q)
{
	const struct medha_req *r = &q->pub;
	int64_t hi = r->sched_prefill;

	if (r->decoded > r->resumed &&
	    r->spec.prompt_tokens - r->resumed + r->decoded + 1 > hi)
		hi = r->spec.prompt_tokens - r->resumed + r->decoded + 1;
	return hi;
}

/* Whether a sequence queried up to hi still holds, in each window
 * layer, what a fork of [from, to) from it needs. */
static int
window_holds(const struct medha_sched *s, int64_t hi, int64_t from, int64_t to)
{
	const struct medha_model_config *mc = &s->pred->model.c;
	int64_t bs = s->cfg.block_size;

	for (int l = 0; l < mc->n_layers; l++) {
		int64_t w = medha_layer_span(mc, l), first, gone;
		if (w <= 0 || (l > 0 && w == medha_layer_span(mc, l - 1)))
			continue;
		first = to - w + 1 > from ? to - w + 1 : from;
		gone = hi - w + 1; /* its blocks below gone / bs are dropped */
		if (gone >= bs && first / bs < gone / bs)
			return 0;
	}
	return 1;
}

static int
owner_holds(const struct medha_sched *s, const struct medha_pnode *p,
    int64_t from, int64_t to)
{
	const struct req *o = sched_lookup(s, p->owner);

	return window_holds(s, o != NULL ? query_hi(o) : p->win_hi, from, to);
}

/* Whether each FORK op of a match (fork_ops(): a run per owner, the
 * partial block last) finds its owner's window layers holding it. */
static int
window_exact(const struct medha_sched *s, int full, int part, int64_t m)
{
	const struct medha_prefix *x = &s->px;
	int64_t bs = s->cfg.block_size;

	for (int i = full; i != 0;) {
		int j = i;
		int64_t to = (x->n[i].depth + 1) * bs;
		while (x->n[j].parent != 0 &&
		    x->n[x->n[j].parent].owner == x->n[i].owner)
			j = x->n[j].parent;
		if (i == full && part >= 0 &&
		    x->n[part].owner == x->n[i].owner) {
			to = m; /* the partial block's op is this run's */
			part = -1;
		}
		if (!owner_holds(s, &x->n[i], x->n[j].depth * bs, to))
			return 0;
		i = x->n[j].parent;
	}
	return part < 0 ||
	    owner_holds(s, &x->n[part], x->n[part].depth * bs, m);
}

/* medha_prefix_match() of q's first lim keys, none where a window
 * layer of the workers no longer holds what it needs */
static int64_t
match(const struct medha_sched *s, const struct req *q, int64_t lim,
    int *full, int *part)
{
	int64_t m = medha_prefix_match(&s->px, q->pub.spec.cache_salt,
	    q->keys, lim, s->kv.group_tokens, full, part);

	if (m > 0 && s->cfg.window_exact && !window_exact(s, *full, *part, m)) {
		*full = 0;
		*part = -1;
		return 0;
	}
	return m;
}

/* q's nodes (the run of them ending at node i) keep hi, the last
 * position its sequence was queried at, for when q is gone */
static void
freeze(struct medha_sched *s, uint64_t h, int i, int64_t hi)
{
	for (; i > 0 && s->px.n[i].owner == h; i = s->px.n[i].parent)
		s->px.n[i].win_hi = hi;
}

int
sched_prefix_arrive(struct medha_sched *s, struct req *q,
    const struct medha_reqspec *spec)
{
	int64_t P = spec->prompt_tokens, n = 0, k = 0, lim;
	int full, part;

	if (spec->prompt_ids != NULL)
		n = P;
	else
		for (int i = 0; i < spec->n_prefix; i++)
			n += spec->prefix[i].tokens;
	n = n < P ? n : P;
	if (n <= 0)
		return 0; /* its tokens are its own: nothing to share */
	/* a repetition penalty counts every prompt token, and a worker
	   learns a prompt's tokens only from the items it computes: such a
	   request takes no part in the cache */
	float rp = spec->sampling.repetition_penalty;
	if (rp != 0 && rp != 1)
		return 0;
	if ((q->keys = medha_reallocarray(NULL, n, sizeof(*q->keys))) == NULL)
		return MEDHA_ENOMEM;
	q->nkeys = n;
	q->keys_cap = n;
	if (spec->prompt_ids != NULL) {
		for (k = 0; k < n; k++)
			q->keys[k] = (uint32_t)spec->prompt_ids[k];
	} else {
		/* a segment's tokens: its name's, with the top bit set */
		for (int i = 0; i < spec->n_prefix && k < n; i++) {
			uint64_t h = name_hash(spec->prefix[i].name);
			for (int64_t j = 0; j < spec->prefix[i].tokens && k < n;
			     j++)
				q->keys[k++] =
				    medha_mix64(h +
				        (uint64_t)j * 0x9e3779b97f4a7c15ULL) |
				    1ULL << 63;
		}
	}
	/* one prompt token at least is computed: its logits give the
	   first output token */
	lim = n < P - 1 ? n : P - 1;
	q->pub.cached = match(s, q, lim, &full, &part);
	return 0;
}

/* The index's blocks of the path ending at node full, per piece, and
 * the groups they pin the pieces to; the piece of a partial block part
 * (-1: none) is pinned to its group too, where the copy comes from. */
static void
path_pins(const struct medha_sched *s, int full, int part, int64_t *shared,
    int *pin)
{
	const struct medha_prefix *x = &s->px;
	int64_t bs = s->cfg.block_size, gt = s->kv.group_tokens;

	for (int i = 0; i < s->kv.kvp; i++) {
		shared[i] = 0;
		pin[i] = -1;
	}
	for (int i = full; i != 0; i = x->n[i].parent) {
		int piece = (int)(x->n[i].depth * bs / gt);
		shared[piece]++;
		pin[piece] = x->n[i].group;
	}
	if (part >= 0)
		pin[x->n[part].depth * bs / gt] = x->n[part].group;
}

/* Partial block node, held for a fork, let go once the batch being
 * formed is (sched_prefix_batch). */
static void
unref_after_batch(struct medha_sched *s, int node)
{
	if (s->npunref == s->punref_cap) {
		int ncap = s->punref_cap ? 2 * s->punref_cap : 16;
		void *p = medha_reallocarray(s->punref, ncap, sizeof(int));
		if (p == NULL) { /* let go now: a worker may miss its copy */
			s->oom = 1;
			medha_prefix_unref1(&s->px, node);
			return;
		}
		s->punref = p;
		s->punref_cap = ncap;
	}
	s->punref[s->npunref++] = node;
}

/*
 * The workers' FORK ops of request q, whose match of m tokens runs
 * through the full blocks up to node full and then part (-1: none): a
 * run per owner, in order, the partial block last. q holds part (the
 * admission's reference) until its first item (sched_prefix_blocks).
 */
static void
fork_ops(struct medha_sched *s, struct req *q, int full, int part, int64_t m)
{
	uint64_t h = q->pub.handle;
	const struct medha_prefix *x = &s->px;
	int64_t bs = s->cfg.block_size;
	int first = s->npend;

	/* runs from the deepest up, then put in order */
	for (int i = full; i != 0;) {
		int j = i;
		while (x->n[j].parent != 0 &&
		    x->n[x->n[j].parent].owner == x->n[i].owner)
			j = x->n[j].parent;
		sched_op(s, MEDHA_KVOP_FORK, h, x->n[i].owner,
		    x->n[j].depth * bs, (x->n[i].depth + 1) * bs);
		i = x->n[j].parent;
	}
	for (int a = first, b = s->npend - 1; a < b; a++, b--) {
		struct medha_kvop t = s->pend[a];
		s->pend[a] = s->pend[b];
		s->pend[b] = t;
	}
	if (part < 0)
		return;
	if (s->cfg.window_exact && s->npend > first &&
	    s->pend[s->npend - 1].src == x->n[part].owner)
		s->pend[s->npend - 1].to = m; /* one op: its window checked
		                                 at m alone (window_exact()) */
	else
		sched_op(s, MEDHA_KVOP_FORK, h, x->n[part].owner,
		    x->n[part].depth * bs, m);
	q->fork_part = part;
}

/* q extends node i from now on (-1 none: it stopped); the node it
 * extended before is let go. */
static void
extend(struct medha_sched *s, struct req *q, int i)
{
	if (q->ext_node >= 0)
		s->px.n[q->ext_node].ext--;
	q->ext_node = i;
	if (i >= 0)
		s->px.n[i].ext++;
}

/*
 * Whether q, whose match ends with the full blocks up to node full
 * (mfull tokens), had better wait than prefill its next block itself:
 * that block was handed out in this batch (its KV is not computed yet),
 * or a request prefilling now is about to hand it out (it extends full
 * with the same tokens). It waits for them as for memory, and takes
 * them from the cache once they are there.
 */
static int
worth_waiting(const struct medha_sched *s, const struct req *q, int full,
    int64_t mfull, int64_t lim)
{
	const struct medha_prefix *x = &s->px;
	int64_t bs = s->cfg.block_size;
	const uint64_t *next = q->keys + mfull;
	int c;

	if (lim - mfull < bs)
		return 0;
	c = medha_prefix_find(x, q->pub.spec.cache_salt, full, next);
	if (c >= 0 && x->n[c].born == x->fresh)
		return 1; /* (not matched while fresh; else: another group's) */
	if (full == 0 || x->n[full].ext == 0)
		return 0;
	for (int i = 0; i < s->nactive; i++) {
		const struct req *o = &s->reqs[s->active[i]];
		if (o != q && o->ext_node == full && o->nkeys >= mfull + bs &&
		    memcmp(o->keys + mfull, next, bs * sizeof(*next)) == 0)
			return 1;
	}
	return 0;
}

/* r's prefill starts at m now: its plan from there (its deadline kept). */
static void
replan(struct medha_sched *s, struct medha_req *r, int64_t m)
{
	r->cached = m;
	r->sched_prefill = m;
	r->prefill_alone =
	    sched_plan_alone(s, m, r->spec.prompt_tokens, r->cum);
}

int
sched_prefix_admit(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	struct medha_prefix *x = &s->px;
	int64_t P = r->spec.prompt_tokens, bs = s->cfg.block_size;
	int64_t lim = q->nkeys < P - 1 ? q->nkeys : P - 1, m;
	int64_t shared[MEDHA_KVP_MAX], work[MEDHA_KVP_MAX];
	int pin[MEDHA_KVP_MAX], full, part, rc;
	int64_t least = (sched_kv_admit(s, r) + bs - 1) / bs - lim / bs,
	        room = 0;

	/* no match could make it fit: not worth one (a request waiting
	   for memory asks every batch); least counts every layer, so not
	   with window layers (medha_kvplace_window), whose cost is less */
	for (int g = 0; g < s->kv.kvp; g++)
		room += s->kv.cap_blocks - s->kv.res[g] - s->kv.held[g];
	if (least > room && s->kv.win_layers == 0)
		return MEDHA_ENOSPACE;
	m = match(s, q, lim, &full, &part);
	if (worth_waiting(s, q, full,
	        full == 0 ? 0 : (x->n[full].depth + 1) * bs, lim))
		return MEDHA_ENOSPACE;
	for (;;) {
		int64_t cut;
		path_pins(s, full, part, shared, pin);
		/* held while this admission evicts: the blocks it forks */
		medha_prefix_ref(x, full);
		if (part >= 0)
			medha_prefix_ref1(x, part);
		if (m != r->cached)
			replan(s, r, m);
		if (s->kv.kvp > 1)
			sched_piece_work(s, r, work);
		rc = medha_kvplace_admit_pin(&s->kv, &r->kv,
		    sched_kv_admit(s, r), P, m, s->kv.kvp > 1 ? work : NULL,
		    shared, pin);
		if (rc == 0)
			break;
		if (part >= 0)
			medha_prefix_unref1(x, part);
		medha_prefix_unref(x, full);
		if (m == 0)
			return rc;
		/* give up the last piece of the match: its group is full */
		cut = full == 0 ? 0
		                : x->n[full].depth * bs / s->kv.group_tokens *
		        s->kv.group_tokens;
		while (full != 0 && x->n[full].depth * bs >= cut)
			full = x->n[full].parent;
		part = -1;
		m = cut;
	}
	sched_prefix_evict(s);
	fork_ops(s, q, full, part, m);
	x->st.queries++;
	if (m > 0) {
		x->st.hits++;
		x->st.hit_tokens += m;
	}
	q->ins_node = full;
	q->ins_tok = full == 0 ? 0 : (x->n[full].depth + 1) * bs;
	q->ins_stop = 0;
	q->own_first = -1;
	q->own_end = 0;
	q->ext_node = -1;
	if (q->ins_tok + bs <= q->nkeys)
		extend(s, q, full);
	r->kv_tokens = m;
	r->state = MEDHA_REQ_PREFILL;
	return 0;
}

/*
 * Only leaves are evicted, so a group's unreferenced block whose
 * unreferenced child lives on another group (the request's next KVP
 * piece: a preempted request's blocks run on there) goes once that
 * child has: when a group finds no leaf of its own to evict, the other
 * groups give up their least recently used leaf each, until it does.
 * Its unreferenced blocks are at least what it is over, so this ends.
 */
void
sched_prefix_evict(struct medha_sched *s)
{
	for (int g = 0; g < s->kv.kvp; g++) {
		int64_t over;
		while ((over = medha_kvplace_over(&s->kv, g)) > 0) {
			int64_t k = medha_prefix_evict(&s->px, g, over);
			for (int o = 0; k == 0 && o < s->kv.kvp; o++)
				if (o != g)
					k += medha_prefix_evict(&s->px, o, 1);
			MEDHA_ASSERT(k > 0);
		}
	}
}

/* Node made of q's own block of n tokens: q's sequence holds it. */
static void
own(struct medha_sched *s, struct req *q, int node, int64_t n)
{
	struct medha_pnode *p = &s->px.n[node];

	if (q->own_first < 0)
		q->own_first = p->depth;
	p->owner = q->pub.handle;
	p->own_first = q->own_first;
	p->win_hi = INT64_MAX; /* (looked up while q lives; freeze()) */
	q->own_end = p->depth * s->cfg.block_size + n;
	if (n == s->cfg.block_size) {
		q->ins_node = node;
		q->ins_tok += n;
		extend(s, q, q->ins_tok + n <= q->nkeys ? node : -1);
	}
}

/* q's full blocks from ins_tok up to lim into the index, each made
 * with born (fresh: its KV is computed with this batch). 0 or
 * MEDHA_ENOMEM. */
static int
insert_blocks(struct medha_sched *s, struct req *q, int64_t lim, uint64_t born)
{
	struct medha_req *r = &q->pub;
	int64_t bs = s->cfg.block_size;

	while (!q->ins_stop && q->ins_tok + bs <= lim) {
		int piece = (int)(q->ins_tok / s->kv.group_tokens);
		int g = r->kv.groups[piece], node, rc;

		/* (window layers: the index keeps the block's every layer,
		   which its own reservation may not hold) */
		rc = medha_kvplace_to_index(&s->kv, &r->kv, piece, 0) != 0
		    ? 0
		    : medha_prefix_insert(&s->px, r->spec.cache_salt,
		          q->ins_node, q->keys + q->ins_tok, (int)bs, g,
		          &node);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			/* another request's copy: its own stays its own (its
			   worker holds it), and its blocks go no further */
			q->ins_stop = 1;
			extend(s, q, -1);
			break;
		}
		s->px.n[node].born = born;
		(void)medha_kvplace_to_index(&s->kv, &r->kv, piece, 1);
		medha_prefix_ref1(&s->px, node);
		own(s, q, node, bs);
	}
	return 0;
}

int
sched_prefix_blocks(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	int64_t lim = q->nkeys < r->sched_prefill ? q->nkeys : r->sched_prefill;

	/* its first item: the workers copy its partial block with it */
	if (q->fork_part != 0) {
		unref_after_batch(s, q->fork_part);
		q->fork_part = 0;
	}
	/* its own block of these tokens is the index's now; its KV is
	   computed with this batch, not before: no request forks from it
	   until the next */
	return insert_blocks(s, q, lim, s->px.fresh);
}

/*
 * q ends (or is preempted) with its first c tokens' KV computed: the
 * block they end in joins the index, if the blocks before are its path
 * (not if the workers' KV was lost), and its references go. Returns the
 * node of that block, or -1.
 */
static int
park(struct medha_sched *s, struct req *q, int64_t c, int status)
{
	struct medha_req *r = &q->pub;
	int64_t bs = s->cfg.block_size;
	int node = -1;

	if (r->state != MEDHA_REQ_WAITING && status != MEDHA_STATUS_FAILED &&
	    !q->ins_stop && c % bs != 0 && q->ins_tok == c / bs * bs &&
	    r->sched_prefill >= c) {
		int piece = (int)(q->ins_tok / s->kv.group_tokens);
		int g = r->kv.groups[piece];
		if (r->kv.res_blocks[piece] > 0 &&
		    medha_prefix_insert(&s->px, r->spec.cache_salt,
		        q->ins_node, q->keys + q->ins_tok,
		        (int)(c - q->ins_tok), g, &node) == 1) {
			r->kv.res_blocks[piece]--;
			s->kv.res[g]--;
			own(s, q, node, c - q->ins_tok);
		} else
			node = -1;
	}
	if (r->state != MEDHA_REQ_WAITING)
		extend(s, q, -1);
	if (q->ins_node != 0)
		medha_prefix_unref(&s->px, q->ins_node);
	if (q->fork_part != 0) { /* gone before its first item */
		medha_prefix_unref1(&s->px, q->fork_part);
		q->fork_part = 0;
	}
	return node;
}

void
sched_prefix_finish(struct medha_sched *s, struct req *q, int status)
{
	int64_t c = q->nkeys;
	int tail;

	c = c < q->pub.spec.prompt_tokens ? c : q->pub.spec.prompt_tokens;
	tail = park(s, q, c, status);
	freeze(s, q->pub.handle, tail >= 0 ? tail : q->ins_node, query_hi(q));
	q->ins_node = 0;
	free(q->keys);
	q->keys = NULL;
	q->nkeys = 0;
	q->keys_cap = 0;
}

/* Room for n keys in q->keys. 0 or MEDHA_ENOMEM. */
static int
keys_room(struct req *q, int64_t n)
{
	int64_t cap = q->keys_cap > q->nkeys ? q->keys_cap : q->nkeys;
	void *p;

	if (n <= cap) {
		q->keys_cap = cap;
		return 0;
	}
	cap = cap > 0 ? 2 * cap : 64;
	cap = cap > n ? cap : n;
	if ((p = medha_reallocarray(q->keys, (size_t)cap, sizeof(*q->keys))) ==
	    NULL)
		return MEDHA_ENOMEM;
	q->keys = p;
	q->keys_cap = cap;
	return 0;
}

int
sched_prefix_out(struct medha_sched *s, struct req *q, int32_t tok)
{
	(void)s;
	if (q->keys == NULL || !q->ids || tok < 0)
		return 0;
	/* keys of the prompt and of every output before this one */
	if (q->nkeys !=
	    q->pub.spec.prompt_tokens - q->pub.resumed + q->pub.decoded - 1)
		return 0;
	if (keys_room(q, q->nkeys + 1) != 0)
		return MEDHA_ENOMEM;
	q->keys[q->nkeys++] = (uint32_t)tok;
	return 0;
}

/* q holds no place in the index (no path, no blocks of its own). */
static void
unplaced(struct req *q)
{
	q->ins_node = 0;
	q->ins_tok = 0;
	q->ins_stop = 0;
	q->own_first = -1;
	q->own_end = 0;
	q->ext_node = -1;
}

/* q's worker was lost: its references go (its blocks are not the
 * index's to keep), its keys stay for its admission again. */
void
sched_prefix_forget(struct medha_sched *s, struct req *q)
{
	(void)park(s, q, 0, MEDHA_STATUS_FAILED);
	unplaced(q);
}

/*
 * q, holding kv computed tokens and a prompt of spec.prompt_tokens now
 * (its outputs folded in), is preempted: its blocks of those tokens
 * join the index (the full ones it had not put there yet, then the one
 * they end in), their owner a new handle that the workers' MOVE gives
 * its sequence; its references go. A request of no token ids gets keys
 * of its own (a trace's prompt, in the simulator); one of ids whose
 * keys are not known (no part in the cache) has its sequence freed.
 * Its keys stay, for its admission again. 0 or MEDHA_ENOMEM.
 */
int
sched_prefix_preempt(struct medha_sched *s, struct req *q, int64_t kv)
{
	struct medha_req *r = &q->pub;
	int64_t P = r->spec.prompt_tokens, lim;
	uint64_t h = r->handle, ghost;
	int tail, rc;

	if (q->keys == NULL && q->ids) {
		sched_op(s, MEDHA_KVOP_TRIM, h, 0, 0, 0);
		return 0;
	}
	if (q->keys == NULL) { /* not in the index yet */
		q->nkeys = 0;
		unplaced(q);
	}
	if (!q->ids && q->nkeys < P) { /* its own keys for the rest */
		if ((rc = keys_room(q, P)) != 0)
			return rc;
		for (int64_t k = q->nkeys; k < P; k++)
			q->keys[k] =
			    (medha_mix64(h * 0x9e3779b97f4a7c15ULL + k) &
			        ~(1ULL << 63)) |
			    1ULL << 62;
		q->nkeys = P;
	}
	lim = q->nkeys < kv ? q->nkeys : kv;
	r->sched_prefill = kv; /* all of it computed */
	if ((rc = insert_blocks(s, q, lim, 0)) != 0)
		return rc;
	tail = park(s, q, lim, MEDHA_STATUS_OK);
	if (q->own_end == 0) {
		sched_op(s, MEDHA_KVOP_TRIM, h, 0, 0, 0);
	} else {
		if (++s->ghost == 0)
			s->ghost = 1;
		ghost = s->ghost; /* generation 0: no request's */
		for (int i = tail >= 0 ? tail : q->ins_node;
		     i != 0 && s->px.n[i].owner == h; i = s->px.n[i].parent) {
			s->px.n[i].owner = ghost;
			/* (its queries went up to kv: lookahead's one) */
			s->px.n[i].win_hi = kv + 1;
		}
		sched_op(s, MEDHA_KVOP_MOVE, h, ghost, 0, q->own_end);
	}
	unplaced(q);
	return 0;
}

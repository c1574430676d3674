/*
 * ahead.c: lookahead (ahead.h) (on unless --no-lookahead). A worker alone
 * in its replica (no TP, SPP or KVP peers) on a backend that computes,
 * after a batch whose every item sampled a token here (decodes, last
 * prompt chunks), runs the step the scheduler will most likely send next
 * while its RESULT makes the round trip: the same sequences one position
 * on, fed the tokens just sampled, keeping the logits. The items of the
 * BATCH that comes back that are steps of it (the same handle, position
 * and token) are sampled from those logits, so the round trip overlaps
 * the computation instead of adding to every step; its other items (a
 * new prompt's chunk) run as a batch of their own, and the sequences of
 * the step it leaves out (a request that ended) are cut back to the
 * lengths they had, giving back any KV block the step took (the
 * scheduler's count of blocks stays exact), as are all of them when
 * nothing of it is used (another batch, IDLE, a fault). A sequence's
 * results do not depend on what else is in its batch, so the tokens are
 * the same either way. On the 2-core machine of doc/RESULTS.md it gave
 * one request 2-14% more decode tokens a second, several at once about
 * as many or more, though the round trip's threads take their cores
 * from the backend's there.
 */
#include "serve/worker/ahead.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What changes the step's state (ahead_move). */
enum ahead_ev {
	EV_PLAN,  /* a batch ran whole (a->n: the step's sequences, or 0) */
	EV_RUN,   /* its forward called (a failed one may have taken blocks) */
	EV_MATCH, /* the BATCH back holds steps of it */
	EV_USED,  /* those answered from its logits */
	EV_DROP,  /* anything else: no match, a failure, a new session */
};

/* Cut the step's sequences back to the lengths they had before it. */
static void
cut_back(struct wk_ahead *a)
{
	struct medha_backend *be = a->run->be;

	for (int i = 0; i < a->n; i++) {
		struct wseq *q = wk_seqs_find(a->run->seqs, a->handle[i]);
		if (q != NULL && medha_backend_seq_len(be, q->seq) > a->len[i])
			medha_backend_seq_fill(be, q->seq, a->len[i]);
	}
}

/*
 * The step's life (ahead.h): every change of a->state, here. A step
 * that ran and is not used leaves its sequences as they were; one used
 * leaves the sequences it answered one position on (wk_ahead_use cut
 * the others back).
 */
static void
ahead_move(struct wk_ahead *a, enum ahead_ev ev)
{
	enum wk_ahead_state from = a->state, to = WK_AHEAD_NONE;

	switch (ev) {
	case EV_PLAN:
		MEDHA_ASSERT(from == WK_AHEAD_NONE);
		to = a->n > 0 ? WK_AHEAD_PLANNED : WK_AHEAD_NONE;
		break;
	case EV_RUN:
		MEDHA_ASSERT(from == WK_AHEAD_PLANNED);
		to = WK_AHEAD_RAN;
		break;
	case EV_MATCH:
		MEDHA_ASSERT(from == WK_AHEAD_RAN);
		to = WK_AHEAD_MATCHED;
		break;
	case EV_USED:
		MEDHA_ASSERT(from == WK_AHEAD_MATCHED);
		break;
	case EV_DROP:
		if (from == WK_AHEAD_RAN || from == WK_AHEAD_MATCHED)
			cut_back(a);
		break;
	}
	if (to == WK_AHEAD_NONE)
		a->n = 0;
	a->state = to;
}

void
wk_ahead_init(struct wk_ahead *a, struct wk_batch *run, int may)
{
	memset(a, 0, sizeof(*a));
	a->state = WK_AHEAD_NONE;
	a->run = run;
	a->may = may;
}

void
wk_ahead_free(struct wk_ahead *a)
{
	free(a->handle);
	free(a->item);
	free(a->r_items);
	free(a->r_map);
	free(a->len);
	free(a->tok);
	free(a->bs);
	free(a->lg);
}

int
wk_ahead_planned(const struct wk_ahead *a)
{
	return a->state == WK_AHEAD_PLANNED;
}

void
wk_ahead_drop(struct wk_ahead *a)
{
	ahead_move(a, EV_DROP);
}

/* Room for a step of n sequences: 0 or MEDHA_ENOMEM. */
static int
grow_step(struct wk_ahead *a, size_t n)
{
	const int vocab = a->run->be->info.shape.vocab;

	if (n <= a->cap)
		return 0;
	void *h = medha_reallocarray(a->handle, n, sizeof(*a->handle));
	if (h != NULL)
		a->handle = h;
	void *l = medha_reallocarray(a->len, n, sizeof(*a->len));
	if (l != NULL)
		a->len = l;
	void *t = medha_reallocarray(a->tok, n, sizeof(*a->tok));
	if (t != NULL)
		a->tok = t;
	void *s = medha_reallocarray(a->bs, n, sizeof(*a->bs));
	if (s != NULL)
		a->bs = s;
	void *g = medha_reallocarray(a->lg, n * (size_t)vocab, sizeof(*a->lg));
	if (g != NULL)
		a->lg = g;
	void *m = medha_reallocarray(a->item, n, sizeof(*a->item));
	if (m != NULL)
		a->item = m;
	if (h == NULL || l == NULL || t == NULL || s == NULL || g == NULL ||
	    m == NULL)
		return MEDHA_ENOMEM;
	a->cap = n;
	return 0;
}

/* Keep the step after the batch just run (b, its a->run->n sequences
 * run): every item sampled here, or no step. */
void
wk_ahead_plan(struct wk_ahead *a, const struct medha_msg_batch *b)
{
	const struct wk_batch *r = a->run;
	int i, n = r->n;

	a->n = 0;
	if (!a->may || n < 1 || n != b->n_items)
		goto out;
	for (i = 0; i < n; i++)
		if (r->smp[i] == NULL || r->out[i] < 0)
			goto out;
	if (grow_step(a, (size_t)n) != 0)
		goto out;
	for (i = 0; i < n; i++) {
		const struct medha_msg_item *it = &b->items[r->idx[i]];
		a->handle[i] = it->handle;
		a->tok[i] = r->out[i];
		a->len[i] = it->pos + it->n_ids;
		a->bs[i] = (struct medha_batch_seq){.seq = r->bs[i].seq,
		    .pos = it->pos + it->n_ids,
		    .n_tokens = 1,
		    .logits = MEDHA_LOGITS_LAST};
	}
	a->n = n;
out:
	ahead_move(a, EV_PLAN);
}

/* Room for n items not run ahead (wk_ahead_use). */
static int
grow_rest(struct wk_ahead *a, size_t n)
{
	void *x = medha_reallocarray(a->r_items, n, sizeof(*a->r_items));
	if (x != NULL)
		a->r_items = x;
	void *y = medha_reallocarray(a->r_map, n, sizeof(*a->r_map));
	if (y != NULL)
		a->r_map = y;
	if (x == NULL || y == NULL)
		return MEDHA_ENOMEM;
	a->r_cap = n;
	return 0;
}

void
wk_ahead_run(struct wk_ahead *a)
{
	struct medha_backend *be = a->run->be;
	struct medha_batch batch = {a->tok, a->n, a->bs, a->n};
	struct medha_fwd f;
	char why[256];

	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = be->info.layer_lo;
	f.layer_hi = be->info.layer_hi;
	f.logits = a->lg;
	a->looked++;
	ahead_move(a, EV_RUN); /* a failed call may have taken blocks too */
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_DEBUG, "lookahead of %d: %s", a->n, why);
		ahead_move(a, EV_DROP);
	}
}

/* Which items of b the step run answers: a->item[j], the item of
 * sequence j of the step, or -1. Returns how many. The batch may leave
 * sequences of the step out (a request that ended) and hold items it
 * did not run (a new prompt's chunk): those run as usual
 * (wk_ahead_use). */
static int64_t
match_items(struct wk_ahead *a, const struct medha_msg_batch *b)
{
	int64_t i, f, nm = 0;
	int j, k, hint = 0;

	for (j = 0; j < a->n; j++)
		a->item[j] = -1;
	for (i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		if (it->n_ids != 1 || !it->sample || it->has_params ||
		    it->n_groups > 1)
			continue;
		/* the batch keeps the step's order, most often */
		for (k = 0, j = -1; k < a->n; k++)
			if (a->handle[(hint + k) % a->n] == it->handle) {
				j = (hint + k) % a->n;
				break;
			}
		if (j < 0 || a->item[j] >= 0 || it->pos != a->len[j] ||
		    it->ids[0] != a->tok[j] ||
		    wk_seqs_find(a->run->seqs, it->handle) == NULL)
			continue;
		for (f = 0; f < b->n_frees && b->frees[f] != it->handle; f++)
			;
		if (f < b->n_frees)
			continue;
		a->item[j] = (int32_t)i;
		hint = j + 1;
		nm++;
	}
	return nm;
}

int64_t
wk_ahead_match(struct wk_ahead *a, const struct medha_msg_batch *b)
{
	int64_t nm = 0;

	if (a->state == WK_AHEAD_RAN && b != NULL && b->peers == NULL)
		nm = match_items(a, b);
	ahead_move(a, nm > 0 ? EV_MATCH : EV_DROP);
	return nm;
}

/* The items of b the step did not run (nm of them did), run as a batch
 * of their own: a->run then holds their sequences, idx mapped to b's
 * items. 0, or -1 with res->error. */
static int
run_rest(struct wk_ahead *a, const struct medha_msg_batch *b, int64_t nm,
    struct medha_msg_result *res)
{
	struct wk_batch *r = a->run;
	struct medha_msg_batch rest;
	int64_t i, k;
	int j;

	if ((size_t)(b->n_items - nm) > a->r_cap &&
	    grow_rest(a, (size_t)(b->n_items - nm)) != 0) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		return -1;
	}
	rest = *b;
	rest.items = a->r_items;
	rest.n_frees = 0;
	for (i = 0, k = 0; i < b->n_items; i++) {
		for (j = 0; j < a->n && a->item[j] != i; j++)
			;
		if (j == a->n) {
			a->r_items[k] = b->items[i];
			a->r_map[k++] = (int32_t)i;
		}
	}
	rest.n_items = k;
	wk_batch_run(r, &rest, res);
	free(res->tokens);
	res->tokens = NULL;
	res->n_tokens = 0;
	if (res->error[0] != '\0')
		return -1;
	for (j = 0; j < r->n; j++)
		r->idx[j] = a->r_map[r->idx[j]];
	return 0;
}

void
wk_ahead_use(struct wk_ahead *a, const struct medha_msg_batch *b, int64_t nm,
    struct medha_msg_result *res)
{
	struct wk_batch *r = a->run;
	struct medha_backend *be = r->be;
	const int vocab = be->info.shape.vocab;
	int32_t *tok = NULL;
	int64_t i;
	int j, n;

	res->seq = b->seq;
	for (j = 0; j < a->n; j++) {
		struct wseq *q = wk_seqs_find(r->seqs, a->handle[j]);
		if (a->item[j] < 0 && q != NULL &&
		    medha_backend_seq_len(be, q->seq) > a->len[j])
			medha_backend_seq_fill(be, q->seq, a->len[j]);
	}
	if (wk_batch_grow(r, 1, (size_t)b->n_items) != 0 ||
	    (tok = medha_calloc((size_t)b->n_items, sizeof(*tok))) == NULL) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		goto drop;
	}
	r->n = 0;
	if (nm < b->n_items && run_rest(a, b, nm, res) != 0)
		goto drop;
	/* the items run ahead, after them: as wk_batch_run leaves its
	   sequences, for wk_ahead_plan */
	for (j = 0; j < a->n; j++) {
		struct wseq *q;
		if (a->item[j] < 0)
			continue;
		q = wk_seqs_find(r->seqs, a->handle[j]);
		n = r->n++;
		r->bs[n] = a->bs[j];
		r->smp[n] = q->smp;
		r->out[n] = medha_sample(q->smp, a->lg + (size_t)j * vocab);
		r->idx[n] = a->item[j];
	}
	/* the tokens in item order */
	for (i = 0; i < b->n_items; i++)
		tok[i] = -1;
	for (n = 0; n < r->n; n++)
		if (r->smp[n] != NULL && r->out[n] >= 0)
			tok[r->idx[n]] = r->out[n];
	if ((res->tokens = medha_calloc((size_t)b->n_items,
	         sizeof(*res->tokens))) == NULL) {
		snprintf(res->error, sizeof(res->error), "out of memory");
		goto drop;
	}
	for (i = 0; i < b->n_items; i++)
		if (tok[i] >= 0)
			res->tokens[res->n_tokens++] = (struct medha_msg_token){
			    b->items[i].handle, tok[i],
			    wk_seqs_token_lp(r->seqs, b->items[i].handle)};
	free(tok);
	a->hits++;
	ahead_move(a, EV_USED);
	wk_ahead_plan(a, b);
	return;
drop:
	/* as a failed batch leaves them: the step's sequences cut back */
	free(tok);
	ahead_move(a, EV_DROP);
	r->n = 0;
}

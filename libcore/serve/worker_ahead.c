/*
 * worker_ahead.c: lookahead (on unless --no-lookahead). A worker alone
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
#include "serve/worker_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keep the step after the batch just run (b, its w->ncur sequences run):
 * every item sampled here, or no step. */
void
wk_ahead_plan(struct worker *w, const struct medha_msg_batch *b)
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

/* Room for n items not run ahead (wk_ahead_use). */
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
void
wk_ahead_drop(struct worker *w)
{
	for (int i = 0; w->ran && i < w->na; i++) {
		struct wseq *q = wk_find_seq(w, w->a_handle[i]);
		if (q != NULL &&
		    medha_backend_seq_len(w->be, q->seq) > w->a_len[i])
			medha_backend_seq_fill(w->be, q->seq, w->a_len[i]);
	}
	w->na = 0;
	w->ran = 0;
}

/* Run the planned step, logits kept (nothing sampled yet). */
void
wk_ahead_run(struct worker *w)
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
		wk_ahead_drop(w);
	}
}

/*
 * Which items of b the step run ahead answers: w->a_item[j], the item
 * of sequence j of the step (the same handle, position and token, one
 * id, sampled with the parameters it had), or -1. Returns how many.
 * The batch may leave sequences of the step out (a request that ended)
 * and hold items it did not run (a new prompt's chunk): those run as
 * usual (wk_ahead_use).
 */
int64_t
wk_ahead_match(struct worker *w, const struct medha_msg_batch *b)
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
		    wk_find_seq(w, it->handle) == NULL)
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
 * Answer b, nm of whose items the step run ahead answers (wk_ahead_match),
 * into *res: the sequences of the step that b leaves out cut back, the
 * items it did not run run as a batch of their own, the others sampled
 * from the kept logits; then the next step planned from all of them. A
 * sequence's results do not depend on its batch, so the tokens are the
 * same as b's run whole.
 */
void
wk_ahead_use(struct worker *w, const struct medha_msg_batch *b, int64_t nm,
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
		struct wseq *q = wk_find_seq(w, w->a_handle[j]);
		if (w->a_item[j] < 0 && q != NULL &&
		    medha_backend_seq_len(w->be, q->seq) > w->a_len[j])
			medha_backend_seq_fill(w->be, q->seq, w->a_len[j]);
	}
	if (wk_grow_scratch(w, 1, (size_t)b->n_items) != 0 ||
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
		wk_run_batch(w, &rest, res);
		free(res->tokens);
		res->tokens = NULL;
		res->n_tokens = 0;
		if (res->error[0] != '\0')
			goto drop;
		for (j = 0; j < w->ncur; j++)
			w->idx[j] = w->r_map[w->idx[j]];
	}
	/* the items run ahead, after them: as run_batch leaves its
	   sequences, for wk_ahead_plan */
	for (j = 0; j < w->na; j++) {
		struct wseq *q;
		if (w->a_item[j] < 0)
			continue;
		q = wk_find_seq(w, w->a_handle[j]);
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
			    (struct medha_msg_token){b->items[i].handle, tok[i],
			        wk_token_lp(w, b->items[i].handle)};
	free(tok);
	w->hits++;
	wk_ahead_plan(w, b);
	return;
drop:
	/* as a failed batch leaves them: the step's sequences cut back */
	free(tok);
	wk_ahead_drop(w);
	w->ncur = 0;
}


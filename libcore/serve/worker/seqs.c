/*
 * seqs.c: the sequences a live worker holds (seqs.h). Every sequence
 * lives in the backend under the scheduler's request handle until a
 * BATCH or IDLE lists it in frees (or the scheduler goes away): an entry
 * of a fixed table, found through an open-addressing index of handles.
 */
#include "serve/worker/seqs.h"

#include <stdlib.h>
#include <string.h>

int
wk_seqs_init(struct wk_seqs *s, struct medha_backend *be, char *why,
    size_t whylen)
{
	memset(s, 0, sizeof(*s));
	s->be = be;
	s->max = be->info.max_seqs;
	/* prefix caching keeps sequences of requests that ended, each
	   with a block at least: room for them too */
	if (be->info.caps & MEDHA_BACKEND_FORK)
		s->max += be->info.n_blocks < (1 << 24)
		    ? (int)be->info.n_blocks
		    : 1 << 24;
	for (s->index_cap = 16; s->index_cap < 2 * s->max;)
		s->index_cap *= 2;
	s->seqs = medha_calloc(s->max, sizeof(*s->seqs));
	s->spare = medha_calloc(s->max, sizeof(*s->spare));
	s->index = medha_calloc(s->index_cap, sizeof(*s->index));
	if (s->seqs == NULL || s->spare == NULL || s->index == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	for (int i = 0; i < s->index_cap; i++)
		s->index[i] = -1;
	for (s->nspare = 0; s->nspare < s->max; s->nspare++)
		s->spare[s->nspare] = s->max - 1 - s->nspare;
	return 0;
}

void
wk_seqs_free(struct wk_seqs *s)
{
	free(s->seqs);
	free(s->spare);
	free(s->index);
}

/* The slot of handle h in s->index: its own, or the empty one to take. */
static int
slot_of(const struct wk_seqs *s, uint64_t h)
{
	int mask = s->index_cap - 1;
	int i = (int)((h * 0x9e3779b97f4a7c15ULL) >> 32) & mask;

	while (s->index[i] >= 0 && s->seqs[s->index[i]].handle != h)
		i = (i + 1) & mask;
	return i;
}

struct wseq *
wk_seqs_find(struct wk_seqs *s, uint64_t h)
{
	int e = s->index[slot_of(s, h)];

	return e >= 0 ? &s->seqs[e] : NULL;
}

struct wseq *
wk_seqs_new(struct wk_seqs *s, uint64_t h)
{
	int e;

	if (s->nspare == 0)
		return NULL;
	e = s->spare[--s->nspare];
	s->seqs[e].handle = h;
	s->seqs[e].seq = -1; /* none in the backend yet */
	s->index[slot_of(s, h)] = e;
	return &s->seqs[e];
}

void
wk_seqs_drop(struct wk_seqs *s, struct wseq *q)
{
	int mask = s->index_cap - 1, i = slot_of(s, q->handle), j, k;

	/* delete by shifting back the entries that probed past slot i */
	s->index[i] = -1;
	for (j = (i + 1) & mask; s->index[j] >= 0; j = (j + 1) & mask) {
		k = slot_of(s, s->seqs[s->index[j]].handle);
		if (k == j)
			continue; /* already where it hashes: stays */
		s->index[i] = s->index[j];
		s->index[j] = -1;
		i = j;
	}
	medha_backend_seq_free(s->be, q->seq);
	medha_sampler_free(q->smp);
	memset(q, 0, sizeof(*q));
	s->spare[s->nspare++] = (int)(q - s->seqs);
}

void
wk_seqs_clear(struct wk_seqs *s)
{
	for (int i = 0; s->seqs != NULL && i < s->max; i++)
		if (s->seqs[i].handle != 0)
			wk_seqs_drop(s, &s->seqs[i]);
}

/* This worker's piece of a sequence, which starts at its base, keeps
 * what falls before the positions to keep, or goes if none does. */
void
wk_seqs_apply_frees(struct wk_seqs *s, const struct medha_msg_batch *b)
{
	for (int64_t i = 0; i < b->n_frees; i++) {
		struct wseq *q = wk_seqs_find(s, b->frees[i]);
		int64_t keep = b->keeps != NULL ? b->keeps[i] : 0, len;
		if (q == NULL)
			continue;
		keep -= q->base;
		len = medha_backend_seq_len(s->be, q->seq);
		if (keep > 0 && len >= 0) {
			if (keep < len &&
			    medha_backend_seq_trim(s->be, q->seq, keep) != 0)
				wk_seqs_drop(s, q); /* never kept half */
			continue;
		}
		wk_seqs_drop(s, q);
	}
}

struct medha_token_lp *
wk_seqs_token_lp(struct wk_seqs *s, uint64_t handle)
{
	struct wseq *q = wk_seqs_find(s, handle);
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

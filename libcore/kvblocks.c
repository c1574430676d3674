/*
 * kvblocks.c: block tables over a pool of KV blocks (see kvblocks.h).
 */
#include "kvblocks.h"

#include <stdlib.h>

#define MAX_SEQS_DEFAULT 256

static int64_t
blocks_of(int64_t n)
{
	return (n + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK;
}

int
medha_kvb_init(struct medha_kvblocks *t, int64_t n_blocks, int max_seqs,
    medha_kvb_copy_fn copy, void *arg)
{
	*t = (struct medha_kvblocks){0};
	if (n_blocks < 1 || n_blocks > INT32_MAX || max_seqs < 0)
		return MEDHA_EINVAL;
	t->n_blocks = n_blocks;
	t->max_seqs = max_seqs > 0 ? max_seqs : MAX_SEQS_DEFAULT;
	t->copy = copy;
	t->arg = arg;
	t->free = medha_calloc((size_t)n_blocks, sizeof(*t->free));
	t->ref = medha_calloc((size_t)n_blocks, sizeof(*t->ref));
	t->seq = medha_calloc((size_t)t->max_seqs, sizeof(*t->seq));
	if (t->free == NULL || t->ref == NULL || t->seq == NULL) {
		medha_kvb_free(t);
		return MEDHA_ENOMEM;
	}
	/* the stack pops from the top: put block 0 there */
	for (int64_t i = 0; i < n_blocks; i++)
		t->free[i] = (int32_t)(n_blocks - 1 - i);
	t->nfree = n_blocks;
	return 0;
}

void
medha_kvb_free(struct medha_kvblocks *t)
{
	if (t->seq != NULL)
		for (int i = 0; i < t->max_seqs; i++)
			free(t->seq[i].block);
	free(t->seq);
	free(t->free);
	free(t->ref);
	*t = (struct medha_kvblocks){0};
}

int
medha_kvb_seq_alloc(struct medha_kvblocks *t, int *seq)
{
	for (int i = 0; i < t->max_seqs; i++)
		if (!t->seq[i].used) {
			t->seq[i].used = 1;
			t->seq[i].len = 0;
			t->seq[i].nblock = 0;
			*seq = i;
			return 0;
		}
	return MEDHA_ENOSPACE;
}

int
medha_kvb_seq_take(struct medha_kvblocks *t, int seq)
{
	if (seq < 0 || seq >= t->max_seqs)
		return MEDHA_EINVAL;
	if (t->seq[seq].used)
		return MEDHA_ENOSPACE;
	t->seq[seq].used = 1;
	t->seq[seq].len = 0;
	t->seq[seq].nblock = 0;
	return 0;
}

/* Let go of the blocks of s past the first keep: to the pool, unless
 * another table holds them too. */
static void
give_back(struct medha_kvblocks *t, struct medha_kv_seq *s, int64_t keep)
{
	while (s->nblock > keep) {
		int32_t b = s->block[--s->nblock];
		if (b >= 0 && --t->ref[b] == 0)
			t->free[t->nfree++] = b;
	}
}

void
medha_kvb_seq_free(struct medha_kvblocks *t, int seq)
{
	struct medha_kv_seq *s;

	if ((s = medha_kvb_seq(t, seq)) == NULL)
		return;
	give_back(t, s, 0);
	s->used = 0;
	s->len = 0;
}

int64_t
medha_kvb_len(const struct medha_kvblocks *t, int seq)
{
	const struct medha_kv_seq *s = medha_kvb_seq(t, seq);

	return s != NULL ? s->len : MEDHA_EINVAL;
}

/* Room for need blocks in s's table. 0 or MEDHA_ENOMEM. */
static int
table_room(struct medha_kv_seq *s, int64_t need)
{
	int32_t *nb;
	int64_t cap;

	if (need <= s->cap)
		return 0;
	cap = s->cap ? s->cap : 4;
	while (cap < need)
		cap *= 2;
	if ((nb = medha_reallocarray(s->block, (size_t)cap, sizeof(*nb))) ==
	    NULL)
		return MEDHA_ENOMEM;
	s->block = nb;
	s->cap = cap;
	return 0;
}

int
medha_kvb_reserve(struct medha_kvblocks *t, int seq, int64_t n)
{
	struct medha_kv_seq *s;
	int64_t need;
	int rc;

	if ((s = medha_kvb_seq(t, seq)) == NULL || n < 0)
		return MEDHA_EINVAL;
	need = blocks_of(n);
	if ((rc = table_room(s, need)) != 0)
		return rc;
	while (s->nblock < need) {
		int32_t b;
		if (t->nfree == 0)
			return MEDHA_ENOSPACE;
		b = t->free[--t->nfree];
		t->ref[b] = 1;
		s->block[s->nblock++] = b;
	}
	return 0;
}

int
medha_kvb_set_len(struct medha_kvblocks *t, int seq, int64_t n)
{
	struct medha_kv_seq *s;

	if ((s = medha_kvb_seq(t, seq)) == NULL || n < 0 ||
	    n > s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	s->len = n;
	give_back(t, s, blocks_of(n));
	return 0;
}

/* A fresh block from the pool with b's K/V, in *d. 0, MEDHA_ENOSPACE or
 * the copy's error (the block back on the stack). */
static int
dup_block(struct medha_kvblocks *t, int32_t b, int32_t *d)
{
	int rc;

	if (t->nfree == 0)
		return MEDHA_ENOSPACE;
	*d = t->free[--t->nfree];
	if (t->copy != NULL && (rc = t->copy(t->arg, *d, b)) != 0) {
		t->nfree++;
		return rc;
	}
	t->ref[*d] = 1;
	return 0;
}

int
medha_kvb_fork(struct medha_kvblocks *t, int dst, int src, int64_t from,
    int64_t to)
{
	struct medha_kv_seq *d, *s;
	int64_t full = to / MEDHA_KV_BLOCK;
	int32_t part = -1;
	int rc;

	if ((d = medha_kvb_seq(t, dst)) == NULL ||
	    (s = medha_kvb_seq(t, src)) == NULL || dst == src || from < 0 ||
	    from > to || to > s->len || from % MEDHA_KV_BLOCK != 0 ||
	    d->len != from || d->nblock != from / MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	if ((rc = table_room(d, blocks_of(to))) != 0)
		return rc;
	/* the partial block first: its failure leaves dst as it was */
	if (to % MEDHA_KV_BLOCK != 0 && s->block[full] >= 0 &&
	    (rc = dup_block(t, s->block[full], &part)) != 0)
		return rc;
	/* (a block src dropped, medha_kvb_drop, is dropped in dst too) */
	for (int64_t i = from / MEDHA_KV_BLOCK; i < full; i++) {
		d->block[d->nblock++] = s->block[i];
		if (s->block[i] >= 0)
			t->ref[s->block[i]]++;
	}
	if (to % MEDHA_KV_BLOCK != 0)
		d->block[d->nblock++] = part;
	d->len = to;
	return 0;
}

int
medha_kvb_own(struct medha_kvblocks *t, int seq, int64_t pos, int64_t n)
{
	struct medha_kv_seq *s;
	int rc;

	if ((s = medha_kvb_seq(t, seq)) == NULL || pos < 0 || n < 0 ||
	    pos + n > s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	for (int64_t i = pos / MEDHA_KV_BLOCK; n > 0 && i < blocks_of(pos + n);
	     i++) {
		int32_t b = s->block[i], d;
		if (b < 0)
			return MEDHA_EINVAL; /* dropped: nothing to write to */
		if (t->ref[b] == 1)
			continue;
		if ((rc = dup_block(t, b, &d)) != 0)
			return rc;
		t->ref[b]--;
		s->block[i] = d;
	}
	return 0;
}

int64_t
medha_kvb_write_need(const struct medha_kvblocks *t, int seq, int64_t pos,
    int64_t end)
{
	const struct medha_kv_seq *s = medha_kvb_seq(t, seq);
	int64_t need, i;

	if (s == NULL || end <= pos)
		return 0;
	need = blocks_of(end) > s->nblock ? blocks_of(end) - s->nblock : 0;
	for (i = pos / MEDHA_KV_BLOCK; i < s->nblock && i < blocks_of(end); i++)
		need += s->block[i] >= 0 && t->ref[s->block[i]] > 1;
	return need;
}

void
medha_kvb_drop(struct medha_kvblocks *t, int seq, int64_t nb)
{
	struct medha_kv_seq *s = medha_kvb_seq(t, seq);

	if (s == NULL)
		return;
	if (nb > s->nblock)
		nb = s->nblock;
	for (int64_t i = 0; i < nb; i++) {
		int32_t b = s->block[i];
		if (b >= 0 && --t->ref[b] == 0)
			t->free[t->nfree++] = b;
		s->block[i] = -1;
	}
}

int64_t
medha_kvb_held(const struct medha_kvblocks *t, int seq)
{
	const struct medha_kv_seq *s = medha_kvb_seq(t, seq);
	int64_t n = 0;

	for (int64_t i = 0; s != NULL && i < s->nblock; i++)
		n += s->block[i] >= 0;
	return n;
}

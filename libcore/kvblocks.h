/*
 * kvblocks.h: the block tables of a paged KV cache, whatever holds the
 * blocks. A pool of n_blocks block numbers is kept on a free stack
 * (a fresh pool hands out 0, 1, 2, ... so a test's tables are easy to
 * read); a sequence owns a table whose i-th entry holds its positions
 * MEDHA_KV_BLOCK * i .. MEDHA_KV_BLOCK * (i + 1) - 1; a block counts
 * the tables holding it (forks share full blocks) and goes back to the
 * pool when the last lets go. The K/V themselves are the caller's (the
 * cpu cache's host memory, the cuda backend's device memory): where a
 * block must be duplicated (a fork's partial block, a write to a shared
 * block) the table calls the caller's copy function.
 *
 *	struct medha_kvblocks t;
 *	int s;
 *	if (medha_kvb_init(&t, 4096, 256, copy, arg) != 0 ||
 *	    medha_kvb_seq_alloc(&t, &s) != 0)
 *		...;
 *	medha_kvb_reserve(&t, s, 100);	(then the K/V are written)
 *	medha_kvb_set_len(&t, s, 100);
 *	medha_kvb_seq_free(&t, s);
 *	medha_kvb_free(&t);
 */
#ifndef MEDHA_KVBLOCKS_H
#define MEDHA_KVBLOCKS_H

#include "medha.h"
#include "batch.h" /* MEDHA_KV_BLOCK */

#include <stdint.h>

/* One sequence's block table. */
struct medha_kv_seq {
	int used;       /* allocated to a caller */
	int64_t len;    /* positions 0 .. len-1 hold valid K/V */
	int32_t *block; /* (nblock) pool block of each 16 positions, or -1
	                   where medha_kvb_drop let it go */
	int64_t nblock; /* blocks held */
	int64_t cap;    /* room in block[] */
};

/* Copy block src's K/V (every layer and head) into block dst: 0 or
 * MEDHA_E*. */
typedef int (*medha_kvb_copy_fn)(void *arg, int32_t dst, int32_t src);

struct medha_kvblocks {
	int64_t n_blocks;
	int max_seqs;
	int32_t *free; /* (n_blocks) stack of free block numbers */
	int32_t *ref;  /* (n_blocks) tables holding each block */
	int64_t nfree; /* blocks on the stack */
	struct medha_kv_seq *seq; /* (max_seqs) */
	medha_kvb_copy_fn copy;
	void *arg;
};

/* A pool of n_blocks (1 .. INT32_MAX) and max_seqs tables (0: 256).
 * Returns 0, MEDHA_EINVAL or MEDHA_ENOMEM (t then holds nothing). */
int medha_kvb_init(struct medha_kvblocks *t, int64_t n_blocks, int max_seqs,
    medha_kvb_copy_fn copy, void *arg);
/* Every table and the pool freed; t may be zeroed or half made. */
void medha_kvb_free(struct medha_kvblocks *t);

/* seq's table, or NULL for a handle out of range or not allocated. */
static inline struct medha_kv_seq *
medha_kvb_seq(const struct medha_kvblocks *t, int seq)
{
	if (seq < 0 || seq >= t->max_seqs || !t->seq[seq].used)
		return NULL;
	return &t->seq[seq];
}

/* An empty table: *seq its handle. 0 or MEDHA_ENOSPACE (all in use). */
int medha_kvb_seq_alloc(struct medha_kvblocks *t, int *seq);
/* Handle seq (0 <= seq < max_seqs), empty, if no caller has it: 0 or
 * MEDHA_ENOSPACE (in use) / MEDHA_EINVAL (out of range). */
int medha_kvb_seq_take(struct medha_kvblocks *t, int seq);
/* Its blocks let go and the handle freed (a bad handle: nothing). */
void medha_kvb_seq_free(struct medha_kvblocks *t, int seq);
/* Valid positions of seq, or MEDHA_EINVAL for a bad handle. */
int64_t medha_kvb_len(const struct medha_kvblocks *t, int seq);
/*
 * Blocks for positions 0 .. n-1 (nothing given back if seq holds more).
 * 0, MEDHA_EINVAL, or MEDHA_ENOSPACE / MEDHA_ENOMEM (the blocks taken so
 * far stay with seq).
 */
int medha_kvb_reserve(struct medha_kvblocks *t, int seq, int64_t n);
/* seq holds n positions (at most its blocks'); its blocks past them
 * let go. 0 or MEDHA_EINVAL. */
int medha_kvb_set_len(struct medha_kvblocks *t, int seq, int64_t n);
/*
 * Fork: dst, holding exactly from positions (from a multiple of
 * MEDHA_KV_BLOCK), takes src's positions [from, to) (to at most src's
 * length): the full blocks shared, the block to ends in, if partial,
 * copied. 0, MEDHA_EINVAL, MEDHA_ENOSPACE, MEDHA_ENOMEM or the copy's
 * error (dst unchanged).
 */
int medha_kvb_fork(struct medha_kvblocks *t, int dst, int src, int64_t from,
    int64_t to);
/*
 * Before a write of positions [pos, pos + n) (reserved): each of their
 * blocks that another table shares is copied to a block of seq's own
 * (copy on write). 0, MEDHA_EINVAL, MEDHA_ENOSPACE or the copy's error.
 */
int medha_kvb_own(struct medha_kvblocks *t, int seq, int64_t pos, int64_t n);
/* Blocks a write of positions [pos, end) of seq would take from the
 * pool: new ones past its table, and copies of shared ones. */
int64_t medha_kvb_write_need(const struct medha_kvblocks *t, int seq,
    int64_t pos, int64_t end);
/*
 * Let go of seq's first nb blocks (a sliding window no longer sees
 * them): each entry becomes -1, a hole that keeps the table's positions
 * where they are; its length is unchanged. A fork copies holes as holes;
 * a write into one is MEDHA_EINVAL (medha_kvb_own). A bad handle:
 * nothing.
 */
void medha_kvb_drop(struct medha_kvblocks *t, int seq, int64_t nb);
/* Blocks seq's table holds (holes not counted); 0 for a bad handle. */
int64_t medha_kvb_held(const struct medha_kvblocks *t, int seq);

#endif

/*
 * kvplace.h: KV memory of one replica, counted in blocks per KVP group,
 * and where each request's KV lives.
 *
 * A request's KV (prompt plus every output token) is cut into pieces of at
 * most `group_tokens` tokens; piece i lives on one KVP group. At admission
 * the request reserves the blocks of every piece, each on the group with
 * the least pending prefill work that has room (ties: the most free
 * blocks, then round-robin from the group after the last one chosen), so
 * memory is never over-committed. A caller that reserves less than a
 * request may need (an estimate of its output) grows the lease as the
 * request decodes (medha_kvplace_grow), and gives it all back when
 * the request is preempted. The request enters piece i's group when its
 * KV passes i * group_tokens.
 *
 * Pending work is what the caller says a piece costs its group (the
 * scheduler: predicted prefill time, in ns; linear layers and attention
 * within the piece, and the attention of the prompt's later tokens
 * against it). It drains from the group evenly over the prompt tokens
 * from the piece's start to the prompt's end, as they are handed out,
 * and what is left goes when the request is released. A request with no
 * prompt token left to prefill when it is admitted (a prompt of 0, or
 * all of it cached) has none pending.
 *
 *	struct medha_kvplace pl;
 *	medha_kvplace_init(&pl, kvp, 16, blocks_per_group, 0);
 *	if (medha_kvplace_admit(&pl, &lease, prompt + max_out, prompt) == 0)
 *		...;
 *	medha_kvplace_release(&pl, &lease);
 */
#ifndef MEDHA_KVPLACE_H
#define MEDHA_KVPLACE_H

#include "medha.h"

#include <stddef.h>
#include <stdint.h>

#define MEDHA_KVP_MAX 64 /* most KVP groups a replica may have */

/* Where one request's KV lives: piece i on group groups[i]. */
struct medha_kvlease {
	int n_groups;                      /* pieces reserved; 0 = none yet */
	int groups[MEDHA_KVP_MAX];         /* group of each piece, in order */
	int64_t res_blocks[MEDHA_KVP_MAX]; /* blocks reserved for each piece */
	int64_t prompt;                    /* prompt tokens */
	int64_t start; /* of them cached when it was admitted (their
	                  work is not pending: it drains from here) */
	int64_t done;                      /* of them handed to batches */
	int64_t work[MEDHA_KVP_MAX];       /* pending work each piece brought */
	int64_t shared[MEDHA_KVP_MAX];     /* the index's blocks it uses in
	                                      each piece (prefix.h) */
	int64_t need; /* the tokens its reservation is for (window layers:
	                 what each piece's cost is taken at) */
};

struct medha_kvplace {
	int kvp;                     /* groups */
	int block_size;              /* tokens per block */
	int64_t cap_blocks;          /* blocks per group */
	int64_t group_tokens;        /* tokens of one request per group */
	int64_t res[MEDHA_KVP_MAX];  /* blocks reserved per group */
	int64_t pend[MEDHA_KVP_MAX]; /* pending prefill work per group */
	int64_t cached[MEDHA_KVP_MAX]; /* blocks the prefix index holds */
	int64_t held[MEDHA_KVP_MAX];   /* of them, those a request uses:
	                                  the rest count as free (evictable) */
	int next;                    /* round-robin: first group to try */
	/* sliding-window layers (medha_kvplace_window; 0: none) */
	int layers, win_layers;
	int64_t win_blocks; /* blocks a window layer holds at most */
	int mem_pieces;     /* group_tokens is what memory allows */
};

/*
 * kvp groups of cap_blocks blocks of block_size tokens; a request keeps at
 * most max_tokens tokens on one group (0: no limit but the group's memory;
 * else a multiple of block_size). Returns 0 or MEDHA_EINVAL.
 */
int medha_kvplace_init(struct medha_kvplace *pl, int kvp, int block_size,
    int64_t cap_blocks, int64_t max_tokens);

/*
 * Sliding-window layers. A block stays the KV of block_size positions
 * over all of the model's `layers` (the unit of cap_blocks); where
 * win_layers of them keep only the last `win_tokens` positions (their
 * window and a chunk), a piece of a request that spans b blocks of
 * positions, s of them the prefix index's, costs
 *
 *	ceil(((layers - win_layers) (b - s) + win_layers min(b - s, w))
 *	     / layers)
 *
 * blocks, w = ceil(win_tokens / block_size) + 1 (the window straddles
 * a block boundary): the most its window layers hold at any time of
 * the piece, so the reservation is never exceeded. The index's blocks
 * keep every layer (a match needs no more). Where init had no
 * max_tokens, group_tokens grows to the most positions whose cost a
 * group holds. Call after init, before any admission. Returns 0 or
 * MEDHA_EINVAL.
 */
int medha_kvplace_window(struct medha_kvplace *pl, int layers, int win_layers,
    int64_t win_tokens);

/*
 * The next block of l's piece i goes to the prefix index (which keeps
 * every layer of it): l uses it as shared from now on. Without window
 * layers one reserved block becomes the index's; with them the piece's
 * cost is taken again with one more shared block, and the index's block
 * costs a whole one, so up to a block more is held: 0, or
 * MEDHA_ENOSPACE (no room for it). With apply 0 it only answers,
 * before the index counts the block in cached[] (prefix.c); with 1 it
 * moves the blocks, after, and returns 0.
 */
int medha_kvplace_to_index(struct medha_kvplace *pl, struct medha_kvlease *l,
    int i, int apply);

/*
 * 1 if `need` tokens of KV could be placed on an empty replica; else 0
 * with the reason in why.
 */
int medha_kvplace_fits_ever(const struct medha_kvplace *pl, int64_t need,
    char *why, size_t whylen);

/*
 * Reserve the pieces of `need` tokens of KV, of which the first `prompt`
 * are still to be prefilled; piece i brings work[i] of pending work
 * (medha_kvplace_admit_work; 0 <= work[i] < 2^53, in one unit for all
 * requests) or, with medha_kvplace_admit, its prompt tokens. work is
 * read, not kept. Returns 0 with *l filled, or MEDHA_ENOSPACE (nothing
 * reserved) if some piece finds no group with room.
 */
int medha_kvplace_admit(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t need, int64_t prompt);
int medha_kvplace_admit_work(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t need, int64_t prompt, const int64_t *work);
/*
 * The same for a request whose first `start` prompt tokens are cached:
 * piece i takes shared[i] blocks from the prefix index (it reserves that
 * many fewer) and, if pin[i] >= 0, must go on group pin[i], where those
 * blocks are. Room on a group is its blocks less those reserved and
 * those the index holds for requests (held). shared and pin may be NULL
 * (none).
 */
int medha_kvplace_admit_pin(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t need, int64_t prompt, int64_t start, const int64_t *work,
    const int64_t *shared, const int *pin);
/* Blocks of group g beyond its capacity once evictable cached blocks are
 * counted as used: those to evict (0 if none). */
int64_t medha_kvplace_over(const struct medha_kvplace *pl, int g);
/*
 * Growth on demand (a reservation by estimate): make l cover kv tokens,
 * taking the blocks it lacks in each piece from that piece's group and a
 * group for each new piece (least pending work, then most free blocks,
 * as at admission; a new piece brings no pending work). Returns 0, or
 * MEDHA_ENOSPACE with *group the group that has no room (-1: no group
 * l does not use yet has room for a new piece); what was taken stays.
 */
int medha_kvplace_grow(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t kv, int *group);
/* Give back everything l holds; l is left empty. */
void medha_kvplace_release(struct medha_kvplace *pl, struct medha_kvlease *l);
/* Prompt tokens [from, to) were handed to a batch (from: all before
 * them were): less pending work. */
void medha_kvplace_prefilled(struct medha_kvplace *pl, struct medha_kvlease *l,
    int64_t from, int64_t to);

/* Groups l has entered once it holds kv tokens (at least 1 if admitted). */
int medha_kvplace_entered(const struct medha_kvplace *pl,
    const struct medha_kvlease *l, int64_t kv);
/* Tokens of [from, to) that fall in piece i. */
int64_t medha_kvplace_in_piece(const struct medha_kvplace *pl, int i,
    int64_t from, int64_t to);

/*
 * Check l against holding kv tokens: every piece within its reservation,
 * and none of the kv tokens past its last piece (where nothing is
 * reserved).
 * Adds l's reservations to sum[] (per group). Returns 0 or MEDHA_EINVAL.
 */
int medha_kvplace_check_lease(const struct medha_kvplace *pl,
    const struct medha_kvlease *l, int64_t kv, int64_t *sum, char *why,
    size_t whylen);
/* Check the groups' totals against sum[] from the leases. */
int medha_kvplace_check(const struct medha_kvplace *pl, const int64_t *sum,
    char *why, size_t whylen);

#endif

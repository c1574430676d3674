/*
 * kvcache.h: the paged KV cache of the CPU backend. Keys and values are
 * kept in blocks of MEDHA_KV_BLOCK (16) token positions; a sequence owns
 * a block table (its i-th block holds positions 16*i .. 16*i+15), and
 * blocks come from one pool sized at creation, so many sequences of any
 * length share the memory without copying or fragmentation. Storage is
 * float32 or float16 (selectable; f16 halves the memory and the bytes
 * attention reads, f32 makes chunked prefill bit-exact).
 *
 * Which blocks a sequence holds (sharing, forks, copy on write) is
 * kvblocks.h's; this file keeps the K/V themselves.
 *
 * Sliding-window layers. A cache told each layer's window (config
 * `windows`, where some layer it holds has one) keeps a table per layer
 * instead of one for all: its pool is then n_blocks x layers blocks of
 * one layer each (the same memory), and medha_kv_window_drop() lets a
 * window layer give back the blocks no query from a position on can
 * see, to the same pool the global layers draw from. A Gemma 3 sequence
 * of N positions then holds global x N + window x (W + chunk) layer
 * positions, not layers x N. A dropped block is a hole in its layer's
 * table (kvblocks.h); a fork takes holes as holes and is refused where
 * the forked sequence would need one (the positions its next query's
 * window sees), so what is computed is never other than without drops.
 * Where no layer has a window the layout below is unchanged.
 *
 * Block b, layer l, K (0) or V (1), kv head h is the run of 16 *
 * head_dim elements at element offset
 *	(((l * 2 + kv) * n_kv_heads + h) * n_blocks + b) * 16 * head_dim
 * (with a table per layer, block b of layer l's table is at
 *	((kv * n_kv_heads + h) * n_blocks * layers + b) * 16 * head_dim)
 * so attention reads one head's keys for 16 positions in one stream,
 * and the runs of consecutive blocks (a fresh cache hands them out in
 * order) one after another: a long sequence's keys of one layer and head
 * are one stream, not 2 KB islands a page or more apart (decode
 * attention at 8K keys ran at 6 GB/s that way). A backend that runs only
 * some layers (SPP) touches only their planes. In
 * a K run, element c of position i (0..15) is at c * 16 + i (dimension
 * major: a query's scores against the 16 keys are 16-wide multiply-adds
 * over the dimensions, with no transposing); in a V run it is at
 * i * head_dim + c (position major: each value row is added whole).
 *
 *	struct medha_kvcache *kv;
 *	struct medha_kv_config c = { .n_layers = 30, .n_kv_heads = 3,
 *	    .head_dim = 64, .n_blocks = 4096, .type = MEDHA_KV_F16 };
 *	int seq;
 *	if (medha_kvcache_init(&kv, &c) != 0 || medha_kv_seq_alloc(kv, &seq))
 *		...;
 *	medha_kv_reserve(kv, seq, 100);	(then the forward pass writes)
 *	medha_kv_seq_free(kv, seq);
 *	medha_kvcache_free(kv);
 */
#ifndef MEDHA_KVCACHE_H
#define MEDHA_KVCACHE_H

#include "medha.h"
#include "batch.h" /* MEDHA_KV_BLOCK, enum medha_kv_type */
#include "kvblocks.h"

#include <stddef.h>
#include <stdint.h>

struct medha_kv_config {
	int n_layers;     /* layers of the model */
	int n_kv_heads;   /* key/value heads */
	int head_dim;     /* elements per head */
	int64_t n_blocks; /* blocks in the pool */
	int type;         /* MEDHA_KV_F32 or MEDHA_KV_F16 */
	int max_seqs;     /* sequences at once; 0 = 256 */
	/* sliding windows: a table per layer where one of layers
	   [layer_lo, layer_hi) has a window (see above) */
	const int *windows; /* (n_layers) layer l's window W, its query at
	                       p seeing keys p - W < k <= p (0: none), or
	                       NULL: none; read at init, not kept */
	int layer_lo, layer_hi; /* the layers used (0, 0: all) */
};

struct medha_kvcache {
	struct medha_kv_config c;
	size_t elsize;    /* bytes per element: 4 or 2 */
	size_t block_els; /* elements per block, all layers, K and V */
	void *data; /* (n_layers, 2, n_kv_heads, n_blocks, 16 * head_dim),
	               or (2, n_kv_heads, n_slots, 16 * head_dim) with nl */
	struct medha_kvblocks bt; /* which blocks each sequence holds: table
	                             seq, or seq * nl + layer - lo with nl */
	int nl;          /* layers with a table each (0: one for all) */
	int lo;          /* the first of them */
	int64_t n_slots; /* blocks of the pool (nl: of one layer each) */
	int *win;        /* (nl) their windows (0: none) */
};

/*
 * Create a cache. On success *kv is the caller's, for
 * medha_kvcache_free(). Returns 0, MEDHA_EINVAL (a size out of range or
 * an unknown type) or MEDHA_ENOMEM; *kv is NULL on failure.
 */
int
medha_kvcache_init(struct medha_kvcache **kv, const struct medha_kv_config *c);
/* Free the cache and every sequence in it; kv may be NULL. */
void medha_kvcache_free(struct medha_kvcache *kv);
/* Bytes a cache of this configuration holds for K/V (0 on overflow). */
size_t medha_kvcache_bytes(const struct medha_kv_config *c);

/*
 * Allocate an empty sequence: *seq is its handle (0 <= *seq < max_seqs).
 * Returns 0 or MEDHA_ENOSPACE (every handle in use).
 */
int medha_kv_seq_alloc(struct medha_kvcache *kv, int *seq);
/* Give a sequence's blocks back to the pool and free the handle. */
void medha_kv_seq_free(struct medha_kvcache *kv, int seq);
/*
 * Fork: make dst hold src's positions [from, to) as its own [from, to)
 * (dst must hold exactly from positions, from a multiple of
 * MEDHA_KV_BLOCK, and to at most src's length): the full blocks are
 * shared (each counts its tables, and goes back to the pool when the
 * last lets go), the block to ends in, if partial, is copied, so that
 * dst's next positions are written to a block of its own. A block that
 * is still shared when a sequence writes to it (medha_kv_write) is
 * copied first: one sequence never writes another's KV. Returns 0, MEDHA_EINVAL, MEDHA_ENOSPACE or MEDHA_ENOMEM (dst
 * unchanged).
 */
int medha_kv_seq_fork(struct medha_kvcache *kv, int dst, int src, int64_t from,
    int64_t to);
/* Valid positions of a sequence, or MEDHA_EINVAL for a bad handle. */
int64_t medha_kv_seq_len(const struct medha_kvcache *kv, int seq);
/*
 * Make room for positions 0 .. n-1 (taking blocks from the pool as
 * needed; nothing is given back if n is less than held). Returns 0,
 * MEDHA_EINVAL (bad handle, negative n) or MEDHA_ENOSPACE / MEDHA_ENOMEM
 * (the blocks taken so far stay with the sequence).
 */
int medha_kv_reserve(struct medha_kvcache *kv, int seq, int64_t n);
/*
 * Set the valid length (after the forward pass wrote positions up to it,
 * or to forget a tail). n must not exceed the reserved room. Blocks past
 * the new length go back to the pool. Returns 0 or MEDHA_EINVAL.
 */
int medha_kv_set_len(struct medha_kvcache *kv, int seq, int64_t n);
/*
 * For profilers: make seq n positions long (reserving blocks, or
 * forgetting the tail), the positions it did not hold before set to
 * zero K/V, written to memory. Returns 0, MEDHA_EINVAL or the errors of
 * medha_kv_reserve().
 */
int medha_kv_fill(struct medha_kvcache *kv, int seq, int64_t n);
/* Blocks left in the pool (with a table per layer: whole blocks' worth
 * of layer blocks, rounded down). */
int64_t medha_kv_free_blocks(const struct medha_kvcache *kv);
/*
 * Sliding windows: give back the blocks of seq's window layers that no
 * query at position qpos or later sees (those wholly before qpos - W +
 * 1). A cache without a table per layer, or a bad handle: nothing.
 */
void medha_kv_window_drop(struct medha_kvcache *kv, int seq, int64_t qpos);
/* Blocks of one layer that seq holds, over the layers the cache keeps
 * (a table for all: its blocks x n_layers); 0 for a bad handle. */
int64_t medha_kv_held(const struct medha_kvcache *kv, int seq);

/*
 * Store n positions' K and V for one layer, starting at position pos
 * (which must be reserved): k and v are (n, n_kv_heads, head_dim) f32,
 * rounded to f16 (nearest even) for an f16 cache; a block the sequence
 * shares is copied first. Returns 0, MEDHA_EINVAL (bad handle or
 * positions outside the reserved room) or MEDHA_ENOSPACE (no block for
 * the copy).
 */
int medha_kv_write(struct medha_kvcache *kv, int seq, int layer, int64_t pos,
    int n, const float *k, const float *v);

/*
 * Where the 16-position run of (layer, K or V, head) for block slot i of
 * a sequence starts (elements of the cache's type, 16 * head_dim of
 * them, laid out as above). No checks: for the attention loops, which
 * know the bounds.
 */
static inline const struct medha_kv_seq *
medha_kv_table(const struct medha_kvcache *kv, int seq, int layer)
{
	return &kv->bt.seq[kv->nl ? seq * kv->nl + layer - kv->lo : seq];
}

static inline const void *
medha_kv_run(const struct medha_kvcache *kv, int seq, int layer, int which,
    int head, int64_t i)
{
	size_t b = (size_t)medha_kv_table(kv, seq, layer)->block[i];
	size_t pl = kv->nl ? 0 : (size_t)layer;
	size_t off = ((pl * 2 + which) * kv->c.n_kv_heads + head) *
	        (size_t)kv->n_slots +
	    b;

	return (const char *)kv->data +
	    off * MEDHA_KV_BLOCK * kv->c.head_dim * kv->elsize;
}

/*
 * Read position pos of (layer, K or V, head) as f32 into dst (head_dim
 * floats); for tests and debugging. Returns 0 or MEDHA_EINVAL.
 */
int medha_kv_read(const struct medha_kvcache *kv, int seq, int layer, int which,
    int head, int64_t pos, float *dst);

#endif

/*
 * prefix.h: the index of cached prompt prefixes (prefix caching). Pure
 * bookkeeping, like kvplace.h: it says which KV blocks hold which
 * tokens; the scheduler decides when to use, keep and drop them.
 *
 * The index is a tree of KV blocks: a node is one block of up to
 * block_size tokens, its parent the block before it, so a path from the
 * root spells a token sequence and its blocks hold that sequence's KV.
 * Full blocks are found by a hash of (the parent's hash, their tokens),
 * as vLLM's chained block hashes (medha_prefix_chain, which the router's
 * cache-aware placement computes too, serve/router/cache.c); below the last full block that matches, the
 * children of that block are compared token by token (at most
 * MEDHA_PREFIX_SCAN of them), so a match ends at any token: the block
 * it ends in is copied by the request that forks there (copy on write),
 * the blocks before it shared. A node lives on one KVP group and a
 * request's piece (kvplace.h) takes its cached blocks from one group,
 * so a match stops where a piece's blocks would change group.
 *
 * Tokens are 64-bit keys: a token id, or a token of a named shared
 * segment of a trace (medha-trace(5): "prefix").
 *
 * Tenants: a sequence carries a salt (a request's cache_salt, req.h; 0
 * none), and only sequences of the same salt share blocks, as vLLM's
 * cache_salt: the salt enters the hash chain at the root
 * (medha_prefix_root), so that a tenant's blocks hash apart from every
 * other's, and every node keeps the salt of its sequence, compared on
 * each lookup, so that not even a collision of 64-bit hashes, nor the
 * token-by-token compare of the blocks under the root, joins two
 * tenants' sequences.
 *
 * A node's reference count is the requests whose path runs through it;
 * a node held by none and without children may be evicted, least
 * recently used first, one heap per group. The index counts its blocks
 * in the kvplace it was given (cached[g], and held[g] for those with
 * references), so that admission treats unreferenced cached blocks as
 * free and evicts them when it needs their room.
 */
#ifndef MEDHA_PREFIX_H
#define MEDHA_PREFIX_H

#include "sched/kvplace.h"

#include <stdint.h>

#define MEDHA_PREFIX_SCAN 64 /* children compared token by token */

struct medha_pnode {
	uint64_t hash;     /* full blocks: medha_prefix_chain of the
	                      parent's and its tokens; 0 partial */
	uint64_t salt;     /* its sequence's salt (0: none), its
	                      parent's below the root */
	uint64_t stamp;    /* last referenced (the index's clock) */
	int parent;        /* node index; 0 is the root; -1 on the free list */
	int child;         /* first child, -1 none */
	int prev, next;    /* siblings, -1 none */
	int hnext;         /* next in its hash bucket, -1 none */
	int hpos;          /* place in its group's heap, -1 not there */
	int ntok;          /* tokens held, 1..block_size (0: the root) */
	int group;         /* KVP group of its block */
	int64_t ref;       /* requests whose path runs through it */
	int64_t depth;     /* its block's index in the sequence */
	uint64_t born;     /* the caller's: matched only if not x->fresh */
	int64_t ext;       /* the caller's: requests extending it now */
	uint64_t owner;    /* the caller's: whose sequence holds the block */
	int64_t own_first; /* the caller's: the depth of owner's first node */
	int64_t win_hi;    /* the caller's: the last position owner's
	                      window layers may have been queried at once it
	                      ended (sched_prefix.c) */
};

struct medha_prefix_heap {
	int *h; /* node indices, a min-heap by stamp */
	int n, cap;
};

struct medha_prefix_stats {
	int64_t queries;    /* admissions that asked the index */
	int64_t hits;       /* of them that matched a token or more */
	int64_t hit_tokens; /* prompt tokens matched */
	int64_t evictions;  /* blocks evicted */
	int64_t inserted;   /* blocks taken into the index */
};

struct medha_prefix {
	int block_size;
	struct medha_kvplace *kv;  /* counts cached[] and held[] */
	struct medha_pnode *n;     /* (cap) nodes; 0 is the root */
	uint64_t *keys;            /* (cap x block_size) each node's tokens */
	int cap, free_head, nodes; /* nodes in use, the root included */
	int *bucket;               /* (nbucket) hash chains' heads */
	int nbucket;
	uint64_t clock;
	uint64_t fresh; /* nodes born so (not 0) are not matched: their KV
	                   is not computed yet */
	struct medha_prefix_heap lru[MEDHA_KVP_MAX];
	struct medha_prefix_stats st;
	/* if set, told of each node as it is dropped (evicted or cleared),
	   before it is unlinked */
	void (*dropped)(void *arg, const struct medha_pnode *p);
	void *arg;
};

/*
 * The chained hash of a full block of ntok keys after a block whose hash
 * is parent (medha_prefix_root(salt) for a sequence's first block):
 * never 0. Two sequences of blocks get the same hashes for their first
 * k blocks when they have the same salt and their first k blocks hold
 * the same keys (bar collisions).
 */
uint64_t medha_prefix_chain(uint64_t parent, const uint64_t *keys, int ntok);
/* The parent hash of a sequence's first block under salt: for salt 0
 * (none) MEDHA_PREFIX_ROOT, the hashes of an index without tenants; a
 * bijection, so that two salts never share a root. */
#define MEDHA_PREFIX_ROOT 0x6d656468612d7278ULL
uint64_t medha_prefix_root(uint64_t salt);

/* Returns 0, MEDHA_ENOMEM. kv must outlive x. */
int medha_prefix_init(struct medha_prefix *x, struct medha_kvplace *kv);
void medha_prefix_free(struct medha_prefix *x);

/*
 * The longest cached prefix of keys[0..n) under salt (a sequence of
 * another salt never matches): returns its tokens, with *full the
 * deepest node of the blocks wholly matched (0: none) and *part the
 * node the match ends inside (-1: it ends on a block boundary), whose
 * first (match mod block_size) tokens are the match's last ones.
 * group_tokens: a request's tokens per KVP group (kvplace).
 */
int64_t medha_prefix_match(const struct medha_prefix *x, uint64_t salt,
    const uint64_t *keys, int64_t n, int64_t group_tokens, int *full,
    int *part);

/* The full child of parent (0: the root of salt) holding
 * keys[0..block_size) (fresh or not), or -1. */
int medha_prefix_find(const struct medha_prefix *x, uint64_t salt,
    int parent, const uint64_t *keys);

/* One reference more (less) on node i and every node above it. */
void medha_prefix_ref(struct medha_prefix *x, int i);
void medha_prefix_unref(struct medha_prefix *x, int i);
/* One reference more (less) on node i alone (its parent is held). */
void medha_prefix_ref1(struct medha_prefix *x, int i);
void medha_prefix_unref1(struct medha_prefix *x, int i);

/*
 * The child of parent (0: the root of salt; below it salt must be
 * parent's) holding keys[0..ntok) (ntok = block_size: a full block;
 * less: a tail) on group, or the one that already holds them (on any
 * group). Returns 1 (made: the caller's block is the index's now), 0
 * (there already, *node set), or MEDHA_ENOMEM. A node made has no
 * reference.
 */
int medha_prefix_insert(struct medha_prefix *x, uint64_t salt, int parent,
    const uint64_t *keys, int ntok, int group, int *node);

/* Evict up to nb unreferenced blocks of group g, least recently used
 * first. Returns the blocks evicted. */
int64_t medha_prefix_evict(struct medha_prefix *x, int g, int64_t nb);
/* Drop every node (none may be referenced): the workers lost their KV. */
void medha_prefix_clear(struct medha_prefix *x);

/* Checks the counts against the tree: 0 or MEDHA_EINVAL with why. */
int medha_prefix_check(const struct medha_prefix *x, char *why, size_t whylen);

#endif

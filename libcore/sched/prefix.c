/*
 * prefix.c: the index of cached prompt prefixes (prefix.h): a tree of
 * KV blocks, a hash of full blocks, and per group a heap of the blocks
 * that may be evicted.
 */
#include "sched/prefix.h"

#include <stdlib.h>
#include <string.h>

uint64_t
medha_prefix_chain(uint64_t parent, const uint64_t *keys, int ntok)
{
	uint64_t h = medha_mix64(parent + 0x9e3779b97f4a7c15ULL);

	for (int i = 0; i < ntok; i++)
		h = medha_mix64(h ^ keys[i]);
	return h ? h : 1; /* never 0: 0 marks a partial block */
}

uint64_t
medha_prefix_root(uint64_t salt)
{
	/* medha_mix64 is a bijection, and this constant its preimage of
	   MEDHA_PREFIX_ROOT: salt 0 keeps the hashes of an index without
	   tenants, and two salts never share a root */
	return medha_mix64(salt ^ 0xa32475a8c4d377f5ULL);
}

/* A full child's hash under node parent (0: the root of salt): chained
 * from the parent's. */
static uint64_t
block_hash(const struct medha_prefix *x, uint64_t salt, int parent,
    const uint64_t *keys, int ntok)
{
	return medha_prefix_chain(parent == 0 ? medha_prefix_root(salt)
	                                      : x->n[parent].hash,
	    keys, ntok);
}

static uint64_t *
node_keys(const struct medha_prefix *x, int i)
{
	return &x->keys[(size_t)i * x->block_size];
}

/* ---- the heaps of evictable nodes ---- */

static void
heap_set(struct medha_prefix *x, struct medha_prefix_heap *hp, int k, int v)
{
	hp->h[k] = v;
	x->n[v].hpos = k;
}

static int
heap_less(const struct medha_prefix *x, int a, int b)
{
	return x->n[a].stamp < x->n[b].stamp;
}

static void
heap_fix(struct medha_prefix *x, struct medha_prefix_heap *hp, int k)
{
	int v = hp->h[k];

	while (k > 0 && heap_less(x, v, hp->h[(k - 1) / 2])) {
		heap_set(x, hp, k, hp->h[(k - 1) / 2]);
		k = (k - 1) / 2;
	}
	for (;;) {
		int l = 2 * k + 1, m = l;
		if (l >= hp->n)
			break;
		if (l + 1 < hp->n && heap_less(x, hp->h[l + 1], hp->h[l]))
			m = l + 1;
		if (!heap_less(x, hp->h[m], v))
			break;
		heap_set(x, hp, k, hp->h[m]);
		k = m;
	}
	heap_set(x, hp, k, v);
}

/* Node i may be evicted now: into its group's heap. The heap has room
 * (it holds at most the group's nodes, grown with them). */
static void
heap_push(struct medha_prefix *x, int i)
{
	struct medha_prefix_heap *hp = &x->lru[x->n[i].group];

	hp->h[hp->n++] = i;
	heap_fix(x, hp, hp->n - 1);
}

static void
heap_remove(struct medha_prefix *x, int i)
{
	struct medha_prefix_heap *hp = &x->lru[x->n[i].group];
	int k = x->n[i].hpos, last;

	x->n[i].hpos = -1;
	last = hp->h[--hp->n];
	if (k < hp->n) {
		heap_set(x, hp, k, last);
		heap_fix(x, hp, k);
	}
}

/* Whether node i (not the root) may be evicted: no reference, no child. */
static void
update_evictable(struct medha_prefix *x, int i)
{
	struct medha_pnode *p = &x->n[i];
	int may = i != 0 && p->ref == 0 && p->child < 0;

	if (may && p->hpos < 0)
		heap_push(x, i);
	else if (!may && p->hpos >= 0)
		heap_remove(x, i);
}

/* ---- nodes ---- */

int
medha_prefix_init(struct medha_prefix *x, struct medha_kvplace *kv)
{
	memset(x, 0, sizeof(*x));
	x->block_size = kv->block_size;
	x->kv = kv;
	x->cap = 1;
	x->nodes = 1;
	x->free_head = -1;
	x->nbucket = 1024;
	x->n = medha_calloc(1, sizeof(*x->n));
	x->keys = medha_calloc(x->block_size, sizeof(*x->keys));
	x->bucket = medha_reallocarray(NULL, x->nbucket, sizeof(*x->bucket));
	if (x->n == NULL || x->keys == NULL || x->bucket == NULL) {
		medha_prefix_free(x);
		return MEDHA_ENOMEM;
	}
	memset(x->bucket, 0xff, x->nbucket * sizeof(*x->bucket));
	x->n[0] = (struct medha_pnode){.parent = 0,
	    .child = -1,
	    .prev = -1,
	    .next = -1,
	    .hnext = -1,
	    .hpos = -1,
	    .group = 0};
	return 0;
}

void
medha_prefix_free(struct medha_prefix *x)
{
	free(x->n);
	free(x->keys);
	free(x->bucket);
	for (int g = 0; g < MEDHA_KVP_MAX; g++)
		free(x->lru[g].h);
	memset(x, 0, sizeof(*x));
}

/* Room for one node more (and in every heap for it). 0 or ENOMEM. */
static int
grow(struct medha_prefix *x)
{
	int ncap = 2 * x->cap;
	void *p;

	if (x->free_head >= 0)
		return 0;
	if ((p = medha_reallocarray(x->n, ncap, sizeof(*x->n))) == NULL)
		return MEDHA_ENOMEM;
	x->n = p;
	if ((p = medha_reallocarray(x->keys, (size_t)ncap * x->block_size,
	         sizeof(*x->keys))) == NULL)
		return MEDHA_ENOMEM;
	x->keys = p;
	for (int g = 0; g < x->kv->kvp; g++) {
		if ((p = medha_reallocarray(x->lru[g].h, ncap,
		         sizeof(*x->lru[g].h))) == NULL)
			return MEDHA_ENOMEM;
		x->lru[g].h = p;
		x->lru[g].cap = ncap;
	}
	for (int i = ncap - 1; i >= x->cap; i--) {
		x->n[i].parent = -1;
		x->n[i].next = x->free_head;
		x->free_head = i;
	}
	x->cap = ncap;
	if (x->nbucket < ncap) { /* rehash: chains of one or two */
		int nb = x->nbucket;
		while (nb < ncap)
			nb *= 2;
		if ((p = medha_reallocarray(x->bucket, nb,
		         sizeof(*x->bucket))) == NULL)
			return MEDHA_ENOMEM;
		x->bucket = p;
		x->nbucket = nb;
		memset(x->bucket, 0xff, nb * sizeof(*x->bucket));
		for (int i = 1; i < x->cap; i++) {
			struct medha_pnode *q = &x->n[i];
			if (q->parent < 0 || q->hash == 0)
				continue;
			q->hnext = x->bucket[q->hash & (nb - 1)];
			x->bucket[q->hash & (nb - 1)] = i;
		}
	}
	return 0;
}

/* The full child of parent (0: salt's root) holding keys (block_size of
 * them), or -1. */
static int
find_full(const struct medha_prefix *x, uint64_t salt, int parent,
    const uint64_t *keys)
{
	uint64_t h = block_hash(x, salt, parent, keys, x->block_size);

	for (int i = x->bucket[h & (x->nbucket - 1)]; i >= 0; i = x->n[i].hnext)
		if (x->n[i].hash == h && x->n[i].parent == parent &&
		    x->n[i].salt == salt &&
		    memcmp(node_keys(x, i), keys,
		        x->block_size * sizeof(*keys)) == 0)
			return i;
	return -1;
}

int
medha_prefix_find(const struct medha_prefix *x, uint64_t salt, int parent,
    const uint64_t *keys)
{
	return find_full(x, salt, parent, keys);
}

static int64_t
common(const uint64_t *a, const uint64_t *b, int64_t n)
{
	int64_t k = 0;

	while (k < n && a[k] == b[k])
		k++;
	return k;
}

int64_t
medha_prefix_match(const struct medha_prefix *x, uint64_t salt,
    const uint64_t *keys, int64_t n, int64_t group_tokens, int *full,
    int *part)
{
	int bs = x->block_size, cur = 0, pg = -1, best = -1;
	int64_t m = 0, bestk = 0, seen = 0;

	*full = 0;
	*part = -1;
	while (m + bs <= n) {
		int c = find_full(x, salt, cur, keys + m);
		/* a piece's cached blocks all come from one group */
		if (m % group_tokens == 0)
			pg = -1;
		if (c < 0 || (pg >= 0 && x->n[c].group != pg) ||
		    (x->fresh != 0 && x->n[c].born == x->fresh))
			break;
		pg = x->n[c].group;
		cur = c;
		m += bs;
	}
	*full = cur;
	if (m % group_tokens == 0)
		pg = -1;
	/* the block the match ends in: the children compared token by token */
	for (int c = x->n[cur].child; c >= 0 && seen < MEDHA_PREFIX_SCAN;
	     c = x->n[c].next, seen++) {
		int64_t lim = n - m < x->n[c].ntok ? n - m : x->n[c].ntok;
		int64_t k;
		if ((pg >= 0 && x->n[c].group != pg) || x->n[c].salt != salt ||
		    (x->fresh != 0 && x->n[c].born == x->fresh))
			continue;
		k = common(node_keys(x, c), keys + m, lim);
		if (k > bestk) {
			bestk = k;
			best = c;
		}
	}
	if (bestk == bs) /* a full block the hash did not give: the group */
		bestk = bs - 1;
	if (best >= 0 && bestk > 0) {
		*part = best;
		m += bestk;
	}
	return m;
}

void
medha_prefix_ref1(struct medha_prefix *x, int i)
{
	struct medha_pnode *p = &x->n[i];

	if (i == 0)
		return;
	if (p->ref++ == 0)
		x->kv->held[p->group]++;
	p->stamp = ++x->clock;
	update_evictable(x, i);
}

void
medha_prefix_unref1(struct medha_prefix *x, int i)
{
	struct medha_pnode *p = &x->n[i];

	if (i == 0)
		return;
	MEDHA_ASSERT(p->ref > 0);
	if (--p->ref == 0)
		x->kv->held[p->group]--;
	p->stamp = ++x->clock;
	update_evictable(x, i);
}

void
medha_prefix_ref(struct medha_prefix *x, int i)
{
	for (; i != 0; i = x->n[i].parent)
		medha_prefix_ref1(x, i);
}

void
medha_prefix_unref(struct medha_prefix *x, int i)
{
	/* the deepest node goes first, so it is the least recently used
	   of the path: leaves leave before the blocks they need */
	for (; i != 0; i = x->n[i].parent)
		medha_prefix_unref1(x, i);
}

int
medha_prefix_insert(struct medha_prefix *x, uint64_t salt, int parent,
    const uint64_t *keys, int ntok, int group, int *node)
{
	int bs = x->block_size, i;
	struct medha_pnode *p;

	MEDHA_ASSERT(parent == 0 || x->n[parent].salt == salt);
	if (ntok == bs) {
		if ((i = find_full(x, salt, parent, keys)) >= 0) {
			*node = i;
			return 0;
		}
	} else {
		for (int c = x->n[parent].child, seen = 0;
		     c >= 0 && seen < MEDHA_PREFIX_SCAN;
		     c = x->n[c].next, seen++)
			if (x->n[c].ntok >= ntok && x->n[c].salt == salt &&
			    common(node_keys(x, c), keys, ntok) == ntok) {
				*node = c;
				return 0;
			}
	}
	if (grow(x) != 0)
		return MEDHA_ENOMEM;
	i = x->free_head;
	x->free_head = x->n[i].next;
	p = &x->n[i];
	*p = (struct medha_pnode){.parent = parent,
	    .salt = salt,
	    .child = -1,
	    .prev = -1,
	    .next = x->n[parent].child,
	    .hnext = -1,
	    .hpos = -1,
	    .ntok = ntok,
	    .group = group,
	    .depth = parent == 0 ? 0 : x->n[parent].depth + 1,
	    .stamp = ++x->clock};
	memcpy(node_keys(x, i), keys, ntok * sizeof(*keys));
	if (p->next >= 0)
		x->n[p->next].prev = i;
	x->n[parent].child = i;
	if (ntok == bs) {
		p->hash = block_hash(x, salt, parent, keys, ntok);
		p->hnext = x->bucket[p->hash & (x->nbucket - 1)];
		x->bucket[p->hash & (x->nbucket - 1)] = i;
	}
	x->nodes++;
	x->kv->cached[group]++;
	x->st.inserted++;
	update_evictable(x, parent);
	update_evictable(x, i);
	*node = i;
	return 1;
}

/* Unlink leaf i from the tree and the hash; its block is free. */
static void
drop(struct medha_prefix *x, int i)
{
	struct medha_pnode *p = &x->n[i];
	int parent = p->parent;

	if (x->dropped != NULL)
		x->dropped(x->arg, p);
	if (p->hpos >= 0)
		heap_remove(x, i);
	if (p->prev >= 0)
		x->n[p->prev].next = p->next;
	else
		x->n[parent].child = p->next;
	if (p->next >= 0)
		x->n[p->next].prev = p->prev;
	if (p->hash != 0) {
		int *at = &x->bucket[p->hash & (x->nbucket - 1)];
		while (*at != i)
			at = &x->n[*at].hnext;
		*at = p->hnext;
	}
	x->kv->cached[p->group]--;
	x->nodes--;
	p->parent = -1;
	p->next = x->free_head;
	x->free_head = i;
	update_evictable(x, parent);
}

int64_t
medha_prefix_evict(struct medha_prefix *x, int g, int64_t nb)
{
	struct medha_prefix_heap *hp = &x->lru[g];
	int64_t k = 0;

	while (k < nb && hp->n > 0) {
		drop(x, hp->h[0]);
		k++;
	}
	x->st.evictions += k;
	return k;
}

void
medha_prefix_clear(struct medha_prefix *x)
{
	/* leaves first, from the heaps, until none is left; a leaf's parent
	   may live on another group (a prompt's previous KVP piece) and
	   joins its heap only once the leaf is gone, so the groups are
	   gone through again until every heap is empty */
	for (int any = 1; any;) {
		any = 0;
		for (int g = 0; g < x->kv->kvp; g++)
			while (x->lru[g].n > 0) {
				drop(x, x->lru[g].h[0]);
				any = 1;
			}
	}
	MEDHA_ASSERT(x->nodes == 1);
}

int
medha_prefix_check(const struct medha_prefix *x, char *why, size_t whylen)
{
	int64_t cached[MEDHA_KVP_MAX] = {0}, held[MEDHA_KVP_MAX] = {0};

	for (int i = 1; i < x->cap; i++) {
		const struct medha_pnode *p = &x->n[i];
		int64_t sum = 0;
		if (p->parent < 0)
			continue;
		cached[p->group]++;
		held[p->group] += p->ref > 0;
		for (int c = p->child; c >= 0; c = x->n[c].next)
			sum = x->n[c].ref > sum ? x->n[c].ref : sum;
		if (p->parent != 0 && p->salt != x->n[p->parent].salt)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "prefix node %d: another salt than its parent's",
			    i);
		if (p->ref < sum ||
		    (p->ref == 0 && p->child < 0) != (p->hpos >= 0))
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "prefix node %d: %lld references, a child has "
			    "%lld; %s the heap",
			    i, (long long)p->ref, (long long)sum,
			    p->hpos >= 0 ? "in" : "not in");
	}
	for (int g = 0; g < x->kv->kvp; g++)
		if (cached[g] != x->kv->cached[g] || held[g] != x->kv->held[g])
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "group %d: %lld cached blocks (%lld held), counted "
			    "%lld (%lld)",
			    g, (long long)cached[g], (long long)held[g],
			    (long long)x->kv->cached[g],
			    (long long)x->kv->held[g]);
	return 0;
}

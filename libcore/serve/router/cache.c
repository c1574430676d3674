/*
 * cache.c: the router's record of what prompts it sent where, for
 * cache-aware placement (router.h). A request's prompt ids are cut into
 * blocks of the replicas' KV block size and each block gets the hash
 * the replicas' prefix caches key their full blocks by
 * (medha_prefix_chain, sched/prefix.h: chained over the blocks before
 * it), so that two prompts share their first k hashes exactly when they
 * share their first k blocks, as in a replica's cache (and have the
 * same cache_salt: the chain starts at their tenant's root, so a
 * placement follows the replicas' rule of tenants). A text prompt
 * the router did not tokenize (no -m) is cut into 64-byte blocks of its
 * bytes instead, about as many tokens, chained the same way: an
 * approximation of its token blocks. Each replica keeps the hashes of
 * the prompts placed on it in two generations of a hash map, the
 * recent one and the one before: a hash placed again or matched moves
 * to the recent one, and when the recent one holds half the replica's
 * KV blocks (what its cache could hold at most), the older is dropped
 * and the recent takes its place. So the record is bounded by the
 * replica's memory, and forgets least recently placed prefixes first,
 * approximately, as the replica's LRU eviction does. It is only a guess
 * at what the replica holds (its cache may have evicted a block since,
 * or a request failed before its prefill): a wrong guess costs a
 * prefill, never a wrong token.
 */
#include "serve/router/impl.h"

#include <stdlib.h>
#include <string.h>

#define TEXT_BLOCK 64 /* bytes of a text prompt a block */
#define GEN_MIN 256   /* hashes a generation holds at least */
/* blocks hashed at most: a longer prefix is placed as this long (the
 * hashes are the router's loop's work, 16K blocks about a millisecond) */
#define KEYS_MAX 16384

int64_t
rt_cache_keys(const struct medha_reqspec *rs, int64_t bs, uint64_t **keys)
{
	int64_t n, bl;
	/* chained from the request's tenant's root, as in the replicas:
	   a prefix placed for one salt is no reason to place another
	   salt's request there */
	uint64_t h = medha_prefix_root(rs->cache_salt), *k, *blk;

	*keys = NULL;
	if (rs->prompt_ids != NULL && bs > 0) {
		bl = bs;
		n = rs->prompt_tokens / bl;
	} else if (rs->prompt != NULL && rs->prompt_ids == NULL) {
		bl = TEXT_BLOCK;
		n = (int64_t)strlen(rs->prompt) / bl;
	} else
		return 0; /* a length alone: nothing to match */
	if (n > KEYS_MAX)
		n = KEYS_MAX;
	if (n == 0 || (k = medha_reallocarray(NULL, n, sizeof(*k))) == NULL)
		return 0;
	if ((blk = medha_reallocarray(NULL, bl, sizeof(*blk))) == NULL) {
		free(k);
		return 0;
	}
	for (int64_t i = 0; i < n; i++) {
		for (int64_t j = 0; j < bl; j++) /* the keys sched_prefix.c
		                                    makes of ids */
			blk[j] = rs->prompt_ids != NULL
			    ? (uint32_t)rs->prompt_ids[i * bl + j]
			    : (unsigned char)rs->prompt[i * bl + j];
		k[i] = h = medha_prefix_chain(h, blk, (int)bl);
	}
	free(blk);
	*keys = k;
	return n;
}

int64_t
rt_cache_match(const struct rcache *c, const uint64_t *keys, int64_t n)
{
	int64_t i = 0;

	while (i < n && (medha_map_get(&c->gen[0], keys[i]) != NULL ||
	                    medha_map_get(&c->gen[1], keys[i]) != NULL))
		i++;
	return i;
}

void
rt_cache_add(struct rcache *c, const uint64_t *keys, int64_t n,
    int64_t kv_blocks)
{
	int64_t cap = kv_blocks / 2 > GEN_MIN ? kv_blocks / 2 : GEN_MIN;

	for (int64_t i = 0; i < n; i++) {
		if ((int64_t)c->gen[0].n >= cap) {
			medha_map_free(&c->gen[1]);
			c->gen[1] = c->gen[0];
			memset(&c->gen[0], 0, sizeof(c->gen[0]));
		}
		medha_map_del(&c->gen[1], keys[i]);
		if (medha_map_put(&c->gen[0], keys[i], (void *)1) != 0)
			return; /* out of memory: a shorter record */
	}
}

void
rt_cache_clear(struct rcache *c)
{
	medha_map_free(&c->gen[0]);
	medha_map_free(&c->gen[1]);
	memset(c, 0, sizeof(*c));
}

/*
 * router_cache.c: the router's record of what prompts it sent where, for
 * cache-aware placement (router.h). A request's prompt is cut into
 * blocks (token ids: MEDHA_KV_BLOCK of them; a text prompt: 64 bytes,
 * about as many tokens) and each block gets a hash chained over the
 * blocks before it, as the replicas' prefix caches key their full
 * blocks: two prompts share their first k hashes exactly when they share
 * their first k blocks. Each replica keeps the hashes of the prompts
 * placed on it in two generations of a hash map, the recent one and the
 * one before: a hash placed again or matched moves to the recent one,
 * and when the recent one holds half the replica's KV blocks (what its
 * cache could hold at most), the older is dropped and the recent takes
 * its place. So the record is bounded by the replica's memory, and
 * forgets least recently placed prefixes first, approximately, as the
 * replica's LRU eviction does. It is only a guess at what the replica
 * holds (its cache may have evicted a block since, or a request failed
 * before its prefill): a wrong guess costs a prefill, never a wrong
 * token.
 */
#include "serve/router_impl.h"

#include <stdlib.h>
#include <string.h>

#define TEXT_BLOCK 64 /* bytes of a text prompt a block */
#define GEN_MIN 256   /* hashes a generation holds at least */

int64_t
rt_cache_keys(const struct medha_reqspec *rs, uint64_t **keys)
{
	int64_t n, bl;
	uint64_t h = 0x6d656468612d7274ULL, *k;

	*keys = NULL;
	if (rs->prompt_ids != NULL) {
		bl = MEDHA_KV_BLOCK;
		n = rs->prompt_tokens / bl;
	} else if (rs->prompt != NULL) {
		bl = TEXT_BLOCK;
		n = (int64_t)strlen(rs->prompt) / bl;
	} else
		return 0; /* a length alone: nothing to match */
	if (n == 0 || (k = medha_reallocarray(NULL, n, sizeof(*k))) == NULL)
		return 0;
	for (int64_t i = 0; i < n; i++) {
		for (int64_t j = i * bl; j < (i + 1) * bl; j++) {
			uint64_t t = rs->prompt_ids != NULL
			    ? (uint64_t)(uint32_t)rs->prompt_ids[j]
			    : (uint64_t)(unsigned char)rs->prompt[j];
			h = medha_mix64((h ^ t) + 0x9e3779b97f4a7c15ULL);
		}
		k[i] = h | 1; /* map keys are non-zero */
	}
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

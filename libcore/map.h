/*
 * map.h: a hash map from non-zero 64-bit keys (request handles, pipe
 * ids) to pointers, open addressing with linear probing; grows by
 * doubling and deletes by shifting back, so lookups stay short at any
 * size and no tombstones pile up.
 *
 *	struct medha_map m = {0};
 *	if (medha_map_put(&m, handle, req) != 0) ... (out of memory)
 *	req = medha_map_get(&m, handle);	(NULL if absent)
 *	medha_map_del(&m, handle);
 *	medha_map_free(&m);
 */
#ifndef MEDHA_MAP_H
#define MEDHA_MAP_H

#include <stddef.h>
#include <stdint.h>

struct medha_map {
	uint64_t *keys; /* (cap) 0: empty */
	void **vals;    /* (cap) */
	size_t cap;     /* 0 or a power of two */
	size_t n;       /* keys held */
};

/* Set key (!= 0) to val, adding it if absent: 0 or MEDHA_ENOMEM. */
int medha_map_put(struct medha_map *m, uint64_t key, void *val);
void *medha_map_get(const struct medha_map *m, uint64_t key);
/* Remove key; returns its value, or NULL if it was absent. */
void *medha_map_del(struct medha_map *m, uint64_t key);
void medha_map_free(struct medha_map *m);

/*
 * Walk: for (size_t i = 0; medha_map_next(&m, &i, &k, &v);) ... visits
 * every key once; the map must not change during the walk.
 */
int medha_map_next(const struct medha_map *m, size_t *i, uint64_t *key,
    void **val);

#endif

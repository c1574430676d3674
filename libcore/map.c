/* map.c: the hash map of map.h. */
#include "map.h"

#include "medha.h"

#include <stdlib.h>

static size_t
home(const struct medha_map *m, uint64_t key)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 32) & (m->cap - 1);
}

static size_t
find(const struct medha_map *m, uint64_t key)
{
	size_t i = home(m, key);

	while (m->keys[i] != 0 && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static int
grow(struct medha_map *m)
{
	size_t ncap = m->cap ? 2 * m->cap : 64, i;
	struct medha_map n = {0};

	n.keys = medha_calloc(ncap, sizeof(*n.keys));
	n.vals = medha_calloc(ncap, sizeof(*n.vals));
	if (n.keys == NULL || n.vals == NULL) {
		free(n.keys);
		free(n.vals);
		return MEDHA_ENOMEM;
	}
	n.cap = ncap;
	for (i = 0; i < m->cap; i++)
		if (m->keys[i] != 0) {
			size_t j = find(&n, m->keys[i]);
			n.keys[j] = m->keys[i];
			n.vals[j] = m->vals[i];
		}
	n.n = m->n;
	free(m->keys);
	free(m->vals);
	*m = n;
	return 0;
}

int
medha_map_put(struct medha_map *m, uint64_t key, void *val)
{
	size_t i;

	if (key == 0)
		return MEDHA_EINVAL;
	if (2 * (m->n + 1) > m->cap && grow(m) != 0)
		return MEDHA_ENOMEM;
	i = find(m, key);
	if (m->keys[i] == 0) {
		m->keys[i] = key;
		m->n++;
	}
	m->vals[i] = val;
	return 0;
}

void *
medha_map_get(const struct medha_map *m, uint64_t key)
{
	size_t i;

	if (m->cap == 0 || key == 0)
		return NULL;
	i = find(m, key);
	return m->keys[i] != 0 ? m->vals[i] : NULL;
}

void *
medha_map_del(struct medha_map *m, uint64_t key)
{
	size_t mask, i, j, k;
	void *val;

	if (m->cap == 0 || key == 0)
		return NULL;
	mask = m->cap - 1;
	i = find(m, key);
	if (m->keys[i] == 0)
		return NULL;
	val = m->vals[i];
	m->keys[i] = 0;
	m->n--;
	/* shift back the keys that probed past i */
	for (j = (i + 1) & mask; m->keys[j] != 0; j = (j + 1) & mask) {
		k = home(m, m->keys[j]);
		/* k in the cyclic range (i, j]: it may stay */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		m->keys[i] = m->keys[j];
		m->vals[i] = m->vals[j];
		m->keys[j] = 0;
		i = j;
	}
	return val;
}

int
medha_map_next(const struct medha_map *m, size_t *i, uint64_t *key,
    void **val)
{
	for (; *i < m->cap; (*i)++)
		if (m->keys[*i] != 0) {
			*key = m->keys[*i];
			*val = m->vals[*i];
			(*i)++;
			return 1;
		}
	return 0;
}

void
medha_map_free(struct medha_map *m)
{
	free(m->keys);
	free(m->vals);
	*m = (struct medha_map){0};
}

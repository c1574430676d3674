/*
 * map_test.c: the hash map (map.c) against a plain array under a long
 * random run of puts, gets and deletes, with keys chosen to collide
 * (multiples of a large power of two as well as random ones), so that
 * probing past and shifting back across the table's end are exercised.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "map.h"
#include "medha.h"

#define KEYS 5000

static uint64_t rs = 88172645463325252ULL;

static uint64_t
rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

static void
test_map_random(void **state)
{
	static uint64_t keys[KEYS];
	static int vals[KEYS], in[KEYS];
	struct medha_map m = {0};
	size_t n = 0;

	(void)state;
	for (int i = 0; i < KEYS; i++)
		keys[i] = i % 2 ? rnd() | 1 : (uint64_t)(i + 1) << 32;
	for (int step = 0; step < 200000; step++) {
		int k = (int)(rnd() % KEYS), op = (int)(rnd() % 3);
		if (op == 0) {
			assert_int_equal(medha_map_put(&m, keys[k], &vals[k]),
			    0);
			n += !in[k];
			in[k] = 1;
		} else if (op == 1) {
			assert_ptr_equal(medha_map_del(&m, keys[k]),
			    in[k] ? &vals[k] : NULL);
			n -= in[k];
			in[k] = 0;
		}
		assert_ptr_equal(medha_map_get(&m, keys[k]),
		    in[k] ? &vals[k] : NULL);
		assert_int_equal(m.n, n);
		if (step % 20000 == 0) /* every key present is found */
			for (int i = 0; i < KEYS; i++)
				assert_ptr_equal(medha_map_get(&m, keys[i]),
				    in[i] ? &vals[i] : NULL);
	}
	/* a walk visits each key once */
	{
		size_t it = 0, seen = 0;
		uint64_t key;
		void *val;
		while (medha_map_next(&m, &it, &key, &val)) {
			int k = (int)((int *)val - vals);
			assert_true(in[k] && keys[k] == key);
			seen++;
		}
		assert_int_equal(seen, n);
	}
	assert_int_equal(medha_map_put(&m, 0, vals), MEDHA_EINVAL);
	assert_null(medha_map_get(&m, 0));
	medha_map_free(&m);
	assert_null(medha_map_get(&m, keys[0]));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_map_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

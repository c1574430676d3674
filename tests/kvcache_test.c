/*
 * kvcache_test.c: the paged KV cache (libcore/kvcache.c): blocks taken
 * and given back by reserve, set_len and free; a full pool refuses with
 * MEDHA_ENOSPACE; rows written are read back (f16 here) from their
 * place in the dimension-major K and position-major V runs; writes past
 * the reserved room and stale handles are refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kvcache.h"
#include "testutil.h"

#define NL 2
#define NKV 2
#define HD 16

static void
test_kvcache(void **state)
{
	struct medha_kvcache *kv = kv_new(MEDHA_KV_F16, 10, NL, NKV, HD);
	float k[NKV * HD], v[NKV * HD], r[HD];
	int a, b, i;

	(void)state;
	assert_int_equal(medha_kv_seq_alloc(kv, &a), 0);
	assert_int_equal(medha_kv_seq_alloc(kv, &b), 0);
	assert_int_equal(medha_kv_reserve(kv, a, 100), 0); /* 7 blocks */
	assert_int_equal(medha_kv_free_blocks(kv), 3);
	assert_int_equal(medha_kv_reserve(kv, b, 64), MEDHA_ENOSPACE);
	assert_int_equal(medha_kv_free_blocks(kv), 0);
	assert_int_equal(medha_kv_set_len(kv, a, 17), 0); /* keeps 2 */
	assert_int_equal(medha_kv_free_blocks(kv), 5);
	assert_int_equal(medha_kv_reserve(kv, b, 64), 0);
	for (i = 0; i < NKV * HD; i++) {
		k[i] = (float)i + 0.25f;
		v[i] = -(float)i;
	}
	assert_int_equal(medha_kv_write(kv, a, 1, 16, 1, k, v), 0);
	assert_int_equal(medha_kv_read(kv, a, 1, 0, 1, 16, r), 0);
	assert_true(r[3] == k[HD + 3]);
	assert_int_equal(medha_kv_read(kv, a, 1, 1, 0, 16, r), 0);
	assert_true(r[2] == v[2]);
	assert_int_equal(medha_kv_write(kv, a, 1, 32, 1, k, v), MEDHA_EINVAL);
	medha_kv_seq_free(kv, a);
	medha_kv_seq_free(kv, b);
	assert_int_equal(medha_kv_free_blocks(kv), 10);
	assert_int_equal(medha_kv_seq_len(kv, a), MEDHA_EINVAL);
	medha_kvcache_free(kv);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kvcache),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * kvcache_test.c: the paged KV cache (libcore/kvcache.c): blocks taken
 * and given back by reserve, set_len and free; a full pool refuses with
 * MEDHA_ENOSPACE; rows written are read back (f16 here) from their
 * place in the dimension-major K and position-major V runs; writes past
 * the reserved room and stale handles are refused. Forks: a sequence
 * made of another's positions shares its full blocks and copies the
 * partial one; the shared blocks go back to the pool only when the last
 * table lets go; a write to a shared block copies it first, so neither
 * sequence sees the other's writes. Sliding windows: a cache told its
 * layers' windows keeps a table per layer; medha_kv_window_drop gives
 * back what a window no longer sees, to the pool the global layer then
 * grows from; a dropped position reads and writes as refused; a fork
 * is taken where the window layers hold what the fork's next query
 * sees and refused where they do not.
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

/* K of (layer 0, head 0) at pos as a single float, for comparisons */
static float
k0(struct medha_kvcache *kv, int seq, int64_t pos)
{
	float r[HD];

	assert_int_equal(medha_kv_read(kv, seq, 0, 0, 0, pos, r), 0);
	return r[0];
}

static void
put(struct medha_kvcache *kv, int seq, int64_t pos, float x)
{
	float k[NKV * HD], v[NKV * HD];

	for (int i = 0; i < NKV * HD; i++)
		k[i] = v[i] = x;
	for (int l = 0; l < NL; l++)
		assert_int_equal(medha_kv_write(kv, seq, l, pos, 1, k, v), 0);
}

static void
test_kvcache_fork(void **state)
{
	struct medha_kvcache *kv = kv_new(MEDHA_KV_F32, 10, NL, NKV, HD);
	int a, b, c;

	(void)state;
	assert_int_equal(medha_kv_seq_alloc(kv, &a), 0);
	assert_int_equal(medha_kv_seq_alloc(kv, &b), 0);
	assert_int_equal(medha_kv_seq_alloc(kv, &c), 0);
	assert_int_equal(medha_kv_reserve(kv, a, 40), 0); /* 3 blocks */
	for (int p = 0; p < 40; p++)
		put(kv, a, p, (float)p);
	assert_int_equal(medha_kv_set_len(kv, a, 40), 0);
	assert_int_equal(medha_kv_free_blocks(kv), 7);
	/* b: a's first 35 positions, 2 blocks shared and the third copied */
	assert_int_equal(medha_kv_seq_fork(kv, b, a, 0, 35), 0);
	assert_int_equal(medha_kv_seq_len(kv, b), 35);
	assert_int_equal(medha_kv_free_blocks(kv), 6);
	assert_int_equal(kv->bt.seq[b].block[0], kv->bt.seq[a].block[0]);
	assert_int_equal(kv->bt.seq[b].block[1], kv->bt.seq[a].block[1]);
	assert_true(kv->bt.seq[b].block[2] != kv->bt.seq[a].block[2]);
	for (int p = 0; p < 35; p++)
		assert_true(k0(kv, b, p) == (float)p);
	/* b writes on: its own block, a's positions untouched */
	assert_int_equal(medha_kv_reserve(kv, b, 36), 0);
	put(kv, b, 35, -1);
	assert_true(k0(kv, a, 35) == 35 && k0(kv, b, 35) == -1);
	/* b rewrites a shared position: the block is copied first */
	put(kv, b, 3, -3);
	assert_true(k0(kv, a, 3) == 3 && k0(kv, b, 3) == -3);
	assert_true(k0(kv, b, 4) == 4);
	assert_true(kv->bt.seq[b].block[0] != kv->bt.seq[a].block[0]);
	assert_int_equal(medha_kv_free_blocks(kv), 5);
	/* c forks on from two sources: a's block 0, then b's 16..20 */
	assert_int_equal(medha_kv_seq_fork(kv, c, a, 0, 16), 0);
	assert_int_equal(medha_kv_seq_fork(kv, c, b, 16, 20), 0);
	assert_true(k0(kv, c, 3) == 3 && k0(kv, c, 19) == 19);
	/* misuse is refused: dst not at from, from not on a block, past
	   src's length, itself */
	assert_int_equal(medha_kv_seq_fork(kv, c, a, 16, 30), MEDHA_EINVAL);
	assert_int_equal(medha_kv_seq_fork(kv, b, a, 8, 20), MEDHA_EINVAL);
	medha_kv_seq_free(kv, c);
	assert_int_equal(medha_kv_seq_alloc(kv, &c), 0);
	assert_int_equal(medha_kv_seq_fork(kv, c, a, 0, 41), MEDHA_EINVAL);
	assert_int_equal(medha_kv_seq_fork(kv, a, a, 0, 16), MEDHA_EINVAL);
	/* the last table to let go returns a block: a's block 1 is b's too */
	medha_kv_seq_free(kv, a);
	assert_int_equal(medha_kv_free_blocks(kv), 7); /* A0, A2 */
	assert_true(k0(kv, b, 20) == 20);
	medha_kv_seq_free(kv, b);
	medha_kv_seq_free(kv, c);
	assert_int_equal(medha_kv_free_blocks(kv), 10);
	medha_kvcache_free(kv);
}

/* The copy function the tables call: records, and fails when told. */
struct copies {
	int n, fail;
	int32_t dst[8], src[8];
};

static int
record_copy(void *arg, int32_t dst, int32_t src)
{
	struct copies *c = arg;

	if (c->fail)
		return MEDHA_EIO;
	if (c->n < 8) {
		c->dst[c->n] = dst;
		c->src[c->n] = src;
	}
	c->n++;
	return 0;
}

/* The block tables alone (kvblocks.h), as a backend with its own K/V
 * storage uses them: the copy it is asked for, a copy that fails
 * leaving the tables as they were, and the blocks a write will need. */
static void
test_kvblocks_copy(void **state)
{
	struct medha_kvblocks t;
	struct copies cp = {0};
	int a, b;

	(void)state;
	assert_int_equal(medha_kvb_init(&t, 0, 4, record_copy, &cp),
	    MEDHA_EINVAL);
	assert_int_equal(medha_kvb_init(&t, 6, 4, record_copy, &cp), 0);
	assert_int_equal(medha_kvb_seq_alloc(&t, &a), 0);
	assert_int_equal(medha_kvb_seq_alloc(&t, &b), 0);
	assert_int_equal(medha_kvb_reserve(&t, a, 40), 0);
	assert_int_equal(medha_kvb_set_len(&t, a, 40), 0);
	/* a fork whose partial-block copy fails: b untouched, no block lost */
	cp.fail = 1;
	assert_int_equal(medha_kvb_fork(&t, b, a, 0, 35), MEDHA_EIO);
	assert_int_equal(medha_kvb_len(&t, b), 0);
	assert_int_equal(t.seq[b].nblock, 0);
	assert_int_equal(t.nfree, 3);
	assert_int_equal(t.ref[t.seq[a].block[0]], 1);
	cp.fail = 0;
	assert_int_equal(medha_kvb_fork(&t, b, a, 0, 35), 0);
	assert_int_equal(cp.n, 1);
	assert_int_equal(cp.src[0], t.seq[a].block[2]);
	assert_int_equal(cp.dst[0], t.seq[b].block[2]);
	assert_int_equal(t.nfree, 2);
	/* b writing 30..40: its own block 2, one new, nothing shared */
	assert_int_equal(medha_kvb_write_need(&t, b, 30, 40), 1);
	/* b rewriting 10..20: blocks 0 and 1 are a's too */
	assert_int_equal(medha_kvb_write_need(&t, b, 10, 20), 2);
	assert_int_equal(medha_kvb_own(&t, b, 10, 10), 0);
	assert_int_equal(cp.n, 3);
	assert_int_equal(t.nfree, 0);
	assert_true(t.seq[b].block[0] != t.seq[a].block[0]);
	assert_int_equal(medha_kvb_write_need(&t, b, 0, 32), 0);
	/* no block for a copy: refused, the table as it was */
	assert_int_equal(medha_kvb_set_len(&t, b, 16), 0); /* frees 2 */
	assert_int_equal(medha_kvb_set_len(&t, b, 0), 0);  /* frees 1 */
	assert_int_equal(t.nfree, 3);
	assert_int_equal(medha_kvb_fork(&t, b, a, 0, 32), 0);
	assert_int_equal(medha_kvb_reserve(&t, b, 48), 0);
	assert_int_equal(medha_kvb_reserve(&t, a, 80), 0); /* the last 2 */
	assert_int_equal(t.nfree, 0);
	assert_int_equal(medha_kvb_own(&t, b, 0, 1), MEDHA_ENOSPACE);
	assert_int_equal(t.seq[b].block[0], t.seq[a].block[0]);
	assert_int_equal(medha_kvb_own(&t, b, 40, 9), MEDHA_EINVAL);
	medha_kvb_seq_free(&t, a);
	medha_kvb_seq_free(&t, b);
	assert_int_equal(t.nfree, 6);
	medha_kvb_free(&t);
}

/* A window cache: layers 0 and 2 see 20 keys, layer 1 all. */
static void
test_kvcache_window(void **state)
{
	static const int win[3] = {20, 0, 20};
	struct medha_kv_config c = {.n_layers = 3, .n_kv_heads = NKV,
	    .head_dim = HD, .n_blocks = 10, .type = MEDHA_KV_F32,
	    .max_seqs = 4, .windows = win};
	struct medha_kvcache *kv;
	float k[NKV * HD], v[NKV * HD], r[HD];
	int a, b, cs, d, i;

	(void)state;
	assert_int_equal(medha_kvcache_init(&kv, &c), 0);
	assert_int_equal(kv->nl, 3);
	for (i = 0; i < NKV * HD; i++) {
		k[i] = (float)i + 0.5f;
		v[i] = -(float)i;
	}
	assert_int_equal(medha_kv_seq_alloc(kv, &a), 0);
	assert_int_equal(medha_kv_reserve(kv, a, 160), 0); /* 10 x 3 */
	assert_int_equal(medha_kv_set_len(kv, a, 160), 0);
	assert_int_equal(medha_kv_free_blocks(kv), 0);
	assert_int_equal(medha_kv_held(kv, a), 30);
	assert_int_equal(medha_kv_write(kv, a, 0, 150, 1, k, v), 0);
	assert_int_equal(medha_kv_write(kv, a, 1, 3, 1, k, v), 0);
	assert_int_equal(medha_kv_write(kv, a, 2, 3, 1, k, v), 0);
	/* a query at 160 sees 141..160: blocks 0..7 of layers 0, 2 go */
	medha_kv_window_drop(kv, a, 160);
	assert_int_equal(medha_kv_held(kv, a), 14);
	assert_int_equal(medha_kv_free_blocks(kv), 5); /* 16 of 3 layers */
	assert_int_equal(medha_kv_seq_len(kv, a), 160);
	assert_int_equal(medha_kv_read(kv, a, 2, 0, 0, 3, r), MEDHA_EINVAL);
	assert_int_equal(medha_kv_read(kv, a, 1, 0, 1, 3, r), 0);
	assert_true(r[3] == k[HD + 3]);
	assert_int_equal(medha_kv_read(kv, a, 0, 1, 0, 150, r), 0);
	assert_true(r[2] == v[2]);
	assert_int_equal(medha_kv_write(kv, a, 0, 3, 1, k, v), MEDHA_EINVAL);
	/* the global layer grows from what the windows gave back */
	assert_int_equal(medha_kv_seq_alloc(kv, &b), 0);
	assert_int_equal(medha_kv_reserve(kv, b, 80), 0); /* 5 x 3 */
	assert_int_equal(kv->bt.nfree, 1);
	medha_kv_seq_free(kv, b);
	/* forks: to 160, the windows hold 141..159: taken (holes too) */
	assert_int_equal(medha_kv_seq_alloc(kv, &cs), 0);
	assert_int_equal(medha_kv_seq_fork(kv, cs, a, 0, 160), 0);
	assert_int_equal(medha_kv_held(kv, cs), 14);
	assert_int_equal(medha_kv_read(kv, cs, 1, 0, 1, 3, r), 0);
	assert_true(r[3] == k[HD + 3]);
	assert_int_equal(medha_kv_read(kv, cs, 0, 1, 0, 150, r), 0);
	assert_true(r[2] == v[2]);
	/* to 100: a query there sees 81..99, which layers 0, 2 let go */
	assert_int_equal(medha_kv_seq_alloc(kv, &d), 0);
	assert_int_equal(medha_kv_seq_fork(kv, d, a, 0, 100), MEDHA_EINVAL);
	assert_int_equal(medha_kv_seq_len(kv, d), 0);
	assert_int_equal(medha_kv_held(kv, d), 0);
	medha_kv_seq_free(kv, a);
	assert_int_equal(medha_kv_free_blocks(kv), 5); /* cs shares them */
	medha_kv_seq_free(kv, cs);
	medha_kv_seq_free(kv, d);
	assert_int_equal(medha_kv_free_blocks(kv), 10);
	medha_kvcache_free(kv);
	/* no window among the layers used: one table for all, as before */
	c.layer_lo = 1;
	c.layer_hi = 2;
	assert_int_equal(medha_kvcache_init(&kv, &c), 0);
	assert_int_equal(kv->nl, 0);
	medha_kvcache_free(kv);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_kvcache),
	    cmocka_unit_test(test_kvcache_fork),
	    cmocka_unit_test(test_kvblocks_copy),
	    cmocka_unit_test(test_kvcache_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * kvplace_test.c: a replica's KV blocks per KVP group and the placement
 * of each request's pieces (libcore/sched/kvplace.c), held to what
 * kvplace.h promises:
 *  - init refuses what it must (groups outside [1, MEDHA_KVP_MAX], a
 *    block size or a capacity below 1, a per-group limit that is
 *    negative or not a multiple of the block size, a capacity whose
 *    tokens would not fit an int64_t) and sets the tokens one request
 *    may keep on one group;
 *  - fits_ever says 1 exactly when an empty replica admits the request,
 *    with a reason otherwise, even for needs near INT64_MAX whose count
 *    of pieces does not fit an int;
 *  - admit cuts a request into pieces of group_tokens, each on its own
 *    group, reserving the blocks of each; it picks the group with the
 *    least pending work that has room, ties by the most free blocks,
 *    then round-robin from the group after the last one chosen; a
 *    piece that finds no room refuses the whole request with
 *    MEDHA_ENOSPACE and nothing reserved;
 *  - pending work (the prompt tokens of each piece with admit, the
 *    caller's figures with admit_work) drains evenly over the prompt
 *    tokens from the piece's start to the prompt's end as they are
 *    prefilled, and what is left goes at release, with the blocks;
 *  - entered, in_piece, check_lease and check on hand-made cases, and
 *    all of it against a model of the header's rules on random
 *    admissions, prefills and releases (seeded).
 *  - a request with nothing left to prefill when admitted (a prompt of
 *    0, or all of it cached) has no work pending, whatever work it
 *    brings, and its release leaves the groups' pending work as it was;
 *  - check_lease refuses KV past a lease's last piece.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/kvplace.h"

/* ---- a seeded generator (splitmix64) ---- */

static uint64_t rng_state;

static uint64_t
rng(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* uniform in [lo, hi] */
static int64_t
between(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1));
}

/* ---- helpers ---- */

/* check_lease over the leases (holding kv[i] tokens), then check. */
static int
check_all(const struct medha_kvplace *pl, const struct medha_kvlease *l,
    const int64_t *kv, int n, char *why, size_t whylen)
{
	int64_t sum[MEDHA_KVP_MAX] = {0};
	int rc;

	for (int i = 0; i < n; i++)
		if ((rc = medha_kvplace_check_lease(pl, &l[i], kv[i], sum, why,
		         whylen)) != 0)
			return rc;
	return medha_kvplace_check(pl, sum, why, whylen);
}

static void
assert_consistent(const struct medha_kvplace *pl, const struct medha_kvlease *l,
    const int64_t *kv, int n)
{
	char why[256] = "";

	if (check_all(pl, l, kv, n, why, sizeof(why)) != 0)
		fail_msg("invariant: %s", why);
}

/* ---- init ---- */

static void
test_init(void **state)
{
	struct medha_kvplace pl;

	(void)state;
	assert_int_equal(medha_kvplace_init(&pl, 4, 16, 100, 0), 0);
	assert_int_equal(pl.kvp, 4);
	assert_int_equal(pl.block_size, 16);
	assert_int_equal(pl.cap_blocks, 100);
	/* no limit: the group's memory */
	assert_int_equal(pl.group_tokens, 1600);
	for (int g = 0; g < 4; g++) {
		assert_int_equal(pl.res[g], 0);
		assert_int_equal(pl.pend[g], 0);
	}
	/* a limit below the memory is the limit; above, the memory */
	assert_int_equal(medha_kvplace_init(&pl, 4, 16, 100, 320), 0);
	assert_int_equal(pl.group_tokens, 320);
	assert_int_equal(medha_kvplace_init(&pl, 4, 16, 100, 1600), 0);
	assert_int_equal(pl.group_tokens, 1600);
	assert_int_equal(medha_kvplace_init(&pl, 4, 16, 100, 16000), 0);
	assert_int_equal(pl.group_tokens, 1600);
	assert_int_equal(medha_kvplace_init(&pl, MEDHA_KVP_MAX, 1, 1, 0), 0);
	assert_int_equal(pl.group_tokens, 1);

	/* refused */
	assert_int_equal(medha_kvplace_init(&pl, 0, 16, 100, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, -1, 16, 100, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, MEDHA_KVP_MAX + 1, 16, 100, 0),
	    MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 2, 0, 100, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 2, -16, 100, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 0, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, -5, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 100, -16),
	    MEDHA_EINVAL);
	/* the limit must be a multiple of the block size */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 100, 24), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 100, 8), MEDHA_EINVAL);
	/* a capacity whose tokens do not fit an int64_t */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, INT64_MAX, 0),
	    MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_init(&pl, 1, 2, INT64_MAX / 2 + 1, 0),
	    MEDHA_EINVAL);
}

/* ---- in_piece, entered ---- */

static void
test_pieces(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease l;

	(void)state;
	assert_int_equal(medha_kvplace_init(&pl, 4, 16, 100, 64), 0);
	/* [from, to) against [64 i, 64 (i + 1)) */
	assert_int_equal(medha_kvplace_in_piece(&pl, 0, 0, 100), 64);
	assert_int_equal(medha_kvplace_in_piece(&pl, 1, 0, 100), 36);
	assert_int_equal(medha_kvplace_in_piece(&pl, 2, 0, 100), 0);
	assert_int_equal(medha_kvplace_in_piece(&pl, 1, 70, 80), 10);
	assert_int_equal(medha_kvplace_in_piece(&pl, 0, 70, 80), 0);
	assert_int_equal(medha_kvplace_in_piece(&pl, 0, 60, 70), 4);
	assert_int_equal(medha_kvplace_in_piece(&pl, 1, 60, 70), 6);
	assert_int_equal(medha_kvplace_in_piece(&pl, 1, 64, 128), 64);
	assert_int_equal(medha_kvplace_in_piece(&pl, 1, 10, 10), 0);
	assert_int_equal(medha_kvplace_in_piece(&pl, 3, 0, 1000), 64);

	/* a request of 200 tokens: pieces of 64, 64, 64 and 8 */
	assert_int_equal(medha_kvplace_admit(&pl, &l, 200, 150), 0);
	assert_int_equal(l.n_groups, 4);
	assert_int_equal(l.res_blocks[0], 4);
	assert_int_equal(l.res_blocks[1], 4);
	assert_int_equal(l.res_blocks[2], 4);
	assert_int_equal(l.res_blocks[3], 1);
	assert_int_equal(l.prompt, 150);
	assert_int_equal(l.done, 0);
	/* admit: each piece's work is its prompt tokens */
	assert_int_equal(l.work[0], 64);
	assert_int_equal(l.work[1], 64);
	assert_int_equal(l.work[2], 22);
	assert_int_equal(l.work[3], 0);
	/* groups entered as the KV grows: at least 1, at most n_groups */
	assert_int_equal(medha_kvplace_entered(&pl, &l, 0), 1);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 1), 1);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 64), 1);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 65), 2);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 128), 2);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 129), 3);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 200), 4);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 100000), 4);
	medha_kvplace_release(&pl, &l);
	assert_int_equal(l.n_groups, 0);
	assert_int_equal(medha_kvplace_entered(&pl, &l, 10), 0);
}

/* ---- fits_ever ---- */

static void
test_fits_ever(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease l;
	char why[256];

	(void)state;
	/* two groups of 10 blocks of 16: 160 tokens each, 320 in all */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 0), 0);
	assert_int_equal(medha_kvplace_fits_ever(&pl, 0, why, sizeof(why)), 1);
	assert_int_equal(medha_kvplace_fits_ever(&pl, 1, why, sizeof(why)), 1);
	assert_int_equal(medha_kvplace_fits_ever(&pl, 160, why, sizeof(why)),
	    1);
	assert_int_equal(medha_kvplace_fits_ever(&pl, 320, why, sizeof(why)),
	    1);
	why[0] = '\0';
	assert_int_equal(medha_kvplace_fits_ever(&pl, 321, why, sizeof(why)),
	    0);
	assert_non_null(strstr(why, "21 KV blocks"));
	why[0] = '\0';
	assert_int_equal(medha_kvplace_fits_ever(&pl, INT64_MAX, why,
	                     sizeof(why)),
	    0);
	assert_true(why[0] != '\0');
	/* why may be NULL */
	assert_int_equal(medha_kvplace_fits_ever(&pl, 321, NULL, 0), 0);

	/* a limit of 64 tokens a group: two pieces at most */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_fits_ever(&pl, 128, why, sizeof(why)),
	    1);
	why[0] = '\0';
	assert_int_equal(medha_kvplace_fits_ever(&pl, 129, why, sizeof(why)),
	    0);
	assert_non_null(strstr(why, "3 KVP groups"));

	/* pieces counted past an int: 2^32 + 1 pieces of 16 tokens on one
	 * group is no fit, nor an admission (not 1 piece after narrowing) */
	assert_int_equal(medha_kvplace_init(&pl, 1, 16, 1, 0), 0);
	const int64_t big = 16 * (((int64_t)1 << 32) + 1);
	assert_int_equal(medha_kvplace_fits_ever(&pl, big, why, sizeof(why)),
	    0);
	assert_int_equal(medha_kvplace_admit(&pl, &l, big, 16), MEDHA_ENOSPACE);
	assert_int_equal(l.n_groups, 0);
	assert_int_equal(pl.res[0], 0);
	assert_int_equal(medha_kvplace_admit(&pl, &l, INT64_MAX, 0),
	    MEDHA_ENOSPACE);
	assert_int_equal(pl.res[0], 0);
	assert_int_equal(pl.pend[0], 0);

	/* on random shapes: fits_ever is exactly "an empty replica admits
	 * it" */
	rng_state = 11;
	for (int t = 0; t < 2000; t++) {
		int kvp = (int)between(1, 8), bs = (int)between(1, 32);
		int64_t cap = between(1, 50);
		int64_t lim = rng() % 2 ? 0 : bs * between(1, cap + 5);
		int64_t need = between(0, 2 * kvp * cap * bs);
		int fits, rc;

		assert_int_equal(medha_kvplace_init(&pl, kvp, bs, cap, lim), 0);
		why[0] = '\0';
		fits = medha_kvplace_fits_ever(&pl, need, why, sizeof(why));
		rc = medha_kvplace_admit(&pl, &l, need, need / 2);
		if ((fits == 1) != (rc == 0))
			fail_msg("kvp %d, %d blocks of %d, limit %lld: need "
			         "%lld: fits_ever %d, admit %d (%s)",
			    kvp, (int)cap, bs, (long long)lim, (long long)need,
			    fits, rc, why);
		assert_true(fits == 1 || why[0] != '\0');
		assert_true(rc == 0 || rc == MEDHA_ENOSPACE);
	}
}

/* ---- admission: the choice of groups ---- */

static void
test_admit_choice(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease a, b, c, d, e;
	const int64_t w_big[1] = {1000}, w_small[1] = {50}, w_one[1] = {1};
	const int64_t w_none[1] = {0};

	(void)state;
	/* round-robin on an idle replica: released requests leave equal
	 * groups, and each admission starts after the last one chosen */
	assert_int_equal(medha_kvplace_init(&pl, 3, 16, 10, 0), 0);
	for (int i = 0; i < 7; i++) {
		assert_int_equal(medha_kvplace_admit(&pl, &a, 16, 0), 0);
		assert_int_equal(a.n_groups, 1);
		assert_int_equal(a.groups[0], i % 3);
		assert_int_equal(pl.res[i % 3], 1);
		medha_kvplace_release(&pl, &a);
		for (int g = 0; g < 3; g++)
			assert_int_equal(pl.res[g], 0);
	}

	/* equal work: the most free blocks; ties round-robin */
	assert_int_equal(medha_kvplace_init(&pl, 3, 16, 10, 0), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 16 * 5, 0), 0);
	assert_int_equal(a.groups[0], 0);
	assert_int_equal(medha_kvplace_admit(&pl, &b, 16 * 2, 0), 0);
	assert_int_equal(b.groups[0], 1);
	assert_int_equal(medha_kvplace_admit(&pl, &c, 16 * 3, 0), 0);
	assert_int_equal(c.groups[0], 2);
	/* free: 5, 8, 7 */
	assert_int_equal(medha_kvplace_admit(&pl, &d, 16, 0), 0);
	assert_int_equal(d.groups[0], 1);
	/* free: 5, 7, 7: a tie between 1 and 2, the round-robin starts
	 * after 1 */
	assert_int_equal(medha_kvplace_admit(&pl, &e, 16, 0), 0);
	assert_int_equal(e.groups[0], 2);
	medha_kvplace_release(&pl, &a);
	medha_kvplace_release(&pl, &b);
	medha_kvplace_release(&pl, &c);
	medha_kvplace_release(&pl, &d);
	medha_kvplace_release(&pl, &e);

	/* the least pending work wins over free blocks */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 0), 0);
	assert_int_equal(medha_kvplace_admit_work(&pl, &a, 16 * 8, 0, w_none),
	    0);
	assert_int_equal(a.groups[0], 0); /* free 2, 10; work 0, 0 */
	assert_int_equal(medha_kvplace_admit_work(&pl, &b, 16, 16, w_small), 0);
	assert_int_equal(b.groups[0], 1); /* most free */
	assert_int_equal(pl.pend[1], 50);
	/* free 2, 9; work 0, 50: group 0, though it has less room */
	assert_int_equal(medha_kvplace_admit_work(&pl, &c, 16, 16, w_one), 0);
	assert_int_equal(c.groups[0], 0);
	assert_int_equal(pl.pend[0], 1);
	/* group 0 (work 1) has one block left: a piece of two goes to the
	 * busier group that has room */
	assert_int_equal(medha_kvplace_admit_work(&pl, &d, 32, 32, w_big), 0);
	assert_int_equal(d.groups[0], 1);
	assert_int_equal(pl.pend[1], 1050);
	assert_int_equal(pl.res[0], 9);
	assert_int_equal(pl.res[1], 3);
	/* the work is read, not kept: the lease holds its copy */
	assert_int_equal(d.work[0], 1000);
	medha_kvplace_release(&pl, &a);
	medha_kvplace_release(&pl, &b);
	medha_kvplace_release(&pl, &c);
	medha_kvplace_release(&pl, &d);
	assert_int_equal(pl.res[0] + pl.res[1], 0);
	assert_int_equal(pl.pend[0] + pl.pend[1], 0);

	/* pieces of one request go on different groups, in order */
	assert_int_equal(medha_kvplace_init(&pl, 4, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 64 * 4, 0), 0);
	assert_int_equal(a.n_groups, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(a.groups[i], i);
		assert_int_equal(a.res_blocks[i], 4);
		assert_int_equal(pl.res[i], 4);
	}
	/* a fifth piece has no group of its own left */
	assert_int_equal(medha_kvplace_admit(&pl, &b, 64 * 4 + 1, 0),
	    MEDHA_ENOSPACE);
	assert_int_equal(b.n_groups, 0);
	medha_kvplace_release(&pl, &a);
}

/* ---- refusal: nothing reserved ---- */

static void
test_refusal(void **state)
{
	struct medha_kvplace pl, before;
	struct medha_kvlease a, b, c, x;
	int64_t kv[3];
	struct medha_kvlease all[3];

	(void)state;
	/* 2 groups of 10 blocks, at most 4 blocks (64 tokens) a group */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 64, 64), 0); /* 4 */
	assert_int_equal(medha_kvplace_admit(&pl, &b, 64, 64), 0); /* 4 */
	assert_int_equal(medha_kvplace_admit(&pl, &c, 80, 80), 0); /* 4+1 */
	/* reserved: one group 8, the other 5 */
	assert_int_equal(pl.res[0] + pl.res[1], 13);
	assert_true((pl.res[0] == 8 && pl.res[1] == 5) ||
	    (pl.res[0] == 5 && pl.res[1] == 8));
	/* 112 tokens: a piece of 4 blocks fits only the group of 5; the
	 * second piece (3 blocks) then finds no other group with room:
	 * refused, and the first piece's blocks are given back */
	before = pl;
	assert_int_equal(medha_kvplace_admit(&pl, &x, 112, 112),
	    MEDHA_ENOSPACE);
	assert_int_equal(x.n_groups, 0);
	assert_memory_equal(pl.res, before.res, sizeof(pl.res));
	assert_memory_equal(pl.pend, before.pend, sizeof(pl.pend));
	/* a request that fits the room left is admitted */
	assert_int_equal(medha_kvplace_admit(&pl, &x, 64 + 32, 96), 0);
	assert_int_equal(x.n_groups, 2);
	medha_kvplace_release(&pl, &x);
	assert_memory_equal(pl.res, before.res, sizeof(pl.res));
	assert_memory_equal(pl.pend, before.pend, sizeof(pl.pend));

	/* the invariants hold, with every lease at its full size */
	all[0] = a;
	all[1] = b;
	all[2] = c;
	kv[0] = 64;
	kv[1] = 64;
	kv[2] = 80;
	assert_consistent(&pl, all, kv, 3);
	medha_kvplace_release(&pl, &a);
	medha_kvplace_release(&pl, &b);
	medha_kvplace_release(&pl, &c);
	assert_int_equal(pl.res[0] + pl.res[1], 0);
	assert_int_equal(pl.pend[0] + pl.pend[1], 0);

	/* a full replica refuses until a release frees room */
	assert_int_equal(medha_kvplace_init(&pl, 1, 16, 4, 0), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 48, 10), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &b, 17, 10), MEDHA_ENOSPACE);
	assert_int_equal(pl.res[0], 3);
	assert_int_equal(pl.pend[0], 10);
	assert_int_equal(medha_kvplace_admit(&pl, &b, 16, 10), 0);
	assert_int_equal(pl.res[0], 4);
	assert_int_equal(medha_kvplace_admit(&pl, &c, 1, 1), MEDHA_ENOSPACE);
	medha_kvplace_release(&pl, &a);
	assert_int_equal(pl.res[0], 1);
	assert_int_equal(medha_kvplace_admit(&pl, &c, 33, 1), 0);
	assert_int_equal(pl.res[0], 4);
	medha_kvplace_release(&pl, &b);
	medha_kvplace_release(&pl, &c);
	assert_int_equal(pl.res[0], 0);
	assert_int_equal(pl.pend[0], 0);
}

/* ---- pending work ---- */

static void
test_pending(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease l, m;
	const int64_t w[2] = {1000, 600};

	(void)state;
	/* one group: the work drains evenly over the prompt */
	assert_int_equal(medha_kvplace_init(&pl, 1, 16, 100, 0), 0);
	assert_int_equal(medha_kvplace_admit_work(&pl, &l, 120, 100, w), 0);
	assert_int_equal(pl.pend[0], 1000);
	medha_kvplace_prefilled(&pl, &l, 0, 25);
	assert_int_equal(l.done, 25);
	assert_int_equal(pl.pend[0], 750);
	medha_kvplace_prefilled(&pl, &l, 25, 50);
	assert_int_equal(pl.pend[0], 500);
	medha_kvplace_prefilled(&pl, &l, 50, 100);
	assert_int_equal(pl.pend[0], 0);
	/* blocks stay until the release */
	assert_int_equal(pl.res[0], 8);
	medha_kvplace_release(&pl, &l);
	assert_int_equal(pl.res[0], 0);
	assert_int_equal(pl.pend[0], 0);

	/* two pieces of 64: piece 0 drains over [0, 128), piece 1 over
	 * [64, 128) and not before its start */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &l, 128, 128), 0);
	{
		int g0 = l.groups[0], g1 = l.groups[1];
		assert_int_equal(pl.pend[g0], 64);
		assert_int_equal(pl.pend[g1], 64);
		medha_kvplace_prefilled(&pl, &l, 0, 64);
		assert_int_equal(pl.pend[g0], 32);
		assert_int_equal(pl.pend[g1], 64);
		medha_kvplace_prefilled(&pl, &l, 64, 96);
		assert_int_equal(pl.pend[g0], 16);
		assert_int_equal(pl.pend[g1], 32);
		/* released mid-prompt: what is left goes */
		medha_kvplace_release(&pl, &l);
		assert_int_equal(pl.pend[g0], 0);
		assert_int_equal(pl.pend[g1], 0);
		assert_int_equal(pl.res[g0] + pl.res[g1], 0);
	}

	/* the caller's work per piece, beside a request of prompt tokens */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit_work(&pl, &l, 100, 100, w), 0);
	assert_int_equal(pl.pend[l.groups[0]], 1000);
	assert_int_equal(pl.pend[l.groups[1]], 600);
	assert_int_equal(medha_kvplace_admit(&pl, &m, 40, 40), 0);
	/* the least work: the group of piece 1 */
	assert_int_equal(m.groups[0], l.groups[1]);
	assert_int_equal(pl.pend[l.groups[1]], 640);
	/* 82 of 100 tokens: piece 0 keeps 18/100, piece 1 18/36 */
	medha_kvplace_prefilled(&pl, &l, 0, 82);
	assert_int_equal(pl.pend[l.groups[0]], 180);
	assert_int_equal(pl.pend[l.groups[1]], 300 + 40);
	medha_kvplace_prefilled(&pl, &m, 0, 40);
	medha_kvplace_prefilled(&pl, &l, 82, 100);
	assert_int_equal(pl.pend[0], 0);
	assert_int_equal(pl.pend[1], 0);
	/* a zero-length step changes nothing */
	medha_kvplace_prefilled(&pl, &l, 100, 100);
	assert_int_equal(pl.pend[0] + pl.pend[1], 0);
	medha_kvplace_release(&pl, &l);
	medha_kvplace_release(&pl, &m);
	assert_int_equal(pl.res[0] + pl.res[1], 0);
}

/* ---- the checks ---- */

static void
test_checks(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease l, none = {0};
	int64_t sum[MEDHA_KVP_MAX] = {0};
	char why[256];

	(void)state;
	/* 100 tokens over pieces of 64: 4 blocks and 3 (36 tokens in 48) */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &l, 100, 80), 0);
	for (int64_t kv = 0; kv <= 112; kv++) {
		memset(sum, 0, sizeof(sum));
		if (medha_kvplace_check_lease(&pl, &l, kv, sum, why,
		        sizeof(why)) != 0)
			fail_msg("%lld tokens: %s", (long long)kv, why);
		assert_int_equal(sum[l.groups[0]], 4);
		assert_int_equal(sum[l.groups[1]], 3);
		assert_int_equal(medha_kvplace_check(&pl, sum, why,
		                     sizeof(why)),
		    0);
	}
	/* a 49th token in piece 1 needs a fourth block: over */
	memset(sum, 0, sizeof(sum));
	why[0] = '\0';
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 113, sum, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "reserved 3"));
	/* sums that disagree with the groups' totals */
	memset(sum, 0, sizeof(sum));
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 100, sum, why,
	                     sizeof(why)),
	    0);
	sum[l.groups[1]]++;
	why[0] = '\0';
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_true(why[0] != '\0');
	/* leases left out of the sums: the groups hold more */
	memset(sum, 0, sizeof(sum));
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)),
	    MEDHA_EINVAL);
	/* KV tokens without a lease */
	assert_int_equal(medha_kvplace_check_lease(&pl, &none, 0, sum, why,
	                     sizeof(why)),
	    0);
	why[0] = '\0';
	assert_int_equal(medha_kvplace_check_lease(&pl, &none, 5, sum, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "no group"));
	/* a group over its memory, negative work */
	medha_kvplace_release(&pl, &l);
	memset(sum, 0, sizeof(sum));
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)), 0);
	pl.res[1] = pl.cap_blocks + 1;
	sum[1] = pl.res[1];
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)),
	    MEDHA_EINVAL);
	pl.res[1] = sum[1] = 0;
	pl.pend[0] = -1;
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)),
	    MEDHA_EINVAL);
}

/* ---- random admissions against a model of the header's rules ---- */

#define NL 48 /* leases at once */

/* The groups the header's rule picks for need's pieces, from pl's state
 * as it is (pend, res, next): 1 and groups[] filled, or 0 if a piece
 * finds no room. */
static int
model_pick(const struct medha_kvplace *pl, int64_t need, int *groups, int *n)
{
	int64_t np =
	    need > 0 ? (need + pl->group_tokens - 1) / pl->group_tokens : 1;
	int64_t res[MEDHA_KVP_MAX];
	int used[MEDHA_KVP_MAX] = {0};

	if (np < 1)
		np = 1;
	if (np > pl->kvp)
		return 0;
	memcpy(res, pl->res, sizeof(res));
	for (int i = 0; i < np; i++) {
		int64_t t = medha_kvplace_in_piece(pl, i, 0, need);
		int64_t nb = (t + pl->block_size - 1) / pl->block_size;
		int best = -1;
		for (int k = 0; k < pl->kvp; k++) {
			int g = (pl->next + k) % pl->kvp;
			if (used[g] || pl->cap_blocks - res[g] < nb)
				continue;
			if (best < 0 || pl->pend[g] < pl->pend[best] ||
			    (pl->pend[g] == pl->pend[best] &&
			        res[g] < res[best]))
				best = g;
		}
		if (best < 0)
			return 0;
		used[best] = 1;
		res[best] += nb;
		groups[i] = best;
	}
	*n = (int)np;
	return 1;
}

/* Work still pending for piece i of a lease of prompt P once done of it
 * are prefilled, within rounding: [lo, hi]. */
static void
model_left(const struct medha_kvplace *pl, const struct medha_kvlease *l, int i,
    int64_t *lo, int64_t *hi)
{
	int64_t start = (int64_t)i * pl->group_tokens, w = l->work[i];

	if (w == 0 || l->done >= l->prompt) {
		*lo = *hi = 0;
	} else if (l->done <= start) {
		*lo = *hi = w;
	} else {
		/* w (P - done) / (P - start), either way rounded */
		*lo = w * (l->prompt - l->done) / (l->prompt - start);
		*hi = *lo + 1;
		*lo -= 1;
	}
}

static void
random_run(uint64_t seed)
{
	struct medha_kvplace pl;
	struct medha_kvlease l[NL];
	int64_t kv[NL], need[NL];
	int live[NL] = {0};
	int64_t work[MEDHA_KVP_MAX];
	int kvp, bs, admitted = 0, refused = 0;
	int64_t cap, lim;

	rng_state = seed;
	kvp = (int)between(1, 6);
	bs = (int)between(1, 16);
	cap = between(4, 64);
	lim = rng() % 2 ? 0 : bs * between(1, cap);
	assert_int_equal(medha_kvplace_init(&pl, kvp, bs, cap, lim), 0);
	memset(l, 0, sizeof(l));
	memset(kv, 0, sizeof(kv));
	for (int step = 0; step < 3000; step++) {
		int i = (int)between(0, NL - 1);
		char why[256];

		if (!live[i]) {
			/* admit, with the model's choice */
			int64_t n = between(0, pl.group_tokens * kvp + 8);
			int64_t prompt = n > 0 ? between(0, n) : 0;
			int want[MEDHA_KVP_MAX], nw = 0, use_work = rng() % 2;
			int ok = model_pick(&pl, n, want, &nw), rc;
			int64_t pend0[MEDHA_KVP_MAX], res0[MEDHA_KVP_MAX];

			memcpy(pend0, pl.pend, sizeof(pend0));
			memcpy(res0, pl.res, sizeof(res0));
			for (int k = 0; k < MEDHA_KVP_MAX; k++)
				work[k] = between(0, 100000);
			rc = use_work
			    ? medha_kvplace_admit_work(&pl, &l[i], n, prompt,
			          work)
			    : medha_kvplace_admit(&pl, &l[i], n, prompt);
			if (!ok) {
				assert_int_equal(rc, MEDHA_ENOSPACE);
				assert_int_equal(l[i].n_groups, 0);
				assert_memory_equal(pl.res, res0, sizeof(res0));
				assert_memory_equal(pl.pend, pend0,
				    sizeof(pend0));
				refused++;
				continue;
			}
			assert_int_equal(rc, 0);
			assert_int_equal(l[i].n_groups, nw);
			for (int k = 0; k < nw; k++) {
				int64_t t =
				    medha_kvplace_in_piece(&pl, k, 0, n);
				int64_t wk = use_work
				    ? work[k]
				    : medha_kvplace_in_piece(&pl, k, 0, prompt);
				if (l[i].groups[k] != want[k])
					fail_msg(
					    "seed %llu step %d: piece %d "
					    "on group %d, the rule says %d",
					    (unsigned long long)seed, step, k,
					    l[i].groups[k], want[k]);
				assert_int_equal(l[i].res_blocks[k],
				    (t + bs - 1) / bs);
				assert_int_equal(l[i].work[k], wk);
				assert_int_equal(pl.res[want[k]],
				    res0[want[k]] + l[i].res_blocks[k]);
				/* none pending with nothing to prefill */
				assert_int_equal(pl.pend[want[k]],
				    pend0[want[k]] + (prompt > 0 ? wk : 0));
			}
			assert_int_equal(pl.next, (want[nw - 1] + 1) % kvp);
			live[i] = 1;
			need[i] = n;
			kv[i] = 0;
			admitted++;
		} else if (l[i].done < l[i].prompt && rng() % 4 != 0) {
			/* a prompt chunk */
			int64_t to = between(l[i].done + 1, l[i].prompt);
			medha_kvplace_prefilled(&pl, &l[i], l[i].done, to);
			kv[i] = to;
		} else if (l[i].done >= l[i].prompt && kv[i] < need[i] &&
		    rng() % 3 != 0) {
			/* a decode step, within what was asked for */
			kv[i]++;
		} else {
			medha_kvplace_release(&pl, &l[i]);
			assert_int_equal(l[i].n_groups, 0);
			live[i] = 0;
			kv[i] = 0;
		}
		/* the invariants, and the pending work per group */
		{
			int64_t sum[MEDHA_KVP_MAX] = {0};
			int64_t lo[MEDHA_KVP_MAX] = {0},
			        hi[MEDHA_KVP_MAX] = {0};
			for (int k = 0; k < NL; k++) {
				if (!live[k])
					continue;
				assert_true(medha_kvplace_entered(&pl, &l[k],
				                kv[k]) >= 1);
				if (medha_kvplace_check_lease(&pl, &l[k], kv[k],
				        sum, why, sizeof(why)) != 0)
					fail_msg("seed %llu step %d: %s",
					    (unsigned long long)seed, step,
					    why);
				for (int p = 0; p < l[k].n_groups; p++) {
					int64_t a, b;
					model_left(&pl, &l[k], p, &a, &b);
					lo[l[k].groups[p]] += a;
					hi[l[k].groups[p]] += b;
				}
			}
			if (medha_kvplace_check(&pl, sum, why, sizeof(why)) !=
			    0)
				fail_msg("seed %llu step %d: %s",
				    (unsigned long long)seed, step, why);
			for (int g = 0; g < kvp; g++)
				if (pl.pend[g] < lo[g] || pl.pend[g] > hi[g])
					fail_msg("seed %llu step %d: group %d "
					         "pending %lld, not in [%lld, "
					         "%lld]",
					    (unsigned long long)seed, step, g,
					    (long long)pl.pend[g],
					    (long long)lo[g], (long long)hi[g]);
		}
	}
	/* every release gives everything back */
	for (int k = 0; k < NL; k++)
		if (live[k])
			medha_kvplace_release(&pl, &l[k]);
	for (int g = 0; g < kvp; g++) {
		assert_int_equal(pl.res[g], 0);
		assert_int_equal(pl.pend[g], 0);
	}
	/* both branches were taken */
	assert_true(admitted > 0);
	(void)refused;
}

static void
test_random(void **state)
{
	int refused_somewhere = 0;

	(void)state;
	for (uint64_t seed = 1; seed <= 40; seed++)
		random_run(seed);
	/* a tight shape refuses some (the ENOSPACE branch of the model) */
	{
		struct medha_kvplace pl;
		struct medha_kvlease a, b;
		assert_int_equal(medha_kvplace_init(&pl, 2, 4, 4, 0), 0);
		assert_int_equal(medha_kvplace_admit(&pl, &a, 32, 0), 0);
		refused_somewhere =
		    medha_kvplace_admit(&pl, &b, 17, 0) == MEDHA_ENOSPACE;
		medha_kvplace_release(&pl, &a);
	}
	assert_true(refused_somewhere);
}

/*
 * Nothing to prefill (prompt 0, or every prompt token cached): the work a
 * request brings is not pending, so that its release, which takes back
 * what is left of it, leaves each group as it found it (it once stayed
 * pending for ever: prefilled is never called for such a request, and
 * release took back nothing).
 */
static void
test_work_without_prompt(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease l, o;
	const int64_t w[2] = {500, 700};
	const int64_t shared[2] = {0, 0};
	const int pin[2] = {-1, -1};

	(void)state;
	assert_int_equal(medha_kvplace_init(&pl, 1, 16, 10, 0), 0);
	assert_int_equal(medha_kvplace_admit_work(&pl, &l, 16, 0, w), 0);
	assert_int_equal(l.work[0], 500); /* kept as the caller said */
	assert_int_equal(pl.pend[0], 0);
	medha_kvplace_release(&pl, &l);
	assert_int_equal(pl.res[0], 0);
	assert_int_equal(pl.pend[0], 0);

	/* all 40 prompt tokens cached, with work and without, beside a
	   request whose prompt is pending: only that one's work counts */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 10, 32), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &o, 20, 20), 0);
	assert_int_equal(pl.pend[o.groups[0]], 20);
	assert_int_equal(medha_kvplace_admit_pin(&pl, &l, 41, 40, 40, w,
	                     shared, pin),
	    0);
	assert_int_equal(l.n_groups, 2);
	assert_int_equal(pl.pend[0] + pl.pend[1], 20);
	medha_kvplace_release(&pl, &l);
	assert_int_equal(pl.pend[0] + pl.pend[1], 20);
	assert_int_equal(medha_kvplace_admit_pin(&pl, &l, 41, 40, 40, NULL,
	                     NULL, NULL),
	    0);
	assert_int_equal(pl.pend[0] + pl.pend[1], 20);
	medha_kvplace_release(&pl, &l);
	medha_kvplace_release(&pl, &o);
	assert_int_equal(pl.res[0] + pl.res[1], 0);
	assert_int_equal(pl.pend[0], 0);
	assert_int_equal(pl.pend[1], 0);
}

/*
 * KV past a lease's last piece has no reservation: check_lease says so
 * (it once looked only at the pieces the lease holds, so a lease of one
 * piece of 64 tokens holding 65, or 1000, passed).
 */
static void
test_check_past_last_piece(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease l;
	int64_t sum[MEDHA_KVP_MAX] = {0};
	char why[256];

	(void)state;
	assert_int_equal(medha_kvplace_init(&pl, 3, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &l, 64, 64), 0);
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 64, sum, why,
	                     sizeof(why)),
	    0);
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 65, sum, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "65 KV tokens span 2 pieces"));
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 1000, sum, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	medha_kvplace_release(&pl, &l);
	/* two pieces: the third group's tokens are past them */
	assert_int_equal(medha_kvplace_admit(&pl, &l, 128, 90), 0);
	assert_int_equal(l.n_groups, 2);
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 128, sum, why,
	                     sizeof(why)),
	    0);
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 129, sum, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	/* grown to a third piece, they are within it */
	{
		int g;
		assert_int_equal(medha_kvplace_grow(&pl, &l, 129, &g), 0);
	}
	memset(sum, 0, sizeof(sum));
	assert_int_equal(medha_kvplace_check_lease(&pl, &l, 129, sum, why,
	                     sizeof(why)),
	    0);
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)), 0);
	medha_kvplace_release(&pl, &l);
}

/*
 * grow: a lease reserved by estimate takes the blocks it lacks in its
 * piece's group, and a new piece on the group with room (least pending
 * work, then most free); where a group is full it says which, keeping
 * what it took; release gives back all of it.
 */
static void
test_grow(void **state)
{
	struct medha_kvplace pl;
	struct medha_kvlease a, b;
	int64_t sum[MEDHA_KVP_MAX] = {0};
	char why[200];
	int g;

	(void)state;
	/* 3 groups of 10 blocks, 64 tokens (4 blocks) a group per request */
	assert_int_equal(medha_kvplace_init(&pl, 3, 16, 10, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 20, 20), 0);
	assert_int_equal(a.n_groups, 1);
	assert_int_equal(a.res_blocks[0], 2);
	/* within the reservation: nothing taken */
	assert_int_equal(medha_kvplace_grow(&pl, &a, 32, &g), 0);
	assert_int_equal(pl.res[a.groups[0]], 2);
	/* a block more in its piece */
	assert_int_equal(medha_kvplace_grow(&pl, &a, 33, &g), 0);
	assert_int_equal(a.res_blocks[0], 3);
	assert_int_equal(pl.res[a.groups[0]], 3);
	/* past 64 tokens: a second piece on another group */
	assert_int_equal(medha_kvplace_grow(&pl, &a, 70, &g), 0);
	assert_int_equal(a.n_groups, 2);
	assert_int_equal(a.res_blocks[0], 4);
	assert_int_equal(a.res_blocks[1], 1);
	assert_true(a.groups[1] != a.groups[0]);
	assert_int_equal(medha_kvplace_check_lease(&pl, &a, 70, sum, why,
	                     sizeof(why)),
	    0);
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)), 0);
	/* a grows to fill the group b leaves: then it finds no block and
	 * is told which group lacks one */
	assert_int_equal(medha_kvplace_init(&pl, 1, 16, 10, 0), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 16, 16), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &b, 16 * 7, 16), 0);
	assert_int_equal(medha_kvplace_grow(&pl, &a, 40, &g), 0);
	assert_int_equal(pl.res[0], 10);
	assert_int_equal(medha_kvplace_grow(&pl, &a, 49, &g), MEDHA_ENOSPACE);
	assert_int_equal(g, 0);
	assert_int_equal(a.res_blocks[0], 3);
	/* cached blocks a request holds count as used */
	medha_kvplace_release(&pl, &b);
	pl.cached[0] = pl.held[0] = 8;
	assert_int_equal(medha_kvplace_grow(&pl, &a, 49, &g), MEDHA_ENOSPACE);
	pl.held[0] = 0; /* not held: free, evicted by the caller */
	assert_int_equal(medha_kvplace_grow(&pl, &a, 49, &g), 0);
	assert_int_equal(medha_kvplace_over(&pl, 0), 4 + 8 - 10);
	pl.cached[0] = 0;
	/* no group left for a new piece: -1 */
	assert_int_equal(medha_kvplace_init(&pl, 2, 16, 4, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &a, 64, 64), 0);
	assert_int_equal(medha_kvplace_admit(&pl, &b, 64, 64), 0);
	assert_int_equal(medha_kvplace_grow(&pl, &a, 65, &g), MEDHA_ENOSPACE);
	assert_int_equal(g, -1);
	/* more pieces than groups */
	assert_int_equal(medha_kvplace_grow(&pl, &a, 64 * 3, &g),
	    MEDHA_ENOSPACE);
	medha_kvplace_release(&pl, &a);
	medha_kvplace_release(&pl, &b);
	assert_int_equal(pl.res[0] + pl.res[1], 0);
}

/*
 * Sliding-window layers (issue 36 item 4): Gemma 3 27B's 62 layers, 52
 * of them with a window of 1024 keys, chunks of 512, blocks of 16. A
 * request of N tokens reserves (10 N + 52 min(N, 1536 + a block of
 * straddle)) / 62 positions' worth, within 10% of the formula; a
 * request all-layer accounting refuses is admitted; reservations are
 * never exceeded as it grows; a piece of KVP holds the window too.
 */
static void
test_window(void **state)
{
	struct medha_kvplace pl, full;
	struct medha_kvlease l;
	int64_t sum[MEDHA_KVP_MAX] = {0};
	char why[200];
	int g;

	(void)state;
	assert_int_equal(medha_kvplace_init(&full, 1, 16, 1000, 0), 0);
	assert_int_equal(medha_kvplace_init(&pl, 1, 16, 1000, 0), 0);
	assert_int_equal(medha_kvplace_window(&pl, 0, 0, 1), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_window(&pl, 62, 63, 1), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_window(&pl, 62, 52, 0), MEDHA_EINVAL);
	assert_int_equal(medha_kvplace_window(&pl, 62, 52, 1024 + 512), 0);
	assert_int_equal(pl.win_blocks, 97);
	/* a group now spans (1000 x 62 - 52 x 97) / 10 blocks of positions */
	assert_int_equal(pl.group_tokens, (62000 - 52 * 97) / 10 * 16);
	/* 40000 tokens: 2500 blocks over all layers, 1000 on the replica */
	assert_int_equal(medha_kvplace_fits_ever(&full, 40000, why,
	                     sizeof(why)),
	    0);
	assert_int_equal(medha_kvplace_fits_ever(&pl, 40000, why, sizeof(why)),
	    1);
	assert_int_equal(medha_kvplace_admit(&pl, &l, 40000, 30000), 0);
	{
		double formula = (10.0 * 40000 + 52.0 * 1536) / 62 / 16;
		assert_int_equal(l.res_blocks[0],
		    (10 * 2500 + 52 * 97 + 61) / 62);
		assert_true(fabs(l.res_blocks[0] - formula) < 0.1 * formula);
	}
	/* short requests: every layer holds all of it */
	{
		struct medha_kvlease s;
		assert_int_equal(medha_kvplace_admit(&pl, &s, 800, 800), 0);
		assert_int_equal(s.res_blocks[0], 50);
		medha_kvplace_release(&pl, &s);
	}
	/* it grows by the global layers' share only */
	for (int64_t kv = 40001; kv <= 48000; kv++) {
		assert_int_equal(medha_kvplace_grow(&pl, &l, kv, &g), 0);
		memset(sum, 0, sizeof(sum));
		assert_int_equal(medha_kvplace_check_lease(&pl, &l, kv, sum,
		                     why, sizeof(why)),
		    0);
	}
	assert_int_equal(l.res_blocks[0], (10 * 3000 + 52 * 97 + 61) / 62);
	assert_int_equal(medha_kvplace_check(&pl, sum, why, sizeof(why)), 0);
	medha_kvplace_release(&pl, &l);
	assert_int_equal(pl.res[0], 0);

	/* KVP: each piece reserves its window layers' most, the window */
	assert_int_equal(medha_kvplace_init(&pl, 3, 16, 1000, 8000), 0);
	assert_int_equal(medha_kvplace_window(&pl, 62, 52, 1536), 0);
	assert_int_equal(pl.group_tokens, 8000); /* the limit stays */
	assert_int_equal(medha_kvplace_admit(&pl, &l, 20000, 20000), 0);
	assert_int_equal(l.n_groups, 3);
	assert_int_equal(l.res_blocks[0], (10 * 500 + 52 * 97 + 61) / 62);
	assert_int_equal(l.res_blocks[2], (10 * 250 + 52 * 97 + 61) / 62);
	medha_kvplace_release(&pl, &l);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init),
	    cmocka_unit_test(test_pieces),
	    cmocka_unit_test(test_fits_ever),
	    cmocka_unit_test(test_admit_choice),
	    cmocka_unit_test(test_refusal),
	    cmocka_unit_test(test_pending),
	    cmocka_unit_test(test_checks),
	    cmocka_unit_test(test_random),
	    cmocka_unit_test(test_grow),
	    cmocka_unit_test(test_window),
	    cmocka_unit_test(test_work_without_prompt),
	    cmocka_unit_test(test_check_past_last_piece),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

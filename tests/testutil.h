/*
 * testutil.h: what the unit tests share, so that each test does not keep
 * its own copy. Header-only, for tests: include it after <cmocka.h> (its
 * helpers assert with cmocka). tinymodel.h includes it.
 *
 *	rng_seed(7);
 *	x = frand();                        the same numbers on every run
 *	kv = kv_new(MEDHA_KV_F16, 10, NL, NKV, HD);
 *	tmp_name(path, sizeof(path));       a fresh empty file; unlink it
 *	f = tmp_file(path, sizeof(path));   the same, open
 *	if (!available)
 *		skip_why("no %s", what);    tests/run.sh shows the reason
 */
#ifndef MEDHA_TESTUTIL_H
#define MEDHA_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/kvcache.h"

/* ---- a deterministic generator ---- */

static uint64_t rng_state = 1;

/* Start the sequence of frand() over from seed s. */
static inline void
rng_seed(uint64_t s)
{
	rng_state = s * 2862933555777941757ull + 3037000493ull;
}

/* The next number of the sequence, uniform in [-1, 1). */
static inline float
frand(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng_state >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* ---- a KV cache shaped for a test model ---- */

/*
 * A KV cache of blocks blocks of type (MEDHA_KV_F16, ...), for a model of
 * n_layers layers of n_kv_heads KV heads of head_dim each, holding at
 * most 8 sequences. The caller owns it (medha_kvcache_free).
 */
static inline struct medha_kvcache *
kv_new(int type, int64_t blocks, int n_layers, int n_kv_heads, int head_dim)
{
	struct medha_kvcache *kv;
	struct medha_kv_config c = {.n_layers = n_layers,
	    .n_kv_heads = n_kv_heads,
	    .head_dim = head_dim,
	    .n_blocks = blocks,
	    .type = type,
	    .max_seqs = 8};

	assert_int_equal(medha_kvcache_init(&kv, &c), 0);
	return kv;
}

/* ---- temporary files ---- */

/*
 * A fresh empty file in $TMPDIR (/tmp without it), open for reading and
 * writing: its name is left in path (len bytes). The caller closes and
 * unlinks it.
 */
static inline FILE *
tmp_file(char *path, size_t len)
{
	const char *dir = getenv("TMPDIR");
	FILE *f;
	int fd, n;

	if (dir == NULL || *dir == '\0')
		dir = "/tmp";
	n = snprintf(path, len, "%s/medha-test-XXXXXX", dir);
	assert_true(n > 0 && (size_t)n < len);
	assert_true((fd = mkstemp(path)) >= 0);
	assert_non_null(f = fdopen(fd, "w+b"));
	return f;
}

/* The same, closed: its name is left in path; the caller unlinks it. */
static inline void
tmp_name(char *path, size_t len)
{
	assert_int_equal(fclose(tmp_file(path, len)), 0);
}

/* ---- skips ---- */

/*
 * skip_why(FORMAT, ...): skip the running test, saying why on a line
 * "skip: REASON" just before cmocka's "# SKIP", where tests/run.sh
 * takes the reason from.
 */
#define skip_why(...)                \
	do {                         \
		printf("skip: ");    \
		printf(__VA_ARGS__); \
		printf("\n");        \
		skip();              \
	} while (0)

#endif

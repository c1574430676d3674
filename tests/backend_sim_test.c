/*
 * backend_sim_test.c: the sim backend (libcore/engine/backend_sim.c)
 * through the backend interface, and the registry of backends by name
 * (engine/registry.c).
 *
 * Every sim backend here is opened with a large speed-up, so that its
 * waits (the predicted batch time divided by the speed-up) are tens of
 * microseconds. The checks:
 *  - info: the model's shape, the layers of its SPP stage, blocks of
 *    MEDHA_KV_BLOCK, as many blocks as the predictor gives the layout at
 *    a memory use of 0.9 (or kv_blocks), max_seqs (1024 by default), and
 *    the registry's capabilities for "sim" (no numerics);
 *  - sequences: handles up to max_seqs and, for sequences kept for
 *    prefix caching, one a KV block beyond (MEDHA_BACKEND_FORK),
 *    MEDHA_ENOSPACE past them, bad handles refused or ignored as
 *    backend.h says;
 *  - forks and trims (prefix caching): full blocks shared, a partial
 *    one copied, a shared block copied before a batch writes to it, the
 *    pool's count after each as the cpu backend's paged cache gives it;
 *  - forward: each sequence with a sampler gets the placeholder
 *    medha_backend_sim_token(pos + n_tokens, vocab), the others -1;
 *    cached lengths and the KV block count follow every batch (a
 *    rewind gives blocks back, a freed sequence all of its own); a
 *    batch that needs more blocks than are free is refused with
 *    MEDHA_ENOSPACE and changes nothing; bad sequences, positions and
 *    calls are refused with MEDHA_EINVAL; KVP pieces count from their
 *    base, and an entry that does not append leaves its cache alone;
 *  - a call waits at least (a generous fraction of) the predicted time
 *    over the speed-up: the backend does wait;
 *  - bad options are refused with the documented codes and a reason;
 *  - the registry: cpu, sim and cuda with their capabilities, an
 *    unknown name and cuda (not built) refused with MEDHA_EUNSUP and a
 *    reason, and sim opened through medha_backend_open.
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
#include "engine/backend.h"
#include "engine/backend_sim.h"
#include "model/sample.h"
#include "sched/batchcost.h"
#include "sched/pred.h"

#define SPEED 1000.0 /* waits divided by this */

static struct medha_backend *
sim_open(const char *model, int tp, int spp, int stage, int max_seqs,
    int64_t kv_blocks)
{
	struct medha_backend_sim_opts o = {.gpu = "a100",
	    .model = model,
	    .tp = tp,
	    .spp = spp,
	    .stage = stage,
	    .max_seqs = max_seqs,
	    .kv_blocks = kv_blocks,
	    .speed = SPEED};
	struct medha_backend *be;
	char why[256];

	if (medha_backend_sim_open(&be, &o, why, sizeof(why)) != 0)
		fail_msg("sim: %s", why);
	assert_non_null(be);
	return be;
}

/* KV blocks the predictor gives one worker of the layout. */
static int64_t
pred_blocks(const char *model, int tp, int spp, int kvp)
{
	struct medha_pred_model m;
	struct medha_pred p;
	int64_t n;

	assert_int_equal(medha_model_resolve(model, &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, tp,
	                     spp, kvp),
	    0);
	n = medha_pred_kv_capacity(&p, 0.9) / MEDHA_KV_BLOCK;
	medha_pred_free(&p);
	return n;
}

/* ---- info ---- */

static void
test_info(void **state)
{
	const struct medha_backend_kind *k = medha_backend_find("sim");
	struct medha_pred_model m;
	struct medha_backend *be;
	int lo, hi;

	(void)state;
	assert_non_null(k);
	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	be = sim_open("llama3-8b", 0, 0, 0, 0, 0);
	assert_string_equal(be->info.name, "sim");
	assert_int_equal(be->info.shape.n_layers, m.c.n_layers);
	assert_int_equal(be->info.shape.dim, m.c.dim);
	assert_int_equal(be->info.shape.vocab, m.c.vocab);
	assert_int_equal(be->info.shape.n_heads, m.c.n_heads);
	assert_int_equal(be->info.shape.n_kv_heads, m.c.n_kv_heads);
	assert_int_equal(be->info.shape.vocab, 128256);
	assert_int_equal(be->info.layer_lo, 0);
	assert_int_equal(be->info.layer_hi, m.c.n_layers);
	assert_int_equal(be->info.block_size, MEDHA_KV_BLOCK);
	assert_true(be->info.n_blocks > 1000);
	assert_int_equal(be->info.n_blocks, pred_blocks("llama3-8b", 1, 1, 1));
	assert_int_equal(be->info.max_seqs, 1024);
	assert_int_equal(be->info.caps, k->caps);
	assert_false(be->info.caps & MEDHA_BACKEND_COMPUTES);
	assert_int_equal(medha_backend_free_blocks(be), be->info.n_blocks);
	/* no seq_fill on sim */
	assert_int_equal(medha_backend_seq_fill(be, 0, 5), MEDHA_EUNSUP);
	medha_backend_close(be);

	/* TP 8 holds an eighth of the weights: more room for KV */
	be = sim_open("llama3-8b", 8, 0, 0, 0, 0);
	assert_int_equal(be->info.n_blocks, pred_blocks("llama3-8b", 8, 1, 1));
	assert_true(be->info.n_blocks > pred_blocks("llama3-8b", 1, 1, 1));
	medha_backend_close(be);

	/* an SPP stage runs its layers; kv_blocks and max_seqs as given */
	be = sim_open("llama3-8b", 1, 2, 1, 3, 100);
	assert_int_equal(be->info.layer_lo, 16);
	assert_int_equal(be->info.layer_hi, 32);
	assert_int_equal(be->info.n_blocks, 100);
	assert_int_equal(be->info.max_seqs, 3);
	assert_int_equal(medha_backend_free_blocks(be), 100);
	medha_backend_close(be);
	be = sim_open("llama3-8b", 1, 3, 0, 0, 10);
	medha_stage_layers(32, 3, 0, &lo, &hi);
	assert_int_equal(be->info.layer_lo, lo);
	assert_int_equal(be->info.layer_hi, hi);
	assert_int_equal(hi - lo, 11); /* earlier stages take one more */
	medha_backend_close(be);

	/* the placeholder: in the vocabulary, a function of pos alone */
	{
		int differ = 0;
		for (int64_t pos = 0; pos < 1000; pos++) {
			int32_t t = medha_backend_sim_token(pos, 97);
			assert_true(t >= 0 && t < 97);
			assert_int_equal(t, medha_backend_sim_token(pos, 97));
			differ += t != medha_backend_sim_token(pos + 1, 97);
		}
		assert_true(differ > 900);
		assert_int_equal(medha_backend_sim_token(12345, 1), 0);
	}
}

/* ---- sequences ---- */

static void
test_seqs(void **state)
{
	struct medha_backend *be = sim_open("smollm2-135m", 0, 0, 0, 3, 50);
	int a, b, c, d, k[50];

	(void)state;
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &b), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &c), 0);
	assert_true(a != b && b != c && a != c);
	/* kept sequences beyond max_seqs: one a block */
	for (int i = 0; i < 50; i++)
		assert_int_equal(medha_backend_seq_alloc(be, &k[i]), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &d), MEDHA_ENOSPACE);
	for (int i = 0; i < 50; i++)
		medha_backend_seq_free(be, k[i]);
	assert_int_equal(medha_backend_seq_len(be, a), 0);
	assert_int_equal(medha_backend_seq_len(be, -1), MEDHA_EINVAL);
	assert_int_equal(medha_backend_seq_len(be, 53), MEDHA_EINVAL);
	assert_int_equal(medha_backend_seq_len(be, 1 << 20), MEDHA_EINVAL);
	medha_backend_seq_free(be, b);
	assert_int_equal(medha_backend_seq_len(be, b), MEDHA_EINVAL);
	/* bad handles, and a second free, are ignored */
	medha_backend_seq_free(be, b);
	medha_backend_seq_free(be, -7);
	medha_backend_seq_free(be, 99);
	assert_int_equal(medha_backend_free_blocks(be), 50);
	assert_int_equal(medha_backend_seq_alloc(be, &d), 0);
	assert_int_equal(d, b);
	assert_int_equal(medha_backend_seq_len(be, d), 0);
	medha_backend_close(be);
	medha_backend_close(NULL);
}

/* ---- forward ---- */

struct call {
	struct medha_batch_seq s[4];
	int32_t ids[512];
	struct medha_batch b;
	struct medha_sampler *smp[4];
	int32_t tok[4];
	struct medha_fwd f;
};

/* A batch of n sequences: seq, pos, n_tokens, sample (then LAST logits;
 * else lg), with ids i % 50. */
static void
call_init(struct call *c, struct medha_backend *be, int n, const int *seq,
    const int64_t *pos, const int *nt, const int *sample, const int *lg,
    struct medha_sampler *greedy)
{
	int k = 0;

	memset(c, 0, sizeof(*c));
	for (int i = 0; i < n; i++) {
		c->s[i] = (struct medha_batch_seq){seq[i], pos[i], nt[i],
		    sample[i] ? MEDHA_LOGITS_LAST : lg[i]};
		c->smp[i] = sample[i] ? greedy : NULL;
		for (int t = 0; t < nt[i]; t++, k++)
			c->ids[k] = k % 50;
	}
	c->b = (struct medha_batch){c->ids, k, c->s, n};
	c->f = (struct medha_fwd){.b = &c->b,
	    .layer_lo = be->info.layer_lo,
	    .layer_hi = be->info.layer_hi,
	    .samplers = c->smp,
	    .tokens = c->tok};
}

static int
run(struct medha_backend *be, struct call *c, char *why, size_t whylen)
{
	return medha_backend_forward(be, &c->f, why, whylen);
}

static void
test_forward(void **state)
{
	struct medha_backend *be = sim_open("smollm2-135m", 0, 0, 0, 4, 8);
	const int vocab = be->info.shape.vocab;
	struct medha_sampler *g;
	struct call c;
	char why[256];
	int a, b;

	(void)state;
	assert_int_equal(vocab, 49152);
	assert_int_equal(medha_sampler_init(&g, &medha_sampling_greedy, vocab),
	    0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &b), 0);

	/* two prompts: a sampled, b a chunk without logits */
	call_init(&c, be, 2, (int[]){a, b}, (int64_t[]){0, 0}, (int[]){20, 5},
	    (int[]){1, 0}, (int[]){0, MEDHA_LOGITS_NONE}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(20, vocab));
	assert_int_equal(c.tok[1], -1);
	assert_int_equal(medha_backend_seq_len(be, a), 20);
	assert_int_equal(medha_backend_seq_len(be, b), 5);
	assert_int_equal(medha_backend_free_blocks(be), 8 - 2 - 1);

	/* a decode of each, both sampled */
	call_init(&c, be, 2, (int[]){a, b}, (int64_t[]){20, 5}, (int[]){1, 1},
	    (int[]){1, 1}, (int[]){0, 0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(21, vocab));
	assert_int_equal(c.tok[1], medha_backend_sim_token(6, vocab));
	assert_int_equal(medha_backend_seq_len(be, a), 21);
	assert_int_equal(medha_backend_seq_len(be, b), 6);
	assert_int_equal(medha_backend_free_blocks(be), 8 - 2 - 1);

	/* other ids at the same position: the same placeholder; logits
	 * wanted without a sampler: no token */
	call_init(&c, be, 2, (int[]){b, a}, (int64_t[]){6, 21}, (int[]){1, 11},
	    (int[]){0, 1}, (int[]){MEDHA_LOGITS_LAST, 0}, g);
	c.ids[0] = 49151;
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], -1);
	assert_int_equal(c.tok[1], medha_backend_sim_token(32, vocab));
	assert_int_equal(medha_backend_seq_len(be, a), 32);
	assert_int_equal(medha_backend_free_blocks(be), 8 - 2 - 1);
	/* one more position takes a third block */
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){32}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(33, vocab));
	assert_int_equal(medha_backend_free_blocks(be), 8 - 3 - 1);

	/* a rewind forgets the tail and gives its blocks back */
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){10}, (int[]){2},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(12, vocab));
	assert_int_equal(medha_backend_seq_len(be, a), 12);
	assert_int_equal(medha_backend_free_blocks(be), 8 - 1 - 1);

	/* without samplers: nothing sampled, lengths still move */
	call_init(&c, be, 1, (int[]){b}, (int64_t[]){7}, (int[]){3}, (int[]){0},
	    (int[]){MEDHA_LOGITS_ALL}, g);
	c.f.samplers = NULL;
	c.f.tokens = NULL;
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_seq_len(be, b), 10);

	/* freeing gives every block of the sequence back */
	medha_backend_seq_free(be, a);
	assert_int_equal(medha_backend_free_blocks(be), 8 - 1);
	medha_backend_seq_free(be, b);
	assert_int_equal(medha_backend_free_blocks(be), 8);
	medha_sampler_free(g);
	medha_backend_close(be);
}

/* ---- KV memory ---- */

static void
test_enospace(void **state)
{
	struct medha_backend *be = sim_open("smollm2-135m", 0, 0, 0, 4, 4);
	const int vocab = be->info.shape.vocab;
	struct medha_sampler *g;
	struct call c;
	char why[256];
	int a, b;

	(void)state;
	assert_int_equal(medha_sampler_init(&g, &medha_sampling_greedy, vocab),
	    0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &b), 0);
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){48},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_free_blocks(be), 1);

	/* a's step into a fourth block and b's 32 tokens: 3 needed, 1 free */
	call_init(&c, be, 2, (int[]){a, b}, (int64_t[]){48, 0}, (int[]){1, 32},
	    (int[]){1, 1}, (int[]){0, 0}, g);
	why[0] = '\0';
	assert_int_equal(run(be, &c, why, sizeof(why)), MEDHA_ENOSPACE);
	assert_non_null(strstr(why, "3 KV blocks needed, 1 free"));
	/* nothing changed */
	assert_int_equal(medha_backend_seq_len(be, a), 48);
	assert_int_equal(medha_backend_seq_len(be, b), 0);
	assert_int_equal(medha_backend_free_blocks(be), 1);

	/* b's 16 tokens take the last block; then a has none */
	call_init(&c, be, 1, (int[]){b}, (int64_t[]){0}, (int[]){16},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_free_blocks(be), 0);
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){48}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	assert_int_equal(run(be, &c, why, sizeof(why)), MEDHA_ENOSPACE);
	assert_int_equal(medha_backend_seq_len(be, a), 48);
	/* b's next step needs a second block: none; rewriting positions
	 * within the block it holds needs none */
	call_init(&c, be, 1, (int[]){b}, (int64_t[]){16}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	assert_int_equal(run(be, &c, why, sizeof(why)), MEDHA_ENOSPACE);
	call_init(&c, be, 1, (int[]){b}, (int64_t[]){10}, (int[]){6},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(16, vocab));
	/* b freed: a goes on */
	medha_backend_seq_free(be, b);
	assert_int_equal(medha_backend_free_blocks(be), 1);
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){48}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(49, vocab));
	assert_int_equal(medha_backend_free_blocks(be), 0);
	medha_sampler_free(g);
	medha_backend_close(be);
}

/* ---- forks and trims (prefix caching) ---- */

static void
test_fork(void **state)
{
	struct medha_backend *be = sim_open("smollm2-135m", 0, 0, 0, 4, 10);
	const int vocab = be->info.shape.vocab;
	struct medha_sampler *g;
	struct call c;
	char why[256];
	int a, b, d;

	(void)state;
	assert_int_equal(medha_sampler_init(&g, &medha_sampling_greedy, vocab),
	    0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &b), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &d), 0);
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){40},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 3);
	/* b takes a's 40: two full blocks shared, the partial one copied */
	assert_int_equal(medha_backend_seq_fork(be, b, a, 0, 40), 0);
	assert_int_equal(medha_backend_seq_len(be, b), 40);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 4);
	/* b's tokens go to its own copy: no block taken */
	call_init(&c, be, 1, (int[]){b}, (int64_t[]){40}, (int[]){8},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(c.tok[0], medha_backend_sim_token(48, vocab));
	assert_int_equal(medha_backend_free_blocks(be), 10 - 4);
	/* a ends, trimmed to its 32 cached positions: its partial block
	   goes; then d forks the two full blocks from it */
	assert_int_equal(medha_backend_seq_trim(be, a, 32), 0);
	assert_int_equal(medha_backend_seq_len(be, a), 32);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 3);
	assert_int_equal(medha_backend_seq_trim(be, a, 33), MEDHA_EINVAL);
	assert_int_equal(medha_backend_seq_fork(be, d, a, 0, 32), 0);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 3);
	/* a write into a shared block copies it first (copy on write): d
	   rewriting position 20 takes one block, and needs it free */
	call_init(&c, be, 1, (int[]){d}, (int64_t[]){20}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_seq_len(be, d), 21);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 4);
	/* freeing a leaves its blocks to b and d; b's last holder frees */
	medha_backend_seq_free(be, a);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 4);
	medha_backend_seq_free(be, d);
	assert_int_equal(medha_backend_free_blocks(be), 10 - 3);
	medha_backend_seq_free(be, b);
	assert_int_equal(medha_backend_free_blocks(be), 10);
	/* a fork from nothing, or to a non-empty sequence, is refused */
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_fork(be, a, b, 0, 16), MEDHA_EINVAL);
	medha_sampler_free(g);
	medha_backend_close(be);
}

/* ---- malformed calls ---- */

static void
test_refused(void **state)
{
	struct medha_backend *be = sim_open("smollm2-135m", 0, 0, 0, 4, 8);
	struct medha_backend *st;
	const int vocab = be->info.shape.vocab;
	struct medha_sampler *g;
	struct call c;
	char why[256];
	float *h;
	int a, b;

	(void)state;
	assert_int_equal(medha_sampler_init(&g, &medha_sampling_greedy, vocab),
	    0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &b), 0);
	medha_backend_seq_free(be, b);

#define REFUSED(code, what)                                               \
	do {                                                              \
		why[0] = '\0';                                            \
		assert_int_equal(run(be, &c, why, sizeof(why)), (code));  \
		if (strstr(why, (what)) == NULL)                          \
			fail_msg("reason \"%s\", not \"%s\"", why, what); \
		assert_int_equal(medha_backend_seq_len(be, a), 0);        \
		assert_int_equal(medha_backend_free_blocks(be), 8);       \
	} while (0)

	/* a sequence freed, or never made */
	call_init(&c, be, 2, (int[]){a, b}, (int64_t[]){0, 0}, (int[]){4, 4},
	    (int[]){1, 1}, (int[]){0, 0}, g);
	REFUSED(MEDHA_EINVAL, "not allocated");
	call_init(&c, be, 1, (int[]){77}, (int64_t[]){0}, (int[]){4},
	    (int[]){1}, (int[]){0}, g);
	REFUSED(MEDHA_EINVAL, "not allocated");
	/* a position past the cached length */
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){1}, (int[]){4}, (int[]){1},
	    (int[]){0}, g);
	REFUSED(MEDHA_EINVAL, "position");
	/* the interface's own checks */
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){4}, (int[]){1},
	    (int[]){0}, g);
	c.ids[2] = vocab;
	REFUSED(MEDHA_EINVAL, "outside the vocabulary");
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){4}, (int[]){1},
	    (int[]){0}, g);
	c.s[0].logits = MEDHA_LOGITS_ALL;
	REFUSED(MEDHA_EINVAL, "a sampler");
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){4}, (int[]){1},
	    (int[]){0}, g);
	c.f.layer_hi = be->info.layer_hi + 1;
	REFUSED(MEDHA_EINVAL, "layers");
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){4}, (int[]){1},
	    (int[]){0}, g);
	c.b.n_tokens = 5;
	REFUSED(MEDHA_EINVAL, "sequences hold 4 tokens");
#undef REFUSED

	/* a first stage: hidden states out, no samples */
	st = sim_open("smollm2-135m", 0, 2, 0, 4, 8);
	h = calloc((size_t)4 * st->info.shape.dim, sizeof(float));
	assert_non_null(h);
	assert_int_equal(medha_backend_seq_alloc(st, &b), 0);
	call_init(&c, st, 1, (int[]){b}, (int64_t[]){0}, (int[]){4}, (int[]){1},
	    (int[]){0}, g);
	c.f.h_out = h;
	assert_int_equal(medha_backend_forward(st, &c.f, why, sizeof(why)),
	    MEDHA_EINVAL);
	c.f.samplers = NULL;
	c.f.tokens = NULL;
	if (medha_backend_forward(st, &c.f, why, sizeof(why)) != 0)
		fail_msg("stage 0: %s", why);
	assert_int_equal(medha_backend_seq_len(st, b), 4);
	free(h);
	medha_backend_close(st);
	medha_sampler_free(g);
	medha_backend_close(be);
}

/* ---- KVP pieces ---- */

/* collectives that must not be reached: the wrapper refuses first */
static int
no_exchange(void *arg, int layer, int group, const void *buf, size_t len,
    void *rbuf, size_t rlen, int mem, char *why, size_t whylen)
{
	(void)arg, (void)layer, (void)group, (void)buf, (void)len;
	(void)rbuf, (void)rlen, (void)mem;
	return medha_why(why, whylen, MEDHA_EIO, "exchange reached");
}

static void
test_kvp(void **state)
{
	struct medha_backend *be = sim_open("smollm2-135m", 0, 0, 0, 4, 8);
	const int vocab = be->info.shape.vocab;
	struct medha_batch_kv kv[2];
	struct medha_sampler *g;
	struct call c;
	char why[256];
	int a, b;

	(void)state;
	assert_int_equal(medha_sampler_init(&g, &medha_sampling_greedy, vocab),
	    0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &b), 0);
	/* a holds the piece from 64: tokens [64, 80) are its first 16;
	 * b only attends (its piece is elsewhere): its cache is untouched */
	call_init(&c, be, 2, (int[]){a, b}, (int64_t[]){64, 90}, (int[]){16, 1},
	    (int[]){1, 1}, (int[]){0, 0}, g);
	kv[0] = (struct medha_batch_kv){.base = 64, .append = 1};
	kv[1] = (struct medha_batch_kv){.base = 0, .append = 0};
	c.f.kv = kv;
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_seq_len(be, a), 16);
	assert_int_equal(medha_backend_seq_len(be, b), 0);
	assert_int_equal(medha_backend_free_blocks(be), 7);
	/* tokens go by the request's positions */
	assert_int_equal(c.tok[0], medha_backend_sim_token(80, vocab));
	assert_int_equal(c.tok[1], medha_backend_sim_token(91, vocab));
	/* a position before the piece's base, or past its end, is refused */
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){60}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	kv[0] = (struct medha_batch_kv){.base = 64, .append = 1};
	c.f.kv = kv;
	assert_int_equal(run(be, &c, why, sizeof(why)), MEDHA_EINVAL);
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){81}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	c.f.kv = kv;
	assert_int_equal(run(be, &c, why, sizeof(why)), MEDHA_EINVAL);
	assert_int_equal(medha_backend_seq_len(be, a), 16);
	/* a merge needs the collectives */
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){80}, (int[]){1},
	    (int[]){1}, (int[]){0}, g);
	kv[0] = (struct medha_batch_kv){.base = 64,
	    .append = 1,
	    .merge = 1,
	    .groups = 3};
	c.f.kv = kv;
	assert_int_equal(run(be, &c, why, sizeof(why)), MEDHA_EINVAL);
	assert_non_null(strstr(why, "collectives"));
	/* and groups that are two or more of the comm's, this one's in */
	{
		static const uint64_t bad[] = {0, 1, 2, 4, 6};
		struct medha_comm cm = {.exchange = no_exchange,
		    .kvp = 2,
		    .kvp_rank = 0};
		for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
			call_init(&c, be, 1, (int[]){a}, (int64_t[]){80},
			    (int[]){1}, (int[]){1}, (int[]){0}, g);
			kv[0].groups = bad[k];
			c.f.kv = kv;
			c.f.comm = &cm;
			assert_int_equal(run(be, &c, why, sizeof(why)),
			    MEDHA_EINVAL);
			assert_non_null(strstr(why, "KVP merge of groups"));
		}
	}
	medha_sampler_free(g);
	medha_backend_close(be);
}

/* ---- it waits ---- */

static void
test_waits(void **state)
{
	struct medha_backend *be = sim_open("llama3-8b", 0, 0, 0, 4, 100);
	struct medha_pred_model m;
	struct medha_pred p;
	struct medha_fwd_times t;
	struct call c;
	char why[256];
	double lone;
	int a;

	(void)state;
	assert_int_equal(medha_model_resolve("llama3-8b", &m), 0);
	assert_int_equal(medha_pred_init(&p, medha_gpu_find("a100"), &m, 1, 1,
	                     1),
	    0);
	lone = medha_cost_lone(&p, 512, 0).latency;
	medha_pred_free(&p);
	assert_true(lone > 0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	call_init(&c, be, 1, (int[]){a}, (int64_t[]){0}, (int[]){512},
	    (int[]){0}, (int[]){MEDHA_LOGITS_LAST}, NULL);
	c.f.samplers = NULL;
	c.f.tokens = NULL;
	c.f.times = &t;
	if (run(be, &c, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	/* a lower bound only: the sleep never ends early */
	if (!(t.total >= 0.5 * lone / SPEED))
		fail_msg("a prefill of 512 took %g s, predicted %g s / %g",
		    t.total, lone, SPEED);
	assert_int_equal(t.split, 0);
	medha_backend_close(be);
}

/* ---- bad options ---- */

static void
test_bad_options(void **state)
{
	struct medha_backend_sim_opts o;
	struct medha_backend *be;
	char why[256];

	(void)state;
#define BAD(code, what)                                                   \
	do {                                                              \
		why[0] = '\0';                                            \
		be = (struct medha_backend *)&o;                          \
		assert_int_equal(medha_backend_sim_open(&be, &o, why,     \
		                     sizeof(why)),                        \
		    (code));                                              \
		assert_null(be);                                          \
		if (strstr(why, (what)) == NULL)                          \
			fail_msg("reason \"%s\", not \"%s\"", why, what); \
	} while (0)
#define BASE()                                              \
	(o = (struct medha_backend_sim_opts){.gpu = "a100", \
	     .model = "llama3-8b",                          \
	     .speed = SPEED})

	BASE();
	o.gpu = NULL;
	BAD(MEDHA_ENOTFOUND, "GPU");
	BASE();
	o.gpu = "z80";
	BAD(MEDHA_ENOTFOUND, "z80");
	BASE();
	o.model = NULL;
	BAD(MEDHA_EINVAL, "no model");
	BASE();
	o.model = "no-such-model";
	BAD(MEDHA_ENOTFOUND, "");
	BASE();
	o.max_seqs = -1;
	BAD(MEDHA_EINVAL, "negative");
	BASE();
	o.kv_blocks = -1;
	BAD(MEDHA_EINVAL, "negative");
	BASE();
	o.speed = -1;
	BAD(MEDHA_EINVAL, "negative");
	BASE();
	o.spp = 2;
	o.stage = 2;
	BAD(MEDHA_EINVAL, "stage 2");
	BASE();
	o.stage = -1;
	BAD(MEDHA_EINVAL, "stage -1");
	BASE();
	o.tp = 3; /* does not divide 32 heads */
	BAD(MEDHA_EINVAL, "tp 3");
	BASE();
	o.spp = 33; /* more stages than layers */
	BAD(MEDHA_EINVAL, "spp 33");
	BASE();
	o.model = "llama3-70b"; /* 140 GB of weights on one 80 GB GPU */
	BAD(MEDHA_ENOSPACE, "no memory for KV");
	BASE();
	o.table = "/nonexistent/profile.csv";
	BAD(MEDHA_EIO, "");
#undef BAD
#undef BASE
	/* what is left of the capacity is what it gets (8 x a100) */
	o = (struct medha_backend_sim_opts){.gpu = "a100",
	    .model = "llama3-70b",
	    .tp = 8,
	    .speed = SPEED};
	if (medha_backend_sim_open(&be, &o, why, sizeof(why)) != 0)
		fail_msg("70b on tp 8: %s", why);
	assert_int_equal(be->info.n_blocks, pred_blocks("llama3-70b", 8, 1, 1));
	medha_backend_close(be);
}

/* ---- the registry ---- */

/* The registry's device questions: cpu and sim have none to describe;
   cuda's come from its runtime where it is built (a GPU described, or
   "no CUDA device" said), and a build without it says so. */
static void
registry_devices(void)
{
	struct medha_backend_device d;
	char why[256];
	int rc;

	assert_int_equal(medha_backend_device("cpu", 0, &d, why, sizeof(why)),
	    MEDHA_EUNSUP);
	assert_non_null(strstr(why, "no devices to describe"));
	assert_int_equal(medha_backend_device("sim", 0, &d, why, sizeof(why)),
	    MEDHA_EUNSUP);
	assert_int_equal(medha_backend_device("x", 0, &d, why, sizeof(why)),
	    MEDHA_EUNSUP);
	assert_non_null(strstr(why, "unknown"));
	rc = medha_backend_device("cuda", 0, &d, why, sizeof(why));
#ifdef MEDHA_CUDA
	if (rc == 0) {
		assert_true(d.name[0] != '\0');
		assert_true(d.cc_major > 0);
		assert_int_equal(medha_backend_device("cuda", -1, &d, why,
		                     sizeof(why)),
		    MEDHA_EINVAL);
	} else {
		assert_int_equal(rc, MEDHA_EUNSUP);
		assert_non_null(strstr(why, "cuda: no CUDA device"));
	}
#else
	assert_int_equal(rc, MEDHA_EUNSUP);
	assert_non_null(strstr(why, "not built into this program"));
#endif
}

static void
test_registry(void **state)
{
	const struct medha_backend_kind *k, *cpu, *sim, *cuda;
	struct medha_backend_params p;
	struct medha_backend *be;
	char why[256];
	int n;

	(void)state;
	k = medha_backend_kinds(&n);
	assert_int_equal(n, 3);
	assert_string_equal(k[0].name, "cpu");
	assert_string_equal(k[1].name, "sim");
	assert_string_equal(k[2].name, "cuda");
	for (int i = 0; i < n; i++) {
		assert_non_null(k[i].about);
		assert_true(k[i].about[0] != '\0');
		assert_ptr_equal(medha_backend_find(k[i].name), &k[i]);
	}
	cpu = medha_backend_find("cpu");
	sim = medha_backend_find("sim");
	cuda = medha_backend_find("cuda");
	assert_null(medha_backend_find("x"));
	assert_null(medha_backend_find(""));
	assert_null(medha_backend_find(NULL));
	assert_null(medha_backend_find("cpu "));
	/* cpu: the reference, real numerics on every layout */
	assert_true(cpu->caps & MEDHA_BACKEND_COMPUTES);
	assert_true(cpu->caps & MEDHA_BACKEND_TP);
	assert_true(cpu->caps & MEDHA_BACKEND_SPP);
	assert_true(cpu->caps & MEDHA_BACKEND_KVP);
	assert_true(cpu->caps & MEDHA_BACKEND_FILL);
	assert_false(cpu->caps & MEDHA_BACKEND_GPU);
	assert_non_null(cpu->open);
	/* sim: layouts, no numerics, no fill */
	assert_false(sim->caps & MEDHA_BACKEND_COMPUTES);
	assert_false(sim->caps & MEDHA_BACKEND_FILL);
	assert_false(sim->caps & MEDHA_BACKEND_GPU);
	assert_true(sim->caps & MEDHA_BACKEND_TP);
	assert_true(sim->caps & MEDHA_BACKEND_SPP);
	assert_true(sim->caps & MEDHA_BACKEND_KVP);
	assert_true(sim->caps & MEDHA_BACKEND_FORK);
	assert_non_null(sim->open);
	/* cuda: known, on a GPU; built in with MEDHA_CUDA (CUDA=1) */
	assert_true(cuda->caps & MEDHA_BACKEND_GPU);
	assert_true(cuda->caps & MEDHA_BACKEND_COMPUTES);
	assert_true(cuda->caps & MEDHA_BACKEND_TP);
	assert_true(cuda->caps & MEDHA_BACKEND_SPP);
	assert_true(cuda->caps & MEDHA_BACKEND_KVP);
	assert_true(cuda->caps & MEDHA_BACKEND_FILL);
#ifdef MEDHA_CUDA
	assert_non_null(cuda->open);
#else
	assert_null(cuda->open);
#endif
	registry_devices();

	memset(&p, 0, sizeof(p));
	be = (struct medha_backend *)&p;
	why[0] = '\0';
	assert_int_equal(medha_backend_open(&be, "x", &p, why, sizeof(why)),
	    MEDHA_EUNSUP);
	assert_null(be);
	assert_non_null(strstr(why, "backend x"));
	be = (struct medha_backend *)&p;
	why[0] = '\0';
#ifdef MEDHA_CUDA
	/* without a device it says so; with one, a missing model */
	{
		int rc = medha_backend_open(&be, "cuda", &p, why, sizeof(why));
		assert_null(be);
		if (strstr(why, "no CUDA device") != NULL)
			assert_int_equal(rc, MEDHA_EUNSUP);
		else
			assert_int_equal(rc, MEDHA_EINVAL);
	}
#else
	assert_int_equal(medha_backend_open(&be, "cuda", &p, why, sizeof(why)),
	    MEDHA_EUNSUP);
	assert_null(be);
	assert_non_null(strstr(why, "not built"));
#endif

	/* sim through the registry: its parameters reach it */
	p = (struct medha_backend_params){.model = "llama3-8b",
	    .gpu = "a100",
	    .spp = 2,
	    .stage = 1,
	    .max_seqs = 5,
	    .kv_blocks = 40,
	    .speed = SPEED};
	if (medha_backend_open(&be, "sim", &p, why, sizeof(why)) != 0)
		fail_msg("sim: %s", why);
	assert_string_equal(be->info.name, "sim");
	assert_int_equal(be->info.caps, sim->caps);
	assert_int_equal(be->info.layer_lo, 16);
	assert_int_equal(be->info.layer_hi, 32);
	assert_int_equal(be->info.max_seqs, 5);
	assert_int_equal(be->info.n_blocks, 40);
	medha_backend_close(be);
	/* and its refusals */
	p.gpu = "z80";
	why[0] = '\0';
	assert_int_equal(medha_backend_open(&be, "sim", &p, why, sizeof(why)),
	    MEDHA_ENOTFOUND);
	assert_null(be);
	assert_non_null(strstr(why, "z80"));
	/* cpu through the registry: a file that is not there */
	p = (struct medha_backend_params){.model = "/nonexistent/m.gguf"};
	why[0] = '\0';
	assert_int_not_equal(medha_backend_open(&be, "cpu", &p, why,
	                         sizeof(why)),
	    0);
	assert_null(be);
	assert_true(why[0] != '\0');
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_info),
	    cmocka_unit_test(test_seqs),
	    cmocka_unit_test(test_forward),
	    cmocka_unit_test(test_enospace),
	    cmocka_unit_test(test_fork),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_kvp),
	    cmocka_unit_test(test_waits),
	    cmocka_unit_test(test_bad_options),
	    cmocka_unit_test(test_registry),
	};

	medha_log_level = MEDHA_LOG_ERROR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

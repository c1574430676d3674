/*
 * cpu_test.c: the CPU backend's forward pass (libcore/cpu/cpu.c) and the
 * model it runs (libcore/model/model.c); its kernels are checked on their own
 * in cpu_kernel_test.c.
 *
 * Tiny random Llama models are made in memory (2 layers, hidden 64, 4
 * heads over 2 kv heads of 16, ffn 128, vocab 97; every matrix in one of
 * F32, F16, BF16, Q8_0, Q4_0, Q4_1; tied or separate output). The checks:
 *  - exactness of chunking: a prompt's logits after prefill in chunks of
 *    1, 7, 32, 64 and all at once agree within 1e-5 relative (f32 KV; in
 *    fact they are bit-identical, for 1 and 3 threads), and every
 *    position's logits from one MEDHA_LOGITS_ALL prefill equal those of
 *    one-token steps (f16 KV);
 *  - the KVP test mode: each sequence's keys split into 2, 3 and 4 ranges,
 *    attended apart and merged, give the unsplit logits within 1e-5
 *    relative (f32 activations: F32 weights, and every type in reference
 *    mode; rounded activations turn the merge's last-bit changes into an
 *    occasional rounding step, which is reported, not bounded);
 *  - a mixed batch (a prefill chunk and two decodes of other sequences)
 *    gives each sequence exactly the logits it gets alone;
 *  - the llama_compat mode (llama.cpp's attention order, ggml's exp, its
 *    RoPE fmas) stays within 1e-4 relative of the default on F32
 *    weights, prefill and decode, and is independent of the threads;
 *    its exp, RoPE and SwiGLU agree with the default ones to a few ulps
 *    (its bit-exactness against llama.cpp itself is
 *    contrib/worker-ref.sh's, on the real model);
 *  - TP: two backends of TP ranks 0 and 1 (each with its half of the
 *    heads, rows and cache), run on two threads that all-gather through
 *    memory, give bit for bit the logits of one backend, for every
 *    weight type, fast and reference numerics, f32 and f16 KV; bad
 *    TP shapes are refused;
 *  - KVP: two groups on two threads, each holding one piece of 64
 *    positions of a sequence (either way round), appending where the
 *    tokens fall and merging attention through memory once both pieces
 *    are entered, give the same bits on both groups and the single
 *    backend's logits within 1e-5 relative with f32 activations;
 *  - malformed batches and a full cache are refused with reasons;
 *  - wrong, missing and short tensors are named by the model loader.
 * The largest errors seen are printed (stderr) for the record.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/kvcache.h"
#include "model/model.h"
#include "model/quant.h"
#include "cpu/threadpool.h"
#include "tinymodel.h"

/* ---- tiny models in memory (tinymodel.h) ---- */

#define VOCAB 97
#define DIM 64
#define NH 4
#define NKV 2
#define HD 16
#define FFN 128
#define NL 2

/* nh heads over nkv; matrices of type wt, embedding of type et, output
 * tied or not. */
static void
tm_shape(struct tmodel *tm, int nh, int nkv, int wt, int et, int tied,
    uint64_t seed)
{
	struct medha_model_config c = {.n_layers = NL,
	    .dim = DIM,
	    .n_heads = nh,
	    .n_kv_heads = nkv,
	    .head_dim = HD,
	    .n_rot = HD,
	    .ffn_dim = FFN,
	    .rope_theta = 10000.0f,
	    .norm_eps = 1e-5f};
	char why[256];

	tm_fill(tm, &c, VOCAB, wt, et, tied, seed);
	if (medha_model_build(&tm->m, &tm->c, tm_find, tm, why, sizeof(why)) !=
	    0)
		fail_msg("model: %s", why);
	assert_int_equal(tm->m->c.vocab, VOCAB);
	assert_int_equal(tm->m->tied, tied);
}

static void
tm_make(struct tmodel *tm, int wt, int et, int tied, uint64_t seed)
{
	tm_shape(tm, NH, NKV, wt, et, tied, seed);
}

static struct medha_cpu *
cpu_new(struct tmodel *tm, struct medha_kvcache *kv, int threads, int shards,
    int ref)
{
	struct medha_cpu *cpu;
	struct medha_cpu_opts o = {.n_threads = threads,
	    .ref = ref,
	    .kv_shards = shards};
	char why[256];

	if (medha_cpu_init(&cpu, tm->m, kv, &o, why, sizeof(why)) != 0)
		fail_msg("cpu: %s", why);
	return cpu;
}

/* One forward of a single sequence's tokens. */
static void
step(struct medha_cpu *cpu, int seq, int64_t pos, const int32_t *tok, int n,
    int mode, float *logits)
{
	struct medha_batch_seq s = {seq, pos, n, mode};
	struct medha_batch b = {tok, n, &s, 1};
	char why[256];

	if (medha_cpu_forward(cpu, &b, logits, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
}

/* Prefill tok[0..n) in chunks of ch on a fresh sequence; last logits. */
static int
prefill(struct medha_cpu *cpu, struct medha_kvcache *kv, const int32_t *tok,
    int n, int ch, float *logits)
{
	int seq, i, c;

	assert_int_equal(medha_kv_seq_alloc(kv, &seq), 0);
	for (i = 0; i < n; i += c) {
		c = n - i < ch ? n - i : ch;
		step(cpu, seq, i, tok + i, c,
		    i + c == n ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE, logits);
	}
	return seq;
}

/* max |a - b| / max |b| */
static double
rel_err(const float *a, const float *b, int64_t n)
{
	double num = 0, den = 0;
	int64_t i;

	for (i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - b[i]));
		den = fmax(den, fabs((double)b[i]));
	}
	return den > 0 ? num / den : num;
}

static void
prompt(int32_t *tok, int n, uint64_t seed)
{
	int i;

	rng_seed(seed);
	for (i = 0; i < n; i++)
		tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * VOCAB) % VOCAB;
}

static const int wtypes[] = {MEDHA_GGML_F32, MEDHA_GGML_F16, MEDHA_GGML_BF16,
    MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_0, MEDHA_GGML_Q4_1};
#define NWT (int)(sizeof(wtypes) / sizeof(wtypes[0]))

/* ---- (a) chunking ---- */

#define PLEN 100

static void
test_chunking(void **state)
{
	static const int chunks[] = {1, 7, 32, 64, PLEN};
	int32_t tok[PLEN];
	float ref[VOCAB], got[VOCAB];
	double worst = 0, e;
	int w, i, threads;

	(void)state;
	prompt(tok, PLEN, 7);
	for (w = 0; w < NWT; w++)
		for (threads = 1; threads <= 3; threads += 2) {
			struct tmodel tm;
			struct medha_kvcache *kv;
			struct medha_cpu *cpu;
			tm_make(&tm, wtypes[w], wtypes[w], w % 2, 100 + w);
			kv = kv_new(MEDHA_KV_F32, 64, NL, NKV, HD);
			cpu = cpu_new(&tm, kv, threads, 1, 0);
			medha_kv_seq_free(kv,
			    prefill(cpu, kv, tok, PLEN, PLEN, ref));
			for (i = 0; i < 5; i++) {
				medha_kv_seq_free(kv,
				    prefill(cpu, kv, tok, PLEN, chunks[i],
				        got));
				e = rel_err(got, ref, VOCAB);
				if (e > 1e-5)
					fail_msg("%s chunk %d threads %d: rel "
					         "err %g",
					    medha_ggml_type_name(wtypes[w]),
					    chunks[i], threads, e);
				worst = fmax(worst, e);
			}
			medha_cpu_free(cpu);
			medha_kvcache_free(kv);
			tm_free(&tm);
		}
	fprintf(stderr, "# chunking: max rel err %g\n", worst);
}

/*
 * Past one attention partition (256 keys) a query's keys are taken a
 * partition at a time and folded in order, and a decode's partitions
 * run on different threads: the same bits whatever the chunk (1: the
 * split decode path; the whole prompt: one task per query tile), in
 * both numeric modes.
 */
static void
test_chunking_long(void **state)
{
	enum { LONG = 600 };
	static const int chunks[] = {1, 2, 100, 333};
	int32_t tok[LONG];
	float ref[VOCAB], got[VOCAB];
	int w, i, r;

	(void)state;
	prompt(tok, LONG, 11);
	for (w = 0; w < NWT; w += 3)
		for (r = 0; r <= 1; r++) {
			struct tmodel tm;
			struct medha_kvcache *kv;
			struct medha_cpu *cpu;
			tm_make(&tm, wtypes[w], wtypes[w], 0, 300 + w);
			kv = kv_new(MEDHA_KV_F32, 2 * LONG / 16, NL, NKV, HD);
			cpu = cpu_new(&tm, kv, 2, 1, r);
			medha_kv_seq_free(kv,
			    prefill(cpu, kv, tok, LONG, LONG, ref));
			for (i = 0; i < 4; i++) {
				medha_kv_seq_free(kv,
				    prefill(cpu, kv, tok, LONG, chunks[i],
				        got));
				if (memcmp(got, ref, sizeof(ref)) != 0)
					fail_msg("%s%s chunk %d: rel err %g",
					    medha_ggml_type_name(wtypes[w]),
					    r ? " ref" : "", chunks[i],
					    rel_err(got, ref, VOCAB));
			}
			medha_cpu_free(cpu);
			medha_kvcache_free(kv);
			tm_free(&tm);
		}
	fprintf(stderr, "# chunking past 256 keys (600-token prompt): "
	                "bit-identical\n");
}

/* every position of an all-logits prefill equals one-token steps */
static void
test_all_logits(void **state)
{
	struct tmodel tm;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	int32_t tok[40];
	float *all = malloc(sizeof(float) * 40 * VOCAB), one[VOCAB];
	int seq, i;

	(void)state;
	assert_non_null(all);
	prompt(tok, 40, 9);
	tm_make(&tm, MEDHA_GGML_Q4_1, MEDHA_GGML_Q8_0, 1, 5);
	kv = kv_new(MEDHA_KV_F16, 16, NL, NKV, HD);
	cpu = cpu_new(&tm, kv, 2, 1, 0);
	assert_int_equal(medha_kv_seq_alloc(kv, &seq), 0);
	step(cpu, seq, 0, tok, 40, MEDHA_LOGITS_ALL, all);
	medha_kv_seq_free(kv, seq);
	assert_int_equal(medha_kv_seq_alloc(kv, &seq), 0);
	for (i = 0; i < 40; i++) {
		step(cpu, seq, i, tok + i, 1, MEDHA_LOGITS_LAST, one);
		assert_true(rel_err(one, all + i * VOCAB, VOCAB) == 0);
	}
	/* going back: a smaller position forgets the tail */
	step(cpu, seq, 20, tok + 20, 1, MEDHA_LOGITS_LAST, one);
	assert_true(rel_err(one, all + 20 * VOCAB, VOCAB) == 0);
	assert_int_equal(medha_kv_seq_len(kv, seq), 21);
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	tm_free(&tm);
	free(all);
}

/* ---- (b) KVP shards ---- */

static void
test_shards(void **state)
{
	int32_t tok[PLEN + 8];
	float ref[9][VOCAB], got[VOCAB];
	double worst = 0, loose = 0, e;
	int w, k, i, seq, mode;

	(void)state;
	prompt(tok, PLEN + 8, 11);
	/*
	 * mode 0: the fast path; mode 1: reference numerics. Only f32
	 * activations are continuous in the attention output: rounding
	 * them to f16, bf16 or int8 turns the merge's last-bit changes
	 * into a rounding step now and then, so the 1e-5 bound is for
	 * F32 weights and for every type in reference mode.
	 */
	for (w = 0; w < NWT; w++)
		for (mode = 0; mode <= 1; mode++) {
			struct tmodel tm;
			struct medha_kvcache *kv;
			struct medha_cpu *cpu;
			double err = 0;
			tm_make(&tm, wtypes[w], MEDHA_GGML_Q8_0, 1, 200 + w);
			kv = kv_new(MEDHA_KV_F32, 64, NL, NKV, HD);
			for (k = 1; k <= 4; k++) {
				cpu = cpu_new(&tm, kv, 2, k, mode);
				/* the prompt in chunks of 30, 8 decode steps */
				seq = prefill(cpu, kv, tok, PLEN, 30, got);
				if (k == 1)
					memcpy(ref[0], got, sizeof(got));
				else
					err = fmax(err,
					    rel_err(got, ref[0], VOCAB));
				for (i = 0; i < 8; i++) {
					step(cpu, seq, PLEN + i, tok + PLEN + i,
					    1, MEDHA_LOGITS_LAST, got);
					if (k == 1)
						memcpy(ref[i + 1], got,
						    sizeof(got));
					else
						err = fmax(err,
						    rel_err(got, ref[i + 1],
						        VOCAB));
				}
				medha_kv_seq_free(kv, seq);
				medha_cpu_free(cpu);
			}
			e = err;
			fprintf(stderr, "# kv shards %s%s: %g\n",
			    medha_ggml_type_name(wtypes[w]), mode ? " ref" : "",
			    e);
			if (mode == 1 || wtypes[w] == MEDHA_GGML_F32) {
				if (e > 1e-5)
					fail_msg("%s%s: kv shards rel err %g",
					    medha_ggml_type_name(wtypes[w]),
					    mode ? " (ref)" : "", e);
				worst = fmax(worst, e);
			} else
				loose = fmax(loose, e);
			medha_kvcache_free(kv);
			tm_free(&tm);
		}
	fprintf(stderr,
	    "# kv shards 2-4 merged: max rel err %g (f32 activations), "
	    "%g (rounded activations)\n",
	    worst, loose);
}

/* ---- (c) a mixed batch ---- */

static void
test_mixed_batch(void **state)
{
	struct tmodel tm;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	int32_t ta[60], tb[30], tc[45], tok[42];
	float alone[3][VOCAB], mixed[3 * VOCAB], tmp[VOCAB];
	int a, b, c, i;
	char why[256];

	(void)state;
	prompt(ta, 60, 21);
	prompt(tb, 30, 22);
	prompt(tc, 45, 23);
	tm_make(&tm, MEDHA_GGML_Q4_1, MEDHA_GGML_Q8_0, 1, 31);
	kv = kv_new(MEDHA_KV_F32, 64, NL, NKV, HD);
	cpu = cpu_new(&tm, kv, 2, 1, 0);
	/* alone: a's second chunk (20..60), b's and c's last token */
	a = prefill(cpu, kv, ta, 20, 20, tmp);
	step(cpu, a, 20, ta + 20, 40, MEDHA_LOGITS_LAST, alone[0]);
	b = prefill(cpu, kv, tb, 30, 30, alone[1]);
	c = prefill(cpu, kv, tc, 45, 45, alone[2]);
	medha_kv_seq_free(kv, a);
	medha_kv_seq_free(kv, b);
	medha_kv_seq_free(kv, c);
	/* together: a's chunk with b's and c's decodes in one batch */
	a = prefill(cpu, kv, ta, 20, 20, tmp);
	b = prefill(cpu, kv, tb, 29, 29, tmp);
	c = prefill(cpu, kv, tc, 44, 44, tmp);
	{
		struct medha_batch_seq s[3] = {
		    {b, 29, 1, MEDHA_LOGITS_LAST},
		    {a, 20, 40, MEDHA_LOGITS_LAST},
		    {c, 44, 1, MEDHA_LOGITS_LAST},
		};
		struct medha_batch bt = {tok, 42, s, 3};
		tok[0] = tb[29];
		for (i = 0; i < 40; i++)
			tok[1 + i] = ta[20 + i];
		tok[41] = tc[44];
		if (medha_cpu_forward(cpu, &bt, mixed, why, sizeof(why)) != 0)
			fail_msg("mixed: %s", why);
	}
	assert_true(rel_err(mixed, alone[1], VOCAB) == 0);
	assert_true(rel_err(mixed + VOCAB, alone[0], VOCAB) == 0);
	assert_true(rel_err(mixed + 2 * VOCAB, alone[2], VOCAB) == 0);
	assert_int_equal(medha_kv_seq_len(kv, a), 60);
	assert_int_equal(medha_kv_seq_len(kv, b), 30);
	assert_int_equal(medha_kv_seq_len(kv, c), 45);
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	tm_free(&tm);
}

/* malformed batches are refused with a reason */
static void
test_bad_batch(void **state)
{
	struct tmodel tm;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	int32_t tok[4] = {1, 2, 3, 500};
	float lg[2 * VOCAB];
	struct medha_batch_seq s[2];
	struct medha_batch b = {tok, 3, s, 1};
	char why[256];
	int a;

	(void)state;
	tm_make(&tm, MEDHA_GGML_F32, MEDHA_GGML_F32, 1, 3);
	kv = kv_new(MEDHA_KV_F32, 2, NL, NKV, HD);
	cpu = cpu_new(&tm, kv, 1, 1, 0);
	assert_int_equal(medha_kv_seq_alloc(kv, &a), 0);
	s[0] = (struct medha_batch_seq){a, 1, 3, MEDHA_LOGITS_LAST};
	assert_int_equal(medha_cpu_forward(cpu, &b, lg, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "position 1 but 0 cached"));
	s[0].pos = 0;
	s[1] = s[0];
	b.n_seqs = 2;
	b.n_tokens = 4;
	s[1].n_tokens = 1;
	assert_int_equal(medha_cpu_forward(cpu, &b, lg, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "twice"));
	b.n_seqs = 1;
	b.n_tokens = 4;
	s[0].n_tokens = 4;
	assert_int_equal(medha_cpu_forward(cpu, &b, lg, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "outside the vocabulary"));
	/* 2 blocks hold 32 positions */
	tok[3] = 4;
	s[0].pos = 0;
	assert_int_equal(medha_cpu_forward(cpu, &b, lg, why, sizeof(why)), 0);
	s[0].pos = 30;
	s[0].n_tokens = 1;
	b.n_tokens = 1;
	s[0].pos = 4;
	{
		int32_t many[40] = {0};
		struct medha_batch_seq s2 = {a, 4, 40, MEDHA_LOGITS_LAST};
		struct medha_batch b2 = {many, 40, &s2, 1};
		assert_int_equal(medha_cpu_forward(cpu, &b2, lg, why,
		                     sizeof(why)),
		    MEDHA_ENOSPACE);
	}
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	tm_free(&tm);
}

/* ---- the model's shape checks ---- */

static void
test_model_checks(void **state)
{
	struct tmodel tm;
	struct medha_model *m;
	char why[256];
	int i;

	(void)state;
	tm_make(&tm, MEDHA_GGML_Q8_0, MEDHA_GGML_Q8_0, 0, 1);
	/* a wrong shape is named */
	for (i = 0; i < tm.nt; i++)
		if (strcmp(tm.name[i], "blk.1.attn_k.weight") == 0)
			tm.t[i].ne[1] = 64;
	assert_int_equal(medha_model_build(&m, &tm.c, tm_find, &tm, why,
	                     sizeof(why)),
	    MEDHA_EFORMAT);
	assert_null(m);
	assert_non_null(strstr(why, "blk.1.attn_k.weight"));
	assert_non_null(strstr(why, "expected 64 x 32"));
	/* a missing one too */
	for (i = 0; i < tm.nt; i++)
		if (strcmp(tm.name[i], "blk.1.attn_k.weight") == 0)
			strcpy(tm.name[i], "gone");
	assert_int_equal(medha_model_build(&m, &tm.c, tm_find, &tm, why,
	                     sizeof(why)),
	    MEDHA_ENOTFOUND);
	assert_non_null(strstr(why, "blk.1.attn_k.weight is missing"));
	/* too few bytes */
	for (i = 0; i < tm.nt; i++)
		if (strcmp(tm.name[i], "gone") == 0) {
			strcpy(tm.name[i], "blk.1.attn_k.weight");
			tm.t[i].ne[1] = 32;
			tm.t[i].nbytes -= 1;
		}
	assert_int_equal(medha_model_build(&m, &tm.c, tm_find, &tm, why,
	                     sizeof(why)),
	    MEDHA_EFORMAT);
	assert_non_null(strstr(why, "bytes of data"));
	/* heads that do not group */
	tm.c.n_kv_heads = 3;
	assert_int_equal(medha_model_build(&m, &tm.c, tm_find, &tm, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	tm_free(&tm);
}

/* ---- llama_compat ---- */

static void
test_llama_compat(void **state)
{
	struct tmodel tm;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu, *c1, *c3;
	struct medha_cpu_opts o = {.n_threads = 1, .llama_compat = 1};
	int32_t tok[PLEN];
	float ref[VOCAB], got[VOCAB], got3[VOCAB];
	float x[64], y[64], g[64], u[64], g2[64], cs[32];
	double e, worst = 0;
	char why[256];
	int i, s0, s1, s3;

	(void)state;
	/* the element-wise parts against the default ones */
	rng_seed(3);
	for (i = 0; i < 64; i++) {
		x[i] = frand() * 80.0f;
		g[i] = g2[i] = frand() * 8.0f;
		u[i] = frand();
	}
	medha_cpu_vexp_llama(x, y, 64);
	for (i = 0; i < 64; i++)
		assert_true(fabs(y[i] - expf(x[i])) <= 1e-6 * expf(x[i]));
	medha_cpu_swiglu_llama(g, u, 60); /* 56 with ggml's exp, 4 libm */
	medha_cpu_swiglu(g2, u, 60);
	assert_true(rel_err(g, g2, 60) < 1e-6);
	medha_cpu_rope_table(cs, 37, 32, 10000.0f, NULL);
	memcpy(g, x, sizeof(x));
	memcpy(g2, x, sizeof(x));
	medha_cpu_rope_llama(g, 2, 32, 32, cs);
	medha_cpu_rope(g2, 2, 32, 32, cs);
	assert_true(rel_err(g, g2, 64) < 1e-6);

	/* the forward pass: prefill, then decode steps */
	prompt(tok, PLEN, 11);
	tm_make(&tm, MEDHA_GGML_F32, MEDHA_GGML_F32, 1, 21);
	kv = kv_new(MEDHA_KV_F32, 64, NL, NKV, HD);
	cpu = cpu_new(&tm, kv, 2, 1, 0);
	if (medha_cpu_init(&c1, tm.m, kv, &o, why, sizeof(why)) != 0)
		fail_msg("cpu: %s", why);
	o.n_threads = 3;
	if (medha_cpu_init(&c3, tm.m, kv, &o, why, sizeof(why)) != 0)
		fail_msg("cpu: %s", why);
	s0 = prefill(cpu, kv, tok, PLEN - 4, PLEN - 4, ref);
	s1 = prefill(c1, kv, tok, PLEN - 4, PLEN - 4, got);
	s3 = prefill(c3, kv, tok, PLEN - 4, PLEN - 4, got3);
	assert_true(rel_err(got3, got, VOCAB) == 0);
	worst = rel_err(got, ref, VOCAB);
	for (i = PLEN - 4; i < PLEN; i++) {
		step(cpu, s0, i, tok + i, 1, MEDHA_LOGITS_LAST, ref);
		step(c1, s1, i, tok + i, 1, MEDHA_LOGITS_LAST, got);
		step(c3, s3, i, tok + i, 1, MEDHA_LOGITS_LAST, got3);
		assert_true(rel_err(got3, got, VOCAB) == 0);
		e = rel_err(got, ref, VOCAB);
		worst = fmax(worst, e);
	}
	if (worst > 1e-4)
		fail_msg("llama_compat: rel err %g against the default", worst);
	fprintf(stderr, "# llama_compat: max rel err %g\n", worst);
	medha_cpu_free(c3);
	medha_cpu_free(c1);
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	tm_free(&tm);
}

/* ---- (e) TP ---- */

/* An all-gather through memory between the threads of TP ranks. */
struct tpx {
	pthread_barrier_t bar;
	const void *mine[4];
	int n;
	int calls[4];
};

struct tprank {
	struct tpx *x;
	int rank;
	struct tmodel *tm;
	int ref, kvt;
	const int32_t *tok;
	float (*logits)[VOCAB]; /* (9) rank 0's: after the prompt, 8 steps */
	char err[256];
};

static int
tp_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, char *why, size_t whylen)
{
	struct tprank *r = arg;
	struct tpx *x = r->x;

	(void)layer;
	(void)kind;
	(void)why;
	(void)whylen;
	x->mine[r->rank] = mine;
	x->calls[r->rank]++;
	pthread_barrier_wait(&x->bar);
	for (int i = 0; i < x->n; i++)
		memcpy((char *)all + i * len, x->mine[i], len);
	pthread_barrier_wait(&x->bar);
	return 0;
}

/* The prompt in chunks of 30, then 8 decode steps, on one TP rank. */
static void *
tp_main(void *arg)
{
	struct tprank *r = arg;
	struct medha_kvcache *kv;
	struct medha_tp_share sh;
	struct medha_kv_config kc = {.n_layers = NL,
	    .head_dim = HD,
	    .n_blocks = 64,
	    .type = r->kvt,
	    .max_seqs = 8};
	struct medha_cpu_opts o = {.n_threads = 1,
	    .ref = r->ref,
	    .tp = r->x->n,
	    .tp_rank = r->rank};
	struct medha_cpu *cpu;
	int seq, i, c, n;

	medha_tp_share(&r->tm->m->c, r->x->n, r->rank, &sh);
	kc.n_kv_heads = sh.kv_hi - sh.kv_lo;
	if (medha_kvcache_init(&kv, &kc) != 0) {
		snprintf(r->err, sizeof(r->err), "cache");
		return NULL;
	}
	if (medha_cpu_init(&cpu, r->tm->m, kv, &o, r->err, sizeof(r->err)) !=
	    0) {
		medha_kvcache_free(kv);
		return NULL;
	}
	medha_cpu_set_gather(cpu, tp_gather, r);
	medha_kv_seq_alloc(kv, &seq);
	for (i = 0, n = 0; i < PLEN + 8 && r->err[0] == '\0'; i += c) {
		c = i < PLEN ? (PLEN - i < 30 ? PLEN - i : 30) : 1;
		int last = i + c == PLEN || i >= PLEN;
		struct medha_batch_seq s = {seq, i, c,
		    last ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE};
		struct medha_batch b = {r->tok + i, c, &s, 1};
		/* only rank 0 asks for logits, as the worker daemon does */
		float *lg = last && r->rank == 0 ? r->logits[n] : NULL;
		if (medha_cpu_forward_layers(cpu, &b, 0, NL, NULL, NULL, lg,
		        r->err, sizeof(r->err)) != 0)
			break;
		n += last;
	}
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	return NULL;
}

/* One model's logits, tp 1 against tp n: 0 if bit for bit equal. */
static int
tp_differ(struct tmodel *tm, int tp, int mode, int kvt, const int32_t *tok)
{
	static float lg[2][9][VOCAB];
	struct tpx x;
	struct tprank r[4];
	pthread_t th[4];
	int n, i, k;

	for (k = 0; k < 2; k++) {
		n = k == 0 ? 1 : tp;
		memset(&x, 0, sizeof(x));
		x.n = n;
		pthread_barrier_init(&x.bar, NULL, (unsigned)n);
		for (i = 0; i < n; i++) {
			r[i] = (struct tprank){&x, i, tm, mode, kvt, tok, lg[k],
			    {0}};
			pthread_create(&th[i], NULL, tp_main, &r[i]);
		}
		for (i = 0; i < n; i++) {
			pthread_join(th[i], NULL);
			if (r[i].err[0] != '\0')
				fail_msg("tp %d rank %d: %s", n, i, r[i].err);
		}
		pthread_barrier_destroy(&x.bar);
		/* 4 gathers a layer, for 4 prompt chunks and 8 steps */
		for (i = 0; i < n; i++)
			assert_int_equal(x.calls[i], n > 1 ? 4 * NL * 12 : 0);
	}
	if (memcmp(lg[0], lg[1], sizeof(lg[0])) == 0)
		return 0;
	fprintf(stderr, "# tp %d %s%s kv %s: rel err %g\n", tp,
	    medha_ggml_type_name(tm->m->layer[0].wq->type), mode ? " ref" : "",
	    kvt ? "f16" : "f32", rel_err(lg[1][8], lg[0][8], VOCAB));
	return 1;
}

static void
test_tp(void **state)
{
	/* heads, kv heads, tp: even shares, and uneven ones (2 + 1 kv
	   heads; 22 + 21 + 21 rows of 64, 43 + 43 + 42 of 128) */
	static const int shapes[][3] = {{4, 2, 2}, {6, 3, 2}, {6, 3, 3}};
	int32_t tok[PLEN + 8];
	int w, mode, kvt, sh, differ = 0, runs = 0;

	(void)state;
	prompt(tok, PLEN + 8, 17);
	for (sh = 0; sh < 3; sh++)
		for (w = 0; w < NWT; w++) {
			struct tmodel tm;
			tm_shape(&tm, shapes[sh][0], shapes[sh][1], wtypes[w],
			    MEDHA_GGML_Q8_0, w % 2, 300 + w);
			for (mode = 0; mode <= 1; mode++)
				for (kvt = MEDHA_KV_F32; kvt <= MEDHA_KV_F16;
				     kvt++, runs++)
					differ += tp_differ(&tm, shapes[sh][2],
					    mode, kvt, tok);
			tm_free(&tm);
		}
	assert_int_equal(differ, 0);
	fprintf(stderr,
	    "# tp 2 and 3: logits bit-identical to tp 1 in %d "
	    "configurations\n",
	    runs);
}

static void
test_tp_shapes(void **state)
{
	struct tmodel tm;
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	struct medha_cpu_opts o = {.n_threads = 1, .tp = 4, .tp_rank = 0};
	int32_t t = 1;
	struct medha_batch_seq s = {0, 0, 1, MEDHA_LOGITS_LAST};
	struct medha_batch b = {&t, 1, &s, 1};
	float lg[VOCAB];
	char why[256];

	(void)state;
	tm_make(&tm, MEDHA_GGML_F32, MEDHA_GGML_F32, 1, 5);
	kv = kv_new(MEDHA_KV_F32, 8, NL, NKV, HD);
	/* 2 kv heads do not split 4 ways */
	assert_int_equal(medha_cpu_init(&cpu, tm.m, kv, &o, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "kv heads"));
	/* a rank past tp */
	o.tp = 2;
	o.tp_rank = 2;
	assert_int_equal(medha_cpu_init(&cpu, tm.m, kv, &o, why, sizeof(why)),
	    MEDHA_EINVAL);
	/* a cache of every kv head for a rank that holds half */
	o.tp_rank = 1;
	assert_int_equal(medha_cpu_init(&cpu, tm.m, kv, &o, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "KV cache shape"));
	/* expert parallelism on a model without experts */
	{
		struct medha_cpu_opts e = {.n_threads = 1, .ep = 1};
		assert_int_equal(medha_cpu_init(&cpu, tm.m, kv, &e, why,
		                     sizeof(why)),
		    MEDHA_EINVAL);
	}
	assert_non_null(strstr(why, "has no experts"));
	medha_kvcache_free(kv);
	/* the right cache, but no all-gather */
	{
		struct medha_kv_config kc = {.n_layers = NL,
		    .n_kv_heads = NKV / 2,
		    .head_dim = HD,
		    .n_blocks = 8,
		    .max_seqs = 2};
		int seq;
		assert_int_equal(medha_kvcache_init(&kv, &kc), 0);
		assert_int_equal(
		    medha_cpu_init(&cpu, tm.m, kv, &o, why, sizeof(why)), 0);
		medha_kv_seq_alloc(kv, &seq);
		s.seq = seq;
		assert_int_equal(medha_cpu_forward(cpu, &b, lg, why,
		                     sizeof(why)),
		    MEDHA_EINVAL);
		assert_non_null(strstr(why, "all-gather"));
		medha_cpu_free(cpu);
		medha_kvcache_free(kv);
	}
	tm_free(&tm);
}

/* ---- (f) KVP: two groups, each holding one piece of a sequence ---- */

#define PIECE 64 /* positions per piece */

struct kvpx {
	pthread_barrier_t bar;
	float *out[2], *lse[2];
	int calls[2];
};

struct kvprank {
	struct kvpx *x;
	int group;  /* this group */
	int first;  /* the group holding piece 0 (the other holds piece 1) */
	struct tmodel *tm;
	int ref;
	const int32_t *tok;
	float (*logits)[VOCAB]; /* (9) after the prompt, then 8 steps */
	char err[256];
};

/* The two groups' parts, merged in group order on both (the same bits). */
static int
kvp_merge(void *arg, int layer, float *out, float *lse, int n, int nh, int hd,
    char *why, size_t whylen)
{
	struct kvprank *r = arg;
	struct kvpx *x = r->x;
	size_t no = (size_t)n * nh * hd, nl = (size_t)n * nh;
	float *mo = malloc(no * sizeof(float)), *ml = malloc(nl * sizeof(float));
	const float *po[2], *pl[2];

	(void)layer;
	(void)why;
	(void)whylen;
	x->out[r->group] = out;
	x->lse[r->group] = lse;
	x->calls[r->group]++;
	pthread_barrier_wait(&x->bar);
	for (int g = 0; g < 2; g++) {
		po[g] = x->out[g];
		pl[g] = x->lse[g];
	}
	medha_attn_merge(2, po, pl, n * nh, hd, mo, ml);
	pthread_barrier_wait(&x->bar);
	memcpy(out, mo, no * sizeof(float));
	memcpy(lse, ml, nl * sizeof(float));
	free(mo);
	free(ml);
	return 0;
}

/*
 * The prompt in chunks of 30 cut at the piece boundary, then 8 decode
 * steps, on one group: an item runs here if this group holds a piece at
 * or before the item's, appending if the item is in its piece, merging
 * once both pieces are entered.
 */
static void *
kvp_main(void *arg)
{
	struct kvprank *r = arg;
	struct medha_kvcache *kv = kv_new(MEDHA_KV_F32, 64, NL, NKV, HD);
	struct medha_cpu *cpu = cpu_new(r->tm, kv, 1, 1, r->ref);
	int mine = r->group == r->first ? 0 : 1; /* the piece held here */
	int seq, i, c, n;

	medha_kv_seq_alloc(kv, &seq);
	for (i = 0, n = 0; i < PLEN + 8 && r->err[0] == '\0'; i += c) {
		int piece = i / PIECE, last;
		c = i < PLEN ? 30 : 1;
		if (i < PLEN && i + c > PLEN)
			c = PLEN - i;
		if ((i + c - 1) / PIECE != piece)
			c = (piece + 1) * PIECE - i;
		last = i + c == PLEN || i >= PLEN;
		n += last;
		if (mine > piece)
			continue; /* not entered yet */
		struct medha_batch_kv k = {mine * PIECE, mine == piece,
		    piece > 0};
		struct medha_batch_seq s = {seq, i, c,
		    last ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE};
		struct medha_batch b = {r->tok + i, c, &s, 1};
		medha_cpu_set_kvp(cpu, &k, kvp_merge, r);
		if (medha_cpu_forward_layers(cpu, &b, 0, NL, NULL, NULL,
		        last ? r->logits[n - 1] : NULL, r->err,
		        sizeof(r->err)) != 0)
			break;
	}
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
	return NULL;
}

static void
test_kvp(void **state)
{
	static float one[9][VOCAB], two[2][9][VOCAB];
	int32_t tok[PLEN + 8];
	double worst = 0, loose = 0;
	int w, mode, first, i, seq, part = 0;

	(void)state;
	prompt(tok, PLEN + 8, 23);
	for (w = 0; w < NWT; w++)
		for (mode = 0; mode <= 1; mode++)
			for (first = 0; first <= 1; first++) {
				struct tmodel tm;
				struct medha_kvcache *kv;
				struct medha_cpu *cpu;
				struct kvpx x;
				struct kvprank r[2];
				pthread_t th[2];
				double e = 0;
				tm_make(&tm, wtypes[w], MEDHA_GGML_Q8_0, 1,
				    400 + w);
				/* one backend alone, the same chunks */
				kv = kv_new(MEDHA_KV_F32, 64, NL, NKV, HD);
				cpu = cpu_new(&tm, kv, 1, 1, mode);
				seq = prefill(cpu, kv, tok, PIECE, 30, one[0]);
				step(cpu, seq, PIECE, tok + PIECE, PLEN - PIECE,
				    MEDHA_LOGITS_LAST, one[0]);
				for (i = 0; i < 8; i++)
					step(cpu, seq, PLEN + i, tok + PLEN + i,
					    1, MEDHA_LOGITS_LAST, one[i + 1]);
				medha_cpu_free(cpu);
				medha_kvcache_free(kv);
				/* two groups */
				memset(&x, 0, sizeof(x));
				pthread_barrier_init(&x.bar, NULL, 2);
				for (i = 0; i < 2; i++) {
					r[i] = (struct kvprank){&x, i, first,
					    &tm, mode, tok, two[i], {0}};
					pthread_create(&th[i], NULL, kvp_main,
					    &r[i]);
				}
				for (i = 0; i < 2; i++) {
					pthread_join(th[i], NULL);
					if (r[i].err[0] != '\0')
						fail_msg("group %d: %s", i,
						    r[i].err);
				}
				pthread_barrier_destroy(&x.bar);
				/* merged from the prompt's piece 1 on: the
				   chunk [64, 94), [94, 100), 8 steps; a
				   layer each */
				assert_int_equal(x.calls[0], NL * 10);
				assert_int_equal(x.calls[1], NL * 10);
				/* both groups hold the same bits */
				assert_memory_equal(two[0], two[1],
				    sizeof(two[0]));
				for (i = 0; i < 9; i++)
					e = fmax(e,
					    rel_err(two[0][i], one[i], VOCAB));
				if (mode == 1 || wtypes[w] == MEDHA_GGML_F32) {
					if (e > 1e-5)
						fail_msg("%s%s: kvp rel err %g",
						    medha_ggml_type_name(
							wtypes[w]),
						    mode ? " ref" : "", e);
					worst = fmax(worst, e);
				} else
					loose = fmax(loose, e);
				part++;
				tm_free(&tm);
			}
	fprintf(stderr,
	    "# kvp 2 groups (%d runs): max rel err %g (f32 activations), "
	    "%g (rounded activations)\n",
	    part, worst, loose);
}

/* NaN or infinite activations give an error, not NaN logits or UB in the
 * int8 quantizer (in every weight type and numeric mode). */
static void
test_nonfinite(void **state)
{
	static const int wt[] = {MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_1,
	    MEDHA_GGML_F32};
	static const float bad[] = {NAN, INFINITY};
	int32_t tok[3] = {1, 2, 3};
	float lg[VOCAB];
	char why[256];

	(void)state;
	for (int w = 0; w < 3; w++)
		for (int ref = 0; ref <= 1; ref++)
			for (int k = 0; k < 2; k++) {
				struct tmodel tm;
				struct medha_kvcache *kv;
				struct medha_cpu *cpu;
				struct medha_batch_seq s;
				struct medha_batch b = {tok, 3, &s, 1};
				int a;

				tm_make(&tm, wt[w], wt[w], 1, 5);
				tm.m->layer[0].attn_norm[3] = bad[k];
				kv = kv_new(MEDHA_KV_F32, 4, NL, NKV, HD);
				cpu = cpu_new(&tm, kv, 1, 1, ref);
				assert_int_equal(medha_kv_seq_alloc(kv, &a), 0);
				s = (struct medha_batch_seq){a, 0, 3,
				    MEDHA_LOGITS_LAST};
				why[0] = '\0';
				assert_int_equal(medha_cpu_forward(cpu, &b, lg,
				                     why, sizeof(why)),
				    MEDHA_ERANGE);
				assert_non_null(strstr(why, "logits row 0"));
				medha_cpu_free(cpu);
				medha_kvcache_free(kv);
				tm_free(&tm);
			}
}

/* the pool runs every task exactly once, whatever the count */
int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_model_checks),
	    cmocka_unit_test(test_chunking),
	    cmocka_unit_test(test_chunking_long),
	    cmocka_unit_test(test_all_logits),
	    cmocka_unit_test(test_shards),
	    cmocka_unit_test(test_mixed_batch),
	    cmocka_unit_test(test_tp),
	    cmocka_unit_test(test_tp_shapes),
	    cmocka_unit_test(test_kvp),
	    cmocka_unit_test(test_bad_batch),
	    cmocka_unit_test(test_nonfinite),
	    cmocka_unit_test(test_llama_compat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * backend_test.c: the backend interface (libcore/engine/backend.c) and
 * the cpu backend behind it (engine/backend_cpu.c, cpu/cpu.c's layer
 * ranges).
 *
 * Tiny random Llama models are made in memory (tinymodel.h: 4 layers,
 * hidden 64, 4 heads over 2 kv heads of 16, ffn 128, vocab 97; F32 or
 * Q8_0 matrices). A script of four mixed batches over three sequences
 * (prefill chunks with last, all and no logits, decodes, a rewind that
 * forgets a tail) is played through the interface. The checks:
 *  - the whole-model calls give bit for bit the logits of
 *    medha_cpu_forward() on its own cache;
 *  - every batch run as layers [0, k) then [k, n) (h_out handed to h_in)
 *    for k = 1, 2, 3, and as three stages [0, 1) [1, 3) [3, 4), gives
 *    bit-identical logits to the whole run, with f32 KV and f16 KV, on
 *    one cache (each length set once) and on two backends made for
 *    layers [0, 2) and [2, 4) with caches of their own; also pipelined
 *    (stage 0 runs batch i + 1 before stage 1 runs batch i), on one
 *    cache and on two;
 *  - greedy samplers through the interface give the argmax of the
 *    logits rows, -1 for sequences without a sampler, with logits asked
 *    for or not (the backend's own buffer), whole or split; a greedy
 *    generation from tokens alone equals one from logits;
 *  - malformed calls (h_in missing past layer 0 or given at it, h_out
 *    missing or given at the end, lo >= hi, hi past n_layers, a range
 *    outside the backend's, logits or samplers before the last layer,
 *    samplers without tokens or on a sequence without last logits, an
 *    inconsistent batch, tokens outside the vocabulary, positions not
 *    claimed) are refused with MEDHA_EINVAL and a reason, and change
 *    nothing;
 *  - the profiling hooks (medha-prof): medha_backend_seq_fill() gives a
 *    sequence any length at once (zero K/V, blocks taken and given
 *    back, refusals for a bad handle, a negative or too large length),
 *    after which a decode runs at that position; medha_fwd.times splits
 *    a call into attention, merge and head within its total, the head
 *    only where logits are made;
 *  - medha_backend_cpu_open() on the model written to a GGUF file gives
 *    the in-memory model's logits, sizes its cache as documented
 *    (kv_blocks, kv_bytes, the default) and refuses bad options and
 *    files with reasons.
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
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/kvcache.h"
#include "engine/backend.h"
#include "engine/backend_cpu.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/sample.h"
#include "tinymodel.h"

/* ---- tiny models (tinymodel.h) ---- */

#define VOCAB 97
#define DIM 64
#define NH 4
#define NKV 2
#define HD 16
#define FFN 128
#define NL 4
#define CTX 256

static const struct medha_model_config tm_shape = {.n_layers = NL,
    .dim = DIM,
    .n_heads = NH,
    .n_kv_heads = NKV,
    .head_dim = HD,
    .n_rot = HD,
    .ffn_dim = FFN,
    .ctx_len = CTX,
    .rope_theta = 10000.0f,
    .norm_eps = 1e-5f};

static void
tm_make(struct tmodel *tm, int wt, uint64_t seed)
{
	char why[256];

	tm_fill(tm, &tm_shape, VOCAB, wt, wt, 0, seed);
	if (medha_model_build(&tm->m, &tm->c, tm_find, tm, why, sizeof(why)) !=
	    0)
		fail_msg("model: %s", why);
}

/* A cpu backend on tm's model, for layers [lo, hi) (0, 0: all). */
static struct medha_backend *
be_new(struct tmodel *tm, int kv_type, int lo, int hi)
{
	struct medha_backend *be;
	struct medha_backend_cpu_opts o = {.n_threads = 2,
	    .max_seqs = 8,
	    .kv_blocks = 16,
	    .kv_type = kv_type,
	    .layer_lo = lo,
	    .layer_hi = hi};
	char why[256];

	if (medha_backend_cpu_init(&be, tm->m, &o, why, sizeof(why)) != 0)
		fail_msg("backend: %s", why);
	return be;
}

/* ---- the script: four mixed batches over sequences 0, 1, 2 ---- */

#define NBATCH 4
#define MAXSEQ 3

struct script_batch {
	int n;                            /* sequences */
	struct medha_batch_seq s[MAXSEQ]; /* .seq is the script's */
	int32_t tok[32];                  /* filled by script_batch() */
	struct medha_batch b;
};

static const struct medha_batch_seq script[NBATCH][MAXSEQ + 1] = {
    /* a prompt's first chunk (last logits), another's (all) */
    {{0, 0, 12, MEDHA_LOGITS_LAST}, {1, 0, 5, MEDHA_LOGITS_ALL}},
    /* a chunk, a decode, a first chunk with no logits */
    {{1, 5, 9, MEDHA_LOGITS_ALL}, {0, 12, 1, MEDHA_LOGITS_LAST},
        {2, 0, 7, MEDHA_LOGITS_NONE}},
    /* three short steps */
    {{2, 7, 3, MEDHA_LOGITS_LAST}, {0, 13, 1, MEDHA_LOGITS_LAST},
        {1, 14, 1, MEDHA_LOGITS_LAST}},
    /* a rewind: sequence 0 forgets positions 10.. and goes on */
    {{0, 10, 2, MEDHA_LOGITS_ALL}, {2, 10, 1, MEDHA_LOGITS_LAST}},
};

/* Batch i of the script, on sequence handles h. */
static void
script_batch(struct script_batch *sb, int i, const int *h)
{
	int j, t, n = 0;

	memset(sb, 0, sizeof(*sb));
	for (j = 0; j < MAXSEQ && script[i][j].n_tokens > 0; j++) {
		sb->s[j] = script[i][j];
		sb->s[j].seq = h[script[i][j].seq];
		for (t = 0; t < sb->s[j].n_tokens; t++, n++)
			sb->tok[n] = (int32_t)((i * 31 + j * 17 + t * 7 +
			                           (int)sb->s[j].pos * 3 + 5) %
			    VOCAB);
	}
	sb->n = j;
	sb->b = (struct medha_batch){sb->tok, n, sb->s, j};
}

/* Rows of logits of the script's first nb batches. */
static int64_t
script_rows(int nb)
{
	struct script_batch sb;
	int h[MAXSEQ] = {0, 1, 2};
	int64_t r = 0;
	int i;

	for (i = 0; i < nb; i++) {
		script_batch(&sb, i, h);
		r += medha_batch_logit_rows(&sb.b);
	}
	return r;
}

/* Fresh sequences 0, 1, 2 on each backend (the same handles on all). */
static void
alloc_seqs(struct medha_backend **be, int nbe, int *h)
{
	int i, k, s;

	for (k = 0; k < nbe; k++)
		for (i = 0; i < MAXSEQ; i++) {
			assert_int_equal(medha_backend_seq_alloc(be[k], &s), 0);
			if (k == 0)
				h[i] = s;
			assert_int_equal(s, h[i]);
		}
}

/*
 * One stage of a batch: layers [lo, hi) on be, from hin (NULL at 0) to
 * hout, or to logits at the end.
 */
static void
stage(struct medha_backend *be, const struct medha_batch *b, int lo, int hi,
    const float *hin, float *hout, float *logits)
{
	struct medha_fwd f = {.b = b,
	    .layer_lo = lo,
	    .layer_hi = hi,
	    .h_in = lo > 0 ? hin : NULL,
	    .h_out = hi < NL ? hout : NULL,
	    .logits = hi == NL ? logits : NULL};
	char why[256];

	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		fail_msg("layers [%d, %d): %s", lo, hi, why);
}

/*
 * Play the script's first nb batches with stages split at cut[0..ncut)
 * into out (script_rows(nb) rows). Stage s runs on be[s] when nbe > 1,
 * else on be[0]. skew (two stages): stage 0 runs one batch ahead.
 */
static void
play(struct medha_backend **be, int nbe, const int *cut, int ncut, int skew,
    int nb, float *out)
{
	struct script_batch sb[NBATCH];
	float *h[NBATCH][2], *lg[NBATCH];
	int bounds[NL + 1], hs[MAXSEQ], i, s, ns = ncut + 1, order[2 * NBATCH];
	int nord = 0;

	assert_true(nb <= NBATCH && (!skew || ns == 2));
	alloc_seqs(be, nbe, hs);
	bounds[0] = 0;
	for (s = 0; s < ncut; s++)
		bounds[s + 1] = cut[s];
	bounds[ns] = NL;
	for (i = 0; i < nb; i++) {
		script_batch(&sb[i], i, hs);
		h[i][0] = malloc(sizeof(float) * DIM * sb[i].b.n_tokens);
		h[i][1] = malloc(sizeof(float) * DIM * sb[i].b.n_tokens);
		lg[i] = out;
		out += medha_batch_logit_rows(&sb[i].b) * VOCAB;
	}
	/* the calls in order: batch * 8 + stage */
	if (skew) {
		for (i = 0; i <= nb; i++) {
			if (i < nb)
				order[nord++] = i * 8;
			if (i > 0)
				order[nord++] = (i - 1) * 8 + 1;
		}
	}
	for (int c = 0; !skew && c < nb; c++) {
		for (s = 0; s < ns; s++) {
			const float *hin = h[c][(s + 1) % 2];
			stage(be[nbe > 1 ? s : 0], &sb[c].b, bounds[s],
			    bounds[s + 1], hin, h[c][s % 2], lg[c]);
		}
	}
	for (int k = 0; k < nord; k++) {
		int c = order[k] / 8;
		s = order[k] % 8;
		stage(be[nbe > 1 ? s : 0], &sb[c].b, bounds[s], bounds[s + 1],
		    h[c][(s + 1) % 2], h[c][s % 2], lg[c]);
	}
	for (i = 0; i < nb; i++) {
		free(h[i][0]);
		free(h[i][1]);
	}
}

/* The script through medha_cpu_forward() itself, on its own cache. */
static void
play_cpu(struct tmodel *tm, int kv_type, int nb, float *out)
{
	struct medha_kv_config kc = {.n_layers = NL,
	    .n_kv_heads = NKV,
	    .head_dim = HD,
	    .n_blocks = 16,
	    .type = kv_type,
	    .max_seqs = 8};
	struct medha_cpu_opts co = {.n_threads = 2};
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	struct script_batch sb;
	int hs[MAXSEQ], i;
	char why[256];

	assert_int_equal(medha_kvcache_init(&kv, &kc), 0);
	if (medha_cpu_init(&cpu, tm->m, kv, &co, why, sizeof(why)) != 0)
		fail_msg("cpu: %s", why);
	for (i = 0; i < MAXSEQ; i++)
		assert_int_equal(medha_kv_seq_alloc(kv, &hs[i]), 0);
	for (i = 0; i < nb; i++) {
		script_batch(&sb, i, hs);
		if (medha_cpu_forward(cpu, &sb.b, out, why, sizeof(why)) != 0)
			fail_msg("batch %d: %s", i, why);
		out += medha_batch_logit_rows(&sb.b) * VOCAB;
	}
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
}

/* ---- (a) split runs are bit-identical to whole runs ---- */

static void
same(const float *a, const float *b, int64_t n, const char *what)
{
	int64_t i;

	for (i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
			fail_msg("%s: logit %lld: %.9g, want %.9g", what,
			    (long long)i, a[i], b[i]);
}

static void
test_split(void **state)
{
	static const int wts[] = {MEDHA_GGML_F32, MEDHA_GGML_Q8_0};
	static const int kvts[] = {MEDHA_KV_F32, MEDHA_KV_F16};
	static const int three[] = {1, 3};
	const int64_t n = script_rows(NBATCH) * VOCAB;
	const int64_t n3 = script_rows(3) * VOCAB;
	float *ref = malloc(sizeof(float) * n),
	      *got = malloc(sizeof(float) * n);
	struct medha_backend *be[2];
	struct tmodel tm;
	char what[128];
	int w, kt, k;

	(void)state;
	assert_non_null(ref);
	assert_non_null(got);
	for (w = 0; w < 2; w++) {
		tm_make(&tm, wts[w], 11 + w);
		for (kt = 0; kt < 2; kt++) {
			snprintf(what, sizeof(what), "type %d, kv %d", wts[w],
			    kvts[kt]);
			/* the interface against medha_cpu_forward */
			be[0] = be_new(&tm, kvts[kt], 0, 0);
			play(be, 1, NULL, 0, 0, NBATCH, ref);
			medha_backend_close(be[0]);
			play_cpu(&tm, kvts[kt], NBATCH, got);
			same(got, ref, n, what);

			/* two stages on one cache, cut after layer k */
			for (k = 1; k < NL; k++) {
				be[0] = be_new(&tm, kvts[kt], 0, 0);
				play(be, 1, &k, 1, 0, NBATCH, got);
				same(got, ref, n, what);
				/* each length was set once, to the end */
				assert_int_equal(medha_backend_seq_len(be[0],
				                     0),
				    12);
				assert_int_equal(medha_backend_seq_len(be[0],
				                     2),
				    11);
				medha_backend_close(be[0]);
			}
			/* three stages */
			be[0] = be_new(&tm, kvts[kt], 0, 0);
			play(be, 1, three, 2, 0, NBATCH, got);
			same(got, ref, n, what);
			medha_backend_close(be[0]);

			/* two backends with caches of their own */
			k = 2;
			be[0] = be_new(&tm, kvts[kt], 0, 2);
			be[1] = be_new(&tm, kvts[kt], 2, NL);
			play(be, 2, &k, 1, 0, NBATCH, got);
			same(got, ref, n, what);
			assert_int_equal(medha_backend_seq_len(be[1], 1), 15);
			medha_backend_close(be[0]);
			medha_backend_close(be[1]);

			/* pipelined: stage 0 a batch ahead (no rewind) */
			be[0] = be_new(&tm, kvts[kt], 0, 0);
			play(be, 1, &k, 1, 1, 3, got);
			same(got, ref, n3, what);
			medha_backend_close(be[0]);
			be[0] = be_new(&tm, kvts[kt], 0, 2);
			be[1] = be_new(&tm, kvts[kt], 2, NL);
			play(be, 2, &k, 1, 1, 3, got);
			same(got, ref, n3, what);
			medha_backend_close(be[0]);
			medha_backend_close(be[1]);
		}
		tm_free(&tm);
	}
	free(ref);
	free(got);
}

/* ---- (b) sampling through the interface ---- */

static void
test_sample(void **state)
{
	struct medha_sampler_params gp = {.temp = 0, .top_p = 1, .seed = 1};
	struct medha_sampler *g[4], *sp[4];
	struct medha_backend *be[2];
	struct medha_batch_seq s[4];
	struct medha_batch b;
	struct tmodel tm;
	int32_t tok[40], got[4], want[4], t;
	float lg[13 * VOCAB], *h = malloc(sizeof(float) * 40 * DIM);
	char why[256];
	int i, hs[4], split, step;

	(void)state;
	tm_make(&tm, MEDHA_GGML_Q8_0, 5);
	for (i = 0; i < 4; i++)
		assert_int_equal(medha_sampler_init(&g[i], &gp, VOCAB), 0);
	for (i = 0; i < 40; i++)
		tok[i] = (i * 13 + 3) % VOCAB;
	/* samplers on sequences 0 and 3; 1 (all logits) and 2 without */
	sp[0] = g[0];
	sp[1] = NULL;
	sp[2] = NULL;
	sp[3] = g[3];
	for (split = 0; split < 2; split++)
		for (step = 0; step < 2; step++) {
			/* step 0: logits and tokens; 1: tokens only */
			be[0] = be_new(&tm, MEDHA_KV_F32, 0, 0);
			for (i = 0; i < 4; i++)
				assert_int_equal(medha_backend_seq_alloc(be[0],
				                     &hs[i]),
				    0);
			s[0] = (struct medha_batch_seq){hs[0], 0, 10,
			    MEDHA_LOGITS_LAST};
			s[1] = (struct medha_batch_seq){hs[1], 0, 10,
			    MEDHA_LOGITS_ALL};
			s[2] = (struct medha_batch_seq){hs[2], 0, 10,
			    MEDHA_LOGITS_LAST};
			s[3] = (struct medha_batch_seq){hs[3], 0, 10,
			    MEDHA_LOGITS_LAST};
			b = (struct medha_batch){tok, 40, s, 4};
			struct medha_fwd f = {.b = &b,
			    .layer_lo = split ? 2 : 0,
			    .layer_hi = NL,
			    .h_in = split ? h : NULL,
			    .logits = step == 0 ? lg : NULL,
			    .samplers = sp,
			    .tokens = got};
			if (split)
				stage(be[0], &b, 0, 2, NULL, h, NULL);
			if (medha_backend_forward(be[0], &f, why,
			        sizeof(why)) != 0)
				fail_msg("forward: %s", why);
			if (step == 0) {
				/* rows: 0 | 1 x 10 | 2 | 3; the split's logits
				   are the whole's, so the same argmax */
				t = medha_sample_greedy(lg, VOCAB);
				assert_true(split == 0 || t == want[0]);
				want[0] = t;
				want[1] = -1;
				want[2] = -1;
				t = medha_sample_greedy(lg + 12 * VOCAB, VOCAB);
				assert_true(split == 0 || t == want[3]);
				want[3] = t;
			}
			for (i = 0; i < 4; i++)
				assert_int_equal(got[i], want[i]);
			medha_backend_close(be[0]);
		}

	/* greedy generation from tokens alone equals one from logits */
	be[0] = be_new(&tm, MEDHA_KV_F32, 0, 0);
	be[1] = be_new(&tm, MEDHA_KV_F32, 0, 0);
	assert_int_equal(medha_backend_seq_alloc(be[0], &hs[0]), 0);
	assert_int_equal(medha_backend_seq_alloc(be[1], &hs[1]), 0);
	s[0] = (struct medha_batch_seq){hs[0], 0, 7, MEDHA_LOGITS_LAST};
	s[1] = (struct medha_batch_seq){hs[1], 0, 7, MEDHA_LOGITS_LAST};
	for (i = 0; i < 8; i++) {
		struct medha_batch b0 = {tok, s[0].n_tokens, &s[0], 1};
		struct medha_batch b1 = {tok, s[1].n_tokens, &s[1], 1};
		struct medha_fwd f0 = {.b = &b0,
		    .layer_hi = NL,
		    .samplers = sp,
		    .tokens = got};
		struct medha_fwd f1 = {.b = &b1, .layer_hi = NL, .logits = lg};
		assert_int_equal(medha_backend_forward(be[0], &f0, why,
		                     sizeof(why)),
		    0);
		assert_int_equal(medha_backend_forward(be[1], &f1, why,
		                     sizeof(why)),
		    0);
		t = medha_sample_greedy(lg, VOCAB);
		assert_int_equal(got[0], t);
		assert_true(t >= 0 && t < VOCAB);
		/* the next step decodes the token chosen */
		tok[0] = t;
		s[0].pos += s[0].n_tokens;
		s[1].pos += s[1].n_tokens;
		s[0].n_tokens = s[1].n_tokens = 1;
	}
	assert_int_equal(medha_backend_seq_len(be[0], hs[0]), 14);
	medha_backend_close(be[0]);
	medha_backend_close(be[1]);
	for (i = 0; i < 4; i++)
		medha_sampler_free(g[i]);
	free(h);
	tm_free(&tm);
}

/* ---- (c) malformed calls ---- */

/* f is refused with MEDHA_EINVAL and a reason containing want. */
static void
refused(struct medha_backend *be, const struct medha_fwd *f, const char *want)
{
	char why[256] = "";

	assert_int_equal(medha_backend_forward(be, f, why, sizeof(why)),
	    MEDHA_EINVAL);
	if (strstr(why, want) == NULL)
		fail_msg("reason \"%s\", want \"%s\"", why, want);
}

static void
test_malformed(void **state)
{
	struct medha_sampler_params gp = {.temp = 0, .top_p = 1, .seed = 1};
	struct medha_sampler *g, *sp[2];
	struct medha_backend *be, *be2;
	struct medha_batch_seq s[2];
	struct medha_batch b, bad;
	struct medha_fwd f;
	struct tmodel tm;
	int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[2];
	float h[8 * DIM], lg[2 * VOCAB];
	char why[256];
	int a, c;

	(void)state;
	tm_make(&tm, MEDHA_GGML_F32, 9);
	be = be_new(&tm, MEDHA_KV_F32, 0, 0);
	assert_int_equal(medha_sampler_init(&g, &gp, VOCAB), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &a), 0);
	assert_int_equal(medha_backend_seq_alloc(be, &c), 0);
	s[0] = (struct medha_batch_seq){a, 0, 5, MEDHA_LOGITS_LAST};
	s[1] = (struct medha_batch_seq){c, 0, 3, MEDHA_LOGITS_NONE};
	b = (struct medha_batch){tok, 8, s, 2};

#define F(...) (f = (struct medha_fwd){.b = &b, __VA_ARGS__}, &f)
	refused(be, F(.layer_lo = 2, .layer_hi = NL), "no hidden states");
	refused(be, F(.layer_lo = 0, .layer_hi = NL, .h_in = h),
	    "handed to layer 0");
	refused(be, F(.layer_lo = 2, .layer_hi = 2, .h_in = h), "not a range");
	refused(be, F(.layer_lo = 3, .layer_hi = 1, .h_in = h), "not a range");
	refused(be, F(.layer_lo = -1, .layer_hi = 2, .h_out = h),
	    "not a range");
	refused(be, F(.layer_lo = 0, .layer_hi = NL + 1), "not a range");
	refused(be, F(.layer_lo = 0, .layer_hi = 2), "no room (h_out)");
	refused(be, F(.layer_lo = 0, .layer_hi = NL, .h_out = h),
	    "after the last layer");
	refused(be, F(.layer_lo = 0, .layer_hi = 2, .h_out = h, .logits = lg),
	    "logits asked for after layer 1");
	sp[0] = g;
	sp[1] = NULL;
	refused(be,
	    F(.layer_lo = 0, .layer_hi = 2, .h_out = h, .samplers = sp,
	        .tokens = out),
	    "samples asked for");
	refused(be, F(.layer_lo = 0, .layer_hi = NL, .samplers = sp),
	    "no room for the tokens");
	sp[0] = NULL;
	sp[1] = g;
	refused(be,
	    F(.layer_lo = 0, .layer_hi = NL, .samplers = sp, .tokens = out),
	    "batch entry 1: a sampler");
	f = (struct medha_fwd){.layer_hi = NL};
	refused(be, &f, "no batch");
	/* inconsistent batches */
	bad = (struct medha_batch){tok, 7, s, 2};
	f = (struct medha_fwd){.b = &bad, .layer_hi = NL};
	refused(be, &f, "sequences hold 8 tokens, batch has 7");
	bad = (struct medha_batch){tok, 8, s, 0};
	refused(be, &f, "empty batch");
	bad = (struct medha_batch){NULL, 8, s, 2};
	refused(be, &f, "empty batch");
	tok[6] = VOCAB;
	refused(be, F(.layer_hi = NL), "outside the vocabulary");
	tok[6] = 7;
	s[0].n_tokens = 0;
	refused(be, F(.layer_hi = NL), "batch entry 0: 0 tokens");
	s[0].n_tokens = 5;
	s[1].logits = 7;
	refused(be, F(.layer_hi = NL), "logits mode 7");
	s[1].logits = MEDHA_LOGITS_NONE;
	/* the backend's own checks: positions, handles */
	s[0].pos = 3;
	refused(be, F(.layer_hi = NL), "position 3 but 0 cached");
	s[0].pos = 0;
	refused(be, F(.layer_lo = 2, .layer_hi = NL, .h_in = h), "not claimed");
	s[1].seq = 7;
	refused(be, F(.layer_hi = NL), "not allocated");
	s[1].seq = a;
	refused(be, F(.layer_hi = NL), "twice");
	s[1].seq = c;
	/* a backend for layers [2, 4) refuses others */
	be2 = be_new(&tm, MEDHA_KV_F32, 2, NL);
	refused(be2, F(.layer_lo = 0, .layer_hi = 2, .h_out = h),
	    "within [2, 4)");
	refused(be2, F(.layer_lo = 1, .layer_hi = NL, .h_in = h),
	    "within [2, 4)");
	medha_backend_close(be2);
#undef F

	/* nothing changed: the batch runs, the lengths start from 0 */
	assert_int_equal(medha_backend_seq_len(be, a), 0);
	assert_int_equal(medha_backend_free_blocks(be), 16);
	f = (struct medha_fwd){.b = &b, .layer_hi = NL, .logits = lg};
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_seq_len(be, a), 5);
	assert_int_equal(medha_backend_seq_len(be, c), 3);
	assert_int_equal(medha_backend_free_blocks(be), 14);
	/* past layer 0 the ids are not read: NULL will do */
	s[0].pos = 5;
	s[1].pos = 3;
	stage(be, &b, 0, 2, NULL, h, NULL);
	bad = (struct medha_batch){NULL, 8, s, 2};
	f = (struct medha_fwd){.b = &bad,
	    .layer_lo = 2,
	    .layer_hi = NL,
	    .h_in = h,
	    .logits = lg};
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_seq_len(be, a), 10);
	medha_backend_seq_free(be, a);
	assert_int_equal(medha_backend_seq_len(be, a), MEDHA_EINVAL);
	assert_int_equal(medha_backend_free_blocks(be), 15);
	assert_int_equal(medha_backend_seq_len(be, c), 6);
	medha_backend_close(be);
	medha_sampler_free(g);
	tm_free(&tm);
}

/* ---- (d) opening a GGUF file ---- */

#define PATH_LEN 256

static void
tm_write(const struct tmodel *tm, const char *path)
{
	struct medha_gguf_writer *w;
	int i;

	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	medha_gguf_writer_add_u32(w, "llama.block_count", NL);
	medha_gguf_writer_add_u32(w, "llama.embedding_length", DIM);
	medha_gguf_writer_add_u32(w, "llama.attention.head_count", NH);
	medha_gguf_writer_add_u32(w, "llama.attention.head_count_kv", NKV);
	medha_gguf_writer_add_u32(w, "llama.feed_forward_length", FFN);
	medha_gguf_writer_add_u32(w, "llama.context_length", CTX);
	medha_gguf_writer_add_u32(w, "llama.rope.dimension_count", HD);
	medha_gguf_writer_add_f32(w, "llama.rope.freq_base",
	    tm_shape.rope_theta);
	medha_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon",
	    tm_shape.norm_eps);
	for (i = 0; i < tm->nt; i++)
		medha_gguf_writer_add_tensor(w, tm->t[i].name, tm->t[i].type,
		    tm->t[i].n_dims, tm->t[i].ne, tm->t[i].data,
		    tm->t[i].nbytes);
	assert_int_equal(medha_gguf_writer_close(w), 0);
}

static void
test_open(void **state)
{
	const int64_t n = script_rows(NBATCH) * VOCAB;
	const int64_t per = (int64_t)NL * 2 * NKV * MEDHA_KV_BLOCK * HD * 4;
	float *ref = malloc(sizeof(float) * n),
	      *got = malloc(sizeof(float) * n);
	struct medha_backend_cpu_opts o = {.n_threads = 3};
	struct medha_backend *be;
	struct tmodel tm;
	char path[PATH_LEN], why[256];
	int k = 3;

	(void)state;
	tm_make(&tm, MEDHA_GGML_Q8_0, 21);
	tmp_name(path, sizeof(path));
	tm_write(&tm, path);

	/* defaults: 64 sequences of the full context (256 tokens) */
	if (medha_backend_cpu_open(&be, path, NULL, why, sizeof(why)) != 0)
		fail_msg("open: %s", why);
	assert_string_equal(be->info.name, "cpu");
	assert_int_equal(be->info.block_size, MEDHA_KV_BLOCK);
	assert_int_equal(be->info.n_blocks, 64 * CTX / MEDHA_KV_BLOCK);
	assert_int_equal(be->info.max_seqs, 64);
	assert_int_equal(be->info.kv_type, MEDHA_KV_F32);
	assert_int_equal(be->info.layer_lo, 0);
	assert_int_equal(be->info.layer_hi, NL);
	assert_int_equal(be->info.shape.n_layers, NL);
	assert_int_equal(be->info.shape.dim, DIM);
	assert_int_equal(be->info.shape.vocab, VOCAB);
	assert_int_equal(be->info.shape.ctx_len, CTX);
	assert_int_equal(medha_backend_free_blocks(be), be->info.n_blocks);
	medha_backend_close(be);

	/* the file's model gives the in-memory model's logits, split too */
	be = be_new(&tm, MEDHA_KV_F32, 0, 0);
	play(&be, 1, NULL, 0, 0, NBATCH, ref);
	medha_backend_close(be);
	o.kv_bytes = 10 * per + 5; /* ten whole blocks */
	o.max_seqs = 3;
	if (medha_backend_cpu_open(&be, path, &o, why, sizeof(why)) != 0)
		fail_msg("open: %s", why);
	assert_int_equal(be->info.n_blocks, 10);
	assert_int_equal(be->info.max_seqs, 3);
	play(&be, 1, &k, 1, 0, NBATCH, got);
	same(got, ref, n, "from the file");
	medha_backend_close(be);

	/* kv_blocks wins over kv_bytes; f16 */
	o.kv_blocks = 7;
	o.kv_type = MEDHA_KV_F16;
	o.layer_lo = 1;
	o.layer_hi = 3;
	if (medha_backend_cpu_open(&be, path, &o, why, sizeof(why)) != 0)
		fail_msg("open: %s", why);
	assert_int_equal(be->info.n_blocks, 7);
	assert_int_equal(be->info.kv_type, MEDHA_KV_F16);
	assert_int_equal(be->info.layer_lo, 1);
	assert_int_equal(be->info.layer_hi, 3);
	medha_backend_close(be);

	/* bad options and files */
	o = (struct medha_backend_cpu_opts){.kv_type = 5};
	assert_int_equal(medha_backend_cpu_open(&be, path, &o, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_null(be);
	assert_non_null(strstr(why, "KV type 5"));
	o = (struct medha_backend_cpu_opts){.kv_bytes = 100};
	assert_int_equal(medha_backend_cpu_open(&be, path, &o, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "KV cache of 0 blocks"));
	o = (struct medha_backend_cpu_opts){.layer_lo = 2, .layer_hi = 2};
	assert_int_equal(medha_backend_cpu_open(&be, path, &o, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "layers [2, 2)"));
	o = (struct medha_backend_cpu_opts){.layer_hi = NL + 1};
	assert_int_equal(medha_backend_cpu_open(&be, path, &o, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	o = (struct medha_backend_cpu_opts){.n_threads = -1};
	assert_int_equal(medha_backend_cpu_open(&be, path, &o, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_int_not_equal(medha_backend_cpu_open(&be, "/nonexistent.gguf",
	                         NULL, why, sizeof(why)),
	    0);
	assert_null(be);
	assert_true(why[0] != '\0');
	assert_int_equal(truncate(path, 3000), 0);
	assert_int_not_equal(medha_backend_cpu_open(&be, path, NULL, why,
	                         sizeof(why)),
	    0);
	assert_null(be);
	unlink(path);
	free(ref);
	free(got);
	tm_free(&tm);
}

/* ---- the profiling hooks ---- */

static void
test_profiling(void **state)
{
	struct tmodel tm;
	struct medha_backend *be;
	struct medha_batch_seq bs = {0, 0, 1, MEDHA_LOGITS_LAST};
	struct medha_batch b = {NULL, 1, &bs, 1};
	struct medha_fwd_times t;
	struct medha_fwd f = {.b = &b, .layer_lo = 0, .layer_hi = NL,
	    .times = &t};
	float logits[VOCAB], h[DIM];
	int32_t tok = 5;
	char why[256];
	int seq;

	(void)state;
	tm_make(&tm, MEDHA_GGML_F32, 3);
	be = be_new(&tm, MEDHA_KV_F32, 0, 0); /* 16 blocks of 16 */
	assert_int_equal(medha_backend_seq_alloc(be, &seq), 0);
	assert_int_equal(medha_backend_seq_fill(be, seq, 100), 0);
	assert_int_equal(medha_backend_seq_len(be, seq), 100);
	assert_int_equal(medha_backend_free_blocks(be), 16 - 7);
	assert_int_equal(medha_backend_seq_fill(be, seq, 20), 0);
	assert_int_equal(medha_backend_free_blocks(be), 16 - 2);
	assert_int_equal(medha_backend_seq_fill(be, seq, 200), 0);
	assert_int_equal(medha_backend_seq_fill(be, seq, 257),
	    MEDHA_ENOSPACE);
	assert_int_equal(medha_backend_seq_fill(be, seq, -1), MEDHA_EINVAL);
	assert_int_equal(medha_backend_seq_fill(be, seq + 1, 3),
	    MEDHA_EINVAL);
	assert_int_equal(medha_backend_seq_fill(be, seq, 200), 0);

	/* a decode at position 200 of the filled sequence, timed */
	bs.seq = seq;
	bs.pos = 200;
	b.tokens = &tok;
	f.logits = logits;
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_int_equal(medha_backend_seq_len(be, seq), 201);
	for (int v = 0; v < VOCAB; v++)
		assert_true(isfinite(logits[v]));
	assert_int_equal(t.split, 1);
	assert_true(t.total > 0 && t.attn > 0 && t.head > 0);
	assert_true(t.merge == 0);
	assert_true(t.attn + t.head <= t.total);
	/* no logits, no head; without times, nothing is measured */
	bs.logits = MEDHA_LOGITS_NONE;
	bs.pos = 201;
	f.logits = NULL;
	f.layer_hi = NL - 1;
	f.h_out = h;
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		fail_msg("forward: %s", why);
	assert_true(t.split == 1 && t.head == 0 && t.attn > 0);
	assert_true(t.moe == 0 && t.experts == 0); /* a dense model */
	/* by the calling thread's CPU time: its share of the work, within
	   the wall clock's time of the call; that clock does not count a
	   sleep */
	f.thread_clock = 1;
	bs.pos = 202;
	{
		double w0 = medha_now(), c0 = medha_thread_cpu(), w1;
		usleep(30000);
		assert_true(medha_now() - w0 >= 0.03);
		assert_true(medha_thread_cpu() - c0 < 0.01);
		w0 = medha_now();
		if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
			fail_msg("forward: %s", why);
		w1 = medha_now() - w0;
		assert_true(t.total > 0 && t.attn > 0 && t.attn <= t.total);
		assert_true(t.total <= w1 + 1e-4);
	}
	medha_backend_close(be);
	tm_free(&tm);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_split),
	    cmocka_unit_test(test_sample),
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_open),
	    cmocka_unit_test(test_profiling),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

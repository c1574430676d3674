/*
 * simt_test.c: the kernels' own device code (kernels/NAME.cu), run on
 * the host by the SIMT emulator (simt.h, simt.cc; make simt builds it,
 * tests/sh/kernels-simt.sh runs it),
 * against tests/gpu/kernels_test.c's references: that file is included
 * whole (its main renamed), so its float64 attention, its paged batches
 * and its checks of the other kernels are the ones a GPU run uses.
 *
 * Attention goes through the real launcher, medha_k_attn (plan kernel,
 * simple and mma kernels, fold), on a GPU of SIMT_SMS multiprocessors
 * (default 4, so contexts of a few hundred keys split and fold), each
 * shape twice: the default paths and MEDHA_K_ATTN=simple. One line per
 * check, "ok"/"FAIL", the name, the measured error and the tolerance.
 *
 *	simt_test          every case
 *	simt_test attn     the attention cases alone
 */
#define main kernels_test_main
#include "../kernels_test.c"
#undef main

#define ATTN_MAX_VS_TEST 16 /* kernels/attn.cuh's ATTN_MAX_VS */
#define ATTN_MMA_MAX_HD_TEST 128 /* its ATTN_MMA_MAX_HD */

/* events (kernels_test's --moe-bench, never run here): refused */
cudaError_t cudaEventCreate(cudaEvent_t *e) { (void)e; return cudaErrorNotSupported; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e, (void)s; return cudaErrorNotSupported; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaErrorNotSupported; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)ms, (void)a, (void)b; return cudaErrorNotSupported; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaErrorNotSupported; }

/* sample.cu (CUB) is not emulated: its launchers are refused here */
int
medha_k_gather_rows(float *y, const float *x, const int32_t *rows, int n,
    int dim, cudaStream_t stream)
{
	(void)y, (void)x, (void)rows, (void)n, (void)dim, (void)stream;
	return cudaErrorNotSupported;
}

int
medha_k_argmax(int32_t *ids, const float *logits, int n, int vocab,
    cudaStream_t stream)
{
	(void)ids, (void)logits, (void)n, (void)vocab, (void)stream;
	return cudaErrorNotSupported;
}

size_t
medha_k_sample_workspace(int n, int vocab)
{
	(void)n, (void)vocab;
	return 0;
}

int
medha_k_sample(int32_t *ids, const float *logits, int n, int vocab,
    const float *temp, const int32_t *top_k, const float *top_p,
    const float *u, void *work, size_t work_len, cudaStream_t stream)
{
	(void)ids, (void)logits, (void)n, (void)vocab, (void)temp, (void)top_k;
	(void)top_p, (void)u, (void)work, (void)work_len, (void)stream;
	return cudaErrorNotSupported;
}

/*
 * q as the mma kernel reads it, for the reference: the rows of the
 * sequences on its path (n_q * G > 16) scaled into base 2 in f32 and
 * rounded to the cache's type, then scaled back; the others as they
 * are. Against this the mma path's only rounding left is P's.
 */
static float *
q_as_mma(const struct batch *b, const float *q, int qs, int n_heads, int hd)
{
	int G = n_heads / b->n_kv_heads;
	float sl = 1.0f / sqrtf(hd) * 1.4426950408889634f; /* attn.cu's */

	if (attn_cap > 0) /* a soft-cap's: the tanh's argument */
		sl = 1.0f / sqrtf(hd) / (float)attn_cap;
	float *r = malloc((size_t)b->n_tokens * qs * 4);

	memcpy(r, q, (size_t)b->n_tokens * qs * 4);
	for (int s = 0; s < b->n_seqs; s++)
		for (int i = 0; hd <= ATTN_MMA_MAX_HD_TEST &&
		     b->s[s].n_q * G > ATTN_MAX_VS_TEST &&
		     i < b->s[s].n_q; i++) {
			float *x = r + (int64_t)(b->q_start[s] + i) * qs;

			for (int c = 0; c < n_heads * hd; c++)
				x[c] = (float)(h_kv(b->type, h_tokv(b->type,
				    x[c] * sl)) / (double)sl);
		}
	return r;
}

/*
 * One batch through medha_k_attn, for each path (the default, then
 * MEDHA_K_ATTN=simple): f32 out with lse, then bf16 out. Against the
 * float64 reference: f32 arithmetic (the simple kernel) within 1e-4;
 * the mma kernel rounds Q and P to 16 bits: 1e-2, and its lse moves
 * with the scores' size (Q's rounding), so 1e-2 times the queries'
 * amplitude. And the mma path against the reference of its rounded Q
 * (q_as_mma): 5e-3 for the output (P's rounding), 1e-4 for the lse, so
 * that a fault smaller than Q's rounding still shows. The bf16 call
 * uses the plan the f32 call left in the workspace (planned), which on
 * the default path medha_k_attn_plan made.
 */
static void
simt_attn(const char *name, const struct hseq *hs, int n, int type,
    int n_heads, int nkv, int hd, float amp)
{
	struct batch b;
	struct dbatch d;
	char label[200];
	int qs = n_heads * hd + 8, G = n_heads / nkv, mma = 0;

	for (int i = 0; i < n; i++) /* head sizes over 128: simple only */
		mma |= hs[i].n_q * G > ATTN_MAX_VS_TEST &&
		    hd <= ATTN_MMA_MAX_HD_TEST;
	batch_make(&b, hs, n, type, nkv, hd);
	dbatch_make(&d, &b, 1);
	int64_t nt = b.n_tokens, ne = nt * n_heads * hd, nl = nt * n_heads;
	float *q = rand_q(nt * qs, amp), *q2 = q_as_mma(&b, q, qs, n_heads, hd);
	double *ro = malloc((size_t)ne * 8), *rl = malloc((size_t)nl * 8);
	double *ro2 = malloc((size_t)ne * 8), *rl2 = malloc((size_t)nl * 8);
	float *got = malloc((size_t)ne * 4), *gl = malloc((size_t)nl * 4);
	uint16_t *gb = malloc((size_t)ne * 2);
	float *dq = dup_to(q, (size_t)nt * qs * 4);
	float *dout = dalloc((size_t)ne * 4), *dlse = dalloc((size_t)nl * 4);
	uint16_t *dob = dalloc((size_t)ne * 2);

	ref_attn(&b, q, qs, n_heads, 1.0 / sqrt(hd), ro, rl);
	ref_attn(&b, q2, qs, n_heads, 1.0 / sqrt(hd), ro2, rl2);
	for (int simple = 0; simple < 2; simple++) {
		struct medha_k_attn a = {.kv = &d.kv, .s = &d.s, .q = dq,
		    .qs = qs, .n_heads = n_heads, .scale = 1.0f / sqrtf(hd),
		    .out_f32 = dout, .lse = dlse, .softcap = (float)attn_cap,
		    .window = attn_window, .chunk = attn_chunk};
		int m = mma && !simple;
		const char *path = m ? "mma+simple" : "simple";

		if (simple)
			setenv("MEDHA_K_ATTN", "simple", 1);
		else
			unsetenv("MEDHA_K_ATTN");
		a.work_len = medha_k_attn_workspace(&a);
		a.work = dalloc(a.work_len);
		poison(dout, (size_t)ne * 4);
		poison(dlse, (size_t)nl * 4);
		poison(a.work, a.work_len);
		/* the default path: the plan made apart (as the backend makes
		   it once for its layers), the call planned; simple: the call
		   makes its own, which the bf16 call below then uses */
		if (!simple)
			CL(medha_k_attn_plan(&a, 0));
		a.planned = !simple;
		CL(medha_k_attn(&a, 0));
		from_dev(got, dout, (size_t)ne * 4);
		from_dev(gl, dlse, (size_t)nl * 4);
		snprintf(label, sizeof(label), "simt attn %s [%s]: f32 out rel L2",
		    name, path);
		report(label, rel_l2(got, ro, ne), m ? 1e-2 : 1e-4);
		snprintf(label, sizeof(label), "simt attn %s [%s]: lse max abs",
		    name, path);
		report(label, lse_err(gl, rl, nl), m ? 1e-2 * amp : 1e-4);
		if (m) {
			snprintf(label, sizeof(label), "simt attn %s [%s]: f32 out "
			    "rel L2, Q rounded as the mma kernel does", name, path);
			report(label, rel_l2(got, ro2, ne), 5e-3);
			snprintf(label, sizeof(label), "simt attn %s [%s]: lse max "
			    "abs, Q rounded as the mma kernel does", name, path);
			report(label, lse_err(gl, rl2, nl), 1e-4);
		}
		a.out_f32 = NULL;
		a.out = dob;
		a.lse = NULL;
		poison(dob, (size_t)ne * 2);
		a.planned = 1;
		CL(medha_k_attn(&a, 0));
		from_dev(gb, dob, (size_t)ne * 2);
		for (int64_t i = 0; i < ne; i++)
			got[i] = h_bf16f(gb[i]);
		snprintf(label, sizeof(label), "simt attn %s [%s]: bf16 out rel L2",
		    name, path);
		report(label, rel_l2(got, ro, ne), 1e-2);
		CK(cudaFree(a.work));
	}
	unsetenv("MEDHA_K_ATTN");
	CK(cudaFree(dq));
	CK(cudaFree(dout));
	CK(cudaFree(dlse));
	CK(cudaFree(dob));
	dbatch_free(&d);
	batch_free(&b);
	free(q);
	free(q2);
	free(ro);
	free(rl);
	free(ro2);
	free(rl2);
	free(got);
	free(gl);
	free(gb);
}

static void
simt_attn_all(void)
{
	/* SmolLM2's shape (9/3, head_dim 64): decodes, a chunk of 1, a
	   chunk of 5 (15 vectors: simple), one of 50 (mma) with its causal
	   edge, against cached contexts; every split and fold on 4 SMs */
	struct hseq mixed[] = {
	    {1, 37, 0, 38, 1},
	    {50, 100, 0, 150, 1},
	    {1, 0, 0, 1, 1},
	    {5, 600, 0, 605, 1},
	    {1, 300, 0, 301, 1},
	};
	/* GQA 4 query heads per kv head, head_dim 128: a prefill chunk of
	   70 rows against a cached 700 (split in two), a fresh prefill of
	   33, a chunk of 17 rows (68 vectors: a second, partial tile), a
	   decode */
	struct hseq gqa[] = {
	    {70, 700, 0, 770, 1},
	    {33, 0, 0, 33, 1},
	    {17, 200, 0, 217, 1},
	    {1, 90, 0, 91, 1},
	};
	/* KVP pieces (kv_base > 0): keys wholly before the rows, pieces
	   after their queries (no key: lse -inf, out 0) on both paths, one
	   cut by the causal edge with a mma-sized chunk, and one whose first
	   ten rows see no key and the rest one more each; with 4 and with 1
	   query head per kv head */
	struct hseq kvp[] = {
	    {3, 1000, 208, 300, 0},
	    {2, 1000, 1200, 100, 0},
	    {40, 500, 224, 300, 0},
	    {20, 1000, 1200, 100, 0},
	    {24, 1000, 1010, 100, 0},
	};
	/* a fresh prefill of 150 rows: the causal diagonal through every
	   tile, on 132 SMs split in parts some rows see nothing of */
	struct hseq fresh[] = {{150, 0, 0, 150, 1}, {1, 40, 0, 41, 1}};

	simt_attn("mixed hd64 9/3 bf16", mixed, 5, MEDHA_K_BF16, 9, 3, 64, 2);
	simt_attn("mixed hd64 9/3 f16", mixed, 5, MEDHA_K_F16, 9, 3, 64, 2);
	simt_attn("gqa chunks hd128 8/2 bf16", gqa, 4, MEDHA_K_BF16, 8, 2, 128,
	    2);
	simt_attn("gqa chunks hd128 4/1 f16", gqa, 4, MEDHA_K_F16, 4, 1, 128, 2);
	simt_attn("kvp pieces hd128 8/2 f16", kvp, 5, MEDHA_K_F16, 8, 2, 128, 2);
	simt_attn("kvp pieces hd64 4/4 bf16", kvp, 5, MEDHA_K_BF16, 4, 4, 64, 2);
	/* peaky scores (queries 8 times larger): the running max moves
	   from tile to tile, the rescaling matters */
	simt_attn("fresh 150 hd64 4/1 bf16 peaky", fresh, 2, MEDHA_K_BF16, 4, 1,
	    64, 16);
	simt_attn("gqa chunks hd128 4/1 bf16 peaky", gqa, 4, MEDHA_K_BF16, 4, 1,
	    128, 16);
	/* the other families': windows shorter than the contexts, their
	   starts in other tiles and parts for each row of a chunk (and KVP
	   pieces wholly before some rows' windows); the soft-cap on peaky
	   scores; both */
	attn_window = 90;
	simt_attn("mixed hd64 9/3 bf16 window 90", mixed, 5, MEDHA_K_BF16, 9,
	    3, 64, 2);
	simt_attn("gqa chunks hd128 4/1 f16 window 90", gqa, 4, MEDHA_K_F16,
	    4, 1, 128, 2);
	simt_attn("kvp pieces hd64 4/4 bf16 window 90", kvp, 5, MEDHA_K_BF16,
	    4, 4, 64, 2);
	attn_window = 0;
	attn_cap = 2.0;
	simt_attn("fresh 150 hd64 4/1 bf16 peaky softcap 2", fresh, 2,
	    MEDHA_K_BF16, 4, 1, 64, 16);
	attn_window = 37;
	simt_attn("gqa chunks hd128 8/2 bf16 window 37 softcap 2", gqa, 4,
	    MEDHA_K_BF16, 8, 2, 128, 4);
	attn_window = 0;
	/* head size 256 (Gemma 2/3; the simple kernel's dynamic shared
	   memory, 8 columns a lane): Gemma 3 270M's 4/1 with its chunks of
	   50 and 5 (the simple kernel on the default path too), Gemma 2's
	   8/4 with a window and the soft-cap */
	simt_attn("mixed hd256 4/1 bf16", mixed, 5, MEDHA_K_BF16, 4, 1, 256,
	    2);
	attn_window = 90;
	attn_cap = 2.0;
	simt_attn("kvp pieces hd256 8/4 f16 window 90 softcap 2", kvp, 5,
	    MEDHA_K_F16, 8, 4, 256, 16);
	attn_window = 0;
	attn_cap = 0;
	/* llama4's chunks, shorter than the contexts: each row's chunk
	   starting in another tile or part (and KVP pieces wholly before
	   some rows' chunks); with a window too, the later start */
	attn_chunk = 64;
	simt_attn("mixed hd64 9/3 bf16 chunk 64", mixed, 5, MEDHA_K_BF16, 9,
	    3, 64, 2);
	simt_attn("gqa chunks hd128 4/1 f16 chunk 64", gqa, 4, MEDHA_K_F16, 4,
	    1, 128, 2);
	simt_attn("kvp pieces hd64 4/4 bf16 chunk 64", kvp, 5, MEDHA_K_BF16,
	    4, 4, 64, 2);
	attn_window = 40;
	simt_attn("gqa chunks hd128 8/2 bf16 chunk 64 window 40", gqa, 4,
	    MEDHA_K_BF16, 8, 2, 128, 4);
	attn_window = 0;
	attn_chunk = 0;
}

/* simt.cc */
void simt_stats(char *buf, size_t len);
long simt_bank_conflicts(void);

int
main(int argc, char **argv)
{
	int attn_only = argc > 1 && !strcmp(argv[1], "attn");

	quick = 1;
	seed(3);
	simt_attn_all();
	/* the mma kernel's rows padded by 16 bytes: each 8x8 matrix of an
	   ldmatrix in one pass over the banks */
	report("simt attn mma: ldmatrix bank conflicts (extra passes)",
	    (double)simt_bank_conflicts(), 0);
	if (!attn_only) {
		t_rows(1, 576);
		t_rows(7, 576);
		t_family(5);
		t_fill(10001);
		t_kv_append(MEDHA_K_BF16, 3, 64);
		t_kv_append(MEDHA_K_F16, 8, 128);
		t_merge(1, 5, 9, 64);
		t_merge(3, 17, 8, 128);
		t_kv_append(MEDHA_K_BF16, 1, 256);
		t_merge(2, 5, 4, 256);
		t_moe_all(0);
	}
	char st[300];

	simt_stats(st, sizeof(st));
	printf("simt: %s\n", st);
	printf("%s: %d failed\n", fails ? "FAIL" : "ok", fails);
	return fails ? 1 : 0;
}

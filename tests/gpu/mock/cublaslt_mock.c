/*
 * cublaslt_mock.c: a host-memory stand-in for cuBLASLt, built as
 * libcublasLt.so.13 by tests/sh/cuda-mock.sh so that the cuda backend's
 * dlopen finds it: the calls libcore/cuda/cuda_lib.c makes (descriptors,
 * one heuristic algorithm, the product in f32), nothing more.
 *
 * Its algorithm remembers the row count m it was chosen at and the
 * preference's reduction-scheme mask. As cuBLASLt can (an out-of-place
 * split-K reduction's workspace grows with m), an algorithm whose mask
 * allowed an out-of-place reduction refuses a larger m with
 * INVALID_VALUE. MEDHA_LT_MOCK_REFUSE=invalid:M (or unsupported:M): an
 * algorithm chosen at M rows or fewer refuses more than M rows with
 * INVALID_VALUE (NOT_SUPPORTED), whatever its mask (the backend's
 * fallback then chooses one at the real m). MIN_ALIGNMENT preferences
 * are kept too: an operand less aligned than said is INVALID_VALUE.
 * MEDHA_LT_MOCK_NAN plants a NaN (run_mm).
 */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "model/quant.h"

struct lay { int type; uint64_t rows, cols; int64_t ld; };
struct desc { int ta, tb; };

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)malloc(1); return 0; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { free(h); return 0; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s)
{ *d = calloc(1, sizeof(**d)); (void)c; (void)s; return 0; }
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { free(d); return 0; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *b, size_t n)
{
	struct desc *x = (struct desc *)d->data;
	if (a == CUBLASLT_MATMUL_DESC_TRANSA) x->ta = *(const int *)b;
	else if (a == CUBLASLT_MATMUL_DESC_TRANSB) x->tb = *(const int *)b;
	else return CUBLAS_STATUS_NOT_SUPPORTED;
	(void)n; return 0;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld)
{ *l = calloc(1, sizeof(**l)); struct lay *x = (struct lay *)(*l)->data; x->type = t; x->rows = r; x->cols = c; x->ld = ld; return 0; }
cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) { free(l); return 0; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *b, size_t n)
{
	struct lay *x = (struct lay *)l->data;
	if (a == CUBLASLT_MATRIX_LAYOUT_COLS) x->cols = *(const uint64_t *)b;
	else if (a == CUBLASLT_MATRIX_LAYOUT_ROWS) x->rows = *(const uint64_t *)b;
	else return CUBLAS_STATUS_NOT_SUPPORTED;
	(void)n; return 0;
}
/* a preference: the reduction schemes allowed (all by default) and the
   operands' alignment (0: cuBLASLt's default, the 256 of a base) */
struct pref { uint32_t red, align; };
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{ *p = calloc(1, sizeof(**p)); ((struct pref *)(*p)->data)->red = CUBLASLT_REDUCTION_SCHEME_MASK; return 0; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return 0; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *b, size_t n)
{
	struct pref *x = (struct pref *)p->data;
	if (a == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK) x->red = *(const uint32_t *)b;
	else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
		x->align = x->align == 0 || *(const uint32_t *)b < x->align ? *(const uint32_t *)b : x->align;
	(void)n; return 0;
}
/* the algorithm: data[0] 42, [1] the m it was chosen at, [2] the
   reduction mask, [3] the operands' alignment */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
    cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p,
    int req, cublasLtMatmulHeuristicResult_t r[], int *ret)
{
	const struct pref *x = (const struct pref *)p->data;
	(void)h; (void)d; (void)A; (void)C; (void)D; (void)req;
	memset(&r[0], 0, sizeof(r[0]));
	r[0].algo.data[0] = 42;
	r[0].algo.data[1] = ((const struct lay *)B->data)->cols;
	r[0].algo.data[2] = x->red;
	r[0].algo.data[3] = x->align ? x->align : 256;
	*ret = 1;
	return 0;
}

/* the status an algorithm chosen at m0 rows gives for m (0: it runs) */
static cublasStatus_t
refuses(const cublasLtMatmulAlgo_t *algo, uint64_t m, const void *A, const void *B, const void *D)
{
	const char *e = getenv("MEDHA_LT_MOCK_REFUSE"), *c;
	uint64_t m0 = algo->data[1], al = algo->data[3];

	if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)D) % al != 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	if ((algo->data[2] & ~(uint64_t)(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_INPLACE)) && m > m0)
		return CUBLAS_STATUS_INVALID_VALUE; /* the workspace of m0 */
	if (e != NULL && (c = strchr(e, ':')) != NULL && m0 <= (uint64_t)atoll(c + 1) && m > (uint64_t)atoll(c + 1))
		return strncmp(e, "invalid", 7) == 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_SUPPORTED;
	return CUBLAS_STATUS_SUCCESS;
}

/* a bf16's float (medha_bf16_to_fp32's, inline: the loops below call it
   for every weight of every product) */
static inline float
bf16f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}
/* op(X) as a dense float matrix, row i being op(X)'s row i (tr: X is
   stored k x rows, column-major; else rows x k): row-major (rows x k),
   or with kmajor k-major (d[j * rows + i]: a column of k's across the
   rows, which run_mm's inner loop reads as vectors) */
static float *
dense(const struct lay *l, const void *p, int tr, uint64_t rows, uint64_t k,
    int kmajor)
{
	float *d = malloc(sizeof(float) * (size_t)(rows * k + 1));

	for (uint64_t i = 0; i < rows; i++)
		for (uint64_t j = 0; j < k; j++) {
			/* element (i, j) of op(X): X[j, i] when transposed */
			uint64_t r = tr ? j : i, c = tr ? i : j;
			size_t at = (size_t)(c * (uint64_t)l->ld + r);
			d[kmajor ? j * rows + i : i * k + j] =
			    l->type == CUDA_R_16BF
			    ? bf16f(((const uint16_t *)p)[at])
			    : ((const float *)p)[at];
		}
	return d;
}

/* one product's arguments, by value (a graph replays them) */
struct mm {
	struct desc x;
	struct lay a, b, o;
	float al, be;
	const void *A, *B;
	void *D;
};

/* 32 outputs of a column at once, as 8 vectors of 4: each output its own
   f32 sum over k in order, as one output alone would be (the same bits
   whatever M and N; the block only lets the sums share instructions) */
typedef float v4f __attribute__((vector_size(16)));
static void
run_mm(void *p)
{
	const struct mm *m = p;
	uint64_t M = m->x.ta ? m->a.cols : m->a.rows;
	uint64_t K = m->x.ta ? m->a.rows : m->a.cols;
	uint64_t N = m->x.tb ? m->b.rows : m->b.cols;
	float *at = dense(&m->a, m->A, m->x.ta, M, K, 1);
	/* op(B)'s columns as rows: (op(B))^T is B read the other way */
	float *db = dense(&m->b, m->B, !m->x.tb, N, K, 0);
	for (uint64_t j = 0; j < N; j++) {
		const float *q = db + j * K;
		float *dp = (float *)m->D + j * (uint64_t)m->o.ld;
		uint64_t i0 = 0;
		for (; i0 + 32 <= M; i0 += 32) {
			v4f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
			v4f a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
			float o[32];
			for (uint64_t k = 0; k < K; k++) {
				const float *r = at + k * M + i0;
				v4f x[8], b = {q[k], q[k], q[k], q[k]};
				memcpy(x, r, sizeof(x));
				a0 += x[0] * b, a1 += x[1] * b, a2 += x[2] * b;
				a3 += x[3] * b, a4 += x[4] * b, a5 += x[5] * b;
				a6 += x[6] * b, a7 += x[7] * b;
			}
			memcpy(o, &a0, 16), memcpy(o + 4, &a1, 16);
			memcpy(o + 8, &a2, 16), memcpy(o + 12, &a3, 16);
			memcpy(o + 16, &a4, 16), memcpy(o + 20, &a5, 16);
			memcpy(o + 24, &a6, 16), memcpy(o + 28, &a7, 16);
			for (int b = 0; b < 32; b++)
				dp[i0 + b] = m->al * o[b] +
				    (m->be != 0 ? m->be * dp[i0 + b] : 0);
		}
		for (; i0 < M; i0++) {
			float acc = 0;
			for (uint64_t k = 0; k < K; k++)
				acc += at[k * M + i0] * q[k];
			dp[i0] = m->al * acc + (m->be != 0 ? m->be * dp[i0] : 0);
		}
	}
	/* MEDHA_LT_MOCK_NAN=M: a product of M outputs (the logits') gets a
	   NaN at its last row's element 3 */
	if (getenv("MEDHA_LT_MOCK_NAN") != NULL && (uint64_t)atoll(getenv("MEDHA_LT_MOCK_NAN")) == M && N > 0)
		((float *)m->D)[(N - 1) * (uint64_t)m->o.ld + 3] = NAN;
	free(at);
	free(db);
}

/* D = alpha op(A) op(B) + beta C, column-major, C the same as D; inside
   a graph capture (cudart_mock.c's mock_defer), recorded for replay */
cublasStatus_t
cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
    const void *A, cublasLtMatrixLayout_t Ad, const void *B,
    cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
    cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
    const cublasLtMatmulAlgo_t *algo, void *w, size_t wl, cudaStream_t s)
{
	static int (*defer)(void (*)(void *), const void *, size_t);
	struct mm m;
	uint64_t M, K, N, Kb;
	cublasStatus_t st;

	(void)h, (void)w, (void)wl, (void)s;
	m.x = *(const struct desc *)d->data;
	m.a = *(const struct lay *)Ad->data;
	m.b = *(const struct lay *)Bd->data;
	m.o = *(const struct lay *)Dd->data;
	m.al = *(const float *)alpha;
	m.be = *(const float *)beta;
	m.A = A, m.B = B, m.D = D;
	M = m.x.ta ? m.a.cols : m.a.rows, K = m.x.ta ? m.a.rows : m.a.cols;
	N = m.x.tb ? m.b.rows : m.b.cols, Kb = m.x.tb ? m.b.cols : m.b.rows;
	if (algo == NULL || algo->data[0] != 42 || Kb != K || m.o.rows != M ||
	    m.o.cols != N || Cd != Dd || C != D || m.o.type != CUDA_R_32F)
		return CUBLAS_STATUS_INVALID_VALUE;
	if ((st = refuses(algo, N, A, B, D)) != CUBLAS_STATUS_SUCCESS)
		return st;
	if (defer == NULL)
		*(void **)&defer = dlsym(RTLD_DEFAULT, "mock_defer");
	if (defer == NULL || !defer(run_mm, &m, sizeof(m)))
		run_mm(&m);
	return 0;
}

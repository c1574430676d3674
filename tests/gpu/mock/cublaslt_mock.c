/*
 * cublaslt_mock.c: a host-memory stand-in for cuBLASLt, built as
 * libcublasLt.so.13 by tests/sh/cuda-mock.sh so that the cuda backend's
 * dlopen finds it: the calls backend_cuda_lib.c makes (descriptors,
 * one heuristic algorithm, the product in f32), nothing more.
 */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <dlfcn.h>
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
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = calloc(1, sizeof(**p)); return 0; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return 0; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *b, size_t n)
{ (void)p; (void)a; (void)b; (void)n; return 0; }
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
    cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p,
    int req, cublasLtMatmulHeuristicResult_t r[], int *ret)
{ (void)h; (void)d; (void)A; (void)B; (void)C; (void)D; (void)p; (void)req; memset(&r[0], 0, sizeof(r[0])); r[0].algo.data[0] = 42; *ret = 1; return 0; }

/* op(X) as a dense (rows x k) float matrix, row i being op(X)'s row i
   (tr: X is stored k x rows, column-major; else rows x k) */
static float *
dense(const struct lay *l, const void *p, int tr, uint64_t rows, uint64_t k)
{
	float *d = malloc(sizeof(float) * (size_t)(rows * k + 1));

	for (uint64_t i = 0; i < rows; i++)
		for (uint64_t j = 0; j < k; j++) {
			/* element (i, j) of op(X): X[j, i] when transposed */
			uint64_t r = tr ? j : i, c = tr ? i : j;
			size_t at = (size_t)(c * (uint64_t)l->ld + r);
			d[i * k + j] = l->type == CUDA_R_16BF
			    ? medha_bf16_to_fp32(((const uint16_t *)p)[at])
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

static void
run_mm(void *p)
{
	const struct mm *m = p;
	uint64_t M = m->x.ta ? m->a.cols : m->a.rows;
	uint64_t K = m->x.ta ? m->a.rows : m->a.cols;
	uint64_t N = m->x.tb ? m->b.rows : m->b.cols;
	float *da = dense(&m->a, m->A, m->x.ta, M, K);
	/* op(B)'s columns as rows: (op(B))^T is B read the other way */
	float *db = dense(&m->b, m->B, !m->x.tb, N, K);

	for (uint64_t j = 0; j < N; j++)
		for (uint64_t i = 0; i < M; i++) {
			const float *p = da + i * K, *q = db + j * K;
			float acc = 0;
			float *dp = (float *)m->D + j * (uint64_t)m->o.ld + i;
			for (uint64_t k = 0; k < K; k++)
				acc += p[k] * q[k];
			*dp = m->al * acc + (m->be != 0 ? m->be * *dp : 0);
		}
	free(da);
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
	if (defer == NULL)
		*(void **)&defer = dlsym(RTLD_DEFAULT, "mock_defer");
	if (defer == NULL || !defer(run_mm, &m, sizeof(m)))
		run_mm(&m);
	return 0;
}

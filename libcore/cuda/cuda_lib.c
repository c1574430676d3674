/*
 * cuda_lib.c: the libraries the cuda backend loads with dlopen
 * when it opens (linking libcublasLt.so costs every program 195 ms at
 * start, used or not): cuBLASLt for the linear layers and NCCL for TP;
 * and the linear layers themselves.
 *
 * Batch invariance (issue 26, acceptance 5): by default each GEMM shape
 * (n, k, ldy) gets one algorithm, chosen once by cuBLASLt's heuristic at
 * a fixed m (MEDHA_CUDA_GEMM_M, default 128), and keeps it for every row
 * count: the same kernel, tile and split-K for a batch of 1 and of 8192,
 * so a token's products are the same bits in any batch. The fastest path
 * (MEDHA_CUDA_GEMM=fast) asks the heuristic per power-of-two m instead.
 * An algorithm that refuses a row count (NOT_SUPPORTED, or INVALID_VALUE:
 * cuBLASLt's answer when the configuration needs more than it has) is
 * replaced for that m by one chosen at it, said once per shape on stderr
 * ("medha: cuda: fallback: ...", which contrib/gpu-check.sh counts):
 * those products are then not batch-invariant.
 */
#include "cuda/cuda_impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CUDA runtime error as a MEDHA_E* code and a reason naming the call. */
int
cuda_err(char *why, size_t whylen, int e, const char *what)
{
	return medha_why(why, whylen,
	    e == cudaErrorMemoryAllocation ? MEDHA_ENOMEM : MEDHA_EIO,
	    "cuda: %s: %s (%d)", what, cudaGetErrorString((cudaError_t)e), e);
}

int
cuda_ok(int e, const char *what, char *why, size_t whylen)
{
	return e == 0 ? 0 : cuda_err(why, whylen, e, what);
}

/* dlopen the first of names that loads; its dlerror in err if none. */
static void *
open_first(const char *const *names, char *err, size_t errlen)
{
	void *dl;

	err[0] = '\0';
	for (; *names != NULL; names++) {
		if ((dl = dlopen(*names, RTLD_NOW | RTLD_LOCAL)) != NULL)
			return dl;
		snprintf(err, errlen, "%s", dlerror());
	}
	return NULL;
}

/* An entry point to look up: its name, and where its address goes. */
struct sym {
	const char *name;
	void **fn;
};
#define SYM(tab, f) {#f, (void **)&(tab)->f}

/* The n entry points of s from dl, or MEDHA_EUNSUP naming the first
   that lib lacks. */
static int
syms(void *dl, const struct sym *s, int n, const char *lib, char *why,
    size_t whylen)
{
	for (int i = 0; i < n; i++)
		if ((*s[i].fn = dlsym(dl, s[i].name)) == NULL)
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "cuda: %s has no %s", lib, s[i].name);
	return 0;
}

int
cuda_lt_open(struct medha_cuda *c, char *why, size_t whylen)
{
	static const char *const names[] = {"libcublasLt.so.13",
	    "libcublasLt.so", NULL};
	struct cuda_lt *t = &c->lib.lt;
	const char *lib = "libcublasLt.so.13";
	const struct sym lt_syms[] = {SYM(t, cublasLtCreate),
	    SYM(t, cublasLtDestroy), SYM(t, cublasLtMatmulDescCreate),
	    SYM(t, cublasLtMatmulDescDestroy),
	    SYM(t, cublasLtMatmulDescSetAttribute),
	    SYM(t, cublasLtMatrixLayoutCreate),
	    SYM(t, cublasLtMatrixLayoutDestroy),
	    SYM(t, cublasLtMatrixLayoutSetAttribute),
	    SYM(t, cublasLtMatmulPreferenceCreate),
	    SYM(t, cublasLtMatmulPreferenceDestroy),
	    SYM(t, cublasLtMatmulPreferenceSetAttribute),
	    SYM(t, cublasLtMatmulAlgoGetHeuristic), SYM(t, cublasLtMatmul)};
	char err[512];
	int st, rc;

	if ((t->dl = open_first(names, err, sizeof(err))) == NULL)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: cannot load cuBLASLt (libcublasLt.so.13 or "
		    "libcublasLt.so; set LD_LIBRARY_PATH to CUDA's lib64): %s",
		    err);
	if ((rc = syms(t->dl, lt_syms,
	         (int)(sizeof(lt_syms) / sizeof(lt_syms[0])), lib, why,
	         whylen)) != 0)
		return rc;
	if ((st = t->cublasLtCreate(&c->lib.lth)) != CUBLAS_STATUS_SUCCESS) {
		c->lib.lth = NULL;
		return medha_why(why, whylen, MEDHA_EIO,
		    "cuda: cublasLtCreate: status %d", st);
	}
	return 0;
}

void
cuda_lt_close(struct medha_cuda *c)
{
	struct cuda_lt *t = &c->lib.lt;

	for (int i = 0; i < c->lib.n_gemm; i++) {
		struct cuda_gemm *g = &c->lib.gemm[i];
		t->cublasLtMatrixLayoutDestroy(g->a);
		t->cublasLtMatrixLayoutDestroy(g->b);
		t->cublasLtMatrixLayoutDestroy(g->d);
		t->cublasLtMatmulDescDestroy(g->desc);
	}
	c->lib.n_gemm = 0;
	if (c->lib.lth != NULL)
		t->cublasLtDestroy(c->lib.lth);
	c->lib.lth = NULL;
	if (t->dl != NULL)
		dlclose(t->dl);
	t->dl = NULL;
}

int
cuda_nccl_load(struct medha_cuda *c, char *why, size_t whylen)
{
	static const char *const names[] = {"libnccl.so.2", "libnccl.so",
	    NULL};
	struct cuda_nccl *t = &c->lib.nc;
	const char *lib = "libnccl.so.2";
	const struct sym nc_syms[] = {SYM(t, ncclGetUniqueId),
	    SYM(t, ncclCommInitRank), SYM(t, ncclAllReduce),
	    SYM(t, ncclGetErrorString), SYM(t, ncclCommAbort),
	    SYM(t, ncclCommGetAsyncError)};
	char err[512];
	int rc;

	if (t->dl != NULL)
		return 0;
	if ((t->dl = open_first(names, err, sizeof(err))) == NULL)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: cannot load NCCL (libnccl.so.2; set "
		    "LD_LIBRARY_PATH, or use the host collectives, --coll "
		    "nng): %s",
		    err);
	if ((rc = syms(t->dl, nc_syms,
	         (int)(sizeof(nc_syms) / sizeof(nc_syms[0])), lib, why,
	         whylen)) != 0)
		return rc;
	/* optional: without it, a blocking init (no timeout) */
	*(void **)&t->ncclCommInitRankConfig = dlsym(t->dl,
	    "ncclCommInitRankConfig");
	return 0;
}

void
cuda_nccl_close(struct medha_cuda *c)
{
	/* (cuda_close aborted it first); an abort, not a destroy: it
	   waits for no peer, and one may be gone */
	if (c->lib.nccl != NULL)
		c->lib.nc.ncclCommAbort(c->lib.nccl);
	c->lib.nccl = NULL;
	if (c->lib.nc.dl != NULL)
		dlclose(c->lib.nc.dl);
	c->lib.nc.dl = NULL;
}

/* ---- the linear layers ---- */

/* 0 for a cuBLASLt status of success, else MEDHA_EIO naming the call
   and the product's m x n x k */
static int
lt_ok(int st, const char *what, int m, const struct cuda_gemm *g, char *why,
    size_t whylen)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return 0;
	return medha_why(why, whylen, MEDHA_EIO,
	    "cuda: %s: cuBLASLt status %d (%d x %d x %d)", what, st, m, g->n,
	    g->k);
}

/* The descriptors of shape (n, k, ldy), made at its first use. */
static struct cuda_gemm *
shape(struct medha_cuda *c, int n, int k, int ldy, char *why, size_t whylen)
{
	struct cuda_lt *t = &c->lib.lt;
	struct cuda_gemm *g;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	int i;

	for (i = 0; i < c->lib.n_gemm; i++)
		if (c->lib.gemm[i].n == n && c->lib.gemm[i].k == k &&
		    c->lib.gemm[i].ldy == ldy)
			return &c->lib.gemm[i];
	if (c->lib.n_gemm == CUDA_GEMM_SHAPES) {
		medha_why(why, whylen, MEDHA_ENOMEM,
		    "cuda: more than %d GEMM shapes", CUDA_GEMM_SHAPES);
		return NULL;
	}
	g = &c->lib.gemm[c->lib.n_gemm];
	memset(g, 0, sizeof(*g));
	g->n = n;
	g->k = k;
	g->ldy = ldy;
	/* column-major: y^T (n, m) = W (k, n)^T x^T (k, m) */
	if (t->cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F,
	        CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
		medha_why(why, whylen, MEDHA_EIO,
		    "cuda: cublasLtMatmulDescCreate failed");
		return NULL;
	}
	if (t->cublasLtMatmulDescSetAttribute(g->desc,
	        CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) ||
	    t->cublasLtMatmulDescSetAttribute(g->desc,
	        CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) ||
	    t->cublasLtMatrixLayoutCreate(&g->a, CUDA_R_16BF, k, n, k) ||
	    t->cublasLtMatrixLayoutCreate(&g->b, CUDA_R_16BF, k, 1, k) ||
	    t->cublasLtMatrixLayoutCreate(&g->d, CUDA_R_32F, n, 1, ldy)) {
		medha_why(why, whylen, MEDHA_EIO,
		    "cuda: cuBLASLt descriptors for %d x %d failed", n, k);
		return NULL;
	}
	c->lib.n_gemm++;
	return g;
}

/* Set the row count m on g's layouts. */
static int
set_m(struct medha_cuda *c, struct cuda_gemm *g, int m)
{
	uint64_t cols = (uint64_t)m;

	if (c->lib.lt.cublasLtMatrixLayoutSetAttribute(g->b,
	        CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)) ||
	    c->lib.lt.cublasLtMatrixLayoutSetAttribute(g->d,
	        CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)))
		return -1;
	return 0;
}

/*
 * The heuristic's first algorithm for g at m rows, into *algo. Its
 * reduction is none or in place: an out-of-place split-K reduction needs
 * workspace that grows with m * n (an algorithm chosen at m = 128 could
 * then refuse an 8K-token prefill, INVALID_VALUE), and in place keeps
 * the sum's order fixed. Every operand is at least 16-byte aligned (an
 * allocation's base; cuda_gemm checks), which the heuristic is told
 * rather than assuming the 256 bytes of a base.
 */
static int
pick(struct medha_cuda *c, struct cuda_gemm *g, int m,
    cublasLtMatmulAlgo_t *algo, char *why, size_t whylen)
{
	struct cuda_lt *t = &c->lib.lt;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res;
	uint64_t ws = CUDA_LT_WORK;
	uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE |
	    CUBLASLT_REDUCTION_SCHEME_INPLACE, al = CUDA_LT_ALIGN;
	int nres = 0, st, rc;

	if ((rc = lt_ok(set_m(c, g, m), "setting the row count", m, g, why,
	         whylen)) != 0 ||
	    (rc = lt_ok(t->cublasLtMatmulPreferenceCreate(&pref),
	         "cublasLtMatmulPreferenceCreate", m, g, why, whylen)) != 0)
		return rc;
	st = t->cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
	if (st == CUBLAS_STATUS_SUCCESS)
		st = t->cublasLtMatmulPreferenceSetAttribute(pref,
		    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red,
		    sizeof(red));
	for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
	     a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES &&
	     st == CUBLAS_STATUS_SUCCESS;
	     a++)
		st = t->cublasLtMatmulPreferenceSetAttribute(pref,
		    (cublasLtMatmulPreferenceAttributes_t)a, &al, sizeof(al));
	if (st == CUBLAS_STATUS_SUCCESS)
		st = t->cublasLtMatmulAlgoGetHeuristic(c->lib.lth, g->desc,
		    g->a, g->b, g->d, g->d, pref, 1, &res, &nres);
	t->cublasLtMatmulPreferenceDestroy(pref);
	if ((rc = lt_ok(st, "cublasLtMatmulAlgoGetHeuristic", m, g, why,
	         whylen)) != 0)
		return rc;
	if (nres < 1)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: cuBLASLt has no algorithm for a bf16 %d x %d x %d "
		    "product",
		    m, g->n, g->k);
	*algo = res.algo;
	return 0;
}

static int
log2_ceil(int m)
{
	int b = 0;

	while ((1 << b) < m && b < 31)
		b++;
	return b;
}

/*
 * y (m, n) f32, row stride ldy = x (m, k) bf16 times w (n, k) bf16
 * transposed, plus beta times y (beta 1: the residual add fused).
 */
int
cuda_gemm(struct medha_cuda *c, const uint16_t *w, int n, int k,
    const uint16_t *x, int m, float *y, int ldy, float beta, char *why,
    size_t whylen)
{
	struct cuda_gemm *g;
	cublasLtMatmulAlgo_t *algo;
	const float alpha = 1;
	int rc, b, st;

	if (m < 1)
		return 0;
	if (((uintptr_t)w | (uintptr_t)x | (uintptr_t)y) % CUDA_LT_ALIGN != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: a %d x %d product's operand is not %d-byte aligned "
		    "(the heuristic is told they are)",
		    n, k, CUDA_LT_ALIGN);
	if ((g = shape(c, n, k, ldy, why, whylen)) == NULL)
		return MEDHA_EIO;
	if (c->lib.fast) {
		b = log2_ceil(m);
		algo = &g->fast[b];
		if (!(g->fast_have >> b & 1)) {
			if ((rc = pick(c, g, 1 << b, algo, why, whylen)) != 0)
				return rc;
			g->fast_have |= 1u << b;
		}
	} else {
		algo = &g->algo;
		if (!g->have) {
			if ((rc = pick(c, g, c->lib.gemm_m, algo, why,
			         whylen)) != 0)
				return rc;
			g->have = 1;
		}
	}
	if ((rc = lt_ok(set_m(c, g, m), "setting the row count", m, g, why,
	         whylen)) != 0)
		return rc;
	st = c->lib.lt.cublasLtMatmul(c->lib.lth, g->desc, &alpha, w, g->a, x,
	    g->b, &beta, y, g->d, y, g->d, algo, c->s.ltwork, CUDA_LT_WORK,
	    c->st);
	if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
	    st == CUBLAS_STATUS_INVALID_VALUE) {
		/* the algorithm cannot take this m (NOT_SUPPORTED), or not
		   within the workspace (INVALID_VALUE): one chosen at this m,
		   kept for the next call at the same m (a prefill's chunks);
		   a status the fallback gets too is the call's error */
		if (g->own_m != m) {
			if ((rc = pick(c, g, m, &g->own, why, whylen)) != 0)
				return rc;
			g->own_m = m;
		}
		if (!(g->warned >> (st == CUBLAS_STATUS_INVALID_VALUE) & 1))
			fprintf(stderr, "medha: cuda: fallback: the %d x %d "
			    "product's algorithm (chosen at %d rows) refuses "
			    "%d with %s: chosen again for them (not "
			    "batch-invariant; said once)\n", g->n, g->k,
			    c->lib.fast ? 1 << log2_ceil(m) : c->lib.gemm_m, m,
			    st == CUBLAS_STATUS_INVALID_VALUE
			        ? "INVALID_VALUE" : "NOT_SUPPORTED");
		g->warned |= 1 << (st == CUBLAS_STATUS_INVALID_VALUE);
		st = c->lib.lt.cublasLtMatmul(c->lib.lth, g->desc, &alpha, w,
		    g->a, x, g->b, &beta, y, g->d, y, g->d, &g->own,
		    c->s.ltwork, CUDA_LT_WORK, c->st);
	}
	return lt_ok(st, "cublasLtMatmul", m, g, why, whylen);
}

/*
 * moe.cu: a mixture of experts' routed FFN (kernels.h), as the cpu
 * backend's cpu/cpu_moe.c: the router's logits in f32, the top-k of
 * each token (one thread a token), the rows sorted by expert (one
 * block: counts by atomics in shared memory, offsets and tiles by one
 * thread, the rows placed by atomics again), the gather, the grouped
 * product over the experts' segments, and the weighted sum.
 *
 * The grouped product is one kernel over (row tiles, column tiles):
 * each row tile lies in one expert's segment (the sort cuts a segment
 * into tiles of MEDHA_K_MOE_BM rows), so a tile reads that expert's
 * weights once; its grid is as many tiles as the sort can make for the
 * batch's size (medha_k_moe_tiles), those it did not make marked -1 and
 * left at once, so the launch's shape depends on the token count alone
 * and a decode step's graph holds it. Its sums are f32 fused
 * multiply-adds in K order, one thread an output: a row's result is the
 * same bits in any batch. CUDA cores, not tensor cores: a decode step
 * reads each chosen expert's weights once, which is what bounds it;
 * prefill's speed is to be measured (contrib/gpu-check.sh's moe step).
 */
#include "common.cuh"

#define GRID_CAP 65536
#define BM MEDHA_K_MOE_BM
#define BN 64  /* columns of a tile */
#define BK 32  /* the K slice held in shared memory */
#define GEMM_THREADS 256 /* BM x (BN / 4): four columns a thread */
#define SORT_THREADS 256

extern "C" int
medha_k_moe_tiles(int n, int ne, int k)
{
	int64_t nk = (int64_t)n * k;

	return (int)((nk + BM - 1) / BM + (nk < ne ? nk : ne));
}

/* ---- the router ---- */

/* one block a token (strided), each warp a logit row at a time */
static __global__ void
logits_kernel(float *out, const float *x, const float *w, int n, int rows,
    int dim)
{
	const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
	const int nw = blockDim.x >> 5;

	for (int t = blockIdx.x; t < n; t += gridDim.x) {
		const float *xt = x + (int64_t)t * dim;
		for (int r = wp; r < rows; r += nw) {
			const float *wr = w + (int64_t)r * dim;
			float s = 0;
			for (int c = lane; c < dim; c += 32)
				s = fmaf(xt[c], wr[c], s);
			s = warp_sum(s);
			if (lane == 0)
				out[(int64_t)t * rows + r] = s;
		}
	}
}

extern "C" int
medha_k_moe_logits(float *logits, const float *x, const float *w, int n,
    int rows, int dim, cudaStream_t stream)
{
	if (n < 0 || rows < 1 || dim < 1)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(logits_kernel, grid_for(n, 1, GRID_CAP), 256, 0,
	    stream)(logits, x, w, n, rows, dim);
	return launch_status();
}

/* one thread a token: its weights, the k best kept sorted (cpu_moe.c's
   route(), step for step) */
static __global__ void
route_kernel(struct medha_k_moe m, const float *lg, int ls, int n)
{
	for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n;
	     t += gridDim.x * blockDim.x) {
		const float *x = lg + (int64_t)t * ls;
		int sel[MEDHA_K_MOE_KMAX], j = 0, e, i;
		float sc[MEDHA_K_MOE_KMAX], pr[MEDHA_K_MOE_KMAX];
		float mx = -INFINITY, inv = 1;
		double sum = 0;

		if (!m.sigmoid) {
			for (e = 0; e < m.ne; e++)
				mx = x[e] > mx ? x[e] : mx;
			for (e = 0; e < m.ne; e++)
				sum += (double)expf(x[e] - mx);
			inv = (float)(1.0 / sum);
		}
		for (e = 0; e < m.ne; e++) {
			const float p = m.sigmoid ? 1.0f / (1.0f + expf(-x[e]))
			                          : expf(x[e] - mx) * inv;
			const float s = m.by_logit ? x[e] : p;
			if (j == m.k && !(s > sc[j - 1]))
				continue;
			i = j < m.k ? j++ : m.k - 1;
			while (i > 0 && s > sc[i - 1]) {
				sel[i] = sel[i - 1];
				sc[i] = sc[i - 1];
				pr[i] = pr[i - 1];
				i--;
			}
			sel[i] = e;
			sc[i] = s;
			pr[i] = p;
		}
		if (m.norm_w) {
			double s = 0;
			float f;
			for (i = 0; i < m.k; i++)
				s += (double)pr[i];
			f = (float)s;
			f = f < 6.103515625e-5f ? 6.103515625e-5f : f;
			for (i = 0; i < m.k; i++)
				pr[i] /= f;
		}
		for (i = 0; i < m.k; i++) {
			m.sel[(int64_t)t * m.k + i] = sel[i];
			m.wt[(int64_t)t * m.k + i] = pr[i];
		}
		if (m.gsh != NULL)
			m.gsh[t] = 1.0f / (1.0f + expf(-x[m.ne]));
	}
}

static int
moe_bad(const struct medha_k_moe *m)
{
	return m->ne < 1 || m->k < 1 || m->k > MEDHA_K_MOE_KMAX ||
	    m->k > m->ne;
}

extern "C" int
medha_k_moe_route(const struct medha_k_moe *m, const float *logits, int ls,
    int n, cudaStream_t stream)
{
	if (n < 0 || moe_bad(m) || ls < m->ne + (m->gsh != NULL))
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(route_kernel, grid_for(n, 128, GRID_CAP), 128, 0,
	    stream)(*m, logits, ls, n);
	return launch_status();
}

/* ---- the sort ---- */

/* smem: cnt (ne), then fill (ne), then the tiles made (1) */
static __global__ void
sort_kernel(struct medha_k_moe m, int n, int ntiles)
{
	MEDHA_DYN_SMEM(int, sm, 16);
	int *cnt = sm, *fill = sm + m.ne, *made = sm + 2 * m.ne;
	const int nk = n * m.k, tid = threadIdx.x, nt = blockDim.x;
	int i, e;

	for (e = tid; e < m.ne; e += nt)
		cnt[e] = 0;
	__syncthreads();
	for (i = tid; i < nk; i += nt)
		atomicAdd(&cnt[m.sel[i]], 1);
	__syncthreads();
	if (tid == 0) {
		int o = 0, tl = 0;
		for (e = 0; e < m.ne; e++) {
			m.off[e] = o;
			fill[e] = o;
			for (int r = o; r < o + cnt[e]; r += BM, tl++) {
				m.tiles[3 * tl] = e;
				m.tiles[3 * tl + 1] = r;
				m.tiles[3 * tl + 2] =
				    r + BM < o + cnt[e] ? r + BM : o + cnt[e];
			}
			o += cnt[e];
		}
		m.off[m.ne] = o;
		*made = tl;
	}
	__syncthreads();
	for (i = *made + tid; i < ntiles; i += nt)
		m.tiles[3 * i] = -1;
	for (i = tid; i < nk; i += nt) {
		const int r = atomicAdd(&fill[m.sel[i]], 1);
		m.row[i] = r;
		m.src[r] = i;
	}
}

extern "C" int
medha_k_moe_sort(const struct medha_k_moe *m, int n, cudaStream_t stream)
{
	const size_t smem = sizeof(int) * (2 * (size_t)m->ne + 1);

	if (n < 0 || moe_bad(m) || smem > 48 * 1024)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(sort_kernel, 1, SORT_THREADS, smem, stream)(*m, n,
	    medha_k_moe_tiles(n, m->ne, m->k));
	return launch_status();
}

static __global__ void
gather_kernel(uint16_t *xg, const uint16_t *x, int ldx, int dim,
    struct medha_k_moe m, int64_t total, int scale)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / dim;
		const int c = (int)(i % dim), tj = m.src[r];
		const uint16_t v = x[(int64_t)(tj / m.k) * ldx + c];
		xg[i] = scale ? f32_bf16(bf16_f32(v) * m.wt[tj]) : v;
	}
}

extern "C" int
medha_k_moe_gather(uint16_t *xg, const uint16_t *x, int ldx, int dim,
    const struct medha_k_moe *m, int n, int scale, cudaStream_t stream)
{
	const int64_t total = (int64_t)n * m->k * dim;

	if (n < 0 || dim < 1 || ldx < dim || moe_bad(m))
		return cudaErrorInvalidValue;
	if (total == 0)
		return 0;
	MEDHA_LAUNCH(gather_kernel, grid_for(total, 256, GRID_CAP), 256, 0,
	    stream)(xg, x, ldx, dim, *m, total, scale);
	return launch_status();
}

/* ---- the grouped product ---- */

/* block (row tile blockIdx.x, column tile blockIdx.y); thread (ty, tx):
   row ty of the tile, columns tx + 16 i (i < 4) */
static __global__ void
gemm_kernel(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w,
    int64_t we, int N, int K, const int32_t *tiles)
{
	MEDHA_SHARED(float, xs, BM * BK);
	MEDHA_SHARED(float, ws, BN * (BK + 1));
	const int32_t *tl = tiles + 3 * (int64_t)blockIdx.x;
	const int e = tl[0];

	if (e < 0) /* the whole block: no barrier is passed */
		return;
	const int r0 = tl[1], nr = tl[2] - tl[1], n0 = blockIdx.y * BN;
	const uint16_t *W = w + (int64_t)e * we;
	const int tid = threadIdx.x, ty = tid / (BN / 4), tx = tid % (BN / 4);
	float acc[4] = {0, 0, 0, 0};

	for (int k0 = 0; k0 < K; k0 += BK) {
		for (int i = tid; i < BM * BK; i += GEMM_THREADS) {
			const int r = i / BK, kk = k0 + i % BK;
			xs[i] = r < nr && kk < K
			    ? bf16_f32(x[(int64_t)(r0 + r) * ldx + kk])
			    : 0.0f;
		}
		for (int i = tid; i < BN * BK; i += GEMM_THREADS) {
			const int j = i / BK, kk = k0 + i % BK;
			ws[j * (BK + 1) + i % BK] = n0 + j < N && kk < K
			    ? bf16_f32(W[(int64_t)(n0 + j) * K + kk])
			    : 0.0f;
		}
		__syncthreads();
		const int kn = K - k0 < BK ? K - k0 : BK;
		for (int kk = 0; kk < kn; kk++) {
			const float a = xs[ty * BK + kk];
			for (int i = 0; i < 4; i++)
				acc[i] = fmaf(a,
				    ws[(tx + (BN / 4) * i) * (BK + 1) + kk],
				    acc[i]);
		}
		__syncthreads();
	}
	if (ty < nr)
		for (int i = 0; i < 4; i++) {
			const int j = n0 + tx + (BN / 4) * i;
			if (j < N)
				y[(int64_t)(r0 + ty) * ldy + j] = acc[i];
		}
}

extern "C" int
medha_k_moe_gemm(float *y, int ldy, const uint16_t *x, int ldx,
    const uint16_t *w, int64_t we, int N, int K, const int32_t *tiles,
    int ntiles, cudaStream_t stream)
{
	if (N < 1 || K < 1 || ldy < N || ldx < K || we < (int64_t)N * K ||
	    ntiles < 0 || (N + BN - 1) / BN > 65535)
		return cudaErrorInvalidValue;
	if (ntiles == 0)
		return 0;
	MEDHA_LAUNCH(gemm_kernel, dim3((unsigned)ntiles, (N + BN - 1) / BN),
	    GEMM_THREADS, 0, stream)(y, ldy, x, ldx, w, we, N, K, tiles);
	return launch_status();
}

/* ---- the weighted sum ---- */

static __global__ void
sum_kernel(float *out, int add, const float *ys, int dim,
    struct medha_k_moe m, int64_t total, int weighted, const float *sh)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t t = i / dim;
		const int c = (int)(i % dim);
		float o = 0;

		for (int j = 0; j < m.k; j++) {
			const int64_t tj = t * m.k + j;
			const float v = ys[(int64_t)m.row[tj] * dim + c];
			const float vw = weighted ? v * m.wt[tj] : v;
			o = j == 0 ? vw : o + vw;
		}
		if (sh != NULL)
			o += m.gsh != NULL ? sh[i] * m.gsh[t] : sh[i];
		out[i] = add ? out[i] + o : o;
	}
}

extern "C" int
medha_k_moe_sum(float *out, int add, const float *ys, int dim,
    const struct medha_k_moe *m, int n, int weighted, const float *sh,
    cudaStream_t stream)
{
	const int64_t total = (int64_t)n * dim;

	if (n < 0 || dim < 1 || moe_bad(m))
		return cudaErrorInvalidValue;
	if (total == 0)
		return 0;
	MEDHA_LAUNCH(sum_kernel, grid_for(total, 256, GRID_CAP), 256, 0,
	    stream)(out, add, ys, dim, *m, total, weighted, sh);
	return launch_status();
}

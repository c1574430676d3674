/*
 * sample.cu: the head of the model: gathering the rows whose logits a
 * batch asks for, greedy choice and random sampling, as the cpu
 * sampler (libcore/model/sample.c) does it.
 *
 * Sampling sorts each row whole, by (logit falling, id rising), the
 * order of sample.c's before(): one device-wide radix sort (CUB) of
 * SAMPLE_ROWS rows at a time, the row in the key's high 32 bits and the
 * logit, made into an unsigned key that orders as the float, in the low
 * 32 (complemented: falling). The sort is stable and the ids enter
 * rising, so equal logits keep the lower id first. One block per row
 * then takes sample.c's steps on the sorted row:
 *  - k = top_k if 0 < top_k < vocab, else vocab;
 *  - if 0 < top_p < 1, m = the first i + 1 with sum_{j<=i} exp(l_j -
 *    l_0) / z >= top_p (f64, z the sum over the k), else k;
 *  - p_i = (float)((float)e_i / sum e), e_i = exp((l_i - l_0) / temp)
 *    in f64;
 *  - the first i with u < sum_{j<=i} p_j, else the last.
 * The sums of the nucleus are f64 over the block, in another order than
 * sample.c's loop (rounding only: a p exactly at a boundary may differ
 * by an ulp). The last cumulative sum is sample.c's own f32 loop, on one
 * thread, when m <= SERIAL_MAX (top_k, or a nucleus of a peaked row: the
 * usual case); in f64 over the block when longer, where only a u within
 * an ulp or so of a boundary can choose the neighbour.
 * Rows with temp <= 0 are greedy (medha_k_argmax's choice).
 */
#include "common.cuh"

#include <cub/cub.cuh>

#define SAMPLE_ROWS 8   /* rows sorted at once (bounds the scratch) */
#define SERIAL_MAX 4096 /* longest candidate list drawn sequentially */
#define THREADS 1024

/* ---- gather, argmax ---- */

static __global__ void
gather_kernel(float *y, const float *x, const int32_t *rows, int dim)
{
	const float *src = x + (int64_t)rows[blockIdx.x] * dim;
	float *dst = y + (int64_t)blockIdx.x * dim;

	for (int c = threadIdx.x; c < dim; c += blockDim.x)
		dst[c] = src[c];
}

extern "C" int
medha_k_gather_rows(float *y, const float *x, const int32_t *rows, int n,
    int dim, cudaStream_t stream)
{
	if (n < 0 || dim < 1)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(gather_kernel, n, 256, 0, stream)(y, x, rows, dim);
	return launch_status();
}

/* the argmax of one row by the whole block (every thread gets it) */
static __device__ int
row_argmax(const float *l, int vocab)
{
	MEDHA_SHARED(float, shv, 32);
	MEDHA_SHARED(int, shi, 32);
	float v = -INFINITY;
	int i = INT32_MAX;

	for (int c = threadIdx.x; c < vocab; c += blockDim.x)
		if (l[c] > -INFINITY) /* never a NaN, nor -inf (below) */
			argmax_pick(&v, &i, l[c], c);
	block_argmax(&v, &i, shv, shi);
	if (i != INT32_MAX)
		return i;
	/* no number above -inf (all -inf or NaN): the first -inf, or 0 */
	i = INT32_MAX;
	for (int c = threadIdx.x; c < vocab; c += blockDim.x)
		if (l[c] == -INFINITY && c < i)
			i = c;
	{
		__shared__ int first;
		if (threadIdx.x == 0)
			first = INT32_MAX;
		__syncthreads();
		atomicMin(&first, i);
		__syncthreads();
		i = first;
		__syncthreads();
	}
	return i == INT32_MAX ? 0 : i;
}

/* a row with a NaN or an infinity gets -1 (the backend's error: the
   check of every logit, on the GPU) */
static __global__ void
argmax_kernel(int32_t *ids, const float *logits, int vocab)
{
	const float *l = logits + (int64_t)blockIdx.x * vocab;
	int bad = 0, i;

	for (int c = threadIdx.x; c < vocab; c += blockDim.x)
		bad |= !isfinite(l[c]);
	bad = __syncthreads_or(bad);
	i = row_argmax(l, vocab);
	if (threadIdx.x == 0)
		ids[blockIdx.x] = bad ? -1 : i;
}

extern "C" int
medha_k_argmax(int32_t *ids, const float *logits, int n, int vocab,
    cudaStream_t stream)
{
	if (n < 0 || vocab < 1)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(argmax_kernel, n, THREADS, 0, stream)(ids, logits, vocab);
	return launch_status();
}

/* ---- sampling ---- */

/* a float's bits as an unsigned key that orders as the float does */
static __device__ __forceinline__ uint32_t
float_key(float f)
{
	uint32_t u = __float_as_uint(f + 0.0f); /* -0 and +0 alike */

	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __global__ void
keys_kernel(uint64_t *keys, int32_t *vals, const float *logits, int rows,
    int vocab)
{
	int64_t total = (int64_t)rows * vocab;

	for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     t < total; t += (int64_t)gridDim.x * blockDim.x) {
		uint64_t r = (uint64_t)(t / vocab);

		keys[t] = (r << 32) | (uint64_t)(~float_key(logits[t]));
		vals[t] = (int32_t)(t % vocab);
	}
}

/*
 * The first index i of [0, n) whose inclusive prefix sum of term(i)
 * reaches the test (cum >= target when ge, else target < cum), or n:
 * the block scans THREADS terms at a time in f64.
 */
template <typename Term>
static __device__ int
first_crossing(int n, Term term, double target, int ge)
{
	MEDHA_SHARED(double, wsum, 32);
	__shared__ double carry_sh;
	__shared__ int found;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	double carry = 0;

	for (int base = 0; base < n; base += blockDim.x) {
		int i = base + threadIdx.x;
		double x = i < n ? term(i) : 0, y;

		for (int o = 1; o < 32; o <<= 1) {
			y = __shfl_up_sync(0xffffffffu, x, o);
			if (lane >= o)
				x += y;
		}
		if (lane == 31)
			wsum[w] = x;
		if (threadIdx.x == 0)
			found = INT32_MAX;
		__syncthreads();
		if (w == 0) {
			double s = lane < (int)(blockDim.x >> 5) ? wsum[lane] : 0;

			for (int o = 1; o < 32; o <<= 1) {
				y = __shfl_up_sync(0xffffffffu, s, o);
				if (lane >= o)
					s += y;
			}
			wsum[lane] = s; /* inclusive over warps */
		}
		__syncthreads();
		x += carry + (w > 0 ? wsum[w - 1] : 0);
		if (i < n && (ge ? x >= target : target < x))
			atomicMin(&found, i);
		if (threadIdx.x == blockDim.x - 1)
			carry_sh = x;
		__syncthreads();
		if (found != INT32_MAX)
			return found;
		carry = carry_sh;
		__syncthreads(); /* wsum, carry_sh, found are reused */
	}
	return n;
}

struct nucleus_term {
	const float *l;
	const int32_t *id;
	float max;
	double z;
	__device__ double operator()(int i) const
	{
		return exp((double)l[id[i]] - max) / z;
	}
};

struct prob_term {
	const float *l;
	const int32_t *id;
	float max;
	float temp;
	double z;
	__device__ double operator()(int i) const
	{
		return (double)(float)((double)(float)exp(((double)l[id[i]] -
		    max) / temp) / z);
	}
};

static __global__ void
pick_kernel(int32_t *ids, const float *logits, const int32_t *sorted, int r0,
    int vocab, const float *temp, const int32_t *top_k, const float *top_p,
    const float *u)
{
	MEDHA_SHARED(double, shd, 32);
	int r = r0 + blockIdx.x, k, m;
	const float *l = logits + (int64_t)r * vocab;
	const int32_t *id = sorted + (int64_t)blockIdx.x * vocab;
	float max, t = temp[r], p = top_p[r];
	double z;

	if (!(t > 0)) {
		int g = row_argmax(l, vocab);

		if (threadIdx.x == 0)
			ids[r] = g;
		return;
	}
	k = top_k[r] > 0 && top_k[r] < vocab ? top_k[r] : vocab;
	max = l[id[0]];
	m = k;
	if (p < 1 && p > 0) {
		z = 0;
		for (int i = threadIdx.x; i < k; i += blockDim.x)
			z += exp((double)l[id[i]] - max);
		z = block_sum<double>(z, shd);
		m = first_crossing(k, nucleus_term{l, id, max, z}, (double)p, 1);
		m = m < k ? m + 1 : k;
	}
	z = 0;
	for (int i = threadIdx.x; i < m; i += blockDim.x)
		z += exp(((double)l[id[i]] - max) / t);
	z = block_sum<double>(z, shd);
	prob_term pt{l, id, max, t, z};
	if (m <= SERIAL_MAX) {
		if (threadIdx.x == 0) { /* sample.c's own loop */
			float cum = 0, rr = u[r];
			int i;

			for (i = 0; i < m; i++) {
				cum += (float)pt(i);
				if (rr < cum)
					break;
			}
			ids[r] = id[i < m ? i : m - 1];
		}
		return;
	}
	int i = first_crossing(m, pt, (double)u[r], 0);
	if (threadIdx.x == 0)
		ids[r] = id[i < m ? i : m - 1];
}

/* the scratch of one sort of `rows` rows: keys twice, values twice, CUB's */
static size_t
sort_bytes(int rows, int vocab, size_t *cub_bytes)
{
	size_t items = (size_t)rows * vocab, tb = 0;
	int bits = 32;

	while ((1 << (bits - 32)) < rows)
		bits++;
	if (cub::DeviceRadixSort::SortPairs(NULL, tb, (const uint64_t *)NULL,
	        (uint64_t *)NULL, (const int32_t *)NULL, (int32_t *)NULL,
	        (int64_t)items, 0, bits) != cudaSuccess)
		return 0;
	*cub_bytes = tb;
	return 2 * items * sizeof(uint64_t) + 2 * items * sizeof(int32_t) + tb +
	    256;
}

extern "C" size_t
medha_k_sample_workspace(int n, int vocab)
{
	size_t cb;

	if (n < 1 || vocab < 1)
		return 0;
	return sort_bytes(n < SAMPLE_ROWS ? n : SAMPLE_ROWS, vocab, &cb);
}

extern "C" int
medha_k_sample(int32_t *ids, const float *logits, int n, int vocab,
    const float *temp, const int32_t *top_k, const float *top_p,
    const float *u, void *work, size_t work_len, cudaStream_t stream)
{
	int g = n < SAMPLE_ROWS ? n : SAMPLE_ROWS;
	size_t cb = 0, need, items;
	uint64_t *k0, *k1;
	int32_t *v0, *v1;
	char *w = (char *)work;
	cudaError_t e;

	if (n < 0 || vocab < 1)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	need = sort_bytes(g, vocab, &cb);
	if (need == 0 || work == NULL || work_len < need)
		return cudaErrorInvalidValue;
	items = (size_t)g * vocab;
	k0 = (uint64_t *)w;
	k1 = k0 + items;
	v0 = (int32_t *)(k1 + items);
	v1 = v0 + items;
	w = (char *)(((uintptr_t)(v1 + items) + 255) & ~(uintptr_t)255);
	for (int r0 = 0; r0 < n; r0 += g) {
		int rows = n - r0 < g ? n - r0 : g, bits = 32;
		size_t tb = cb;

		while ((1 << (bits - 32)) < rows)
			bits++;
		MEDHA_LAUNCH(keys_kernel, grid_for((int64_t)rows * vocab, 256,
		    65536), 256, 0, stream)(k0, v0,
		    logits + (int64_t)r0 * vocab, rows, vocab);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return (int)e;
		e = cub::DeviceRadixSort::SortPairs(w, tb, k0, k1, v0, v1,
		    (int64_t)rows * vocab, 0, bits, stream);
		if (e != cudaSuccess)
			return (int)e;
		MEDHA_LAUNCH(pick_kernel, rows, THREADS, 0, stream)(ids, logits,
		    v1, r0, vocab, temp, top_k, top_p, u);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return (int)e;
	}
	return 0;
}

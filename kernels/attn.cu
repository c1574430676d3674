/*
 * attn.cu: causal grouped-query attention of a mixed batch against the
 * paged cache (kernels.h states the function; attn.cuh the cutting of
 * the work).
 *
 * One call is four launches:
 *  1. plan_kernel (one thread): each sequence's path, vector tiles and
 *     split parts (attn_split), and the prefix sums that number the
 *     items of each path and the part rows of the split sequences (made
 *     once for all the layers of a forward pass by medha_k_attn_plan,
 *     the calls then planned: 256 sequences take it some 100 us);
 *  2. simple_kernel: the sequences with n_q * G <= ATTN_MAX_VS vectors
 *     per kv head (decodes, chunks of a few rows): f32 arithmetic on
 *     the CUDA cores, memory-bound, the next tile of keys loaded into
 *     registers while the block works on this one;
 *  3. attn_mma_launch (attn_mma.cu): the others, on the tensor cores;
 *  4. fold_kernel: the split sequences' parts folded by their log-sum-
 *     exps, in part order.
 * Kernels 2 and 3 stride over their items (a grid sized from the host's
 * bounds; items past the device's count exit at once), so nothing waits
 * on the host. MEDHA_K_ATTN=simple in the environment sends every
 * sequence to the simple kernel (the check of the fast path, and its
 * fallback), as a head size over ATTN_MMA_MAX_HD always does (256:
 * Gemma 2/3; the mma kernel's registers at 256, its O alone 128 a
 * thread, are not yet measured on a GPU).
 */
#include "attn.cuh"

#include <stdlib.h>
#include <string.h>

#define SIMPLE_THREADS 128

/* ---- the plan ---- */

static __global__ void
plan_kernel(struct attn_plan *plan, int64_t *totals, struct medha_k_seqs s,
    int G, int n_heads, int sms, int simple_only)
{
	if (threadIdx.x == 0 && blockIdx.x == 0)
		attn_plan_all(plan, totals, &s, G, n_heads, sms, simple_only);
}

/* ---- the simple kernel ---- */

/*
 * Block: 4 warps, 16 vectors, tiles of 32 keys in shared memory as f32.
 * Warp w takes vectors w, w + 4, w + 8, w + 12 (so a decode's G vectors
 * spread over the warps), scores them against the tile (lane i: key
 * i), keeps their running max and sum in registers, and adds the
 * probabilities times the values into its lanes' columns (lane i:
 * columns i * HD/32 ...); slots past the item's vectors are skipped
 * (warp-uniform branches), and a warp with none only loads. The keys of
 * the next tile are loaded into registers (16 bytes a load) before the
 * block works on this one.
 */
template <int HD, int T>
static __global__ void __launch_bounds__(SIMPLE_THREADS)
simple_kernel(struct attn_args a)
{
	constexpr int TILE = ATTN_SIMPLE_TILE, VPW = 4, CPL = HD / 32;
	constexpr int U4 = TILE * HD / 8 / SIMPLE_THREADS; /* uint4 each */
	/* qsh, ksh, vsh (simple_smem): dynamic, over 48 KB at HD 256 */
	MEDHA_DYN_SMEM(float, simple_sm, 16);
	float (*qsh)[HD] = (float (*)[HD])simple_sm;
	float (*ksh)[HD + 4] = (float (*)[HD + 4])(simple_sm +
	    ATTN_SIMPLE_V * HD);
	float (*vsh)[HD] = (float (*)[HD])(simple_sm + ATTN_SIMPLE_V * HD +
	    TILE * (HD + 4));
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t total = a.totals[0];

	for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {
		int s = attn_item_seq(a.plan, a.s.n_seqs, w, 0);
		struct attn_item it = attn_item_of(&a, a.plan, w, s,
		    ATTN_SIMPLE_V);
		const int32_t *table = a.s.table + a.s.table_off[s];
		const uint16_t *kp = (const uint16_t *)a.kv.k;
		const uint16_t *vp = (const uint16_t *)a.kv.v;
		int64_t lim[VPW], low[VPW], k_beg, k_end;
		float m[VPW], l[VPW], acc[VPW][CPL];
		/* this warp's vectors: warp + 4 i for i < nvw */
		int nvw = it.nv > warp ? (it.nv - warp + 3) / 4 : 0;
		uint4 kr[U4], vr[U4];

		/* the vectors, scaled into base 2; 0 past the item's */
		for (int e = threadIdx.x; e < ATTN_SIMPLE_V * HD;
		     e += SIMPLE_THREADS) {
			int v = e / HD, c = e % HD;
			float x = 0;

			if (v < it.nv) {
				int r = (it.v0 + v) / a.G;
				int h = it.kvh * a.G + (it.v0 + v) % a.G;

				x = a.q[(int64_t)(a.s.q_start[s] + r) * a.qs +
				        (int64_t)h * HD + c] * a.scale_log2;
			}
			qsh[v][c] = x;
		}
		for (int i = 0; i < VPW; i++) {
			lim[i] = attn_limit(&a, &it, warp + 4 * i);
			low[i] = attn_lower(&a, &it, warp + 4 * i);
			m[i] = -INFINITY;
			l[i] = 0;
			for (int c = 0; c < CPL; c++)
				acc[i][c] = 0;
		}
		k_end = attn_limit(&a, &it, it.nv - 1); /* the largest */
		k_beg = attn_lower(&a, &it, 0);         /* the smallest */

		/* row e / (HD/8) of a tile, 8 elements at (e % (HD/8)) * 8 */
		auto load = [&](int64_t base) {
			for (int i = 0; i < U4; i++) {
				int e = threadIdx.x + i * SIMPLE_THREADS;
				int row = e / (HD / 8), c8 = e % (HD / 8);
				int64_t slot = base + row;

				if (slot < k_end) {
					int sl = (int)slot; /* < 2^31 positions */
					int64_t b = table[sl / a.kv.block_size];
					int64_t off = kv_elem(&a.kv, b, it.kvh,
					    sl % a.kv.block_size, c8 * 8);

					kr[i] = *(const uint4 *)(kp + off);
					vr[i] = *(const uint4 *)(vp + off);
				} else {
					kr[i] = make_uint4(0, 0, 0, 0);
					vr[i] = make_uint4(0, 0, 0, 0);
				}
			}
		};
		auto store = [&]() {
			for (int i = 0; i < U4; i++) {
				int e = threadIdx.x + i * SIMPLE_THREADS;
				int row = e / (HD / 8), c8 = e % (HD / 8);
				const uint16_t *kh = (const uint16_t *)&kr[i];
				const uint16_t *vh = (const uint16_t *)&vr[i];
				float4 *kd = (float4 *)&ksh[row][c8 * 8];
				float4 *vd = (float4 *)&vsh[row][c8 * 8];

				kd[0] = make_float4(kv_f32<T>(kh[0]), kv_f32<T>(kh[1]),
				    kv_f32<T>(kh[2]), kv_f32<T>(kh[3]));
				kd[1] = make_float4(kv_f32<T>(kh[4]), kv_f32<T>(kh[5]),
				    kv_f32<T>(kh[6]), kv_f32<T>(kh[7]));
				vd[0] = make_float4(kv_f32<T>(vh[0]), kv_f32<T>(vh[1]),
				    kv_f32<T>(vh[2]), kv_f32<T>(vh[3]));
				vd[1] = make_float4(kv_f32<T>(vh[4]), kv_f32<T>(vh[5]),
				    kv_f32<T>(vh[6]), kv_f32<T>(vh[7]));
			}
		};

		if (k_beg < k_end)
			load(k_beg);
		for (int64_t base = k_beg; base < k_end; base += TILE) {
			float sc[VPW];

			__syncthreads(); /* the last tile (or qsh) is done */
			store();
			__syncthreads();
			if (base + TILE < k_end)
				load(base + TILE);
			if (nvw == 0)
				continue; /* no vectors: loads and barriers only */
			/* scores: lane = key */
			for (int i = 0; i < VPW; i++)
				sc[i] = 0;
			for (int c = 0; c < HD; c += 4) {
				float4 k4 = *(const float4 *)&ksh[lane][c];

				for (int i = 0; i < VPW; i++) {
					if (i >= nvw)
						break;
					float4 q4 = *(const float4 *)
					    &qsh[warp + 4 * i][c];

					sc[i] += q4.x * k4.x + q4.y * k4.y +
					    q4.z * k4.z + q4.w * k4.w;
				}
			}
			for (int i = 0; i < VPW; i++) {
				float mx, mu, al, p;

				if (i >= nvw)
					break;
				sc[i] = attn_cap(&a, sc[i]);
				if (base + lane >= lim[i] || base + lane < low[i])
					sc[i] = -INFINITY;
				mx = fmaxf(m[i], warp_max(sc[i]));
				mu = mx == -INFINITY ? 0.0f : mx;
				al = exp2f(m[i] - mu);
				p = exp2f(sc[i] - mu);
				l[i] = l[i] * al + warp_sum(p);
				m[i] = mx;
				sc[i] = p;
				for (int c = 0; c < CPL; c++)
					acc[i][c] *= al;
			}
			/* values: lane = columns */
			for (int kk = 0; kk < TILE; kk++) {
				float vv[CPL];

				if (CPL >= 4) { /* 16 bytes a load */
					for (int c4 = 0; c4 < CPL; c4 += 4) {
						float4 t = *(const float4 *)
						    &vsh[kk][lane * CPL + c4];

						vv[c4 % CPL] = t.x;
						vv[(c4 + 1) % CPL] = t.y;
						vv[(c4 + 2) % CPL] = t.z;
						vv[(c4 + 3) % CPL] = t.w;
					}
				} else {
					float2 t = *(const float2 *)&vsh[kk][lane * 2];

					vv[0] = t.x;
					vv[1] = t.y;
				}
				for (int i = 0; i < VPW; i++) {
					if (i >= nvw)
						break;
					float p = __shfl_sync(0xffffffffu, sc[i],
					    kk);

					for (int c = 0; c < CPL; c++)
						acc[i][c] += p * vv[c];
				}
			}
		}
#pragma unroll
		for (int i = 0; i < VPW; i++) /* constant indices: registers */
			if (i < nvw)
				attn_store(&a, &it, warp + 4 * i, HD, lane * CPL,
				    acc[i], CPL, m[i], l[i], lane == 0);
		__syncthreads(); /* qsh is rewritten by the next item */
	}
}

/* ---- the fold ---- */

/* block per batch row, warp per head (attn_fold_one) */
static __global__ void
fold_kernel(struct attn_args a, int hd)
{
	int t = blockIdx.x, s = seq_of_row(&a.s, t);

	if (s < 0 || a.plan[s].ns <= 1)
		return;
	for (int h = threadIdx.x >> 5; h < a.n_heads; h += blockDim.x >> 5)
		attn_fold_one(&a, s, t, h, hd, threadIdx.x & 31, 32);
}

/* ---- the launcher ---- */

static int
sm_count(int *sms)
{
	int dev;
	cudaError_t e;

	if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
	    (e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount,
	         dev)) != cudaSuccess)
		return (int)e;
	return 0;
}

/*
 * Part rows a batch of this shape can need at most. A split sequence of
 * n rows has ns parts, ns <= ceil(2 sms / t) with t = ceil(n / 16) and
 * ns <= ceil(max_kv / ATTN_MIN_PART): so n * ns <= 2 sms * n, and (n > 16) n * ns
 * <= 16 t (2 sms / t + 1) <= 32 sms + n + 15; summed over the batch.
 */
static int64_t
part_rows_bound(const struct medha_k_attn *a, int sms)
{
	const struct medha_k_seqs *s = a->s;
	int64_t by_rows = 2 * (int64_t)sms * s->n_tokens;
	int64_t by_seqs = (int64_t)s->n_seqs * (32 * (int64_t)sms + 15) +
	    s->n_tokens;
	int64_t by_kv = (int64_t)s->n_tokens *
	    ((s->max_kv + ATTN_MIN_PART - 1) / ATTN_MIN_PART);
	int64_t b = by_rows < by_seqs ? by_rows : by_seqs;

	return (b < by_kv ? b : by_kv) * a->n_heads;
}

struct layout {
	size_t plan, totals, part_o, part_lse, end;
};

static struct layout
work_layout(const struct medha_k_attn *a, int sms)
{
	struct layout L;
	int64_t rows = part_rows_bound(a, sms);
	size_t hd = (size_t)a->kv->head_dim;

	L.plan = 0;
	L.totals = (sizeof(struct attn_plan) * (size_t)a->s->n_seqs + 255) &
	    ~(size_t)255;
	L.part_o = L.totals + 256;
	L.part_lse = L.part_o + (((size_t)rows * hd * 4 + 255) & ~(size_t)255);
	L.end = L.part_lse + (size_t)rows * 4 + 256;
	return L;
}

static int
check(const struct medha_k_attn *a)
{
	const struct medha_k_kv_layer *kv = a->kv;

	if (kv == NULL || a->s == NULL || a->q == NULL ||
	    (a->out == NULL) == (a->out_f32 == NULL) ||
	    (kv->head_dim != 64 && kv->head_dim != 128 &&
	        kv->head_dim != 256) ||
	    (kv->kv_type != MEDHA_K_BF16 && kv->kv_type != MEDHA_K_F16) ||
	    kv->n_kv_heads < 1 || a->n_heads < kv->n_kv_heads ||
	    a->n_heads % kv->n_kv_heads != 0 || kv->block_size < 1 ||
	    a->qs < a->n_heads * kv->head_dim || a->s->n_seqs < 0 ||
	    a->s->n_tokens < 0)
		return cudaErrorInvalidValue;
	return 0;
}

extern "C" size_t
medha_k_attn_workspace(const struct medha_k_attn *a)
{
	int sms = 0;

	if (check(a) != 0)
		return 0;
	if (sm_count(&sms) != 0 || sms < 1)
		sms = 1024; /* larger than any GPU's: a bound all the same */
	return work_layout(a, sms).end;
}

/* the kernels' arguments, their scratch at w laid out as L */
static void
args_make(struct attn_args *x, const struct medha_k_attn *a, char *w,
    const struct layout *L)
{
	memset(x, 0, sizeof(*x));
	x->kv = *a->kv;
	x->s = *a->s;
	x->q = a->q;
	x->qs = a->qs;
	x->n_heads = a->n_heads;
	x->G = a->n_heads / a->kv->n_kv_heads;
	x->scale_log2 = a->scale * 1.4426950408889634f;
	if (a->softcap > 0) {
		x->scale_log2 = a->scale / a->softcap;
		x->cap_log2 = a->softcap * 1.4426950408889634f;
	}
	x->window = a->window > 0 ? a->window : 0;
	x->chunk = a->chunk > 0 ? a->chunk : 0;
	x->out = a->out;
	x->out_f32 = a->out_f32;
	x->lse = a->lse;
	x->plan = (const struct attn_plan *)(w + L->plan);
	x->totals = (const int64_t *)(w + L->totals);
	x->part_o = (float *)(w + L->part_o);
	x->part_lse = (float *)(w + L->part_lse);
}

/* the simple kernel's shared memory: qsh, ksh (rows padded by 4), vsh */
static size_t
simple_smem(int hd)
{
	return ((size_t)ATTN_SIMPLE_V * hd + (size_t)ATTN_SIMPLE_TILE *
	    (hd + 4) + (size_t)ATTN_SIMPLE_TILE * hd) * sizeof(float);
}

template <int HD, int T>
static int
launch_simple(const struct attn_args *x, unsigned grid, cudaStream_t stream)
{
	size_t smem = simple_smem(HD);
	static int dev_set = -1; /* the device the limit was raised on */
	int rc;

	/* over 48 KB at HD 256 (80.5 KB) */
	if (smem > 48 * 1024 &&
	    (rc = attn_smem_limit((const void *)simple_kernel<HD, T>, smem,
	         &dev_set)) != 0)
		return rc;
	MEDHA_LAUNCH(MEDHA_KERNEL2(simple_kernel, HD, T), grid, SIMPLE_THREADS,
	    smem, stream)(*x);
	return launch_status();
}

/* the plan of a's batch into its workspace (a checked, L its layout) */
static int
plan_launch(const struct medha_k_attn *a, const struct layout *L, int sms,
    cudaStream_t stream)
{
	const char *env = getenv("MEDHA_K_ATTN");
	int simple_only = env != NULL && !strcmp(env, "simple");
	char *w = (char *)a->work;

	if (a->kv->head_dim > ATTN_MMA_MAX_HD)
		simple_only = 1;

	MEDHA_LAUNCH(plan_kernel, 1, 32, 0,
	    stream)((struct attn_plan *)(w + L->plan),
	    (int64_t *)(w + L->totals), *a->s, a->n_heads / a->kv->n_kv_heads,
	    a->n_heads, sms, simple_only);
	return launch_status();
}

extern "C" int
medha_k_attn_plan(const struct medha_k_attn *a, cudaStream_t stream)
{
	struct layout L;
	int sms, rc;

	if ((rc = check(a)) != 0)
		return rc;
	if (a->s->n_seqs == 0 || a->s->n_tokens == 0)
		return 0;
	if ((rc = sm_count(&sms)) != 0)
		return rc;
	L = work_layout(a, sms);
	if (a->work == NULL || a->work_len < L.end)
		return cudaErrorInvalidValue;
	return plan_launch(a, &L, sms, stream);
}

extern "C" int
medha_k_attn(const struct medha_k_attn *a, cudaStream_t stream)
{
	const struct medha_k_kv_layer *kv = a->kv;
	const struct medha_k_seqs *s = a->s;
	struct attn_args x;
	struct layout L;
	const char *env = getenv("MEDHA_K_ATTN");
	int sms, rc, chunk, simple_only = env != NULL && !strcmp(env, "simple");
	int64_t bound;
	unsigned g0, g1;
	char *w = (char *)a->work;

	if ((rc = check(a)) != 0)
		return rc;
	if (s->n_seqs == 0 || s->n_tokens == 0)
		return 0;
	if (kv->head_dim > ATTN_MMA_MAX_HD)
		simple_only = 1;
	if ((rc = sm_count(&sms)) != 0)
		return rc;
	L = work_layout(a, sms);
	if (w == NULL || a->work_len < L.end)
		return cudaErrorInvalidValue;
	args_make(&x, a, w, &L);
	if (!a->planned && (rc = plan_launch(a, &L, sms, stream)) != 0)
		return rc;
	/* grids: the items' bounds (a sequence's parts are at most those of
	   one row against max_kv), capped; the kernels stride */
	bound = (int64_t)attn_split(1, s->max_kv, sms, &chunk) *
	    kv->n_kv_heads;
	g0 = grid_for(bound * (s->n_seqs + (int64_t)s->n_tokens * x.G /
	                 ATTN_SIMPLE_V), 1, 16 * sms);
	g1 = grid_for(bound * (s->n_seqs + (int64_t)s->n_tokens * x.G /
	                 ATTN_MMA_V), 1, 4 * sms);
	if (kv->head_dim == 64)
		rc = kv->kv_type == MEDHA_K_BF16 ?
		    launch_simple<64, MEDHA_K_BF16>(&x, g0, stream) :
		    launch_simple<64, MEDHA_K_F16>(&x, g0, stream);
	else if (kv->head_dim == 128)
		rc = kv->kv_type == MEDHA_K_BF16 ?
		    launch_simple<128, MEDHA_K_BF16>(&x, g0, stream) :
		    launch_simple<128, MEDHA_K_F16>(&x, g0, stream);
	else
		rc = kv->kv_type == MEDHA_K_BF16 ?
		    launch_simple<256, MEDHA_K_BF16>(&x, g0, stream) :
		    launch_simple<256, MEDHA_K_F16>(&x, g0, stream);
	if (rc != 0)
		return rc;
	/* no launch that has nothing to do: no sequence has more than
	   ATTN_MAX_VS vectors (a batch of decodes), none is split */
	if (!simple_only && (int64_t)s->max_q * x.G > ATTN_MAX_VS &&
	    (rc = attn_mma_launch(&x, g1, stream)) != 0)
		return rc;
	if (attn_split(1, s->max_kv, sms, &chunk) < 2)
		return 0;
	MEDHA_LAUNCH(fold_kernel, s->n_tokens, 256, 0, stream)(x, kv->head_dim);
	return launch_status();
}

/* ---- the host's emulation (attn.cuh: the test hooks) ---- */

/*
 * Item w of path p as its kernel cuts it: vector by vector, tiles of
 * the kernel's size from the part's start, the same limits, the online
 * softmax in base 2, attn_store; f32 arithmetic on the host.
 */
template <int T>
static void
emu_item(const struct attn_args *a, int64_t w, int path)
{
	int s = attn_item_seq(a->plan, a->s.n_seqs, w, path);
	int tile = path ? ATTN_MMA_TILE : ATTN_SIMPLE_TILE;
	struct attn_item it = attn_item_of(a, a->plan, w, s,
	    path ? ATTN_MMA_V : ATTN_SIMPLE_V);
	const int32_t *table = a->s.table + a->s.table_off[s];
	int hd = a->kv.head_dim;
	int64_t k_end = attn_limit(a, &it, it.nv - 1);
	int64_t k_beg = attn_lower(a, &it, 0);
	float *acc = (float *)malloc((size_t)hd * sizeof(float));
	float *qv = (float *)malloc((size_t)hd * sizeof(float));
	float *sc = (float *)malloc((size_t)tile * sizeof(float));

	for (int v = 0; v < it.nv; v++) {
		int64_t lim = attn_limit(a, &it, v), low = attn_lower(a, &it, v);
		int r = (it.v0 + v) / a->G, h = it.kvh * a->G + (it.v0 + v) % a->G;
		float m = -INFINITY, l = 0;

		for (int c = 0; c < hd; c++) {
			qv[c] = a->q[(int64_t)(a->s.q_start[s] + r) * a->qs +
			            (int64_t)h * hd + c] * a->scale_log2;
			acc[c] = 0;
		}
		for (int64_t base = k_beg; base < k_end; base += tile) {
			float mx = m, mu, al;

			for (int i = 0; i < tile; i++) {
				int64_t slot = base + i;

				sc[i] = -INFINITY;
				if (slot >= lim || slot < low)
					continue;
				int64_t off = kv_elem(&a->kv,
				    table[slot / a->kv.block_size], it.kvh,
				    (int)(slot % a->kv.block_size), 0);
				float d = 0;
				for (int c = 0; c < hd; c++)
					d += qv[c] * kv_f32<T>(((const uint16_t *)
					    a->kv.k)[off + c]);
				sc[i] = d = attn_cap(a, d);
				mx = fmaxf(mx, d);
			}
			mu = mx == -INFINITY ? 0.0f : mx;
			al = exp2f(m - mu);
			for (int c = 0; c < hd; c++)
				acc[c] *= al;
			l *= al;
			for (int i = 0; i < tile; i++) {
				float p = exp2f(sc[i] - mu);

				l += p;
				if (p == 0)
					continue;
				int64_t slot = base + i;
				int64_t off = kv_elem(&a->kv,
				    table[slot / a->kv.block_size], it.kvh,
				    (int)(slot % a->kv.block_size), 0);
				for (int c = 0; c < hd; c++)
					acc[c] += p * kv_f32<T>(((const uint16_t *)
					    a->kv.v)[off + c]);
			}
			m = mx;
		}
		attn_store(a, &it, v, hd, 0, acc, hd, m, l, 1);
	}
	free(acc);
	free(qv);
	free(sc);
}

extern "C" size_t
medha_k_attn_emulate_workspace(const struct medha_k_attn *a, int sms)
{
	return check(a) != 0 ? 0 : work_layout(a, sms).end;
}

extern "C" int
medha_k_attn_emulate(const struct medha_k_attn *a, int sms, int simple_only)
{
	struct attn_args x;
	struct layout L;
	int rc;

	if ((rc = check(a)) != 0)
		return rc;
	L = work_layout(a, sms);
	if (a->work == NULL || a->work_len < L.end)
		return cudaErrorInvalidValue;
	args_make(&x, a, (char *)a->work, &L);
	if (a->kv->head_dim > ATTN_MMA_MAX_HD)
		simple_only = 1;
	attn_plan_all((struct attn_plan *)((char *)a->work + L.plan),
	    (int64_t *)((char *)a->work + L.totals), a->s, x.G, a->n_heads, sms,
	    simple_only);
	/* the parts fit the bound the workspace was sized by */
	for (int i = 0; i < a->s->n_seqs; i++)
		if (x.plan[i].ns > 1 && x.plan[i].part0 + (int64_t)x.plan[i].ns *
		        a->s->n_q[i] * a->n_heads > part_rows_bound(a, sms))
			return cudaErrorInvalidValue;
	for (int p = 0; p < 2; p++)
		for (int64_t w = 0; w < x.totals[p]; w++)
			if (a->kv->kv_type == MEDHA_K_BF16)
				emu_item<MEDHA_K_BF16>(&x, w, p);
			else
				emu_item<MEDHA_K_F16>(&x, w, p);
	for (int t = 0; t < a->s->n_tokens; t++) {
		int s = seq_of_row(a->s, t);

		if (s >= 0 && x.plan[s].ns > 1)
			for (int h = 0; h < a->n_heads; h++)
				attn_fold_one(&x, s, t, h, a->kv->head_dim, 0, 1);
	}
	return 0;
}

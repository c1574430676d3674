/*
 * attn_mma.cu: the tensor-core attention kernel, flash-attention-2 style,
 * for items of ATTN_MMA_V query vectors (attn.cuh): 4 warps of 16
 * vectors each, their queries held in registers as bf16 (or f16, the
 * cache's type) A fragments, scaled into base 2; tiles of 64 keys and
 * values copied into shared memory with cp.async, two deep (the next
 * tile streams in while the warps work on this one); per tile S = Q K^T
 * and O += P V with mma.sync m16n8k16 (f32 accumulation), the online
 * softmax on the S fragments in registers, and P reused from them as
 * the A operand of the second product. ldmatrix reads K (and V,
 * transposed) out of rows padded by 16 bytes, which keeps the 8 rows of
 * each 8x8 matrix in distinct banks.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
 * A: a0 (row g, k 2t..2t+1), a1 (g+8, 2t), a2 (g, 2t+8), a3 (g+8, 2t+8);
 * B: b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); C: c0, c1 (row g, n 2t,
 * 2t+1), c2, c3 (row g+8, ...). Lower column in the lower half.
 *
 * Under MEDHA_SIMT (tests/gpu/simt: this file compiled as host C++ for
 * the SIMT emulator) the inline-asm helpers call the emulator's
 * versions of the same PTX instructions; nvcc never defines it.
 */
#include "attn.cuh"

#define MMA_THREADS 128
#define TILE ATTN_MMA_TILE

template <int T>
static __device__ __forceinline__ void
mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
#ifdef MEDHA_SIMT
	simt_mma16816(T == MEDHA_K_BF16, c, a, b0, b1);
#else
	if (T == MEDHA_K_BF16)
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		             "{%0,%1,%2,%3};\n"
		             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
		             "r"(b0), "r"(b1));
	else
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		             "{%0,%1,%2,%3};\n"
		             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
		             "r"(b0), "r"(b1));
#endif
}

static __device__ __forceinline__ void
ldsm_x4(uint32_t *r, uint32_t addr)
{
#ifdef MEDHA_SIMT
	simt_ldsm_x4(r, addr, 0);
#else
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
	             "{%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
#endif
}

static __device__ __forceinline__ void
ldsm_x4_t(uint32_t *r, uint32_t addr)
{
#ifdef MEDHA_SIMT
	simt_ldsm_x4(r, addr, 1);
#else
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
	             "{%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
#endif
}

/* 16 bytes global -> shared; src_bytes 0 fills the 16 with zeros */
static __device__ __forceinline__ void
cp_async16(uint32_t dst, const void *src, int src_bytes)
{
#ifdef MEDHA_SIMT
	simt_cp_async16(dst, src, src_bytes);
#else
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
	             "l"(src), "r"(src_bytes));
#endif
}

static __device__ __forceinline__ void
cp_commit(void)
{
#ifdef MEDHA_SIMT
	simt_cp_commit();
#else
	asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
static __device__ __forceinline__ void
cp_wait(void)
{
#ifdef MEDHA_SIMT
	simt_cp_wait(N);
#else
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* two f32 as the cache's 16-bit type, the first in the low half: bf16
   by one cvt.rn.bf16x2.f32 (sm_80+; its first source goes to the upper
   half), f16 by two cvt.rn.f16.f32 (__float2half_rn) */
template <int T>
static __device__ __forceinline__ uint32_t
pack2(float lo, float hi)
{
	if (T == MEDHA_K_BF16) {
#if defined(MEDHA_SIMT)
		return simt_cvt_rn_bf16x2_f32(hi, lo);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
		uint32_t d;
		asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
		return d;
#endif
	}
	return (uint32_t)f32_kv<T>(lo) | ((uint32_t)f32_kv<T>(hi) << 16);
}

template <int HD, int T>
static __global__ void __launch_bounds__(MMA_THREADS)
mma_kernel(struct attn_args a)
{
	constexpr int RS = HD + 8;       /* padded row, elements */
	constexpr int KS = HD / 16;      /* k steps of Q K^T */
	constexpr int NO = HD / 8;       /* n tiles of O */
	constexpr int CH = TILE * HD / 8 / MMA_THREADS; /* 16 B copies each */
	MEDHA_DYN_SMEM(uint16_t, sm, 16); /* K0 V0 K1 V1 */
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int g = lane >> 2, t4 = lane & 3;
	int64_t total = a.totals[1];
	uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sm);

	for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {
		int s = attn_item_seq(a.plan, a.s.n_seqs, w, 1);
		struct attn_item it = attn_item_of(&a, a.plan, w, s, ATTN_MMA_V);
		const int32_t *table = a.s.table + a.s.table_off[s];
		const uint16_t *kp = (const uint16_t *)a.kv.k;
		const uint16_t *vp = (const uint16_t *)a.kv.v;
		int va = warp * 16 + g, vb = va + 8; /* this thread's rows */
		int64_t lim_a = attn_limit(&a, &it, va);
		int64_t lim_b = attn_limit(&a, &it, vb);
		int64_t lim_w = attn_limit(&a, &it,
		    warp * 16 + 15 < it.nv ? warp * 16 + 15 : it.nv - 1);
		int64_t k_end = attn_limit(&a, &it, it.nv - 1);
		/* the window's starts: the rows', the warp's and the item's
		   smallest (it.k_lo where there is no window) */
		int64_t low_a = attn_lower(&a, &it, va);
		int64_t low_b = attn_lower(&a, &it, vb);
		int64_t low_w = attn_lower(&a, &it, warp * 16);
		int64_t k_beg = attn_lower(&a, &it, 0);
		float m_a = -INFINITY, m_b = -INFINITY, l_a = 0, l_b = 0;
		float o[NO][4];
		uint32_t qa[KS][4];

		if (warp * 16 >= it.nv)
			lim_w = it.k_lo; /* a warp with no vectors */
#pragma unroll
		for (int n = 0; n < NO; n++)
			o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
		/* Q fragments: rows va (a0, a2) and vb (a1, a3) */
		{
			const float *qa_p = NULL, *qb_p = NULL;

			if (va < it.nv) {
				int r = (it.v0 + va) / a.G;
				int h = it.kvh * a.G + (it.v0 + va) % a.G;

				qa_p = a.q + (int64_t)(a.s.q_start[s] + r) * a.qs +
				    (int64_t)h * HD;
			}
			if (vb < it.nv) {
				int r = (it.v0 + vb) / a.G;
				int h = it.kvh * a.G + (it.v0 + vb) % a.G;

				qb_p = a.q + (int64_t)(a.s.q_start[s] + r) * a.qs +
				    (int64_t)h * HD;
			}
#pragma unroll
			for (int kk = 0; kk < KS; kk++) {
				int c0 = kk * 16 + 2 * t4, c1 = c0 + 8;
				float sl = a.scale_log2;

				qa[kk][0] = qa_p ? pack2<T>(qa_p[c0] * sl,
				                       qa_p[c0 + 1] * sl) : 0;
				qa[kk][1] = qb_p ? pack2<T>(qb_p[c0] * sl,
				                       qb_p[c0 + 1] * sl) : 0;
				qa[kk][2] = qa_p ? pack2<T>(qa_p[c1] * sl,
				                       qa_p[c1 + 1] * sl) : 0;
				qa[kk][3] = qb_p ? pack2<T>(qb_p[c1] * sl,
				                       qb_p[c1 + 1] * sl) : 0;
			}
		}

		/* tile at slot base into buffer buf: K at buf*2, V at buf*2+1 */
		auto load = [&](int64_t base, int buf) {
#pragma unroll
			for (int i = 0; i < CH; i++) {
				int e = threadIdx.x + i * MMA_THREADS;
				int row = e / (HD / 8), c8 = e % (HD / 8);
				int64_t slot = base + row;
				uint32_t dk = sbase + (uint32_t)(((buf * 2) * TILE *
				    RS + row * RS + c8 * 8) * 2);
				uint32_t dv = dk + TILE * RS * 2;

				if (slot < k_end) {
					int sl = (int)slot; /* < 2^31 positions */
					int64_t b = table[sl / a.kv.block_size];
					int64_t off = kv_elem(&a.kv, b, it.kvh,
					    sl % a.kv.block_size, c8 * 8);

					cp_async16(dk, kp + off, 16);
					cp_async16(dv, vp + off, 16);
				} else {
					cp_async16(dk, kp, 0);
					cp_async16(dv, vp, 0);
				}
			}
			cp_commit();
		};

		int64_t n_tiles = k_end > k_beg ?
		    (k_end - k_beg + TILE - 1) / TILE : 0;
		if (n_tiles > 0)
			load(k_beg, 0);
		for (int64_t ti = 0; ti < n_tiles; ti++) {
			int64_t base = k_beg + ti * TILE;
			int buf = (int)(ti & 1);

			if (ti + 1 < n_tiles) {
				load(base + TILE, buf ^ 1);
				cp_wait<1>();
			} else {
				cp_wait<0>();
			}
			__syncthreads();
			if (base < lim_w && base + TILE > low_w) {
				uint32_t kb = sbase + (uint32_t)(buf * 2 * TILE * RS * 2);
				uint32_t vb_ = kb + TILE * RS * 2;
				float sc[TILE / 8][4];

#pragma unroll
				for (int j = 0; j < TILE / 8; j++)
					sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0;
				/* S = Q K^T: matrix i of ldmatrix = lanes 8i..8i+7:
				   keys +(i>>1)*8, columns +(i&1)*8 */
#pragma unroll
				for (int kk = 0; kk < KS; kk++)
#pragma unroll
					for (int np = 0; np < TILE / 16; np++) {
						uint32_t r[4];
						int mi = lane >> 3;
						int key = np * 16 + (lane & 7) + (mi >> 1) * 8;
						int col = kk * 16 + (mi & 1) * 8;

						ldsm_x4(r, kb + (uint32_t)((key * RS + col) * 2));
						mma16816<T>(sc[2 * np], qa[kk], r[0], r[1]);
						mma16816<T>(sc[2 * np + 1], qa[kk], r[2], r[3]);
					}
				/* mask, the online softmax (rows va: c0 c1, vb: c2 c3) */
				float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
				for (int j = 0; j < TILE / 8; j++) {
					int64_t key = base + j * 8 + 2 * t4;

					for (int e = 0; e < 4; e++)
						sc[j][e] = attn_cap(&a, sc[j][e]);
					if (key >= lim_a || key < low_a)
						sc[j][0] = -INFINITY;
					if (key + 1 >= lim_a || key + 1 < low_a)
						sc[j][1] = -INFINITY;
					if (key >= lim_b || key < low_b)
						sc[j][2] = -INFINITY;
					if (key + 1 >= lim_b || key + 1 < low_b)
						sc[j][3] = -INFINITY;
					mx_a = fmaxf(mx_a, fmaxf(sc[j][0], sc[j][1]));
					mx_b = fmaxf(mx_b, fmaxf(sc[j][2], sc[j][3]));
				}
				mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
				mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
				mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
				mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
				mx_a = fmaxf(mx_a, m_a);
				mx_b = fmaxf(mx_b, m_b);
				float mu_a = mx_a == -INFINITY ? 0.0f : mx_a;
				float mu_b = mx_b == -INFINITY ? 0.0f : mx_b;
				float al_a = exp2f(m_a - mu_a), al_b = exp2f(m_b - mu_b);
				float su_a = 0, su_b = 0;

				m_a = mx_a;
				m_b = mx_b;
#pragma unroll
				for (int j = 0; j < TILE / 8; j++) {
					sc[j][0] = exp2f(sc[j][0] - mu_a);
					sc[j][1] = exp2f(sc[j][1] - mu_a);
					sc[j][2] = exp2f(sc[j][2] - mu_b);
					sc[j][3] = exp2f(sc[j][3] - mu_b);
					su_a += sc[j][0] + sc[j][1];
					su_b += sc[j][2] + sc[j][3];
				}
				l_a = l_a * al_a + su_a;
				l_b = l_b * al_b + su_b;
#pragma unroll
				for (int n = 0; n < NO; n++) {
					o[n][0] *= al_a;
					o[n][1] *= al_a;
					o[n][2] *= al_b;
					o[n][3] *= al_b;
				}
				/* O += P V: P's A fragments from S's C fragments;
				   V^T by ldmatrix.trans: matrix i = keys +(i&1)*8,
				   columns +(i>>1)*8 */
#pragma unroll
				for (int kk = 0; kk < TILE / 16; kk++) {
					uint32_t pa[4];

					pa[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
					pa[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
					pa[2] = pack2<T>(sc[2 * kk + 1][0],
					    sc[2 * kk + 1][1]);
					pa[3] = pack2<T>(sc[2 * kk + 1][2],
					    sc[2 * kk + 1][3]);
#pragma unroll
					for (int dp = 0; dp < HD / 16; dp++) {
						uint32_t r[4];
						int mi = lane >> 3;
						int key = kk * 16 + (lane & 7) + (mi & 1) * 8;
						int col = dp * 16 + (mi >> 1) * 8;

						ldsm_x4_t(r, vb_ + (uint32_t)((key * RS + col) *
						    2));
						mma16816<T>(o[2 * dp], pa, r[0], r[1]);
						mma16816<T>(o[2 * dp + 1], pa, r[2], r[3]);
					}
				}
			}
			__syncthreads(); /* buffer buf is refilled next */
		}
		/* the rows' sums over the quad's columns */
		l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
		l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
		l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
		l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
#pragma unroll
		for (int n = 0; n < NO; n++) {
			float xa[2] = {o[n][0], o[n][1]}, xb[2] = {o[n][2], o[n][3]};

			if (va < it.nv)
				attn_store(&a, &it, va, HD, n * 8 + 2 * t4, xa, 2,
				    m_a, l_a, n == 0 && t4 == 0);
			if (vb < it.nv)
				attn_store(&a, &it, vb, HD, n * 8 + 2 * t4, xb, 2,
				    m_b, l_b, n == 0 && t4 == 0);
		}
	}
}

template <int HD, int T>
static int
launch(const struct attn_args *a, unsigned grid, cudaStream_t stream)
{
	size_t smem = (size_t)4 * TILE * (HD + 8) * 2;
	static int dev_set = -1; /* the device the limit was raised on */
	int rc;

	/* over 48 KB of dynamic shared memory */
	if ((rc = attn_smem_limit((const void *)mma_kernel<HD, T>, smem,
	         &dev_set)) != 0)
		return rc;
	MEDHA_LAUNCH(MEDHA_KERNEL2(mma_kernel, HD, T), grid, MMA_THREADS, smem,
	    stream)(*a);
	return launch_status();
}

int
attn_mma_launch(const struct attn_args *a, unsigned grid, cudaStream_t stream)
{
	if (a->kv.head_dim == 64)
		return a->kv.kv_type == MEDHA_K_BF16 ?
		    launch<64, MEDHA_K_BF16>(a, grid, stream) :
		    launch<64, MEDHA_K_F16>(a, grid, stream);
	if (a->kv.head_dim != 128) /* > ATTN_MMA_MAX_HD: never planned here */
		return cudaErrorInvalidValue;
	return a->kv.kv_type == MEDHA_K_BF16 ?
	    launch<128, MEDHA_K_BF16>(a, grid, stream) :
	    launch<128, MEDHA_K_F16>(a, grid, stream);
}

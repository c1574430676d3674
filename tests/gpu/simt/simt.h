/*
 * simt.h: what the kernels (kernels/NAME.cu) need to compile as host
 * C++ and run on the SIMT emulator (simt.cc). The Makefile's simt
 * target force-includes it (g++ -x c++ -include simt.h -DMEDHA_SIMT)
 * into each kernel source, unchanged: the kernels write launches and
 * shared memory with kernels/common.cuh's macros, which this header
 * defines first: MEDHA_LAUNCH(k, g, b, sm, st)(args) is
 * simt_launch(k, g, b, sm, st)(args), MEDHA_DYN_SMEM(T, x, al) a
 * pointer to the block's dynamic shared memory, and MEDHA_SHARED(T, x,
 * n) a static array followed by simt_shared_fresh(x, sizeof(x)).
 *
 * A block's threads run as coroutines on one host thread; each runs
 * until it reaches __syncthreads or a warp collective (shuffles, mma,
 * ldmatrix), where it waits until its block (or its warp) has all
 * arrived, so the device code runs as written, thread by thread.
 * __shared__ variables become function statics: blocks run one after
 * another, so a static is one block's shared memory at a time.
 * threadIdx is the running coroutine's; blockIdx, blockDim, gridDim the
 * block's.
 */
#ifndef MEDHA_SIMT_H
#define MEDHA_SIMT_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

#undef __shared__
#define __shared__ static
/* kernels/common.cuh's launch and shared-memory macros, the emulator's
   way (simt_launch, simt_dyn_smem and simt_shared_fresh below) */
#define MEDHA_LAUNCH(k, g, b, sm, st) simt_launch(k, g, b, sm, st)
#define MEDHA_DYN_SMEM(T, name, al) T *name = (T *)simt_dyn_smem()
#define MEDHA_SHARED(T, name, n)                                          \
	__shared__ T name[n];                                               \
	simt_shared_fresh(name, sizeof(name))
#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)

/* the running thread's index, the block's */
extern uint3 *simt_tidp;
extern uint3 simt_block_idx;
extern dim3 simt_block_dim, simt_grid_dim;
#define threadIdx (*simt_tidp)
#define blockIdx simt_block_idx
#define blockDim simt_block_dim
#define gridDim simt_grid_dim

/* f32 arithmetic with its rounding named (the host's is to nearest) */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }

/* atomicAdd on an int (moe.cu's sort): a block's threads run one at a
   time between the points where they wait, and blocks one after
   another, so a read and a write in a row are atomic here */
static inline int
atomicAdd(int *p, int v)
{
	int o = *p;

	*p = o + v;
	return o;
}

/* ---- synchronisation and warp collectives (simt.cc) ---- */

void simt_syncthreads(void);
#define __syncthreads() simt_syncthreads()

/* mode 0: __shfl_sync (src a lane), 1: __shfl_xor_sync (src a mask) */
uint64_t simt_shfl(unsigned mask, uint64_t v, int src, int width, int mode);

template <typename F>
static inline F
simt_shfl_t(unsigned mask, F v, int src, int width, int mode)
{
	uint64_t u = 0;
	F r;

	static_assert(sizeof(F) <= 8, "shuffle of more than 8 bytes");
	memcpy(&u, &v, sizeof(F));
	u = simt_shfl(mask, u, src, width, mode);
	memcpy(&r, &u, sizeof(F));
	return r;
}

template <typename F>
static inline F
__shfl_sync(unsigned mask, F v, int src, int width = 32)
{
	return simt_shfl_t(mask, v, src, width, 0);
}

template <typename F>
static inline F
__shfl_xor_sync(unsigned mask, F v, int lane_mask, int width = 32)
{
	return simt_shfl_t(mask, v, lane_mask, width, 1);
}

/*
 * The PTX instructions of attn_mma.cu (its helpers call these under
 * MEDHA_SIMT), as the PTX ISA states them: mma.sync.aligned.m16n8k16
 * .row.col.f32.{bf16,f16}.{bf16,f16}.f32 (c += a b, this lane's
 * fragments), ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16,
 * cp.async.cg.shared.global 16 bytes with its commit and wait, and
 * cvt.rn.bf16x2.f32.
 */
void simt_mma16816(int bf16, float *c, const uint32_t *a, uint32_t b0,
    uint32_t b1);
void simt_ldsm_x4(uint32_t *r, uint32_t addr, int trans);
void simt_cp_async16(uint32_t dst, const void *src, int src_bytes);
void simt_cp_commit(void);
void simt_cp_wait(int n);
/* cvt.rn.bf16x2.f32 d, a, b: a rounded to bf16 (nearest, ties to even;
   a NaN the canonical 0x7fff) in d's upper half, b in its lower */
uint32_t simt_cvt_rn_bf16x2_f32(float a, float b);

/* the block's dynamic shared memory, and its 32-bit shared addresses;
   a static one's poisoning at its first declaration in a block */
void *simt_dyn_smem(void);
void simt_shared_fresh(void *p, size_t n);
uint32_t simt_shared_addr(const void *p);

static inline size_t
__cvta_generic_to_shared(const void *p)
{
	return simt_shared_addr(p);
}

/* ---- launches ---- */

/* the runtime's template for a kernel (cuda_runtime.h has it for nvcc
   alone) */
template <typename F>
static inline cudaError_t
cudaFuncSetAttribute(F *fn, enum cudaFuncAttribute a, int v)
{
	return cudaFuncSetAttribute((const void *)fn, a, v);
}

/*
 * Run body(ctx) as every thread of every block of grid (blocks in
 * order), smem bytes of dynamic shared memory each; fn names the
 * kernel (its cudaFuncSetAttribute limit).
 */
void simt_run_grid(const void *fn, dim3 grid, dim3 block, size_t smem,
    void (*body)(void *), void *ctx);

template <typename... P>
struct simt_launcher {
	void (*k)(P...);
	dim3 grid, block;
	size_t smem;

	/* the arguments converted to the kernel's parameters once, as a
	   launch copies them; each thread's call gets its own copies */
	template <typename... A>
	void
	operator()(A &&...a)
	{
		std::pair<void (*)(P...), std::tuple<P...>> c(k,
		    std::tuple<P...>(std::forward<A>(a)...));

		simt_run_grid((const void *)k, grid, block, smem,
		    [](void *x) {
			    auto *p = (std::pair<void (*)(P...),
			        std::tuple<P...>> *)x;
			    std::apply(p->first, p->second);
		    },
		    &c);
	}
};

template <typename... P>
static inline simt_launcher<P...>
simt_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem = 0,
    cudaStream_t stream = 0)
{
	(void)stream; /* launches run at once, in order */
	return simt_launcher<P...>{k, grid, block, smem};
}

/* what ran so far: launches, blocks, and each kind of collective */
extern "C" void simt_stats(char *buf, size_t len);
extern "C" long simt_bank_conflicts(void);

#endif

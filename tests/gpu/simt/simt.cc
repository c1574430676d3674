/*
 * simt.cc: the SIMT emulator behind simt.h, and the CUDA runtime calls
 * kernels/ and tests/gpu/kernels_test.c make, on host memory.
 *
 * A block's threads are coroutines on one host thread (simt_switch:
 * the callee-saved registers and the stack pointer, x86-64; glibc's
 * swapcontext makes a system call each switch, which was half the
 * run). The scheduler runs each runnable thread (in the order
 * SIMT_ORDER picks, run_block) until it waits at a warp collective or
 * __syncthreads; when a whole warp waits at the same collective it is
 * released, when the whole block waits at __syncthreads it is
 * released. Anything else (a warp whose lanes wait at different
 * collectives, a barrier some threads never reach) is a divergence the
 * GPU would hang on or make undefined: the emulator stops with a
 * message naming the block, the threads and what they wait at. Between
 * two waits a thread runs alone, so a missing barrier shows as a result
 * that moves with SIMT_ORDER.
 *
 * The collectives follow the PTX ISA (9.7.14.5.8 for the mma fragments,
 * 9.7.14.5.15 for ldmatrix), transcribed from its tables rather than
 * from the kernel: each lane deposits its operands in the warp's
 * exchange buffer and reads back what the instruction gives it.
 *
 * cp.async: the destination's 16 bytes are poisoned (0xff, a NaN in
 * both 16-bit types) when the copy is issued and written only when a
 * cp.async.wait_group of its thread says the group is complete, the
 * latest moment the ISA allows: a read before the wait (or before the
 * barrier after it) sees NaNs, and so does a warp still reading a
 * buffer that another warp refills too early.
 *
 * Shared memory is poisoned the same way at each block's start (the
 * dynamic, and each static array where the block first declares it).
 * Over 48 KB of dynamic shared memory needs the kernel's
 * cudaFuncSetAttribute first, as on the GPU, and at most 227 KB (an
 * H100's). ldmatrix's bank conflicts are counted (simt_bank_conflicts).
 *
 * What it cannot see: the tensor cores' own accumulation order and
 * rounding (f64 sums here), races between blocks of one launch beyond
 * what running them in reverse shows, warp-synchronous code that
 * relies on lanes running in step without a collective, timing.
 */
#include "simt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

uint3 *simt_tidp;
uint3 simt_block_idx;
dim3 simt_block_dim, simt_grid_dim;

enum { RUN, WAIT_WARP, WAIT_BLOCK, DONE };
enum { OP_SHFL_IDX, OP_SHFL_XOR, OP_MMA_BF16, OP_MMA_F16, OP_LDSM,
	OP_LDSM_T, N_OPS };
static const char *op_name[N_OPS] = {"__shfl_sync", "__shfl_xor_sync",
    "mma.m16n8k16.bf16", "mma.m16n8k16.f16", "ldmatrix.x4",
    "ldmatrix.x4.trans"};

#define SLOTW 8          /* 32-bit words a lane deposits at most */
#define STACK (256 << 10) /* a thread's stack */
#define MAX_THREADS 1024
#define SMEM_DEFAULT (48 << 10)
#define SMEM_MAX 232448 /* an H100's 227 KB */

struct copy { /* a cp.async in flight */
	uint32_t dst;
	const void *src;
	int bytes;
	long group; /* -1: not committed yet */
};

/*
 * Save the callee-saved registers, SSE and x87 control words on this
 * stack, store its pointer at *save, continue on the stack to (saved
 * the same way, or made by thread_stack).
 */
extern "C" void simt_switch(void **save, void *to);
asm(".text\n"
    ".globl simt_switch\n"
    ".type simt_switch, @function\n"
    "simt_switch:\n"
    "	pushq %rbp\n"
    "	pushq %rbx\n"
    "	pushq %r12\n"
    "	pushq %r13\n"
    "	pushq %r14\n"
    "	pushq %r15\n"
    "	subq $8, %rsp\n"
    "	stmxcsr (%rsp)\n"
    "	fnstcw 4(%rsp)\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	ldmxcsr (%rsp)\n"
    "	fldcw 4(%rsp)\n"
    "	addq $8, %rsp\n"
    "	popq %r15\n"
    "	popq %r14\n"
    "	popq %r13\n"
    "	popq %r12\n"
    "	popq %rbx\n"
    "	popq %rbp\n"
    "	ret\n"
    ".size simt_switch, .-simt_switch\n");

struct sthread {
	void *sp; /* its stack pointer while switched out */
	uint3 tid;
	int lane, warp, st, op;
	long wgen; /* collectives this thread has passed */
	long groups; /* cp.async groups committed */
	std::vector<copy> copies;
};

struct swarp {
	uint32_t buf[2][32][SLOTW];
	long built; /* the collective whose matrices are built */
	long banked; /* the ldmatrix whose banks are counted */
	float A[16][16], B[16][8];
};

static void *sched_sp;
static sthread *th, *cur;
static swarp *warps;
static int nth;
static char *stacks;
static unsigned char *smem;
static size_t smem_len;
static void (*g_body)(void *);
static void *g_ctx;
static std::map<const void *, int> smem_attr; /* cudaFuncSetAttribute */
static int sms = 4;
static long n_launch, n_block, n_bar, n_op[N_OPS];
static long n_ldsm_conflict; /* extra shared memory wavefronts */
static long n_block_run; /* blocks begun: which one a static belongs to */

static void __attribute__((noreturn, format(printf, 1, 2)))
fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "simt: block (%u,%u,%u)", simt_block_idx.x,
	    simt_block_idx.y, simt_block_idx.z);
	if (cur != NULL)
		fprintf(stderr, " thread %u", cur->tid.x);
	fprintf(stderr, ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

/* ---- the scheduler ---- */

static void
yield(void)
{
	simt_switch(&cur->sp, sched_sp);
}

/* a thread's first frame: the kernel, then back for good */
static void __attribute__((noreturn))
entry(void)
{
	g_body(g_ctx);
	if (!cur->copies.empty())
		fail("exits with %zu cp.async never waited for",
		    cur->copies.size());
	cur->st = DONE;
	simt_switch(&cur->sp, sched_sp);
	abort();
}

/*
 * A fresh stack whose first simt_switch "returns" into entry: from low
 * to high the control words, six zero registers, entry's address, and
 * a slot standing for entry's own return address (16-byte alignment as
 * a call leaves it).
 */
static void *
thread_stack(char *base, size_t len)
{
	uint64_t *top = (uint64_t *)(((uintptr_t)base + len) & ~(uintptr_t)15);
	uint64_t *sp = top - 9;
	uint32_t csr[2];

#if defined(__SANITIZE_ADDRESS__)
	/* a frame the last block left (entry's never returns) still
	   marked on the shadow */
	ASAN_UNPOISON_MEMORY_REGION(base + len - (32 << 10), 32 << 10);
#endif
	asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
	memset(sp, 0, 9 * 8);
	memcpy(sp, csr, 8);
	sp[7] = (uint64_t)(uintptr_t)entry;
	return sp;
}

static const char *
state_name(const sthread *t)
{
	switch (t->st) {
	case RUN:
		return "running";
	case WAIT_WARP:
		return op_name[t->op];
	case WAIT_BLOCK:
		return "__syncthreads";
	}
	return "exited";
}

/* every thread waits or is done, and nothing can be released */
static void __attribute__((noreturn))
stuck(void)
{
	cur = NULL;
	fprintf(stderr, "simt: block (%u,%u,%u): threads wait at different "
	    "points (divergence):\n", simt_block_idx.x, simt_block_idx.y,
	    simt_block_idx.z);
	for (int i = 0; i < nth;) {
		int j = i;

		while (j + 1 < nth && th[j + 1].st == th[i].st &&
		    (th[i].st != WAIT_WARP || th[j + 1].op == th[i].op))
			j++;
		fprintf(stderr, "  threads %d-%d: %s\n", i, j, state_name(&th[i]));
		i = j + 1;
	}
	exit(2);
}

/* lanes of warp w that can run, each until it waits or exits */
static void
run_warp(int w, int rev)
{
	for (int k = 0; k < 32; k++) {
		sthread *t = &th[w * 32 + (rev ? 31 - k : k)];

		if (t->st != RUN)
			continue;
		cur = t;
		simt_tidp = &t->tid;
		simt_switch(&sched_sp, t->sp);
	}
	cur = NULL;
}

/* release warp w if its 32 lanes wait at the same collective */
static int
try_warp(int w)
{
	sthread *l = &th[w * 32];

	for (int k = 0; k < 32; k++)
		if (l[k].st != WAIT_WARP || l[k].op != l[0].op ||
		    l[k].wgen != l[0].wgen)
			return 0;
	for (int k = 0; k < 32; k++)
		l[k].st = RUN;
	n_op[l[0].op]++;
	return 1;
}

/*
 * SIMT_ORDER: fwd (the default) runs every thread in order to its next
 * wait, then releases the warps that can go; rev the same in reverse
 * (and the blocks of a grid from the last);
 * warp and warprev run each warp (in order, or the last first) as far
 * as it goes alone, to a __syncthreads or its end, before the next
 * starts. Between barriers the threads of a correct kernel touch
 * nothing another reads, so every order gives the same bits.
 */
static void
run_block(void)
{
	const char *o = getenv("SIMT_ORDER");
	int rev = o != NULL && (!strcmp(o, "rev") || !strcmp(o, "warprev"));
	int eager = o != NULL && !strncmp(o, "warp", 4), nw = nth / 32;

	for (int i = 0; i < nth; i++) {
		sthread *t = &th[i];

		t->tid = make_uint3(i % simt_block_dim.x,
		    i / simt_block_dim.x % simt_block_dim.y,
		    i / (simt_block_dim.x * simt_block_dim.y));
		t->lane = i & 31;
		t->warp = i >> 5;
		t->st = RUN;
		t->wgen = 0;
		t->groups = 0;
		t->copies.clear();
		t->sp = thread_stack(stacks + (size_t)i * STACK, STACK);
	}
	for (int w = 0; w < nw; w++)
		warps[w].built = warps[w].banked = -1;
	for (;;) {
		int done = 0, at_bar = 0, released = 0;

		for (int k = 0; k < nw; k++) {
			int w = rev ? nw - 1 - k : k;

			run_warp(w, rev && !eager);
			while (eager && try_warp(w)) {
				released++;
				run_warp(w, 0);
			}
		}
		for (int w = 0; !eager && w < nw; w++)
			released += try_warp(w);
		for (int i = 0; i < nth; i++) {
			done += th[i].st == DONE;
			at_bar += th[i].st == WAIT_BLOCK;
		}
		if (done == nth)
			return;
		if (released)
			continue;
		if (at_bar == nth) {
			n_bar++;
			for (int i = 0; i < nth; i++)
				th[i].st = RUN;
			continue;
		}
		stuck();
	}
}

static long n_cvt; /* cvt.rn.bf16x2.f32 instructions run */

/* extra passes of the ldmatrix instructions so far (0: every 8x8
   matrix read in one pass, as attn_mma.cu's padded rows promise) */
extern "C" long
simt_bank_conflicts(void)
{
	return n_ldsm_conflict;
}

extern "C" void
simt_stats(char *buf, size_t len)
{
	snprintf(buf, len, "%ld launches, %ld blocks, %ld __syncthreads, "
	    "warp collectives: %ld shfl, %ld mma, %ld ldmatrix (%ld bank "
	    "conflicts); %ld cvt.rn.bf16x2", n_launch, n_block, n_bar,
	    n_op[OP_SHFL_IDX] + n_op[OP_SHFL_XOR],
	    n_op[OP_MMA_BF16] + n_op[OP_MMA_F16],
	    n_op[OP_LDSM] + n_op[OP_LDSM_T], n_ldsm_conflict, n_cvt);
}

void
simt_run_grid(const void *fn, dim3 grid, dim3 block, size_t sm,
    void (*body)(void *), void *ctx)
{
	size_t limit = SMEM_DEFAULT;

	if (smem_attr.count(fn))
		limit = (size_t)smem_attr[fn];
	nth = (int)(block.x * block.y * block.z);
	if (nth < 1 || nth > MAX_THREADS || nth % 32 != 0)
		fail("a block of %d threads (the emulator takes whole warps, "
		    "at most %d)", nth, MAX_THREADS);
	if (grid.x < 1 || grid.y < 1 || grid.z < 1)
		fail("an empty grid (%u,%u,%u)", grid.x, grid.y, grid.z);
	if (sm > limit)
		fail("%zu bytes of dynamic shared memory over the kernel's "
		    "limit %zu (cudaFuncSetAttribute)", sm, limit);
	if (stacks == NULL) {
		stacks = (char *)mmap(NULL, (size_t)MAX_THREADS * STACK,
		    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
		    MAP_NORESERVE, -1, 0);
		if (stacks == MAP_FAILED)
			fail("mmap of the stacks");
		th = new sthread[MAX_THREADS];
		warps = new swarp[MAX_THREADS / 32];
		smem = (unsigned char *)aligned_alloc(128, SMEM_MAX);
	}
	smem_len = sm;
	g_body = body;
	g_ctx = ctx;
	simt_block_dim = block;
	simt_grid_dim = grid;
	n_launch++;
	n_block += (long)grid.x * grid.y * grid.z;
	/* blocks in order; SIMT_ORDER=rev the last first (a block that
	   reads what another of the same launch writes then reads it
	   unwritten) */
	long nb = (long)grid.x * grid.y * grid.z;
	const char *o = getenv("SIMT_ORDER");
	int rev = o != NULL && !strcmp(o, "rev");

	for (long k = 0; k < nb; k++) {
		long b = rev ? nb - 1 - k : k;

		simt_block_idx = make_uint3((unsigned)(b % grid.x),
		    (unsigned)(b / grid.x % grid.y),
		    (unsigned)(b / ((long)grid.x * grid.y)));
		memset(smem, 0xff, sm);
		n_block_run++;
		run_block();
	}
}

void
simt_syncthreads(void)
{
	cur->st = WAIT_BLOCK;
	yield();
}

/*
 * This lane's n words into the warp's exchange buffer; back when the
 * whole warp has arrived at the same collective, with every lane's
 * words. Two buffers by parity: a lane writes the other one at its next
 * collective, and can write this one again only after the whole warp
 * has arrived there, so after every lane has read this one.
 */
static uint32_t (*exchange(int op, const uint32_t *in, int n))[SLOTW]
{
	sthread *t = cur;
	swarp *w = &warps[t->warp];
	int par = (int)(t->wgen & 1);

	memcpy(w->buf[par][t->lane], in, (size_t)n * 4);
	t->op = op;
	t->st = WAIT_WARP;
	yield();
	t->wgen++;
	return w->buf[par];
}

uint64_t
simt_shfl(unsigned mask, uint64_t v, int src, int width, int mode)
{
	uint32_t in[2] = {(uint32_t)v, (uint32_t)(v >> 32)};
	int lane = cur->lane, s;

	if (mask != 0xffffffffu)
		fail("%s with mask %#x (the kernels shuffle whole warps)",
		    op_name[mode ? OP_SHFL_XOR : OP_SHFL_IDX], mask);
	if (width != 32)
		fail("a shuffle of width %d", width);
	uint32_t (*all)[SLOTW] = exchange(mode ? OP_SHFL_XOR : OP_SHFL_IDX,
	    in, 2);
	/* PTX shfl.sync.idx: lane src % 32; .bfly: lane ^ mask (in range
	   for a mask below 32: else the lane's own value) */
	s = mode ? lane ^ src : src & 31;
	if (s < 0 || s > 31)
		s = lane;
	return all[s][0] | (uint64_t)all[s][1] << 32;
}

/* ---- mma.m16n8k16, ldmatrix, cp.async ---- */

static float
h16(uint32_t reg, int half, int bf16)
{
	uint16_t b = (uint16_t)(half ? reg >> 16 : reg);

	if (bf16) {
		uint32_t u = (uint32_t)b << 16;
		float f;

		memcpy(&f, &u, 4);
		return f;
	}
	return __half2float(__ushort_as_half(b));
}

/*
 * D = A B + C, A 16x16 (.row), B 16x8 (.col), f32 accumulators. The
 * fragments, PTX ISA "Matrix Fragments for mma.m16n8k16 with floating
 * point type" (groupID = lane >> 2, threadID_in_group = lane % 4):
 *  A: four .f16x2/.bf16x2 registers, elements a0..a7 low to high:
 *     row = groupID for ai, 0 <= i < 2 || 4 <= i < 6; groupID + 8
 *     otherwise; col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4
 *  B: two registers, b0..b3: row = threadID_in_group * 2 + (i & 1),
 *     + 8 for i >= 2; col = groupID
 *  C, D: four .f32, c0..c3: row = groupID for i < 2, groupID + 8
 *     otherwise; col = threadID_in_group * 2 + (i & 1)
 * The products of 16-bit values are exact in f32; they are summed in
 * f64 and rounded once (the tensor core's order and rounding are its
 * own: within the tests' tolerances either way).
 */
void
simt_mma16816(int bf16, float *c, const uint32_t *a, uint32_t b0,
    uint32_t b1)
{
	uint32_t in[6] = {a[0], a[1], a[2], a[3], b0, b1};
	long gen = cur->wgen;
	uint32_t (*all)[SLOTW] = exchange(bf16 ? OP_MMA_BF16 : OP_MMA_F16, in,
	    6);
	swarp *w = &warps[cur->warp];
	int g = cur->lane >> 2, t = cur->lane & 3;

	if (w->built != gen) { /* the first lane back builds A and B */
		for (int L = 0; L < 32; L++) {
			int lg = L >> 2, lt = L & 3;

			for (int i = 0; i < 8; i++) {
				int row = (i < 2 || (i >= 4 && i < 6)) ? lg : lg + 8;
				int col = lt * 2 + (i & 1) + (i >= 4 ? 8 : 0);

				w->A[row][col] = h16(all[L][i / 2], i & 1, bf16);
			}
			for (int i = 0; i < 4; i++) {
				int row = lt * 2 + (i & 1) + (i >= 2 ? 8 : 0);

				w->B[row][lg] = h16(all[L][4 + i / 2], i & 1, bf16);
			}
		}
		w->built = gen;
	}
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
		double s = c[i];

		for (int k = 0; k < 16; k++)
			s += (double)w->A[row][k] * w->B[k][col];
		c[i] = (float)s;
	}
}

static void
smem_check(uint32_t addr, int bytes, int align, const char *what)
{
	if (addr % (uint32_t)align != 0)
		fail("%s at shared address %#x, not %d-byte aligned", what, addr,
		    align);
	if ((size_t)addr + (size_t)bytes > smem_len)
		fail("%s at shared address %#x + %d past the block's %zu bytes "
		    "of dynamic shared memory", what, addr, bytes, smem_len);
}

static uint16_t
smem16(uint32_t addr)
{
	uint16_t v;

	memcpy(&v, smem + addr, 2);
	return v;
}

/*
 * ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (PTX ISA, "Warp-
 * level matrix load instruction: ldmatrix"): four 8x8 matrices of
 * 16-bit elements; threads 8i..8i+7 give the addresses of rows 0..7 of
 * matrix i (each row 16 contiguous, 16-byte aligned bytes), and
 * register r[i] of each thread receives a fragment of matrix i: a group
 * of four threads holds one row, thread lane the elements (row lane /
 * 4, columns 2 (lane % 4) and 2 (lane % 4) + 1), lower column in the
 * lower half. With .trans the matrix is read column-major: thread lane
 * gets the elements (rows 2 (lane % 4) and 2 (lane % 4) + 1, column
 * lane / 4) of the matrix as stored.
 */
void
simt_ldsm_x4(uint32_t *r, uint32_t addr, int trans)
{
	uint32_t (*all)[SLOTW];
	int lane = cur->lane;

	long gen = cur->wgen;
	swarp *w = &warps[cur->warp];

	smem_check(addr, 16, 16, trans ? "ldmatrix.trans row" : "ldmatrix row");
	all = exchange(trans ? OP_LDSM_T : OP_LDSM, &addr, 1);
	/* each matrix is one pass over the 32 four-byte banks: its 8 rows
	   of 16 bytes in distinct banks, or extra passes (bank conflicts) */
	if (w->banked != gen) {
		for (int i = 0; i < 4; i++) {
			int hits[32] = {0}, most = 0;

			for (int r = 0; r < 8; r++)
				for (int k = 0; k < 4; k++) {
					int b = (int)((all[8 * i + r][0] / 4 + k) % 32);

					if (++hits[b] > most)
						most = hits[b];
				}
			n_ldsm_conflict += most - 1;
		}
		w->banked = gen;
	}
	for (int i = 0; i < 4; i++) {
		uint32_t lo, hi;

		if (!trans) {
			uint32_t row = all[8 * i + (lane >> 2)][0];

			lo = smem16(row + (uint32_t)(lane & 3) * 4);
			hi = smem16(row + (uint32_t)(lane & 3) * 4 + 2);
		} else {
			int rr = (lane & 3) * 2;

			lo = smem16(all[8 * i + rr][0] + (uint32_t)(lane >> 2) * 2);
			hi = smem16(all[8 * i + rr + 1][0] +
			    (uint32_t)(lane >> 2) * 2);
		}
		r[i] = lo | hi << 16;
	}
}

/*
 * cp.async.cg.shared.global [dst], [src], 16, src_bytes: src_bytes of
 * src, the rest of the 16 zeros; both addresses 16-byte aligned. The
 * copy lands at the wait (above).
 */
void
simt_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
	smem_check(dst, 16, 16, "cp.async destination");
	if (src_bytes < 0 || src_bytes > 16)
		fail("cp.async of %d source bytes", src_bytes);
	if (src_bytes > 0 && (uintptr_t)src % 16 != 0)
		fail("cp.async from %p, not 16-byte aligned", src);
	memset(smem + dst, 0xff, 16);
	cur->copies.push_back(copy{dst, src, src_bytes, -1});
}

void
simt_cp_commit(void)
{
	for (copy &c : cur->copies)
		if (c.group < 0)
			c.group = cur->groups;
	cur->groups++;
}

/* cp.async.wait_group n: all but the n most recent committed groups of
   this thread complete */
void
simt_cp_wait(int n)
{
	std::vector<copy> left;

	for (copy &c : cur->copies) {
		if (c.group >= 0 && c.group < cur->groups - n) {
			memset(smem + c.dst, 0, 16);
			memcpy(smem + c.dst, c.src, (size_t)c.bytes);
		} else {
			left.push_back(c);
		}
	}
	cur->copies.swap(left);
}

/* cvt.rn.bf16x2.f32's rounding of one f32: the two bf16 around it
   (its upper half, and the next one away from zero), the nearer taken,
   on a tie the one whose last bit is 0; a NaN is the canonical 0x7fff
   (the PTX ISA's cvt), an infinity stays one */

static uint16_t
cvt_rn_bf16(float f)
{
	uint32_t u, dn, up;
	float fd, fu;
	double du, e_dn, e_up;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fff;
	dn = u & 0xffff0000u;
	if (dn == u)
		return (uint16_t)(u >> 16);
	up = dn + 0x10000u; /* larger magnitude, same sign; may be inf */
	memcpy(&fd, &dn, 4);
	memcpy(&fu, &up, 4);
	/* past the largest finite: infinity counts as 2^128 */
	du = (up & 0x7fffffffu) == 0x7f800000u ? copysign(ldexp(1.0, 128), f)
	                                       : (double)fu;
	e_dn = fabs((double)f - (double)fd);
	e_up = fabs(du - (double)f);
	if (e_dn != e_up)
		return (uint16_t)((e_dn < e_up ? dn : up) >> 16);
	return (uint16_t)((dn >> 16 & 1) ? up >> 16 : dn >> 16);
}

uint32_t
simt_cvt_rn_bf16x2_f32(float a, float b)
{
	n_cvt++;
	return (uint32_t)cvt_rn_bf16(a) << 16 | cvt_rn_bf16(b);
}

/* a static __shared__ array's first use in a block: NaN bits, as shared
   memory holds what the last block left (simt.h's MEDHA_SHARED puts
   the call after each declaration) */
void
simt_shared_fresh(void *p, size_t n)
{
	static std::map<void *, long> seen;
	auto it = seen.find(p);

	if (it != seen.end() && it->second == n_block_run)
		return;
	seen[p] = n_block_run;
	memset(p, 0xff, n);
}

void *
simt_dyn_smem(void)
{
	return smem;
}

uint32_t
simt_shared_addr(const void *p)
{
	const unsigned char *q = (const unsigned char *)p;

	if (q < smem || q > smem + smem_len)
		fail("__cvta_generic_to_shared of %p, not dynamic shared memory",
		    p);
	return (uint32_t)(q - smem);
}

/* ---- the CUDA runtime, on host memory ---- */

extern "C" {

cudaError_t
cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}

cudaError_t
cudaGetDevice(int *d)
{
	*d = 0;
	return cudaSuccess;
}

/* SIMT_SMS multiprocessors (default 4: short contexts split) */
cudaError_t
cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d)
{
	(void)d;
	if (a != cudaDevAttrMultiProcessorCount)
		return cudaErrorInvalidValue;
	if (getenv("SIMT_SMS") != NULL)
		sms = atoi(getenv("SIMT_SMS"));
	*v = sms;
	return cudaSuccess;
}

cudaError_t
cudaFuncSetAttribute(const void *fn, enum cudaFuncAttribute a, int v)
{
	if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 ||
	    v > SMEM_MAX)
		return cudaErrorInvalidValue;
	smem_attr[fn] = v;
	return cudaSuccess;
}

cudaError_t
cudaGetLastError(void)
{
	return cudaSuccess; /* a fault stops the emulator */
}

cudaError_t
cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}

const char *
cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "error (simt)";
}

/* allocations poisoned with 0xff, as the tests poison outputs; exactly
   n bytes (AddressSanitizer, SIMT_SAN=1, sees a byte past them) */
cudaError_t
cudaMalloc(void **p, size_t n)
{
	if (posix_memalign(p, 256, n ? n : 1) != 0)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xff, n);
	return cudaSuccess;
}

cudaError_t
cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t
cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
	(void)k;
	memmove(d, s, n);
	return cudaSuccess;
}

cudaError_t
cudaMemset(void *d, int v, size_t n)
{
	memset(d, v, n);
	return cudaSuccess;
}

}

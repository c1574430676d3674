/*
 * attn.cuh: what the attention kernels share (attn.cu: the launcher,
 * the plan, the fold and the simple kernel; attn_mma.cu: the tensor-core
 * kernel).
 *
 * Work is cut per sequence into items of (kv head, split part, vector
 * tile), the vector tile fastest (the items that read the same keys run
 * side by side and share them through the L2). A sequence's query
 * "vectors" for one kv head are its (row, query head of the group)
 * pairs, row-major: vector v is row v / G, head kvh * G + v % G (G =
 * n_heads / n_kv_heads), so a decode of a GQA model is G vectors
 * against one stream of keys.
 *
 * The split (attn_split, below) is a function of the sequence's n_q,
 * kv_len and the SM count alone: the same sequence gives the same bits
 * in any batch.
 */
#ifndef MEDHA_KERNELS_ATTN_CUH
#define MEDHA_KERNELS_ATTN_CUH

#include "kv.cuh"

#define ATTN_SIMPLE_V 16   /* vectors of a simple item */
#define ATTN_SIMPLE_TILE 32 /* keys per tile of the simple kernel */
#define ATTN_MMA_V 64      /* vectors of an mma item (4 warps of 16) */
#define ATTN_MMA_TILE 64   /* keys per tile of the mma kernel */
#define ATTN_MIN_PART 256  /* fewest keys of a split part */
#define ATTN_MAX_VS 16     /* n_q * G up to this: the simple kernel */
#define ATTN_MMA_MAX_HD 128 /* larger head sizes (256): the simple kernel */

/* A sequence's plan, made on the device (plan_kernel) each call. */
struct attn_plan {
	int path;      /* 0: simple kernel, 1: mma kernel */
	int n_vt;      /* vector tiles per kv head */
	int ns;        /* split parts (1: no fold) */
	int chunk;     /* keys per part, a multiple of both tiles */
	int64_t item0[2]; /* items of each path before its own: its first
	                     item is item0[path] of that path's */
	int64_t part0; /* its first part row (ns > 1): part j's row r, head h
	                  is part row part0 + (j * n_q + r) * n_heads + h */
};

/* What a kernel needs, passed by value. */
struct attn_args {
	struct medha_k_kv_layer kv;
	struct medha_k_seqs s;
	const float *q;
	int qs;
	int n_heads, G;
	float scale_log2; /* scale * log2(e): scores in base 2; with a
	                     soft-cap, scale / cap (the tanh's argument) */
	float cap_log2;   /* soft-cap * log2(e), or 0: none */
	int window;       /* sliding window (0: none) */
	int chunk;        /* llama4's chunk (0: none) */
	uint16_t *out;
	float *out_f32;
	float *lse;
	const struct attn_plan *plan;
	const int64_t *totals; /* (2) items of each path */
	float *part_o;         /* (part rows, head_dim) */
	float *part_lse;       /* (part rows) */
};

/*
 * Split parts of a sequence of n_q rows and kv_len keys on a GPU of sms
 * multiprocessors: enough parts that its items fill the GPU about twice
 * over (its row tiles of 16 times the parts near 2 * sms), none shorter
 * than ATTN_MIN_PART keys; each part a whole number of tiles.
 */
static __host__ __device__ inline int
attn_split(int n_q, int64_t kv_len, int sms, int *chunk)
{
	int64_t t = (n_q + 15) / 16, ns, c, most;

	ns = (2 * (int64_t)sms + t - 1) / t;
	most = (kv_len + ATTN_MIN_PART - 1) / ATTN_MIN_PART;
	if (ns > most)
		ns = most;
	if (ns < 1)
		ns = 1;
	c = (kv_len + ns - 1) / ns;
	c = (c + ATTN_MMA_TILE - 1) / ATTN_MMA_TILE * ATTN_MMA_TILE;
	if (c < ATTN_MMA_TILE)
		c = ATTN_MMA_TILE;
	ns = (kv_len + c - 1) / c;
	*chunk = (int)(c > 0x40000000 ? 0x40000000 : c);
	return ns < 1 ? 1 : (int)ns;
}

/*
 * The sequence of item w of path p: the last whose item0[p] is at or
 * before w (a sequence of the other path has no items of p and the
 * item0[p] of the next, so the last of equals is the one with items).
 */
static __host__ __device__ __forceinline__ int
attn_item_seq(const struct attn_plan *plan, int n_seqs, int64_t w, int p)
{
	int lo = 0, hi = n_seqs - 1;

	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;

		if (plan[mid].item0[p] <= w)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/*
 * One item's extent: its sequence's keys [k_lo, k_hi) (cache slots),
 * its vectors [v0, v0 + nv) of nv_all, its kv head.
 */
struct attn_item {
	int seq, kvh, j, v0, nv;
	int64_t k_lo, k_hi;
};

static __host__ __device__ __forceinline__ struct attn_item
attn_item_of(const struct attn_args *a, const struct attn_plan *plan,
    int64_t w, int s, int vtile)
{
	struct attn_item it;
	const struct attn_plan *p = &plan[s];
	int64_t r = w - p->item0[p->path];
	int vt = (int)(r % p->n_vt), nv_all = a->s.n_q[s] * a->G;

	it.seq = s;
	it.j = (int)((r / p->n_vt) % p->ns);
	it.kvh = (int)(r / ((int64_t)p->n_vt * p->ns));
	it.v0 = vt * vtile;
	it.nv = nv_all - it.v0 < vtile ? nv_all - it.v0 : vtile;
	it.k_lo = (int64_t)it.j * p->chunk;
	it.k_hi = it.k_lo + p->chunk < a->s.kv_len[s] ?
	    it.k_lo + p->chunk : a->s.kv_len[s];
	return it;
}

/* the end (exclusive slot) of the keys vector v of item it may see */
static __host__ __device__ __forceinline__ int64_t
attn_limit(const struct attn_args *a, const struct attn_item *it, int v)
{
	int64_t lim;

	if (v < 0 || v >= it->nv)
		return it->k_lo;
	lim = a->s.pos[it->seq] + (it->v0 + v) / a->G + 1 -
	    a->s.kv_base[it->seq];
	if (lim > it->k_hi)
		lim = it->k_hi;
	return lim < it->k_lo ? it->k_lo : lim;
}

/* the first slot vector v of item it may see (its window's start, or
   its chunk's: the later of the two; both rise with v's position) */
static __host__ __device__ __forceinline__ int64_t
attn_lower(const struct attn_args *a, const struct attn_item *it, int v)
{
	int64_t p, lo = 0;

	if ((a->window <= 0 && a->chunk <= 0) || v < 0 || v >= it->nv)
		return it->k_lo;
	p = a->s.pos[it->seq] + (it->v0 + v) / a->G;
	if (a->window > 0)
		lo = p + 1 - a->window;
	if (a->chunk > 0 && p - p % a->chunk > lo)
		lo = p - p % a->chunk;
	lo -= a->s.kv_base[it->seq];
	return lo > it->k_lo ? lo : it->k_lo;
}

/* a score (base 2) as the soft-cap leaves it: cap tanh(s / cap), the
   division already in q's scale */
static __host__ __device__ __forceinline__ float
attn_cap(const struct attn_args *a, float s)
{
	return a->cap_log2 != 0.0f ? a->cap_log2 * tanhf(s) : s;
}

/*
 * Write vector v's result: acc / l (0 when l is 0), its lse (natural
 * log) from m and l in base 2, to out or the part rows. c0 is the first
 * of n consecutive columns in acc.
 */
static __host__ __device__ __forceinline__ void
attn_store(const struct attn_args *a, const struct attn_item *it, int v,
    int hd, int c0, const float *acc, int n, float m, float l, int lse_too)
{
	const struct attn_plan *p = &a->plan[it->seq];
	int r = (it->v0 + v) / a->G;
	int h = it->kvh * a->G + (it->v0 + v) % a->G;
	float inv = l > 0 ? 1.0f / l : 0.0f;
	float lse = l > 0 ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;

	if (p->ns > 1) {
		int64_t pr = p->part0 +
		    ((int64_t)it->j * a->s.n_q[it->seq] + r) * a->n_heads + h;

		for (int i = 0; i < n; i++)
			a->part_o[pr * hd + c0 + i] = acc[i] * inv;
		if (lse_too)
			a->part_lse[pr] = lse;
		return;
	}
	int64_t t = a->s.q_start[it->seq] + r;
	int64_t o = (t * a->n_heads + h) * hd + c0;
	if (a->out_f32 != NULL)
		for (int i = 0; i < n; i++)
			a->out_f32[o + i] = acc[i] * inv;
	else
		for (int i = 0; i < n; i++)
			a->out[o + i] = f32_bf16(acc[i] * inv);
	if (lse_too && a->lse != NULL)
		a->lse[t * a->n_heads + h] = lse;
}

/*
 * Each sequence's plan (plan_kernel's one thread, and attn_emulate):
 * path, tiles, parts, and the prefix sums numbering the items of each
 * path and the part rows; totals gets the items of each path.
 */
static __host__ __device__ inline void
attn_plan_all(struct attn_plan *plan, int64_t *totals,
    const struct medha_k_seqs *s, int G, int n_heads, int sms,
    int simple_only)
{
	int64_t items[2] = {0, 0}, parts = 0;

	for (int i = 0; i < s->n_seqs; i++) {
		struct attn_plan p;
		int nv = s->n_q[i] * G, chunk;

		p.path = simple_only || nv <= ATTN_MAX_VS ? 0 : 1;
		p.n_vt = (nv + (p.path ? ATTN_MMA_V : ATTN_SIMPLE_V) - 1) /
		    (p.path ? ATTN_MMA_V : ATTN_SIMPLE_V);
		p.ns = attn_split(s->n_q[i], s->kv_len[i], sms, &chunk);
		p.chunk = chunk;
		p.item0[0] = items[0];
		p.item0[1] = items[1];
		p.part0 = parts;
		items[p.path] += (int64_t)p.n_vt * p.ns * (n_heads / G);
		if (p.ns > 1)
			parts += (int64_t)p.ns * s->n_q[i] * n_heads;
		plan[i] = p;
	}
	totals[0] = items[0];
	totals[1] = items[1];
}

/*
 * The fold of batch row t, head h, columns c0, c0 + step, ... (a warp's
 * lanes; the host's emulation takes them all): a split sequence's parts,
 * in part order, into out (and lse, by the c0 == 0 caller): m = max
 * lse_j, w_j = e^(lse_j - m), out = sum w_j o_j / sum w_j, lse = m +
 * log sum w_j (medha_attn_merge's arithmetic).
 */
static __host__ __device__ inline void
attn_fold_one(const struct attn_args *a, int s, int t, int h, int hd,
    int c0, int step)
{
	const struct attn_plan *p = &a->plan[s];
	int r = t - a->s.q_start[s], nq = a->s.n_q[s];
	float m = -INFINITY, sum = 0;

	for (int j = 0; j < p->ns; j++)
		m = fmaxf(m, a->part_lse[p->part0 +
		                 ((int64_t)j * nq + r) * a->n_heads + h]);
	for (int j = 0; m != -INFINITY && j < p->ns; j++)
		sum += expf(a->part_lse[p->part0 +
		    ((int64_t)j * nq + r) * a->n_heads + h] - m);
	for (int c = c0; c < hd; c += step) {
		float acc = 0;

		for (int j = 0; m != -INFINITY && j < p->ns; j++) {
			int64_t pr = p->part0 +
			    ((int64_t)j * nq + r) * a->n_heads + h;
			float lj = a->part_lse[pr];

			if (lj != -INFINITY)
				acc += expf(lj - m) * a->part_o[pr * hd + c];
		}
		acc = m != -INFINITY ? acc / sum : 0.0f;
		int64_t o = ((int64_t)t * a->n_heads + h) * hd + c;
		if (a->out_f32 != NULL)
			a->out_f32[o] = acc;
		else
			a->out[o] = f32_bf16(acc);
	}
	if (c0 == 0 && a->lse != NULL)
		a->lse[(int64_t)t * a->n_heads + h] =
		    m != -INFINITY ? m + logf(sum) : -INFINITY;
}

/*
 * Test hooks (attn.cu; declared again by tests/gpu/kernels_test.c, not
 * part of kernels.h): the whole of medha_k_attn run on the host, every
 * pointer of a (the cache, the sequences' arrays, q, out, lse, work)
 * host memory, for a GPU of sms multiprocessors: the plan, each item
 * as its kernel cuts it (tiles, parts, limits, stores) in plain f32
 * arithmetic, and the fold, so that the cutting and folding are checked
 * where there is no GPU. 0 or cudaErrorInvalidValue.
 */
extern "C" size_t medha_k_attn_emulate_workspace(const struct medha_k_attn *a,
    int sms);
extern "C" int medha_k_attn_emulate(const struct medha_k_attn *a, int sms,
    int simple_only);

/*
 * A kernel's (fn's) dynamic shared memory over 48 KB: its limit raised
 * to smem on the current device, once per device (*dev_set: the device
 * it was last raised on; a race between threads raises it twice,
 * harmlessly). 0 or a cudaError_t.
 */
static inline int
attn_smem_limit(const void *fn, size_t smem, int *dev_set)
{
	int dev;
	cudaError_t e;

	if ((e = cudaGetDevice(&dev)) != cudaSuccess)
		return (int)e;
	if (dev != *dev_set) {
		e = cudaFuncSetAttribute(fn,
		    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		if (e != cudaSuccess)
			return (int)e;
		*dev_set = dev;
	}
	return 0;
}

/* attn_mma.cu: launch the tensor-core kernel (0 or a cudaError_t) */
int attn_mma_launch(const struct attn_args *a, unsigned grid,
    cudaStream_t stream);

#endif

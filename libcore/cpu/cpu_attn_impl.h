/*
 * cpu_attn_impl.h: what the three parts of the CPU attention share and
 * nothing else includes. cpu_attn.c runs an attention region (its tasks,
 * the split decodes' parts and their folding, the KVP merge);
 * cpu_attn_span.c holds the attention of one query over one span of
 * keys (attn_span) with its vector kernels; cpu_attn_compat.c holds
 * llama.cpp's order of the same (attn_query_compat). Internal names carry
 * an attn_ prefix; the public API is cpu/cpu.h.
 */
#ifndef MEDHA_CPU_ATTN_IMPL_H
#define MEDHA_CPU_ATTN_IMPL_H

#include "cpu/cpu.h"

#define ATTN_PART 256  /* keys per partition (a multiple of the KV block) */

/* One attention region (medha_attn_run): what its tasks read. */
struct attn_run {
	const struct medha_kvcache *kv;
	int layer;
	int n_heads;
	const struct medha_attn_seq *s;
	int ns;
	int *first; /* (ns + 1) first task of each sequence */
	float *scratch;
	size_t scratch_per;
	int64_t nk_max; /* longest key range */
	int *np;        /* (ns) partitions of a split sequence, or 0 */
	int *ffirst;    /* (ns + 1) first fold task of each sequence */
	size_t *poff;   /* (ns) where a split sequence's parts start */
	float *part;    /* the parts of the split sequences */
};

/*
 * Keys [lo, hi) (clipped to the query's own position) for query qi of s
 * and the query heads of kv head kvh: o (G, hd) normalized and lse (G),
 * in medha's order; scr is the thread's scratch (medha_attn_scratch
 * floats). cpu_attn_span.c.
 */
void attn_span(const struct attn_run *r, const struct medha_attn_seq *s,
    int kvh, int qi, int64_t lo, int64_t hi, float *scr, float *o,
    float *lse);

/*
 * Query qi of s against all its keys, for the query heads of kv head
 * kvh, in llama.cpp's order (opts.llama_compat): its output and lse
 * written into s; scr is the thread's scratch. cpu_attn_compat.c.
 */
void attn_query_compat(const struct attn_run *r,
    const struct medha_attn_seq *s, int kvh, int qi, float *scr);

#endif

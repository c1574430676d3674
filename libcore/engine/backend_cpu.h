/*
 * backend_cpu.h: the cpu backend behind the backend interface
 * (backend.h): a Llama model (model/model.h), its paged KV cache
 * (cpu/kvcache.h) and the CPU forward pass (cpu/cpu.h) on a pool of
 * threads, running any range of the model's layers. It is the reference
 * every other backend is checked against. The tokenizer is not part of
 * it: callers hand it token ids.
 *
 *	struct medha_backend *be;
 *	struct medha_backend_cpu_opts o = { .n_threads = 4,
 *	    .kv_type = MEDHA_KV_F16 };	(1 GiB of cache, 64 sequences)
 *	if (medha_backend_cpu_open(&be, "model.gguf", &o, why, sizeof(why)))
 *		errx(1, "%s", why);
 *	printf("%lld blocks of %d\n", (long long)be->info.n_blocks,
 *	    be->info.block_size);
 *	medha_backend_close(be);
 */
#ifndef MEDHA_BACKEND_CPU_H
#define MEDHA_BACKEND_CPU_H

#include "engine/backend.h"
#include "cpu/kvcache.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/*
 * KV cache bytes when neither kv_blocks nor kv_bytes is given: up to
 * 1 GiB (see kv_bytes).
 */
#define MEDHA_BACKEND_CPU_KV_BYTES ((size_t)1 << 30)

struct medha_backend_cpu_opts {
	int n_threads;     /* threads in all, the caller's included (1) */
	int max_seqs;      /* sequences at once (0: 64) */
	int64_t kv_blocks; /* KV blocks of MEDHA_KV_BLOCK positions (0: from
	                      kv_bytes) */
	size_t kv_bytes;   /* with kv_blocks 0: the cache's K/V bytes, as
	                      many whole blocks as fit (0: max_seqs full
	                      contexts (ctx_len, 4096 where the model does not
	                      say) but no more than MEDHA_BACKEND_CPU_KV_BYTES
	                      and no less than one context) */
	int kv_type;       /* MEDHA_KV_F32 (0) or MEDHA_KV_F16 */
	int ref;           /* f32 reference numerics (0; cpu/cpu.h) */
	int llama_compat;  /* llama.cpp's float order (0; cpu/cpu.h) */
	int layer_lo, layer_hi; /* the layers it runs (0, 0: all); the cache
	                           still holds every layer's K/V (with
	                           window_kv's table per layer, only theirs) */
	int spp, stage;         /* spp > 1: the layers of SPP stage `stage`
	                           (medha_stage_layers), not layer_lo/hi */
	int window_kv;          /* where the model has sliding-window layers:
	                           a KV table per layer, and the blocks of
	                           window layers that no query of a later
	                           batch sees given back (cpu/kvcache.h);
	                           info.caps then has MEDHA_BACKEND_WINDOW_KV.
	                           A fork from positions a window left is
	                           refused: for callers without prefix
	                           caching (0) */
	int tp, tp_rank;        /* tp > 1: TP rank tp_rank's share of the
	                           heads and weights (cpu/cpu.h); its cache
	                           holds its kv heads (medha_tp_share), as
	                           many blocks as rank 0's (the largest
	                           share) would from kv_bytes */
	int ep;                 /* the TP ranks split the experts whole
	                           (cpu/cpu.h EP) (0) */
};

/*
 * The cpu backend on model m (borrowed: it must outlive the backend),
 * with its own KV cache and thread pool; o may be NULL (defaults). On
 * success *be is the caller's, for medha_backend_close(). Returns 0,
 * MEDHA_EINVAL (options out of range, a cache smaller than one block),
 * MEDHA_EUNSUP or MEDHA_ENOMEM, with a reason in why; *be is NULL on
 * failure.
 */
int
medha_backend_cpu_init(struct medha_backend **be, const struct medha_model *m,
    const struct medha_backend_cpu_opts *o, char *why, size_t whylen);

/*
 * The same on the model in the GGUF file at path, which the backend
 * opens (mapped) and owns until medha_backend_close(). Also returns the
 * reader's and the loader's errors (MEDHA_EIO, MEDHA_EFORMAT,
 * MEDHA_ETRUNC, MEDHA_ENOTFOUND, MEDHA_EUNSUP), with a reason in why.
 */
int medha_backend_cpu_open(struct medha_backend **be, const char *path,
    const struct medha_backend_cpu_opts *o, char *why, size_t whylen);

#endif

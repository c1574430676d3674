/*
 * cuda.h: the GPU forward pass (issue 26; its own room since issue 38),
 * beside cpu/: a model on one NVIDIA GPU with cuBLASLt for the linear
 * layers (bf16 in, f32 accumulation), the kernels of kernels/ for the
 * rest, a paged KV cache in device memory, and NCCL for TP (or the
 * caller's collectives in host memory). engine/backend_cuda.c puts it
 * behind the backend interface (engine/backend.h); nothing here knows
 * that interface, and nothing outside this room (and tests/gpu) includes
 * CUDA's headers: this header names no CUDA type.
 *
 * Its state, in cuda_impl.h, is split by lifetime: the weights (read
 * only after the load), the KV cache, the scratch (grown to the largest
 * batch), the libraries (cuBLASLt's shapes, NCCL's communicator) and
 * the runtime (the call running, its timing, the decode graphs). Every
 * function returns 0 or a MEDHA_E* code with a reason in why; nothing
 * is left for a caller to find in a side field.
 *
 *	struct medha_cuda *cu;
 *	struct medha_cuda_opts o = {.nccl = 1};
 *	if (medha_cuda_open(&cu, model, &model->c, &o, why, sizeof(why)))
 *		...;
 *	struct medha_cuda_call f = {.b = &batch, .layer_hi = n_layers,
 *	    .logits = logits};
 *	if (medha_cuda_forward(cu, &f, why, sizeof(why)))
 *		...;
 *	medha_cuda_close(cu);
 *
 * Built only where nvcc is found (the Makefile's CUDA=1).
 */
#ifndef MEDHA_CUDA_H
#define MEDHA_CUDA_H

#include "medha.h"
#include "batch.h"
#include "model/model.h"
#include "model/sample.h"

#include <stddef.h>
#include <stdint.h>

struct medha_cuda; /* opaque: cuda_impl.h */

/* ---- devices ---- */

/* What a device is, from the runtime (no context is made). */
struct medha_cuda_device {
	char name[256];      /* "NVIDIA H200" */
	uint64_t mem_bytes;  /* its global memory */
	int cc_major, cc_minor; /* compute capability (9, 0) */
	int sms;             /* multiprocessors */
};

/*
 * The devices' count in *n: 0, or MEDHA_EUNSUP with "cuda: no CUDA
 * device: ..." in why (none, or no driver).
 */
int medha_cuda_devices(int *n, char *why, size_t whylen);

/* Device `index`'s description: 0, MEDHA_EUNSUP (no device) or
   MEDHA_EINVAL (no such index), with why. */
int medha_cuda_device(int index, struct medha_cuda_device *d, char *why,
    size_t whylen);

/* ---- opening ---- */

struct medha_cuda_opts {
	int device;        /* the CUDA device's index (0) */
	int spp, stage;    /* spp > 1: the layers of stage `stage` */
	int tp, tp_rank;   /* TP rank tp_rank of tp (1, 0) */
	int max_seqs;      /* sequences at once (0: 256) */
	int64_t kv_blocks; /* KV blocks (0: from mem_util) */
	int kv_type;       /* MEDHA_KV_F16 or MEDHA_KV_BF16 (0: bf16) */
	double mem_util;   /* share of the free memory at open (0: 0.9) */
	int nccl;          /* TP over NCCL of its own (1) or the caller's
	                      collectives in each call (0) */
	uint64_t seed;     /* random weights' seed (0: 1) */
};

/*
 * Open on model m (borrowed while it opens: its weights are copied to
 * the device) or, m NULL, on random bf16 weights of shape `shape`
 * generated on the GPU from o->seed. Refuses what its kernels cannot run
 * (medha_cuda_runnable) with MEDHA_EUNSUP, naming it. *cu is NULL on
 * failure.
 */
int medha_cuda_open(struct medha_cuda **cu, const struct medha_model *m,
    const struct medha_model_config *shape, const struct medha_cuda_opts *o,
    char *why, size_t whylen);
void medha_cuda_close(struct medha_cuda *cu);

/* 0, or MEDHA_EUNSUP with why naming what the kernels cannot run of a
 * model of this shape (a head size other than 64, 128 or 256; experts):
 * asked before a device is looked for or a weight read. */
int medha_cuda_runnable(const struct medha_model_config *mc, char *why,
    size_t whylen);

/* What it holds, once open. */
struct medha_cuda_info {
	struct medha_model_config c;
	int layer_lo, layer_hi;
	int64_t n_blocks;
	int max_seqs;
	int kv_type;
	int tp, tp_rank;
};
void medha_cuda_info(const struct medha_cuda *cu, struct medha_cuda_info *in);

/* ---- the collectives (host memory) ---- */

/*
 * The caller's collectives, as the backend interface's struct
 * medha_comm but in host memory only: all_gather (TP: all, tp * len
 * bytes, gets rank i's mine at all + i * len), all_reduce (TP: x the sum
 * of every rank's, in rank order; NULL: all_gather and a sum here) and
 * kvp_exchange (KVP: medha_kvp_exchange's contract: this group's rows of
 * out and lse, ro and rl floats a token, traded with the other groups
 * into *buf, each group's parts at at[g]). Any may be NULL where the
 * caller has none.
 */
struct medha_cuda_coll {
	int (*all_gather)(void *arg, int layer, int kind, const void *mine,
	    size_t len, void *all, char *why, size_t whylen);
	int (*all_reduce)(void *arg, int layer, int kind, float *x, size_t n,
	    char *why, size_t whylen);
	int (*kvp_exchange)(void *arg, int layer, const float *out,
	    const float *lse, size_t ro, size_t rl, float **buf, size_t *cap,
	    size_t *at, char *why, size_t whylen);
	int tp, tp_rank;
	int kvp, kvp_rank;
	void *arg;
};

/*
 * TP over NCCL: rank 0's id to every rank through co->all_gather, and
 * this rank's communicator made (nothing without NCCL or TP). Called
 * again with a new peer table, it drops the old communicator first.
 */
int medha_cuda_comm_init(struct medha_cuda *cu,
    const struct medha_cuda_coll *co, char *why, size_t whylen);

/* ---- a forward call ---- */

/* Where a timed call's time went (split 1 once measured). */
struct medha_cuda_times {
	double attn, merge, head;
	int split;
};

/* One call, as the backend interface's struct medha_cuda_call (backend.h says
   what each member means). */
struct medha_cuda_call {
	const struct medha_batch *b;
	int layer_lo, layer_hi;
	const float *h_in;
	float *h_out;
	float *logits;
	struct medha_sampler *const *samplers;
	int32_t *tokens;
	const struct medha_cuda_coll *coll; /* or NULL */
	const struct medha_batch_kv *kv;    /* or NULL */
	struct medha_cuda_times *times;     /* or NULL: not timed */
};

int medha_cuda_forward(struct medha_cuda *cu, const struct medha_cuda_call *f,
    char *why, size_t whylen);

/* ---- the sequences in its cache (kvblocks.h's tables) ---- */

int medha_cuda_seq_alloc(struct medha_cuda *cu, int *seq);
void medha_cuda_seq_free(struct medha_cuda *cu, int seq);
int64_t medha_cuda_seq_len(struct medha_cuda *cu, int seq);
int64_t medha_cuda_free_blocks(struct medha_cuda *cu);
int medha_cuda_seq_fill(struct medha_cuda *cu, int seq, int64_t n);
int medha_cuda_seq_fork(struct medha_cuda *cu, int dst, int src,
    int64_t from, int64_t to);
int medha_cuda_seq_trim(struct medha_cuda *cu, int seq, int64_t n);

#endif
